//! `tickler keys`: encryption at rest from the command line — a new key,
//! which keys the rows are sealed under, and the rotation that seals them
//! all again under the active key (docs/security.md#encryption-at-rest).

use std::time::{Duration, Instant};

use clap::Subcommand;

use super::admin::AdminError;
use crate::config::Config;
use crate::domain::keys::{self, Keyring};
use crate::store::{Actor, Store};

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Print a new key: 32 random bytes in base64, for a key file or
    /// variable (`encryption.keys`).
    Generate,
    /// The jobs and schedules by the key they are sealed under (plain ones
    /// too), and the keys this configuration has.
    Status,
    /// Seal every schedule and job not yet under `encryption.active_key`
    /// again under it — plain ones included — at a bounded rate, while
    /// tickler serves.
    /// Stopped, it resumes where it was on the next run.
    Rotate {
        /// Most rows rewritten a second.
        #[arg(long, default_value_t = 2_000)]
        rate: u32,
        /// Stop after this many rows (it resumes there on the next run).
        #[arg(long)]
        max_rows: Option<u64>,
        /// Start over from the first job.
        #[arg(long)]
        restart: bool,
    },
}

/// Rows a rotation step reads and writes.
const STEP: u32 = 500;

/// Runs a `keys` command.
///
/// Long because it is one match over the `keys` subcommands, and a
/// rotation's steps (schedules re-sealed, jobs in steps, old keys forgotten)
/// are read in order.
pub async fn run(config: &Config, command: KeysCommand) -> Result<(), AdminError> {
    if let KeysCommand::Generate = command {
        println!("{}", keys::generate());
        return Ok(());
    }
    let ring = Keyring::load(
        config.encryption.active_key.as_deref(),
        &config.encryption.keys,
    )
    .map_err(|err| AdminError::Refused(err.to_string()))?;
    Store::migrate(&config.mysql.url).await?;
    let store = Store::connect_lazy(&config.mysql.url, 2, Actor::Cli)?.with_keys(ring.clone());
    match command {
        KeysCommand::Generate => {}
        KeysCommand::Status => {
            println!(
                "active key: {}",
                ring.active().unwrap_or("none (encryption off)")
            );
            println!("keys here:  {}", ring.ids().join(", "));
            for count in store.key_counts().await? {
                let note = match &count.key {
                    None => "plain".to_owned(),
                    Some(key) if !ring.has(key) => format!("{key}: MISSING here"),
                    Some(key) => key.clone(),
                };
                println!("{:>12} rows  {note}", count.rows);
            }
        }
        KeysCommand::Rotate {
            rate,
            max_rows,
            restart,
        } => {
            let Some(active) = ring.active() else {
                return Err(AdminError::Refused(
                    "set encryption.active_key (and its key in encryption.keys) first".to_owned(),
                ));
            };
            let wrong = store.key_canaries_check().await?;
            if !wrong.is_empty() {
                return Err(AdminError::Refused(format!(
                    "encryption key(s) {}: not the key material rows were sealed under with this id (enc_key_canaries)",
                    wrong.join(", ")
                )));
            }
            // Phase two of a rotation: every live instance must hold the
            // key first (phase one), or it could not open what is rewritten.
            let lacking: Vec<_> = store
                .instances_list(config.instance_ttl())
                .await?
                .into_iter()
                .filter(|row| {
                    row.live
                        && !crate::store::instance_may_hold(
                            &row.version,
                            row.enc_keys.as_deref(),
                            active,
                        )
                })
                .collect();
            if !lacking.is_empty() {
                return Err(AdminError::Refused(format!(
                    "these live instances lack key {active}, and could not open a row rewritten under it: {}; give every instance the key first (docs/security.md#rotating-a-key)",
                    crate::store::instances_describe(&lacking)
                )));
            }
            // Rows rewritten as every live instance reads them (headers
            // bound only once none is built before that).
            crate::roles::codec_upkeep::start(&store, config.instance_ttl()).await;
            // In the audit log: who rotated to which key, and from where.
            let asked = serde_json::json!({"rate": rate, "max_rows": max_rows, "restart": restart});
            let begun = crate::roles::audit::recorded(
                &store,
                "cli",
                "keys.rotate",
                Some(active.to_owned()),
                Some(asked),
                async { Ok::<_, String>(serde_json::json!({"keys": ring.ids()})) },
            )
            .await?;
            begun.map_err(AdminError::Refused)?;
            if restart {
                store.rotation_restart().await?;
            }
            store.key_used_note().await?;
            let run_began = store.db_now().await?;
            let (schedules, unopened) = store.schedules_reseal().await?;
            println!("to {active}: {schedules} schedules rewritten, {unopened} skipped");
            let started = Instant::now();
            let step = STEP.min(rate.max(1));
            let mut seen: u64 = 0;
            loop {
                let began = Instant::now();
                let at = store.rotation_step(step).await?;
                seen += u64::from(step);
                println!(
                    "to {active}: up to job {}, {} rewritten, {} skipped ({:.0} s)",
                    at.after_id,
                    at.rewritten,
                    at.skipped,
                    started.elapsed().as_secs_f64()
                );
                if at.done {
                    println!("done: every job is sealed under {active}, but {} skipped: under a key this process lacks, not opening, or changed during the rotation (tickler keys status, tickler doctor; run it again with --restart)", at.skipped);
                    if at.skipped == 0 && unopened == 0 {
                        // The doctor stops naming a key no process has
                        // sealed with for a while (every process says so
                        // every 5 minutes) and no row is sealed under.
                        let quiet = run_began - chrono::Duration::minutes(15);
                        for used in store.keys_used().await? {
                            if used.key == active {
                                continue;
                            }
                            if store.key_rows_exist(&used.key).await? {
                                println!("key {} still seals rows written during the rotation: kept; run it again with --restart", used.key);
                            } else if store.key_used_forget(&used.key, quiet).await? > 0 {
                                println!("key {} no longer in use (enc_keys_used)", used.key);
                            }
                        }
                    }
                    break;
                }
                if max_rows.is_some_and(|most| seen >= most) {
                    println!("stopped after {seen} rows: run it again to go on");
                    break;
                }
                let pace = Duration::from_secs_f64(f64::from(step) / f64::from(rate.max(1)));
                tokio::time::sleep(pace.saturating_sub(began.elapsed())).await;
            }
        }
    }
    store.close().await;
    Ok(())
}
