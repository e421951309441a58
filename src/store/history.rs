//! The jobs' history (`job_events`), written by tickler itself: every
//! statement that changes a job's status, time or attempt records the rows
//! it changed in the same transaction, in one multi-row `INSERT`.
//! No trigger is needed for it, so `tickler migrate` runs on servers where
//! creating one takes SUPER (MySQL 8 and MariaDB with binary logging on,
//! RDS, Aurora).
//!
//! How a statement's rows are told from the others: a changing statement
//! sets `event_token` to a fresh random value on the rows whose status, time
//! or attempt it changes (the assignment comes first in its `SET`, so it
//! sees the row as it was on every engine), and the history is read from
//! the rows among its ids that carry the token, then inserted (a create
//! inserts what it read back). A statement that matched a row without
//! changing what the history records leaves the token alone.
//! Like the triggers before, the dispatcher's claim (`pending →
//! dispatching`) is not recorded: it lasts milliseconds.
//!
//! Changes made by hand in SQL are recorded by an optional trigger
//! (`mysql.history_hand_edits = trigger`), which fires only in sessions without
//! `@tickler_actor` (every tickler connection sets it): see
//! [`Store::hand_edits_apply`].

use std::collections::HashMap;

use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlConnection, QueryBuilder};

use super::error::StoreError;
use super::handle::Store;
use super::sql::{db_time, push_id_list};
use crate::config::{Engine, HandEdits};
use crate::domain::job::{Job, JobId};

/// A fresh token for one changing statement (never 0, the column's default).
pub(super) fn event_token() -> u64 {
    rand::random::<u64>() | 1
}

/// Records, as `actor`, the rows among `ids` that the statement with
/// `token` changed. Runs on the caller's transaction.
pub(super) async fn events_record(
    conn: &mut MySqlConnection,
    actor: &str,
    ids: &[JobId],
    token: u64,
) -> Result<u64, StoreError> {
    if ids.is_empty() {
        return Ok(0);
    }
    let mut select = QueryBuilder::<MySql>::new(EVENT_ROWS);
    select.push(" event_token = ").push_bind(token);
    select.push(" AND id IN ");
    push_id_list(&mut select, ids);
    events_insert(conn, actor, select).await
}

/// [`events_record`], returning the ids whose rows the statement with
/// `token` changed: what a compare-and-set over `ids` won, known without
/// having locked the rows first.
pub(super) async fn events_record_changed(
    conn: &mut MySqlConnection,
    actor: &str,
    ids: &[JobId],
    token: u64,
) -> Result<Vec<JobId>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut select = QueryBuilder::<MySql>::new(EVENT_ROWS);
    select.push(" event_token = ").push_bind(token);
    select.push(" AND id IN ");
    push_id_list(&mut select, ids);
    let rows: Vec<EventRow> = select.build_query_as().fetch_all(&mut *conn).await?;
    events_insert_rows(conn, actor, &rows).await?;
    Ok(rows.iter().map(|(id, ..)| *id).collect())
}

/// Records, as `actor`, the rows among `from` (ids, each with the topic it
/// had) that the statement with `token` moved to topic `to`, naming both
/// topics; returns the ids it moved. Runs on the caller's transaction.
pub(super) async fn events_record_retargeted(
    conn: &mut MySqlConnection,
    actor: &str,
    from: &[(JobId, String)],
    to: &str,
    token: u64,
) -> Result<Vec<JobId>, StoreError> {
    if from.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<JobId> = from.iter().map(|(id, _)| *id).collect();
    let mut select = QueryBuilder::<MySql>::new(EVENT_ROWS);
    select.push(" event_token = ").push_bind(token);
    select.push(" AND id IN ");
    push_id_list(&mut select, &ids);
    let rows: Vec<EventRow> = select.build_query_as().fetch_all(&mut *conn).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let was: HashMap<JobId, &str> = from
        .iter()
        .map(|(id, topic)| (*id, topic.as_str()))
        .collect();
    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt, \
         topic_from, topic_to) ",
    );
    insert.push_values(&rows, |mut row, (id, status, at, attempt)| {
        let was = was.get(id).copied().unwrap_or_default();
        row.push_bind(*id)
            .push("UTC_TIMESTAMP(3)")
            .push_bind(actor)
            .push_bind(status.as_str())
            .push_bind(*at)
            .push_bind(*attempt)
            .push_bind(was.to_owned())
            .push_bind(to.to_owned());
    });
    insert.build().execute(&mut *conn).await?;
    Ok(rows.iter().map(|(id, ..)| *id).collect())
}

/// Records, as `actor`, the occurrences of schedule `schedule` that the
/// statement with `token` changed. Runs on the caller's transaction.
pub(super) async fn events_record_schedule(
    conn: &mut MySqlConnection,
    actor: &str,
    schedule: u64,
    token: u64,
) -> Result<u64, StoreError> {
    let mut select = QueryBuilder::<MySql>::new(EVENT_ROWS);
    select
        .push(" schedule_id = ")
        .push_bind(schedule)
        .push(" AND event_token = ")
        .push_bind(token);
    events_insert(conn, actor, select).await
}

/// Records, as `actor`, the creation of `jobs`, rows this transaction just
/// inserted and read back: their values are known, so nothing is read again.
pub(super) async fn events_record_new(
    conn: &mut MySqlConnection,
    actor: &str,
    jobs: &[&Job],
) -> Result<u64, StoreError> {
    let rows: Vec<EventRow> = jobs
        .iter()
        .map(|job| {
            (
                job.id,
                job.status.as_str().to_owned(),
                db_time(job.schedule_time),
                job.attempt,
            )
        })
        .collect();
    events_insert_rows(conn, actor, &rows).await
}

/// A history row's values: job id, status, time, attempt.
pub(super) type EventRow = (JobId, String, NaiveDateTime, u32);

/// What a history row copies from its job.
const EVENT_ROWS: &str = "SELECT id, CAST(status AS CHAR), schedule_time, attempt FROM jobs WHERE";

/// Reads the rows `select` finds (rows this transaction changed, and so
/// holds), then inserts their history rows with their values. Not one
/// `INSERT … SELECT`: that takes `job_events`' table-level AUTO-INC lock for
/// the whole statement where `innodb_autoinc_lock_mode` is 1 (MariaDB's
/// default), and concurrent transactions waiting on it and on each other's
/// rows are rolled back (ERROR 1467); a multi-row `INSERT … VALUES` of a
/// known count takes only a short mutex.
async fn events_insert(
    conn: &mut MySqlConnection,
    actor: &str,
    mut select: QueryBuilder<'_, MySql>,
) -> Result<u64, StoreError> {
    let rows: Vec<EventRow> = select.build_query_as().fetch_all(&mut *conn).await?;
    events_insert_rows(conn, actor, &rows).await
}

/// Inserts the history rows `rows`, as `actor`, in one statement.
pub(super) async fn events_insert_rows(
    conn: &mut MySqlConnection,
    actor: &str,
    rows: &[EventRow],
) -> Result<u64, StoreError> {
    if rows.is_empty() {
        return Ok(0);
    }
    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt) ",
    );
    insert.push_values(rows, |mut row, (id, status, at, attempt)| {
        row.push_bind(*id)
            .push("UTC_TIMESTAMP(3)")
            .push_bind(actor)
            .push_bind(status.as_str())
            .push_bind(*at)
            .push_bind(*attempt);
    });
    Ok(insert.build().execute(conn).await?.rows_affected())
}

/// The triggers that record hand edits, by name.
const HAND_TRIGGERS: [(&str, &str); 2] = [
    (
        "jobs_hand_inserted",
        "CREATE TRIGGER jobs_hand_inserted AFTER INSERT ON jobs FOR EACH ROW \
         BEGIN \
           IF @tickler_actor IS NULL THEN \
             INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt) \
             VALUES (NEW.id, UTC_TIMESTAMP(3), 'sql', NEW.status, NEW.schedule_time, NEW.attempt); \
           END IF; \
         END",
    ),
    (
        "jobs_hand_edited",
        "CREATE TRIGGER jobs_hand_edited AFTER UPDATE ON jobs FOR EACH ROW \
         BEGIN \
           IF @tickler_actor IS NULL \
              AND (NOT (NEW.status <=> OLD.status) \
                OR NOT (NEW.schedule_time <=> OLD.schedule_time) \
                OR NOT (NEW.attempt <=> OLD.attempt)) THEN \
             INSERT INTO job_events (job_id, at, actor, status, schedule_time, attempt) \
             VALUES (NEW.id, UTC_TIMESTAMP(3), 'sql', NEW.status, NEW.schedule_time, NEW.attempt); \
           END IF; \
         END",
    ),
];

/// What [`Store::hand_edits_apply`] found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandEditsState {
    /// Both triggers are in place.
    Recorded,
    /// No trigger is in place.
    NotRecorded,
    /// No trigger is in place; the reconciler observes hand edits.
    Observed,
}

impl Store {
    /// Installs (`Trigger`) or drops (`Off`) the triggers that record hand
    /// edits, or leaves them as they are (`Keep`), and says whether hand
    /// edits are recorded now (`Keep`: only with both triggers in place);
    /// `tickler migrate` runs it. Creating one that exists already (another
    /// instance's migrate) is not an error. Tickler's own history never
    /// depends on them.
    pub async fn hand_edits_apply(&self, mode: HandEdits) -> Result<HandEditsState, StoreError> {
        self.hand_edits_apply_on(mode, Engine::Auto).await
    }

    /// [`Store::hand_edits_apply`] on an engine as `mysql.engine` names
    /// it: a portable one (said, or read from the server) refuses the
    /// triggers.
    pub async fn hand_edits_apply_on(
        &self,
        mode: HandEdits,
        engine: Engine,
    ) -> Result<HandEditsState, StoreError> {
        if mode == HandEdits::Trigger && self.engine(engine).await? == Engine::Portable {
            return Err(StoreError::MigrationRefused(
                "mysql.history_hand_edits = trigger: the engine is portable (TiDB or Vitess, \
                 which have no triggers, or mysql.engine = portable); set observe (hand \
                 edits recorded without a trigger)"
                    .to_owned(),
            ));
        }
        let mut conn = self.pool.acquire().await?;
        // One read of the schema's triggers: each look at
        // information_schema costs MariaDB an internal temporary table.
        let present = triggers_list(&mut conn).await?;
        let exists = |name: &str| present.iter().any(|t| t == name);
        for (name, create) in HAND_TRIGGERS {
            match mode {
                // Only one that exists: with binary logging on, even
                // dropping one that does not takes SUPER.
                HandEdits::Off | HandEdits::Observe if exists(name) => {
                    // A plain &str runs over the text protocol, as DDL must.
                    sqlx::Executor::execute(
                        &mut *conn,
                        format!("DROP TRIGGER IF EXISTS {name}").as_str(),
                    )
                    .await?;
                }
                HandEdits::Trigger if !exists(name) => {
                    match sqlx::Executor::execute(&mut *conn, create).await {
                        Ok(_) => {}
                        // ER_TRG_ALREADY_EXISTS: created meanwhile.
                        Err(sqlx::Error::Database(err))
                            if err.message().contains("already exists") => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                _ => {}
            }
        }
        let all = HAND_TRIGGERS.iter().all(|(name, _)| exists(name));
        Ok(match mode {
            HandEdits::Trigger => HandEditsState::Recorded,
            HandEdits::Off => HandEditsState::NotRecorded,
            HandEdits::Observe => HandEditsState::Observed,
            HandEdits::Keep if all => HandEditsState::Recorded,
            HandEdits::Keep => HandEditsState::NotRecorded,
        })
    }

    /// What `engine` (`mysql.engine`) means on this server: `auto` is
    /// `portable` where `VERSION()` names TiDB or Vitess.
    pub async fn engine(&self, engine: Engine) -> Result<Engine, StoreError> {
        if engine != Engine::Auto {
            return Ok(engine);
        }
        let mut conn = self.pool.acquire().await?;
        Ok(engine.resolve(&super::pool::server_version(&mut conn).await?))
    }

    /// Whether hand edits are recorded now (both triggers in place).
    pub async fn hand_edits_state(&self) -> Result<HandEditsState, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let present = triggers_list(&mut conn).await?;
        let all = HAND_TRIGGERS
            .iter()
            .all(|(name, _)| present.iter().any(|t| t == name));
        Ok(if all {
            HandEditsState::Recorded
        } else {
            HandEditsState::NotRecorded
        })
    }
}

/// A trigger on `jobs` whose definer account is gone: every write to the
/// table fails while it is there (ERROR 1449).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenTrigger {
    pub name: String,
    pub definer: String,
    pub error: String,
}

impl Store {
    /// The triggers on `jobs` (name, definer), and those that cannot run:
    /// a probe row is inserted and updated in a transaction that is rolled
    /// back, so each trigger runs once as it would for a real write. A
    /// trigger runs as its DEFINER, the account that created it: dropped or
    /// renamed since, the trigger, and so every write to `jobs`, fails.
    /// Reading `mysql.user` instead would take a privilege tickler's
    /// account rarely has.
    pub async fn triggers_check(
        &self,
    ) -> Result<(Vec<(String, String)>, Vec<BrokenTrigger>), StoreError> {
        let mut conn = self.pool.acquire().await?;
        let triggers: Vec<(String, String)> = sqlx::query_as(
            "SELECT TRIGGER_NAME, DEFINER FROM information_schema.TRIGGERS \
             WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'jobs' \
             ORDER BY TRIGGER_NAME",
        )
        .fetch_all(&mut *conn)
        .await?;
        if triggers.is_empty() {
            return Ok((triggers, Vec::new()));
        }
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let probe = async {
            let inserted = sqlx::query(
                "INSERT INTO jobs (topic, payload, payload_kind, schedule_time) \
                 VALUES ('tickler-doctor-probe', '', 'bytes', UTC_TIMESTAMP(3) + INTERVAL 100 YEAR)",
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query("UPDATE jobs SET attempt = LEAST(attempt, 4294967294) + 1 WHERE id = ?")
                .bind(inserted.last_insert_id())
                .execute(&mut *tx)
                .await?;
            Ok::<_, sqlx::Error>(())
        }
        .await;
        tx.rollback().await?;
        let broken = match probe {
            Ok(()) => Vec::new(),
            // ER_NO_SUCH_USER: the message names the definer, not the
            // trigger; each trigger whose definer it names is broken (all
            // of them, if the message's spelling names none).
            Err(sqlx::Error::Database(err))
                if err
                    .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                    .is_some_and(|e| e.number() == 1449) =>
            {
                let named: Vec<_> = triggers
                    .iter()
                    .filter(|(_, definer)| definer_named(err.message(), definer))
                    .collect();
                let broken = if named.is_empty() {
                    triggers.iter().collect()
                } else {
                    named
                };
                broken
                    .into_iter()
                    .map(|(name, definer)| BrokenTrigger {
                        name: name.clone(),
                        definer: definer.clone(),
                        error: err.message().to_owned(),
                    })
                    .collect()
            }
            Err(err) => return Err(err.into()),
        };
        Ok((triggers, broken))
    }
}

/// Whether ERROR 1449's message names `definer` (`user@host`, which the
/// message may quote as 'user'@'host').
fn definer_named(message: &str, definer: &str) -> bool {
    let unquoted: String = message
        .chars()
        .filter(|c| *c != '\'' && *c != '`')
        .collect();
    unquoted.contains(definer)
}

/// The names of the triggers of the connection's database.
pub(super) async fn triggers_list(conn: &mut MySqlConnection) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()",
    )
    .fetch_all(conn)
    .await
}
