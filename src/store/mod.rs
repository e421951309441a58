//! The store: the only code that speaks SQL. MySQL is the source of truth,
//! so every state change here is a compare-and-set on `status` (and, for a
//! claim, a token) — MySQL decides, Redis only suggests.
//!
//! The SQL runs on MySQL 8.0 and MariaDB 10.6+: no `RETURNING`, no
//! engine-only functions. "Now" is always the database's `UTC_TIMESTAMP(3)`,
//! never a tickler host's clock, and sessions are forced to UTC.
//!
//! This file is the store's face: the map of its files, what they make
//! public, the [`Actor`] who writes, and the [`Store`] handle with its
//! constructors. Below the statements' files lie the error and its
//! classes (`error.rs`), failover's demoted connections (`failover.rs`),
//! connecting and the pool's hooks (`pool.rs`), and the shared SQL
//! fragments with the session clock (`sql.rs`).

mod audit;
mod bulk;
mod cluster;
mod compression;
mod dispatch;
mod error;
mod failover;
mod forecast;
mod history;
mod job_row;
mod jobs;
mod migrate;
mod pool;
mod quotas;
mod results;
mod schedules;
pub mod scratch;
mod sealing;
mod sql;
mod stats;
mod tokens;
mod topics;
mod watermarks;

use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlPool;
use sqlx::{ConnectOptions, Connection, MySql, Transaction};

use crate::config::SchemaBaseline;
use crate::domain::clock::Clock;
use crate::domain::compression::Codec;
use crate::domain::keys::Keyring;
use pool::connect_options;
use sql::session_clock_set;

pub use audit::{AuditEntry, AuditFilter, AuditRow};
pub use bulk::{BulkAction, BulkBatch, BulkFilter, BulkOp, BulkStatus};
pub use cluster::{instances_describe, Beat, Fence, InstanceInfo, InstanceRow, LeaseRow};
pub use compression::{CompressionSample, DictInfo, PayloadSamples};
pub use dispatch::{ClaimOutcome, Dispatched, Doubt, Marked};
pub use error::StoreError;
pub use forecast::DueCount;
pub use history::{BrokenTrigger, HandEditsState};
pub use job_row::WindowEntry;
pub use jobs::{BatchRow, Cancelled, JobChanges, JobEvent, JobFilter, Modified};
pub use migrate::{built_for, newest as schema_newest};
pub use pool::tls_probe;
pub use quotas::QuotaUsage;
pub use results::{DeadLetter, Decided, Disposition, Redriven};
pub use schedules::{
    occurrence_placed, Materialized, NewSchedule, PendingOccurrences, Placed, ScheduleDef,
    ScheduleRow, ScheduleStats, ScheduleStatus, ScheduleUpdate,
};
pub use sealing::{instance_may_hold, KeyCount, KeyUsed, Rotation, SCHEMA as SEALING_SCHEMA};
pub use stats::{CountCursor, DeadSince, Overdue, Position, TopicCount, COUNTED};
pub use tokens::{NewToken, TokenRow};
pub use topics::{JobPacing, TopicChange, TopicControl};
pub use watermarks::Watermark;

/// Who changes rows through a store handle, as the jobs' history shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    Api,
    Dispatcher,
    Reconciler,
    Results,
    /// The materializer, creating the occurrences of schedules.
    Scheduler,
    /// Membership: puts the claims of a dead instance in doubt.
    Membership,
    /// `tickler doctor --repair`.
    Doctor,
    /// The administration commands (`tickler instances`, `shards`,
    /// `token`).
    Cli,
    /// `tickler bench`, seeding and measuring.
    Bench,
    /// `tickler import`, loading jobs from a file.
    Import,
    /// The Kafka ingress (`ingress:<request topic>` in the history).
    Ingress,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Api => "api",
            Actor::Dispatcher => "dispatcher",
            Actor::Reconciler => "reconciler",
            Actor::Results => "results",
            Actor::Scheduler => "scheduler",
            Actor::Membership => "membership",
            Actor::Doctor => "doctor",
            Actor::Cli => "cli",
            Actor::Bench => "bench",
            Actor::Import => "import",
            Actor::Ingress => "ingress",
        }
    }
}

/// Handle to the jobs database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    pool: MySqlPool,
    /// Who writes through this handle, as the history names them: the
    /// pool's actor, or the caller's for the API (`api:<token name>`) and a
    /// bulk operation (`bulk:<id>`).
    actor: Arc<str>,
    /// The API token whose quota this handle's creates are charged to
    /// (see [`Store::with_quota`]).
    quota: Option<u64>,
    /// Seals the payloads and headers it writes, opens those it reads.
    keys: Keyring,
    /// Compresses the payloads it writes, expands those it reads.
    codec: Codec,
}

impl Store {
    /// Connects lazily: the pool opens connections on first use, so a
    /// process can start (and answer 503) while MySQL is down.
    ///
    /// `actor` names who changes rows through this handle in the jobs'
    /// history (see [`Actor`]). Each connection also sets `@tickler_actor`:
    /// the trigger that records hand edits (`history_hand_edits =
    /// trigger`) leaves tickler's sessions alone by it.
    pub fn connect_lazy(url: &str, pool_size: u32, actor: Actor) -> Result<Store, StoreError> {
        Store::connect_clocked(url, pool_size, actor, &Clock::real())
    }

    /// As [`Store::connect_lazy`], on `clock`: on `tickler dev`'s virtual
    /// clock every use of a connection starts by setting its session's
    /// `timestamp` to the server's clock plus the clock's offset (see
    /// [`crate::domain::clock`]); on a real clock nothing is added.
    pub fn connect_clocked(
        url: &str,
        pool_size: u32,
        actor: Actor,
        clock: &Clock,
    ) -> Result<Store, StoreError> {
        // Membership judges other instances dead by rows other nodes
        // write: on Galera it reads only after its node caught up.
        let causal = actor == Actor::Membership;
        let pool = pool::pool_lazy(url, pool_size, actor.as_str(), causal, clock)?;
        Ok(Store {
            pool,
            actor: Arc::from(actor.as_str()),
            quota: None,
            keys: Keyring::none(),
            codec: Codec::off(),
        })
    }

    /// Whether the database takes a clock `offset_ms` ahead of its own
    /// (MariaDB before 11.5 takes no `timestamp` past 2038-01-19).
    pub async fn clock_offset_check(&self, offset_ms: i64) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        let set = session_clock_set(&mut conn, offset_ms).await;
        // Back to the session's clock before the connection goes back.
        sqlx::query("SET timestamp = DEFAULT")
            .execute(&mut *conn)
            .await?;
        Ok(set?)
    }

    /// This handle, writing as `actor` (e.g. `api:billing-svc`) in the jobs'
    /// history.
    pub fn with_actor(&self, actor: &str) -> Store {
        Store {
            actor: Arc::from(actor),
            ..self.clone()
        }
    }

    /// This handle with `keys`: payloads and headers are sealed under the
    /// active one as they are written, and opened as they are read (see
    /// [`crate::domain::keys`]).
    pub fn with_keys(&self, keys: Keyring) -> Store {
        Store {
            keys,
            ..self.clone()
        }
    }

    /// This handle with `codec`: payloads are compressed as they are
    /// written when it is on, and expanded as they are read (see
    /// [`crate::domain::compression`]).
    pub fn with_codec(&self, codec: Codec) -> Store {
        Store {
            codec,
            ..self.clone()
        }
    }

    /// The codec this handle compresses and expands payloads with.
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// This handle, charging the jobs it creates to the quota of the API
    /// token `token` (None: to none). A create that would pass it is
    /// [`StoreError::QuotaExceeded`], and writes nothing.
    pub fn with_quota(&self, token: Option<u64>) -> Store {
        Store {
            quota: token,
            ..self.clone()
        }
    }

    /// The keys this handle seals and opens payloads and headers with.
    pub fn keys(&self) -> &Keyring {
        &self.keys
    }

    /// Who writes through this handle, as the history names them.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    /// A transaction for a write.
    async fn begin(&self) -> Result<Transaction<'static, MySql>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// Applies every migration in `migrations/` not yet applied; returns the
    /// names of those it applied.
    pub async fn migrate(url: &str) -> Result<Vec<String>, StoreError> {
        Store::migrate_to(url, None).await
    }

    /// [`Store::migrate`], stopping after migration `to` when given: a live
    /// upgrade applies what the running version can work beside first
    /// (docs/upgrades.md, "Upgrading a live deployment").
    pub async fn migrate_to(url: &str, to: Option<u32>) -> Result<Vec<String>, StoreError> {
        Store::migrate_with(url, to, SchemaBaseline::Auto).await
    }

    /// [`Store::migrate_to`], installing an empty database's schema from
    /// `schema/baseline.sql` as `baseline` says (TiDB's cannot run every
    /// migration as written).
    pub async fn migrate_with(
        url: &str,
        to: Option<u32>,
        baseline: SchemaBaseline,
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = connect_options(url)?.connect().await?;
        let mut applied = Vec::new();
        let wanted = match baseline {
            SchemaBaseline::On => true,
            SchemaBaseline::Off => false,
            SchemaBaseline::Auto => migrate::server_is_tidb(&mut conn).await?,
        };
        let short_of_baseline =
            to.is_some_and(|to| i64::from(to) < i64::from(migrate::BASELINE_VERSION));
        if wanted && !short_of_baseline {
            if let Some(done) = migrate::baseline_install(&mut conn).await? {
                applied.push(done);
            }
        }
        migrate::contracting_check(
            &mut conn,
            to.map(|to| i32::try_from(to).unwrap_or(i32::MAX)),
        )
        .await
        .map_err(StoreError::MigrationRefused)?;
        let mut migrator = migrate::Migrator::new(conn);
        let target = match to {
            Some(version) => {
                refinery_core::Target::Version(i32::try_from(version).unwrap_or(i32::MAX))
            }
            None => refinery_core::Target::Latest,
        };
        if to.is_none_or(|to| to >= migrate::ENC_KEYS_FILLED) {
            // Up to the table, filled by a read that locks nothing, then on.
            let report = migrate::migrations::runner()
                .set_abort_divergent(true)
                .set_target(refinery_core::Target::Version(
                    migrate::ENC_KEYS_FILLED as i32 - 1,
                ))
                .run_async(&mut migrator)
                .await?;
            applied.extend(report.applied_migrations().iter().map(|m| m.to_string()));
            migrate::enc_keys_fill(&mut migrator.conn).await?;
        }
        let report = migrate::migrations::runner()
            .set_abort_divergent(true)
            .set_target(target)
            .run_async(&mut migrator)
            .await?;
        let _ = migrator.conn.close().await;
        applied.extend(report.applied_migrations().iter().map(|m| m.to_string()));
        Ok(applied)
    }

    /// The database's clock: the one clock that decides due-ness.
    pub async fn db_now(&self) -> Result<DateTime<Utc>, StoreError> {
        let now: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&self.pool)
            .await?;
        Ok(now.and_utc())
    }

    /// Answers whether the database takes queries.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// The newest migration applied to this database (0: none).
    pub async fn schema_applied(&self) -> Result<i32, StoreError> {
        let newest: Option<i32> =
            sqlx::query_scalar("SELECT MAX(version) FROM refinery_schema_history")
                .fetch_one(&self.pool)
                .await?;
        Ok(newest.unwrap_or(0))
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
