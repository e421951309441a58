//! A webhook for the people who own the jobs, without Prometheus: the
//! reporter instance posts JSON when jobs end dead and when a backlog builds
//! up (and when it clears). Each body has a `text` sentence, so a Slack or
//! Mattermost incoming webhook shows it as is.
//!
//! Dead jobs are sent at least once: the window of time a notification
//! covers moves on only once the webhook answered 2xx. Each look reaches a
//! minute further back than the last one ended, because a row's
//! `updated_at` is stamped when its statement starts and becomes visible
//! only at its commit; the ids already told are remembered, so the overlap
//! tells nothing twice. A new reporter (at start-up, or taking over from one
//! that died) first looks back two intervals and an instance TTL — the
//! longest a handover leaves unwatched — so a death around a handover may be
//! told twice, never not at all.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::Config;
use crate::domain::job::JobId;
use crate::metrics;
use crate::roles::reporter::truth::Truth;
use crate::store::{DeadSince, Store, StoreError};

pub struct Notifier {
    url: String,
    http: reqwest::Client,
    /// A backlog is an overdue job older than this.
    backlog_after: Duration,
    /// While a backlog lasts, it is said again this often.
    repeat: Duration,
    /// Dead jobs up to here have been notified.
    dead_until: Option<DateTime<Utc>>,
    /// Ids told within the overlap, with their `updated_at`.
    told: HashMap<JobId, DateTime<Utc>>,
    /// How far back a new reporter looks first.
    lookback: Duration,
    /// When the backlog was last said (None: no backlog now).
    backlog_said: Option<std::time::Instant>,
}

impl Notifier {
    /// None when no `notify.webhook_url` is set.
    pub fn from_config(config: &Config) -> Option<Notifier> {
        let url = config.notify.webhook_url.clone()?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .user_agent(concat!("tickler/", env!("CARGO_PKG_VERSION")))
            .build()
            .ok()?;
        Some(Notifier {
            url,
            http,
            backlog_after: Duration::from_millis(config.notify.backlog_ms),
            repeat: Duration::from_millis(config.notify.repeat_ms),
            dead_until: None,
            told: HashMap::new(),
            lookback: Duration::from_millis(
                2 * config.gauges.interval_ms + config.cluster.instance_ttl_ms,
            ),
            backlog_said: None,
        })
    }

    /// Forgets what it told: another instance reports now, and this one
    /// looks back again if it becomes the reporter later.
    pub fn reset(&mut self) {
        self.dead_until = None;
        self.told.clear();
        self.backlog_said = None;
    }

    /// Says what changed since the last round: jobs that ended dead, a
    /// backlog (again, every `repeat` while it lasts), a backlog cleared.
    pub async fn round(&mut self, store: &Store, truth: &Truth) -> Result<(), StoreError> {
        let now = store.db_now().await?;
        let lookback = chrono::Duration::from_std(self.lookback).unwrap_or_default();
        let since = *self.dead_until.get_or_insert(now - lookback);
        if now > since {
            let rows = store
                .job_dead_between(since - overlap(), now, DEAD_MAX)
                .await?;
            let fresh: Vec<_> = rows
                .into_iter()
                .filter(|(id, _, _)| !self.told.contains_key(id))
                .collect();
            if fresh.is_empty() || self.send(&dead_body(&by_topic(&fresh))).await {
                self.told.extend(fresh.iter().map(|(id, _, at)| (*id, *at)));
                self.told.retain(|_, at| *at > now - overlap() - overlap());
                self.dead_until = Some(now);
            }
        }
        let age_ms = truth.overdue.oldest_age_ms.max(0) as u64;
        let backlog = truth.overdue.count > 0 && age_ms >= self.backlog_after.as_millis() as u64;
        match (backlog, self.backlog_said) {
            (true, Some(said)) if said.elapsed() < self.repeat => {}
            (true, _) => {
                let body = json!({
                    "event": "backlog",
                    "text": format!(
                        "tickler: {} jobs are overdue, the oldest by {} s (see tickler doctor and the dashboard's overdue jobs)",
                        truth.overdue.count,
                        age_ms / 1000
                    ),
                    "overdue": truth.overdue.count,
                    "oldest_age_ms": age_ms,
                    "at": truth.at,
                });
                if self.send(&body).await {
                    self.backlog_said = Some(std::time::Instant::now());
                }
            }
            (false, Some(_)) => {
                let body = json!({
                    "event": "backlog_cleared",
                    "text": "tickler: the backlog has cleared; no job is overdue past the threshold",
                    "overdue": truth.overdue.count,
                    "at": truth.at,
                });
                if self.send(&body).await {
                    self.backlog_said = None;
                }
            }
            (false, None) => {}
        }
        Ok(())
    }

    /// Posts `body`; true when the webhook took it.
    async fn send(&self, body: &Value) -> bool {
        let sent = self.http.post(&self.url).json(body).send().await;
        match sent {
            Ok(response) if response.status().is_success() => true,
            Ok(response) => {
                let why = format!("refused a notification ({})", response.status());
                metrics::notify_failed(&body["event"], &why);
                false
            }
            Err(err) => {
                // Without the URL: a webhook's URL often holds its secret.
                let err = err.without_url();
                let why = format!("did not answer ({err})");
                metrics::notify_failed(&body["event"], &why);
                false
            }
        }
    }
}

/// How much further back than the last look each look reaches: longer than
/// a write stays uncommitted (InnoDB's lock wait is 50 s by default).
fn overlap() -> chrono::Duration {
    chrono::Duration::seconds(60)
}

/// Most dead jobs one notification reads.
const DEAD_MAX: u32 = 10_000;

/// Dead jobs by topic, the most first, with up to ten ids each.
fn by_topic(rows: &[(JobId, String, DateTime<Utc>)]) -> Vec<DeadSince> {
    let mut topics: BTreeMap<&str, DeadSince> = BTreeMap::new();
    for (id, topic, _) in rows {
        let entry = topics.entry(topic).or_insert_with(|| DeadSince {
            topic: topic.clone(),
            count: 0,
            ids: Vec::new(),
        });
        entry.count += 1;
        if entry.ids.len() < 10 {
            entry.ids.push(*id);
        }
    }
    let mut dead: Vec<DeadSince> = topics.into_values().collect();
    dead.sort_by(|a, b| b.count.cmp(&a.count).then(a.topic.cmp(&b.topic)));
    dead
}

fn dead_body(dead: &[DeadSince]) -> Value {
    let total: u64 = dead.iter().map(|d| d.count).sum();
    let topics: Vec<String> = dead
        .iter()
        .map(|d| format!("{} on {}", d.count, d.topic))
        .collect();
    json!({
        "event": "dead_jobs",
        "text": format!(
            "tickler: {total} jobs ended dead ({}); see them with tickler jobs list --status dead, redrive with tickler jobs bulk redrive",
            topics.join(", ")
        ),
        "count": total,
        "topics": dead,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_jobs_are_grouped_by_topic_the_most_first() {
        let at = Utc::now();
        let rows: Vec<_> = [(1, "b"), (2, "a"), (3, "b"), (4, "c"), (5, "b")]
            .iter()
            .map(|(id, t)| (*id, t.to_string(), at))
            .collect();
        let dead = by_topic(&rows);
        assert_eq!(dead[0].topic, "b");
        assert_eq!((dead[0].count, dead[0].ids.clone()), (3, vec![1, 3, 5]));
        assert_eq!(dead.iter().map(|d| d.count).sum::<u64>(), 5);
    }

    #[test]
    fn a_dead_jobs_body_says_how_many_where_and_which() {
        let body = dead_body(&[
            DeadSince {
                topic: "orders".into(),
                count: 3,
                ids: vec![1, 2, 3],
            },
            DeadSince {
                topic: "mail".into(),
                count: 1,
                ids: vec![9],
            },
        ]);
        assert_eq!(body["event"], "dead_jobs");
        assert_eq!(body["count"], 4);
        assert_eq!(body["topics"][0]["ids"], json!([1, 2, 3]));
        let text = body["text"].as_str().unwrap();
        assert!(
            text.contains("4 jobs ended dead (3 on orders, 1 on mail)"),
            "{text}"
        );
    }
}
