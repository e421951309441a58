//! `tickler compression`: payload compression from the command line — a
//! dictionary trained on the deployment's own payloads, and how well the
//! newest rows compress (docs/data.md#payload-compression).

use clap::Subcommand;

use super::admin::AdminError;
use crate::config::{Config, PayloadCompression};
use crate::domain::compression::{self, Codec};
use crate::domain::keys::Keyring;
use crate::store::{Actor, Store};

#[derive(Subcommand)]
pub enum CompressionCommand {
    /// Train a zstd dictionary on the payloads of the jobs created last,
    /// and store it (`payload_dicts`): every instance writes new payloads
    /// with it once it is ripe (`compression.dict_delay_ms`). Rows written
    /// before keep theirs. Payloads sealed by encryption at rest are
    /// passed over: a dictionary holds fragments of its samples in plain.
    Train {
        /// Payloads to train on (the newest jobs').
        #[arg(long, default_value_t = 10_000)]
        samples: u32,
    },
    /// The setting, the dictionaries, and how the newest jobs' payloads
    /// are stored: as given and as stored.
    Status {
        /// Jobs to look at (the newest).
        #[arg(long, default_value_t = 10_000)]
        sample: u32,
    },
}

/// Fewer payloads than this make a poor dictionary (zstd may refuse).
const SAMPLES_MIN: usize = 100;

/// Runs a `compression` command.
///
/// Long because it is one match over the `compression` subcommands, and
/// training's steps (sample, train, store, report) are read in order.
pub async fn run(config: &Config, command: CompressionCommand) -> Result<(), AdminError> {
    let ring = Keyring::load(
        config.encryption.active_key.as_deref(),
        &config.encryption.keys,
    )
    .map_err(|err| AdminError::Refused(err.to_string()))?;
    Store::migrate(&config.mysql.url).await?;
    let store = Store::connect_lazy(&config.mysql.url, 2, Actor::Cli)?
        .with_keys(ring)
        .with_codec(config.compression.codec());
    match command {
        CompressionCommand::Train { samples } => {
            let found = store.payload_samples(samples).await?;
            // A dictionary keeps fragments of what it was trained on, in
            // plain: sealed payloads are never among its samples.
            let sealed_note = if found.sealed > 0 {
                format!(
                    " ({} sealed ones passed over: a dictionary is trained on payloads stored plain only, docs/security.md#no-plaintext-left-behind)",
                    found.sealed
                )
            } else {
                String::new()
            };
            let payloads = found.payloads;
            if payloads.len() < SAMPLES_MIN {
                return Err(AdminError::Refused(format!(
                    "{} plain payloads of {} bytes or more among the newest {samples} jobs{sealed_note}: a dictionary needs {SAMPLES_MIN} at least",
                    payloads.len(),
                    compression::MIN_BYTES
                )));
            }
            if found.sealed > 0 {
                println!(
                    "{} of the newest {samples} jobs are sealed (encryption at rest) and passed over",
                    found.sealed
                );
            }
            let sample_bytes: u64 = payloads.iter().map(|p| p.len() as u64).sum();
            let dict = compression::train(&payloads)
                .map_err(|err| AdminError::Refused(format!("zstd could not train: {err}")))?;
            let asked = serde_json::json!({"samples": samples});
            let stored = crate::roles::audit::recorded(
                &store,
                "cli",
                "compression.train",
                None,
                Some(asked),
                async {
                    store
                        .dict_insert(&dict, payloads.len() as u32, sample_bytes)
                        .await
                        .map(|id| serde_json::json!({"dict": id, "bytes": dict.len()}))
                },
            )
            .await?;
            let id = stored?["dict"].as_u64().unwrap_or_default();
            // What it does to the samples themselves.
            let trial = Codec::zstd(config.compression.level);
            trial.learn_ripe(id as u16, dict.clone());
            let packed: u64 = payloads.iter().map(|p| trial.pack(p).0.len() as u64).sum();
            println!(
                "dictionary {id}: {} bytes, from {} payloads ({} bytes); they compress to {:.0} % ({:.0} bytes a payload on average, from {:.0})",
                dict.len(),
                payloads.len(),
                sample_bytes,
                100.0 * packed as f64 / sample_bytes.max(1) as f64,
                packed as f64 / payloads.len() as f64,
                sample_bytes as f64 / payloads.len() as f64,
            );
            if config.compression.payloads == PayloadCompression::Off {
                println!("compression.payloads is off: set it to \"zstd\" to write with it");
            }
        }
        CompressionCommand::Status { sample } => {
            println!(
                "compression.payloads: {}",
                match config.compression.payloads {
                    PayloadCompression::Off => "off",
                    PayloadCompression::Zstd => "zstd",
                }
            );
            for dict in store.dicts().await? {
                println!(
                    "dictionary {}: {} bytes, from {} payloads, made {}",
                    dict.id,
                    dict.bytes,
                    dict.samples,
                    dict.created_at.format("%Y-%m-%dT%H:%M:%S%.3fZ")
                );
            }
            let seen = store.compression_sample(sample).await?;
            println!(
                "the newest {} jobs: {} compressed; payloads {} bytes as given, {} stored ({:.0} %)",
                seen.rows,
                seen.compressed,
                seen.plain_bytes,
                seen.stored_bytes,
                100.0 * seen.stored_bytes as f64 / seen.plain_bytes.max(1) as f64
            );
        }
    }
    store.close().await;
    Ok(())
}
