//! The `tickler` binary: parses arguments, sets up logging, calls the
//! library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
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

#[derive(Subcommand)]
enum ShardsCommand {
    /// Raise the shard count of a running deployment (e.g. 16 → 64): every
    /// instance follows within a heartbeat, with no job lost, doubled or
    /// early (see docs/scaling.md).
    Resize { shards: u32 },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token and print its secret, once, alone on the last line.
    Create {
        /// A name for it, shown in `list` and in the jobs' history as
        /// `api:NAME` (letters, digits, '.', '_', '-').
        name: String,
        /// Topics it may use, as patterns with '*' (e.g. 'orders.*'; '*' for
        /// all). Repeat or separate with commas.
        #[arg(long, required = true, value_delimiter = ',')]
        topics: Vec<String>,
        /// What it may do: read, write, results, admin (all of these, and
        /// redrive), metrics. Repeat or separate with commas.
        #[arg(long = "scope", required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        /// Requests per second (default: api_rate_requests; 0: unlimited).
        #[arg(long)]
        rate_requests: Option<u32>,
        /// Jobs created per second (default: api_rate_jobs; 0: unlimited).
        #[arg(long)]
        rate_jobs: Option<u32>,
    },
    /// Every token, revoked ones too; never a secret.
    List,
    /// Revoke a token: refused by every instance within token_refresh_ms.
    Revoke { name: String },
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
        Command::Token { command } => token(&config, command).await?,
        Command::Instances => instances(&config).await?,
        Command::Doctor { repair, json } => return doctor(config, repair, json).await,
        Command::Shards { command } => shards(&config, command).await?,
        Command::Demo { jobs, topic, token } => {
            tickler::demo::run(&config, &topic, jobs, token.as_deref()).await?;
        }
        Command::Jobs { .. } | Command::Topics { .. } | Command::Schedules { .. } => {
            unreachable!("handled before the configuration is read")
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn doctor(config: Config, repair: bool, json: bool) -> anyhow::Result<ExitCode> {
    use tickler::cli::doctor::{render, Doctor};
    use tickler::index::{self, Index};
    use tickler::store::Actor;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let store = Store::connect_lazy(&config.mysql_url, 2, Actor::Reconciler)?;
    let shards = match store.shard_leases().await {
        Ok(leases) if !leases.is_empty() => leases.len() as u32,
        _ => config.shards,
    };
    let client = index::client_open(&config).map_err(anyhow::Error::msg)?;
    let index = Index::connect_with(client, &config.redis_prefix, shards)?;
    let doctor = Doctor::new(store.clone(), index, config);
    let report = if repair {
        doctor.repair().await
    } else {
        doctor.examine().await
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    store.close().await;
    Ok(if report.healthy() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

async fn token(config: &Config, command: TokenCommand) -> anyhow::Result<()> {
    use tickler::auth;
    use tickler::store::{Actor, NewToken, StoreError};

    Store::migrate(&config.mysql_url)
        .await
        .context("migrating the database")?;
    let store = Store::connect_lazy(&config.mysql_url, 1, Actor::Api)?;
    match command {
        TokenCommand::Create {
            name,
            topics,
            scopes,
            rate_requests,
            rate_jobs,
        } => {
            auth::name_validate(&name).map_err(anyhow::Error::msg)?;
            for pattern in &topics {
                tickler::topic_pattern::validate(pattern).map_err(anyhow::Error::msg)?;
            }
            for scope in &scopes {
                if auth::Scope::parse(scope).is_none() {
                    anyhow::bail!(
                        "unknown scope {scope:?}: use read, write, results, admin or metrics"
                    );
                }
            }
            let secret = auth::secret_generate();
            let created = store
                .token_create(&NewToken {
                    name: &name,
                    secret_sha256: auth::secret_hash(&secret),
                    topics: &topics,
                    scopes: &scopes,
                    rate_requests,
                    rate_jobs,
                })
                .await;
            match created {
                Ok(row) => {
                    println!(
                        "token {} created: topics {}, scopes {}",
                        row.name,
                        row.topics.join(","),
                        row.scopes.join(",")
                    );
                    println!(
                        "the secret is shown this once; send it as Authorization: Bearer <secret>"
                    );
                    println!("{secret}");
                }
                Err(StoreError::DuplicateKey) => {
                    anyhow::bail!(
                        "a token called {name:?} exists already (revoked ones keep their name)"
                    )
                }
                Err(err) => return Err(err.into()),
            }
        }
        TokenCommand::List => {
            println!(
                "{:<24} {:<24} {:<28} {:>9} {:>9} {:<24} revoked",
                "name", "created", "scopes", "req/s", "jobs/s", "topics"
            );
            let rate = |r: Option<u32>| r.map_or("default".to_owned(), |r| r.to_string());
            for row in store.token_list().await? {
                println!(
                    "{:<24} {:<24} {:<28} {:>9} {:>9} {:<24} {}",
                    row.name,
                    row.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    row.scopes.join(","),
                    rate(row.rate_requests),
                    rate(row.rate_jobs),
                    row.topics.join(","),
                    row.revoked_at.map_or("-".to_owned(), |at| at
                        .format("%Y-%m-%dT%H:%M:%SZ")
                        .to_string())
                );
            }
        }
        TokenCommand::Revoke { name } => {
            if !store.token_revoke(&name).await? {
                anyhow::bail!("no token called {name:?}");
            }
            println!(
                "token {name} revoked: refused within {} ms",
                config.token_refresh_ms
            );
        }
    }
    store.close().await;
    Ok(())
}

async fn instances(config: &Config) -> anyhow::Result<()> {
    use tickler::store::Actor;

    let store = Store::connect_lazy(&config.mysql_url, 1, Actor::Reconciler)?;
    let rows = store.instances_list(config.instance_ttl()).await?;
    let leases = store.shard_leases().await?;
    let now = store.db_now().await?;
    println!(
        "{:>6} {:<5} {:<24} {:>8} {:<10} {:<36} {:>12} {:>7}",
        "id", "state", "host", "pid", "version", "roles", "heartbeat", "shards"
    );
    for row in &rows {
        let held = leases.iter().filter(|l| l.owner == Some(row.id)).count();
        let age_ms = (now - row.heartbeat_at).num_milliseconds();
        println!(
            "{:>6} {:<5} {:<24} {:>8} {:<10} {:<36} {:>9} ms {:>7}",
            row.id,
            if row.live { "live" } else { "dead" },
            row.host,
            row.pid,
            row.version,
            row.roles.join(","),
            age_ms,
            held
        );
    }
    let free = leases.iter().filter(|l| l.owner.is_none()).count();
    println!(
        "{} live of {} registered; {} shards, {} free (instance_ttl_ms {})",
        rows.iter().filter(|r| r.live).count(),
        rows.len(),
        leases.len(),
        free,
        config.instance_ttl_ms
    );
    store.close().await;
    Ok(())
}

async fn shards(config: &Config, command: Option<ShardsCommand>) -> anyhow::Result<()> {
    use tickler::store::Actor;

    Store::migrate(&config.mysql_url)
        .await
        .context("migrating the database")?;
    let store = Store::connect_lazy(&config.mysql_url, 1, Actor::Reconciler)?;
    match command {
        None => {
            let leases = store.shard_leases().await?;
            println!("{:>6} {:>8} {:>8}", "shard", "owner", "epoch");
            for lease in &leases {
                let owner = lease.owner.map_or("-".to_owned(), |o| o.to_string());
                println!("{:>6} {:>8} {:>8}", lease.shard, owner, lease.epoch);
            }
            println!("{} shards", leases.len());
        }
        Some(ShardsCommand::Resize { shards }) => {
            if !(1..=16_384).contains(&shards) {
                anyhow::bail!("the shard count must be between 1 and 16384");
            }
            let current = store.shard_leases_ensure(config.shards).await?;
            if shards < current {
                anyhow::bail!(
                    "the deployment has {current} shards; the count can only be raised (lowering would strand claims under shards that no longer exist)"
                );
            }
            if shards == current {
                println!("the deployment has {current} shards already");
            } else {
                store.shard_leases_raise(shards).await?;
                println!(
                    "shards raised from {current} to {shards}: every instance follows within {} ms (a fifth of instance_ttl_ms)",
                    config.instance_ttl_ms / 5
                );
            }
        }
    }
    store.close().await;
    Ok(())
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
