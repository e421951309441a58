//! `tickler bench`: its arguments, turned into the harness's options.

use clap::Args;

use super::{BenchOptions, STAGES};

/// The benchmark's arguments; each one left out keeps the default of a
/// full run (or of `--smoke`).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Seconds-long run that checks every job arrives (for CI).
    #[arg(long)]
    pub smoke: bool,
    /// Jobs per second in the lateness stage.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Seconds of the lateness stage.
    #[arg(long)]
    pub lateness_secs: Option<u64>,
    /// Jobs due at one instant in the burst stage.
    #[arg(long)]
    pub burst: Option<u64>,
    /// Request records in the ingress stage.
    #[arg(long)]
    pub ingress: Option<u64>,
    /// Jobs of the proof stage (at --rate a second).
    #[arg(long)]
    pub proof: Option<u64>,
    /// Jobs of each round of the limits stage.
    #[arg(long)]
    pub limits: Option<u64>,
    /// Jobs due at one instant in the midnight stage.
    #[arg(long)]
    pub midnight: Option<u64>,
    /// Their window, in milliseconds.
    #[arg(long)]
    pub midnight_window_ms: Option<u64>,
    /// Far-future pending rows for the reconciler stage.
    #[arg(long)]
    pub far_rows: Option<u64>,
    /// Window rows to re-index in the reconciler stage.
    #[arg(long)]
    pub window_rows: Option<u64>,
    /// Concurrent API clients.
    #[arg(long)]
    pub clients: Option<usize>,
    /// Pad the payload of each job the API creates to about this many
    /// bytes (default: a few bytes, `{"n": …}`).
    #[arg(long)]
    pub payload_bytes: Option<usize>,
    /// Most `tickler serve` processes in the instances stage (1 to N;
    /// 0 skips the stage).
    #[arg(long)]
    pub instances: Option<usize>,
    /// Run only the instances stage.
    #[arg(long)]
    pub only_instances: bool,
    /// Run only these stages (comma-separated: schedule, floor,
    /// lateness, isolation, burst, results, ingress, midnight, tenants, proof, consumed, limits, redis,
    /// reconcile, instances).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(STAGES))]
    pub stages: Option<Vec<String>>,
    /// Run in this existing database (on mysql.url's server), kept as it
    /// is — say, one `scripts/bytes-per-job` loaded with 100 million
    /// jobs — instead of a new one dropped at the end. The rows the stages
    /// add stay (their own topics).
    #[arg(long)]
    pub database: Option<String>,
}

impl BenchArgs {
    /// The options of this run: a full run's (or a smoke run's) with the
    /// arguments given.
    pub fn options(self) -> BenchOptions {
        let defaults = if self.smoke {
            BenchOptions::smoke()
        } else {
            BenchOptions::full()
        };
        BenchOptions {
            rate: self.rate.unwrap_or(defaults.rate),
            lateness_secs: self.lateness_secs.unwrap_or(defaults.lateness_secs),
            burst: self.burst.unwrap_or(defaults.burst),
            ingress: self.ingress.unwrap_or(defaults.ingress),
            proof: self.proof.unwrap_or(defaults.proof),
            limits: self.limits.unwrap_or(defaults.limits),
            midnight: self.midnight.unwrap_or(defaults.midnight),
            midnight_window_ms: self
                .midnight_window_ms
                .unwrap_or(defaults.midnight_window_ms),
            far_rows: self.far_rows.unwrap_or(defaults.far_rows),
            window_rows: self.window_rows.unwrap_or(defaults.window_rows),
            clients: self.clients.unwrap_or(defaults.clients),
            payload_bytes: self.payload_bytes.unwrap_or(defaults.payload_bytes),
            instances: self.instances.unwrap_or(defaults.instances),
            only_instances: self.only_instances,
            stages: self.stages,
            database: self.database,
            ..defaults
        }
    }
}
