//! `tickler doctor`: runs the [`Doctor`] once against the stores named by
//! the configuration and prints its report (text or JSON); the exit code
//! says whether everything was consistent.

use anyhow::Context;
use std::process::ExitCode;

use crate::config::Config;
use crate::index::{self, Index};
use crate::roles::doctor::{Doctor, DoctorConfig, DoctorReport, Verdict};
use crate::store::{Actor, Store};

/// `tickler doctor`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Apply the safe fixes (index what Redis lacks, drop stale entries,
    /// rescue expired claims), then check again.
    #[arg(long)]
    pub repair: bool,
    /// The findings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Examines (or, with `--repair`, repairs) and prints the report.
pub async fn run(config: Config, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let keys = crate::domain::keys::Keyring::load(
        config.encryption.active_key.as_deref(),
        &config.encryption.keys,
    )?;
    let store = Store::connect_lazy(&config.mysql.url, 2, Actor::Doctor)?
        .with_keys(keys)
        .with_codec(config.compression.codec());
    // The shards the deployment has now, which a resize may have changed
    // since the configuration was written.
    let shards = match store.shard_leases().await {
        Ok(leases) if !leases.is_empty() => leases.len() as u32,
        _ => config.cluster.shards,
    };
    let client = index::client_open(&config).map_err(anyhow::Error::msg)?;
    let index = Index::connect_with(client, &config.redis.prefix, shards)?;
    let doctor = Doctor::new(store.clone(), index, DoctorConfig::from_config(&config));
    let report = if args.repair {
        // Written before the repair and completed after it, as every
        // control-plane change: no audit log, no repair.
        crate::roles::audit::recorded(&store, "cli", "doctor.repair", None, None, async {
            Ok::<_, std::convert::Infallible>(doctor.repair().await)
        })
        .await
        .context("cannot write the audit log's row of the repair: nothing repaired")?
        .unwrap_or_else(|never| match never {})
    } else {
        doctor.run_once().await
    };
    if args.json {
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

/// The report as an operator reads it.
pub fn render(report: &DoctorReport) -> String {
    let mut out = String::new();
    for finding in &report.findings {
        let mark = match finding.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        };
        out.push_str(&format!(
            "{mark} {:<16} {}\n",
            finding.check, finding.summary
        ));
        if !finding.ids.is_empty() {
            let ids: Vec<String> = finding.ids.iter().map(|id| id.to_string()).collect();
            let more = if finding.count as usize > finding.ids.len() {
                ", …"
            } else {
                ""
            };
            out.push_str(&format!("     {:<16} jobs {}{more}\n", "", ids.join(", ")));
        }
        if let Some(fix) = &finding.fix {
            if finding.verdict != Verdict::Ok {
                out.push_str(&format!("     {:<16} fix: {fix}\n", ""));
            }
        }
    }
    for line in &report.repaired {
        out.push_str(&format!("repaired: {line}\n"));
    }
    out.push_str(if report.healthy() {
        "all consistent\n"
    } else {
        "inconsistent: see FAIL above\n"
    });
    out
}
