//! The `tickler` binary: parses arguments, sets up logging, calls the
//! library.

use std::path::PathBuf;

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
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TICKLER_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let config = Config::load(cli.config.as_deref())?;

    match cli.command {
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
                ..defaults
            };
            tickler::bench::run(&config, options).await?;
        }
        Command::Demo { jobs, topic } => {
            tickler::demo::run(&config, &topic, jobs).await?;
        }
    }
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
