//! `tickler audit`: the control-plane changes, newest first, over a running
//! tickler's API (`GET /v1/audit`, admin scope): a table, or the JSON
//! answer with each change's before, request and after.

use clap::Args;
use serde_json::Value;

use super::client::{Client, ClientError};
use super::jobs::{print_json, print_table, query, text};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// An action (`topic.pause`) or every action of a kind (`topic`,
    /// `schedule`, `token`, `bulk`, `job`, `doctor`, `instance`).
    #[arg(long)]
    action: Option<String>,
    /// Who: `api:NAME`, `api`, `cli`, `instance`.
    #[arg(long)]
    actor: Option<String>,
    /// What it was done to: a topic, a schedule's or job's id, a token.
    #[arg(long)]
    target: Option<String>,
    /// From, RFC 3339.
    #[arg(long)]
    from: Option<String>,
    /// To, RFC 3339, exclusive.
    #[arg(long)]
    to: Option<String>,
    /// Most changes shown (1 to 1000; default 100).
    #[arg(long)]
    limit: Option<u32>,
}

pub async fn run(client: &Client, args: AuditArgs, json: bool) -> Result<(), ClientError> {
    let path = format!(
        "/v1/audit{}",
        query(&[
            ("action", args.action),
            ("actor", args.actor),
            ("target", args.target),
            ("from", args.from),
            ("to", args.to),
            ("limit", args.limit.map(|n| n.to_string())),
        ])
    );
    let answer = client.get(&path).await?;
    if json {
        print_json(&answer);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = answer["entries"]
        .as_array()
        .map(|entries| entries.iter().map(row).collect())
        .unwrap_or_default();
    print_table(
        &["at", "actor", "action", "target", "status", "origin"],
        &rows,
    );
    Ok(())
}

fn row(entry: &Value) -> Vec<String> {
    let status = match entry["status"].as_u64() {
        None => "unknown".to_owned(),
        Some(0) => "failed".to_owned(),
        Some(code) => code.to_string(),
    };
    vec![
        text(&entry["at"]),
        text(&entry["actor"]),
        text(&entry["action"]),
        text(&entry["target"]),
        status,
        text(&entry["origin"]),
    ]
}
