//! Queries on `topic_controls`: paused topics and their pace.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::history::{event_token, events_record_changed};
use super::job_row::{text, WindowEntry};
use super::payload::headers_opened;
use super::sql::{db_time, push_id_list};
use crate::domain::job::JobId;

/// A topic's controls as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicControl {
    pub topic: String,
    pub paused: bool,
    /// Set through the API (or by hand); None leaves the configuration's.
    pub max_per_second: Option<u32>,
    /// What the topic's jobs are grouped by (`key:SEP`, `header:NAME`) and
    /// each group's pace, likewise; the text as stored (a hand edit may
    /// not parse: the dispatcher then ignores it, with a warning).
    pub group_by: Option<String>,
    pub group_max_per_second: Option<u32>,
    /// The JSON Schema its payloads must match, as stored (a hand edit may
    /// not be JSON or not a schema: the topic's due jobs are then held).
    pub payload_schema: Option<String>,
    pub updated_by: String,
    pub updated_at: DateTime<Utc>,
}

/// A topic's backlog being deferred over several passes
/// ([`Store::topic_overdue_defer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverdueDrain {
    /// Where the first `cap` of the backlog went.
    pub first_slot: DateTime<Utc>,
    /// How many of it were given a slot.
    pub ranked: u64,
}

/// What pacing needs of a claimed job.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobPacing {
    pub id: JobId,
    pub topic: String,
    /// Its key and headers: what its group is read from.
    pub key: Option<String>,
    pub headers: std::collections::BTreeMap<String, String>,
    /// The API token that created it, when asked for and noted (see
    /// `group_by = "token"`).
    pub token: Option<u64>,
    /// The end of its flexible window (`window_start` + `window_ms`), if it
    /// has one.
    pub window_end: Option<DateTime<Utc>>,
}

/// What a change of a topic's controls sets; None leaves it as is.
#[derive(Debug, Clone, Default)]
pub struct TopicChange {
    pub paused: Option<bool>,
    /// `Some(None)` clears the API's pace (the configuration's applies).
    pub max_per_second: Option<Option<u32>>,
    /// Likewise for the grouping and the groups' pace.
    pub group_by: Option<Option<String>>,
    pub group_max_per_second: Option<Option<u32>>,
    /// `Some(None)` removes the payload schema; the text is a compiled one.
    pub payload_schema: Option<Option<String>>,
}

fn control_from_row(row: &MySqlRow) -> Result<TopicControl, StoreError> {
    let topic: Vec<u8> = row.try_get("topic")?;
    let updated_by: Vec<u8> = row.try_get("updated_by")?;
    let updated_at: NaiveDateTime = row.try_get("updated_at")?;
    Ok(TopicControl {
        topic: String::from_utf8(topic)
            .map_err(|_| StoreError::Corrupt("topic_controls.topic is not UTF-8".to_owned()))?,
        paused: row.try_get("paused")?,
        max_per_second: row.try_get("max_per_second")?,
        group_by: row
            .try_get::<Option<Vec<u8>>, _>("group_by")?
            .map(|text| String::from_utf8_lossy(&text).into_owned()),
        group_max_per_second: row.try_get("group_max_per_second")?,
        payload_schema: row
            .try_get::<Option<Vec<u8>>, _>("payload_schema")?
            .map(|text| String::from_utf8_lossy(&text).into_owned()),
        updated_by: String::from_utf8_lossy(&updated_by).into_owned(),
        updated_at: updated_at.and_utc(),
    })
}

const CONTROL_COLUMNS: &str = "topic, paused, max_per_second, group_by, group_max_per_second, \
     payload_schema, updated_by, updated_at";

impl Store {
    /// Every topic with controls.
    pub async fn topic_controls(&self) -> Result<Vec<TopicControl>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {CONTROL_COLUMNS} FROM topic_controls ORDER BY topic"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(control_from_row).collect()
    }

    /// How many jobs of each of `topics` are dispatching or dispatched
    /// (for a topic whose jobs expect a result: in flight, awaiting it).
    /// Reads `ix_jobs_status_topic`: as many entries as are in flight.
    pub async fn topic_in_flight(
        &self,
        topics: &[String],
    ) -> Result<HashMap<String, u64>, StoreError> {
        if topics.is_empty() {
            return Ok(HashMap::new());
        }
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT topic, COUNT(*) AS n FROM jobs \
             WHERE status IN ('dispatching', 'dispatched') AND topic IN (",
        );
        let mut list = query.separated(", ");
        for topic in topics {
            list.push_bind(topic.as_str());
        }
        query.push(") GROUP BY topic");
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                Ok((text(row, "topic")?.unwrap_or_default(), n.max(0) as u64))
            })
            .collect()
    }

    /// How many of `topic`'s jobs are overdue — pending, due more than
    /// `after_ms` ago — counting at most `most` (a backlog is read only as
    /// far as a decision needs). Reads `ix_jobs_status_schedule`: the
    /// overdue rows only.
    pub async fn topic_overdue_count(
        &self,
        topic: &str,
        after_ms: u64,
        most: u64,
    ) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE status = 'pending' \
             AND schedule_time < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             AND topic = ? AND held_at IS NULL LIMIT ?) AS overdue",
        )
        .bind(overdue_before_us(after_ms))
        .bind(topic)
        .bind(most)
        .fetch_one(&self.pool)
        .await?;
        Ok(n.max(0) as u64)
    }

    /// `pending → expired` for up to `batch` of `topic`'s overdue first
    /// attempts beyond its `cap` newest: the oldest, a topic's
    /// `overdue_policy = "expire"`. Returns their ids.
    ///
    /// A plain read picks them, and a compare-and-set
    /// ([`Store::topic_overdue_expire_ids`]) expires those still as read:
    /// no row is locked in between (#62). A row changed meanwhile (moved,
    /// cancelled, sent) is left as it is; the ranking is the read's, so a
    /// backlog that shrank meanwhile may lose a row or two fewer or more
    /// than the cap says, never one that was not overdue.
    ///
    /// Crash after this commits: they are expired, with their history; the
    /// index drops them when the caller or the reconciler's stale probe
    /// gets to it.
    pub async fn topic_overdue_expire(
        &self,
        topic: &str,
        after_ms: u64,
        cap: u32,
        batch: u32,
    ) -> Result<Vec<JobId>, StoreError> {
        // The newest `cap` overdue stay; the ones after them, oldest last
        // in this order, go.
        let ids: Vec<JobId> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'pending' \
             AND schedule_time < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             AND topic = ? AND attempt = 1 AND held_at IS NULL \
             ORDER BY schedule_time DESC LIMIT ? OFFSET ?",
        )
        .bind(overdue_before_us(after_ms))
        .bind(topic)
        .bind(batch)
        .bind(cap)
        .fetch_all(&self.pool)
        .await?;
        self.topic_overdue_expire_ids(topic, after_ms, cap, &ids)
            .await
    }

    /// The write of [`Store::topic_overdue_expire`]: `pending → expired`
    /// for those of `ids` that are still `topic`'s overdue, pending,
    /// unheld first attempts, in one compare-and-set with their history.
    /// Returns the ids it expired.
    pub async fn topic_overdue_expire_ids(
        &self,
        topic: &str,
        after_ms: u64,
        cap: u32,
        ids: &[JobId],
    ) -> Result<Vec<JobId>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let token = event_token();
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
        update
            .push_bind(token)
            .push(
                ", status = 'expired', version = version % 4294967295 + 1, \
                 last_error = CONCAT('expired: its topic had more than ', ",
            )
            .push_bind(cap)
            .push(
                ", ' jobs overdue (max_overdue, overdue_policy = expire): the oldest end unsent') \
                 WHERE status = 'pending' AND attempt = 1 AND held_at IS NULL AND topic = ",
            )
            .push_bind(topic)
            .push(" AND schedule_time < TIMESTAMPADD(MICROSECOND, ")
            .push_bind(overdue_before_us(after_ms))
            .push(", UTC_TIMESTAMP(3)) AND id IN ");
        push_id_list(&mut update, ids);
        let mut tx = self.begin().await?;
        update.build().execute(&mut *tx).await?;
        let expired = events_record_changed(&mut tx, &self.actor, ids, token).await?;
        tx.commit().await?;
        Ok(expired)
    }

    /// Moves up to `batch` of `topic`'s overdue jobs beyond its `cap`
    /// oldest later, the oldest first, into slots of `cap` jobs
    /// `after_ms` apart: rank `r` of a backlog past the cap goes to
    /// `first_slot + (r / cap) × after_ms` (`overdue_policy = "defer"`).
    /// The backlog goes out at most `cap` per `after_ms`, in its order,
    /// none ends unsent. `drain` carries a backlog moved over several
    /// calls: the first slot and the ranks already given (`None`: the
    /// first slot is `after_ms` from now). Returns the ids moved and the
    /// drain to carry on with. Only the order of the rows is read, never
    /// their spacing: a hand-set time moves one row, not the backlog.
    ///
    /// A plain read ranks them, and each slot's compare-and-set moves
    /// those still as read (`topic`'s pending, unheld, overdue): no row is
    /// locked in between (#62). A row changed meanwhile keeps its change
    /// and its rank stays given, so no slot ever holds more than `cap`.
    ///
    /// A job's window goes (it is at an exact time now) and its expiry is
    /// not moved: one deferred past it ends `expired` when it falls due,
    /// as a late job does.
    ///
    /// Crash after this commits: they are moved, with their history; an
    /// index entry at the old time is refused by the claim (the row is not
    /// due) and put back at the row's time.
    pub async fn topic_overdue_defer(
        &self,
        topic: &str,
        after_ms: u64,
        cap: u32,
        batch: u32,
        drain: Option<OverdueDrain>,
    ) -> Result<(Vec<JobId>, OverdueDrain), StoreError> {
        let rows: Vec<(JobId, NaiveDateTime)> = sqlx::query_as(
            "SELECT id, UTC_TIMESTAMP(3) FROM jobs WHERE status = 'pending' \
             AND schedule_time < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             AND topic = ? AND held_at IS NULL \
             ORDER BY schedule_time LIMIT ? OFFSET ?",
        )
        .bind(overdue_before_us(after_ms))
        .bind(topic)
        .bind(batch)
        .bind(cap)
        .fetch_all(&self.pool)
        .await?;
        let step = chrono::Duration::milliseconds(
            i64::try_from(after_ms)
                .unwrap_or(i64::MAX / 4)
                .min(i64::MAX / 4),
        );
        let drain = match (drain, rows.first()) {
            (Some(drain), _) => drain,
            (None, Some((_, db_now))) => OverdueDrain {
                first_slot: db_now.and_utc() + step,
                ranked: 0,
            },
            (None, None) => OverdueDrain {
                first_slot: Utc::now() + step,
                ranked: 0,
            },
        };
        if rows.is_empty() {
            return Ok((Vec::new(), drain));
        }
        let token = event_token();
        let cap = u64::from(cap.max(1));
        let mut slots: BTreeMap<u64, Vec<JobId>> = BTreeMap::new();
        for (i, (id, _)) in rows.iter().enumerate() {
            slots
                .entry((drain.ranked + i as u64) / cap)
                .or_default()
                .push(*id);
        }
        let mut tx = self.begin().await?;
        for (slot, ids) in &slots {
            let at = i32::try_from(*slot)
                .ok()
                .and_then(|slot| step.checked_mul(slot))
                .and_then(|by| drain.first_slot.checked_add_signed(by))
                .unwrap_or(drain.first_slot);
            let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
            update
                .push_bind(token)
                .push(", version = version % 4294967295 + 1, schedule_time = ")
                .push_bind(db_time(at))
                .push(
                    ", window_ms = NULL, window_start = NULL \
                     WHERE status = 'pending' AND held_at IS NULL AND topic = ",
                )
                .push_bind(topic)
                .push(" AND schedule_time < TIMESTAMPADD(MICROSECOND, ")
                .push_bind(overdue_before_us(after_ms))
                .push(", UTC_TIMESTAMP(3)) AND id IN ");
            push_id_list(&mut update, ids);
            update.build().execute(&mut *tx).await?;
        }
        let read: Vec<JobId> = rows.iter().map(|(id, _)| *id).collect();
        let ids = events_record_changed(&mut tx, &self.actor, &read, token).await?;
        tx.commit().await?;
        // Every rank read is given, moved or not: a later call's ranks
        // start past them, and no slot holds more than `cap`.
        let ranked = drain.ranked + read.len() as u64;
        Ok((ids, OverdueDrain { ranked, ..drain }))
    }

    pub async fn topic_control(&self, topic: &str) -> Result<Option<TopicControl>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {CONTROL_COLUMNS} FROM topic_controls WHERE topic = ?"
        ))
        .bind(topic)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(control_from_row).transpose()
    }

    /// Applies `change` to the topic's controls (creating its row), as
    /// `by`. Once a pause commits, the dispatcher's compare-and-set wins no
    /// job of the topic: a job claimed before it is already on its way.
    pub async fn topic_control_set(
        &self,
        topic: &str,
        change: &TopicChange,
        by: &str,
    ) -> Result<TopicControl, StoreError> {
        let paused = change.paused.unwrap_or(false);
        let rate = change.max_per_second.flatten();
        let group_by = change.group_by.clone().flatten();
        let group_rate = change.group_max_per_second.flatten();
        let schema = change.payload_schema.clone().flatten();
        // Crash after this commits: the change holds; every instance reads
        // it within a second.
        sqlx::query(
            "INSERT INTO topic_controls \
             (topic, paused, max_per_second, group_by, group_max_per_second, payload_schema, \
             updated_by) VALUES (?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE \
             paused = IF(?, ?, paused), \
             max_per_second = IF(?, ?, max_per_second), \
             group_by = IF(?, ?, group_by), \
             group_max_per_second = IF(?, ?, group_max_per_second), \
             payload_schema = IF(?, ?, payload_schema), \
             updated_by = ?, updated_at = UTC_TIMESTAMP(3)",
        )
        .bind(topic)
        .bind(paused)
        .bind(rate)
        .bind(&group_by)
        .bind(group_rate)
        .bind(&schema)
        .bind(by)
        .bind(change.paused.is_some())
        .bind(paused)
        .bind(change.max_per_second.is_some())
        .bind(rate)
        .bind(change.group_by.is_some())
        .bind(&group_by)
        .bind(change.group_max_per_second.is_some())
        .bind(group_rate)
        .bind(change.payload_schema.is_some())
        .bind(&schema)
        .bind(by)
        .execute(&self.pool)
        .await?;
        self.topic_control(topic)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("topic {topic:?}: controls vanished")))
    }

    /// Pending jobs of `topic` due before `until`, by id after `after`: the
    /// jobs to put back in the index when the topic resumes.
    pub async fn job_list_pending_topic(
        &self,
        topic: &str,
        until: DateTime<Utc>,
        after: JobId,
        limit: u32,
    ) -> Result<Vec<WindowEntry>, StoreError> {
        let rows = sqlx::query(
            // Held jobs stay out until released.
            // id-order: keyset paging over the topic's pending jobs: needs ids to be a
            // total order, not a time order.
            "SELECT id, schedule_time FROM jobs WHERE status = 'pending' AND topic = ? \
             AND held_at IS NULL AND schedule_time < ? AND id > ? ORDER BY id LIMIT ?",
        )
        .bind(topic)
        .bind(db_time(until))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(WindowEntry::from_row).collect()
    }

    /// The topic of each of these jobs, and the end of its flexible window
    /// if it has one (what the dispatcher's pacing needs), with the token
    /// that created it when `with_token` (from `token_jobs`, by its job
    /// index: a topic grouped by token); ids without a row are left out.
    /// Headers are read (and opened) only `with_headers` (a topic grouped
    /// by one): without, each job's are empty.
    pub async fn job_pacing(
        &self,
        ids: &[JobId],
        with_token: bool,
        with_headers: bool,
    ) -> Result<Vec<JobPacing>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut query = pacing_select(with_token, with_headers);
        query.push(" FROM jobs WHERE id IN ");
        super::sql::push_id_list(&mut query, ids);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(|row| self.pacing_from_row(row)).collect()
    }

    /// What grouping needs of `topic`'s jobs in flight (dispatching or
    /// dispatched), at most `most` of them: a topic's
    /// `group_max_in_flight` counts them by group. Reads
    /// `ix_jobs_status_topic` and the rows it names.
    pub async fn topic_in_flight_pacing(
        &self,
        topic: &str,
        with_token: bool,
        most: u32,
    ) -> Result<Vec<JobPacing>, StoreError> {
        let mut query = pacing_select(with_token, true);
        query
            .push(" FROM jobs WHERE status IN ('dispatching', 'dispatched') AND topic = ")
            .push_bind(topic)
            .push(" LIMIT ")
            .push_bind(most);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(|row| self.pacing_from_row(row)).collect()
    }

    fn pacing_from_row(&self, row: &MySqlRow) -> Result<JobPacing, StoreError> {
        let topic: Vec<u8> = row.try_get("topic")?;
        let window_ms: Option<u32> = row.try_get("window_ms")?;
        let window_start: Option<NaiveDateTime> = row.try_get("window_start")?;
        let key: Option<Vec<u8>> = row.try_get("job_key")?;
        let headers: Option<Vec<u8>> = row.try_get("headers")?;
        let key_id: Option<Vec<u8>> = row.try_get("enc_key")?;
        let id: JobId = row.try_get("id")?;
        // Pacing never fails on a hand-edited row, or one that does
        // not open: its group is the ungrouped one (the claim sets
        // it aside, if it must).
        let key_id = key_id.map(|k| String::from_utf8_lossy(&k).into_owned());
        let headers = headers.map(|h| String::from_utf8_lossy(&h).into_owned());
        let headers = headers_opened(&self.keys, key_id.as_deref(), id, headers)
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default();
        Ok(JobPacing {
            id,
            topic: String::from_utf8(topic)
                .map_err(|_| StoreError::Corrupt("jobs.topic is not UTF-8".to_owned()))?,
            key: key.map(|key| String::from_utf8_lossy(&key).into_owned()),
            headers,
            token: row.try_get::<Option<u64>, _>("token_id")?,
            window_end: window_ms
                .zip(window_start)
                .map(|(ms, start)| start.and_utc() + chrono::Duration::milliseconds(i64::from(ms))),
        })
    }
}

/// The columns pacing reads, before `FROM`.
fn pacing_select<'a>(with_token: bool, with_headers: bool) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new(if with_headers {
        "SELECT id, topic, job_key, headers, enc_key, window_ms, window_start, "
    } else {
        "SELECT id, topic, job_key, CAST(NULL AS BINARY) AS headers, \
         CAST(NULL AS BINARY) AS enc_key, window_ms, window_start, "
    });
    query.push(if with_token {
        "(SELECT MIN(t.token_id) FROM token_jobs t WHERE t.job_id = jobs.id) AS token_id"
    } else {
        "CAST(NULL AS UNSIGNED) AS token_id"
    });
    query
}

/// How far before the database's now a job is overdue, in microseconds,
/// signed: MySQL refuses a negative product of unsigned values.
fn overdue_before_us(after_ms: u64) -> i64 {
    -(i64::try_from(after_ms)
        .unwrap_or(i64::MAX / 1000)
        .min(i64::MAX / 1000)
        * 1000)
}
