//! The `tickler` binary: parses arguments, sets up logging, calls the
//! library. Two commands are the binary's own, not the library's, because
//! no serving role uses them: [`bench`] (the benchmark harness behind
//! `tickler bench`) and [`demo`] (the README's demonstration client); they
//! reach the library only through its public API.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tickler::cli::admin::{self, ShardsCommand, TokenCommand};
use tickler::cli::{self, over_api};
use tickler::config::Config;

mod bench;
mod demo;

#[derive(Parser)]
#[command(
    name = "tickler",
    version,
    about = "A durable scheduler for delayed Kafka messages"
)]
struct Cli {
    /// TOML configuration file; TICKLER_* environment variables override it.
    #[arg(long, short, global = true, env = "TICKLER_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the configured roles (api, loader, dispatcher, reconciler,
    /// results, ingress; all by default) until SIGTERM or Ctrl-C.
    Serve,
    /// For a service's own tests: apply the schema, then run every
    /// configured role on a virtual clock that `POST /v1/dev/clock`
    /// `{"advance_ms": N}` moves forward (docs/testing-your-service.md).
    /// Give it a database of its own: it refuses to start beside a
    /// `tickler serve`, and `serve` beside it.
    Dev,
    /// Apply the database schema (idempotent).
    Migrate {
        /// Stop after this migration (e.g. 28): the first step of upgrading
        /// a live deployment (docs/upgrades.md).
        #[arg(long)]
        to: Option<u32>,
    },
    /// Print the settings in force — defaults, the file, then TICKLER_*
    /// variables — as JSON, with secrets masked.
    Config,
    /// Measure throughput, lateness, burst drain, Redis bytes per job and
    /// reconciler cost against the local services (see docs/benchmarks.md).
    Bench(bench::BenchArgs),
    /// Load jobs from a file — NDJSON (one create request per line, the
    /// API's fields) or CSV (a header row naming them) — with the API's
    /// checks, idempotent on (topic, key): a rerun resumes. Exit status 1
    /// when some lines were refused (`--rejects FILE` lists them).
    Import(tickler::cli::import::ImportArgs),
    /// Payload compression at rest: train a zstd dictionary on the
    /// newest payloads, see how the newest rows are stored.
    Compression {
        #[command(subcommand)]
        command: tickler::cli::compression::CompressionCommand,
    },
    /// Encryption at rest: generate a key, see which keys the jobs are
    /// sealed under, rotate them all to the active key.
    Keys {
        #[command(subcommand)]
        command: tickler::cli::keys::KeysCommand,
    },
    /// Manage API tokens (stored hashed in the api_tokens table).
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// See and change jobs through a running tickler's API: get, list,
    /// create, move, cancel, redrive, history, bulk. Exit status: 0 done,
    /// 1 refused by the API (its error code is printed), 2 usage, 3 API
    /// unreachable or failing.
    Jobs {
        #[command(flatten)]
        api: cli::ApiArgs,
        #[command(subcommand)]
        command: cli::jobs::JobsCommand,
    },
    /// Pause, resume and pace topics through a running tickler's API:
    /// list, get, pause, resume, pace. Exit status as for `jobs`.
    Topics {
        #[command(flatten)]
        api: cli::ApiArgs,
        #[command(subcommand)]
        command: cli::control::TopicsCommand,
    },
    /// Recurring schedules through a running tickler's API: list, get,
    /// create, pause, resume, delete, preview, audit. Exit status as for
    /// `jobs`.
    Schedules {
        #[command(flatten)]
        api: cli::ApiArgs,
        #[command(subcommand)]
        command: cli::control::SchedulesCommand,
    },
    /// What falls due, bucket by bucket, through a running tickler's API:
    /// pending jobs and the occurrences schedules will create. Exit status
    /// as for `jobs`.
    Forecast {
        #[command(flatten)]
        api: cli::ApiArgs,
        #[command(flatten)]
        args: cli::forecast::ForecastArgs,
    },
    /// The audit log: who changed the rules (tokens, topics, schedules,
    /// bulk operations, redrives, repairs, start-ups), newest first, through
    /// a running tickler's API (admin scope). Exit status as for `jobs`.
    Audit {
        #[command(flatten)]
        api: cli::ApiArgs,
        #[command(flatten)]
        args: cli::audit::AuditArgs,
    },
    /// Check MySQL, Redis and Kafka against each other and say what is
    /// wrong and how to fix it: pending jobs Redis lacks, Redis entries of
    /// jobs no longer pending, claims past their lease, records missing at
    /// their recorded Kafka position, the results consumer's lag, clocks
    /// apart. Exit status 1 when something is wrong.
    Doctor(cli::doctor::DoctorArgs),
    /// The instances sharing this database: alive or not, their roles, and
    /// the shards each holds.
    Instances,
    /// The deployment's shards (`tickler shards` shows who holds each).
    Shards {
        #[command(subcommand)]
        command: Option<ShardsCommand>,
    },
    /// Schedule a few jobs a few seconds ahead through the API of a running
    /// tickler and print them as they arrive on Kafka, with their lateness.
    Demo(demo::DemoArgs),
    /// Ask a health endpoint (for a container's HEALTHCHECK, where the
    /// image has no curl): exit 0 on a 2xx answer within 3 s, else 1.
    Probe {
        /// The endpoint (plain HTTP).
        #[arg(long, default_value = "http://127.0.0.1:8080/healthz")]
        url: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    // Fail points for the fault tests (FAILPOINTS), in builds with the
    // `failpoints` feature only.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = Cli::parse();
    // `serve` reads its configuration first: its traces are set up with
    // its logs. (A configuration that does not load is said again below.)
    let serving = matches!(cli.command, Command::Serve | Command::Dev)
        .then(|| Config::load(cli.config.as_deref()).ok())
        .flatten();
    let _traces = tickler::telemetry::subscriber_init(serving.as_ref().and_then(|config| {
        let endpoint = config.tracing.otlp_endpoint.as_deref()?;
        Some(tickler::telemetry::Export {
            endpoint,
            service_name: &config.tracing.service_name,
            every: Duration::from_millis(config.tracing.export_interval_ms),
        })
    }))
    .map_err(anyhow::Error::msg)?;
    run(cli.config.as_deref(), cli.command).await
}

/// The configuration, loaded: defaults, the file, then `TICKLER_*`; a
/// setting read under its flat name of before the sections is warned of
/// (on standard error for `tickler config`, whose standard output is the
/// configuration's JSON).
fn settings(path: Option<&std::path::Path>, to_stderr: bool) -> anyhow::Result<Config> {
    let config = Config::load(path)?;
    for (old, new) in &config.renamed {
        if to_stderr {
            eprintln!("warning: {old} is now {new}; the old name is read until the next release");
        } else {
            tracing::warn!(old = %old, new = %new, "a setting's flat name of before the sections is read as its new name, until the next release: rename it");
        }
    }
    Ok(config)
}

/// Runs one subcommand: those over the API need no configuration, the
/// others read it first.
///
/// Long because it is a dispatch table: one short arm per subcommand.
async fn run(path: Option<&std::path::Path>, command: Command) -> anyhow::Result<ExitCode> {
    let config = || settings(path, false);
    match command {
        Command::Probe { url } => return Ok(cli::probe(&url).await),
        Command::Jobs { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                cli::jobs::run(&client, command, json).await
            })
            .await)
        }
        Command::Topics { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                cli::control::topics(&client, command, json).await
            })
            .await)
        }
        Command::Schedules { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                cli::control::schedules(&client, command, json).await
            })
            .await)
        }
        Command::Forecast { api, args } => {
            return Ok(over_api(api, |client, json| async move {
                cli::forecast::run(&client, args, json).await
            })
            .await)
        }
        Command::Audit { api, args } => {
            return Ok(over_api(api, |client, json| async move {
                cli::audit::run(&client, args, json).await
            })
            .await)
        }
        Command::Config => {
            let config = settings(path, true)?;
            let mut shown =
                serde_json::to_value(config.masked()).context("printing the configuration")?;
            // What `tzdata.path` holds now: what an instance started now
            // would resolve local times with.
            shown["tzdata_release"] = tickler::roles::tzdata::describe(
                &tickler::roles::tzdata::TzdataConfig::from_config(&config),
            );
            println!(
                "{}",
                serde_json::to_string_pretty(&shown).context("printing the configuration")?
            )
        }
        Command::Migrate { to } => admin::migrate(&config()?, to)
            .await
            .context("migrating the database")?,
        Command::Serve => served("tickler serve", tickler::app::serve(config()?).await),
        Command::Dev => served("tickler dev", tickler::app::dev(config()?).await),
        Command::Bench(args) => bench::run(&config()?, args.options()).await?,
        Command::Token { command } => admin::token(&config()?, command).await?,
        Command::Import(args) => return tickler::cli::import::run(&config()?, args).await,
        Command::Keys { command } => tickler::cli::keys::run(&config()?, command).await?,
        Command::Compression { command } => {
            tickler::cli::compression::run(&config()?, command).await?
        }
        Command::Instances => admin::instances(&config()?).await?,
        Command::Doctor(args) => return cli::doctor::run(config()?, args).await,
        Command::Shards { command } => admin::shards(&config()?, command).await?,
        Command::Demo(args) => {
            demo::run(&config()?, &args.topic, args.jobs, args.token.as_deref()).await?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How `tickler serve` or `tickler dev` ended: an error exits 1 at once (a
/// task stuck in a blocking call would hold up the runtime's orderly end).
fn served<E: std::error::Error + Send + Sync + 'static>(what: &'static str, ended: Result<(), E>) {
    if let Err(err) = ended {
        eprintln!("Error: {:#}", anyhow::Error::new(err).context(what));
        std::process::exit(1);
    }
}
