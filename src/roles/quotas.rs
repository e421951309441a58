//! The quota counter (part of the reconciler's role): counts again, every
//! `api.quota_recount_ms`, what each token with a quota holds — its
//! pending jobs and their payload bytes — so that jobs which left pending
//! (sent, cancelled, expired) stop counting against it; and forgets the
//! done jobs of tokens noted without a quota (topics grouped by token). Creates charge
//! their jobs as they commit (see `store::quotas`); this pass only ever
//! gives room back, exactly.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::roles::service::Service;
use crate::store::{Store, StoreError};

/// Counts the usage of every token with a quota.
pub struct QuotaCounter {
    store: Store,
    interval: Duration,
}

impl QuotaCounter {
    pub fn new(store: Store, config: &Config) -> Self {
        QuotaCounter {
            store,
            interval: Duration::from_millis(config.api.quota_recount_ms),
        }
    }
}

impl Service for QuotaCounter {
    /// Tokens counted.
    type Report = usize;
    type Error = StoreError;
    const NAME: &'static str = "quotas";
    const PASS: &'static str = "quota_recount";

    fn interval(&self) -> Duration {
        self.interval
    }

    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<usize, StoreError> {
        let tokens = self.store.quota_tokens_counted().await?;
        for token in &tokens {
            self.store.quota_recount(*token).await?;
        }
        Ok(tokens.len())
    }
}
