//! Due-time watermarks: per topic, the instant T such that every job due at
//! or before T is done with (produced, cancelled, expired or dead). Read from
//! the jobs still outstanding — `pending` or `dispatching`, a claim in doubt
//! and a paused topic's held jobs included — and kept in `topic_watermarks`,
//! only ever raised.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::sql::db_time;

/// One topic's watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watermark {
    pub topic: String,
    pub at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl Store {
    /// Per topic, the earliest due time among its outstanding jobs due at
    /// or before `until` (`pending` or `dispatching`): a range scan of the
    /// due rows of `ix_jobs_status_at`, the overdue probe's, not of the
    /// future.
    pub async fn jobs_outstanding_earliest(
        &self,
        until: DateTime<Utc>,
    ) -> Result<Vec<(String, DateTime<Utc>)>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, MIN(status_at) AS earliest FROM jobs \
             WHERE status IN ('pending', 'dispatching') AND status_at <= ? \
             GROUP BY topic ORDER BY NULL",
        )
        .bind(db_time(until))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let topic: Vec<u8> = row.try_get("topic")?;
                let earliest: NaiveDateTime = row.try_get("earliest")?;
                Ok((
                    String::from_utf8_lossy(&topic).into_owned(),
                    earliest.and_utc(),
                ))
            })
            .collect()
    }

    /// The topics of the next `limit` pending jobs due after `after`: the
    /// topics about to need a watermark (a range scan of `limit` index
    /// entries).
    pub async fn jobs_upcoming_topics(
        &self,
        after: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT topic FROM (SELECT topic FROM jobs WHERE status = 'pending' \
             AND status_at > ? ORDER BY status_at LIMIT ?) upcoming",
        )
        .bind(db_time(after))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let topic: Vec<u8> = row.try_get("topic")?;
                Ok(String::from_utf8_lossy(&topic).into_owned())
            })
            .collect()
    }

    /// Raises the watermarks: each of `held` to its instant, every other
    /// topic's to `free`; `upcoming` topics without a row get one at
    /// `free` (a topic new here first appears there or in `held`). Never
    /// lowers one.
    pub async fn watermarks_raise(
        &self,
        held: &[(String, DateTime<Utc>)],
        upcoming: &[String],
        free: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        let fresh: Vec<&String> = upcoming
            .iter()
            .filter(|topic| !held.iter().any(|(held, _)| held == *topic))
            .collect();
        if !fresh.is_empty() {
            let mut insert = QueryBuilder::<MySql>::new(
                "INSERT IGNORE INTO topic_watermarks (topic, watermark_at, updated_at) ",
            );
            insert.push_values(fresh, |mut row, topic| {
                row.push_bind(topic)
                    .push_bind(db_time(free))
                    .push("UTC_TIMESTAMP(3)");
            });
            insert.build().execute(&mut *tx).await?;
        }
        if !held.is_empty() {
            let mut insert = QueryBuilder::<MySql>::new(
                "INSERT IGNORE INTO topic_watermarks (topic, watermark_at, updated_at) ",
            );
            insert.push_values(held, |mut row, (topic, at)| {
                row.push_bind(topic)
                    .push_bind(db_time(*at))
                    .push("UTC_TIMESTAMP(3)");
            });
            insert.build().execute(&mut *tx).await?;
            for (topic, at) in held {
                sqlx::query(
                    "UPDATE topic_watermarks SET watermark_at = ?, updated_at = UTC_TIMESTAMP(3) \
                     WHERE topic = ? AND watermark_at < ?",
                )
                .bind(db_time(*at))
                .bind(topic)
                .bind(db_time(*at))
                .execute(&mut *tx)
                .await?;
            }
        }
        let mut rest = QueryBuilder::<MySql>::new(
            "UPDATE topic_watermarks SET updated_at = UTC_TIMESTAMP(3), watermark_at = ",
        );
        rest.push_bind(db_time(free))
            .push(" WHERE watermark_at < ")
            .push_bind(db_time(free));
        if !held.is_empty() {
            rest.push(" AND topic NOT IN (");
            let mut names = rest.separated(", ");
            for (topic, _) in held {
                names.push_bind(topic);
            }
            rest.push(")");
        }
        rest.build().execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every topic's watermark, by topic.
    pub async fn watermarks(&self) -> Result<Vec<Watermark>, StoreError> {
        let rows = sqlx::query(
            "SELECT topic, watermark_at, updated_at FROM topic_watermarks ORDER BY topic",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(watermark_from_row).collect()
    }

    /// One topic's watermark; None until one of its jobs has fallen due.
    pub async fn watermark(&self, topic: &str) -> Result<Option<Watermark>, StoreError> {
        let row = sqlx::query(
            "SELECT topic, watermark_at, updated_at FROM topic_watermarks WHERE topic = ?",
        )
        .bind(topic)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(watermark_from_row).transpose()
    }
}

fn watermark_from_row(row: &sqlx::mysql::MySqlRow) -> Result<Watermark, StoreError> {
    let topic: Vec<u8> = row.try_get("topic")?;
    let at: NaiveDateTime = row.try_get("watermark_at")?;
    let updated_at: NaiveDateTime = row.try_get("updated_at")?;
    Ok(Watermark {
        topic: String::from_utf8_lossy(&topic).into_owned(),
        at: at.and_utc(),
        updated_at: updated_at.and_utc(),
    })
}
