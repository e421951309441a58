//! The hand-edit observer (part of the reconciler's role, with
//! `mysql.history_hand_edits = observe`): every `reconciler.interval_ms`,
//! records as actor `sql` the rows changed since its last pass whose
//! status, due time or attempt is not what their history says — hand
//! edits, recorded without a trigger ([`crate::store`]'s `hand_edits.rs`
//! says how, and what it does not see). Every instance of the role runs
//! it; a compare-and-set keeps two from recording one edit twice.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::roles::service::Service;
use crate::store::{HandEditsChecked, Store, StoreError, OBSERVE_OVERLAP};

/// How far back the first pass after a start reads: edits made while no
/// instance observed, a restart's length.
pub const START_LOOKBACK: Duration = Duration::from_secs(60);

pub struct HandEditObserver {
    store: Store,
    interval: Duration,
    /// Database time of the last pass.
    observed_at: Option<DateTime<Utc>>,
    /// Rows found unedited, not compared again while the overlap reads
    /// them again.
    checked: HandEditsChecked,
}

impl HandEditObserver {
    pub fn new(store: Store, config: &Config) -> Self {
        HandEditObserver {
            store,
            interval: Duration::from_millis(config.reconciler.interval_ms),
            observed_at: None,
            checked: HandEditsChecked::default(),
        }
    }
}

impl Service for HandEditObserver {
    /// Hand edits recorded.
    type Report = u64;
    type Error = StoreError;
    const NAME: &'static str = "hand edits";
    const PASS: &'static str = "hand_edits_observe";

    fn interval(&self) -> Duration {
        self.interval
    }

    /// Database time: the rows' `updated_at` is compared with it.
    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        self.store.db_now().await
    }

    async fn run_once(&mut self, now: DateTime<Utc>) -> Result<u64, StoreError> {
        let since = match self.observed_at {
            Some(at) => at - OBSERVE_OVERLAP,
            None => now - START_LOOKBACK,
        };
        let recorded = self
            .store
            .hand_edits_observe(since, now, &mut self.checked)
            .await?;
        self.observed_at = Some(now);
        Ok(recorded)
    }

    fn passed(&self, recorded: &u64) -> bool {
        if *recorded > 0 {
            tracing::info!(recorded, "hand edits recorded in the history as actor sql");
        }
        false
    }
}
