//! The operator's commands that talk to a running tickler over its API
//! (`tickler jobs`), or to the stores directly (`tickler doctor`, `token`,
//! `instances`, `shards`).

pub mod admin;
pub mod client;
pub mod control;
pub mod doctor;
pub mod jobs;

use std::path::PathBuf;

use clap::Args;

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
