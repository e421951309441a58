//! The store's handle: the [`Store`] every statement file adds its methods
//! to (a pool, the clock, the keyring and codec rows are written and read
//! with, the actor the history names), its constructors and migrations,
//! and the [`Actor`] who writes.

use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlPool;
use sqlx::{MySql, Transaction};

use super::id_blocks::IdBlocks;
use super::pool;
use super::sql::session_clock_set;
use super::StoreError;
use crate::domain::clock::Clock;
use crate::domain::compression::Codec;
use crate::domain::keys::Keyring;

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
    pub(super) pool: MySqlPool,
    /// Who writes through this handle, as the history names them: the
    /// pool's actor, or the caller's for the API (`api:<token name>`) and a
    /// bulk operation (`bulk:<id>`).
    pub(super) actor: Arc<str>,
    /// The API token whose quota this handle's creates are charged to
    /// (see [`Store::with_quota`]).
    pub(super) quota: Option<u64>,
    /// Seals the payloads and headers it writes, opens those it reads.
    pub(super) keys: Keyring,
    /// Compresses the payloads it writes, expands those it reads.
    pub(super) codec: Codec,
    /// The ids this handle (and its clones) hands new jobs (see
    /// `id_blocks.rs`).
    pub(super) ids: Arc<IdBlocks>,
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
            ids: Arc::default(),
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
    pub(super) async fn begin(&self) -> Result<Transaction<'static, MySql>, StoreError> {
        Ok(self.pool.begin().await?)
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
