//! Topic controls: which topics are paused and how fast each may be
//! dispatched. MySQL's `topic_controls` is the truth (set through the API
//! or by hand); every instance keeps a copy, read again every second.
//!
//! A pause needs no copy to hold: the dispatcher's compare-and-set itself
//! refuses the jobs of a paused topic, so once a pause commits nothing more
//! of the topic is produced (a job claimed just before is already on its
//! way). The copy serves pacing (the dispatcher asks the topic's shared
//! pace in Redis only for topics that have one) and noticing a resume (the
//! paused topic's jobs left the index; they go back in).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::{Index, IndexError};
use crate::metrics;
use crate::store::{Store, StoreError};

/// How often every instance reads the controls again.
pub const CONTROLS_REFRESH: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
struct Snapshot {
    paused: HashSet<String>,
    /// Paces set through the API (or by hand), jobs per second.
    rates: HashMap<String, u32>,
}

/// This instance's copy of the topic controls. Cheap to clone.
#[derive(Clone)]
pub struct TopicControls {
    snapshot: Arc<RwLock<Snapshot>>,
    store: Store,
    config: Arc<Config>,
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl TopicControls {
    pub fn new(store: Store, config: Arc<Config>) -> TopicControls {
        TopicControls {
            snapshot: Arc::default(),
            store,
            config,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The pace of `topic`, jobs per second: the API's, else the
    /// configuration's, else none.
    pub fn rate(&self, topic: &str) -> Option<u32> {
        self.read()
            .rates
            .get(topic)
            .copied()
            .or_else(|| self.config.max_per_second_for(topic))
            .filter(|rate| *rate > 0)
    }

    /// Whether any topic has a pace (else the dispatcher skips pacing).
    pub fn any_paced(&self) -> bool {
        !self.read().rates.is_empty()
            || self
                .config
                .topics
                .values()
                .any(|t| t.max_per_second.is_some())
    }

    pub fn is_paused(&self, topic: &str) -> bool {
        self.read().paused.contains(topic)
    }

    /// Reads the controls again; returns the topics paused before and not
    /// now (resumed).
    pub async fn refresh(&self) -> Result<Vec<String>, StoreError> {
        let rows = self.store.topic_controls().await?;
        let mut fresh = Snapshot::default();
        for row in rows {
            if row.paused {
                fresh.paused.insert(row.topic.clone());
            }
            if let Some(rate) = row.max_per_second {
                fresh.rates.insert(row.topic, rate);
            }
        }
        let mut snapshot = self
            .snapshot
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let resumed = snapshot
            .paused
            .iter()
            .filter(|topic| !fresh.paused.contains(*topic))
            .cloned()
            .collect();
        *snapshot = fresh;
        Ok(resumed)
    }

    /// Reads the controls every second until `cancel` fires. With
    /// `reindex` (the reconciler's role), a topic seen resuming has its jobs
    /// due within the window put back in the index — however it was resumed
    /// (the API, or an UPDATE by hand).
    pub async fn run(self, cancel: CancellationToken, reindex: Option<(Index, Arc<Notify>)>) {
        loop {
            match self.refresh().await {
                Ok(resumed) => {
                    if let Some((index, wake)) = &reindex {
                        for topic in resumed {
                            match topic_reindex(&self.store, index, &topic, self.config.window())
                                .await
                            {
                                Ok(n) => {
                                    tracing::info!(
                                        topic,
                                        num_jobs = n,
                                        "topic resumed: its due jobs are back in the index"
                                    );
                                    wake.notify_one();
                                }
                                Err(err) => {
                                    tracing::warn!(topic, error = %err, "cannot re-index a resumed topic; the overdue probe will")
                                }
                            }
                        }
                    }
                }
                Err(err) => tracing::warn!(error = %err, "cannot read the topic controls"),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CONTROLS_REFRESH) => {}
            }
        }
    }
}

/// Puts the pending jobs of `topic` due within `window` of now back in the
/// index (those already there are left alone). Returns how many were read.
pub async fn topic_reindex(
    store: &Store,
    index: &Index,
    topic: &str,
    window: Duration,
) -> Result<u64, ControlError> {
    const PAGE: u32 = 5_000;
    let until: DateTime<Utc> = store.db_now().await? + window;
    let mut after = 0;
    let mut total = 0;
    loop {
        let page = store
            .job_list_pending_topic(topic, until, after, PAGE)
            .await?;
        let entries: Vec<_> = page.iter().map(|e| (e.id, e.schedule_time)).collect();
        index.job_refeed_many(&entries).await?;
        total += page.len() as u64;
        metrics::loader_indexed(page.len());
        match page.last() {
            Some(last) if page.len() == PAGE as usize => after = last.id,
            _ => return Ok(total),
        }
    }
}
