//! Bulk changes: an operation over every job a filter matches, worked
//! through by id in bounded batches. Each batch's changes and the
//! operation's progress commit together, so an operation resumed after a
//! crash neither skips nor repeats a job.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::history::{event_token, events_record, events_record_retargeted};
use super::job_row::{job_from_row_listed, JOB_COLUMNS, JOB_COLUMNS_NO_PAYLOAD};
use super::sql::{db_time, run_at_push, topic_patterns_push};
use crate::domain::job::{Job, JobId, Status};

/// Which jobs an operation covers. Every field narrows; the API requires at
/// least one besides `topic_patterns`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BulkFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_prefix: Option<String>,
    /// Due at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_from: Option<DateTime<Utc>>,
    /// Due before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_to: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<JobId>>,
    /// `true`: only pending jobs held by their topic's payload schema;
    /// `false`: only pending jobs not held. Either way pending jobs only:
    /// a hold means nothing in another status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// The topics the caller's token may touch (`None`: all), kept with
    /// the operation so a resumed one stays within them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_patterns: Option<Vec<String>>,
}

/// What an operation does to each job it covers. Every action applies to
/// jobs in one status only ([`BulkAction::applies_to`]); a job that left
/// that status before its batch is skipped, never forced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum BulkAction {
    /// Pending jobs are cancelled. (A struct variant, so that unknown
    /// fields are refused as for the others.)
    Cancel {},
    /// Pending jobs move by `by_ms` (negative: earlier).
    Shift { by_ms: i64 },
    /// Pending jobs move to `run_at`.
    Move { run_at: DateTime<Utc> },
    /// Dead jobs go back to pending, due now, with `max_attempts` more
    /// attempts (default: their topic's `max_attempts`).
    Redrive {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
    },
    /// Pending jobs get a new result policy; what is left out is kept.
    Policy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expects_result: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backoff_base_ms: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backoff_cap_ms: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ack_timeout_ms: Option<u32>,
    },
    /// Pending jobs move to another Kafka topic, keeping their id, key,
    /// payload, time and attempt. A job whose key a job on `topic` holds
    /// already stays where it is (a conflict: one job per (topic, key));
    /// a schedule's occurrence stays with its schedule (skipped).
    Retarget { topic: String },
    /// Held pending jobs (`held_at`, see `store::holds`) are let go, as
    /// `POST /v1/jobs/{id}/release` does one: due again at their time. By
    /// default each payload is checked against its topic's schema in force
    /// now, and one still failing stays held (a conflict); with `force` it
    /// is released unchecked, and its current attempt is sent as it is
    /// (`schema_waived_attempt`). A job not held is skipped.
    Release {
        #[serde(default)]
        force: bool,
    },
}

impl BulkAction {
    /// The one status of the jobs this action changes.
    pub fn applies_to(&self) -> Status {
        match self {
            BulkAction::Redrive { .. } => Status::Dead,
            _ => Status::Pending,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            BulkAction::Cancel {} => "cancel",
            BulkAction::Shift { .. } => "shift",
            BulkAction::Move { .. } => "move",
            BulkAction::Redrive { .. } => "redrive",
            BulkAction::Policy { .. } => "policy",
            BulkAction::Retarget { .. } => "retarget",
            BulkAction::Release { .. } => "release",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkStatus {
    Running,
    Done,
    Failed,
}

impl BulkStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkStatus::Running => "running",
            BulkStatus::Done => "done",
            BulkStatus::Failed => "failed",
        }
    }
}

/// An operation as stored.
#[derive(Debug, Clone)]
pub struct BulkOp {
    pub id: u64,
    pub created_by: String,
    pub filter: BulkFilter,
    pub action: BulkAction,
    pub status: BulkStatus,
    pub max_id: JobId,
    pub cursor_id: JobId,
    pub total: u64,
    pub done: u64,
    pub changed: u64,
    pub skipped: u64,
    /// Jobs a retarget left where they were (their key is taken on the
    /// target topic), or a release left held (their payload still does not
    /// match their topic's schema).
    pub conflicts: u64,
    pub errors: Vec<String>,
    pub owner_token: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct BulkBatch {
    /// Jobs this batch changed.
    pub changed: Vec<JobId>,
    /// Jobs the filter matched but that were no longer in the action's
    /// status (or, for a retarget, were a schedule's occurrences or on the
    /// target topic already; for a release, were not held).
    pub skipped: u64,
    /// Jobs a retarget left where they were: their key is taken on the
    /// target topic. Held jobs a release without `force` left held: their
    /// payload still does not match their topic's schema.
    pub conflicts: u64,
}

/// Most errors an operation keeps.
const ERRORS_KEPT: usize = 20;

/// `prefix` as a LIKE pattern matching every string that starts with it
/// (escape character `!`).
fn like_prefix(prefix: &str) -> String {
    let mut like = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '_' | '%' | '!') {
            like.push('!');
        }
        like.push(c);
    }
    like.push('%');
    like
}

/// ` AND ...` for every condition of `filter`.
fn filter_push(query: &mut QueryBuilder<'_, MySql>, filter: &BulkFilter) {
    if let Some(topic) = &filter.topic {
        query.push(" AND topic = ").push_bind(topic.clone());
    }
    if let Some(status) = filter.status {
        query.push(" AND status = ").push_bind(status.as_str());
    }
    if let Some(prefix) = &filter.key_prefix {
        query
            .push(" AND job_key LIKE ")
            .push_bind(like_prefix(prefix))
            .push(" ESCAPE '!'");
    }
    run_at_push(query, filter.run_at_from, filter.run_at_to);
    if let Some(ids) = &filter.ids {
        query.push(" AND id IN (");
        if ids.is_empty() {
            query.push("NULL");
        }
        let mut list = query.separated(", ");
        for id in ids {
            list.push_bind(*id);
        }
        query.push(")");
    }
    match filter.held {
        Some(true) => {
            query.push(" AND status = 'pending' AND held_at IS NOT NULL");
        }
        Some(false) => {
            query.push(" AND status = 'pending' AND held_at IS NULL");
        }
        None => {}
    }
    topic_patterns_push(query, filter.topic_patterns.as_deref());
}

/// ` AND ...` for the jobs an action leaves alone whatever their status.
/// A retarget: a schedule's occurrences (they keep their schedule's topic,
/// which the schedule's own changes and its audit find them by) and those
/// on the target topic already. A release: the jobs not held. Nothing for
/// the other actions.
fn action_push(query: &mut QueryBuilder<'_, MySql>, action: &BulkAction) {
    match action {
        BulkAction::Retarget { topic } => {
            query
                .push(" AND schedule_id IS NULL AND topic <> ")
                .push_bind(topic.clone());
        }
        BulkAction::Release { .. } => {
            query.push(" AND held_at IS NOT NULL");
        }
        _ => {}
    }
}

fn ids_push(query: &mut QueryBuilder<'_, MySql>, ids: &[JobId]) {
    query.push(" AND id IN (");
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}

/// ` AND` each of `ids` (read in the batch) still at the version it was
/// read at: with the read's own conditions repeated, the write's
/// compare-and-set. `id IN` first, so the primary key finds the rows.
fn as_read_push(
    query: &mut QueryBuilder<'_, MySql>,
    ids: &[JobId],
    versions: &HashMap<JobId, u32>,
) {
    ids_push(query, ids);
    query.push(" AND (id, version) IN (");
    let mut list = query.separated(", ");
    for id in ids {
        list.push("(")
            .push_bind_unseparated(*id)
            .push_unseparated(", ")
            .push_bind_unseparated(versions.get(id).copied().unwrap_or(0))
            .push_unseparated(")");
    }
    query.push(")");
}

/// A batch's write changed every row it read, or none is kept: one changed
/// since the read (by a dispatcher, a person, another change) fails the
/// batch, which is made again on the rows as they are now.
fn all_as_read(written: u64, read: usize) -> Result<(), StoreError> {
    if written == read as u64 {
        Ok(())
    } else {
        Err(StoreError::lost_race(format!(
            "{} of a bulk batch's {read} rows changed since they were read",
            (read as u64).saturating_sub(written)
        )))
    }
}

impl Store {
    /// The newest job id (0 when there is none).
    pub async fn job_max_id(&self) -> Result<JobId, StoreError> {
        // id-order: the bound of a bulk change's cursor: every job that exists
        // now has an id up to it. Ids are not in time order (a job created
        // after this read may get a lower one from a block reserved before):
        // the operation leaves those out by their created_at (`bulk_next`).
        let max: Option<JobId> = sqlx::query_scalar("SELECT MAX(id) FROM jobs")
            .fetch_one(&self.pool)
            .await?;
        Ok(max.unwrap_or(0))
    }

    /// How many jobs with ids up to `max_id` match `filter`, and how many of
    /// those are in `status` now.
    pub async fn bulk_count(
        &self,
        filter: &BulkFilter,
        max_id: JobId,
        status: Status,
    ) -> Result<(u64, u64), StoreError> {
        // id-order: counts the jobs job_max_id bounded (see there).
        let mut query = QueryBuilder::<MySql>::new("SELECT COUNT(*), CAST(COALESCE(SUM(status = ");
        query
            .push_bind(status.as_str())
            .push("), 0) AS SIGNED) FROM jobs WHERE id <= ")
            .push_bind(max_id);
        filter_push(&mut query, filter);
        let row = query.build().fetch_one(&self.pool).await?;
        let matched: i64 = row.try_get(0)?;
        let eligible: i64 = row.try_get(1)?;
        Ok((matched as u64, eligible as u64))
    }

    /// Of the jobs with ids up to `max_id` that `filter` matches, how many
    /// a retarget to `topic` would move now (pending, not a schedule's
    /// occurrence, on another topic), and how many of those would stay
    /// because a job on `topic` holds their key (two of them sharing a key
    /// are not counted: the second stays too).
    pub async fn bulk_retarget_count(
        &self,
        filter: &BulkFilter,
        max_id: JobId,
        topic: &str,
    ) -> Result<(u64, u64), StoreError> {
        let action = BulkAction::Retarget {
            topic: topic.to_owned(),
        };
        // id-order: counts the jobs job_max_id bounded (see there).
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*), CAST(COALESCE(SUM(EXISTS (SELECT 1 FROM jobs taken WHERE taken.topic = ",
        );
        query
            .push_bind(topic.to_owned())
            .push(
                " AND taken.job_key = jobs.job_key)), 0) AS SIGNED) FROM jobs \
                 WHERE status = 'pending' AND id <= ",
            )
            .push_bind(max_id);
        action_push(&mut query, &action);
        filter_push(&mut query, filter);
        let row = query.build().fetch_one(&self.pool).await?;
        let eligible: i64 = row.try_get(0)?;
        let conflicts: i64 = row.try_get(1)?;
        Ok((eligible as u64, conflicts as u64))
    }

    /// Of the jobs with ids up to `max_id` that `filter` matches, how many
    /// are held now (pending, `held_at` set): those a release would look
    /// at.
    pub async fn bulk_held_count(
        &self,
        filter: &BulkFilter,
        max_id: JobId,
    ) -> Result<u64, StoreError> {
        // id-order: counts the jobs job_max_id bounded (see there).
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND held_at IS NOT NULL AND id <= ",
        );
        query.push_bind(max_id);
        filter_push(&mut query, filter);
        let held: i64 = query.build().fetch_one(&self.pool).await?.try_get(0)?;
        Ok(held.max(0) as u64)
    }

    /// The first `limit` jobs `filter` matches, by id, without payloads.
    pub async fn bulk_sample(
        &self,
        filter: &BulkFilter,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(format!(
            // id-order: a stable order for a sample; any total order would do.
            "SELECT {JOB_COLUMNS_NO_PAYLOAD} FROM jobs WHERE TRUE"
        ));
        filter_push(&mut query, filter);
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| job_from_row_listed(row, &self.keys, &self.codec))
            .collect()
    }

    /// Jobs by id, without payloads (those that still exist).
    pub async fn job_get_many(&self, ids: &[JobId]) -> Result<Vec<Job>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT {JOB_COLUMNS_NO_PAYLOAD} FROM jobs WHERE TRUE"
        ));
        ids_push(&mut query, ids);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| job_from_row_listed(row, &self.keys, &self.codec))
            .collect()
    }

    /// Records a new operation, owned by `owner_token`; returns its id.
    #[allow(clippy::too_many_arguments)]
    pub async fn bulk_create(
        &self,
        created_by: &str,
        filter: &BulkFilter,
        action: &BulkAction,
        max_id: JobId,
        total: u64,
        owner_token: u64,
    ) -> Result<u64, StoreError> {
        let id = sqlx::query(
            "INSERT INTO bulk_ops (created_by, filter_json, action_json, max_id, total, \
             owner_token, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3))",
        )
        .bind(created_by)
        .bind(serde_json::to_string(filter).unwrap_or_default())
        .bind(serde_json::to_string(action).unwrap_or_default())
        .bind(max_id)
        .bind(total)
        .bind(owner_token)
        .execute(&self.pool)
        .await?
        .last_insert_id();
        Ok(id)
    }

    pub async fn bulk_get(&self, id: u64) -> Result<Option<BulkOp>, StoreError> {
        let row = sqlx::query(&format!("SELECT {BULK_COLUMNS} FROM bulk_ops WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(bulk_from_row).transpose()
    }

    /// The newest operations first.
    pub async fn bulk_list(&self, limit: u32) -> Result<Vec<BulkOp>, StoreError> {
        let rows = sqlx::query(&format!(
            // id-order: newest first, for people: creation order on InnoDB and on
            // TiDB with the baseline's AUTO_ID_CACHE=1; nothing depends on it.
            "SELECT {BULK_COLUMNS} FROM bulk_ops ORDER BY id DESC LIMIT ?"
        ))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(bulk_from_row).collect()
    }

    /// The next `limit` jobs of `op` after its cursor: ids and topics.
    pub async fn bulk_next(
        &self,
        op: &BulkOp,
        limit: u32,
    ) -> Result<Vec<(JobId, String)>, StoreError> {
        // id-order: a cursor over the ids up to max_id: it needs ids to be a
        // total order, not a time order. Ids are not handed out in time order
        // (src/store/id_blocks.rs), so a job created after the operation may
        // have a lower id: its created_at leaves it out.
        let mut query = QueryBuilder::<MySql>::new("SELECT id, topic FROM jobs WHERE id > ");
        query
            .push_bind(op.cursor_id)
            .push(" AND id <= ")
            .push_bind(op.max_id)
            .push(" AND created_at <= ")
            .push_bind(db_time(op.created_at));
        filter_push(&mut query, &op.filter);
        query.push(" ORDER BY id LIMIT ").push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let topic: Vec<u8> = row.try_get("topic")?;
                Ok((
                    row.try_get("id")?,
                    String::from_utf8_lossy(&topic).into_owned(),
                ))
            })
            .collect()
    }

    /// Applies `op`'s action to `batch` (the ids `bulk_next` gave, with
    /// their topics) and moves the operation's cursor past them, in one
    /// transaction. Each job is changed only if it is still in the action's
    /// status and still matches the filter. `attempts_for` gives a
    /// redriven job's attempts by topic; `payload_fits` says whether a job
    /// a release without `force` would let go matches its topic's payload
    /// schema now (asked under the row's lock, so the payload it saw is the
    /// one released; a row that does not decode does not fit).
    ///
    /// `Ok(None)`: nothing was written, because the operation is no longer
    /// where `op` says: another instance took it over as stalled, or this
    /// batch committed already (a connection lost while the commit's
    /// answer was on its way) and the cursor is past it. Read it again.
    ///
    /// Crash after the commit: the jobs are changed and the cursor is past
    /// them; whoever resumes starts with the next batch. Redis is brought
    /// along by the caller, or by the loader's scan of edited rows. A
    /// retargeted job needs nothing of Redis (it holds ids): a claim reads
    /// the topic back from the row, and one that claimed first made the
    /// job no longer pending, so this batch skipped it.
    pub async fn bulk_apply(
        &self,
        op: &BulkOp,
        batch: &[(JobId, String)],
        attempts_for: impl Fn(&str) -> u32,
        payload_fits: impl Fn(&Job) -> bool,
    ) -> Result<Option<BulkBatch>, StoreError> {
        let Some(last) = batch.last().map(|(id, _)| *id) else {
            return Ok(Some(BulkBatch::default()));
        };
        contention_retry(|| self.bulk_apply_once(op, batch, last, &attempts_for, &payload_fits))
            .await
    }

    /// Long because it is one transaction: read the batch, apply the
    /// operation's change to each job it still applies to by compare-and-sets
    /// on the rows as read, advance the cursor, all on one connection.
    async fn bulk_apply_once(
        &self,
        op: &BulkOp,
        batch: &[(JobId, String)],
        last: JobId,
        attempts_for: &impl Fn(&str) -> u32,
        payload_fits: &impl Fn(&Job) -> bool,
    ) -> Result<Option<BulkBatch>, StoreError> {
        let mut tx = self.begin().await?;
        let ids: Vec<JobId> = batch.iter().map(|(id, _)| *id).collect();
        // A release that checks payloads reads them (and the write repeats
        // the version they were read at).
        let checks_payloads = matches!(op.action, BulkAction::Release { force: false });
        let columns = if checks_payloads {
            JOB_COLUMNS
        } else {
            "id, topic, version"
        };
        // Read plainly: each write repeats the read's conditions and the
        // versions read ([`as_read_push`]), and a batch one of whose rows
        // changed in between is made again on the rows as they are now.
        let mut read =
            QueryBuilder::<MySql>::new(format!("SELECT {columns} FROM jobs WHERE status = "));
        read.push_bind(op.action.applies_to().as_str());
        action_push(&mut read, &op.action);
        ids_push(&mut read, &ids);
        filter_push(&mut read, &op.filter);
        let rows = read.build().fetch_all(&mut *tx).await?;
        let mut versions: HashMap<JobId, u32> = HashMap::with_capacity(rows.len());
        for row in &rows {
            versions.insert(row.try_get("id")?, row.try_get("version")?);
        }
        let as_read = |query: &mut QueryBuilder<'_, MySql>, ids: &[JobId]| {
            action_push(query, &op.action);
            filter_push(query, &op.filter);
            as_read_push(query, ids, &versions);
        };
        fail_point_pause!("bulk-read");
        let mut eligible: Vec<(JobId, String)> = Vec::with_capacity(rows.len());
        let mut conflicts = 0;
        for row in &rows {
            if checks_payloads {
                // Still failing (or unreadable): it stays held.
                let fits = self
                    .job_decode(row)
                    .await
                    .is_ok_and(|job| payload_fits(&job));
                if !fits {
                    conflicts += 1;
                    continue;
                }
            }
            let topic: Vec<u8> = row.try_get("topic")?;
            eligible.push((
                row.try_get("id")?,
                String::from_utf8_lossy(&topic).into_owned(),
            ));
        }
        let mut changed: Vec<JobId> = eligible.iter().map(|(id, _)| *id).collect();
        if !changed.is_empty() {
            match &op.action {
                BulkAction::Release { force } => {
                    // As `job_hold_release` does one job.
                    let token = event_token();
                    let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
                    update
                        .push_bind(token)
                        .push(", held_at = NULL, held_reason = NULL, schema_waived_attempt = ")
                        .push(if *force { "attempt" } else { "NULL" })
                        .push(
                            ", version = version % 4294967295 + 1 \
                             WHERE status = 'pending' AND held_at IS NOT NULL",
                        );
                    as_read(&mut update, &changed);
                    let written = update.build().execute(&mut *tx).await?.rows_affected();
                    all_as_read(written, changed.len())?;
                    events_record(&mut tx, &self.actor, &changed, token).await?;
                }
                BulkAction::Retarget { topic } => {
                    let token = event_token();
                    // IGNORE: a row whose key the target topic holds (or
                    // one this statement moved a moment before) keeps its
                    // topic; the unique key decides, at the write, so no
                    // job created meanwhile can slip past a check.
                    let mut update =
                        QueryBuilder::<MySql>::new("UPDATE IGNORE jobs SET event_token = ");
                    update
                        .push_bind(token)
                        .push(", version = version % 4294967295 + 1, topic = ")
                        .push_bind(topic.as_str())
                        .push(" WHERE status = 'pending'");
                    as_read(&mut update, &changed);
                    // A row changed since the read is not moved, and is
                    // counted with those whose key the topic holds.
                    update.build().execute(&mut *tx).await?;
                    let moved =
                        events_record_retargeted(&mut tx, &self.actor, &eligible, topic, token)
                            .await?;
                    conflicts += (changed.len() - moved.len()) as u64;
                    changed = moved;
                }
                BulkAction::Redrive { max_attempts } => {
                    // One statement per topic: the default attempts are the
                    // topic's.
                    let mut topics: Vec<&str> = eligible.iter().map(|(_, t)| t.as_str()).collect();
                    topics.sort_unstable();
                    topics.dedup();
                    for topic in topics {
                        let attempts = max_attempts.unwrap_or_else(|| attempts_for(topic));
                        let of_topic: Vec<JobId> = eligible
                            .iter()
                            .filter(|(_, t)| t == topic)
                            .map(|(id, _)| *id)
                            .collect();
                        let token = event_token();
                        let mut update =
                            QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
                        update
                            .push_bind(token)
                            .push(", status = 'pending', max_attempts = attempt + ");
                        update.push_bind(attempts).push(
                            ", attempt = LEAST(attempt, 4294967294) + 1, schedule_time = UTC_TIMESTAMP(3), \
                                 ack_deadline = NULL, version = version % 4294967295 + 1 \
                                 WHERE status = 'dead'",
                        );
                        as_read(&mut update, &of_topic);
                        let written = update.build().execute(&mut *tx).await?.rows_affected();
                        all_as_read(written, of_topic.len())?;
                        events_record(&mut tx, &self.actor, &of_topic, token).await?;
                    }
                }
                action => {
                    let token = event_token();
                    let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET ");
                    // First, so that a move compares the time the row had:
                    // the history records what changed status or time.
                    match action {
                        BulkAction::Cancel {} => {
                            update.push("event_token = ").push_bind(token).push(", ");
                        }
                        BulkAction::Shift { by_ms } if *by_ms != 0 => {
                            update.push("event_token = ").push_bind(token).push(", ");
                        }
                        BulkAction::Move { run_at } => {
                            update
                                .push("event_token = IF(schedule_time <=> ")
                                .push_bind(db_time(*run_at))
                                .push(", event_token, ")
                                .push_bind(token)
                                .push("), ");
                        }
                        _ => {}
                    }
                    update.push("version = version % 4294967295 + 1");
                    match action {
                        BulkAction::Cancel {} => {
                            update.push(", status = 'cancelled'");
                        }
                        BulkAction::Shift { by_ms } => {
                            update
                                .push(", schedule_time = TIMESTAMPADD(MICROSECOND, ")
                                .push_bind(by_ms.saturating_mul(1000))
                                .push(", schedule_time)")
                                // An occurrence moved on purpose is no
                                // longer a misfire; a job's own expiry
                                // moves with it.
                                .push(", expires_at = IF(schedule_id IS NULL, TIMESTAMPADD(MICROSECOND, ")
                                .push_bind(by_ms.saturating_mul(1000))
                                .push(", expires_at), NULL)")
                                // Its window moves along (NULL stays NULL).
                                .push(", window_start = TIMESTAMPADD(MICROSECOND, ")
                                .push_bind(by_ms.saturating_mul(1000))
                                .push(", window_start)");
                        }
                        BulkAction::Move { run_at } => {
                            // Exactly to the new time: a job's window goes
                            // (no assignment here reads another's column,
                            // whose order engines differ on).
                            update
                                .push(", schedule_time = ")
                                .push_bind(db_time(*run_at))
                                .push(", window_ms = NULL, window_start = NULL")
                                // A job's own expiry stays: one before the
                                // new time ends it unsent when it falls due.
                                .push(", expires_at = IF(schedule_id IS NULL, expires_at, NULL)");
                        }
                        BulkAction::Policy {
                            expects_result,
                            max_attempts,
                            backoff_base_ms,
                            backoff_cap_ms,
                            ack_timeout_ms,
                        } => {
                            if let Some(v) = expects_result {
                                update.push(", expects_result = ").push_bind(*v);
                            }
                            if let Some(v) = max_attempts {
                                // Never below the attempt the job is at.
                                update
                                    .push(", max_attempts = GREATEST(attempt, ")
                                    .push_bind(*v)
                                    .push(")");
                            }
                            // The base never exceeds the cap. Each
                            // expression reads the row as it was (TiDB
                            // evaluates every assignment against the old
                            // row, MySQL and MariaDB against the values
                            // already assigned): the new cap is bound,
                            // never read back from the column.
                            // set-order: backoff_cap_ms is read only in the
                            // arm where this statement does not assign it.
                            if let Some(v) = backoff_cap_ms {
                                update.push(", backoff_cap_ms = ").push_bind(*v);
                            }
                            if backoff_base_ms.is_some() || backoff_cap_ms.is_some() {
                                update.push(", backoff_base_ms = LEAST(");
                                match backoff_base_ms {
                                    Some(v) => update.push_bind(*v),
                                    None => update.push("backoff_base_ms"),
                                };
                                update.push(", ");
                                match backoff_cap_ms {
                                    Some(v) => update.push_bind(*v),
                                    None => update.push("backoff_cap_ms"),
                                };
                                update.push(")");
                            }
                            if let Some(v) = ack_timeout_ms {
                                update.push(", ack_timeout_ms = ").push_bind(*v);
                            }
                        }
                        BulkAction::Redrive { .. }
                        | BulkAction::Retarget { .. }
                        | BulkAction::Release { .. } => {
                            unreachable!("handled above")
                        }
                    }
                    update.push(" WHERE status = 'pending'");
                    as_read(&mut update, &changed);
                    let written = update.build().execute(&mut *tx).await?.rows_affected();
                    all_as_read(written, changed.len())?;
                    events_record(&mut tx, &self.actor, &changed, token).await?;
                }
            }
        }
        let skipped = batch.len() as u64 - changed.len() as u64 - conflicts;
        let progressed = sqlx::query(
            "UPDATE bulk_ops SET cursor_id = ?, done = done + ?, changed = changed + ?, \
             skipped = skipped + ?, conflicts = conflicts + ?, updated_at = UTC_TIMESTAMP(3) \
             WHERE id = ? AND owner_token = ? AND status = 'running' AND cursor_id = ?",
        )
        .bind(last)
        .bind(batch.len() as u64)
        .bind(changed.len() as u64)
        .bind(skipped)
        .bind(conflicts)
        .bind(op.id)
        .bind(op.owner_token)
        .bind(op.cursor_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if progressed != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(BulkBatch {
            changed,
            skipped,
            conflicts,
        }))
    }

    /// Ends `op` (when still this owner's), with an error to record.
    pub async fn bulk_finish(
        &self,
        op: &BulkOp,
        status: BulkStatus,
        error: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut errors = op.errors.clone();
        if let Some(error) = error {
            errors.push(error.to_owned());
        }
        Ok(sqlx::query(
            "UPDATE bulk_ops SET status = ?, errors = ?, finished_at = UTC_TIMESTAMP(3), \
             updated_at = UTC_TIMESTAMP(3) WHERE id = ? AND owner_token = ? AND status = 'running'",
        )
        .bind(status.as_str())
        .bind(errors_encode(&errors))
        .bind(op.id)
        .bind(op.owner_token)
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1)
    }

    /// Records an error `op` met and goes on (kept: the last few).
    pub async fn bulk_error(&self, op: &mut BulkOp, error: &str) -> Result<(), StoreError> {
        op.errors.push(error.to_owned());
        if op.errors.len() > ERRORS_KEPT {
            op.errors.remove(0);
        }
        sqlx::query(
            "UPDATE bulk_ops SET errors = ?, updated_at = UTC_TIMESTAMP(3) \
             WHERE id = ? AND owner_token = ?",
        )
        .bind(errors_encode(&op.errors))
        .bind(op.id)
        .bind(op.owner_token)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Takes over one running operation nobody has moved for `stale` (its
    /// instance died or lost MySQL), as `owner_token`.
    pub async fn bulk_adopt_stalled(
        &self,
        stale: Duration,
        owner_token: u64,
    ) -> Result<Option<BulkOp>, StoreError> {
        let stale_us = i64::try_from(stale.as_micros()).unwrap_or(i64::MAX);
        let candidates: Vec<u64> = sqlx::query_scalar(
            // id-order: oldest operations first is a preference; any order is correct.
            "SELECT id FROM bulk_ops WHERE status = 'running' \
             AND updated_at < TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(3)) ORDER BY id LIMIT 10",
        )
        .bind(stale_us)
        .fetch_all(&self.pool)
        .await?;
        for id in candidates {
            let won = sqlx::query(
                "UPDATE bulk_ops SET owner_token = ?, updated_at = UTC_TIMESTAMP(3) \
                 WHERE id = ? AND status = 'running' \
                 AND updated_at < TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(3))",
            )
            .bind(owner_token)
            .bind(id)
            .bind(stale_us)
            .execute(&self.pool)
            .await?
            .rows_affected()
                == 1;
            if won {
                return self.bulk_get(id).await;
            }
        }
        Ok(None)
    }
}

const BULK_COLUMNS: &str = "id, created_by, filter_json, action_json, status, max_id, cursor_id, \
    total, done, changed, skipped, conflicts, errors, owner_token, created_at, updated_at, finished_at";

fn errors_encode(errors: &[String]) -> String {
    serde_json::to_string(errors).unwrap_or_else(|_| "[]".to_owned())
}

fn bulk_from_row(row: &MySqlRow) -> Result<BulkOp, StoreError> {
    let id: u64 = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("bulk operation {id}: {what}"));
    let filter: String = row.try_get("filter_json")?;
    let action: String = row.try_get("action_json")?;
    let status: String = row.try_get("status")?;
    let errors: Option<String> = row.try_get("errors")?;
    let created_at: NaiveDateTime = row.try_get("created_at")?;
    let updated_at: NaiveDateTime = row.try_get("updated_at")?;
    let finished_at: Option<NaiveDateTime> = row.try_get("finished_at")?;
    Ok(BulkOp {
        id,
        created_by: row.try_get("created_by")?,
        filter: serde_json::from_str(&filter).map_err(|_| corrupt("filter"))?,
        action: serde_json::from_str(&action).map_err(|_| corrupt("action"))?,
        status: match status.as_str() {
            "running" => BulkStatus::Running,
            "done" => BulkStatus::Done,
            "failed" => BulkStatus::Failed,
            _ => return Err(corrupt("status")),
        },
        max_id: row.try_get("max_id")?,
        cursor_id: row.try_get("cursor_id")?,
        total: row.try_get("total")?,
        done: row.try_get("done")?,
        changed: row.try_get("changed")?,
        skipped: row.try_get("skipped")?,
        conflicts: row.try_get("conflicts")?,
        errors: errors
            .map(|e| serde_json::from_str(&e).map_err(|_| corrupt("errors")))
            .transpose()?
            .unwrap_or_default(),
        owner_token: row.try_get("owner_token")?,
        created_at: created_at.and_utc(),
        updated_at: updated_at.and_utc(),
        finished_at: finished_at.map(|at| at.and_utc()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_prefix_matches_its_characters_literally() {
        assert_eq!(like_prefix("order-1"), "order-1%");
        assert_eq!(like_prefix("a_b%c!"), "a!_b!%c!!%");
        assert_eq!(like_prefix(""), "%");
    }

    #[test]
    fn actions_read_and_write_their_json() {
        let shift: BulkAction = serde_json::from_str(r#"{"type":"shift","by_ms":-5000}"#).unwrap();
        assert_eq!(shift, BulkAction::Shift { by_ms: -5000 });
        assert_eq!(shift.applies_to(), Status::Pending);
        let redrive: BulkAction = serde_json::from_str(r#"{"type":"redrive"}"#).unwrap();
        assert_eq!(redrive.applies_to(), Status::Dead);
        assert!(serde_json::from_str::<BulkAction>(r#"{"type":"explode"}"#).is_err());
        assert!(serde_json::from_str::<BulkAction>(r#"{"type":"cancel","x":1}"#).is_err());
        let text = serde_json::to_string(&BulkAction::Move {
            run_at: "2030-01-01T00:00:00Z".parse().unwrap(),
        })
        .unwrap();
        assert_eq!(
            serde_json::from_str::<BulkAction>(&text).unwrap().name(),
            "move"
        );
        let retarget: BulkAction =
            serde_json::from_str(r#"{"type":"retarget","topic":"billing.v2"}"#).unwrap();
        assert_eq!(
            (retarget.name(), retarget.applies_to()),
            ("retarget", Status::Pending)
        );
        assert!(serde_json::from_str::<BulkAction>(r#"{"type":"retarget"}"#).is_err());
        assert!(
            serde_json::from_str::<BulkAction>(r#"{"type":"retarget","topic":"t","key":"k"}"#)
                .is_err()
        );
    }

    #[test]
    fn a_release_and_the_held_filter_read_and_write_their_json() {
        let release: BulkAction = serde_json::from_str(r#"{"type":"release"}"#).unwrap();
        assert_eq!(release, BulkAction::Release { force: false });
        assert_eq!(
            (release.name(), release.applies_to()),
            ("release", Status::Pending)
        );
        let forced: BulkAction =
            serde_json::from_str(r#"{"type":"release","force":true}"#).unwrap();
        assert_eq!(forced, BulkAction::Release { force: true });
        let text = serde_json::to_string(&forced).unwrap();
        assert_eq!(text, r#"{"type":"release","force":true}"#);
        assert_eq!(serde_json::from_str::<BulkAction>(&text).unwrap(), forced);
        for refused in [
            r#"{"type":"release","force":"yes"}"#,
            r#"{"type":"release","force":null}"#,
            r#"{"type":"release","topic":"t"}"#,
        ] {
            assert!(
                serde_json::from_str::<BulkAction>(refused).is_err(),
                "{refused}"
            );
        }

        let held: BulkFilter = serde_json::from_str(r#"{"topic":"orders","held":true}"#).unwrap();
        assert_eq!(
            (held.topic.as_deref(), held.held),
            (Some("orders"), Some(true))
        );
        let text = serde_json::to_string(&held).unwrap();
        assert_eq!(text, r#"{"topic":"orders","held":true}"#);
        // Operations stored before the field read as they were written.
        let before: BulkFilter = serde_json::from_str(r#"{"topic":"orders"}"#).unwrap();
        assert_eq!(before.held, None);
        assert_eq!(
            serde_json::to_string(&before).unwrap(),
            r#"{"topic":"orders"}"#
        );
        assert!(serde_json::from_str::<BulkFilter>(r#"{"held":"yes"}"#).is_err());

        // Either way, pending jobs only.
        let sql = |held| {
            let mut query = QueryBuilder::<MySql>::new("SELECT id FROM jobs WHERE TRUE");
            filter_push(
                &mut query,
                &BulkFilter {
                    held,
                    ..BulkFilter::default()
                },
            );
            query.sql().to_owned()
        };
        assert!(sql(Some(true)).ends_with(" AND status = 'pending' AND held_at IS NOT NULL"));
        assert!(sql(Some(false)).ends_with(" AND status = 'pending' AND held_at IS NULL"));
        assert_eq!(sql(None), "SELECT id FROM jobs WHERE TRUE");
    }
}
