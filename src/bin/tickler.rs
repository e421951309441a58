//! The `tickler` binary: parses arguments, sets up logging, calls the
//! library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tickler::cli::admin::{self, ShardsCommand, TokenCommand};
use tickler::config::Config;
use tickler::store::Store;
use tokio_util::sync::CancellationToken;

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
    /// results; all by default) until SIGTERM or Ctrl-C.
    Serve,
    /// Apply the database schema (idempotent).
    Migrate,
    /// Print the settings in force — defaults, the file, then TICKLER_*
    /// variables — as JSON, with secrets masked.
    Config,
    /// Measure throughput, lateness, burst drain, Redis bytes per job and
    /// reconciler cost against the local services (see docs/benchmarks.md).
    Bench {
        /// Seconds-long run that checks every job arrives (for CI).
        #[arg(long)]
        smoke: bool,
        /// Jobs per second in the lateness stage.
        #[arg(long)]
        rate: Option<u64>,
        /// Seconds of the lateness stage.
        #[arg(long)]
        lateness_secs: Option<u64>,
        /// Jobs due at one instant in the burst stage.
        #[arg(long)]
        burst: Option<u64>,
        /// Far-future pending rows for the reconciler stage.
        #[arg(long)]
        far_rows: Option<u64>,
        /// Window rows to re-index in the reconciler stage.
        #[arg(long)]
        window_rows: Option<u64>,
        /// Concurrent API clients.
        #[arg(long)]
        clients: Option<usize>,
        /// Most `tickler serve` processes in the instances stage (1 to N;
        /// 0 skips the stage).
        #[arg(long)]
        instances: Option<usize>,
        /// Run only the instances stage.
        #[arg(long)]
        only_instances: bool,
        /// Run only these stages (comma-separated: schedule, floor,
        /// lateness, isolation, burst, results, redis, reconcile, instances).
        #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(tickler::bench::STAGES))]
        stages: Option<Vec<String>>,
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
        api: tickler::cli::ApiArgs,
        #[command(subcommand)]
        command: tickler::cli::jobs::JobsCommand,
    },
    /// Pause, resume and pace topics through a running tickler's API:
    /// list, get, pause, resume, pace. Exit status as for `jobs`.
    Topics {
        #[command(flatten)]
        api: tickler::cli::ApiArgs,
        #[command(subcommand)]
        command: tickler::cli::control::TopicsCommand,
    },
    /// Recurring schedules through a running tickler's API: list, get,
    /// create, pause, resume, delete, preview. Exit status as for `jobs`.
    Schedules {
        #[command(flatten)]
        api: tickler::cli::ApiArgs,
        #[command(subcommand)]
        command: tickler::cli::control::SchedulesCommand,
    },
    /// Check MySQL, Redis and Kafka against each other and say what is
    /// wrong and how to fix it: pending jobs Redis lacks, Redis entries of
    /// jobs no longer pending, claims past their lease, records missing at
    /// their recorded Kafka position, the results consumer's lag, clocks
    /// apart. Exit status 1 when something is wrong.
    Doctor {
        /// Apply the safe fixes (index what Redis lacks, drop stale
        /// entries, rescue expired claims), then check again.
        #[arg(long)]
        repair: bool,
        /// The findings as JSON.
        #[arg(long)]
        json: bool,
    },
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
    Demo {
        /// How many jobs to schedule.
        #[arg(long, default_value_t = 5)]
        jobs: u32,
        /// Topic to schedule them on (created if missing).
        #[arg(long, default_value = "tickler.demo")]
        topic: String,
        /// API token secret (tickler token create ... --scope write).
        #[arg(long, env = "TICKLER_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TICKLER_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let cli = match cli.command {
        Command::Jobs { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                tickler::cli::jobs::run(&client, command, json).await
            })
            .await)
        }
        Command::Topics { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                tickler::cli::control::topics(&client, command, json).await
            })
            .await)
        }
        Command::Schedules { api, command } => {
            return Ok(over_api(api, |client, json| async move {
                tickler::cli::control::schedules(&client, command, json).await
            })
            .await)
        }
        command => Cli { command, ..cli },
    };
    let config = Config::load(cli.config.as_deref())?;

    match cli.command {
        Command::Config => {
            println!(
                "{}",
                serde_json::to_string_pretty(&config.masked())
                    .context("printing the configuration")?
            );
        }
        Command::Migrate => {
            let applied = Store::migrate(&config.mysql_url)
                .await
                .context("migrating the database")?;
            if applied.is_empty() {
                println!("schema is up to date");
            }
            for name in applied {
                println!("applied {name}");
            }
        }
        Command::Serve => {
            let cancel = CancellationToken::new();
            let running = tickler::app::start(config, cancel.clone())
                .await
                .context("starting tickler")?;
            shutdown_signal().await;
            tracing::info!("shutting down: finishing in-flight batches");
            running.shutdown().await;
        }
        Command::Bench {
            smoke,
            rate,
            lateness_secs,
            burst,
            far_rows,
            window_rows,
            clients,
            instances,
            only_instances,
            stages,
        } => {
            let defaults = if smoke {
                tickler::bench::BenchOptions::smoke()
            } else {
                tickler::bench::BenchOptions::full()
            };
            let options = tickler::bench::BenchOptions {
                rate: rate.unwrap_or(defaults.rate),
                lateness_secs: lateness_secs.unwrap_or(defaults.lateness_secs),
                burst: burst.unwrap_or(defaults.burst),
                far_rows: far_rows.unwrap_or(defaults.far_rows),
                window_rows: window_rows.unwrap_or(defaults.window_rows),
                clients: clients.unwrap_or(defaults.clients),
                instances: instances.unwrap_or(defaults.instances),
                only_instances,
                stages,
                ..defaults
            };
            tickler::bench::run(&config, options).await?;
        }
        Command::Token { command } => admin::token(&config, command).await?,
        Command::Instances => admin::instances(&config).await?,
        Command::Doctor { repair, json } => {
            return tickler::cli::doctor::run(config, repair, json).await
        }
        Command::Shards { command } => admin::shards(&config, command).await?,
        Command::Demo { jobs, topic, token } => {
            tickler::demo::run(&config, &topic, jobs, token.as_deref()).await?;
        }
        Command::Jobs { .. } | Command::Topics { .. } | Command::Schedules { .. } => {
            unreachable!("handled before the configuration is read")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `tickler jobs ...`: needs the API's address and a token, not the
/// stores' configuration.
/// Runs a command over the API; its exit status.
async fn over_api<F, Fut>(api: tickler::cli::ApiArgs, command: F) -> ExitCode
where
    F: FnOnce(tickler::cli::client::Client, bool) -> Fut,
    Fut: std::future::Future<Output = Result<(), tickler::cli::client::ClientError>>,
{
    use tickler::cli::client::Client;

    let done = async {
        let client = Client::new(&api.url, api.token.as_deref(), api.ca_cert.as_deref())?;
        command(client, api.json).await
    };
    match done.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
