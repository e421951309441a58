//! The background roles' settings: `[cluster]` (shards, when an instance
//! is dead), `[loader]`, `[schedules]`, `[dispatcher]` and `[reconciler]`.
//! Each section with its defaults and its own checks.

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};
use crate::domain::delivery::Verify;

/// `[cluster]`: many instances: the shards a new deployment starts with, and when a silent instance is dead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// Number of logical shards (one Redis ZSET each) a new deployment
    /// starts with. After the first start the count is the deployment's,
    /// kept in MySQL (`shard_leases`); raise it with `tickler shards resize`.
    pub shards: u32,
    /// An instance whose heartbeat (on the database's clock) is older than
    /// this is dead for everyone: its shards are taken over and the jobs its
    /// dispatcher held are produced again by the others. It beats every
    /// fifth of this.
    pub instance_ttl_ms: u64,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            shards: 16,
            instance_ttl_ms: 5_000,
        }
    }
}

impl ClusterSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=16_384).contains(&self.shards) {
            return Err(invalid("cluster.shards", "must be between 1 and 16384"));
        }
        if !(500..=600_000).contains(&self.instance_ttl_ms) {
            return Err(invalid(
                "cluster.instance_ttl_ms",
                "must be between 500 and 600000",
            ));
        }
        Ok(())
    }
}

/// `[loader]`: the loader: the window of jobs kept in Redis, and its passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderSettings {
    /// Jobs due within this much of now are kept in Redis; later ones only
    /// in MySQL.
    pub window_ms: u64,
    /// How often the loader looks for jobs entering the window.
    pub interval_ms: u64,
    /// Rows the loader reads per query.
    pub batch: u32,
}

impl Default for LoaderSettings {
    fn default() -> Self {
        LoaderSettings {
            window_ms: 600_000,
            interval_ms: 1_000,
            batch: 5_000,
        }
    }
}

impl LoaderSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window_ms < 1_000 {
            return Err(invalid("loader.window_ms", "must be at least 1000"));
        }
        if self.interval_ms == 0 || self.interval_ms * 2 > self.window_ms {
            return Err(invalid(
                "loader.interval_ms",
                "must be positive and at most half of loader.window_ms, or jobs could enter the window unseen",
            ));
        }
        // The message names both batches, as it always has.
        if self.batch == 0 {
            return Err(invalid("loader.batch/dispatcher.batch", "must be positive"));
        }
        Ok(())
    }
}

/// `[schedules]`: recurring schedules: how far ahead their occurrences are created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesSettings {
    /// Occurrences of a schedule are created as jobs this far ahead (and
    /// always the next one, however far).
    pub lookahead_ms: u64,
    /// How often the loader looks for schedules that need their next
    /// occurrences created.
    pub interval_ms: u64,
}

impl Default for SchedulesSettings {
    fn default() -> Self {
        SchedulesSettings {
            lookahead_ms: 10_000,
            interval_ms: 1_000,
        }
    }
}

impl SchedulesSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval_ms < 10 {
            return Err(invalid("schedules.interval_ms", "must be at least 10"));
        }
        Ok(())
    }
}

/// `[tzdata]`: the time-zone rules local times are resolved with (a
/// wall-clock job's `run_local`, a cron schedule's occurrences).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TzdataSettings {
    /// A zoneinfo directory of compiled zone files (what `zic` writes, and
    /// the operating system's tzdata package installs), with its release
    /// in `tzdata.zi` or `+VERSION`. `builtin`: the rules compiled into
    /// this build. When the directory is missing or unreadable at start,
    /// the built-in rules are used and a warning logged.
    pub path: String,
    /// How often the directory's release is looked at: a newer one is
    /// loaded without a restart, and the pending wall-clock jobs of older
    /// releases are computed again (by the reconciler role).
    pub check_ms: u64,
}

impl Default for TzdataSettings {
    fn default() -> Self {
        TzdataSettings {
            path: "/usr/share/zoneinfo".to_owned(),
            check_ms: 60_000,
        }
    }
}

impl TzdataSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(100..=86_400_000).contains(&self.check_ms) {
            return Err(invalid(
                "tzdata.check_ms",
                "must be between 100 and 86400000",
            ));
        }
        if self.path.trim().is_empty() {
            return Err(invalid(
                "tzdata.path",
                "must name a zoneinfo directory, or be `builtin`",
            ));
        }
        Ok(())
    }
}

/// Longest `dispatcher.lookahead_ms`: a job claimed ahead can no longer be
/// cancelled, so the stretch stays short.
pub const DISPATCH_LOOKAHEAD_MAX_MS: u64 = 1_000;

/// `[dispatcher]`: the dispatcher: batches, the claim lease, and its timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherSettings {
    /// Most jobs one dispatcher claims per shard per pass.
    pub batch: u32,
    /// A claim (in Redis and in MySQL) expires after this long. Its records
    /// are handed to the producer only while they can land or be given up
    /// before it ends, so past it the claim is read back and, if nothing of
    /// it landed, produced again: a dispatcher that died or paused
    /// mid-batch costs its jobs this much, a pass and the read back.
    pub claim_lease_ms: u64,
    /// Longest the dispatcher sleeps when nothing is due, so that jobs
    /// indexed by another instance are noticed.
    pub idle_ms: u64,
    /// A dispatcher busy this long without finishing a pass (a call to
    /// MySQL, Redis or Kafka that never returns: a connection a failover
    /// left half-open) gives up: the instance stops in order, so the others
    /// take its shards instead of waiting on a process that beats its
    /// heart and sends nothing.
    pub stall_ms: u64,
    /// How long the dispatcher waits for the broker's acknowledgements of
    /// records sent together before it leaves those of a topic the broker
    /// stopped answering for to settle in the background, so one bad topic
    /// never holds up the others; past it, a broker slow for every topic
    /// holds claiming back.
    pub ack_wait_ms: u64,
    /// The dispatcher claims jobs due within this many milliseconds (in
    /// Redis and in MySQL, by the database's clock) and holds each until its
    /// time, so that claiming costs no lateness. A cancel in this last
    /// stretch answers `in_flight`. 0 claims only what is due.
    pub lookahead_ms: u64,
    /// A deployment-wide pace, in jobs per second, that jobs with a
    /// flexible window (`window_ms`) are smoothed under: every produced job
    /// counts against it, and a windowed job that would exceed it waits, in
    /// order of its window's end, at most until that end. Jobs without a
    /// window are never held by it. None (the default) smooths nothing.
    pub smooth_per_second: Option<u32>,
    /// Which produced records are read back at the position the broker
    /// acknowledged them at, to prove they are there (`verified_at`): `all`
    /// (the default), `off`, or a share of jobs (`0.1` or `10%`, chosen by
    /// job id). A record not found is produced again as the next attempt.
    pub verify: Verify,
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        DispatcherSettings {
            batch: 500,
            claim_lease_ms: 5_600,
            idle_ms: 1_000,
            stall_ms: 60_000,
            ack_wait_ms: 200,
            lookahead_ms: 20,
            smooth_per_second: None,
            verify: Verify::All,
        }
    }
}

impl DispatcherSettings {
    /// The section's own checks; the first problem found names its setting.
    /// The lease, the wait for acknowledgements and the stall watch must
    /// cover `[kafka]`'s timings: rules between sections
    /// (`super::validate`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        // The message names both batches, as it always has.
        if self.batch == 0 {
            return Err(invalid("loader.batch/dispatcher.batch", "must be positive"));
        }
        if self.idle_ms == 0 {
            return Err(invalid("dispatcher.idle_ms", "must be positive"));
        }
        if self.lookahead_ms > DISPATCH_LOOKAHEAD_MAX_MS {
            return Err(invalid(
                "dispatcher.lookahead_ms",
                "must be at most 1000 (a claimed job cannot be cancelled any more)",
            ));
        }
        if self.smooth_per_second == Some(0) {
            return Err(invalid(
                "dispatcher.smooth_per_second",
                "is 0: leave it unset to smooth nothing",
            ));
        }
        Ok(())
    }
}

/// `[reconciler]`: the reconciler's passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerSettings {
    /// Time between reconciler passes (expired claims, overdue probe).
    pub interval_ms: u64,
    /// How overdue a pending job must be before the reconciler checks that
    /// Redis holds it.
    pub grace_ms: u64,
    /// Time between raises of the topics' due-time watermarks.
    pub watermark_interval_ms: u64,
    /// How far behind the database's clock a topic with nothing
    /// outstanding puts its watermark: room for a create whose `delay_ms`
    /// was counted and that is still committing.
    pub watermark_settle_ms: u64,
    /// When set, each topic's watermark is also produced to this Kafka
    /// topic whenever it rises: the target topic, the instant, and each of
    /// its partitions' end offset.
    pub watermark_topic: Option<String>,
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        ReconcilerSettings {
            interval_ms: 1_000,
            grace_ms: 1_000,
            watermark_interval_ms: 1_000,
            watermark_settle_ms: 2_000,
            watermark_topic: None,
        }
    }
}

impl ReconcilerSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.interval_ms == 0 {
            return Err(invalid("reconciler.interval_ms", "must be positive"));
        }
        if !(100..=60_000).contains(&self.watermark_interval_ms) {
            return Err(invalid(
                "reconciler.watermark_interval_ms",
                "must be between 100 and 60000",
            ));
        }
        if self.watermark_settle_ms > 60_000 {
            return Err(invalid(
                "reconciler.watermark_settle_ms",
                "must be at most 60000",
            ));
        }
        Ok(())
    }
}
