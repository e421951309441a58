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
//!   newest `max_overdue` go out.
//!
//! Topics without a cap cost nothing: no statement is sent for them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::{Config, OverduePolicy};
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::service::Service;
use crate::store::StoreError;

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
    /// Whether an `expire` topic has more to expire at once.
    pub more: bool,
}

pub struct OverdueCaps {
    jobs: Jobs,
    config: OverdueCapsConfig,
}

impl OverdueCaps {
    pub fn new(jobs: Jobs, config: OverdueCapsConfig) -> Self {
        OverdueCaps { jobs, config }
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
        for cap in &self.config.caps {
            let counted = store
                .topic_overdue_count(&cap.topic, cap.after_ms, u64::from(cap.cap) + 1)
                .await?;
            let over = counted > u64::from(cap.cap);
            metrics::topic_overdue_capped(&cap.topic, over);
            if !over {
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
        }
        Ok(report)
    }

    fn passed(&self, report: &OverdueReport) -> bool {
        report.more
    }
}
