//! A create that debounces (`on_conflict: "debounce"`): one transaction
//! that reads the job holding (topic, key), plainly, and then creates it
//! (the unique key refuses a second), moves it (never past its ceiling; a
//! compare-and-set on it still pending and holding the key), or — once it
//! went out — frees the key (a compare-and-set on the version read) and
//! creates the next generation. A write that finds the row changed since
//! the read is made again on the row as it is now.
//!
//! The ceiling of a generation is its first request time
//! (`debounce_first_at`, the database's clock when the generation's first
//! job was created) plus `debounce_max_ms`. A pending job that a plain
//! create made (no `debounce_first_at`) counts from its `created_at`, and
//! so does one whose `debounce_first_at` was edited by hand into something
//! that does not decode: the hand edit costs that row its anchor, nothing
//! else. A row without `debounce_max_ms` takes the first debounce's
//! `max_delay_ms`; without either, a debounce has no ceiling.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::Row;

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::job_row::job_read_back;
use super::jobs::{Expect, JobChanges, Modified};
use crate::domain::job::{Expiry, Job, JobId, NewJob, Schedule, Status};

/// Tries of a debounce that finds the key taken by a job created after it
/// looked (two debounces of a finished key at once: the loser moves the
/// winner's new job).
const DEBOUNCE_TRIES: u32 = 4;

/// Bound on a `debounce_max_ms` read from a row (about 31 years): a hand
/// edit beyond it is no ceiling, not an overflow.
const DEBOUNCE_MAX_MS_READ: u64 = 1_000_000_000_000;

/// What became of a debounce.
#[derive(Debug)]
pub enum Debounced {
    /// No job held (topic, key): created, the first of its generation.
    Created(Job, DateTime<Utc>),
    /// The pending job holding it now has the request's time (its ceiling
    /// when `capped`: the request asked for later), payload and headers.
    Moved {
        job: Job,
        capped: bool,
        db_now: DateTime<Utc>,
    },
    /// The job holding it had gone out: a new job, the next generation,
    /// holds the key now; `job.previous_id` names the one before.
    Renewed(Job, DateTime<Utc>),
    /// A dispatcher holds the job this instant: nothing was written. Its
    /// fate is decided in moments; the caller may try again.
    InFlight(Job),
}

/// The job holding a (topic, key), read under its row lock.
struct Holder {
    id: JobId,
    status: Option<Status>,
    version: u32,
    generation: u32,
    db_now: DateTime<Utc>,
    /// Where a debounce may move it to at the latest; None: no ceiling.
    ceiling: Option<DateTime<Utc>>,
}

impl Store {
    /// Creates `job` (keyed), or debounces onto the job holding its
    /// (topic, key): see [`Debounced`]. `max_delay_ms` is the request's
    /// ceiling (it counts only for a generation that has none yet). With
    /// `position` (the ingress's), the row notes the request record.
    ///
    /// Crash after this commits: as for a create or a modify — MySQL has
    /// the new row or the new time; the loader's scan of edited rows (or
    /// the overdue probe) makes Redis follow. A new generation is one
    /// transaction: the old row's key moved to `retired_key` and the new
    /// row inserted commit together, or neither does.
    pub async fn job_debounce(
        &self,
        job: &NewJob,
        max_delay_ms: Option<u64>,
        position: Option<&str>,
    ) -> Result<Debounced, StoreError> {
        let mut tries = 1;
        loop {
            match contention_retry(|| self.job_debounce_once(job, max_delay_ms, position)).await {
                // Another debounce created the key's job after this one
                // looked: read again, and move that one.
                Err(StoreError::DuplicateKey) if tries < DEBOUNCE_TRIES => tries += 1,
                other => return other,
            }
        }
    }

    /// Long because it is the three outcomes of one read, each written by a
    /// compare-and-set in the same transaction.
    async fn job_debounce_once(
        &self,
        job: &NewJob,
        max_delay_ms: Option<u64>,
        position: Option<&str>,
    ) -> Result<Debounced, StoreError> {
        let key = job.key.as_deref().ok_or(StoreError::Corrupt(
            "a debounce without a key (refused by the request's rules)".to_owned(),
        ))?;
        // Taken before the transaction, used if a job is created.
        let id = self.job_id().await?;
        let mut tx = self.begin().await?;
        let holder = holder_read(&mut tx, &job.topic, key, max_delay_ms).await?;
        let Some(holder) = holder else {
            let (created, db_now) = self.job_insert_on(&mut tx, job, id).await?;
            let mark = Mark {
                max_delay_ms,
                generation: 0,
                previous_id: None,
                position,
            };
            debounce_mark(&mut tx, created.id, &mark).await?;
            let (created, _) = job_read_back(&mut tx, self, created.id).await?;
            tx.commit().await?;
            return Ok(Debounced::Created(created, db_now));
        };
        match holder.status {
            Some(Status::Pending) => {
                let asked = match job.schedule {
                    Schedule::At(at) => at,
                    Schedule::After { delay_ms } => {
                        holder.db_now + chrono::Duration::milliseconds(delay_ms as i64)
                    }
                };
                // With a ceiling, the instant is written out (read on the
                // database's clock above): a delay counted again by the
                // UPDATE could pass the ceiling by the milliseconds between.
                let (schedule, capped) = match holder.ceiling {
                    Some(ceiling) if ceiling < asked => (Schedule::At(ceiling), true),
                    Some(_) => (Schedule::At(asked), false),
                    None => (job.schedule, false),
                };
                // The generation's anchor and ceiling, kept from now on (a
                // job a plain create made counts from its creation).
                // Only what is absent is written: a hand-edited value stays
                // as it is (written back, a zero date fails a strict mode).
                sqlx::query(
                    "UPDATE jobs SET debounce_first_at = created_at \
                     WHERE id = ? AND debounce_first_at IS NULL",
                )
                .bind(holder.id)
                .execute(&mut *tx)
                .await?;
                if let Some(max_ms) = max_delay_ms {
                    sqlx::query(
                        "UPDATE jobs SET debounce_max_ms = ? \
                         WHERE id = ? AND debounce_max_ms IS NULL",
                    )
                    .bind(max_ms)
                    .bind(holder.id)
                    .execute(&mut *tx)
                    .await?;
                }
                let changes = JobChanges {
                    schedule: Some(schedule),
                    payload: Some((job.payload.clone(), job.payload_kind)),
                    headers: Some(job.headers.clone()),
                    // The request is the job as it should be: its expiry,
                    // its window, or none (as the ingress's later request).
                    expiry: Some(match (job.expires_at, job.expires_after_ms) {
                        (Some(at), _) => Some(Expiry::At(at)),
                        (None, Some(ttl_ms)) => Some(Expiry::AfterRun { ttl_ms }),
                        (None, None) => None,
                    }),
                    // Held to the ceiling, the job goes out at that instant:
                    // the request's window and wall-clock time no longer
                    // describe it.
                    window: Some(job.window.filter(|_| !capped)),
                    wall: Some(job.wall.clone().filter(|_| !capped)),
                    topic: None,
                    on_topic: None,
                };
                // A compare-and-set on the job still pending and holding
                // the key, whatever its version: a debounce writes the job
                // whole as its request says, so of debounces racing on one
                // key each waits for the one before it (the row's write
                // lock) and the latest wins, as it would have in sequence.
                // A claim that came first fails it (not pending: read
                // again, in flight); the claim's own compare-and-set waits
                // for this commit, then finds the new time.
                fail_point_pause!("debounce-read");
                match self
                    .job_modify_on(
                        &mut tx,
                        holder.id,
                        Expect::HoldingKey(key),
                        &changes,
                        position,
                    )
                    .await?
                {
                    Modified::Applied(moved, db_now) => {
                        tx.commit().await?;
                        Ok(Debounced::Moved {
                            job: moved,
                            capped,
                            db_now,
                        })
                    }
                    // Claimed, or its key freed, since the read: read again.
                    Modified::VersionMismatch(_)
                    | Modified::NotPending(_)
                    | Modified::Occurrence(_) => Err(StoreError::DuplicateKey),
                }
            }
            Some(Status::Dispatching) => {
                let (job, _) = job_read_back(&mut tx, self, holder.id).await?;
                tx.rollback().await?;
                Ok(Debounced::InFlight(job))
            }
            // Gone out (or finished, or a status this build does not know:
            // a hand edit): the next generation takes the key.
            _ => {
                // Only while it is as read: not pending again (a retry)
                // nor freed by another debounce since.
                let freed = sqlx::query(
                    "UPDATE jobs SET retired_key = job_key, job_key = NULL \
                     WHERE id = ? AND job_key IS NOT NULL AND version = ?",
                )
                .bind(holder.id)
                .bind(holder.version)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if freed != 1 {
                    // Another debounce freed it first: read again.
                    return Err(StoreError::DuplicateKey);
                }
                let (created, db_now) = self.job_insert_on(&mut tx, job, id).await?;
                let generation = holder.generation.saturating_add(1);
                let mark = Mark {
                    max_delay_ms,
                    generation,
                    previous_id: Some(holder.id),
                    position,
                };
                debounce_mark(&mut tx, created.id, &mark).await?;
                let (created, _) = job_read_back(&mut tx, self, created.id).await?;
                tx.commit().await?;
                Ok(Debounced::Renewed(created, db_now))
            }
        }
    }
}

/// The job holding (topic, key), read plainly, with its ceiling:
/// `max_delay_ms` stands for a `debounce_max_ms` the row lacks.
async fn holder_read(
    conn: &mut sqlx::MySqlConnection,
    topic: &str,
    key: &str,
    max_delay_ms: Option<u64>,
) -> Result<Option<Holder>, StoreError> {
    let row = sqlx::query(
        "SELECT id, CAST(status AS CHAR) AS status, version, generation, created_at, \
         debounce_first_at, debounce_max_ms, UTC_TIMESTAMP(3) AS db_now \
         FROM jobs WHERE topic = ? AND job_key = ?",
    )
    .bind(topic)
    .bind(key)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let created_at: NaiveDateTime = row.try_get("created_at")?;
    // A hand edit that does not decode counts as absent (see the file's
    // head): the anchor is then the row's creation.
    let first_at: Option<NaiveDateTime> = row
        .try_get::<Option<NaiveDateTime>, _>("debounce_first_at")
        .ok()
        .flatten();
    let max_ms: Option<u64> = row
        .try_get::<Option<u64>, _>("debounce_max_ms")
        .ok()
        .flatten()
        .or(max_delay_ms);
    let anchor = first_at.unwrap_or(created_at).and_utc();
    let ceiling = max_ms
        .filter(|ms| *ms <= DEBOUNCE_MAX_MS_READ)
        .and_then(|ms| anchor.checked_add_signed(chrono::Duration::milliseconds(ms as i64)));
    let status: Option<String> = row.try_get("status")?;
    let db_now: NaiveDateTime = row.try_get("db_now")?;
    Ok(Some(Holder {
        id: row.try_get("id")?,
        status: status.and_then(|status| status.parse().ok()),
        version: row.try_get("version")?,
        generation: row.try_get("generation").unwrap_or_default(),
        db_now: db_now.and_utc(),
        ceiling,
    }))
}

/// What a job just created by a debounce is marked with.
struct Mark<'a> {
    max_delay_ms: Option<u64>,
    generation: u32,
    previous_id: Option<JobId>,
    /// The ingress's request record.
    position: Option<&'a str>,
}

/// Marks a job just created by a debounce: its generation's first request
/// time (now, the database's), ceiling, generation, the job before it and
/// the request record.
async fn debounce_mark(
    conn: &mut sqlx::MySqlConnection,
    id: JobId,
    mark: &Mark<'_>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE jobs SET debounce_first_at = UTC_TIMESTAMP(3), debounce_max_ms = ?, \
         generation = ?, previous_id = ?, ingress_position = ? WHERE id = ?",
    )
    .bind(mark.max_delay_ms)
    .bind(mark.generation)
    .bind(mark.previous_id)
    .bind(mark.position)
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}
