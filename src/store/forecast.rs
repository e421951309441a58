//! What is due ahead: pending jobs counted by topic and time bucket, for
//! `GET /v1/forecast`. One range scan of `ix_jobs_status_at` (`status_at`
//! is `schedule_time` while `pending`, and the index holds `topic`): the
//! cost follows the jobs in the range, never the table.

use chrono::{DateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::sql::{db_time, topic_patterns_push};

/// Pending jobs of one topic due in one bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCount {
    pub topic: String,
    /// The bucket's index: it starts `index × bucket` after `from`.
    pub index: u64,
    pub count: u64,
}

impl Store {
    /// Pending jobs due in [`from`, `to`), by topic and bucket of
    /// `bucket_ms` counted from `from`: only `topic` when given, else the
    /// topics `patterns` match (all of them when None).
    pub async fn jobs_due_by_bucket(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        bucket_ms: u64,
        topic: Option<&str>,
        patterns: Option<&[String]>,
    ) -> Result<Vec<DueCount>, StoreError> {
        let mut query =
            QueryBuilder::<MySql>::new("SELECT topic, CAST(TIMESTAMPDIFF(MICROSECOND, ");
        query
            .push_bind(db_time(from))
            .push(", status_at) DIV ")
            .push_bind(bucket_ms.saturating_mul(1000))
            .push(" AS UNSIGNED) AS bucket, COUNT(*) AS n FROM jobs WHERE status = 'pending' AND status_at >= ")
            .push_bind(db_time(from))
            .push(" AND status_at < ")
            .push_bind(db_time(to));
        if let Some(topic) = topic {
            query.push(" AND topic = ").push_bind(topic);
        }
        topic_patterns_push(&mut query, patterns);
        // No order: MariaDB would sort the groups for nothing.
        query.push(" GROUP BY topic, bucket ORDER BY NULL");
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let n: i64 = row.try_get("n")?;
                // ascii_bin: the driver reads it as bytes.
                let topic: Vec<u8> = row.try_get("topic")?;
                Ok(DueCount {
                    topic: String::from_utf8_lossy(&topic).into_owned(),
                    index: row.try_get("bucket")?,
                    count: n as u64,
                })
            })
            .collect()
    }
}
