//! Verification's statements (#59): a record read back at its position is
//! recorded (`verified_at`); one that is not there is produced again as a
//! new attempt; rows dispatched but never verified (their verifier died, or
//! its queue was full) are found again by a sweep.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::dispatch::CLAIM_NONE;
use super::error::StoreError;
use super::handle::Store;
use super::history::{event_token, events_record};
use super::job_row::{text, WindowEntry};
use super::sql::{db_time, push_id_list};
use crate::domain::delivery::Produced;
use crate::domain::job::JobId;

/// A row found by the sweep, and where the sweep goes on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepMark {
    pub status_at: Option<DateTime<Utc>>,
    pub id: u64,
}

impl Store {
    /// Records that each of `found` is on its topic where its row says:
    /// `verified_at` is set (the database's clock) on rows still at that
    /// attempt and position. `updated_at` is kept: a verification is no
    /// change of the job's (the purger and the edit scan read it).
    /// Returns how many rows it set.
    ///
    /// Crash before this commits: the rows stay unverified; the sweep reads
    /// them back again.
    pub async fn job_verified_many(&self, found: &[Produced]) -> Result<u64, StoreError> {
        let mut set = 0;
        for chunk in found.chunks(1_000) {
            // One table: the rows by id, each still at the attempt and
            // position that was found (a row constructor per row).
            let ids: Vec<JobId> = chunk.iter().map(|produced| produced.id).collect();
            let mut query = QueryBuilder::<MySql>::new(
                "UPDATE jobs SET verified_at = UTC_TIMESTAMP(3), updated_at = updated_at \
                 WHERE verified_at IS NULL AND id IN ",
            );
            push_id_list(&mut query, &ids);
            query.push(" AND (id, attempt, kafka_partition, kafka_offset) IN (");
            let mut rows = query.separated(", ");
            for produced in chunk {
                rows.push("(")
                    .push_bind_unseparated(produced.id)
                    .push_unseparated(", ")
                    .push_bind_unseparated(produced.attempt)
                    .push_unseparated(", ")
                    .push_bind_unseparated(produced.partition)
                    .push_unseparated(", ")
                    .push_bind_unseparated(produced.offset)
                    .push_unseparated(")");
            }
            query.push(")");
            set += query.build().execute(&self.pool).await?.rows_affected();
        }
        Ok(set)
    }

    /// `dispatched → pending` for a job whose record is not on its topic
    /// (`why` says what was found instead): produced again, due now, as the
    /// next attempt — consumers deduplicate on (job id, attempt) — with one
    /// more attempt allowed, since the lost one was never the consumer's.
    /// A compare-and-set on the attempt and position read back: a row
    /// changed since (a report, an operator, another verifier) is left.
    /// Returns the row to index when it moved.
    ///
    /// Crash after this commits: the row is pending and overdue; the
    /// reconciler's overdue probe indexes it.
    pub async fn job_verify_missing(
        &self,
        produced: &Produced,
        why: &str,
    ) -> Result<Option<WindowEntry>, StoreError> {
        let token = event_token();
        let error = format!(
            "record missing from {} partition {} offset {} ({why}); produced again as attempt {}",
            produced.topic,
            produced.partition,
            produced.offset,
            produced.attempt.saturating_add(1)
        );
        let mut tx = self.begin().await?;
        let moved = sqlx::query(&format!(
            "UPDATE jobs SET event_token = ?, status = 'pending', version = version % 4294967295 + 1, \
             last_error = ?, max_attempts = LEAST(max_attempts, 4294967294) + 1, \
             attempt = LEAST(attempt, 4294967294) + 1, schedule_time = UTC_TIMESTAMP(3), \
             dispatched_at = NULL, kafka_partition = NULL, kafka_offset = NULL, \
             ack_deadline = NULL, verified_at = NULL, {CLAIM_NONE} \
             WHERE id = ? AND status = 'dispatched' AND attempt = ? AND verified_at IS NULL \
             AND kafka_partition = ? AND kafka_offset = ?"
        ))
        .bind(token)
        .bind(&error)
        .bind(produced.id)
        .bind(produced.attempt)
        .bind(produced.partition)
        .bind(produced.offset)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if moved == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        events_record(&mut tx, &self.actor, &[produced.id], token).await?;
        let due: NaiveDateTime = sqlx::query_scalar("SELECT schedule_time FROM jobs WHERE id = ?")
            .bind(produced.id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(WindowEntry {
            id: produced.id,
            schedule_time: due.and_utc(),
        }))
    }

    /// Dispatched rows not yet verified whose status changed after `after`
    /// and at or before `until` (database clock), in (`status_at`, id)
    /// order, at most `limit`: a range of `ix_jobs_status_at`. Rows whose
    /// position is unreadable (edited by hand) are skipped, each costing
    /// only itself. Returns them with where the next call goes on from.
    pub async fn job_unverified(
        &self,
        after: SweepMark,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<(Vec<Produced>, SweepMark), StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, attempt, topic, kafka_partition, kafka_offset, dispatched_at, status_at \
             FROM jobs WHERE status = 'dispatched' AND status_at <= ",
        );
        query.push_bind(db_time(until));
        if let Some(at) = after.status_at {
            query
                .push(" AND (status_at > ")
                .push_bind(db_time(at))
                .push(" OR (status_at = ")
                .push_bind(db_time(at))
                .push(" AND id > ")
                .push_bind(after.id)
                .push("))");
        }
        // id-order: a tie-break among rows of one instant, for paging only.
        query
            .push(" AND verified_at IS NULL ORDER BY status_at, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        let mut mark = after;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: u64 = row.try_get("id")?;
            let status_at: Option<NaiveDateTime> = row.try_get("status_at")?;
            mark = SweepMark {
                status_at: status_at.map(|at| at.and_utc()).or(mark.status_at),
                id,
            };
            match unverified_from_row(row) {
                Ok(Some(produced)) => found.push(produced),
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(job_id = id, error = %err, "a dispatched row's position is unreadable; it is not verified")
                }
            }
        }
        Ok((found, mark))
    }
}

impl Store {
    /// How many dispatched rows whose status changed in `[from, until]`
    /// (database clock) are not verified, with the oldest's id and time: a
    /// range of `ix_jobs_status_at`, for the doctor.
    pub async fn job_unverified_count(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<(u64, Option<(u64, DateTime<Utc>)>), StoreError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE status = 'dispatched' AND status_at >= ? \
             AND status_at <= ? AND verified_at IS NULL AND kafka_offset >= 0",
        )
        .bind(db_time(from))
        .bind(db_time(until))
        .fetch_one(&self.pool)
        .await?;
        let oldest: Option<(u64, NaiveDateTime)> = sqlx::query_as(
            "SELECT id, status_at FROM jobs WHERE status = 'dispatched' AND status_at >= ? \
             AND status_at <= ? AND verified_at IS NULL AND kafka_offset >= 0 \
             ORDER BY status_at LIMIT 1",
        )
        .bind(db_time(from))
        .bind(db_time(until))
        .fetch_optional(&self.pool)
        .await?;
        Ok((
            u64::try_from(count).unwrap_or_default(),
            oldest.map(|(id, at)| (id, at.and_utc())),
        ))
    }
}

/// Where a topic's jobs stand with verification (the bench's tally).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyTally {
    pub jobs: u64,
    pub dispatched: u64,
    pub verified: u64,
    /// Produced again because verification found their record missing.
    pub produced_again: u64,
    /// Milliseconds from `dispatched_at` to `verified_at`, of the verified.
    pub verify_lag_ms: Vec<i64>,
    /// Each job's id and current attempt.
    pub attempts: Vec<(u64, u32)>,
}

impl Store {
    /// [`VerifyTally`] of `topic`'s jobs (a scan of them: for the bench).
    pub async fn job_verify_tally(&self, topic: &str) -> Result<VerifyTally, StoreError> {
        let rows = sqlx::query(
            "SELECT id, attempt, CAST(status AS CHAR) AS status, \
             TIMESTAMPDIFF(MICROSECOND, dispatched_at, verified_at) DIV 1000 AS lag_ms, \
             CAST(COALESCE(last_error LIKE 'record missing from %', 0) AS SIGNED) AS again \
             FROM jobs WHERE topic = ?",
        )
        .bind(topic)
        .fetch_all(&self.pool)
        .await?;
        let mut tally = VerifyTally::default();
        for row in &rows {
            tally.jobs += 1;
            let status: String = row.try_get("status")?;
            if status == "dispatched" {
                tally.dispatched += 1;
            }
            if let Some(lag) = row.try_get::<Option<i64>, _>("lag_ms")? {
                tally.verified += 1;
                tally.verify_lag_ms.push(lag);
            }
            if row.try_get::<i64, _>("again")? != 0 {
                tally.produced_again += 1;
            }
            tally
                .attempts
                .push((row.try_get("id")?, row.try_get("attempt")?));
        }
        Ok(tally)
    }
}

/// A dispatched row's record position; None when it has none (set
/// `dispatched` by hand without one).
fn unverified_from_row(row: &sqlx::mysql::MySqlRow) -> Result<Option<Produced>, StoreError> {
    let partition: Option<i32> = row.try_get("kafka_partition")?;
    let offset: Option<i64> = row.try_get("kafka_offset")?;
    let at: Option<NaiveDateTime> = row.try_get("dispatched_at")?;
    let (Some(partition), Some(offset), Some(at)) = (partition, offset, at) else {
        return Ok(None);
    };
    Ok(Some(Produced {
        id: row.try_get("id")?,
        attempt: row.try_get("attempt")?,
        topic: text(row, "topic")?.unwrap_or_default(),
        partition,
        offset,
        dispatched_at: at.and_utc(),
    }))
}
