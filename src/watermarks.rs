//! Due-time watermarks (part of the reconciler's role): per target topic,
//! the instant T such that every job due at or before T is produced,
//! cancelled, expired or dead — what a stream processor needs to close its
//! event-time windows. Each pass reads the outstanding jobs already due
//! (`pending` or `dispatching`: a claim in doubt and a paused topic's held
//! jobs hold the watermark) and raises each topic's in `topic_watermarks`,
//! never lowering one, so it holds across instances and failovers.
//!
//! A topic with nothing outstanding goes to now less
//! `reconciler.watermark_settle_ms`:
//! a create whose `delay_ms` was counted a moment ago may still be
//! committing. A job created or moved to a time at or before its topic's
//! watermark arrives after it (late, in a stream processor's words).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::metrics;
use crate::service::Service;
use crate::store::{Store, StoreError};

#[derive(Debug, Clone)]
pub struct WatermarksConfig {
    /// Time between passes.
    pub interval: Duration,
    /// How far behind now a topic with nothing outstanding stands.
    pub settle: Duration,
}

impl WatermarksConfig {
    pub fn from_config(config: &Config) -> Self {
        WatermarksConfig {
            interval: Duration::from_millis(config.reconciler.watermark_interval_ms),
            settle: Duration::from_millis(config.reconciler.watermark_settle_ms),
        }
    }
}

impl Default for WatermarksConfig {
    fn default() -> Self {
        WatermarksConfig::from_config(&Config::default())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WatermarksReport {
    /// Topics held back by a job outstanding.
    pub held: usize,
}

pub struct Watermarks {
    store: Store,
    config: WatermarksConfig,
}

impl Watermarks {
    pub fn new(store: Store, config: WatermarksConfig) -> Watermarks {
        Watermarks { store, config }
    }
}

/// The watermark a topic whose earliest outstanding job is due at
/// `earliest` may have at `free` (now less the settle time): just before
/// that job, and never past `free`.
pub fn held_at(earliest: DateTime<Utc>, free: DateTime<Utc>) -> DateTime<Utc> {
    (earliest - chrono::Duration::milliseconds(1)).min(free)
}

impl Service for Watermarks {
    type Report = WatermarksReport;
    type Error = StoreError;
    const NAME: &'static str = "watermarks";
    const PASS: &'static str = "watermarks";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        self.store.db_now().await
    }

    async fn run_once(&mut self, now: DateTime<Utc>) -> Result<WatermarksReport, StoreError> {
        let free = now - chrono::Duration::milliseconds(self.config.settle.as_millis() as i64);
        let held: Vec<(String, DateTime<Utc>)> = self
            .store
            .jobs_outstanding_earliest(free)
            .await?
            .into_iter()
            .map(|(topic, earliest)| (topic, held_at(earliest, free)))
            .collect();
        self.store.watermarks_raise(&held, free).await?;
        let marks = self.store.watermarks().await?;
        metrics::watermarks(
            &marks
                .iter()
                .map(|mark| {
                    (
                        mark.topic.clone(),
                        (now - mark.at).num_milliseconds().max(0) as f64 / 1000.0,
                    )
                })
                .collect::<Vec<_>>(),
        );
        Ok(WatermarksReport { held: held.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_stops_just_before_the_earliest_outstanding_job() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let free = at("2027-01-01T00:00:10Z");
        assert_eq!(
            held_at(at("2027-01-01T00:00:04Z"), free),
            at("2027-01-01T00:00:03.999Z")
        );
        assert_eq!(
            held_at(at("2027-01-01T00:00:30Z"), free),
            free,
            "never past now less the settle time"
        );
    }
}
