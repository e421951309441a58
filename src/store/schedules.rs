//! Queries on `schedules`, and the creation of their occurrences as jobs.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::history::{event_token, events_insert_rows, events_record_schedule, EventRow};
use super::job_row::{job_from_row_listed, policy_from_row, JOB_COLUMNS_NO_PAYLOAD};
use super::jobs::{insert_many_on, BatchRow};
use super::payload::{schedule_opened, schedule_sealed};
use super::sql::{db_time, push_id_list, topic_patterns_push};
use crate::domain::fires::{self, Fire, FireJob, Gap, GapReason};
use crate::domain::job::{Job, JobId, NewJob, PayloadKind, Schedule, Status, Window};
use crate::domain::keys::Keyring;
use crate::domain::policy::Policy;
use crate::domain::schedule::{self, Bounds, InvalidTiming, Misfire, Occurrence, Progress, Timing};

/// `schedules.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleStatus {
    Active,
    Paused,
    /// Past `end_at`, `max_occurrences` reached, or a cron expression with
    /// no date left: nothing more is created.
    Ended,
}

impl ScheduleStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleStatus::Active => "active",
            ScheduleStatus::Paused => "paused",
            ScheduleStatus::Ended => "ended",
        }
    }

    fn parse(s: &str) -> Option<ScheduleStatus> {
        match s {
            "active" => Some(ScheduleStatus::Active),
            "paused" => Some(ScheduleStatus::Paused),
            "ended" => Some(ScheduleStatus::Ended),
            _ => None,
        }
    }
}

/// What a schedule creates and when: everything a PATCH may change.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleDef {
    pub payload: Vec<u8>,
    pub payload_kind: PayloadKind,
    pub headers: BTreeMap<String, String>,
    pub policy: Policy,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub every_ms: Option<u64>,
    pub start_at: DateTime<Utc>,
    pub end_at: Option<DateTime<Utc>>,
    pub max_occurrences: Option<u32>,
    pub misfire: Misfire,
    pub misfire_grace_ms: u32,
    /// Each occurrence's flexible window (as a job's `window_ms`).
    pub window_ms: Option<u32>,
    /// Each occurrence's time moved later by up to this, decided from its
    /// key.
    pub jitter_ms: Option<u32>,
}

impl ScheduleDef {
    pub fn timing(&self) -> Result<Timing, InvalidTiming> {
        Timing::from_parts(
            self.cron.as_deref(),
            self.time_zone.as_deref(),
            self.every_ms,
            self.start_at,
        )
    }

    pub fn bounds(&self) -> Bounds {
        Bounds {
            end_at: self.end_at,
            max_occurrences: self.max_occurrences,
            misfire: self.misfire,
            misfire_grace: Duration::milliseconds(i64::from(self.misfire_grace_ms)),
            create_max: crate::domain::schedule::create_max_per_pass(
                self.payload.len()
                    + self
                        .headers
                        .iter()
                        .map(|(k, v)| k.len() + v.len())
                        .sum::<usize>(),
            ),
        }
    }

    /// Whether going from `self` to `new` moves occurrences: their times or
    /// their bounds.
    pub fn retimes(&self, new: &ScheduleDef) -> bool {
        self.cron != new.cron
            || self.time_zone != new.time_zone
            || self.every_ms != new.every_ms
            || self.start_at != new.start_at
            || self.end_at != new.end_at
            || self.max_occurrences != new.max_occurrences
            || self.window_ms != new.window_ms
            || self.jitter_ms != new.jitter_ms
    }

    /// The first occurrence at or after `start_at` and after `after`,
    /// within the bounds (None: it never fires again).
    pub fn first_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let timing = self.timing().ok()?;
        let from = after.max(self.start_at - Duration::milliseconds(1));
        timing
            .next_after(from)
            .filter(|at| self.end_at.is_none_or(|end| *at <= end))
    }
}

/// Where an occurrence due at `run_at` goes out: moved by its jitter, then
/// placed in its window, each decided from its key (the jitter's and the
/// window's from different salts, so that they do not move together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub at: DateTime<Utc>,
    pub window: Option<Window>,
}

pub fn occurrence_placed(
    topic: &str,
    key: &str,
    run_at: DateTime<Utc>,
    def: &ScheduleDef,
) -> Placed {
    let jitter = def.jitter_ms.map_or(0, |ms| {
        crate::domain::job::window_offset_ms(topic, Some(&format!("jitter {key}")), ms)
    });
    let start = run_at + Duration::milliseconds(jitter as i64);
    match def.window_ms {
        Some(ms) => {
            let offset = crate::domain::job::window_offset_ms(topic, Some(key), ms);
            Placed {
                at: start + Duration::milliseconds(offset as i64),
                window: Some(Window {
                    ms,
                    start: Schedule::At(start),
                }),
            }
        }
        None => Placed {
            at: start,
            window: None,
        },
    }
}

/// The job of `schedule`'s occurrence: keyed by its instant
/// ([`schedule::occurrence_key`]), due at its `run_at` moved by the
/// schedule's jitter and placed in its window, with the schedule's payload,
/// headers and policy. What the materializer creates, and a backfill too
/// (the same key: an occurrence is created once, whoever comes first).
///
/// With the schedule's `timing`, an occurrence going out when it was meant
/// to keeps its wall-clock time (a cron in a zone), so that a newer tzdata
/// moves it; a late one is due now whatever the zone's rules.
pub fn occurrence_job(
    schedule: &ScheduleRow,
    occurrence: &Occurrence,
    timing: Option<&Timing>,
) -> NewJob {
    let key = schedule::occurrence_key(&schedule.key, occurrence.at);
    let placed = occurrence_placed(&schedule.topic, &key, occurrence.run_at, &schedule.def);
    let mut job = schedule_job(schedule, key, Schedule::At(placed.at));
    // The misfire grace counts from where it goes out.
    job.expires_at = occurrence
        .expires_at
        .map(|at| at + (placed.at - occurrence.run_at));
    job.window = placed.window;
    job.wall = timing
        .filter(|_| occurrence.run_at == occurrence.at)
        .and_then(|timing| timing.wall_clock(occurrence.at));
    job
}

/// A job carrying `schedule`'s topic, payload, headers and policy, keyed
/// `key`, due at `at`, without jitter, window or expiry: the extra
/// occurrence a trigger asks for.
pub fn schedule_job(schedule: &ScheduleRow, key: String, at: Schedule) -> NewJob {
    NewJob {
        topic: schedule.topic.clone(),
        key: Some(key),
        payload: schedule.def.payload.clone(),
        payload_kind: schedule.def.payload_kind,
        headers: schedule.def.headers.clone(),
        schedule: at,
        policy: schedule.def.policy,
        trace_parent: None,
        schedule_id: Some(schedule.id),
        expires_at: None,
        expires_after_ms: None,
        window: None,
        wall: None,
    }
}

/// A schedule to create.
#[derive(Debug, Clone)]
pub struct NewSchedule {
    pub topic: String,
    pub key: String,
    pub def: ScheduleDef,
    pub created_by: String,
}

/// A schedule as stored.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    pub id: u64,
    pub topic: String,
    pub key: String,
    pub def: ScheduleDef,
    pub status: ScheduleStatus,
    pub version: u32,
    /// Every occurrence at or before this is decided.
    pub cursor_at: DateTime<Utc>,
    pub next_at: Option<DateTime<Utc>>,
    pub last_at: Option<DateTime<Utc>>,
    pub occurrences: u32,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl ScheduleRow {
    /// Where its occurrences may fall within [`from`, `to`): after it was
    /// created (occurrences before were never due) and its `start_at`; up
    /// to its `end_at`, and once ended, up to its cursor (the last one it
    /// decided: `max_occurrences` reached, say).
    pub fn fires_span(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> fires::Span {
        let until = match self.status {
            ScheduleStatus::Ended => Some(
                self.def
                    .end_at
                    .map_or(self.cursor_at, |end| end.min(self.cursor_at)),
            ),
            ScheduleStatus::Active | ScheduleStatus::Paused => self.def.end_at,
        };
        fires::Span {
            from,
            to,
            after: self
                .created_at
                .max(self.def.start_at - Duration::milliseconds(1)),
            until,
        }
    }
}

/// A schedule's fires audited ([`Store::schedule_fires`]).
#[derive(Debug, Clone)]
pub struct ScheduleFires {
    /// The database's clock when they were read.
    pub at: DateTime<Utc>,
    pub fires: Vec<Fire>,
}

/// Schedules and topic controls at a glance (the truth's figures).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, utoipa::ToSchema)]
pub struct ScheduleStats {
    pub active: u64,
    pub paused: u64,
    pub ended: u64,
    /// Active schedules whose next occurrence is over a minute past its
    /// time and still not a job.
    pub behind: u64,
    /// Topics paused (`topic_controls`).
    pub topics_paused: u64,
}

/// What a pass of the materializer created for one schedule.
#[derive(Debug, Default)]
pub struct Materialized {
    pub created: Vec<Job>,
    /// Missed occurrences the schedule's misfire policy did not create.
    pub skipped: u64,
    pub db_now: Option<DateTime<Utc>>,
}

/// What became of a change to a schedule.
#[derive(Debug)]
pub enum ScheduleUpdate {
    /// Applied: the schedule as it is now, and how many pending
    /// occurrences were replaced (deleted, to be created again) or updated
    /// in place.
    Applied {
        schedule: Box<ScheduleRow>,
        replaced: u64,
        updated: u64,
    },
    /// The caller's version is not the schedule's.
    VersionMismatch(Box<ScheduleRow>),
}

/// What DELETE does with the schedule's pending occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingOccurrences {
    /// Cancel them (the default).
    Cancel,
    /// Keep them: they run as ordinary jobs.
    Keep,
}

/// Most payload bytes one INSERT of occurrences carries.
const INSERT_BYTES_MAX: usize = 4 << 20;

const SCHEDULE_COLUMNS: &str = "id, topic, schedule_key, payload, payload_kind, headers, \
     expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms, \
     cron, time_zone, every_ms, start_at, end_at, max_occurrences, misfire, misfire_grace_ms, \
     window_ms, jitter_ms, \
     status, version, cursor_at, next_at, last_at, occurrences, created_by, created_at, updated_at, \
     enc_key";

fn bytes_text(row: &MySqlRow, column: &str) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = row.try_get(column)?;
    bytes
        .map(|b| {
            String::from_utf8(b)
                .map_err(|_| StoreError::Corrupt(format!("schedules.{column} is not UTF-8")))
        })
        .transpose()
}

fn schedule_from_row(row: &MySqlRow, keys: &Keyring) -> Result<ScheduleRow, StoreError> {
    let id: u64 = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("schedule {id}: {what}"));
    let (payload, headers_column) = schedule_opened(
        keys,
        bytes_text(row, "enc_key")?.as_deref(),
        id,
        row.try_get::<Vec<u8>, _>("payload")?,
        bytes_text(row, "headers")?,
    )?;
    let at = |column: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: NaiveDateTime = row.try_get(column)?;
        Ok(value.and_utc())
    };
    let at_opt = |column: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        let value: Option<NaiveDateTime> = row.try_get(column)?;
        Ok(value.map(|v| v.and_utc()))
    };
    let headers = match headers_column.as_deref() {
        None | Some("") => BTreeMap::new(),
        Some(text) => serde_json::from_str(text).map_err(|_| corrupt("headers"))?,
    };
    let kind = bytes_text(row, "payload_kind")?.unwrap_or_default();
    let misfire = bytes_text(row, "misfire")?.unwrap_or_default();
    let status = bytes_text(row, "status")?.unwrap_or_default();
    Ok(ScheduleRow {
        id,
        topic: bytes_text(row, "topic")?.unwrap_or_default(),
        key: bytes_text(row, "schedule_key")?.unwrap_or_default(),
        def: ScheduleDef {
            payload,
            payload_kind: kind.parse().map_err(|_| corrupt("payload_kind"))?,
            headers,
            policy: policy_from_row(row)?,
            cron: bytes_text(row, "cron")?,
            time_zone: bytes_text(row, "time_zone")?,
            every_ms: row.try_get("every_ms")?,
            start_at: at("start_at")?,
            end_at: at_opt("end_at")?,
            max_occurrences: row.try_get("max_occurrences")?,
            misfire: misfire.parse().map_err(|_| corrupt("misfire"))?,
            misfire_grace_ms: row.try_get("misfire_grace_ms")?,
            window_ms: row.try_get("window_ms")?,
            jitter_ms: row.try_get("jitter_ms")?,
        },
        status: ScheduleStatus::parse(&status).ok_or_else(|| corrupt("status"))?,
        version: row.try_get("version")?,
        cursor_at: at("cursor_at")?,
        next_at: at_opt("next_at")?,
        last_at: at_opt("last_at")?,
        occurrences: row.try_get("occurrences")?,
        created_by: bytes_text(row, "created_by")?.unwrap_or_default(),
        created_at: at("created_at")?,
        updated_at: at("updated_at")?,
    })
}

fn headers_text(headers: &BTreeMap<String, String>) -> Option<String> {
    (!headers.is_empty()).then(|| serde_json::to_string(headers).unwrap_or_default())
}

/// A row's payload and headers as written: (payload, headers, key),
/// sealed as `payload`/`headers` of row `id` under the active key of
/// `keys`, or plain without one.
type Content = (Vec<u8>, Option<String>, Option<String>);

fn content(keys: &Keyring, id: u64, def: &ScheduleDef) -> Content {
    schedule_sealed(keys, id, &def.payload, &def.headers)
}

/// ` SET` the definition's columns (for an UPDATE); the payload and
/// headers as `content` says (None: left as they are).
fn def_set<'a>(
    query: &mut QueryBuilder<'a, MySql>,
    def: &'a ScheduleDef,
    content: Option<Content>,
) {
    query
        .push(" payload_kind = ")
        .push_bind(def.payload_kind.as_str());
    if let Some((payload, headers, key)) = content {
        query
            .push(", payload = ")
            .push_bind(payload)
            .push(", headers = ")
            .push_bind(headers)
            .push(", enc_key = ")
            .push_bind(key);
    }
    query
        .push(", expects_result = ")
        .push_bind(def.policy.expects_result)
        .push(", max_attempts = ")
        .push_bind(def.policy.max_attempts)
        .push(", backoff_base_ms = ")
        .push_bind(def.policy.backoff_base_ms)
        .push(", backoff_cap_ms = ")
        .push_bind(def.policy.backoff_cap_ms)
        .push(", ack_timeout_ms = ")
        .push_bind(def.policy.ack_timeout_ms);
}

impl Store {
    /// Creates a schedule. Its first occurrence is created by the
    /// materializer (woken by the caller), not here: a crash after this
    /// commits leaves a schedule whose occurrences are created by the next
    /// pass of any instance.
    pub async fn schedule_insert(
        &self,
        new: &NewSchedule,
        next_at: Option<DateTime<Utc>>,
    ) -> Result<ScheduleRow, StoreError> {
        let def = &new.def;
        // Sealed once the row has its id, in this transaction (as a job's),
        // under one key for the whole write.
        let keys = self.keys.sealing();
        let sealing = keys.active().is_some();
        let mut tx = self.begin().await?;
        let mut insert = QueryBuilder::<MySql>::new(
            "INSERT INTO schedules (topic, schedule_key, cron, time_zone, every_ms, start_at, \
             end_at, max_occurrences, misfire, misfire_grace_ms, window_ms, jitter_ms, status, \
             cursor_at, next_at, created_by, payload, payload_kind, headers, expects_result, \
             max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms) VALUES (",
        );
        let mut values = insert.separated(", ");
        values
            .push_bind(&new.topic)
            .push_bind(new.key.as_bytes())
            .push_bind(&def.cron)
            .push_bind(&def.time_zone)
            .push_bind(def.every_ms)
            .push_bind(db_time(def.start_at))
            .push_bind(def.end_at.map(db_time))
            .push_bind(def.max_occurrences)
            .push_bind(def.misfire.as_str())
            .push_bind(def.misfire_grace_ms)
            .push_bind(def.window_ms)
            .push_bind(def.jitter_ms)
            .push_bind(if next_at.is_some() { "active" } else { "ended" })
            // Occurrences before the schedule existed were never due: a
            // start_at in the past sets the phase, not a backlog of misfires.
            .push_unseparated(", GREATEST(")
            .push_bind_unseparated(db_time(def.start_at - Duration::milliseconds(1)))
            .push_unseparated(", UTC_TIMESTAMP(3))")
            .push_bind(next_at.map(db_time))
            .push_bind(&new.created_by)
            .push_bind(if sealing { &[][..] } else { &def.payload[..] })
            .push_bind(def.payload_kind.as_str())
            .push_bind(if sealing {
                None
            } else {
                headers_text(&def.headers)
            })
            .push_bind(def.policy.expects_result)
            .push_bind(def.policy.max_attempts)
            .push_bind(def.policy.backoff_base_ms)
            .push_bind(def.policy.backoff_cap_ms)
            .push_bind(def.policy.ack_timeout_ms);
        insert.push(")");
        let id = insert.build().execute(&mut *tx).await?.last_insert_id();
        if sealing {
            let (payload, headers, key) = content(&keys, id, def);
            sqlx::query(
                "UPDATE schedules SET payload = ?, headers = ?, enc_key = ?, \
                 updated_at = updated_at WHERE id = ?",
            )
            .bind(payload)
            .bind(headers)
            .bind(key)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.schedule_get(id).await
    }

    pub async fn schedule_get(&self, id: u64) -> Result<ScheduleRow, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StoreError::NotFound(id))?;
        schedule_from_row(&row, &self.keys)
    }

    pub async fn schedule_find_by_key(
        &self,
        topic: &str,
        key: &str,
    ) -> Result<Option<ScheduleRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE topic = ? AND schedule_key = ?"
        ))
        .bind(topic)
        .bind(key.as_bytes())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(|row| schedule_from_row(row, &self.keys))
            .transpose()
    }

    /// Schedules by id after `after`, optionally of one topic and status,
    /// within `topic_patterns` (None: every topic).
    pub async fn schedule_list(
        &self,
        topic: Option<&str>,
        status: Option<ScheduleStatus>,
        topic_patterns: Option<&[String]>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            // id-order: keyset paging: needs ids to be a total order, not a time order.
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id > "
        ));
        query.push_bind(after);
        if let Some(topic) = topic {
            query.push(" AND topic = ").push_bind(topic);
        }
        if let Some(status) = status {
            query.push(" AND status = ").push_bind(status.as_str());
        }
        topic_patterns_push(&mut query, topic_patterns);
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| schedule_from_row(row, &self.keys))
            .collect()
    }

    /// Active schedules whose latest occurrence is within `lookahead` of
    /// now (or that have none yet), oldest first.
    pub async fn schedule_due(
        &self,
        lookahead: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<u64>, StoreError> {
        let lookahead_us = u64::try_from(lookahead.as_micros()).unwrap_or(u64::MAX);
        let ids = sqlx::query_scalar(
            "SELECT id FROM schedules WHERE status = 'active' AND next_at IS NOT NULL \
             AND (last_at IS NULL OR last_at <= TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))) \
             ORDER BY last_at, id LIMIT ?",
        )
        .bind(lookahead_us)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids)
    }

    /// Creates the occurrences of schedule `id` that are due to exist now
    /// (see [`schedule::plan`]), in one transaction with the move of its
    /// cursor, on the schedule's row locked: two instances never decide the
    /// same occurrences, and an occurrence's deterministic key makes a
    /// second insert of it a no-op anyway.
    ///
    /// Crash before the commit: nothing happened, the next pass does it.
    /// Crash after: the occurrences are jobs in MySQL, indexed by the loader
    /// or the overdue probe.
    pub async fn schedule_materialize(
        &self,
        id: u64,
        lookahead: std::time::Duration,
    ) -> Result<Materialized, StoreError> {
        contention_retry(|| self.schedule_materialize_once(id, lookahead)).await
    }

    /// Long because it is one transaction under the schedule's row lock: plan
    /// the occurrences, insert them, advance the schedule.
    async fn schedule_materialize_once(
        &self,
        id: u64,
        lookahead: std::time::Duration,
    ) -> Result<Materialized, StoreError> {
        let mut tx = self.begin().await?;
        let row = sqlx::query(&format!(
            "SELECT {SCHEDULE_COLUMNS}, UTC_TIMESTAMP(3) AS db_now FROM schedules WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(Materialized::default());
        };
        let schedule = schedule_from_row(&row, &self.keys)?;
        let now: NaiveDateTime = row.try_get("db_now")?;
        let now = now.and_utc();
        let mut done = Materialized {
            db_now: Some(now),
            ..Materialized::default()
        };
        let lookahead = Duration::from_std(lookahead).unwrap_or(Duration::zero());
        if schedule.status != ScheduleStatus::Active
            || schedule.last_at.is_some_and(|last| last > now + lookahead)
        {
            // Paused or ended; or its next occurrence exists already.
            return Ok(done);
        }
        let timing = match schedule.def.timing() {
            Ok(timing) => timing,
            Err(err) => {
                // Edited by hand into something unreadable: say so, and
                // leave it for a person.
                tracing::warn!(schedule_id = id, error = %err, "schedule cannot be read; not creating occurrences");
                return Ok(done);
            }
        };
        // The latest occurrence created fires late (still waiting, or
        // produced after its grace): under fire_once it is the one firing
        // for any misfire after it.
        let latest_pending = match schedule.last_at {
            Some(last) => {
                let late: Option<i64> = sqlx::query_scalar(
                    "SELECT status IN ('pending', 'dispatching') OR (dispatched_at IS NOT NULL \
                     AND dispatched_at > TIMESTAMPADD(MICROSECOND, ?, schedule_time)) \
                     FROM jobs WHERE topic = ? AND job_key = ?",
                )
                .bind(u64::from(schedule.def.misfire_grace_ms) * 1000)
                .bind(&schedule.topic)
                .bind(schedule::occurrence_key(&schedule.key, last))
                .fetch_optional(&mut *tx)
                .await?;
                late.unwrap_or(0) != 0
            }
            None => false,
        };
        let plan = schedule::plan(
            &timing,
            &schedule.def.bounds(),
            Progress {
                cursor: schedule.cursor_at,
                occurrences: schedule.occurrences,
                latest_pending,
            },
            now,
            lookahead,
        );
        let jobs: Vec<NewJob> = plan
            .create
            .iter()
            .map(|occurrence| occurrence_job(&schedule, occurrence, Some(&timing)))
            .collect();
        // One statement per few MiB of payloads: MariaDB's default
        // max_allowed_packet is 16 MiB.
        let per_insert = (INSERT_BYTES_MAX / schedule.def.payload.len().max(1)).max(1);
        let keys = self.keys.sealing();
        // Reserved (when this handle's block is spent) on a connection of
        // the pool's own, beside this transaction: one pass at a time.
        let ids = self.job_ids(jobs.len()).await?;
        for (chunk, ids) in jobs.chunks(per_insert).zip(ids.chunks(per_insert)) {
            for row in insert_many_on(&mut tx, self, &keys, chunk, ids).await? {
                if let BatchRow::Created(job) = row {
                    done.created.push(job);
                }
            }
        }
        done.skipped = plan.skipped;
        if let Some(span) = plan.skipped_span {
            gap_skipped_record(&mut tx, id, schedule.cursor_at, span).await?;
        }
        let last_at = plan.create.iter().map(|o| o.at).max();
        fail_point_pause!("schedule-planned");
        let advance = format!(
            "UPDATE schedules SET cursor_at = ?, next_at = ?, last_at = COALESCE(?, last_at), \
             occurrences = occurrences + ?, status = IF(?, 'ended', status){AS_READ}"
        );
        let advance = sqlx::query(&advance)
            .bind(db_time(plan.cursor))
            .bind(plan.next_at.map(db_time))
            .bind(last_at.map(db_time))
            .bind(done.created.len() as u32)
            .bind(plan.ended);
        if as_read_bind(advance, AsRead::from(&schedule))
            .execute(&mut *tx)
            .await?
            .rows_affected()
            != 1
        {
            // Paused, changed, deleted or advanced by another instance
            // since the read: this pass's occurrences go with the rollback.
            return Err(StoreError::lost_race(format!(
                "schedule {id} changed since this pass read it"
            )));
        }
        tx.commit().await?;
        Ok(done)
    }

    /// Replaces the definition of schedule `id` at `version` with `def`.
    /// Pending occurrences follow: in place (payload, headers, policy) when
    /// the times and bounds stay; deleted and created again from now when
    /// they change (an occurrence not yet due has never run: its id simply
    /// stops existing). Occurrences already due or running are left alone.
    ///
    /// Long because it is one transaction: the schedule's compare-and-set and
    /// its pending occurrences following it, under the same locks.
    pub async fn schedule_update(
        &self,
        id: u64,
        version: u32,
        def: &ScheduleDef,
    ) -> Result<ScheduleUpdate, StoreError> {
        contention_retry(|| self.schedule_update_once(id, version, def)).await
    }

    async fn schedule_update_once(
        &self,
        id: u64,
        version: u32,
        def: &ScheduleDef,
    ) -> Result<ScheduleUpdate, StoreError> {
        let mut tx = self.begin().await?;
        let current = schedule_read(&mut tx, &self.keys, id).await?;
        if current.version != version {
            return Ok(ScheduleUpdate::VersionMismatch(Box::new(current)));
        }
        schedule_take(&mut tx, AsRead::from(&current)).await?;
        // One "now" for what is deleted and where the cursor goes, so no
        // occurrence falls between the two.
        let now: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&mut *tx)
            .await?;
        let retime = current.def.retimes(def);
        let mut replaced = 0;
        if retime {
            replaced = occurrences_delete_future(&mut tx, &self.actor, id, now)
                .await?
                .count;
        }
        // The occurrences' payloads and headers: plain in this UPDATE
        // without an active key; sealed each under its own id after it.
        let keys = self.keys.sealing();
        let sealing = keys.active().is_some();
        let plain = (!sealing).then(|| (def.payload.clone(), headers_text(&def.headers), None));
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET");
        def_set(&mut update, def, plain);
        // Expiry (misfire = skip) is armed only on occurrences still at
        // their own instant: one someone moved (PATCH, bulk shift or move,
        // which clear expires_at) keeps the time it was moved to, however
        // late. The instant is the key's tail, as occurrence_key writes it.
        update
            .push(", expires_at = IF(")
            .push_bind(def.misfire == Misfire::Skip)
            .push(
                " AND (expires_at IS NOT NULL OR RIGHT(job_key, 24) = CONCAT(\
                 DATE_FORMAT(schedule_time, '%Y-%m-%dT%H:%i:%s.'), \
                 LPAD(FLOOR(MICROSECOND(schedule_time) / 1000), 3, '0'), 'Z')), \
                 TIMESTAMPADD(MICROSECOND, ",
            )
            .push_bind(u64::from(def.misfire_grace_ms) * 1000)
            .push(
                ", schedule_time), NULL), version = version % 4294967295 + 1 WHERE schedule_id = ",
            )
            .push_bind(id)
            .push(" AND status = 'pending'");
        let updated = update.build().execute(&mut *tx).await?.rows_affected();
        if sealing {
            let ids: Vec<JobId> = sqlx::query_scalar(
                "SELECT id FROM jobs WHERE schedule_id = ? AND status = 'pending'",
            )
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
            super::payload::seal_rows_on(&mut tx, &keys, &ids, &def.payload, &def.headers).await?;
        }

        let mut query = QueryBuilder::<MySql>::new("UPDATE schedules SET");
        let own = content(&keys, id, def);
        def_set(&mut query, def, Some(own));
        query
            .push(", cron = ")
            .push_bind(&def.cron)
            .push(", time_zone = ")
            .push_bind(&def.time_zone)
            .push(", every_ms = ")
            .push_bind(def.every_ms)
            .push(", start_at = ")
            .push_bind(db_time(def.start_at))
            .push(", end_at = ")
            .push_bind(def.end_at.map(db_time))
            .push(", max_occurrences = ")
            .push_bind(def.max_occurrences)
            .push(", misfire = ")
            .push_bind(def.misfire.as_str())
            .push(", misfire_grace_ms = ")
            .push_bind(def.misfire_grace_ms)
            .push(", window_ms = ")
            .push_bind(def.window_ms)
            .push(", jitter_ms = ")
            .push_bind(def.jitter_ms);
        if retime {
            // From now (or the new start), with the occurrences that stay
            // counted; the next pass creates what the new times ask for.
            let cursor = now.and_utc().max(def.start_at - Duration::milliseconds(1));
            let next_at = def.first_after(cursor);
            query
                .push(", cursor_at = ")
                .push_bind(db_time(cursor))
                .push(", next_at = ")
                .push_bind(next_at.map(db_time))
                .push(", last_at = NULL, occurrences = GREATEST(CAST(occurrences AS SIGNED) - ")
                .push_bind(replaced as i64)
                .push(", 0), status = IF(status = 'paused', 'paused', ")
                .push_bind(if next_at.is_some() { "active" } else { "ended" })
                .push(")");
        }
        query.push(" WHERE id = ").push_bind(id);
        query.build().execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(ScheduleUpdate::Applied {
            schedule: Box::new(self.schedule_get(id).await?),
            replaced,
            updated,
        })
    }

    /// Pauses (nothing more is created; pending occurrences not yet due are
    /// deleted) or resumes (from now: the occurrences of the pause are not
    /// misfires) schedule `id`. Returns it as it is now, and how many
    /// occurrences a pause deleted. The pause is a gap of the schedule's
    /// (`schedule_gaps`), opened and closed in the same transactions.
    ///
    /// Crash after this commits: the schedule is paused (or active again)
    /// with its gap; nothing to repair.
    pub async fn schedule_pause(
        &self,
        id: u64,
        pause: bool,
    ) -> Result<(ScheduleRow, u64), StoreError> {
        contention_retry(|| self.schedule_pause_once(id, pause)).await
    }

    async fn schedule_pause_once(
        &self,
        id: u64,
        pause: bool,
    ) -> Result<(ScheduleRow, u64), StoreError> {
        let mut tx = self.begin().await?;
        let current = schedule_read(&mut tx, &self.keys, id).await?;
        if matches!(
            (pause, current.status),
            (true, ScheduleStatus::Active) | (false, ScheduleStatus::Paused)
        ) {
            schedule_take(&mut tx, AsRead::from(&current)).await?;
        }
        let now: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
            .fetch_one(&mut *tx)
            .await?;
        let now = now.and_utc();
        let mut deleted = 0;
        match (pause, current.status) {
            (true, ScheduleStatus::Active) => {
                let removed =
                    occurrences_delete_future(&mut tx, &self.actor, id, db_time(now)).await?;
                deleted = removed.count;
                let from = removed.first_at.map_or(now, |first| first.min(now));
                gap_pause_open(&mut tx, id, from).await?;
                sqlx::query(
                    "UPDATE schedules SET status = 'paused', \
                     cursor_at = ?, last_at = NULL, next_at = ?, \
                     occurrences = GREATEST(CAST(occurrences AS SIGNED) - ?, 0) WHERE id = ?",
                )
                .bind(db_time(now))
                .bind(current.def.first_after(now).map(db_time))
                .bind(deleted as i64)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
            (false, ScheduleStatus::Paused) => {
                let cursor = current.cursor_at.max(now);
                let next_at = current.def.first_after(cursor);
                sqlx::query(
                    "UPDATE schedules SET status = ?, cursor_at = ?, \
                     last_at = NULL, next_at = ? WHERE id = ?",
                )
                .bind(if next_at.is_some() { "active" } else { "ended" })
                .bind(db_time(cursor))
                .bind(next_at.map(db_time))
                .bind(id)
                .execute(&mut *tx)
                .await?;
                gap_pause_close(&mut tx, id, current.cursor_at, cursor).await?;
            }
            // Already so, or ended: nothing to do.
            _ => {}
        }
        tx.commit().await?;
        Ok((self.schedule_get(id).await?, deleted))
    }

    /// Deletes schedule `id`. Its pending occurrences are cancelled (those
    /// not yet due are deleted, as on a pause) or kept as ordinary jobs.
    /// Returns how many occurrences were cancelled or deleted.
    pub async fn schedule_delete(
        &self,
        id: u64,
        pending: PendingOccurrences,
    ) -> Result<u64, StoreError> {
        contention_retry(|| self.schedule_delete_once(id, pending)).await
    }

    async fn schedule_delete_once(
        &self,
        id: u64,
        pending: PendingOccurrences,
    ) -> Result<u64, StoreError> {
        let mut tx = self.begin().await?;
        // A delete decides on nothing it reads of the schedule, so its
        // first write is its version moved on, unconditionally: nothing of
        // the row is decoded (a row a person garbled can still be deleted),
        // and a materializer's compare-and-set, which repeats the version,
        // then fails, or committed first and its occurrences are seen below.
        let found =
            sqlx::query("UPDATE schedules SET version = version % 4294967295 + 1 WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
        if found == 0 {
            return Err(StoreError::NotFound(id));
        }
        let mut gone = 0;
        if pending == PendingOccurrences::Cancel {
            let now: NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(3)")
                .fetch_one(&mut *tx)
                .await?;
            gone += occurrences_delete_future(&mut tx, &self.actor, id, now)
                .await?
                .count;
            let token = event_token();
            gone += sqlx::query(
                "UPDATE jobs SET event_token = ?, status = 'cancelled', version = version % 4294967295 + 1, \
                 last_error = 'cancelled: its schedule was deleted' \
                 WHERE schedule_id = ? AND status = 'pending'",
            )
            .bind(token)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            events_record_schedule(&mut tx, &self.actor, id, token).await?;
        }
        sqlx::query("DELETE FROM schedule_gaps WHERE schedule_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM schedules WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone)
    }

    /// Schedules by status, how many active ones are behind (their next
    /// occurrence's time passed `behind` ago and it is still not a job: no
    /// instance runs the materializer, or it fails), and paused topics.
    pub async fn schedule_stats(
        &self,
        behind: std::time::Duration,
    ) -> Result<ScheduleStats, StoreError> {
        let behind_us = u64::try_from(behind.as_micros()).unwrap_or(u64::MAX);
        let row = sqlx::query(
            "SELECT \
             (SELECT COUNT(*) FROM schedules WHERE status = 'active') AS active, \
             (SELECT COUNT(*) FROM schedules WHERE status = 'paused') AS paused, \
             (SELECT COUNT(*) FROM schedules WHERE status = 'ended') AS ended, \
             (SELECT COUNT(*) FROM schedules WHERE status = 'active' AND next_at IS NOT NULL \
               AND next_at < TIMESTAMPADD(MICROSECOND, -CAST(? AS SIGNED), UTC_TIMESTAMP(3))) AS behind, \
             (SELECT COUNT(*) FROM topic_controls WHERE paused) AS topics_paused",
        )
        .bind(behind_us)
        .fetch_one(&self.pool)
        .await?;
        let count = |column: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(column)?;
            Ok(n.max(0) as u64)
        };
        Ok(ScheduleStats {
            active: count("active")?,
            paused: count("paused")?,
            ended: count("ended")?,
            behind: count("behind")?,
            topics_paused: count("topics_paused")?,
        })
    }

    /// Active schedules behind by `behind` (see [`Store::schedule_stats`]):
    /// (id, next_at), oldest first.
    pub async fn schedules_behind(
        &self,
        behind: std::time::Duration,
        limit: u32,
    ) -> Result<Vec<(u64, DateTime<Utc>)>, StoreError> {
        let behind_us = u64::try_from(behind.as_micros()).unwrap_or(u64::MAX);
        let rows: Vec<(u64, NaiveDateTime)> = sqlx::query_as(
            "SELECT id, next_at FROM schedules WHERE status = 'active' AND next_at IS NOT NULL \
             AND next_at < TIMESTAMPADD(MICROSECOND, -CAST(? AS SIGNED), UTC_TIMESTAMP(3)) \
             ORDER BY next_at LIMIT ?",
        )
        .bind(behind_us)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, at)| (id, at.and_utc()))
            .collect())
    }

    /// What became of each occurrence of `schedule` at the instants
    /// `expected` (in order, from [`fires::expected`]): its job, found by
    /// its key (whichever schedule made it), or the gap that explains its
    /// absence ([`fires::audit`]). Reads only.
    pub async fn schedule_fires(
        &self,
        schedule: &ScheduleRow,
        expected: &[DateTime<Utc>],
    ) -> Result<ScheduleFires, StoreError> {
        let at = self.db_now().await?;
        let (Some(first), Some(last)) = (expected.first(), expected.last()) else {
            return Ok(ScheduleFires {
                at,
                fires: Vec::new(),
            });
        };
        let mut jobs = BTreeMap::new();
        for chunk in expected.chunks(FIRES_PER_QUERY) {
            jobs.extend(fire_jobs(&self.pool, schedule, chunk).await?);
        }
        let rows: Vec<(Vec<u8>, NaiveDateTime, Option<NaiveDateTime>)> = sqlx::query_as(
            "SELECT reason, from_at, to_at FROM schedule_gaps WHERE schedule_id = ? \
             AND from_at <= ? AND (to_at IS NULL OR to_at >= ?)",
        )
        .bind(schedule.id)
        .bind(db_time(*last))
        .bind(db_time(*first))
        .fetch_all(&self.pool)
        .await?;
        let gaps = rows
            .into_iter()
            .map(|(reason, from_at, to_at)| {
                let reason = std::str::from_utf8(&reason)
                    .ok()
                    .and_then(GapReason::parse)
                    .ok_or_else(|| StoreError::Corrupt("schedule_gaps.reason".to_owned()))?;
                Ok(Gap {
                    reason,
                    from_at: from_at.and_utc(),
                    to_at: to_at.map(|to| to.and_utc()),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let known = fires::Known {
            gaps,
            paused_since: (schedule.status == ScheduleStatus::Paused).then_some(schedule.cursor_at),
        };
        Ok(ScheduleFires {
            at,
            fires: fires::audit(expected, &jobs, &known, at),
        })
    }

    /// Which of `schedule`'s occurrences at `instants` exist as jobs (any
    /// status), found by their keys. Reads only.
    pub async fn schedule_occurrences_existing(
        &self,
        schedule: &ScheduleRow,
        instants: &[DateTime<Utc>],
    ) -> Result<BTreeSet<DateTime<Utc>>, StoreError> {
        let mut existing = BTreeSet::new();
        for chunk in instants.chunks(FIRES_PER_QUERY) {
            existing.extend(
                fire_jobs(&self.pool, schedule, chunk)
                    .await?
                    .into_iter()
                    .map(|(at, _)| at),
            );
        }
        Ok(existing)
    }

    /// The pending occurrences of schedule `id`, soonest first.
    pub async fn schedule_pending(&self, id: u64, limit: u32) -> Result<Vec<Job>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {} FROM jobs WHERE schedule_id = ? AND status = 'pending' \
             ORDER BY schedule_time, id LIMIT ?",
            JOB_COLUMNS_NO_PAYLOAD
        ))
        .bind(id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| job_from_row_listed(row, &self.keys, &self.codec))
            .collect()
    }
}

/// Occurrence keys looked up per query.
const FIRES_PER_QUERY: usize = 1_000;

/// The jobs of `schedule`'s occurrences at `instants`, by instant.
async fn fire_jobs(
    pool: &sqlx::MySqlPool,
    schedule: &ScheduleRow,
    instants: &[DateTime<Utc>],
) -> Result<Vec<(DateTime<Utc>, FireJob)>, StoreError> {
    let mut query = QueryBuilder::<MySql>::new(
        "SELECT id, job_key, status, schedule_time, dispatched_at, kafka_partition, kafka_offset, \
         verified_at FROM jobs WHERE topic = ",
    );
    query.push_bind(&schedule.topic).push(" AND job_key IN (");
    let mut keys = query.separated(", ");
    for at in instants {
        keys.push_bind(schedule::occurrence_key(&schedule.key, *at).into_bytes());
    }
    query.push(")");
    let rows = query.build().fetch_all(pool).await?;
    rows.iter()
        .filter_map(|row| fire_job_from_row(row).transpose())
        .collect()
}

/// A row of [`fire_jobs`]: None for a key that is not an occurrence's.
fn fire_job_from_row(row: &MySqlRow) -> Result<Option<(DateTime<Utc>, FireJob)>, StoreError> {
    let id: JobId = row.try_get("id")?;
    let key = bytes_text(row, "job_key")?.unwrap_or_default();
    let Some(instant) = schedule::occurrence_instant(&key) else {
        return Ok(None);
    };
    let status = bytes_text(row, "status")?.unwrap_or_default();
    let run_at: NaiveDateTime = row.try_get("schedule_time")?;
    let dispatched_at: Option<NaiveDateTime> = row.try_get("dispatched_at")?;
    Ok(Some((
        instant,
        FireJob {
            id,
            status: status
                .parse()
                .map_err(|_| StoreError::Corrupt(format!("job {id}: unknown status")))?,
            run_at: run_at.and_utc(),
            dispatched_at: dispatched_at.map(|at| at.and_utc()),
            partition: row.try_get("kafka_partition")?,
            offset: row.try_get("kafka_offset")?,
            verified_at: row
                .try_get::<Option<NaiveDateTime>, _>("verified_at")
                .ok()
                .flatten()
                .map(|at| at.and_utc()),
        },
    )))
}

/// Reads schedule `id`, plainly: what is decided on it is written after
/// [`schedule_take`]'s compare-and-set.
async fn schedule_read(
    conn: &mut sqlx::MySqlConnection,
    keys: &Keyring,
    id: u64,
) -> Result<ScheduleRow, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await?
    .ok_or(StoreError::NotFound(id))?;
    schedule_from_row(&row, keys)
}

/// What a change of a schedule decides on and its compare-and-set repeats:
/// its version, and what the materializer moves without one (status,
/// cursor, occurrences, the latest occurrence), as the row holds them.
struct AsRead {
    id: u64,
    version: u32,
    status: Vec<u8>,
    cursor_at: NaiveDateTime,
    occurrences: u32,
    last_at: Option<NaiveDateTime>,
}

impl From<&ScheduleRow> for AsRead {
    fn from(read: &ScheduleRow) -> Self {
        AsRead {
            id: read.id,
            version: read.version,
            status: read.status.as_str().as_bytes().to_vec(),
            cursor_at: db_time(read.cursor_at),
            occurrences: read.occurrences,
            last_at: read.last_at.map(db_time),
        }
    }
}

/// ` WHERE` the schedule is still as it was read: its placeholders are
/// bound by [`as_read_bind`].
const AS_READ: &str = " WHERE id = ? AND version = ? AND status = ? AND cursor_at = ? \
     AND occurrences = ? AND last_at <=> ?";

/// Binds [`AS_READ`]'s placeholders, the last of `query`'s.
fn as_read_bind(
    query: sqlx::query::Query<'_, MySql, sqlx::mysql::MySqlArguments>,
    read: AsRead,
) -> sqlx::query::Query<'_, MySql, sqlx::mysql::MySqlArguments> {
    query
        .bind(read.id)
        .bind(read.version)
        .bind(read.status)
        .bind(read.cursor_at)
        .bind(read.occurrences)
        .bind(read.last_at)
}

/// The first write of a change of a schedule (update, pause, resume,
/// delete): its version moves on, by a compare-and-set on the schedule as
/// read. Lost (a materializer or a person wrote it since, or it is gone):
/// nothing is written and the change is made again on the row as it is
/// now. Won: the row is this transaction's until it ends, so a
/// materializer's own compare-and-set, which waits for it, then fails, and
/// the occurrences this change reads are all there are.
async fn schedule_take(conn: &mut sqlx::MySqlConnection, read: AsRead) -> Result<(), StoreError> {
    let id = read.id;
    let take = format!("UPDATE schedules SET version = version % 4294967295 + 1{AS_READ}");
    if as_read_bind(sqlx::query(&take), read)
        .execute(conn)
        .await?
        .rows_affected()
        != 1
    {
        return Err(StoreError::lost_race(format!(
            "schedule {id} changed since it was read"
        )));
    }
    Ok(())
}

/// What [`occurrences_delete_future`] deleted.
#[derive(Debug, Clone, Copy, Default)]
struct Removed {
    count: u64,
    /// The earliest instant among them (by key): before `now` when jitter
    /// or a window moved its job past it.
    first_at: Option<DateTime<Utc>>,
}

/// Deletes the schedule's pending occurrences due after `now` that never
/// ran (first attempt, never dispatched): their keys are free again for
/// the occurrences that replace them. One that a dispatcher claims is no
/// longer pending, one due is claimable, and a retry of one already
/// produced is a job with a past: none of them is touched; nor is an
/// occurrence a trigger made (a key not of the occurrence form): nothing
/// would create it again, and a person asked for it. Each deleted
/// occurrence's history ends with a `cancelled` row by `actor` (one a
/// PATCH had moved too), so that its history says where it went.
async fn occurrences_delete_future(
    conn: &mut sqlx::MySqlConnection,
    actor: &str,
    id: u64,
    now: NaiveDateTime,
) -> Result<Removed, StoreError> {
    let doomed: Vec<(JobId, NaiveDateTime, u32, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT id, schedule_time, attempt, job_key FROM jobs WHERE schedule_id = ? \
         AND status = 'pending' AND schedule_time > ? AND attempt = 1 AND dispatched_at IS NULL",
    )
    .bind(id)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    let doomed: Vec<_> = doomed
        .into_iter()
        .filter(|(_, _, _, key)| {
            key.as_deref()
                .and_then(|key| std::str::from_utf8(key).ok())
                .is_some_and(crate::domain::job::key_is_occurrence_form)
        })
        .collect();
    if doomed.is_empty() {
        return Ok(Removed::default());
    }
    let first_at = doomed
        .iter()
        .filter_map(|(_, _, _, key)| {
            schedule::occurrence_instant(std::str::from_utf8(key.as_deref()?).ok()?)
        })
        .min();
    let rows: Vec<EventRow> = doomed
        .iter()
        .map(|(id, at, attempt, _)| (*id, Status::Cancelled.as_str().to_owned(), *at, *attempt))
        .collect();
    events_insert_rows(&mut *conn, actor, &rows).await?;
    let ids: Vec<JobId> = doomed.iter().map(|(id, _, _, _)| *id).collect();
    let mut delete = QueryBuilder::<MySql>::new("DELETE FROM jobs WHERE id IN ");
    push_id_list(&mut delete, &ids);
    // The read's conditions again: one claimed, moved or run since it was
    // read is not deleted, and the change is made again.
    delete
        .push(" AND schedule_id = ")
        .push_bind(id)
        .push(" AND status = 'pending' AND schedule_time > ")
        .push_bind(now)
        .push(" AND attempt = 1 AND dispatched_at IS NULL");
    let count = delete.build().execute(&mut *conn).await?.rows_affected();
    if count != ids.len() as u64 {
        return Err(StoreError::lost_race(format!(
            "{} of schedule {id}'s occurrences changed since they were read",
            ids.len() as u64 - count.min(ids.len() as u64)
        )));
    }
    Ok(Removed { count, first_at })
}

/// Opens the gap of a pause: the occurrences from `from` on are not
/// created until the resume closes it.
async fn gap_pause_open(
    conn: &mut sqlx::MySqlConnection,
    id: u64,
    from: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO schedule_gaps (schedule_id, reason, from_at) VALUES (?, 'paused', ?)")
        .bind(id)
        .bind(db_time(from))
        .execute(conn)
        .await?;
    Ok(())
}

/// Closes the gap of a pause at `to`, the resume's cursor (the first
/// occurrence created again is after it). A pause opened before gaps were
/// recorded has none: it is written whole, from `paused_at` (the cursor
/// the pause set).
async fn gap_pause_close(
    conn: &mut sqlx::MySqlConnection,
    id: u64,
    paused_at: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), StoreError> {
    let closed = sqlx::query(
        "UPDATE schedule_gaps SET to_at = ? \
         WHERE schedule_id = ? AND reason = 'paused' AND to_at IS NULL",
    )
    .bind(db_time(to))
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if closed == 0 {
        sqlx::query(
            "INSERT INTO schedule_gaps (schedule_id, reason, from_at, to_at) \
             VALUES (?, 'paused', ?, ?)",
        )
        .bind(id)
        .bind(db_time(paused_at))
        .bind(db_time(to))
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Records the occurrences a misfire policy passed over, `span` (first and
/// last instant). A run of skips that goes on from the last pass's (which
/// ended at the schedule's cursor, `cursor_at`) extends its row: a
/// schedule that stays behind for hours writes one row, not one a pass.
async fn gap_skipped_record(
    conn: &mut sqlx::MySqlConnection,
    id: u64,
    cursor_at: DateTime<Utc>,
    (first, last): (DateTime<Utc>, DateTime<Utc>),
) -> Result<(), StoreError> {
    let extended = sqlx::query(
        "UPDATE schedule_gaps SET to_at = ? \
         WHERE schedule_id = ? AND reason = 'skipped' AND to_at = ?",
    )
    .bind(db_time(last))
    .bind(id)
    .bind(db_time(cursor_at))
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if extended == 0 {
        sqlx::query(
            "INSERT INTO schedule_gaps (schedule_id, reason, from_at, to_at) \
             VALUES (?, 'skipped', ?, ?)",
        )
        .bind(id)
        .bind(db_time(first))
        .bind(db_time(last))
        .execute(conn)
        .await?;
    }
    Ok(())
}
