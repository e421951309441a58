//! Consumption's statements (#59): the committed offsets of the consumer
//! groups that read tickler's topics, kept when they move on
//! (`consumer_offsets`), and what they say of a job: when each group read
//! past its record.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder};

use super::error::StoreError;
use super::handle::Store;
use super::job_row::text;
use super::sql::db_time;
use crate::domain::job::Job;

/// A group's committed offset on a partition, as just read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetSample {
    pub topic: String,
    pub partition: i32,
    pub group: String,
    pub committed: i64,
}

/// When one group read past a job's record (None: not yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub group: String,
    pub at: Option<DateTime<Utc>>,
}

/// (topic, partition, group)s whose old samples one DELETE removes.
const PURGE_GROUPS_MAX: usize = 200;

impl Store {
    /// Records `samples` as seen now (the database's clock); a sample
    /// already recorded (by another instance) is left as it is.
    ///
    /// Crash before this commits: the next pass reads the offsets again;
    /// the jobs they passed are consumed a pass later than they were.
    pub async fn consumer_offsets_record(
        &self,
        samples: &[OffsetSample],
    ) -> Result<(), StoreError> {
        for chunk in samples.chunks(500) {
            let mut query = QueryBuilder::<MySql>::new(
                "INSERT IGNORE INTO consumer_offsets \
                 (topic, kafka_partition, group_id, committed_offset, seen_at) ",
            );
            query.push_values(chunk, |mut row, sample| {
                row.push_bind(sample.topic.as_bytes())
                    .push_bind(sample.partition)
                    .push_bind(sample.group.as_bytes())
                    .push_bind(sample.committed)
                    .push("UTC_TIMESTAMP(3)");
            });
            query.build().execute(&self.pool).await?;
        }
        Ok(())
    }

    /// The (topic, group) pairs with offsets recorded: the groups followed
    /// before, by whichever instance.
    pub async fn consumer_groups_recorded(
        &self,
    ) -> Result<BTreeMap<String, BTreeSet<String>>, StoreError> {
        let rows = sqlx::query("SELECT DISTINCT group_id, topic FROM consumer_offsets")
            .fetch_all(&self.pool)
            .await?;
        let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for row in &rows {
            // A row edited by hand into bytes that are no name costs only
            // itself: the others are followed.
            match (text(row, "topic"), text(row, "group_id")) {
                (Ok(Some(topic)), Ok(Some(group))) => {
                    groups.entry(topic).or_default().insert(group);
                }
                _ => tracing::debug!("a consumer_offsets row names no topic or group; skipped"),
            }
        }
        Ok(groups)
    }

    /// When each group that reads job `job`'s partition (those recorded
    /// there, and `followed`) first committed past its record — no earlier
    /// than it was produced: a topic deleted and made again starts its
    /// offsets over. Empty for a job without a position.
    pub async fn job_consumed(
        &self,
        job: &Job,
        followed: &[String],
    ) -> Result<Vec<Consumed>, StoreError> {
        let (Some(partition), Some(offset), Some(dispatched_at)) =
            (job.kafka_partition, job.kafka_offset, job.dispatched_at)
        else {
            return Ok(Vec::new());
        };
        self.position_consumed(&job.topic, partition, offset, dispatched_at, followed)
            .await
    }

    /// [`Store::job_consumed`] of a record produced to `topic` at
    /// `partition`/`offset` at `dispatched_at`.
    pub async fn position_consumed(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        dispatched_at: DateTime<Utc>,
        followed: &[String],
    ) -> Result<Vec<Consumed>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT group_id FROM consumer_offsets WHERE topic = ? AND kafka_partition = ?",
        )
        .bind(topic.as_bytes())
        .bind(partition)
        .fetch_all(&self.pool)
        .await?;
        let mut groups: BTreeSet<String> = followed.iter().cloned().collect();
        for row in &rows {
            // A group id that is not UTF-8 (a hand edit) is left out.
            groups.extend(text(row, "group_id").ok().flatten());
        }
        let mut consumed = Vec::with_capacity(groups.len());
        for group in groups {
            let at: Option<NaiveDateTime> = sqlx::query_scalar(
                "SELECT seen_at FROM consumer_offsets WHERE topic = ? AND kafka_partition = ? \
                 AND group_id = ? AND committed_offset > ? AND seen_at >= ? \
                 ORDER BY committed_offset LIMIT 1",
            )
            .bind(topic.as_bytes())
            .bind(partition)
            .bind(group.as_bytes())
            .bind(offset)
            .bind(db_time(dispatched_at))
            .fetch_optional(&self.pool)
            .await?;
            consumed.push(Consumed {
                group,
                at: at.map(|at| at.and_utc()),
            });
        }
        Ok(consumed)
    }

    /// The dispatched job of `topic`/`partition` at or past `offset` with
    /// the lowest offset, among those whose status changed in `[from, to]`:
    /// the oldest a group that committed `offset` has not read (a bounded
    /// range of `ix_jobs_status_at`).
    pub async fn job_first_unconsumed(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Option<u64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'dispatched' AND status_at >= ? AND status_at <= ? \
             AND topic = ? AND kafka_partition = ? AND kafka_offset >= ? \
             ORDER BY kafka_offset LIMIT 1",
        )
        .bind(db_time(from))
        .bind(db_time(to))
        .bind(topic.as_bytes())
        .bind(partition)
        .bind(offset)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Deletes the samples seen before `before`, but for each group's
    /// newest on each partition: a group idle for longer keeps where it
    /// stands (what `--unconsumed-by` and a job's `consumed` read). Returns
    /// how many it deleted.
    pub async fn consumer_offsets_purge(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        // Each group's newest sample on each partition (of the groups that
        // have one old enough to go), read; then, from the one table, what
        // is older than both `before` and that newest, by primary-key
        // prefix, a chunk of groups at a time. A sample written between the
        // two is newer than `before` and stays.
        let before = db_time(before);
        let newest: Vec<(Vec<u8>, i32, Vec<u8>, NaiveDateTime)> = sqlx::query_as(
            "SELECT topic, kafka_partition, group_id, MAX(seen_at) FROM consumer_offsets \
             GROUP BY topic, kafka_partition, group_id HAVING MIN(seen_at) < ?",
        )
        .bind(before)
        .fetch_all(&self.pool)
        .await?;
        let mut deleted = 0;
        for chunk in newest.chunks(PURGE_GROUPS_MAX) {
            let mut delete =
                QueryBuilder::<MySql>::new("DELETE FROM consumer_offsets WHERE seen_at < ");
            delete.push_bind(before).push(" AND (");
            for (n, (topic, partition, group, newest)) in chunk.iter().enumerate() {
                if n > 0 {
                    delete.push(" OR ");
                }
                delete
                    .push("(topic = ")
                    .push_bind(topic.clone())
                    .push(" AND kafka_partition = ")
                    .push_bind(*partition)
                    .push(" AND group_id = ")
                    .push_bind(group.clone())
                    .push(" AND seen_at < ")
                    .push_bind(*newest)
                    .push(")");
            }
            delete.push(")");
            deleted += delete.build().execute(&self.pool).await?.rows_affected();
        }
        Ok(deleted)
    }
}

/// ` AND` job is dispatched and group `group` has not read past its record
/// (of a topic the group is known to read): `JobFilter::unconsumed_by`.
pub(super) fn unconsumed_push<'a>(query: &mut QueryBuilder<'a, MySql>, group: &'a str) {
    query
        .push(
            " AND status = 'dispatched' AND kafka_offset IS NOT NULL \
             AND topic IN (SELECT c.topic FROM consumer_offsets c WHERE c.group_id = ",
        )
        .push_bind(group.as_bytes())
        .push(") AND NOT EXISTS (SELECT 1 FROM consumer_offsets c WHERE c.group_id = ")
        .push_bind(group.as_bytes())
        .push(
            " AND c.topic = jobs.topic AND c.kafka_partition = jobs.kafka_partition \
             AND c.committed_offset > jobs.kafka_offset AND c.seen_at >= jobs.dispatched_at)",
        );
}
