//! Queries on the `jobs` table, named noun-then-verb so they sort together.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::{Store, StoreError};
use crate::job::{Job, JobId, NewJob, Schedule, Status};

const JOB_COLUMNS: &str = "id, topic, job_key, payload, payload_kind, headers, schedule_time, \
     status, attempt, max_attempts, version, created_at, updated_at, dispatched_at, \
     kafka_partition, kafka_offset, last_error";

/// A pending job the loader found entering the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowEntry {
    pub id: JobId,
    pub schedule_time: DateTime<Utc>,
}

/// What the claim compare-and-set made of the ids the index suggested.
#[derive(Debug, Default)]
pub struct ClaimOutcome {
    /// Jobs this claim won: now `dispatching` under its token.
    pub won: Vec<Job>,
    /// Ids still `pending` but not yet due by the database's clock (moved
    /// later by hand, or clocks apart): they go back to the index.
    pub not_due: Vec<WindowEntry>,
    /// Ids whose row is gone or no longer `pending` (cancelled, already
    /// dispatched, claimed elsewhere): stale index entries.
    pub stale: Vec<JobId>,
    /// The database's clock when the claim was decided.
    pub db_now: Option<DateTime<Utc>>,
}

/// A job produced to Kafka, ready to be marked.
#[derive(Debug, Clone, Copy)]
pub struct Dispatched {
    pub id: JobId,
    pub partition: i32,
    pub offset: i64,
    pub dispatched_at: DateTime<Utc>,
}

impl Store {
    /// Inserts a job; returns it as stored with the database's clock at that
    /// moment. The schedule of a `delay_ms` job is computed from the
    /// database's clock inside the INSERT.
    ///
    /// Crash after this commits: the job exists and will be found by the
    /// loader or the overdue probe; the caller (who got no answer) may retry
    /// with the same key to get it back.
    pub async fn job_insert(&self, job: &NewJob) -> Result<(Job, DateTime<Utc>), StoreError> {
        let headers = headers_encode(&job.headers);
        let (at, delay_us) = match job.schedule {
            Schedule::At(at) => (Some(at.naive_utc()), None),
            Schedule::After { delay_ms } => (None, Some(delay_ms.saturating_mul(1000))),
        };
        let mut conn = self.pool.acquire().await?;
        sqlx::query(
            "INSERT INTO jobs (topic, job_key, payload, payload_kind, headers, schedule_time, \
             max_attempts) VALUES (?, ?, ?, ?, ?, \
             COALESCE(?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))), ?)",
        )
        .bind(&job.topic)
        .bind(&job.key)
        .bind(&job.payload)
        .bind(job.payload_kind.as_str())
        .bind(headers)
        .bind(at)
        .bind(delay_us)
        .bind(job.max_attempts)
        .execute(&mut *conn)
        .await?;
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS}, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id = LAST_INSERT_ID()"
        ))
        .fetch_one(&mut *conn)
        .await?;
        let now: NaiveDateTime = row.try_get("db_now")?;
        Ok((job_from_row(&row)?, now.and_utc()))
    }

    pub async fn job_get(&self, id: JobId) -> Result<Job, StoreError> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        job_from_row(&row)
    }

    /// The id and time of a job with this (topic, key), if any.
    pub async fn job_find_by_key(&self, topic: &str, key: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE topic = ? AND job_key = ?"
        ))
        .bind(topic)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Pending jobs with `from <= schedule_time < until` (no lower bound when
    /// `from` is None), in (schedule_time, id) order, starting after `after`.
    /// A range scan on (status, schedule_time): far-future rows are never
    /// read. Serves the loader (jobs entering the window) and the
    /// reconciler's overdue probe.
    pub async fn job_list_pending(
        &self,
        from: Option<DateTime<Utc>>,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, schedule_time FROM jobs WHERE status = 'pending' AND schedule_time < ",
        );
        query.push_bind(until.naive_utc());
        if let Some(from) = from {
            query
                .push(" AND schedule_time >= ")
                .push_bind(from.naive_utc());
        }
        if let Some(after) = after {
            let at = after.schedule_time.naive_utc();
            query
                .push(" AND (schedule_time > ")
                .push_bind(at)
                .push(" OR (schedule_time = ")
                .push_bind(at)
                .push(" AND id > ")
                .push_bind(after.id)
                .push("))");
        }
        query
            .push(" ORDER BY schedule_time, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let at: NaiveDateTime = row.try_get("schedule_time")?;
                Ok(WindowEntry {
                    id: row.try_get("id")?,
                    schedule_time: at.and_utc(),
                })
            })
            .collect()
    }

    /// The claim compare-and-set: `pending → dispatching` for those of `ids`
    /// that are pending and due by the database's clock, under `token`, with
    /// a lease of `lease`. Returns what became of every id.
    ///
    /// Crash after the UPDATE commits: the rows stay `dispatching` until the
    /// lease expires, then the reconciler returns them to `pending`.
    pub async fn job_claim_many(
        &self,
        ids: &[JobId],
        token: u64,
        lease: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        if ids.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        let mut update = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET status = 'dispatching', version = version + 1, claim_token = ",
        );
        update
            .push_bind(token)
            .push(", claim_expires_at = TIMESTAMPADD(MICROSECOND, ")
            .push_bind(lease_us)
            .push(", UTC_TIMESTAMP(3)) WHERE status = 'pending' AND schedule_time <= UTC_TIMESTAMP(3) AND id IN ");
        push_id_list(&mut update, ids);
        update.build().execute(&self.pool).await?;

        let mut select = QueryBuilder::<MySql>::new(format!(
            "SELECT {JOB_COLUMNS}, claim_token, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id IN "
        ));
        push_id_list(&mut select, ids);
        let rows = select.build().fetch_all(&self.pool).await?;

        let mut outcome = ClaimOutcome::default();
        let mut seen = Vec::with_capacity(rows.len());
        for row in &rows {
            let job = job_from_row(row)?;
            let claimed_by: Option<u64> = row.try_get("claim_token")?;
            let db_now: NaiveDateTime = row.try_get("db_now")?;
            outcome.db_now = Some(db_now.and_utc());
            seen.push(job.id);
            match job.status {
                Status::Dispatching if claimed_by == Some(token) => outcome.won.push(job),
                Status::Pending => outcome.not_due.push(WindowEntry {
                    id: job.id,
                    schedule_time: job.schedule_time,
                }),
                _ => outcome.stale.push(job.id),
            }
        }
        outcome
            .stale
            .extend(ids.iter().filter(|id| !seen.contains(id)));
        Ok(outcome)
    }

    /// `dispatching → dispatched` for jobs this claim produced, recording
    /// where each record landed. Returns how many rows were marked; a row
    /// not marked lost its claim (lease expired and rescued) meanwhile.
    ///
    /// Crash before this commits: the records are on Kafka but the rows are
    /// `dispatching`; after the lease they are produced again with the same
    /// attempt — the one duplicate the contract allows.
    pub async fn job_mark_dispatched_many(
        &self,
        token: u64,
        jobs: &[Dispatched],
    ) -> Result<u64, StoreError> {
        if jobs.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET status = 'dispatched', version = version + 1, \
             claim_token = NULL, claim_expires_at = NULL, dispatched_at = CASE id",
        );
        for job in jobs {
            query
                .push(" WHEN ")
                .push_bind(job.id)
                .push(" THEN ")
                .push_bind(job.dispatched_at.naive_utc());
        }
        query.push(" END, kafka_partition = CASE id");
        for job in jobs {
            query
                .push(" WHEN ")
                .push_bind(job.id)
                .push(" THEN ")
                .push_bind(job.partition);
        }
        query.push(" END, kafka_offset = CASE id");
        for job in jobs {
            query
                .push(" WHEN ")
                .push_bind(job.id)
                .push(" THEN ")
                .push_bind(job.offset);
        }
        query
            .push(" END WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        let ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
        push_id_list(&mut query, &ids);
        let result = query.build().execute(&self.pool).await?;
        Ok(result.rows_affected())
    }

    /// `dispatching → pending` for claims whose lease expired by the
    /// database's clock: the dispatcher holding them died or stalled. Returns
    /// the jobs rescued, to be re-indexed. Safe on several instances at once.
    ///
    /// Crash after this commits: the rows are pending and overdue; the next
    /// overdue probe re-indexes them.
    pub async fn job_rescue_expired(&self, limit: u32) -> Result<Vec<WindowEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, schedule_time FROM jobs WHERE status = 'dispatching' \
             AND claim_expires_at < UTC_TIMESTAMP(3) ORDER BY schedule_time LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let expired: Vec<WindowEntry> = rows
            .iter()
            .map(|row| {
                let at: NaiveDateTime = row.try_get("schedule_time")?;
                Ok(WindowEntry {
                    id: row.try_get("id")?,
                    schedule_time: at.and_utc(),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        if expired.is_empty() {
            return Ok(expired);
        }
        let mut update = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET status = 'pending', version = version + 1, claim_token = NULL, \
             claim_expires_at = NULL, last_error = 'claim expired: the dispatcher died or stalled' \
             WHERE status = 'dispatching' AND claim_expires_at < UTC_TIMESTAMP(3) AND id IN ",
        );
        let ids: Vec<JobId> = expired.iter().map(|e| e.id).collect();
        push_id_list(&mut update, &ids);
        update.build().execute(&self.pool).await?;
        Ok(expired)
    }

    /// `dispatching → pending` for jobs this claim could not produce (the
    /// broker refused or timed out), so they are tried again. The attempt is
    /// not counted: nothing was delivered.
    pub async fn job_release_many(
        &self,
        token: u64,
        ids: &[JobId],
        error: &str,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET status = 'pending', version = version + 1, claim_token = NULL, \
             claim_expires_at = NULL, last_error = ",
        );
        query
            .push_bind(error)
            .push(" WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        let result = query.build().execute(&self.pool).await?;
        Ok(result.rows_affected())
    }
}

fn push_id_list(query: &mut QueryBuilder<'_, MySql>, ids: &[JobId]) {
    query.push("(");
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}

fn headers_encode(headers: &BTreeMap<String, String>) -> Option<String> {
    if headers.is_empty() {
        None
    } else {
        serde_json::to_string(headers).ok()
    }
}

fn job_from_row(row: &MySqlRow) -> Result<Job, StoreError> {
    let id: JobId = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("job {id}: {what}"));
    let status = text(row, "status")?.unwrap_or_default();
    let kind = text(row, "payload_kind")?.unwrap_or_default();
    let headers = text(row, "headers")?;
    let headers = match headers.as_deref() {
        None | Some("") => BTreeMap::new(),
        Some(text) => serde_json::from_str(text)
            .map_err(|_| corrupt("headers is not a JSON object of strings"))?,
    };
    let at = |column: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: NaiveDateTime = row.try_get(column)?;
        Ok(value.and_utc())
    };
    let dispatched_at: Option<NaiveDateTime> = row.try_get("dispatched_at")?;
    Ok(Job {
        id,
        topic: text(row, "topic")?.unwrap_or_default(),
        key: text(row, "job_key")?,
        payload: row.try_get("payload")?,
        payload_kind: kind.parse().map_err(|_| corrupt("unknown payload_kind"))?,
        headers,
        schedule_time: at("schedule_time")?,
        status: status.parse().map_err(|_| corrupt("unknown status"))?,
        attempt: row.try_get("attempt")?,
        max_attempts: row.try_get("max_attempts")?,
        version: row.try_get("version")?,
        created_at: at("created_at")?,
        updated_at: at("updated_at")?,
        dispatched_at: dispatched_at.map(|at| at.and_utc()),
        kafka_partition: row.try_get("kafka_partition")?,
        kafka_offset: row.try_get("kafka_offset")?,
        last_error: text(row, "last_error")?,
    })
}

/// A text column. The schema uses binary collations (case-sensitive keys),
/// which sqlx reports as binary, so text is read as bytes and checked UTF-8.
fn text(row: &MySqlRow, column: &str) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = row.try_get(column)?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| StoreError::Corrupt(format!("{column} is not UTF-8")))
        })
        .transpose()
}
