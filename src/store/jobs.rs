//! The API's reads and writes of jobs: insert (one, or many in a few
//! statements, as the schedules and the Kafka ingress do too), get, find
//! by key, list, history, modify and cancel. Named noun-then-verb, so they
//! sort together with the dispatch path's (dispatch.rs); how a row is read
//! is job_row.rs's.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::history::{event_token, events_record, events_record_new, events_record_retargeted};
use super::job_row::{
    job_created, job_from_row, job_from_row_listed, job_from_row_without_body, job_read_back, text,
    CREATED_COLUMNS, JOB_COLUMNS, JOB_COLUMNS_NO_PAYLOAD,
};
use super::payload::packed_sealed;
use super::sql::{db_time, run_at_push, topic_patterns_push, INSERT_ROWS_MAX};
use crate::domain::compression::Codec;
use crate::domain::job::{Expiry, Job, JobId, NewJob, PayloadKind, Schedule, Status, Window};
use crate::domain::keys::Keyring;
use crate::domain::zones::WallClock;

/// What a modification of a pending job changes; None leaves it as is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobChanges {
    pub schedule: Option<Schedule>,
    pub payload: Option<(Vec<u8>, PayloadKind)>,
    pub headers: Option<BTreeMap<String, String>>,
    /// A new expiry (Some(None): none). Left None, a job keeps its own
    /// through a move; a schedule's occurrence moved loses its misfire
    /// expiry (it is no longer an occurrence to skip when late).
    pub expiry: Option<Option<Expiry>>,
    /// A new flexible window (Some(None): none); `schedule` is then the
    /// instant decided in it.
    pub window: Option<Option<Window>>,
    /// A new wall-clock time (Some(None): none, the job keeps only its
    /// instant). A new `schedule` given without one ends the job's.
    pub wall: Option<Option<WallClock>>,
    /// A new Kafka topic (retarget). The job keeps its id, key, payload,
    /// time and attempt; a job on that topic holding its key refuses the
    /// change ([`StoreError::DuplicateKey`]), and so does a schedule's
    /// occurrence (it keeps its schedule's topic: `Modified::Occurrence`).
    pub topic: Option<String>,
    /// Only while the job is still on this topic: the one the caller's
    /// right to change it was checked against (a retarget meanwhile moves
    /// it out of reach, and the answer is a version mismatch).
    pub on_topic: Option<String>,
}

/// What a modification expects of the job besides being pending.
#[derive(Debug, Clone, Copy)]
pub(super) enum Expect<'a> {
    /// Still at this version: a caller's change of the job it read.
    Version(u32),
    /// Still holding this key, whatever its version: a debounce, which
    /// writes the job whole as its request says (the latest request wins).
    HoldingKey(&'a str),
}

impl Expect<'_> {
    fn holds(&self, job: &Job) -> bool {
        match self {
            Expect::Version(version) => job.version == *version,
            Expect::HoldingKey(key) => job.key.as_deref() == Some(*key),
        }
    }
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
    /// A new topic for a schedule's occurrence: it keeps its schedule's.
    Occurrence(Job),
}

/// What became of a cancel.
#[derive(Debug)]
pub enum Cancelled {
    /// The job was pending and is now cancelled: it will never be produced.
    Applied(Job),
    /// It was cancelled before, or expired (not produced by its
    /// `expires_at`): never produced either way.
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
    /// Only dispatched jobs consumer group this has not read past (of the
    /// topics it is known to read: `consumer_offsets`).
    pub unconsumed_by: Option<String>,
    /// Only held jobs (true) or only jobs not held (false): pending jobs a
    /// changed payload schema held back.
    pub held: Option<bool>,
}

/// One entry of a job's history.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEvent {
    pub at: DateTime<Utc>,
    pub actor: String,
    pub status: Status,
    pub schedule_time: DateTime<Utc>,
    pub attempt: u32,
    /// A retarget's topics: (from, to).
    pub topics: Option<(String, String)>,
}

impl Store {
    /// Changes a pending job whose version is still `version`.
    ///
    /// Crash after this commits: the row has the new time; if Redis still
    /// has the old one, a later old time is refused by the claim's
    /// compare-and-set, and an earlier new time is picked up by the loader's
    /// scan of edited rows. A new topic needs nothing of Redis (it holds
    /// ids): the dispatcher produces to the topic the claim reads back.
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
    pub async fn job_modify_with_position(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
        position: &str,
    ) -> Result<Modified, StoreError> {
        self.job_modify_with(id, version, changes, Some(position))
            .await
    }

    async fn job_modify_with(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
        position: Option<&str>,
    ) -> Result<Modified, StoreError> {
        // One transaction, so the answer reads the row as this change left
        // it, not as a dispatcher took it a moment later. A compare-and-set
        // that found the row changed by hand since it read it is tried
        // again on the row as it is now.
        contention_retry(|| async {
            let mut tx = self.begin().await?;
            let modified = self
                .job_modify_on(&mut tx, id, Expect::Version(version), changes, position)
                .await?;
            tx.commit().await?;
            Ok(modified)
        })
        .await
    }

    /// [`Store::job_modify`] on the caller's transaction (which commits).
    ///
    /// Long because it is one UPDATE built from the changes asked for, and
    /// the answer read back in its transaction.
    pub(super) async fn job_modify_on(
        &self,
        tx: &mut sqlx::MySqlConnection,
        id: JobId,
        expect: Expect<'_>,
        changes: &JobChanges,
        position: Option<&str>,
    ) -> Result<Modified, StoreError> {
        // What the job counts for against a token's quota, read before the
        // UPDATE rewrites its payload; charged below if it applies.
        let counted = match changes.payload {
            Some(_) => super::quotas::job_counted_on(&mut *tx, id).await?,
            None => None,
        };
        // A new topic: the one the job is on, so the history names it
        // (None: the job is on it already, or gone). Read plainly: the
        // UPDATE repeats it.
        let moved_from = match &changes.topic {
            Some(to) => {
                let row: Option<(Vec<u8>, Option<u64>)> =
                    sqlx::query_as("SELECT topic, schedule_id FROM jobs WHERE id = ?")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                match row {
                    Some((_, Some(_))) => {
                        // A schedule's occurrence keeps its schedule's topic.
                        // Nothing written: the caller's commit changes nothing.
                        let (job, _) = job_read_back(tx, self, id).await?;
                        return Ok(if job.status != Status::Pending {
                            Modified::NotPending(job)
                        } else if !expect.holds(&job) {
                            Modified::VersionMismatch(job)
                        } else {
                            Modified::Occurrence(job)
                        });
                    }
                    Some((from, None)) if from != to.as_bytes() => {
                        Some(String::from_utf8_lossy(&from).into_owned())
                    }
                    _ => None,
                }
            }
            None => None,
        };
        let token = event_token();
        // What the change keeps of the row as read (payload, headers): the
        // UPDATE repeats it.
        let mut read_kept: Option<Kept> = None;
        let mut query = QueryBuilder::<MySql>::new("UPDATE jobs SET ");
        // First, so that it compares the time the row had: a move to the
        // time it already has is not recorded.
        match changes.schedule {
            _ if moved_from.is_some() => {
                query.push("event_token = ").push_bind(token).push(", ");
            }
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
        query.push("version = version % 4294967295 + 1");
        if let (Some(to), Some(_)) = (&changes.topic, &moved_from) {
            query.push(", topic = ").push_bind(to.as_str());
        }
        // Before `schedule_time` is set: a `ttl_ms` counts from the new
        // time, written out, or from the time the row has.
        match (&changes.expiry, changes.schedule) {
            (Some(None), _) => {
                query.push(", expires_at = NULL");
            }
            (Some(Some(Expiry::At(at))), _) => {
                query.push(", expires_at = ").push_bind(db_time(*at));
            }
            (Some(Some(Expiry::AfterRun { ttl_ms })), schedule) => {
                query
                    .push(", expires_at = TIMESTAMPADD(MICROSECOND, ")
                    .push_bind(ttl_ms.saturating_mul(1000))
                    .push(", ");
                match schedule {
                    Some(Schedule::At(at)) => {
                        query.push_bind(db_time(at));
                    }
                    Some(Schedule::After { delay_ms }) => {
                        query
                            .push("TIMESTAMPADD(MICROSECOND, ")
                            .push_bind(delay_ms.saturating_mul(1000))
                            .push(", UTC_TIMESTAMP(3))");
                    }
                    None => {
                        query.push("schedule_time");
                    }
                }
                query.push(")");
            }
            (None, Some(_)) => {
                // An occurrence moved on purpose is no longer one to skip
                // when late; a job's own expiry stays.
                query.push(", expires_at = IF(schedule_id IS NULL, expires_at, NULL)");
            }
            (None, None) => {}
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
        match (&changes.schedule, &changes.wall) {
            (_, Some(Some(wall))) => {
                query
                    .push(", run_local = ")
                    .push_bind(wall.local)
                    .push(", time_zone = ")
                    .push_bind(wall.zone.clone())
                    .push(", tzdata_version = ")
                    .push_bind(wall.tzdata_version.clone());
            }
            (Some(_), _) | (None, Some(None)) => {
                query.push(", run_local = NULL, time_zone = NULL, tzdata_version = NULL");
            }
            (None, None) => {}
        }
        match &changes.window {
            Some(None) => {
                query.push(", window_ms = NULL, window_start = NULL");
            }
            Some(Some(window)) => {
                query.push(", window_ms = ").push_bind(window.ms);
                match window.start {
                    Schedule::At(at) => {
                        query.push(", window_start = ").push_bind(db_time(at));
                    }
                    Schedule::After { delay_ms } => {
                        query
                            .push(", window_start = TIMESTAMPADD(MICROSECOND, ")
                            .push_bind(delay_ms.saturating_mul(1000))
                            .push(", UTC_TIMESTAMP(3))");
                    }
                }
            }
            None => {}
        }
        if changes.payload.is_some() || changes.headers.is_some() {
            // Both are written together, under one key (or none): the one
            // not changed is read, opened and written again with the other.
            let Resealed {
                row: (payload, headers, key, kind),
                kept,
            } = resealed(
                &mut *tx,
                (&self.keys.sealing(), &self.codec),
                id,
                &changes.payload,
                &changes.headers,
            )
            .await?;
            read_kept = kept;
            query
                .push(", payload = ")
                .push_bind(payload)
                .push(", payload_kind = ")
                .push_bind(kind)
                .push(", headers = ")
                .push_bind(headers)
                .push(", enc_key = ")
                .push_bind(key);
        }
        if changes.payload.is_some() {
            // A new payload lets a held job go: the API checked it against
            // its topic's schema, and the dispatcher checks it again.
            query.push(", held_at = NULL, held_reason = NULL");
        }
        if let Some(position) = position {
            query.push(", ingress_position = ").push_bind(position);
        }
        query
            .push(" WHERE id = ")
            .push_bind(id)
            .push(" AND status = 'pending'");
        match expect {
            Expect::Version(version) => {
                query.push(" AND version = ").push_bind(version);
            }
            Expect::HoldingKey(key) => {
                query.push(" AND job_key = ").push_bind(key);
            }
        }
        if let Some(topic) = &changes.on_topic {
            query.push(" AND topic = ").push_bind(topic.as_str());
        }
        // The compare-and-set repeats what was read to build the change (a
        // person's edit need not move the version): the topic a move
        // leaves, the payload and headers a change of the other keeps.
        if let Some(from) = &moved_from {
            query
                .push(" AND topic = ")
                .push_bind(from.clone())
                .push(" AND schedule_id IS NULL");
        }
        let read_conditions = moved_from.is_some() || read_kept.is_some();
        if let Some(kept) = read_kept {
            query
                .push(" AND payload <=> ")
                .push_bind(kept.payload)
                .push(" AND headers <=> ")
                .push_bind(kept.headers)
                .push(" AND enc_key <=> ")
                .push_bind(kept.enc_key);
        }
        fail_point_pause!("job-modify-read");
        // A new topic whose key a job there holds fails here (the unique
        // key), and the whole change is rolled back: `DuplicateKey`.
        let applied = query.build().execute(&mut *tx).await?.rows_affected() == 1;
        if applied {
            match (&moved_from, &changes.topic) {
                (Some(from), Some(to)) => {
                    events_record_retargeted(
                        &mut *tx,
                        &self.actor,
                        &[(id, from.clone())],
                        to,
                        token,
                    )
                    .await?;
                }
                _ => {
                    events_record(&mut *tx, &self.actor, &[id], token).await?;
                }
            }
            if let (Some((owner, counted)), Some((payload, _))) = (counted, &changes.payload) {
                // Before the commit: a payload grown past its token's
                // quota is rolled back with the whole change (the
                // ingress's is only counted: no quota refuses it).
                super::quotas::payload_recharge_on(
                    &mut *tx,
                    owner,
                    id,
                    (counted, payload.len() as u64),
                    position.is_none(),
                )
                .await?;
            }
        }
        let (job, now) = job_read_back(tx, self, id).await?;
        let on_topic = changes
            .on_topic
            .as_ref()
            .is_none_or(|topic| *topic == job.topic);
        if applied {
            Ok(Modified::Applied(job, now))
        } else if read_conditions && job.status == Status::Pending && expect.holds(&job) && on_topic
        {
            // Only what was read can have failed it: changed by hand since.
            Err(StoreError::lost_race(format!(
                "job {id} changed since its change was built"
            )))
        } else if job.status != Status::Pending {
            Ok(Modified::NotPending(job))
        } else {
            Ok(Modified::VersionMismatch(job))
        }
    }

    /// Cancels a pending job. The compare-and-set on `status = 'pending'` is
    /// what makes an `Applied` answer definitive: the dispatcher's own CAS
    /// can no longer win.
    ///
    /// Once it has committed, nothing fails it: a row whose payload or
    /// headers do not decode (broken by hand, a key or dictionary this
    /// instance lacks) is cancelled like any other and answered without
    /// them ([`job_from_row_without_body`]).
    pub async fn job_cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
        contention_retry(|| self.job_cancel_once(id)).await
    }

    async fn job_cancel_once(&self, id: JobId) -> Result<Cancelled, StoreError> {
        let mut tx = self.begin().await?;
        let token = event_token();
        let applied = sqlx::query(
            "UPDATE jobs SET event_token = ?, status = 'cancelled', version = version % 4294967295 + 1 \
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
        let job = match job_from_row(&row, &self.keys, &self.codec) {
            Ok(job) => job,
            Err(err) => {
                tracing::warn!(
                    job_id = id,
                    error = %err,
                    "a cancelled job's payload or headers do not decode; answered without them"
                );
                job_from_row_without_body(&row)?
            }
        };
        Ok(match job.status {
            _ if applied => Cancelled::Applied(job),
            // Expired first: never produced either way.
            Status::Cancelled | Status::Expired => Cancelled::Already(job),
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
        contention_retry(|| self.job_insert_many_once(&jobs, None)).await
    }

    /// [`Store::job_insert_many`] for the Kafka ingress: each job with the
    /// position (`<partition>/<offset>/<topic>`) of the request that asks
    /// for it, kept in `ingress_position`.
    pub async fn job_insert_many_with_positions(
        &self,
        jobs: &[&NewJob],
        positions: &[String],
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        contention_retry(|| self.job_insert_many_once(jobs, Some(positions))).await
    }

    /// [`Store::job_insert_many`] of borrowed jobs, with the ingress's
    /// positions when given.
    pub async fn job_insert_all(
        &self,
        jobs: &[&NewJob],
        positions: Option<&[String]>,
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        contention_retry(|| self.job_insert_many_once(jobs, positions)).await
    }

    async fn job_insert_many_once(
        &self,
        jobs: &[&NewJob],
        positions: Option<&[String]>,
    ) -> Result<(Vec<BatchRow>, DateTime<Utc>), StoreError> {
        let ids = self.job_ids(jobs.len()).await?;
        let mut tx = self.begin().await?;
        let rows = insert_many_with_positions_on(
            &mut tx,
            self,
            &self.keys.sealing(),
            jobs,
            &ids,
            positions,
        )
        .await?;
        if let Some(token) = self.quota {
            // Before the commit: a create past the quota is rolled back whole.
            let created: Vec<(JobId, u64)> = rows
                .iter()
                .zip(jobs)
                .filter_map(|(row, item)| Some((row.created()?.id, item.payload.len() as u64)))
                .collect();
            super::quotas::charge_on(&mut tx, token, &created).await?;
        }
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
        if let Some(group) = &filter.unconsumed_by {
            super::consumption::unconsumed_push(&mut query, group);
        }
        super::holds::held_push(&mut query, filter.held);
        // id-order: the keyset paging's order (see above).
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| job_from_row_listed(row, &self.keys, &self.codec))
            .collect()
    }

    /// Every recorded change of a job, oldest first.
    pub async fn job_history(&self, id: JobId) -> Result<Vec<JobEvent>, StoreError> {
        let rows = sqlx::query(
            // id-order: a job's events in the order they were written. Each is written
            // in the transaction that changes (and so locks) the job's row, so one
            // job's events are inserted one after another; ids from one counter on
            // InnoDB, from one allocator on TiDB (the baseline's AUTO_ID_CACHE=1).
            "SELECT at, actor, status, schedule_time, attempt, topic_from, topic_to \
             FROM job_events WHERE job_id = ? ORDER BY id",
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
                    topics: text(row, "topic_from")?.zip(text(row, "topic_to")?),
                })
            })
            .collect()
    }

    /// Inserts a job; returns it as stored with the database's clock at that
    /// moment. The schedule of a `delay_ms` job is computed from the
    /// database's clock inside the INSERT.
    ///
    /// Crash after this commits: the job exists and will be found by the
    /// loader or the overdue probe; the caller (who got no answer) may retry
    /// with the same key to get it back.
    pub async fn job_insert(&self, job: &NewJob) -> Result<(Job, DateTime<Utc>), StoreError> {
        contention_retry(|| self.job_insert_once(job)).await
    }

    async fn job_insert_once(&self, job: &NewJob) -> Result<(Job, DateTime<Utc>), StoreError> {
        let id = self.job_id().await?;
        let mut tx = self.begin().await?;
        let created = self.job_insert_on(&mut tx, job, id).await?;
        tx.commit().await?;
        Ok(created)
    }

    /// One id for a new job (see [`Store::job_ids`]): taken before the
    /// write's transaction begins.
    pub(super) async fn job_id(&self) -> Result<JobId, StoreError> {
        let ids = self.job_ids(1).await?;
        ids.first()
            .copied()
            .ok_or_else(|| StoreError::Corrupt("no id for a new job".to_owned()))
    }

    /// [`Store::job_insert`] as row `id` (from [`Store::job_ids`]) on the
    /// caller's transaction (which commits).
    pub(super) async fn job_insert_on(
        &self,
        tx: &mut sqlx::MySqlConnection,
        job: &NewJob,
        id: JobId,
    ) -> Result<(Job, DateTime<Utc>), StoreError> {
        // Sealed under its id in its own INSERT: the plain payload and
        // headers never reach the table, its redo log or the binary log.
        // One key for the whole write (see `Keyring::sealing`).
        let keys = self.keys.sealing();
        let (payload, headers, enc_key, kind) = packed_sealed(
            (&keys, &self.codec),
            id,
            &job.payload,
            job.payload_kind,
            &job.headers,
        );
        // Times bound as values, a delay counted from the database's clock
        // (see `insert_chunk_on`).
        let now = if times_relative(job) {
            db_clock_on(&mut *tx).await?
        } else {
            NaiveDateTime::default()
        };
        let times = row_times(job, now);
        let inserted = sqlx::query(
            "INSERT INTO jobs (id, topic, job_key, payload, payload_kind, headers, enc_key, \
             schedule_time, max_attempts, expects_result, backoff_base_ms, backoff_cap_ms, \
             ack_timeout_ms, trace_parent, schedule_id, expires_at, window_ms, window_start, \
             run_local, time_zone, tzdata_version) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(id)
        .bind(&job.topic)
        .bind(&job.key)
        .bind(&payload)
        .bind(kind)
        .bind(&headers)
        .bind(&enc_key)
        .bind(times.schedule)
        .bind(job.policy.max_attempts)
        .bind(job.policy.expects_result)
        .bind(job.policy.backoff_base_ms)
        .bind(job.policy.backoff_cap_ms)
        .bind(job.policy.ack_timeout_ms)
        .bind(&job.trace_parent)
        .bind(job.schedule_id)
        .bind(times.expires_at)
        .bind(job.window.map(|window| window.ms))
        .bind(times.window_start)
        .bind(job.wall.as_ref().map(|wall| wall.local))
        .bind(job.wall.as_ref().map(|wall| wall.zone.as_str()))
        .bind(job.wall.as_ref().map(|wall| wall.tzdata_version.as_str()))
        .execute(&mut *tx)
        .await
        .map_err(StoreError::from);
        if let Err(StoreError::DuplicateKey) = inserted {
            // Its (topic, key) taken, or its id: by a row inserted beside
            // the block (see `id_blocks`), which is no duplicate.
            let taken: Option<i32> = sqlx::query_scalar("SELECT 1 FROM jobs WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
            if taken.is_some() {
                return Err(self.ids_taken(&[id]));
            }
        }
        inserted?;
        let row = sqlx::query(&format!(
            "SELECT {CREATED_COLUMNS}, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id = ?"
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let now: NaiveDateTime = row.try_get("db_now")?;
        let created = job_created(job, &row)?;
        events_record_new(&mut *tx, &self.actor, &[&created]).await?;
        if let Some(token) = self.quota {
            // Before the commit: a create past the quota is rolled back.
            super::quotas::charge_on(&mut *tx, token, &[(created.id, job.payload.len() as u64)])
                .await?;
        }
        Ok((created, now.and_utc()))
    }

    /// A write that found ids of this handle's block taken: the block is
    /// dropped, and the write, rolled back, is made again with new ids.
    pub(super) fn ids_taken(&self, ids: &[JobId]) -> StoreError {
        self.ids.forget();
        StoreError::lost_race(format!(
            "job ids {ids:?} were taken by rows inserted beside their block; the write is made again with new ids"
        ))
    }

    /// A job's topic alone: what a caller's topic scope is checked against
    /// before a write, read without decoding the rest of the row (a cancel
    /// of a row whose payload does not decode goes through).
    pub async fn job_topic(&self, id: JobId) -> Result<String, StoreError> {
        let row = sqlx::query("SELECT topic FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        Ok(text(&row, "topic")?.unwrap_or_default())
    }

    pub async fn job_get(&self, id: JobId) -> Result<Job, StoreError> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StoreError::NotFound(id))?;
        self.job_decode(&row).await
    }

    /// A job read from `row`; a payload dictionary not loaded yet is
    /// loaded once and the row read again, so that a dictionary absent
    /// from `payload_dicts` is a broken row at once, not a wait.
    pub(super) async fn job_decode(&self, row: &sqlx::mysql::MySqlRow) -> Result<Job, StoreError> {
        match job_from_row(row, &self.keys, &self.codec) {
            Err(StoreError::DictionaryUnknown(_)) => {
                self.dicts_refresh().await?;
                job_from_row(row, &self.keys, &self.codec).map_err(dictionary_absent(row))
            }
            decoded => decoded,
        }
    }

    /// The job holding (topic, key), with the ingress position of the last
    /// request that created or moved it (None: no request did).
    pub async fn job_find_by_key_with_position(
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
        Ok(Some((self.job_decode(&row).await?, position)))
    }

    /// The job holding (topic, key), if any.
    pub async fn job_find_by_key(&self, topic: &str, key: &str) -> Result<Option<Job>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE topic = ? AND job_key = ?"
        ))
        .bind(topic)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => Ok(Some(self.job_decode(&row).await?)),
            None => Ok(None),
        }
    }
}

/// Inserts many jobs in one statement on `conn` (inside the caller's
/// transaction), as rows `ids` (from [`Store::job_ids`], one an item),
/// sealed under `keys`. A (topic, key) already taken yields `Duplicate`
/// for that item and writes nothing for it. One row per item, in order.
pub(super) async fn insert_many_on(
    conn: &mut sqlx::MySqlConnection,
    store: &Store,
    keys: &Keyring,
    jobs: &[NewJob],
    ids: &[JobId],
) -> Result<Vec<BatchRow>, StoreError> {
    let jobs: Vec<&NewJob> = jobs.iter().collect();
    insert_many_with_positions_on(conn, store, keys, &jobs, ids, None).await
}

/// [`insert_many_on`], each row with the ingress position of the request
/// that asks for it when given: in the statements [`statement_rows`] says.
async fn insert_many_with_positions_on(
    conn: &mut sqlx::MySqlConnection,
    store: &Store,
    keys: &Keyring,
    jobs: &[&NewJob],
    ids: &[JobId],
    positions: Option<&[String]>,
) -> Result<Vec<BatchRow>, StoreError> {
    if ids.len() != jobs.len() {
        return Err(StoreError::Corrupt(format!(
            "{} ids for {} new jobs",
            ids.len(),
            jobs.len()
        )));
    }
    let mut rows = Vec::with_capacity(jobs.len());
    let mut at = 0;
    for n in statement_rows(jobs.len()) {
        let chunk = &jobs[at..at + n];
        let positions = positions.map(|p| &p[at.min(p.len())..(at + n).min(p.len())]);
        rows.extend(insert_chunk_on(conn, store, keys, chunk, &ids[at..at + n], positions).await?);
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

/// One INSERT of at most [`INSERT_ROWS_MAX`] rows, as rows `ids`, and its
/// read-back.
///
/// Long because it is one statement built row by row, then its read-back.
async fn insert_chunk_on(
    conn: &mut sqlx::MySqlConnection,
    store: &Store,
    keys: &Keyring,
    jobs: &[&NewJob],
    ids: &[JobId],
    positions: Option<&[String]>,
) -> Result<Vec<BatchRow>, StoreError> {
    // Each row carries token_base | item index, so a row read back at an
    // item's id is told from one that took the id first (MySQL has no
    // RETURNING).
    let token_base: u64 = rand::random::<u64>() & !0xFFFF;
    // Compressed, then sealed under its id in this INSERT: the plain
    // payloads and headers never reach the table, its redo log or the
    // binary log.
    let stored: Vec<_> = jobs
        .iter()
        .zip(ids)
        .map(|(job, id)| {
            packed_sealed(
                (keys, &store.codec),
                *id,
                &job.payload,
                job.payload_kind,
                &job.headers,
            )
        })
        .collect();
    // Every time is bound as a value, never an expression per row: MariaDB
    // sets up and evaluates each row's expressions at every execution, and
    // a delay counted inside the INSERT (`TIMESTAMPADD(…, UTC_TIMESTAMP(3))`
    // in four columns) cost it about a third of the statement
    // (docs/benchmarks.md, #61). A delay still counts from the database's
    // clock: read once, on this connection (a virtual clock's session
    // included), when a row of the chunk has one.
    let now = if jobs.iter().any(|job| times_relative(job)) {
        db_clock_on(conn).await?
    } else {
        // Not read by `row_times`: no time of these rows is relative.
        NaiveDateTime::default()
    };
    let times: Vec<RowTimes> = jobs.iter().map(|job| row_times(job, now)).collect();
    // A column NULL in every row is left out (its default is NULL): each
    // bound value costs MariaDB its set-up at every execution, and most
    // jobs have no key, headers, expiry, window or wall clock (#61).
    let columns = OptionalColumns {
        key: jobs.iter().any(|job| job.key.is_some()),
        headers: stored.iter().any(|row| row.1.is_some()),
        enc_key: stored.iter().any(|row| row.2.is_some()),
        trace_parent: jobs.iter().any(|job| job.trace_parent.is_some()),
        schedule_id: jobs.iter().any(|job| job.schedule_id.is_some()),
        expires_at: times.iter().any(|t| t.expires_at.is_some()),
        window: jobs.iter().any(|job| job.window.is_some()),
        wall: jobs.iter().any(|job| job.wall.is_some()),
        position: positions.is_some(),
    };
    let key_literal = key_literal(&stored);
    let key_literal = key_literal.as_deref();
    let mut insert = QueryBuilder::<MySql>::new(format!(
        "INSERT INTO jobs ({}) ",
        columns.names().join(", ")
    ));
    insert.push_values(jobs.iter().enumerate(), |mut row, (index, job)| {
        let times = times[index];
        let (payload, headers, enc_key, kind) = &stored[index];
        row.push_bind(ids[index])
            .push_bind(&job.topic)
            .push_bind(&payload[..])
            .push_bind(*kind)
            .push_bind(times.schedule)
            .push_bind(job.policy.max_attempts)
            .push_bind(job.policy.expects_result)
            .push_bind(job.policy.backoff_base_ms)
            .push_bind(job.policy.backoff_cap_ms)
            .push_bind(job.policy.ack_timeout_ms)
            .push_bind(token_base | index as u64);
        // In the order of `OptionalColumns::names`.
        if columns.key {
            row.push_bind(&job.key);
        }
        if columns.headers {
            row.push_bind(headers.as_deref());
        }
        if columns.enc_key {
            match key_literal {
                // Written as text: one bound value fewer a row (#61).
                Some(literal) => {
                    row.push(literal);
                }
                None => {
                    row.push_bind(enc_key.as_deref());
                }
            }
        }
        if columns.trace_parent {
            row.push_bind(&job.trace_parent);
        }
        if columns.schedule_id {
            row.push_bind(job.schedule_id);
        }
        if columns.expires_at {
            row.push_bind(times.expires_at);
        }
        if columns.window {
            row.push_bind(job.window.map(|window| window.ms))
                .push_bind(times.window_start);
        }
        if columns.wall {
            row.push_bind(job.wall.as_ref().map(|wall| wall.local))
                .push_bind(job.wall.as_ref().map(|wall| wall.zone.as_str()))
                .push_bind(job.wall.as_ref().map(|wall| wall.tzdata_version.as_str()));
        }
        if let Some(positions) = positions {
            row.push_bind(positions.get(index).map(String::as_str));
        }
    });
    insert.push(" ON DUPLICATE KEY UPDATE id = id");
    insert.build().execute(&mut *conn).await?;

    // An item with no row at its id: its (topic, key) was taken.
    let mut rows: Vec<BatchRow> = jobs.iter().map(|_| BatchRow::Duplicate).collect();
    // Only what the database decided: the rest is the items', and sending
    // it back costs the server and the decode.
    let mut select = QueryBuilder::<MySql>::new(format!(
        "SELECT {CREATED_COLUMNS}, create_token FROM jobs WHERE id IN ("
    ));
    let mut list = select.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    select.push(")");
    let found = select.build().fetch_all(&mut *conn).await?;
    let mut taken = Vec::new();
    for row in &found {
        let id: JobId = row.try_get("id")?;
        let token: Option<u64> = row.try_get("create_token")?;
        let index = token
            .and_then(|token| token.checked_sub(token_base))
            .and_then(|index| usize::try_from(index).ok())
            .filter(|index| ids.get(*index) == Some(&id));
        match index.and_then(|index| Some((index, jobs.get(index)?))) {
            Some((index, item)) => rows[index] = BatchRow::Created(job_created(item, row)?),
            // Not this statement's row: it had the id first.
            None => taken.push(id),
        }
    }
    if !taken.is_empty() {
        return Err(store.ids_taken(&taken));
    }
    let created: Vec<&Job> = rows.iter().filter_map(BatchRow::created).collect();
    events_record_new(conn, &store.actor, &created).await?;
    Ok(rows)
}

/// The key id every row of `stored` is sealed under as an SQL string
/// literal, when they share one and it is spelled as key ids are (letters,
/// digits, `.`, `_`, `-`: nothing to escape); None otherwise (bound).
fn key_literal<T, U>(stored: &[(T, U, Option<String>, &'static str)]) -> Option<String> {
    let first = stored.first()?.2.as_deref()?;
    let plain = !first.is_empty()
        && first.len() <= 64
        && first
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    let shared = stored.iter().all(|row| row.2.as_deref() == Some(first));
    (plain && shared).then(|| format!("'{first}'"))
}

/// A new job's times as its row holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowTimes {
    schedule: NaiveDateTime,
    expires_at: Option<NaiveDateTime>,
    window_start: Option<NaiveDateTime>,
}

/// The columns of a batch's INSERT that some of its rows set; the others
/// are left to their default, NULL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OptionalColumns {
    key: bool,
    headers: bool,
    enc_key: bool,
    trace_parent: bool,
    schedule_id: bool,
    expires_at: bool,
    window: bool,
    wall: bool,
    position: bool,
}

impl OptionalColumns {
    /// The INSERT's columns: those every row sets, then the optional ones
    /// present, in the order their values are bound.
    fn names(&self) -> Vec<&'static str> {
        let mut names = vec![
            "id",
            "topic",
            "payload",
            "payload_kind",
            "schedule_time",
            "max_attempts",
            "expects_result",
            "backoff_base_ms",
            "backoff_cap_ms",
            "ack_timeout_ms",
            "create_token",
        ];
        for (present, columns) in [
            (self.key, &["job_key"][..]),
            (self.headers, &["headers"]),
            (self.enc_key, &["enc_key"]),
            (self.trace_parent, &["trace_parent"]),
            (self.schedule_id, &["schedule_id"]),
            (self.expires_at, &["expires_at"]),
            (self.window, &["window_ms", "window_start"]),
            (self.wall, &["run_local", "time_zone", "tzdata_version"]),
            (self.position, &["ingress_position"]),
        ] {
            if present {
                names.extend_from_slice(columns);
            }
        }
        names
    }
}

/// Whether a time of `job` counts from the database's clock (a delay, an
/// expiry after a delayed run, a window starting after a delay).
fn times_relative(job: &NewJob) -> bool {
    matches!(job.schedule, Schedule::After { .. })
        || job.expires_after_ms.is_some()
        || matches!(
            job.window.map(|window| window.start),
            Some(Schedule::After { .. })
        )
}

/// `job`'s times, a delay counted from `now` (the database's clock, in
/// ms), as the INSERT used to compute them: an expiry after the run is
/// counted from the run. Past the end of `DATETIME`'s range a time stays
/// at its end (the horizon check refuses such a delay before this).
fn row_times(job: &NewJob, now: NaiveDateTime) -> RowTimes {
    let at = |schedule: Schedule| match schedule {
        Schedule::At(at) => db_time(at),
        Schedule::After { delay_ms } => ms_later(now, delay_ms),
    };
    let schedule = at(job.schedule);
    RowTimes {
        schedule,
        expires_at: match (job.expires_at, job.expires_after_ms) {
            (Some(at), _) => Some(db_time(at)),
            (None, Some(ttl_ms)) => Some(ms_later(schedule, ttl_ms)),
            (None, None) => None,
        },
        window_start: job.window.map(|window| at(window.start)),
    }
}

/// `at` plus `ms`, at most the end of `DATETIME`'s range.
fn ms_later(at: NaiveDateTime, ms: u64) -> NaiveDateTime {
    let latest = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|day| day.and_hms_milli_opt(23, 59, 59, 999))
        .unwrap_or(NaiveDateTime::MAX);
    i64::try_from(ms)
        .ok()
        .and_then(chrono::Duration::try_milliseconds)
        .and_then(|delay| at.checked_add_signed(delay))
        .map_or(latest, |later| later.min(latest))
}

/// The database's clock (UTC, ms) on `conn`.
async fn db_clock_on(conn: &mut sqlx::MySqlConnection) -> Result<NaiveDateTime, StoreError> {
    Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
        .fetch_one(conn)
        .await?)
}

/// The payload, headers and key of a row as read, which a change of only
/// one of payload and headers keeps: its compare-and-set repeats them.
struct Kept {
    payload: Vec<u8>,
    headers: Option<Vec<u8>>,
    enc_key: Option<Vec<u8>>,
}

/// What [`resealed`] gives: the columns to write, and what they keep of
/// the row as read (None: both were given, nothing was read).
struct Resealed {
    row: (Vec<u8>, Option<String>, Option<String>, &'static str),
    kept: Option<Kept>,
}

/// A change of job `id`'s payload or headers as the row is to hold both:
/// (payload, headers, key, payload_kind), the payload compressed by
/// `codec` when it is on, then both sealed under the active key of
/// `keys`, or plain without one. What the change leaves alone is read from
/// the row (plainly), opened and expanded; the raw columns read are given
/// back for the write to repeat.
async fn resealed(
    conn: &mut sqlx::MySqlConnection,
    (keys, codec): (&Keyring, &Codec),
    id: JobId,
    payload: &Option<(Vec<u8>, PayloadKind)>,
    headers: &Option<BTreeMap<String, String>>,
) -> Result<Resealed, StoreError> {
    let (payload, kind, headers, kept) = match (payload, headers) {
        (Some((payload, kind)), Some(headers)) => (payload.clone(), *kind, headers.clone(), None),
        _ => {
            let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"))
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?
                .ok_or(StoreError::NotFound(id))?;
            let current = job_from_row(&row, keys, codec)?;
            let kept = Kept {
                payload: row.try_get("payload")?,
                headers: row.try_get("headers")?,
                enc_key: row.try_get("enc_key")?,
            };
            let (payload, kind) = payload
                .clone()
                .unwrap_or((current.payload, current.payload_kind));
            (
                payload,
                kind,
                headers.clone().unwrap_or(current.headers),
                Some(kept),
            )
        }
    };
    Ok(Resealed {
        row: packed_sealed((keys, codec), id, &payload, kind, &headers),
        kept,
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

    fn job(schedule: Schedule) -> NewJob {
        NewJob {
            topic: "t".into(),
            key: None,
            payload: Vec::new(),
            payload_kind: crate::domain::job::PayloadKind::Bytes,
            headers: BTreeMap::new(),
            schedule,
            policy: crate::domain::policy::Policy::default(),
            trace_parent: None,
            schedule_id: None,
            expires_at: None,
            expires_after_ms: None,
            window: None,
            wall: None,
        }
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_rows_times_count_a_delay_from_the_database_clock() {
        let now = db_time(utc("2026-11-28T10:00:00.250Z"));
        let at = utc("2027-01-01T00:00:00.123456Z");
        let absolute = job(Schedule::At(at));
        assert!(!times_relative(&absolute));
        assert_eq!(
            row_times(&absolute, now),
            RowTimes {
                schedule: db_time(utc("2027-01-01T00:00:00.123Z")),
                expires_at: None,
                window_start: None,
            }
        );
        let mut delayed = job(Schedule::After { delay_ms: 1_500 });
        delayed.expires_after_ms = Some(60_000);
        delayed.window = Some(crate::domain::job::Window {
            ms: 10_000,
            start: Schedule::After { delay_ms: 1_000 },
        });
        assert!(times_relative(&delayed));
        assert_eq!(
            row_times(&delayed, now),
            RowTimes {
                schedule: db_time(utc("2026-11-28T10:00:01.750Z")),
                expires_at: Some(db_time(utc("2026-11-28T10:01:01.750Z"))),
                window_start: Some(db_time(utc("2026-11-28T10:00:01.250Z"))),
            }
        );
        // An expiry after an instant run counts from it; an instant expiry
        // is kept as given (to the ms).
        let mut after_at = job(Schedule::At(at));
        after_at.expires_after_ms = Some(1_000);
        assert_eq!(
            row_times(&after_at, now).expires_at,
            Some(db_time(utc("2027-01-01T00:00:01.123Z")))
        );
        let mut expiring = job(Schedule::After { delay_ms: 0 });
        expiring.expires_at = Some(utc("2026-12-01T00:00:00.999999Z"));
        assert_eq!(
            row_times(&expiring, now).expires_at,
            Some(db_time(utc("2026-12-01T00:00:00.999Z")))
        );
    }

    #[test]
    fn a_batch_names_only_the_optional_columns_some_row_sets() {
        let none = OptionalColumns {
            key: false,
            headers: false,
            enc_key: false,
            trace_parent: false,
            schedule_id: false,
            expires_at: false,
            window: false,
            wall: false,
            position: false,
        };
        assert_eq!(none.names().len(), 11);
        assert!(!none.names().contains(&"job_key"));
        let some = OptionalColumns {
            key: true,
            window: true,
            position: true,
            ..none
        };
        assert_eq!(
            some.names()[11..],
            ["job_key", "window_ms", "window_start", "ingress_position"]
        );
    }

    #[test]
    fn a_shared_key_id_is_written_as_a_literal_only_when_nothing_needs_escaping() {
        let row = |key: Option<&str>| ((), (), key.map(str::to_owned), "json");
        let rows = |keys: &[Option<&str>]| keys.iter().map(|k| row(*k)).collect::<Vec<_>>();
        assert_eq!(
            key_literal(&rows(&[Some("k-2026.1"), Some("k-2026.1")])).as_deref(),
            Some("'k-2026.1'")
        );
        assert_eq!(
            key_literal(&rows(&[Some("a"), Some("b")])),
            None,
            "two keys"
        );
        assert_eq!(key_literal(&rows(&[Some("a"), None])), None, "one plain");
        assert_eq!(key_literal(&rows(&[None])), None);
        assert_eq!(
            key_literal(&rows(&[Some("it's")])),
            None,
            "bound, never spliced"
        );
        assert_eq!(key_literal(&rows(&[Some("a\\")])), None);
        assert_eq!(key_literal(&rows(&[])), None);
    }

    #[test]
    fn a_delay_past_the_range_of_datetime_stops_at_its_end() {
        let now = db_time(utc("2026-11-28T10:00:00Z"));
        let end = db_time(utc("9999-12-31T23:59:59.999Z"));
        assert_eq!(ms_later(now, u64::MAX), end);
        assert_eq!(ms_later(now, 400_000 * 365 * 86_400_000), end);
        assert_eq!(ms_later(end, 1), end);
        assert_eq!(ms_later(now, 0), now);
    }
}

/// A dictionary still unknown after `payload_dicts` was loaded afresh: not
/// in the table, so the row is broken (no instance writes with one before
/// it is there).
pub(super) fn dictionary_absent(
    row: &sqlx::mysql::MySqlRow,
) -> impl Fn(StoreError) -> StoreError + '_ {
    move |err| {
        match err {
        StoreError::DictionaryUnknown(dict) => StoreError::Corrupt(format!(
            "job {}: compressed payload does not expand: its dictionary {dict} is not in payload_dicts",
            row.try_get::<JobId, _>("id").unwrap_or_default()
        )),
        err => err,
    }
    }
}
