//! Queries on the `jobs` table, named noun-then-verb so they sort together.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::cluster::{push_fence, Fence};
use super::db_time;
use super::history::{event_token, events_insert_rows, events_record, events_record_new, EventRow};
use super::job_row::{
    job_created, job_from_row, job_read_back, text, WindowEntry, CREATED_COLUMNS, JOB_COLUMNS,
    JOB_COLUMNS_NO_PAYLOAD, UNREADABLE_PREFIX,
};
use super::sql::{push_id_list, run_at_push, topic_patterns_push, update_joined};
use super::{Store, StoreError};
use crate::job::{Job, JobId, NewJob, PayloadKind, Schedule, Status};

/// The claim columns of a job no claim holds, as a release puts them back:
/// the placeholders a job is created with (the columns' defaults since
/// V37), of the size the claim writes, so that a claim overwrites them in
/// place and the row keeps its size and its place in its page. They mean
/// "no claim", as NULL does (no instance has id 0, no claim token 0, and a
/// lease that ended in 1970 has ended); the mark sets the four to NULL,
/// which makes room for the position it writes.
pub(super) const CLAIM_NONE: &str = "claim_token = 0, claimed_by = 0, \
     claimed_at = '1970-01-01 00:00:00.000', claim_expires_at = '1970-01-01 00:00:00.000'";

/// The claim's condition that the row's topic is not paused.
const PAUSED_NOT: &str = "topic NOT IN (SELECT topic FROM topic_controls WHERE paused) AND ";

/// What a modification of a pending job changes; None leaves it as is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobChanges {
    pub schedule: Option<Schedule>,
    pub payload: Option<(Vec<u8>, PayloadKind)>,
    pub headers: Option<BTreeMap<String, String>>,
}

/// What became of a modification.
#[derive(Debug)]
pub enum Modified {
    /// Applied; the job as it is now, and the database's clock.
    Applied(Job, DateTime<Utc>),
    /// The caller's version is not the job's: it changed meanwhile.
    VersionMismatch(Job),
    /// The job is no longer pending: too late to change it.
    NotPending(Job),
}

/// What became of a cancel.
#[derive(Debug)]
pub enum Cancelled {
    /// The job was pending and is now cancelled: it will never be produced.
    Applied(Job),
    /// It was cancelled before.
    Already(Job),
    /// A dispatcher holds it this instant; its fate is decided in moments.
    InFlight(Job),
    /// It was produced already (or finished): see its Kafka position.
    TooLate(Job),
}

/// One item of a batch insert.
#[derive(Debug)]
pub enum BatchRow {
    Created(Job),
    /// The (topic, key) was taken: by an earlier row or an earlier item.
    Duplicate,
}

impl BatchRow {
    /// The job this row created, if it created one.
    pub fn created(&self) -> Option<&Job> {
        match self {
            BatchRow::Created(job) => Some(job),
            BatchRow::Duplicate => None,
        }
    }
}

/// Filters of a listing; None matches everything.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub topic: Option<String>,
    pub status: Option<Status>,
    pub key: Option<String>,
    pub run_at_from: Option<DateTime<Utc>>,
    pub run_at_to: Option<DateTime<Utc>>,
    /// Only topics matching one of these patterns (`*` for any run of
    /// characters); `None` for every topic.
    pub topic_patterns: Option<Vec<String>>,
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEvent {
    pub at: DateTime<Utc>,
    pub actor: String,
    pub status: Status,
    pub schedule_time: DateTime<Utc>,
    pub attempt: u32,
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
    /// Ids still `pending` that this claim could not take because its
    /// fence failed: the instance lost a shard's lease (or was declared
    /// dead) since it claimed them in Redis. They belong to the shard's
    /// new owner.
    pub fenced: Vec<JobId>,
    /// Ids still `pending` and due, but past their `expires_at`: to be
    /// cancelled, never produced.
    pub expired: Vec<JobId>,
    /// Ids still `pending` whose topic is paused: out of the index until
    /// the topic resumes.
    pub paused: Vec<JobId>,
    /// Ids this claim won whose row does not decode (a hand edit such as
    /// `headers = '7'`), with why: set aside as `dead`, never sent.
    pub unreadable: Vec<(JobId, String)>,
    /// The database's clock when the claim was decided.
    pub db_now: Option<DateTime<Utc>>,
}

/// What marking a claim's jobs did.
#[derive(Debug, Default)]
pub struct Marked {
    /// Rows marked (or, when a report came first, whose position was
    /// recorded).
    pub marked: u64,
    /// Jobs a report sent back to `pending` before the mark: Redis already
    /// holds them at their retry time, so their entries must stay.
    pub retried_early: Vec<JobId>,
}

/// A claim whose outcome is unknown, to be read back from Kafka.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doubt {
    pub id: JobId,
    pub topic: String,
    pub attempt: u32,
    /// The claim's token (None only for rows set `dispatching` by hand).
    pub token: Option<u64>,
    /// No record of this claim can be older than this (database clock).
    pub since: DateTime<Utc>,
    pub schedule_time: DateTime<Utc>,
}

/// A job produced to Kafka, ready to be marked.
#[derive(Debug, Clone, Copy)]
pub struct Dispatched {
    pub id: JobId,
    /// The claim that produced it.
    pub token: u64,
    pub partition: i32,
    pub offset: i64,
    pub dispatched_at: DateTime<Utc>,
    /// The row's time and attempt as claimed: what its history row says
    /// when every row of a mark matched.
    pub schedule_time: DateTime<Utc>,
    pub attempt: u32,
}

impl Store {
    /// Changes a pending job whose version is still `version`.
    ///
    /// Crash after this commits: the row has the new time; if Redis still
    /// has the old one, a later old time is refused by the claim's
    /// compare-and-set, and an earlier new time is picked up by the loader's
    /// scan of edited rows.
    pub async fn job_modify(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
    ) -> Result<Modified, StoreError> {
        self.job_modify_with(id, version, changes, None).await
    }

    /// [`Store::job_modify`] for the Kafka ingress: the change of the
    /// request read at `position`, kept in `ingress_position`.
    pub async fn job_modify_at(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
        position: &str,
    ) -> Result<Modified, StoreError> {
        self.job_modify_with(id, version, changes, Some(position))
            .await
    }

    /// Long because it is one UPDATE built from the changes asked for, and
    /// the answer read back in its transaction.
    async fn job_modify_with(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
        position: Option<&str>,
    ) -> Result<Modified, StoreError> {
        // One transaction, so the answer reads the row as this change left
        // it, not as a dispatcher took it a moment later.
        let mut tx = self.begin().await?;
        let token = event_token();
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET ");
        // First, so that it compares the time the row had: a move to the
        // time it already has is not recorded.
        match changes.schedule {
            Some(Schedule::At(at)) => {
                query
                    .push("event_token = IF(schedule_time <=> ")
                    .push_bind(db_time(at))
                    .push(", event_token, ")
                    .push_bind(token)
                    .push("), ");
            }
            Some(Schedule::After { delay_ms }) => {
                query
                    .push("event_token = IF(schedule_time <=> TIMESTAMPADD(MICROSECOND, ")
                    .push_bind(delay_ms.saturating_mul(1000))
                    .push(", UTC_TIMESTAMP(3)), event_token, ")
                    .push_bind(token)
                    .push("), ");
            }
            None => {}
        }
        query.push("version = version + 1");
        if changes.schedule.is_some() {
            // A job moved on purpose is no longer an occurrence to skip
            // when late.
            query.push(", expires_at = NULL");
        }
        match changes.schedule {
            Some(Schedule::At(at)) => {
                query.push(", schedule_time = ").push_bind(db_time(at));
            }
            Some(Schedule::After { delay_ms }) => {
                query
                    .push(", schedule_time = TIMESTAMPADD(MICROSECOND, ")
                    .push_bind(delay_ms.saturating_mul(1000))
                    .push(", UTC_TIMESTAMP(3))");
            }
            None => {}
        }
        if let Some((payload, kind)) = &changes.payload {
            query
                .push(", payload = ")
                .push_bind(payload)
                .push(", payload_kind = ")
                .push_bind(kind.as_str());
        }
        if let Some(headers) = &changes.headers {
            query
                .push(", headers = ")
                .push_bind(headers_encode(headers));
        }
        if let Some(position) = position {
            query.push(", ingress_position = ").push_bind(position);
        }
        query
            .push(" WHERE id = ")
            .push_bind(id)
            .push(" AND version = ")
            .push_bind(version)
            .push(" AND status = 'pending'");
        let applied = query.build().execute(&mut *tx).await?.rows_affected() == 1;
        if applied {
            events_record(&mut tx, &self.actor, &[id], token).await?;
        }
        let (job, now) = job_read_back(&mut tx, id).await?;
        tx.commit().await?;
        if applied {
            Ok(Modified::Applied(job, now))
        } else if job.status != Status::Pending {
            Ok(Modified::NotPending(job))
        } else {
            Ok(Modified::VersionMismatch(job))
        }
    }

    /// Cancels a pending job. The compare-and-set on `status = 'pending'` is
    /// what makes an `Applied` answer definitive: the dispatcher's own CAS
    /// can no longer win.
    pub async fn job_cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
        let mut tx = self.begin().await?;
        let token = event_token();
        let applied = sqlx::query(
            "UPDATE jobs SET event_token = ?, status = 'cancelled', version = version + 1 \
             WHERE id = ? AND status = 'pending'",
        )
        .bind(token)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if applied {
            events_record(&mut tx, &self.actor, &[id], token).await?;
        }
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        tx.commit().await?;
        let job = job_from_row(&row)?;
        Ok(match job.status {
            _ if applied => Cancelled::Applied(job),
            Status::Cancelled => Cancelled::Already(job),
            Status::Dispatching => Cancelled::InFlight(job),
            // Pending again between our UPDATE and SELECT (a claim released):
            // the caller may simply try again; say in flight.
            Status::Pending => Cancelled::InFlight(job),
            Status::Dispatched | Status::Succeeded | Status::Dead => Cancelled::TooLate(job),
        })
    }

    /// Inserts many jobs in one statement and one transaction. A (topic,
    /// key) already taken yields `Duplicate` for that item and writes
    /// nothing for it. Returns one row per item, in order, and the database
    /// clock.
    ///
    /// Crash after the commit: as for a single insert, every created job is
    /// in MySQL and will be indexed by the loader or the overdue probe.
    pub async fn job_insert_many(
        &self,
        jobs: &[NewJob],
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        let jobs: Vec<&NewJob> = jobs.iter().collect();
        super::contention_retry(|| self.job_insert_many_once_at(&jobs, None)).await
    }

    /// [`Store::job_insert_many`] for the Kafka ingress: each job with the
    /// position (`<partition>/<offset>/<topic>`) of the request that asks
    /// for it, kept in `ingress_position`.
    pub async fn job_insert_many_at(
        &self,
        jobs: &[&NewJob],
        positions: &[String],
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        super::contention_retry(|| self.job_insert_many_once_at(jobs, Some(positions))).await
    }

    async fn job_insert_many_once_at(
        &self,
        jobs: &[&NewJob],
        positions: Option<&[String]>,
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        let mut tx = self.begin().await?;
        let rows = insert_many_on_at(&mut tx, &self.actor, jobs, positions).await?;
        let now: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok((rows, now.and_utc()))
    }

    /// Jobs matching `filter` with ids above `after`, by id, without their
    /// payloads. Paging by id stays correct while rows change: a row is
    /// never shown twice or skipped because another changed.
    pub async fn job_list(
        &self,
        filter: &JobFilter,
        after: Option<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            // id-order: keyset paging: it needs ids to be a total order, not a time
            // order (a job created meanwhile with a lower id is simply not listed).
            "SELECT {JOB_COLUMNS_NO_PAYLOAD} FROM jobs WHERE id > "
        ));
        query.push_bind(after.unwrap_or(0));
        if let Some(topic) = &filter.topic {
            query.push(" AND topic = ").push_bind(topic);
        }
        if let Some(status) = filter.status {
            query.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(key) = &filter.key {
            query.push(" AND job_key = ").push_bind(key);
        }
        run_at_push(&mut query, filter.run_at_from, filter.run_at_to);
        topic_patterns_push(&mut query, filter.topic_patterns.as_deref());
        // id-order: the keyset paging's order (see above).
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(job_from_row).collect()
    }

    /// Every recorded change of a job, oldest first.
    pub async fn job_history(&self, id: JobId) -> Result<Vec<JobEvent>, StoreError> {
        let rows = sqlx::query(
            // id-order: a job's events in the order they were written. Each is written
            // in the transaction that changes (and so locks) the job's row, so one
            // job's events are inserted one after another; ids from one counter on
            // InnoDB, from one allocator on TiDB (the baseline's AUTO_ID_CACHE=1).
            "SELECT at, actor, status, schedule_time, attempt FROM job_events \
             WHERE job_id = ? ORDER BY id",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        if rows.is_empty() {
            // No history and no job: say so; a job always has its creation.
            self.job_get(id).await?;
        }
        rows.iter()
            .map(|row| {
                let at: NaiveDateTime = row.try_get("at")?;
                let scheduled: NaiveDateTime = row.try_get("schedule_time")?;
                let status = text(row, "status")?.unwrap_or_default();
                Ok(JobEvent {
                    at: at.and_utc(),
                    actor: text(row, "actor")?.unwrap_or_default(),
                    status: status
                        .parse()
                        .map_err(|_| StoreError::Corrupt(format!("job {id}: event status")))?,
                    schedule_time: scheduled.and_utc(),
                    attempt: row.try_get("attempt")?,
                })
            })
            .collect()
    }

    /// Pending jobs changed at or after `since` (by hand, rescheduled,
    /// requeued, released) — not freshly inserted ones — due before
    /// `until`, in (`updated_at`, id) order after `after`. Returns them with
    /// the position of the last one, for paging (one bulk UPDATE gives many
    /// rows the same `updated_at`).
    pub async fn job_list_edited(
        &self,
        since: DateTime<Utc>,
        after: Option<(DateTime<Utc>, JobId)>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<(Vec<WindowEntry>, Option<(DateTime<Utc>, JobId)>), StoreError> {
        // `changed_at` (V31) is NULL for a job as it was inserted: the
        // range holds only rows changed since, however many were created.
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, schedule_time, changed_at FROM jobs WHERE status = 'pending' \
             AND schedule_time < ",
        );
        query.push_bind(db_time(until));
        query.push(" AND changed_at >= ").push_bind(db_time(since));
        if let Some((at, id)) = after {
            query
                .push(" AND (changed_at > ")
                .push_bind(db_time(at))
                .push(" OR (changed_at = ")
                .push_bind(db_time(at))
                .push(" AND id > ")
                .push_bind(id)
                .push("))");
        }
        query
            .push(" ORDER BY changed_at, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        let mut last = None;
        let entries = rows
            .iter()
            .map(|row| {
                let entry = WindowEntry::from_row(row)?;
                let updated: NaiveDateTime = row.try_get("changed_at")?;
                last = Some((updated.and_utc(), entry.id));
                Ok(entry)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((entries, last))
    }

    /// Inserts a job; returns it as stored with the database's clock at that
    /// moment. The schedule of a `delay_ms` job is computed from the
    /// database's clock inside the INSERT.
    ///
    /// Crash after this commits: the job exists and will be found by the
    /// loader or the overdue probe; the caller (who got no answer) may retry
    /// with the same key to get it back.
    pub async fn job_insert(&self, job: &NewJob) -> Result<(Job, DateTime<Utc>), StoreError> {
        super::contention_retry(|| self.job_insert_once(job)).await
    }

    async fn job_insert_once(&self, job: &NewJob) -> Result<(Job, DateTime<Utc>), StoreError> {
        let headers = headers_encode(&job.headers);
        let (at, delay_us) = match job.schedule {
            Schedule::At(at) => (Some(db_time(at)), None),
            Schedule::After { delay_ms } => (None, Some(delay_ms.saturating_mul(1000))),
        };
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO jobs (topic, job_key, payload, payload_kind, headers, schedule_time, \
             max_attempts, expects_result, backoff_base_ms, backoff_cap_ms, ack_timeout_ms, \
             trace_parent, schedule_id, expires_at) \
             VALUES (?, ?, ?, ?, ?, COALESCE(?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))), \
             ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&job.topic)
        .bind(&job.key)
        .bind(&job.payload)
        .bind(job.payload_kind.as_str())
        .bind(headers)
        .bind(at)
        .bind(delay_us)
        .bind(job.policy.max_attempts)
        .bind(job.policy.expects_result)
        .bind(job.policy.backoff_base_ms)
        .bind(job.policy.backoff_cap_ms)
        .bind(job.policy.ack_timeout_ms)
        .bind(&job.trace_parent)
        .bind(job.schedule_id)
        .bind(job.expires_at.map(db_time))
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query(&format!(
            "SELECT {CREATED_COLUMNS}, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id = LAST_INSERT_ID()"
        ))
        .fetch_one(&mut *tx)
        .await?;
        let now: NaiveDateTime = row.try_get("db_now")?;
        let job = job_created(job, &row)?;
        events_record_new(&mut tx, &self.actor, &[&job]).await?;
        tx.commit().await?;
        Ok((job, now.and_utc()))
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
    /// The job holding (topic, key), with the ingress position of the last
    /// request that created or moved it (None: no request did).
    pub async fn job_find_by_key_at(
        &self,
        topic: &str,
        key: &str,
    ) -> Result<Option<(Job, Option<String>)>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS}, ingress_position FROM jobs WHERE topic = ? AND job_key = ?"
        ))
        .bind(topic)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let position: Option<Vec<u8>> = row.try_get("ingress_position")?;
        let position = position.map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
        Ok(Some((job_from_row(&row)?, position)))
    }

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
    /// A range scan of `ix_jobs_status_at` (`status_at` is `schedule_time`
    /// while pending, V34): far-future rows are never read. Serves the loader (jobs entering the window) and the
    /// reconciler's overdue probe.
    pub async fn job_list_pending(
        &self,
        from: Option<DateTime<Utc>>,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        self.job_list_pending_where(from, until, after, limit, false)
            .await
    }

    /// [`Store::job_list_pending`] without the jobs of paused topics (they
    /// are kept out of the index until their topic resumes): the overdue
    /// probe's.
    pub async fn job_list_overdue(
        &self,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        self.job_list_pending_where(None, until, after, limit, true)
            .await
    }

    async fn job_list_pending_where(
        &self,
        from: Option<DateTime<Utc>>,
        until: DateTime<Utc>,
        after: Option<WindowEntry>,
        limit: u32,
        skip_paused: bool,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, status_at AS schedule_time FROM jobs WHERE status = 'pending' AND status_at < ",
        );
        query.push_bind(db_time(until));
        if skip_paused {
            query.push(" AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused)");
        }
        if let Some(from) = from {
            query.push(" AND status_at >= ").push_bind(db_time(from));
        }
        if let Some(after) = after {
            let at = db_time(after.schedule_time);
            query
                .push(" AND (status_at > ")
                .push_bind(at)
                .push(" OR (status_at = ")
                .push_bind(at)
                .push(" AND id > ")
                .push_bind(after.id)
                .push("))");
        }
        query
            .push(" ORDER BY status_at, id LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(WindowEntry::from_row).collect()
    }

    /// The claim compare-and-set: `pending → dispatching` for those of `ids`
    /// that are pending and due by the database's clock, under `token`, with
    /// a lease of `lease` — provided `fence` holds (the instance is alive and
    /// owns the ids' shards at the epochs it acquired them with), so an
    /// instance that lost its shards while paused wins nothing. Returns what
    /// became of every id.
    ///
    /// Crash after the UPDATE commits: the rows stay `dispatching` under the
    /// instance; once it is dead (heartbeat past the TTL) they are put in
    /// doubt and read back (the claim lease is the backstop), found absent,
    /// and produced.
    pub async fn job_claim_many(
        &self,
        ids: &[JobId],
        token: u64,
        lease: Duration,
        fence: &Fence,
    ) -> Result<ClaimOutcome, StoreError> {
        self.job_claim_many_with(ids, token, lease, fence, true, Duration::ZERO)
            .await
    }

    /// [`Store::job_claim_many`], checking paused topics only when
    /// `paused_check`, and taking jobs due within `lookahead` of the
    /// database's clock (the dispatcher holds them until their time; the
    /// outcome's `db_now` tells it where the database's clock stood).
    ///
    /// The pause check costs the compare-and-set about a quarter of its
    /// speed (a subquery per statement on MariaDB), so the dispatcher leaves
    /// it out while its copy of the controls is fresh and names no paused
    /// topic (see `topic_controls::TopicControls::claim_checks_pauses`).
    ///
    /// Long because it is one compare-and-set transaction with its read-back:
    /// the UPDATE and the rows it won share the connection and the locks.
    pub async fn job_claim_many_with(
        &self,
        ids: &[JobId],
        token: u64,
        lease: Duration,
        fence: &Fence,
        paused_check: bool,
        lookahead: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        if ids.is_empty() {
            return Ok(ClaimOutcome::default());
        }
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        let lookahead_us = u64::try_from(lookahead.as_micros()).unwrap_or(u64::MAX);
        // One index entry moves, the job's in `ix_jobs_status_at` (V35):
        // `status_at` stays `schedule_time`, and `updated_at` is kept as it
        // was (`claimed_at` says when), so `changed_at` (V31) stays NULL
        // for a job as created. The mark moves that entry once more. The
        // claim columns overwrite their placeholders ([`CLAIM_NONE`]), so
        // the row does not grow.
        // By the primary key whatever the statistics say: on a table whose
        // statistics lag its rows (a fresh one, one just filled) the
        // optimizer takes a claim of thousands of ids for most of the table
        // and scans all of it, once per claim (a 50,000-job burst on a new
        // table read 50,000 rows for every 8,000 claimed).
        let mut update = QueryBuilder::<MySql>::new(
            "UPDATE jobs FORCE INDEX (PRIMARY) SET status = 'dispatching', version = version + 1, \
             updated_at = updated_at, claim_token = ",
        );
        update
            .push_bind(token)
            .push(", claimed_by = ")
            .push_bind(fence.instance)
            .push(", claimed_at = UTC_TIMESTAMP(3), claim_expires_at = TIMESTAMPADD(MICROSECOND, ")
            .push_bind(lease_us)
            .push(
                ", UTC_TIMESTAMP(3)) WHERE status = 'pending' \
                 AND schedule_time <= TIMESTAMPADD(MICROSECOND, ",
            )
            .push_bind(lookahead_us)
            .push(
                ", UTC_TIMESTAMP(3)) \
                 AND (expires_at IS NULL OR expires_at > UTC_TIMESTAMP(3) OR attempt > 1) AND ",
            );
        if paused_check {
            update.push(PAUSED_NOT);
        }
        push_fence(&mut update, fence);
        update.push(" AND id IN ");
        push_id_list(&mut update, ids);

        let mut select = QueryBuilder::<MySql>::new(format!(
            "SELECT {JOB_COLUMNS}, claim_token, UTC_TIMESTAMP(3) AS db_now, "
        ));
        push_fence(&mut select, fence);
        select.push(
            " AS fence_holds, COALESCE(expires_at <= UTC_TIMESTAMP(3) AND attempt = 1, FALSE) AS expired, ",
        );
        select.push(if paused_check {
            "topic IN (SELECT topic FROM topic_controls WHERE paused)"
        } else {
            "FALSE"
        });
        select.push(" AS paused FROM jobs WHERE id IN ");
        push_id_list(&mut select, ids);

        // The UPDATE commits on its own: a transaction around it and the
        // SELECT would hold the locks its fence takes on `shard_leases` and
        // `instances` for as long as this process is paused between the
        // two, and stop every other instance's heartbeat and takeover (the
        // fault suite's pause test hung on it). Both run on one connection;
        // if the SELECT fails, what this claim won was never seen, so
        // nothing was sent: released at once by its token, not left for
        // the lease.
        let mut conn = self.pool.acquire().await?;
        update.build().execute(&mut *conn).await?;
        let rows = match select.build().fetch_all(&mut *conn).await {
            Ok(rows) => rows,
            Err(err) => {
                drop(conn);
                if let Err(release) = self
                    .job_release_many(token, ids, "claim not read back; released unsent")
                    .await
                {
                    tracing::warn!(error = %release, "cannot release a claim whose read failed; its lease will");
                }
                return Err(err.into());
            }
        };

        let mut outcome = ClaimOutcome::default();
        let mut seen = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: JobId = row.try_get("id")?;
            let status = text(row, "status")?.unwrap_or_default();
            let schedule_time: NaiveDateTime = row.try_get("schedule_time")?;
            let schedule_time = schedule_time.and_utc();
            let claimed_by: Option<u64> = row.try_get("claim_token")?;
            let db_now: NaiveDateTime = row.try_get("db_now")?;
            let fence_holds: i64 = row.try_get("fence_holds")?;
            let expired: i64 = row.try_get("expired")?;
            let paused: i64 = row.try_get("paused")?;
            outcome.db_now = Some(db_now.and_utc());
            seen.push(id);
            match status.as_str() {
                // Decoded one by one: a row this claim won that does not
                // decode (a hand edit the column accepted) is set aside
                // below, and never holds up the others.
                "dispatching" if claimed_by == Some(token) => match job_from_row(row) {
                    Ok(job) => outcome.won.push(job),
                    Err(err) => outcome.unreadable.push((id, err.to_string())),
                },
                "pending" if fence_holds == 0 => outcome.fenced.push(id),
                "pending" if paused != 0 => outcome.paused.push(id),
                "pending" if expired != 0 && schedule_time <= db_now.and_utc() => {
                    outcome.expired.push(id)
                }
                "pending" => outcome.not_due.push(WindowEntry { id, schedule_time }),
                _ => outcome.stale.push(id),
            }
        }
        for (id, reason) in &outcome.unreadable {
            // Crash before this: the row is dispatching under this claim,
            // never sent; after the lease it is read back, found absent,
            // claimed again, and set aside then.
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let event = event_token();
            sqlx::query(
                "UPDATE jobs SET event_token = ?, status = 'dead', version = version + 1, \
                 claim_token = NULL, claimed_by = NULL, claimed_at = NULL, \
                 claim_expires_at = NULL, last_error = ? \
                 WHERE id = ? AND status = 'dispatching' AND claim_token = ?",
            )
            .bind(event)
            .bind(format!(
                "{UNREADABLE_PREFIX}{reason}; repair the row by hand, then redrive it"
            ))
            .bind(*id)
            .bind(token)
            .execute(&mut *tx)
            .await?;
            events_record(&mut tx, &self.actor, &[*id], event).await?;
            tx.commit().await?;
        }
        outcome
            .stale
            .extend(ids.iter().filter(|id| !seen.contains(id)));
        Ok(outcome)
    }

    /// `dispatching → dispatched` for jobs their claims produced, recording
    /// where each record landed. Returns how many rows were marked (a row
    /// not marked lost its claim meanwhile: lease expired and settled by
    /// reading back), and
    /// which a consumer's report already sent back to `pending` for a retry.
    ///
    /// Crash before this commits: the records are on Kafka but the rows are
    /// `dispatching`; after the lease (or the instance's death) the
    /// reconciler reads the topic back, finds them, and marks them here.
    pub async fn job_mark_dispatched_many(
        &self,
        jobs: &[Dispatched],
    ) -> Result<Marked, StoreError> {
        // In id order, the order reports lock rows in, so the two do not
        // deadlock.
        let mut jobs = jobs.to_vec();
        jobs.sort_unstable_by_key(|job| job.id);
        // One UPDATE per chunk, joined to the positions as a derived table:
        // linear in the rows (a CASE list per column would be quadratic), and
        // plain SQL on both MySQL 8 and MariaDB (no VALUES constructor).
        const CHUNK: usize = 1000;
        let mut marked = Marked::default();
        for chunk in jobs.chunks(CHUNK) {
            let token = event_token();
            let mut query = positions_join(chunk);
            // A job expecting a result waits for it until the ack
            // deadline, counted on the database's clock.
            query.push("SET j.event_token = ").push_bind(token).push(
                ", j.status = 'dispatched', j.version = j.version + 1, \
                     j.claim_token = NULL, j.claimed_by = NULL, j.claim_expires_at = NULL, \
                     j.claimed_at = NULL, j.dispatched_at = d.t, \
                     j.kafka_partition = d.p, j.kafka_offset = d.o, \
                     j.ack_deadline = IF(j.expects_result, \
                       TIMESTAMPADD(MICROSECOND, j.ack_timeout_ms * 1000, UTC_TIMESTAMP(3)), NULL) \
                     WHERE j.status = 'dispatching' AND COALESCE(j.claim_token, 0) = d.k",
            );
            let ids: Vec<JobId> = chunk.iter().map(|job| job.id).collect();
            let mut tx = self.begin().await?;
            let chunk_marked = query.build().execute(&mut *tx).await?.rows_affected();
            if chunk_marked == chunk.len() as u64 {
                // Every row matched its claim: their history rows are known
                // without reading them again.
                let done: Vec<EventRow> = chunk
                    .iter()
                    .map(|job| {
                        let status = Status::Dispatched.as_str().to_owned();
                        (job.id, status, db_time(job.schedule_time), job.attempt)
                    })
                    .collect();
                events_insert_rows(&mut tx, &self.actor, &done).await?;
            } else {
                events_record(&mut tx, &self.actor, &ids, token).await?;
            }
            tx.commit().await?;
            marked.marked += chunk_marked;
            if chunk_marked < chunk.len() as u64 {
                self.job_mark_settled_early(chunk, &mut marked).await?;
            }
        }
        Ok(marked)
    }

    /// Records where the records of these claims landed for jobs a
    /// consumer's report settled before the dispatcher marked them (the
    /// report keeps the claim token for this). Their status is the report's.
    async fn job_mark_settled_early(
        &self,
        jobs: &[Dispatched],
        marked: &mut Marked,
    ) -> Result<(), StoreError> {
        // A row set `dispatching` by hand ([`CLAIM_NONE`]) was no claim of
        // tickler's: no report holds its token.
        let jobs: Vec<Dispatched> = jobs.iter().filter(|job| job.token != 0).copied().collect();
        if jobs.is_empty() {
            return Ok(());
        }
        let jobs = jobs.as_slice();
        let ids: Vec<JobId> = jobs.iter().map(|job| job.id).collect();
        let mut retried = QueryBuilder::<MySql>::new(
            "SELECT id, claim_token FROM jobs WHERE status = 'pending' AND id IN ",
        );
        push_id_list(&mut retried, &ids);
        let retried: Vec<(JobId, Option<u64>)> =
            retried.build_query_as().fetch_all(&self.pool).await?;
        marked
            .retried_early
            .extend(retried.into_iter().filter_map(|(id, token)| {
                jobs.iter()
                    .any(|job| job.id == id && Some(job.token) == token)
                    .then_some(id)
            }));
        let mut query = positions_join(jobs);
        query.push(
            "SET j.claim_token = NULL, j.claimed_by = NULL, j.claim_expires_at = NULL, \
             j.dispatched_at = d.t, j.kafka_partition = d.p, j.kafka_offset = d.o \
             WHERE j.status <> 'dispatching' AND j.claim_token = d.k",
        );
        marked.marked += query.build().execute(&self.pool).await?.rows_affected();
        Ok(())
    }

    /// Claims whose outcome is to be found out now: rows `dispatching`
    /// whose lease (or, for a claim already in doubt, its quiet time)
    /// expired by the database's clock, or which have none (set
    /// `dispatching` by hand). Their record may or may not be on
    /// Kafka; the reconciler reads their topics back to tell, and until it
    /// has, a cancel answers `in_flight`. Oldest first.
    pub async fn job_doubts_due(&self, limit: u32) -> Result<Vec<Doubt>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DOUBT_COLUMNS} FROM jobs WHERE status = 'dispatching' \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             ORDER BY claim_expires_at LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(doubt_from_row).collect()
    }

    /// The topics that have claims to be found out now (as
    /// [`Store::job_doubts_due`] means it), each with how many, the topic
    /// with the oldest first (rows set `dispatching` by hand, which have no
    /// quiet time, before all). A reader takes topics in this order, so
    /// that one topic's many doubts never keep another's from being read.
    pub async fn job_doubt_topics(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, COUNT(*) AS n, MIN(COALESCE(claim_expires_at, '1000-01-01')) AS oldest \
             FROM jobs WHERE status = 'dispatching' \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             GROUP BY topic ORDER BY oldest, topic",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                Ok((
                    text(row, "topic")?.unwrap_or_default(),
                    u64::try_from(n).unwrap_or_default(),
                ))
            })
            .collect()
    }

    /// [`Store::job_doubts_due`] of one topic.
    pub async fn job_doubts_due_on(
        &self,
        topic: &str,
        limit: u32,
    ) -> Result<Vec<Doubt>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DOUBT_COLUMNS} FROM jobs WHERE status = 'dispatching' AND topic = ? \
             AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL) \
             ORDER BY claim_expires_at LIMIT ?"
        ))
        .bind(topic)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(doubt_from_row).collect()
    }

    /// Puts claims in doubt: their records were handed to the broker and
    /// their fate is unknown (the send timed out, the broker connection
    /// failed mid-request). The rows stay `dispatching` — a cancel answers
    /// `in_flight`, a PATCH is refused — until the reconciler has read the
    /// topic back, no sooner than `quiet` from now (by when the producer has
    /// given up on them and the broker has taken what was on the wire).
    /// The claim keeps its token: a late acknowledgement still marks it.
    ///
    /// Crash after this commits: the reconciler settles them as for a dead
    /// instance's claims.
    pub async fn job_doubt_many(
        &self,
        token: u64,
        ids: &[JobId],
        error: &str,
        quiet: Duration,
    ) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let quiet_us = u64::try_from(quiet.as_micros()).unwrap_or(u64::MAX);
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE jobs SET claimed_by = NULL, claim_expires_at = LEAST(COALESCE(claim_expires_at, \
             TIMESTAMPADD(MICROSECOND, ",
        );
        // (LEAST of a NULL is NULL: a row without a lease gets the quiet
        // time itself.)
        query
            .push_bind(quiet_us)
            .push(", UTC_TIMESTAMP(3))), TIMESTAMPADD(MICROSECOND, ")
            .push_bind(quiet_us)
            .push(", UTC_TIMESTAMP(3))), last_error = ")
            .push_bind(error)
            .push(" WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        Ok(query.build().execute(&self.pool).await?.rows_affected())
    }

    /// `dispatching → pending` for claims in doubt whose record the
    /// reconciler did not find on Kafka once nothing more of them could
    /// arrive: they are produced again (same attempt; `last_error` keeps
    /// why). Returns those it moved, to be indexed.
    ///
    /// Crash after this commits: the rows are pending and overdue; the
    /// overdue probe indexes them.
    pub async fn job_doubt_absent(&self, doubts: &[Doubt]) -> Result<Vec<WindowEntry>, StoreError> {
        let mut moved = Vec::new();
        for doubt in doubts {
            let token = event_token();
            let mut tx = self.begin().await?;
            // `last_error` before the claim columns: a single-table
            // UPDATE assigns left to right, and it reads `claimed_by`.
            let done = sqlx::query(&format!(
                "UPDATE jobs SET event_token = ?, status = 'pending', version = version + 1, \
                 last_error = IF(COALESCE(claimed_by, 0) = 0, last_error, \
                   'claim expired: the dispatcher died, stalled or lost its mark; not found on kafka, produced again'), \
                 {CLAIM_NONE} \
                 WHERE id = ? AND status = 'dispatching' AND COALESCE(claim_token, 0) = COALESCE(?, 0) \
                 AND (claim_expires_at < UTC_TIMESTAMP(3) OR claim_expires_at IS NULL)",
            ))
            .bind(token)
            .bind(doubt.id)
            .bind(doubt.token)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            events_record(&mut tx, &self.actor, &[doubt.id], token).await?;
            tx.commit().await?;
            if done == 1 {
                moved.push(WindowEntry {
                    id: doubt.id,
                    schedule_time: doubt.schedule_time,
                });
            }
        }
        Ok(moved)
    }

    /// `pending → cancelled` for jobs past their `expires_at` (a `skip`
    /// schedule's occurrences that could not be produced in time). Only a
    /// first attempt expires: a retry the consumer asked for runs late.
    /// Returns how many were cancelled.
    pub async fn job_expire_many(&self, ids: &[JobId]) -> Result<u64, StoreError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let token = event_token();
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        query.push_bind(token).push(
            ", status = 'cancelled', version = version + 1, \
             last_error = 'expired: not produced within its schedule''s misfire grace (misfire = skip)' \
             WHERE status = 'pending' AND expires_at <= UTC_TIMESTAMP(3) AND attempt = 1 AND id IN ",
        );
        push_id_list(&mut query, ids);
        let mut tx = self.begin().await?;
        let expired = query.build().execute(&mut *tx).await?.rows_affected();
        events_record(&mut tx, &self.actor, ids, token).await?;
        tx.commit().await?;
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
        let event = event_token();
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        query
            .push_bind(event)
            .push(", status = 'pending', version = version + 1, ")
            .push(CLAIM_NONE)
            .push(", last_error = ");
        query
            .push_bind(error)
            .push(" WHERE status = 'dispatching' AND claim_token = ")
            .push_bind(token)
            .push(" AND id IN ");
        push_id_list(&mut query, ids);
        let mut tx = self.begin().await?;
        let released = query.build().execute(&mut *tx).await?.rows_affected();
        events_record(&mut tx, &self.actor, ids, event).await?;
        tx.commit().await?;
        Ok(released)
    }
}

/// Inserts many jobs in one statement on `conn` (inside the caller's
/// transaction). A (topic, key) already taken yields `Duplicate` for that
/// item and writes nothing for it. One row per item, in order.
pub(super) async fn insert_many_on(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    jobs: &[NewJob],
) -> Result<Vec<BatchRow>, StoreError> {
    let jobs: Vec<&NewJob> = jobs.iter().collect();
    insert_many_on_at(conn, actor, &jobs, None).await
}

/// Most rows one INSERT statement carries: 16 placeholders a row keeps a
/// statement below the server's 65,535 (ERROR 1390), with room for the
/// history rows written after it.
const INSERT_ROWS_MAX: usize = 2_000;

/// [`insert_many_on`], each row with the ingress position of the request
/// that asks for it when given: in the statements [`statement_rows`] says.
async fn insert_many_on_at(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    jobs: &[&NewJob],
    positions: Option<&[String]>,
) -> Result<Vec<BatchRow>, StoreError> {
    let mut rows = Vec::with_capacity(jobs.len());
    let mut at = 0;
    for n in statement_rows(jobs.len()) {
        let chunk = &jobs[at..at + n];
        let positions = positions.map(|p| &p[at.min(p.len())..(at + n).min(p.len())]);
        rows.extend(insert_chunk_on(conn, actor, chunk, positions).await?);
        at += n;
    }
    Ok(rows)
}

/// The rows of each INSERT a batch of `n` is written with: statements of
/// [`INSERT_ROWS_MAX`], then one of the whole hundreds left, then one of
/// the rest. A statement's text depends on its number of rows, and sqlx
/// prepares each text once a connection (the server describes every one
/// of its thousands of parameters back); batches of every size then share
/// a few dozen texts, where a text of their own was prepared again for
/// nearly every batch of the Kafka ingress, whose runs have any length.
fn statement_rows(mut n: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    while n >= INSERT_ROWS_MAX {
        sizes.push(INSERT_ROWS_MAX);
        n -= INSERT_ROWS_MAX;
    }
    sizes.extend(
        [n / 100 * 100, n % 100]
            .into_iter()
            .filter(|rows| *rows > 0),
    );
    sizes
}

/// One INSERT of at most [`INSERT_ROWS_MAX`] rows, and its read-back.
///
/// Long because it is one statement built row by row, then its read-back.
async fn insert_chunk_on(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    jobs: &[&NewJob],
    positions: Option<&[String]>,
) -> Result<Vec<BatchRow>, StoreError> {
    // Each row carries token_base | item index, so the rows can be read
    // back and matched to their items (MySQL has no RETURNING).
    let token_base: u64 = rand::random::<u64>() & !0xFFFF;
    let mut insert = QueryBuilder::<MySql>::new(
        "INSERT INTO jobs (topic, job_key, payload, payload_kind, headers, schedule_time, \
         max_attempts, expects_result, backoff_base_ms, backoff_cap_ms, ack_timeout_ms, \
         trace_parent, schedule_id, expires_at, create_token",
    );
    insert.push(if positions.is_some() {
        ", ingress_position) "
    } else {
        ") "
    });
    insert.push_values(jobs.iter().enumerate(), |mut row, (index, job)| {
        let (at, delay_us) = match job.schedule {
            Schedule::At(at) => (Some(db_time(at)), None),
            Schedule::After { delay_ms } => (None, Some(delay_ms.saturating_mul(1000))),
        };
        row.push_bind(&job.topic)
            .push_bind(&job.key)
            .push_bind(&job.payload)
            .push_bind(job.payload_kind.as_str())
            .push_bind(headers_encode(&job.headers))
            .push_unseparated(", COALESCE(")
            .push_bind_unseparated(at)
            .push_unseparated(", TIMESTAMPADD(MICROSECOND, ")
            .push_bind_unseparated(delay_us)
            .push_unseparated(", UTC_TIMESTAMP(3)))")
            .push_bind(job.policy.max_attempts)
            .push_bind(job.policy.expects_result)
            .push_bind(job.policy.backoff_base_ms)
            .push_bind(job.policy.backoff_cap_ms)
            .push_bind(job.policy.ack_timeout_ms)
            .push_bind(&job.trace_parent)
            .push_bind(job.schedule_id)
            .push_bind(job.expires_at.map(db_time))
            .push_bind(token_base | index as u64);
        if let Some(positions) = positions {
            row.push_bind(positions.get(index).map(String::as_str));
        }
    });
    insert.push(" ON DUPLICATE KEY UPDATE id = id");
    let first_id = insert.build().execute(&mut *conn).await?.last_insert_id();

    let mut rows: Vec<BatchRow> = jobs.iter().map(|_| BatchRow::Duplicate).collect();
    if first_id > 0 {
        // id-order: one statement's rows get ids from LAST_INSERT_ID() up, on
        // InnoDB (a multi-row insert takes its ids together) and on TiDB; rows are
        // matched to items by create_token, never by their id's position.
        // Our rows have ids from first_id up, in item order; rows of
        // concurrent inserts may sit between them.
        // Only what the database decided: the rest is the items', and
        // sending it back costs the server and the decode.
        let found = sqlx::query(&format!(
            "SELECT {CREATED_COLUMNS}, create_token FROM jobs WHERE id >= ? \
             AND create_token BETWEEN ? AND ? ORDER BY id LIMIT ?"
        ))
        .bind(first_id)
        .bind(token_base)
        .bind(token_base | 0xFFFF)
        .bind(jobs.len() as u64)
        .fetch_all(&mut *conn)
        .await?;
        for row in &found {
            let token: u64 = row.try_get("create_token")?;
            let index = (token - token_base) as usize;
            if let (Some(slot), Some(item)) = (rows.get_mut(index), jobs.get(index)) {
                *slot = BatchRow::Created(job_created(item, row)?);
            }
        }
        let created: Vec<&Job> = rows.iter().filter_map(BatchRow::created).collect();
        events_record_new(conn, actor, &created).await?;
    }
    Ok(rows)
}

/// The positions where records landed, as the derived table `d` (id, k
/// the claim token, p, o, t).
fn positions_join(jobs: &[Dispatched]) -> QueryBuilder<'_, MySql> {
    update_joined(jobs, "d", |query, job| {
        query
            .push_bind(job.id)
            .push(" AS id, ")
            .push_bind(job.token)
            .push(" AS k, ")
            .push_bind(job.partition)
            .push(" AS p, ")
            .push_bind(job.offset)
            .push(" AS o, ")
            .push_bind(db_time(job.dispatched_at))
            .push(" AS t");
    })
}

fn headers_encode(headers: &BTreeMap<String, String>) -> Option<String> {
    if headers.is_empty() {
        None
    } else {
        serde_json::to_string(headers).ok()
    }
}

const DOUBT_COLUMNS: &str = "id, topic, attempt, claim_token, claimed_at, schedule_time";

fn doubt_from_row(row: &MySqlRow) -> Result<Doubt, StoreError> {
    let claimed_at: Option<NaiveDateTime> = row.try_get("claimed_at")?;
    let scheduled: NaiveDateTime = row.try_get("schedule_time")?;
    Ok(Doubt {
        id: row.try_get("id")?,
        topic: text(row, "topic")?.unwrap_or_default(),
        attempt: row.try_get("attempt")?,
        // A row set `dispatching` by hand holds no claim: a NULL token, or
        // the placeholder 0 (`CLAIM_NONE`).
        token: row
            .try_get::<Option<u64>, _>("claim_token")?
            .filter(|token| *token != 0),
        // A record is stamped no earlier than its claim, nor than its
        // schedule (claims made before V22 have no claimed_at).
        since: claimed_at
            .map_or(scheduled, |at| at.max(scheduled))
            .and_utc(),
        schedule_time: scheduled.and_utc(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_written_in_statements_of_a_few_sizes() {
        assert_eq!(statement_rows(0), Vec::<usize>::new());
        assert_eq!(statement_rows(1), vec![1]);
        assert_eq!(statement_rows(1000), vec![1000]);
        assert_eq!(statement_rows(1347), vec![1300, 47]);
        assert_eq!(statement_rows(4369), vec![2000, 2000, 300, 69]);
        for n in 0..5000 {
            let sizes = statement_rows(n);
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes
                .iter()
                .all(|rows| *rows <= INSERT_ROWS_MAX && *rows > 0));
            assert!(sizes.len() <= n / INSERT_ROWS_MAX + 2);
        }
    }
}
