//! The reporter role: on the one instance that reports (the live
//! reconciler with the lowest id), computes the [`Truth`] every
//! `gauges.interval_ms`, publishes it as gauges and hands it to the webhook
//! [`Notifier`]; every other instance publishes zeros.

pub mod notify;
pub mod truth;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::config::{Config, Role};
use crate::index::Index;
use crate::metrics;
use crate::roles::membership::Ownership;
use crate::roles::reporter::notify::Notifier;
use crate::roles::reporter::truth::{topics_capped, Counts, Truth};
use crate::roles::service::Service;
use crate::store::{Store, StoreError};

/// The reporter's settings.
#[derive(Debug, Clone)]
pub struct ReporterConfig {
    /// Time between reports (`gauges.interval_ms`).
    pub interval: Duration,
    /// An instance silent for this long is not the reporter.
    pub instance_ttl: Duration,
    /// Topics with a series of their own; the rest are summed (`gauges.topics_max`).
    pub topics_max: usize,
    /// The deployment's settings, which the truth is computed against (the
    /// window, Kafka, the results topic) and the notifier built from.
    pub settings: Arc<Config>,
}

impl Default for ReporterConfig {
    fn default() -> Self {
        ReporterConfig::from_config(Arc::new(Config::default()))
    }
}

impl ReporterConfig {
    pub fn from_config(config: Arc<Config>) -> Self {
        ReporterConfig {
            interval: Duration::from_millis(config.gauges.interval_ms),
            instance_ttl: config.instance_ttl(),
            topics_max: config.gauges.topics_max,
            settings: config,
        }
    }
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReporterReport {
    /// Whether this instance is the reporter (and so published the truth).
    pub reporting: bool,
}

/// Publishes the truth as gauges when this instance is the reporter.
pub struct Reporter {
    store: Store,
    index: Index,
    config: ReporterConfig,
    ownership: watch::Receiver<Ownership>,
    /// The (status, topic) series last published, to zero those gone.
    published: BTreeSet<(String, String)>,
    /// The request topics whose lag was last published, to zero them.
    published_ingress: Vec<(String, Option<i64>)>,
    /// The topics whose burst ahead it published.
    published_bursts: BTreeSet<String>,
    counts: Counts,
    reporting: bool,
    notifier: Option<Notifier>,
}

impl Reporter {
    pub fn new(
        store: Store,
        index: Index,
        config: ReporterConfig,
        ownership: watch::Receiver<Ownership>,
    ) -> Reporter {
        let notifier = Notifier::from_config(&config.settings);
        Reporter {
            store,
            index,
            config,
            ownership,
            published: BTreeSet::new(),
            published_ingress: Vec::new(),
            published_bursts: BTreeSet::new(),
            counts: Counts::default(),
            reporting: false,
            notifier,
        }
    }
}

impl Service for Reporter {
    type Report = ReporterReport;
    type Error = StoreError;
    const NAME: &'static str = "reporter";
    const PASS: &'static str = "gauges";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    /// Every gauge zero until this instance is found to be the reporter.
    async fn start(&mut self) {
        self.zero();
    }

    /// Reports once if this instance is the reporter.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<ReporterReport, StoreError> {
        let me = self.ownership.borrow().instance;
        let live = self.store.instances_list(self.config.instance_ttl).await?;
        let reporter = live
            .iter()
            .filter(|i| i.live && i.has_role(Role::Reconciler))
            .map(|i| i.id)
            .min();
        if me.is_none() || reporter != me {
            if self.reporting {
                tracing::info!(reporter = ?reporter, "another instance reports the gauges now");
                self.zero();
                if let Some(notifier) = &mut self.notifier {
                    notifier.reset();
                }
            }
            self.reporting = false;
            return Ok(ReporterReport { reporting: false });
        }
        let truth = Truth::compute_with(
            &self.store,
            &self.index,
            &self.config.settings,
            &mut self.counts,
        )
        .await?;
        self.publish(&truth);
        self.reporting = true;
        if let Some(notifier) = &mut self.notifier {
            notifier.round(&self.store, &truth).await?;
        }
        Ok(ReporterReport { reporting: true })
    }
}

impl Reporter {
    fn publish(&mut self, truth: &Truth) {
        let capped = topics_capped(&truth.jobs, self.config.topics_max);
        let now: BTreeSet<(String, String)> = capped.keys().cloned().collect();
        for gone in self.published.difference(&now) {
            metrics::truth_jobs(&gone.0, &gone.1, 0);
        }
        for ((status, topic), count) in &capped {
            metrics::truth_jobs(status, topic, *count);
        }
        self.published = now;
        self.published_ingress = truth
            .ingress_lag
            .iter()
            .map(|lag| (lag.topic.clone(), lag.lag))
            .collect();
        metrics::truth_ingress_lag(true, &self.published_ingress);
        let now = chrono::Utc::now();
        let bursts: Vec<(String, u64, f64, f64)> = truth
            .bursts
            .iter()
            .map(|burst| {
                let starts_in = chrono::DateTime::parse_from_rfc3339(&burst.at)
                    .map(|at| {
                        (at.with_timezone(&chrono::Utc) - now)
                            .num_milliseconds()
                            .max(0) as f64
                            / 1000.0
                    })
                    .unwrap_or(0.0);
                (
                    burst.topic.clone(),
                    burst.jobs,
                    burst.drain_seconds,
                    starts_in,
                )
            })
            .collect();
        let topics: BTreeSet<String> = bursts.iter().map(|b| b.0.clone()).collect();
        let gone: Vec<String> = self.published_bursts.difference(&topics).cloned().collect();
        metrics::truth_bursts(&bursts, &gone);
        self.published_bursts = topics;
        metrics::truth_publish(&metrics::TruthGauges {
            reporter: true,
            overdue: truth.overdue.count,
            overdue_oldest_s: truth.overdue.oldest_age_ms as f64 / 1000.0,
            window_jobs: truth.window.mysql,
            index_jobs: truth.window.redis,
            results_lag: truth.results_lag,
            next_due_s: truth.next_due_in_ms.map(|ms| ms as f64 / 1000.0),
            dispatchers_live: truth.instances.dispatchers,
            schedules: truth.schedules,
            scan_s: truth.scan_ms as f64 / 1000.0,
            counts_age_s: self.counts.age().map(|age| age.as_secs_f64()),
        });
    }

    /// Zero for every gauge: this instance does not report.
    fn zero(&mut self) {
        for (status, topic) in std::mem::take(&mut self.published) {
            metrics::truth_jobs(&status, &topic, 0);
        }
        metrics::truth_ingress_lag(false, &std::mem::take(&mut self.published_ingress));
        let gone: Vec<String> = std::mem::take(&mut self.published_bursts)
            .into_iter()
            .collect();
        metrics::truth_bursts(&[], &gone);
        metrics::truth_publish(&metrics::TruthGauges::default());
    }
}
