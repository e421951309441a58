//! A scratch database for the store's own tests (`tests/store_*.rs`): a
//! migrated database of the test's own, a [`Store`] on it, a plain pool for
//! hand edits and assertions, and an instance holding every shard (the
//! fence a claim needs). No Redis, no broker.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{Duration as Span, Utc};
use tickler::domain::job::{JobId, NewJob, PayloadKind, Schedule};
use tickler::domain::policy::Policy;
use tickler::store::{Actor, Dispatched, Fence, Store};

use crate::{database_create, database_drop, fence_all, mysql_server_url};

/// Shards of a scratch database, all held by [`Db::fence`].
pub const SHARDS: u32 = 4;

/// The claim lease of the tests' claims: long enough never to expire
/// within a test.
pub const LEASE: Duration = Duration::from_secs(30);

pub struct Db {
    pub name: String,
    /// The database's URL, for a second handle (another actor).
    pub url: String,
    /// Writes as `dispatcher` in the jobs' history.
    pub store: Store,
    /// For hand edits: its writes are recorded as `sql`.
    pub sql: sqlx::MySqlPool,
    /// An instance holding every shard: the claims' fence.
    pub fence: Fence,
    finished: bool,
}

impl Db {
    pub async fn new() -> Db {
        let (name, url) = database_create().await;
        let store = Store::connect_lazy(&url, 4, Actor::Dispatcher).unwrap();
        let fence = fence_all(&store, SHARDS).await;
        let sql = sqlx::MySqlPool::connect(&url).await.unwrap();
        Db {
            name,
            url,
            store,
            sql,
            fence,
            finished: false,
        }
    }

    /// A handle on the same database writing as `actor` (for `Actor::Api`,
    /// name the caller with [`Store::with_actor`]).
    pub fn store_as(&self, actor: Actor) -> Store {
        Store::connect_lazy(&self.url, 2, actor).unwrap()
    }

    /// A job due `in_ms` from now (negative: overdue) with `max_attempts`.
    pub async fn job(&self, in_ms: i64, max_attempts: u32) -> JobId {
        let job = NewJob {
            policy: Policy {
                max_attempts,
                ..Policy::default()
            },
            ..job_new("store-test", in_ms)
        };
        self.store.job_insert(&job).await.unwrap().0.id
    }

    /// Claims `ids` (due) under `token` and marks them dispatched, each at
    /// partition 0 and its id as offset.
    pub async fn dispatch(&self, ids: &[JobId], token: u64) {
        let claim = self
            .store
            .job_claim_many(ids, token, LEASE, &self.fence)
            .await
            .unwrap();
        assert_eq!(claim.won.len(), ids.len(), "every job is due and pending");
        let marks: Vec<Dispatched> = claim
            .won
            .iter()
            .map(|job| Dispatched {
                id: job.id,
                token,
                partition: 0,
                offset: job.id as i64,
                dispatched_at: Utc::now(),
                schedule_time: job.schedule_time,
                attempt: job.attempt,
            })
            .collect();
        let marked = self.store.job_mark_dispatched_many(&marks).await.unwrap();
        assert_eq!(marked.marked, ids.len() as u64);
    }

    /// Runs one statement of hand-written SQL binding `id`.
    pub async fn edit(&self, sql: &str, id: u64) {
        sqlx::query(sql).bind(id).execute(&self.sql).await.unwrap();
    }

    pub async fn finish(mut self) {
        self.finished = true;
        self.sql.close().await;
        self.store.close().await;
        database_drop(&self.name).await;
    }
}

/// Drops the database of a test that did not reach `finish` (it panicked).
impl Drop for Db {
    fn drop(&mut self) {
        if !self.finished {
            crate::scratch_database_drop_blocking(mysql_server_url(), self.name.clone());
        }
    }
}

/// A job on `topic` due `in_ms` from now, with a JSON payload and the
/// default policy; change what a test needs with `..job_new(…)`.
pub fn job_new(topic: &str, in_ms: i64) -> NewJob {
    NewJob {
        topic: topic.to_owned(),
        key: None,
        payload: b"{}".to_vec(),
        payload_kind: PayloadKind::Json,
        headers: BTreeMap::new(),
        schedule: Schedule::At(Utc::now() + Span::milliseconds(in_ms)),
        policy: Policy::default(),
        trace_parent: None,
        schedule_id: None,
        expires_at: None,
        expires_after_ms: None,
        window: None,
        wall: None,
    }
}
