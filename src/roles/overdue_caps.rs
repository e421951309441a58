//! Overdue caps (#60, part of the reconciler's role): a topic's
//! `max_overdue` says how many of its jobs may be overdue at once — pending,
//! due more than `overdue_after_ms` ago — before its `overdue_policy` acts.
//! After a long outage a year of reminders must not all go out late at
//! once; the topic's owner decides, not every producer:
//!
//! - `alert`: `tickler_topic_overdue_capped{topic}` is 1 (the
//!   TicklerTopicOverdueCapped alert); everything still goes out, late;
//! - `expire`: the oldest overdue first attempts beyond the cap end
//!   `expired`, never produced (a history row each, by the reconciler); the
//!   newest `max_overdue` go out;
//! - `defer`: the overdue beyond the oldest `max_overdue` are moved later,
//!   in their order, into slots of `max_overdue` jobs `overdue_after_ms`
//!   apart: the backlog goes out at most `max_overdue` per
//!   `overdue_after_ms`, the oldest first, none unsent. While the topic
//!   cannot send at all (paused, at its `max_in_flight`), the slots come
//!   overdue in turn and are deferred again: the pacing starts over when
//!   it can go.
//!
//! Topics without a cap cost nothing: no statement is sent for them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{Config, OverduePolicy};
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::service::Service;
use crate::store::{OverdueDrain, StoreError};

/// Overdue jobs of one topic expired in one statement.
const BATCH: u32 = 5_000;

/// One capped topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverdueCap {
    pub topic: String,
    pub cap: u32,
    pub policy: OverduePolicy,
    pub after_ms: u64,
}

#[derive(Debug, Clone)]
pub struct OverdueCapsConfig {
    pub caps: Vec<OverdueCap>,
    /// Time between passes.
    pub interval: Duration,
}

impl OverdueCapsConfig {
    pub fn from_config(config: &Config) -> Self {
        OverdueCapsConfig {
            caps: config
                .topic_rules()
                .overdue_caps()
                .into_iter()
                .map(|(topic, cap, policy, after_ms)| OverdueCap {
                    topic,
                    cap,
                    policy,
                    after_ms,
                })
                .collect(),
            interval: Duration::from_secs(5),
        }
    }
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OverdueReport {
    /// Topics over their cap.
    pub capped: Vec<String>,
    /// Jobs expired by an `expire` policy.
    pub expired: u64,
    /// Jobs moved later by a `defer` policy.
    pub deferred: u64,
    /// Whether a topic has more to expire or defer at once.
    pub more: bool,
}

pub struct OverdueCaps {
    jobs: Jobs,
    config: OverdueCapsConfig,
    /// Each `defer` topic's backlog being moved over passes that follow
    /// one another at once: its slots go on where the last pass left them.
    /// Forgotten when a pass finds none left (and with the process: a new
    /// drain starts its slots from now, beside the earlier ones).
    drains: std::collections::HashMap<String, OverdueDrain>,
}

impl OverdueCaps {
    pub fn new(jobs: Jobs, config: OverdueCapsConfig) -> Self {
        OverdueCaps {
            jobs,
            config,
            drains: Default::default(),
        }
    }

    /// Defers a batch of `cap`'s backlog; returns how many moved.
    async fn defer(&mut self, cap: &OverdueCap) -> Result<usize, StoreError> {
        let store = self.jobs.store().clone();
        // Slots per batch stay few: one statement each.
        let batch = BATCH.min(cap.cap.saturating_mul(20)).max(1);
        // Kept through a failed pass (a store failing over): the drain goes
        // on from its slots when the store answers again.
        let drain = self.drains.get(&cap.topic).copied();
        let (ids, drain) = store
            .topic_overdue_defer(&cap.topic, cap.after_ms, cap.cap, batch, drain)
            .await?;
        if ids.len() == batch as usize {
            self.drains.insert(cap.topic.clone(), drain);
        } else {
            self.drains.remove(&cap.topic);
        }
        metrics::topic_overdue_deferred(&cap.topic, cap.cap, ids.len());
        match futures::try_join!(store.job_get_many(&ids), store.db_now()) {
            Ok((jobs, now)) => {
                let jobs: Vec<_> = jobs.iter().collect();
                self.jobs.follow(&jobs, now).await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "reading deferred jobs back; the loader and the claim put them at their time");
            }
        }
        Ok(ids.len())
    }
}

impl Service for OverdueCaps {
    type Report = OverdueReport;
    type Error = StoreError;
    const NAME: &'static str = "overdue caps";
    const PASS: &'static str = "overdue caps";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<OverdueReport, StoreError> {
        let mut report = OverdueReport::default();
        let store = self.jobs.store().clone();
        for cap in self.config.caps.clone() {
            let counted = store
                .topic_overdue_count(&cap.topic, cap.after_ms, u64::from(cap.cap) + 1)
                .await?;
            let over = counted > u64::from(cap.cap);
            metrics::topic_overdue_capped(&cap.topic, over);
            if !over {
                self.drains.remove(&cap.topic);
                continue;
            }
            report.capped.push(cap.topic.clone());
            if cap.policy == OverduePolicy::Expire {
                let ids = store
                    .topic_overdue_expire(&cap.topic, cap.after_ms, cap.cap, BATCH)
                    .await?;
                self.jobs
                    .unindex(&ids, "drop jobs expired past max_overdue")
                    .await;
                metrics::topic_overdue_expired(&cap.topic, cap.cap, ids.len());
                report.expired += ids.len() as u64;
                report.more |= ids.len() == BATCH as usize;
            }
            if cap.policy == OverduePolicy::Defer {
                let moved = self.defer(&cap).await?;
                report.deferred += moved as u64;
                report.more |= self.drains.contains_key(&cap.topic);
            }
        }
        Ok(report)
    }

    fn passed(&self, report: &OverdueReport) -> bool {
        report.more
    }
}
