//! The store: the only code that speaks SQL. MySQL is the source of truth,
//! so every state change here is a compare-and-set on `status` (and, for a
//! claim, a token) — MySQL decides, Redis only suggests.
//!
//! The SQL runs on MySQL 8.0 and MariaDB 10.6+: no `RETURNING`, no
//! engine-only functions. "Now" is always the database's `UTC_TIMESTAMP(3)`,
//! never a tickler host's clock, and sessions are forced to UTC.

mod audit;
mod bulk;
mod cluster;
mod compression;
mod dispatch;
mod forecast;
mod history;
mod job_row;
mod jobs;
mod migrate;
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

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::config::SchemaBaseline;
use crate::domain::clock::Clock;
use crate::domain::compression::Codec;
use crate::domain::keys::Keyring;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlSslMode};
use sqlx::{ConnectOptions, Connection, Executor, MySql, Transaction};

pub use audit::{AuditEntry, AuditFilter, AuditRow};
pub use bulk::{BulkAction, BulkBatch, BulkFilter, BulkOp, BulkStatus};
pub use cluster::{instances_describe, Beat, Fence, InstanceInfo, InstanceRow, LeaseRow};
pub use compression::{CompressionSample, DictInfo, PayloadSamples};
pub use dispatch::{ClaimOutcome, Dispatched, Doubt, Marked};
pub use forecast::DueCount;
pub use history::{BrokenTrigger, HandEditsState};
pub use job_row::WindowEntry;
pub use jobs::{BatchRow, Cancelled, JobChanges, JobEvent, JobFilter, Modified};
pub use migrate::{built_for, newest as schema_newest};
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

/// Store failures a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} not found")]
    NotFound(u64),
    #[error("a job with this topic and key exists already")]
    DuplicateKey,
    #[error("the database is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The database rolled the statement back to break a deadlock or a
    /// lock wait with another one: nothing was written, and trying again
    /// is safe.
    #[error("the database rolled back a conflicting statement: {0}")]
    Contention(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Query(#[source] sqlx::Error),
    #[error("stored row is malformed: {0}")]
    Corrupt(String),
    /// A payload compressed with a dictionary this instance has not
    /// loaded yet (`payload_dicts`): it is, within seconds.
    #[error("payload dictionary {0} is not loaded yet")]
    DictionaryUnknown(u16),
    /// A row sealed under a key this instance does not hold: another live
    /// instance may (a fleet halfway through adding a key), and the row is
    /// left to it; when none does, it is set aside like a broken row.
    #[error(
        "job {id}: sealed under key {key:?}, which this instance does not have (encryption.keys)"
    )]
    KeyMissing { id: u64, key: String },
    #[error("migration failed: {0}")]
    Migration(#[from] refinery_core::Error),
    /// A create through a token would pass its quota (`api_tokens`
    /// `max_pending_jobs`, `max_payload_bytes`): nothing was written.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A migration not applied, and why.
    #[error("migration refused: {0}")]
    MigrationRefused(String),
}

impl StoreError {
    /// A moment's failure that nothing was written by, to wait out and try
    /// again (the database failing over, a rolled-back conflict, a payload
    /// dictionary not loaded yet), never the caller's fault nor a reason to
    /// skip work.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Contention(_)
                | StoreError::DictionaryUnknown(_)
        )
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => StoreError::Unavailable(err),
            sqlx::Error::Database(ref db) if db.is_unique_violation() => StoreError::DuplicateKey,
            sqlx::Error::Database(ref db) => {
                let refusal = db
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .map(|e| server_refusal_kind(e.number(), e.message()));
                match refusal {
                    Some(Some(Refusal::Contention)) => StoreError::Contention(err),
                    Some(Some(Refusal::NotNow)) => StoreError::Unavailable(err),
                    Some(Some(Refusal::NotPrimary)) => {
                        connections_demote();
                        StoreError::Unavailable(err)
                    }
                    _ => StoreError::Query(err),
                }
            }
            other => StoreError::Query(other),
        }
    }
}

/// Why a server refused a statement, when the refusal is the server's
/// state and not the statement's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The statement was rolled back for a conflict with another one:
    /// nothing was written, and trying again at once is safe.
    Contention,
    /// The server cannot take it now (going away, full, killed, not
    /// ready): nothing the caller can fix, tried again later.
    NotNow,
    /// The server takes no writes: a demoted primary (read-only during a
    /// switchover), or a Galera node out of its cluster. Every connection
    /// made before this answer may point at it; they are not reused.
    NotPrimary,
}

/// The server-side error numbers (MySQL 8, MariaDB, Galera, Group
/// Replication, Aurora, TiDB) that say "not now" rather than "this request
/// is wrong", with the server's `message` for the one number that needs it
/// (1105). Everything else is a failure of the statement.
fn server_refusal_kind(number: u16, message: &str) -> Option<Refusal> {
    match number {
        // 1213: deadlock (and Galera's certification failure), 1205: lock
        // wait timeout, 1467: the same on a table's AUTO-INC lock, 3100:
        // group replication rolled the commit back. TiDB's: 9007 write
        // conflict (at COMMIT in optimistic mode), 8002 a locking read's
        // conflict, 8022 the transaction's retry failed, 8028 the table's
        // schema changed under the transaction.
        //
        // 1180, "Got error N during COMMIT": the engine refused the commit
        // and rolled the transaction back whole; on Galera, its
        // certification failed or a replicated write aborted it
        // (brute-force abort), so nothing was committed anywhere. 3101,
        // Group Replication's "Plugin instructed the server to rollback
        // the current transaction": it lost certification to another
        // member's write, and was rolled back.
        1213 | 1205 | 1467 | 1180 | 3100 | 3101 | 9007 | 8002 | 8022 | 8028 => {
            Some(Refusal::Contention)
        }
        // 1105 is ER_UNKNOWN_ERROR, every server's and proxy's catch-all:
        // a refusal only when its text names a failover or a server that
        // takes no writes (Aurora during a failover).
        1105 => unknown_error_refusal(message),
        // 1290: running with --read-only / --super-read-only, 1836: in
        // read-only mode, 1047: Galera's "WSREP has not yet prepared node
        // for application use" (a node that left its cluster's primary
        // component), 1792: a READ ONLY transaction, which tickler never
        // starts, so the server made it one (an Aurora writer demoted to a
        // reader by a failover).
        1290 | 1836 | 1047 | 1792 => Some(Refusal::NotPrimary),
        // 1040: too many connections, 1203: the account's
        // max_user_connections, 1226: an account resource limit, 1053:
        // server shutdown in progress, 1927 (MariaDB) and 3169 (MySQL): the
        // connection was killed, 1317: the query was interrupted (KILL
        // QUERY), 4031: disconnected for inactivity, 1158-1161: network
        // read or write errors, 2006 and 2013: gone away or lost (as a
        // proxy relays them), 1969 (MariaDB max_statement_time) and 3024
        // (MySQL max_execution_time): the statement ran out of time, 1637:
        // too many active transactions, 1041: out of memory. TiDB's 9001
        // (PD timeout), 9002 (TiKV timeout), 9003 (TiKV busy), 9004
        // (resolve-lock timeout), 9005 (region unavailable), 8027 (schema
        // out of date).
        1040
        | 1203
        | 1226
        | 1053
        | 1927
        | 3169
        | 1317
        | 4031
        | 1158..=1161
        | 2006
        | 2013
        | 1969
        | 3024
        | 1637
        | 1041
        | 9001..=9005
        | 8027 => Some(Refusal::NotNow),
        _ => None,
    }
}

/// The texts of an error 1105 that say the server takes no writes at the
/// moment: Aurora's during a failover ("The MySQL server is running with
/// the --read-only option…", "…failover in progress…"), a proxy's "not the
/// primary". Compared without case; any other 1105 is the statement's.
fn unknown_error_refusal(message: &str) -> Option<Refusal> {
    const NOT_PRIMARY: [&str; 10] = [
        "failover",
        "fail over",
        "failing over",
        "read-only",
        "read only",
        "read_only",
        "not primary",
        "not the primary",
        "not a primary",
        "not the master",
    ];
    let message = message.to_ascii_lowercase();
    NOT_PRIMARY
        .iter()
        .any(|text| message.contains(text))
        .then_some(Refusal::NotPrimary)
}

/// When a server last answered "not the primary", as nanoseconds after
/// [`demotions_epoch`]; 0 when never. Process-wide rather than per pool:
/// every pool of a process points at the same database address, and a
/// connection opened before a switchover may still be held by the old
/// primary (a TCP proxy keeps established sessions on the server it chose).
static DEMOTED_AT_NS: AtomicU64 = AtomicU64::new(0);

fn demotions_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Marks every connection opened until now as pointing at a server that
/// takes no writes: the pools close them rather than reuse them.
fn connections_demote() {
    let since = demotions_epoch().elapsed().as_nanos();
    DEMOTED_AT_NS.fetch_max(
        u64::try_from(since).unwrap_or(u64::MAX).max(1),
        Ordering::Relaxed,
    );
}

/// Whether a connection of `age` was opened before the last "not the
/// primary" answer: then it is closed, and the pool opens a new one to
/// whatever the address names now.
fn connection_demoted(age: Duration) -> bool {
    let demoted_ns = DEMOTED_AT_NS.load(Ordering::Relaxed);
    if demoted_ns == 0 {
        return false;
    }
    let demoted_at = demotions_epoch() + Duration::from_nanos(demoted_ns);
    // Opened at now - age: before the demotion if that is earlier.
    Instant::now()
        .checked_sub(age)
        .is_none_or(|opened_at| opened_at <= demoted_at)
}

/// Runs `write` again, after a short jittered pause, while the database
/// rolls it back for contention (at most `CONTENTION_TRIES` times in all).
/// Only for writes that are one statement or one transaction: a rolled-back
/// attempt wrote nothing.
pub(crate) async fn contention_retry<T, F, Fut>(mut write: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    const CONTENTION_TRIES: u32 = 4;
    let mut tries = 1;
    loop {
        match write().await {
            Err(StoreError::Contention(err)) if tries < CONTENTION_TRIES => {
                tracing::debug!(error = %err, tries, "write rolled back for contention; trying again");
                let pause_ms = rand::random_range(5..=20u64) * u64::from(tries);
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                tries += 1;
            }
            other => return other,
        }
    }
}

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
    /// the trigger that records hand edits (`mysql.history_hand_edits =
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
        let options = connect_options(url)?;
        let set_actor = format!("SET @tickler_actor = '{}'", actor.as_str());
        let connect_clock = clock.is_virtual().then(|| clock.clone());
        let acquire_clock = connect_clock.clone();
        let pool = MySqlPoolOptions::new()
            .max_connections(pool_size)
            .min_connections(0)
            // A caller waiting on a dead database gets an answer quickly.
            .acquire_timeout(Duration::from_secs(3))
            .after_connect(move |conn, _meta| {
                let set_actor = set_actor.clone();
                let clock = connect_clock.clone();
                Box::pin(async move {
                    conn.execute(set_actor.as_str()).await?;
                    // Every write here is a compare-and-set on rows found by
                    // primary key, or a read of rows the transaction holds:
                    // none needs REPEATABLE READ's gap locks, which
                    // deadlocked creates, claims and marks under load.
                    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                        .await?;
                    if actor == Actor::Membership {
                        causal_reads(conn).await?;
                    }
                    if let Some(clock) = clock {
                        session_clock_set(conn, clock.offset_ms()).await?;
                    }
                    Ok(())
                })
            })
            // A connection opened before a server answered "not the
            // primary" is closed rather than used again, whether idle or
            // just returned.
            .before_acquire(move |conn, meta| {
                let clock = acquire_clock.clone();
                Box::pin(async move {
                    if connection_demoted(meta.age) {
                        return Ok(false);
                    }
                    if let Some(clock) = clock {
                        session_clock_set(conn, clock.offset_ms()).await?;
                    }
                    Ok(true)
                })
            })
            .after_release(|_conn, meta| Box::pin(async move { Ok(!connection_demoted(meta.age)) }))
            .connect_lazy_with(options);
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

/// On Galera, makes this session's reads and writes wait until its node
/// has applied every transaction the cluster committed before them
/// (`wsrep_sync_wait`: reads, updates and deletes). Membership judges
/// other instances dead by their heartbeat rows, which other nodes write:
/// on a node applying late, a live instance's heartbeat would look old,
/// and its claims be settled while it still sends them. Elsewhere the
/// setting is harmless (MariaDB without Galera) or unknown (MySQL, TiDB:
/// error 1193, ignored).
async fn causal_reads(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    match conn.execute("SET SESSION wsrep_sync_wait = 3").await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(db))
            if db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|e| e.number() == 1193) =>
        {
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// What about the server tickler cannot run on, in words. On TiDB, its
/// optimistic transactions: tickler's compare-and-sets and fences rely on
/// a statement's locks being taken when it runs, not on a conflict found at
/// COMMIT (TiDB's default has been pessimistic since v3.0.8).
async fn server_refusal(conn: &mut sqlx::MySqlConnection) -> Option<String> {
    if !migrate::server_is_tidb(conn).await.unwrap_or(false) {
        return None;
    }
    let mode: Vec<u8> = sqlx::query_scalar("SELECT @@tidb_txn_mode")
        .fetch_one(conn)
        .await
        .ok()?;
    (String::from_utf8_lossy(&mode).eq_ignore_ascii_case("optimistic")).then(|| {
        "mysql.url: this TiDB runs optimistic transactions (tidb_txn_mode = 'optimistic'); \
         tickler needs pessimistic ones: SET GLOBAL tidb_txn_mode = 'pessimistic' \
         (docs/scaling.md, \"TiDB\")"
            .to_owned()
    })
}

/// Connects once, at start-up, to tell a TLS failure (a wrong CA, an
/// expired or mismatched certificate, a server without TLS where the URL
/// asks for it) from a database that is merely down: the first stops
/// start-up with a message naming the setting and the host; the second
/// does not (the API answers 503 until MySQL is back).
pub async fn tls_probe(url: &str) -> Result<(), String> {
    let options = connect_options(url).map_err(|err| err.to_string())?;
    let target = format!("{}:{}", options.get_host(), options.get_port());
    match tokio::time::timeout(Duration::from_secs(10), options.connect()).await {
        Ok(Ok(mut conn)) => {
            let refused = server_refusal(&mut conn).await;
            let _ = conn.close().await;
            refused.map_or(Ok(()), Err)
        }
        Ok(Err(err)) if is_tls_failure(&err) => Err(format!(
            "mysql.url: TLS to {target} failed: {err} (check ssl-mode, ssl-ca, ssl-cert and ssl-key in mysql.url)"
        )),
        Ok(Err(err)) => {
            tracing::warn!(%target, error = %err, "mysql does not answer yet; starting all the same");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(%target, "mysql did not answer within 10 s; starting all the same");
            Ok(())
        }
    }
}

/// A handshake the driver or rustls refused (an untrusted or mismatched
/// certificate arrives as an I/O error carrying rustls's).
fn is_tls_failure(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    }
}

/// Whether the URL's query sets `ssl-mode` (or `sslmode`).
fn url_names_ssl_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            key.eq_ignore_ascii_case("ssl-mode") || key.eq_ignore_ascii_case("sslmode")
        })
    })
}

/// Loopback addresses, `localhost` and Unix sockets: traffic that never
/// leaves the machine.
fn host_is_local(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('/')
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn connect_options(url: &str) -> Result<MySqlConnectOptions, StoreError> {
    let mut options = MySqlConnectOptions::from_str(url).map_err(StoreError::Query)?;
    // Beyond this machine, TLS with a verified certificate and host name,
    // unless the URL says otherwise (`?ssl-mode=disabled` on purpose). On
    // loopback, the driver's default: TLS if the server offers it.
    if !url_names_ssl_mode(url) && !host_is_local(options.get_host()) {
        options = options.ssl_mode(MySqlSslMode::VerifyIdentity);
    }
    // Every DATETIME tickler reads or writes is UTC, whatever the server's
    // default time zone; CURRENT_TIMESTAMP defaults follow the session zone.
    // sqlx adds PIPES_AS_CONCAT to the session's sql_mode unless told not
    // to; vtgate (Vitess) refuses that mode, and tickler never uses `||`.
    Ok(options
        .timezone(Some("+00:00".to_owned()))
        .charset("utf8mb4")
        .pipes_as_concat(false)
        .disable_statement_logging())
}

/// A time as a `DATETIME(3)` bind: truncated to the millisecond first.
/// MySQL rounds extra digits into a `DATETIME(3)` (…59.9996 becomes the
/// next second) where MariaDB truncates them; truncating here makes both
/// store the same value, and never one later than asked.
/// `SET timestamp` to the server's own clock (`SYSDATE(6)`, which that
/// variable does not move) plus `offset_ms`: from then on the session's
/// `UTC_TIMESTAMP(3)`, column defaults and triggers read that instant
/// (frozen until the next use of the connection sets it again).
async fn session_clock_set(
    conn: &mut sqlx::MySqlConnection,
    offset_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + ? / 1000")
        .bind(offset_ms)
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) fn db_time(at: DateTime<Utc>) -> NaiveDateTime {
    crate::domain::job::truncate_to_ms(at).naive_utc()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_time_is_truncated_to_the_millisecond_never_rounded_up() {
        let at = DateTime::parse_from_rfc3339("2026-12-31T23:59:59.9996Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(db_time(at).to_string(), "2026-12-31 23:59:59.999");
    }

    #[test]
    fn beyond_loopback_the_certificate_is_verified_unless_the_url_says_otherwise() {
        assert!(url_names_ssl_mode("mysql://u:p@db/x?ssl-mode=disabled"));
        assert!(url_names_ssl_mode("mysql://u:p@db/x?a=1&sslmode=REQUIRED"));
        assert!(!url_names_ssl_mode("mysql://u:p@db/x?ssl-ca=/ca.pem"));
        assert!(!url_names_ssl_mode("mysql://u:p@db/x"));
        for host in [
            "127.0.0.1",
            "localhost",
            "::1",
            "[::1]",
            "/run/mysqld/mysqld.sock",
        ] {
            assert!(host_is_local(host), "{host}");
        }
        for host in ["db.internal", "10.0.0.5", "0.0.0.0"] {
            assert!(!host_is_local(host), "{host}");
        }
    }

    #[test]
    fn a_servers_not_now_is_told_from_a_statements_fault() {
        // A switchover's read-only primary, a Galera node out of its
        // cluster, a READ ONLY transaction the server imposed: not the
        // primary.
        for number in [1290, 1836, 1047, 1792] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::NotPrimary),
                "{number}"
            );
        }
        // Full, going away, killed, out of time, TiDB busy.
        for number in [
            1040, 1203, 1053, 1927, 3169, 1317, 4031, 2006, 2013, 1969, 3024, 9003,
        ] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::NotNow),
                "{number}"
            );
        }
        // Rolled back for a conflict (Galera's certification failure is a
        // deadlock).
        for number in [1213, 1205, 1467, 3100, 9007] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::Contention),
                "{number}"
            );
        }
        // The statement's own fault: a syntax error, a missing table, a
        // bad value, access denied.
        for number in [1064, 1146, 1366, 1045, 1142] {
            assert_eq!(server_refusal_kind(number, ""), None, "{number}");
        }
    }

    #[test]
    fn a_commit_rolled_back_by_galera_or_group_replication_is_contention() {
        // Galera: certification failed, or a replicated write aborted the
        // transaction at its COMMIT; nothing was committed.
        for message in [
            "Got error 149 \"Lock deadlock; Try restarting transaction\" during COMMIT",
            "Got error 6 \"No such device or address\" during COMMIT",
        ] {
            assert_eq!(
                server_refusal_kind(1180, message),
                Some(Refusal::Contention),
                "{message}"
            );
        }
        // Group Replication: certification lost to another member.
        assert_eq!(
            server_refusal_kind(
                3101,
                "Plugin instructed the server to rollback the current transaction."
            ),
            Some(Refusal::Contention)
        );
    }

    #[test]
    fn an_unknown_error_is_a_refusal_only_when_it_names_a_failover() {
        // Aurora's during a failover, and a proxy's: not the primary.
        for message in [
            "The MySQL server is running with the --read-only option so it cannot execute this statement",
            "The MySQL server is running with the --super-read-only option so it cannot execute this statement",
            "Aurora failover in progress, try again",
            "Database is failing over",
            "Running in read only mode",
            "target is not the primary",
        ] {
            assert_eq!(
                server_refusal_kind(1105, message),
                Some(Refusal::NotPrimary),
                "{message}"
            );
        }
        // Any other 1105 is the statement's own failure.
        for message in [
            "",
            "Unknown error",
            "[planner:1105] Column 'x' in field list is ambiguous",
            "value too large for the primary key",
        ] {
            assert_eq!(server_refusal_kind(1105, message), None, "{message}");
        }
    }

    #[test]
    fn connections_opened_before_a_not_the_primary_answer_are_not_reused() {
        // Opened an hour ago: before any demotion this process can note.
        let old = Duration::from_secs(3_600);
        connections_demote();
        assert!(connection_demoted(old));
        // Opened after it: kept.
        std::thread::sleep(Duration::from_millis(5));
        assert!(!connection_demoted(Duration::from_millis(1)));
    }

    fn contention() -> StoreError {
        StoreError::Contention(sqlx::Error::Protocol("deadlock".to_owned()))
    }

    #[tokio::test]
    async fn a_write_rolled_back_for_contention_is_tried_again_a_few_times() {
        let mut calls = 0;
        let result = contention_retry(|| {
            calls += 1;
            let attempt = calls;
            async move {
                if attempt < 3 {
                    Err(contention())
                } else {
                    Ok(attempt)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: Result<(), StoreError> = contention_retry(|| {
            calls += 1;
            async { Err(contention()) }
        })
        .await;
        assert!(matches!(result, Err(StoreError::Contention(_))));
        assert_eq!(calls, 4, "gives up after four tries");

        let mut calls = 0;
        let result: Result<(), StoreError> = contention_retry(|| {
            calls += 1;
            async { Err(StoreError::DuplicateKey) }
        })
        .await;
        assert!(matches!(result, Err(StoreError::DuplicateKey)));
        assert_eq!(calls, 1, "other errors are not retried");
    }
}
