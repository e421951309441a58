//! Read-only counts for the gauges, `/v1/stats` and the doctor. Each is an
//! index range scan; none reads far-future rows one by one.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::job_row::text;
use super::sql::db_time;

/// The statuses counted by topic: the live ones (finished jobs are counted
/// by the `_total` counters and purged after `jobs.retention_days`).
pub const COUNTED: [&str; 4] = ["pending", "dispatching", "dispatched", "dead"];

/// Before every `DATETIME` MySQL takes ('1000-01-01').
const DATETIME_MIN: NaiveDateTime = match chrono::NaiveDate::from_ymd_opt(1000, 1, 1) {
    Some(day) => day.and_time(chrono::NaiveTime::MIN),
    None => NaiveDateTime::MIN,
};

/// Where a count of one status's jobs by topic has got to
/// ([`Store::job_count_page`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountCursor {
    /// At the start: the jobs without a `status_at` first.
    Start,
    /// Past every job up to this `status_at`.
    After(NaiveDateTime),
}

/// Jobs of one status on one topic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct TopicCount {
    pub topic: String,
    pub status: String,
    pub count: u64,
}

/// Pending jobs whose time has come, by the database's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overdue {
    pub count: u64,
    pub oldest_age_ms: i64,
}

impl Store {
    /// One step of a count of the jobs of `status` by topic, in the order
    /// of `ix_jobs_status_at` from just past `after`: the topics of about
    /// `limit` jobs — every job up to the `status_at` the `limit`-th one
    /// has, so jobs sharing an instant are counted together — and where
    /// the next step starts (None: the status's range is read to its
    /// end). Two index-only range reads of about `limit` entries whatever
    /// the table's size, so a count of any size goes a bounded step at a
    /// time ([`crate::roles::reporter::truth`]). The jobs without a `status_at`
    /// (dispatched, awaiting their result: as many as are in flight) are
    /// counted in the first step.
    ///
    /// Plain ranges on `status_at`, and the index named: at a hundred
    /// million rows, a page resuming after (`status_at`, id) through an
    /// `OR` read its status's range from the start on MariaDB when sent
    /// as a prepared statement (50 s a page, 640,000 rows examined for
    /// 20,000), though `EXPLAIN` showed the range.
    pub async fn job_count_page(
        &self,
        status: &str,
        after: CountCursor,
        limit: u32,
    ) -> Result<(BTreeMap<String, u64>, Option<CountCursor>), StoreError> {
        let offset = limit.max(1) - 1;
        let (from, unset) = match after {
            CountCursor::Start => (DATETIME_MIN, true),
            CountCursor::After(at) => (at, false),
        };
        let mut counts = BTreeMap::new();
        let mut add = |rows: Vec<(Vec<u8>, i64)>| {
            for (topic, n) in rows {
                *counts
                    .entry(String::from_utf8_lossy(&topic).into_owned())
                    .or_insert(0) += u64::try_from(n).unwrap_or(0);
            }
        };
        if unset {
            add(sqlx::query_as(
                "SELECT topic, COUNT(*) FROM jobs FORCE INDEX (ix_jobs_status_at) \
                 WHERE status = ? AND status_at IS NULL GROUP BY topic",
            )
            .bind(status)
            .fetch_all(&self.pool)
            .await?);
        }
        let until: Option<NaiveDateTime> = sqlx::query_scalar(&format!(
            "SELECT status_at FROM jobs FORCE INDEX (ix_jobs_status_at) \
             WHERE status = ? AND status_at > ? ORDER BY status_at LIMIT 1 OFFSET {offset}"
        ))
        .bind(status)
        .bind(from)
        .fetch_optional(&self.pool)
        .await?;
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT topic, COUNT(*) FROM jobs FORCE INDEX (ix_jobs_status_at) WHERE status = ",
        );
        query
            .push_bind(status)
            .push(" AND status_at > ")
            .push_bind(from);
        if let Some(until) = until {
            query.push(" AND status_at <= ").push_bind(until);
        }
        query.push(" GROUP BY topic");
        add(query.build_query_as().fetch_all(&self.pool).await?);
        Ok((counts, until.map(CountCursor::After)))
    }

    /// Pending jobs already due, and the age of the oldest. The jobs of a
    /// paused topic are held on purpose: left out here, in the window
    /// count and the next due time (`GET /v1/topics` shows paused topics);
    /// so are jobs held by their payload schema (`GET /v1/jobs?held=true`,
    /// the doctor's `held` check).
    pub async fn job_overdue(&self) -> Result<Overdue, StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, \
             CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(status_at), UTC_TIMESTAMP(3)), 0) / 1000 AS SIGNED) AS age \
             FROM jobs WHERE status = 'pending' AND status_at <= UTC_TIMESTAMP(3) \
             AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused) \
             AND held_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let n: i64 = row.try_get("n")?;
        Ok(Overdue {
            count: n as u64,
            oldest_age_ms: row.try_get("age")?,
        })
    }

    /// Rows the Redis index should hold: pending jobs due within `window`
    /// of the database's now, and claimed (`dispatching`) ones.
    pub async fn job_window_count(&self, window: Duration) -> Result<u64, StoreError> {
        let window_us = i64::try_from(window.as_micros()).unwrap_or(i64::MAX);
        let n: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM jobs WHERE status = 'pending' \
               AND status_at < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
               AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused) \
               AND held_at IS NULL) \
             + (SELECT COUNT(*) FROM jobs WHERE status = 'dispatching')",
        )
        .bind(window_us)
        .fetch_one(&self.pool)
        .await?;
        Ok(n as u64)
    }

    /// Milliseconds until the next pending job is due (negative: overdue),
    /// None when nothing is pending.
    pub async fn job_next_due_in(&self) -> Result<Option<i64>, StoreError> {
        // Walks `ix_jobs_status_at`'s pending range from its start to the
        // first row of a topic not paused.
        let ms: Option<Option<i64>> = sqlx::query_scalar(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), status_at) / 1000 AS SIGNED) \
             FROM jobs WHERE status = 'pending' AND status_at IS NOT NULL \
             AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused) \
             AND held_at IS NULL ORDER BY status_at LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(ms.flatten())
    }

    /// (run time, dispatch time) of the latest `limit` jobs of each of
    /// `dispatched` and `succeeded` due and done with within `since` before
    /// now (a job awaiting its result counts once it has it): a bounded
    /// sample of recent lateness, read from `ix_jobs_status_at` newest first
    /// (`status_at` is `updated_at` for a job done with).
    pub async fn job_lateness_sample(
        &self,
        since: Duration,
        limit: u32,
    ) -> Result<Vec<(DateTime<Utc>, DateTime<Utc>)>, StoreError> {
        let since_us = i64::try_from(since.as_micros()).unwrap_or(i64::MAX);
        let mut sample = Vec::new();
        for status in ["dispatched", "succeeded"] {
            let rows = sqlx::query(
                "SELECT schedule_time, dispatched_at FROM jobs WHERE status = ? \
                 AND status_at >= TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(3)) \
                 AND schedule_time >= TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(3)) \
                 AND schedule_time <= UTC_TIMESTAMP(3) \
                 ORDER BY status_at DESC LIMIT ?",
            )
            .bind(status)
            .bind(since_us)
            .bind(since_us)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                let at: NaiveDateTime = row.try_get("schedule_time")?;
                let sent: Option<NaiveDateTime> = row.try_get("dispatched_at")?;
                if let Some(sent) = sent {
                    sample.push((at.and_utc(), sent.and_utc()));
                }
            }
        }
        Ok(sample)
    }

    /// `dispatching` rows whose claim lease has expired by the database's
    /// clock, with how long ago (ms) the oldest expired. A row set
    /// `dispatching` by hand has no lease (NULL, or the placeholder of 1970
    /// it was created with) and is not counted.
    pub async fn job_claims_expired(&self) -> Result<(u64, i64), StoreError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, \
             CAST(COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(claim_expires_at), UTC_TIMESTAMP(3)), 0) / 1000 AS SIGNED) AS age \
             FROM jobs WHERE status = 'dispatching' AND claim_expires_at < UTC_TIMESTAMP(3) \
             AND claim_expires_at > '1970-01-01 00:00:00.000'",
        )
        .fetch_one(&self.pool)
        .await?;
        let n: i64 = row.try_get("n")?;
        Ok((n as u64, row.try_get("age")?))
    }
}

impl Store {
    /// Jobs set aside because their row did not decode when claimed (at
    /// most `limit` of them, newest first) and how many there are.
    pub async fn job_unreadable(
        &self,
        limit: u32,
    ) -> Result<(u64, Vec<crate::domain::job::JobId>), StoreError> {
        let pattern = format!("{}%", super::job_row::UNREADABLE_PREFIX);
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND last_error LIKE ?",
        )
        .bind(&pattern)
        .fetch_one(&self.pool)
        .await?;
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'dead' AND last_error LIKE ? \
             ORDER BY updated_at DESC LIMIT ?",
        )
        .bind(&pattern)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok((count as u64, ids))
    }
}

/// A job's recorded Kafka position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub id: crate::domain::job::JobId,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl Store {
    /// Pending jobs due before `window` from the database's now, soonest
    /// first, at most `limit`.
    pub async fn job_window_pending(
        &self,
        window: Duration,
        limit: u32,
    ) -> Result<Vec<(crate::domain::job::JobId, DateTime<Utc>)>, StoreError> {
        let window_us = i64::try_from(window.as_micros()).unwrap_or(i64::MAX);
        let rows = sqlx::query(
            "SELECT id, status_at AS schedule_time FROM jobs WHERE status = 'pending' \
             AND status_at < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             AND topic NOT IN (SELECT topic FROM topic_controls WHERE paused) \
             AND held_at IS NULL ORDER BY status_at LIMIT ?",
        )
        .bind(window_us)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let at: NaiveDateTime = row.try_get("schedule_time")?;
                Ok((row.try_get("id")?, at.and_utc()))
            })
            .collect()
    }

    /// The status of each of `ids` that still exists.
    pub async fn job_statuses(
        &self,
        ids: &[crate::domain::job::JobId],
    ) -> Result<
        std::collections::HashMap<crate::domain::job::JobId, crate::domain::job::Status>,
        StoreError,
    > {
        let mut statuses = std::collections::HashMap::new();
        for chunk in ids.chunks(1_000) {
            let mut query = sqlx::QueryBuilder::<sqlx::MySql>::new(
                "SELECT id, CAST(status AS CHAR) AS status FROM jobs WHERE id IN (",
            );
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(")");
            for row in query.build().fetch_all(&self.pool).await? {
                let status: String = row.try_get("status")?;
                let status = status
                    .parse()
                    .map_err(|_| StoreError::Corrupt(format!("status {status:?}")))?;
                statuses.insert(row.try_get("id")?, status);
            }
        }
        Ok(statuses)
    }

    /// The topics of pending jobs due before `until` (the database's clock
    /// plus that much), with how many each: a range of `(status,
    /// schedule_time)`, at most `limit` topics.
    pub async fn job_topics_due_within(
        &self,
        until: Duration,
        limit: u32,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, COUNT(*) AS n FROM jobs WHERE status = 'pending' \
             AND schedule_time < TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             GROUP BY topic ORDER BY topic LIMIT ?",
        )
        .bind(u64::try_from(until.as_micros()).unwrap_or(u64::MAX))
        .bind(limit)
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

    /// The recorded positions of the `limit` jobs of each of `dispatched`
    /// and `succeeded` done with last (by `ix_jobs_status_at`).
    pub async fn job_positions_recent(&self, limit: u32) -> Result<Vec<Position>, StoreError> {
        let mut positions = Vec::new();
        for status in ["dispatched", "succeeded"] {
            let rows = sqlx::query(
                "SELECT id, topic, kafka_partition, kafka_offset FROM jobs WHERE status = ? \
                 AND kafka_offset IS NOT NULL AND status_at IS NOT NULL \
                 ORDER BY status_at DESC LIMIT ?",
            )
            .bind(status)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
            for row in &rows {
                let topic: Vec<u8> = row.try_get("topic")?;
                positions.push(Position {
                    id: row.try_get("id")?,
                    topic: String::from_utf8_lossy(&topic).into_owned(),
                    partition: row.try_get("kafka_partition")?,
                    offset: row.try_get("kafka_offset")?,
                });
            }
        }
        Ok(positions)
    }
}

/// Jobs of one topic that ended dead in a span.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadSince {
    pub topic: String,
    pub count: u64,
    /// Some of their ids.
    pub ids: Vec<crate::domain::job::JobId>,
}

impl Store {
    /// Jobs dead now whose row changed after `since` and at or before
    /// `until` (database clock): id, topic and when, at most `limit`. A
    /// range scan of `(status, updated_at)`.
    pub async fn job_dead_between(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<(crate::domain::job::JobId, String, DateTime<Utc>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, topic, updated_at FROM jobs WHERE status = 'dead' \
             AND updated_at > ? AND updated_at <= ? ORDER BY updated_at LIMIT ?",
        )
        .bind(db_time(since))
        .bind(db_time(until))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let topic: Vec<u8> = row.try_get("topic")?;
                let at: NaiveDateTime = row.try_get("updated_at")?;
                Ok((
                    row.try_get("id")?,
                    String::from_utf8_lossy(&topic).into_owned(),
                    at.and_utc(),
                ))
            })
            .collect()
    }
}
