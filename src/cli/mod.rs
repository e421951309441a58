//! The operator's commands that talk to a running tickler over its API
//! (`tickler jobs`), or to the stores directly (`tickler doctor`, `token`,
//! `instances`, `shards`).

pub mod admin;
pub mod audit;
pub mod client;
pub mod compression;
pub mod control;
pub mod doctor;
pub mod forecast;
pub mod import;
pub mod jobs;
pub mod keys;

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use client::{Client, ClientError};

/// Where the API is and who is calling.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The API's address.
    #[arg(
        long,
        env = "TICKLER_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// API token secret (tickler token create ...).
    #[arg(long, env = "TICKLER_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// A CA certificate (PEM) to trust for an https:// address, besides
    /// the system's.
    #[arg(long, env = "TICKLER_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
    /// Print the API's JSON answers instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Runs a command over the API (`tickler jobs`, `topics`, `schedules`: they
/// need the API's address and a token, not the stores' configuration);
/// returns its exit status, the error printed.
pub async fn over_api<F, Fut>(api: ApiArgs, command: F) -> ExitCode
where
    F: FnOnce(Client, bool) -> Fut,
    Fut: Future<Output = Result<(), ClientError>>,
{
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

/// `tickler probe`: a GET of `url` (plain HTTP); 0 on a 2xx answer within
/// 3 s, else 1 with the reason on standard error.
pub async fn probe(url: &str) -> ExitCode {
    let asked = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        reqwest::Client::new().get(url).send(),
    )
    .await;
    match asked {
        Ok(Ok(answer)) if answer.status().is_success() => ExitCode::SUCCESS,
        Ok(Ok(answer)) => {
            eprintln!("{url}: {}", answer.status());
            ExitCode::from(1)
        }
        Ok(Err(err)) => {
            eprintln!("{url}: {err}");
            ExitCode::from(1)
        }
        Err(_) => {
            eprintln!("{url}: no answer within 3 s");
            ExitCode::from(1)
        }
    }
}
