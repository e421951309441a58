//! Runs the refinery migrations in `migrations/` over a sqlx connection.
//!
//! refinery ships no sqlx driver; implementing its async traits here (a few
//! lines) keeps one MySQL driver in the binary. MySQL commits DDL
//! implicitly, so each migration file holds a single DDL change and a failed
//! one leaves the schema at the previous version.
//!
//! V3, V4 and V20 created the history triggers of versions before V24,
//! which tickler no longer uses (it writes the history itself). Where they
//! were never applied they are recorded as applied without being run: so
//! `tickler migrate` needs no SUPER on a server with binary logging on, a
//! fresh install included. V21, V25 and V26 drop them where they were made,
//! and only there: with binary logging on, even `DROP TRIGGER IF EXISTS`
//! of a trigger that does not exist takes SUPER.
//!
//! On a live table an `ALTER` needs the table's metadata lock for a moment
//! at its start and at its end, and waits for every query already running
//! on the table; every query that comes after waits behind it. One long
//! query (a report's `COUNT(*)` over millions of rows) would so stop
//! dispatch for as long as it runs. The migrator waits
//! [`MDL_WAIT_SECS`] at most, then gives up, lets the queue through and
//! tries again, up to [`MDL_ATTEMPTS`] times.
//!
//! A migration that takes away what older versions read ([`CONTRACTING`])
//! is refused while an instance built before it is serving: each instance
//! says the schema it was built for (`instances.version`).

use futures::future::BoxFuture;
use refinery_core::traits::r#async::{AsyncMigrate, AsyncQuery, AsyncTransaction};
use refinery_core::Migration;
use sqlx::mysql::MySqlRow;
use sqlx::{ConnectOptions, Connection, Executor, MySqlConnection, Row};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::handle::Store;
use super::pool::{connect_options, server_is_tidb};
use super::StoreError;
use crate::config::SchemaBaseline;

refinery::embed_migrations!("migrations");

/// The schema of V1..=[`BASELINE_VERSION`] in one file, for servers that
/// cannot run those migrations as written (TiDB); see the file's header.
const BASELINE: &str = include_str!("../../schema/baseline.sql");
/// The last migration `schema/baseline.sql` stands for.
pub const BASELINE_VERSION: i32 = 29;

/// Longest a migration's statement waits for the table's metadata lock
/// before it gives up and lets the queries queued behind it run.
pub const MDL_WAIT_SECS: u32 = 2;
/// How many times a statement is tried while other queries hold the lock.
pub const MDL_ATTEMPTS: u32 = 100;
/// Pause between two tries: the queue behind the last one drains.
const MDL_PAUSE: std::time::Duration = std::time::Duration::from_secs(3);

/// Migrations that take away what versions built before them read (a
/// column, an index): applied under such a version, its queries fail. A
/// live upgrade applies the migrations before one of these first, rolls
/// the new binary out, then applies it (docs/upgrades.md, "Upgrading a
/// live deployment").
pub const CONTRACTING: [i32; 3] = [29, 33, 36];
/// An instance whose heartbeat is this recent counts as serving.
const SERVING_WITHIN_SECS: u32 = 60;

/// The newest migration this binary holds: what an instance says it was
/// built for (`instances.version`, after `+schema.`).
pub fn newest() -> i32 {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|migration| i32::try_from(i64::from(migration.version())).unwrap_or(i32::MAX))
        .max()
        .unwrap_or(0)
}

/// The schema an instance's `version` says it was built for: 0 for
/// versions from before it said.
pub fn built_for(version: &str) -> i32 {
    version
        .split_once("+schema.")
        .and_then(|(_, schema)| schema.parse().ok())
        .unwrap_or(0)
}

/// Whether the database holds a table called `name`.
async fn table_exists(conn: &mut MySqlConnection, name: &str) -> Result<bool, String> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(name)
    .fetch_one(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    Ok(n > 0)
}

/// Refuses, naming the instances, to apply a [`CONTRACTING`] migration (up
/// to `to`) while an instance built before it is serving.
pub async fn contracting_check(conn: &mut MySqlConnection, to: Option<i32>) -> Result<(), String> {
    if !table_exists(conn, "instances").await? {
        return Ok(());
    }
    // An instances table and no history yet: nothing migrated by tickler,
    // so nothing of its to contract.
    if !table_exists(conn, "refinery_schema_history").await? {
        return Ok(());
    }
    let applied: Vec<i32> = sqlx::query_scalar("SELECT version FROM refinery_schema_history")
        .fetch_all(&mut *conn)
        .await
        .map_err(|err| format!("reading the schema history: {err}"))?;
    let due: Vec<i32> = CONTRACTING
        .into_iter()
        .filter(|version| !applied.contains(version))
        .filter(|version| to.is_none_or(|to| *version <= to))
        .filter(|version| *version <= newest())
        .collect();
    let Some(first) = due.first() else {
        return Ok(());
    };
    let serving: Vec<(u64, Vec<u8>, u32, Vec<u8>)> = sqlx::query_as(
        "SELECT id, host, pid, version FROM instances WHERE heartbeat_at >= \
         TIMESTAMPADD(SECOND, -?, UTC_TIMESTAMP(3))",
    )
    .bind(SERVING_WITHIN_SECS)
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| err.to_string())?;
    let older: Vec<String> = serving
        .iter()
        .filter(|(_, _, _, version)| built_for(&String::from_utf8_lossy(version)) < *first)
        .map(|(id, host, pid, version)| {
            format!(
                "instance {id} ({} pid {pid}, version {})",
                String::from_utf8_lossy(host),
                String::from_utf8_lossy(version)
            )
        })
        .collect();
    if older.is_empty() {
        return Ok(());
    }
    Err(format!(
        "V{first} takes away what older versions read, and these serve with one built before it: {}. \
         Roll the new binary out first (`tickler migrate --to {}` is safe now), then migrate \
         (docs/upgrades.md, \"Upgrading a live deployment\")",
        older.join(", "),
        first - 1
    ))
}

/// A sqlx connection refinery can drive.
pub struct Migrator {
    pub conn: MySqlConnection,
    /// The schema's triggers, read once when a migration drops one.
    triggers: Option<Vec<String>>,
}

impl Migrator {
    pub fn new(conn: MySqlConnection) -> Migrator {
        Migrator {
            conn,
            triggers: None,
        }
    }
}

// The work is done in boxed futures: sqlx's executor lifetimes defeat the
// compiler's `Send` proof for refinery's `impl Future + Send` signatures.
impl Migrator {
    fn execute_all(&mut self, queries: Vec<String>) -> BoxFuture<'_, Result<usize, sqlx::Error>> {
        Box::pin(async move {
            if self.triggers.is_none() && queries.iter().any(|q| trigger_dropped(q).is_some()) {
                self.triggers = Some(super::history::triggers_list(&mut self.conn).await?);
            }
            let mut tx = self.conn.begin().await?;
            (&mut *tx)
                .execute(format!("SET SESSION lock_wait_timeout = {MDL_WAIT_SECS}").as_str())
                .await?;
            for query in queries.iter().filter(|query| !creates_trigger(query)) {
                if let Some(name) = trigger_dropped(query) {
                    let triggers = self.triggers.as_deref().unwrap_or_default();
                    if !triggers.iter().any(|t| t == name) {
                        continue;
                    }
                }
                let mut attempt = 1;
                loop {
                    // A plain &str runs over the text protocol, as DDL must.
                    match (&mut *tx).execute(query.as_str()).await {
                        Ok(_) => break,
                        // One DDL change a file: a statement that gave up
                        // changed nothing, and is tried again whole.
                        Err(err) if lock_wait_timed_out(&err) && attempt < MDL_ATTEMPTS => {
                            tracing::warn!(
                                attempt,
                                wait_s = MDL_WAIT_SECS,
                                "a long query holds the table this migration changes; \
                                 gave up waiting so the queries behind it run, trying again"
                            );
                            attempt += 1;
                            tokio::time::sleep(MDL_PAUSE).await;
                        }
                        Err(err) => return Err(err),
                    }
                }
            }
            tx.commit().await?;
            Ok(queries.len())
        })
    }

    fn applied(&mut self, query: String) -> BoxFuture<'_, Result<Vec<Migration>, sqlx::Error>> {
        Box::pin(async move {
            let rows = (&mut self.conn).fetch_all(query.as_str()).await?;
            rows.iter().map(migration_from_row).collect()
        })
    }
}

/// Installs `schema/baseline.sql` and records the migrations it stands for
/// as applied, where no migration is recorded yet; returns what it did.
/// Every statement may run again, and the record is written last, in one
/// statement: a baseline cut short is finished by the next run.
pub async fn baseline_install(conn: &mut MySqlConnection) -> Result<Option<String>, sqlx::Error> {
    let recorded: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'refinery_schema_history'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if recorded > 0 {
        let applied: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM refinery_schema_history")
            .fetch_one(&mut *conn)
            .await?;
        if applied > 0 {
            return Ok(None);
        }
    }
    // A jobs table of another shape is a migration run cut short before
    // it recorded anything: the baseline would take it for its own.
    let (columns, baseline_shaped): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), CAST(COALESCE(SUM(COLUMN_NAME = 'finished_at'), 0) AS SIGNED) \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'jobs'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if columns > 0 && baseline_shaped == 0 {
        return Err(sqlx::Error::Protocol(
            "this database holds a jobs table but no record of the migrations that made it: \
             drop its tables (it was never in use) or run migrate with schema_baseline = off"
                .to_owned(),
        ));
    }
    for statement in baseline_statements() {
        // A plain &str runs over the text protocol, as DDL must.
        conn.execute(statement.as_str()).await?;
    }
    conn.execute(
        "CREATE TABLE IF NOT EXISTS refinery_schema_history(\
         version INT PRIMARY KEY, name VARCHAR(255), applied_on VARCHAR(255), checksum VARCHAR(255))",
    )
    .await?;
    let applied_on = OffsetDateTime::now_utc()
        .format(&Rfc3339)
        .map_err(|err| sqlx::Error::Encode(Box::new(err)))?;
    let migrations = migrations::runner();
    let covered: Vec<_> = migrations
        .get_migrations()
        .iter()
        .filter(|m| m.version() <= BASELINE_VERSION)
        .collect();
    let mut insert = sqlx::QueryBuilder::<sqlx::MySql>::new(
        "INSERT IGNORE INTO refinery_schema_history (version, name, applied_on, checksum) ",
    );
    insert.push_values(&covered, |mut row, m| {
        row.push_bind(m.version())
            .push_bind(m.name().to_owned())
            .push_bind(applied_on.clone())
            .push_bind(m.checksum().to_string());
    });
    insert.build().execute(&mut *conn).await?;
    Ok(Some(format!(
        "V1..V{BASELINE_VERSION} from schema/baseline.sql"
    )))
}

/// The migration that marks `enc_keys_used` filled (V53).
pub const ENC_KEYS_FILLED: u32 = 53;

/// Fills `enc_keys_used` with the keys rows are sealed under, where V53 is
/// not applied yet: a plain `SELECT DISTINCT` of `jobs` and `schedules`
/// (a consistent read, no row locked; seconds a ten million rows), then a
/// few rows inserted. Nothing to do once V53 is recorded, or on a database
/// that has no `enc_keys_used` yet (a `--to` short of V52).
pub async fn enc_keys_fill(conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
    let tables: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME IN ('enc_keys_used', 'refinery_schema_history')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if tables < 2 {
        return Ok(());
    }
    let filled: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM refinery_schema_history WHERE version = ?")
            .bind(ENC_KEYS_FILLED as i32)
            .fetch_one(&mut *conn)
            .await?;
    if filled > 0 {
        return Ok(());
    }
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(enc_key AS CHAR) FROM jobs WHERE enc_key IS NOT NULL GROUP BY enc_key \
         UNION SELECT CAST(enc_key AS CHAR) FROM schedules WHERE enc_key IS NOT NULL",
    )
    .fetch_all(&mut *conn)
    .await?;
    for key in keys {
        sqlx::query(
            "INSERT IGNORE INTO enc_keys_used (key_id, first_at, last_at) \
             VALUES (?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
        )
        .bind(key)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The statements of `schema/baseline.sql`, comments left out.
fn baseline_statements() -> Vec<String> {
    BASELINE
        .split(";\n")
        .map(|chunk| {
            chunk
                .lines()
                .filter(|line| !line.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|statement| !statement.trim().is_empty())
        .collect()
}

/// ERROR 1205: here, the metadata lock was not had in time.
fn lock_wait_timed_out(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|e| e.number() == 1205)
}

/// Whether a migration creates a trigger (outside its comments).
fn creates_trigger(sql: &str) -> bool {
    sql.lines()
        .map(str::trim_start)
        .filter(|line| !line.starts_with("--"))
        .any(|line| line.to_ascii_uppercase().starts_with("CREATE TRIGGER"))
}

/// The trigger a migration drops, if that is what it does.
fn trigger_dropped(sql: &str) -> Option<&str> {
    let statement = sql
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with("--"))?;
    let name = statement
        .strip_prefix("DROP TRIGGER IF EXISTS ")?
        .trim_end_matches(';')
        .trim();
    Some(name)
}

fn migration_from_row(row: &MySqlRow) -> Result<Migration, sqlx::Error> {
    let version: i32 = row.try_get(0)?;
    let name = text(row, 1)?;
    let applied_on = text(row, 2)?;
    let checksum = text(row, 3)?;
    let applied_on = OffsetDateTime::parse(&applied_on, &Rfc3339)
        .map_err(|err| sqlx::Error::Decode(Box::new(err)))?;
    let checksum = checksum
        .parse::<u64>()
        .map_err(|err| sqlx::Error::Decode(Box::new(err)))?;
    Ok(Migration::applied(version, name, applied_on, checksum))
}

/// A text column of refinery's table, which refinery creates in the
/// database's default collation: with a `*_bin` one, MySQL flags the column
/// BINARY and sqlx will not read it as a `String`. Its bytes always can be.
fn text(row: &MySqlRow, index: usize) -> Result<String, sqlx::Error> {
    let bytes: Vec<u8> = row.try_get(index)?;
    String::from_utf8(bytes).map_err(|err| sqlx::Error::Decode(Box::new(err)))
}

impl AsyncTransaction for Migrator {
    type Error = sqlx::Error;

    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        let queries = queries.map(str::to_owned).collect();
        self.execute_all(queries).await
    }
}

impl AsyncQuery<Vec<Migration>> for Migrator {
    async fn query<'a>(&'a mut self, query: &'a str) -> Result<Vec<Migration>, Self::Error> {
        self.applied(query.to_owned()).await
    }
}

impl AsyncMigrate for Migrator {}

/// The schema's migrations, applied through the handle's constructors.
impl Store {
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
            SchemaBaseline::Auto => server_is_tidb(&mut conn).await?,
        };
        let short_of_baseline = to.is_some_and(|to| i64::from(to) < i64::from(BASELINE_VERSION));
        if wanted && !short_of_baseline {
            if let Some(done) = baseline_install(&mut conn).await? {
                applied.push(done);
            }
        }
        contracting_check(
            &mut conn,
            to.map(|to| i32::try_from(to).unwrap_or(i32::MAX)),
        )
        .await
        .map_err(StoreError::MigrationRefused)?;
        let mut migrator = Migrator::new(conn);
        let target = match to {
            Some(version) => {
                refinery_core::Target::Version(i32::try_from(version).unwrap_or(i32::MAX))
            }
            None => refinery_core::Target::Latest,
        };
        if to.is_none_or(|to| to >= ENC_KEYS_FILLED) {
            // Up to the table, filled by a read that locks nothing, then on.
            let report = migrations::runner()
                .set_abort_divergent(true)
                .set_target(refinery_core::Target::Version(ENC_KEYS_FILLED as i32 - 1))
                .run_async(&mut migrator)
                .await?;
            applied.extend(report.applied_migrations().iter().map(|m| m.to_string()));
            enc_keys_fill(&mut migrator.conn).await?;
        }
        let report = migrations::runner()
            .set_abort_divergent(true)
            .set_target(target)
            .run_async(&mut migrator)
            .await?;
        let _ = migrator.conn.close().await;
        applied.extend(report.applied_migrations().iter().map(|m| m.to_string()));
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::{built_for, creates_trigger, newest, CONTRACTING};

    #[test]
    fn an_instance_says_the_schema_it_was_built_for() {
        assert_eq!(built_for("0.1.0+schema.33"), 33);
        assert_eq!(
            built_for("0.1.0"),
            0,
            "a version from before instances said"
        );
        assert_eq!(built_for("0.1.0+schema.x"), 0);
        assert!(newest() >= 33);
        assert!(CONTRACTING.iter().all(|version| *version <= newest()));
    }

    #[test]
    fn only_trigger_creations_are_left_out() {
        let v20 = include_str!("../../migrations/V20__create_trigger_jobs_changed.sql");
        let v3 = include_str!("../../migrations/V3__create_trigger_jobs_inserted.sql");
        let v4 = include_str!("../../migrations/V4__create_trigger_jobs_updated.sql");
        assert!(creates_trigger(v20) && creates_trigger(v3) && creates_trigger(v4));
        let v21 = include_str!("../../migrations/V21__drop_trigger_jobs_updated.sql");
        let v24 = include_str!("../../migrations/V24__add_jobs_event_token.sql");
        assert!(!creates_trigger(v21) && !creates_trigger(v24));
        assert!(!creates_trigger("-- CREATE TRIGGER in a comment\nSELECT 1"));
        assert!(!creates_trigger(
            "INSERT INTO refinery_schema_history VALUES ('CREATE TRIGGER')"
        ));
    }

    #[test]
    fn a_dropped_trigger_is_named() {
        let v25 = include_str!("../../migrations/V25__drop_trigger_jobs_inserted.sql");
        assert_eq!(super::trigger_dropped(v25), Some("jobs_inserted"));
        let v21 = include_str!("../../migrations/V21__drop_trigger_jobs_updated.sql");
        assert_eq!(super::trigger_dropped(v21), Some("jobs_updated"));
        let v24 = include_str!("../../migrations/V24__add_jobs_event_token.sql");
        assert_eq!(super::trigger_dropped(v24), None);
    }
}
