//! Results, retries and dead jobs: reports and missed ack deadlines applied
//! to jobs, redrive, and the dead-letter outbox.
//!
//! A decision is taken on rows read plainly and written by a compare-and-set
//! that repeats what it was taken on (the row's version, status and attempt,
//! and for a missed deadline that it is still past): a report and the ack
//! deadline, or two instances, never both move one attempt. A batch one of
//! whose rows moved between the read and the write is rolled back whole and
//! decided again on the rows as they are now ([`contention_retry`]), so no
//! lock is held and no locking read is needed (docs/architecture.md,
//! "Compare-and-set, not locks"). Crash before the commit: nothing happened,
//! the report is read again (the results consumer commits its offset only
//! after this commit) or the deadline is still past.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row, Transaction};

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::history::{event_token, events_record};
use super::job_row::{
    job_from_row, job_from_row_without_body, job_read_back, policy_from_row, WindowEntry,
    JOB_COLUMNS,
};
use super::sql::{db_time, push_id_list};
use crate::domain::job::{Job, JobId, Schedule, Status};
use crate::domain::outcome::{self, Decision, Ignored, JobState, ResultReport};

/// What became of one report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Applied: the job is now in this state.
    Applied(Status),
    /// Changed nothing, for this reason.
    Ignored(Ignored),
}

/// What a batch of reports, or of missed ack deadlines, did.
#[derive(Debug, Default)]
pub struct Decided {
    /// One per report, in order (empty for ack deadlines).
    pub dispositions: Vec<Disposition>,
    /// Jobs sent back to `pending`, at their new time, to index.
    pub retried: Vec<WindowEntry>,
    pub succeeded: usize,
    pub dead: usize,
    /// The jobs that ended dead.
    pub dead_ids: Vec<JobId>,
    /// Dead jobs with a dead-letter record to produce.
    pub dead_lettered: usize,
    /// The database's clock at the decision; read only when jobs were
    /// retried (it places them in or beyond the window).
    pub db_now: Option<DateTime<Utc>>,
}

/// What became of a redrive.
#[derive(Debug)]
pub enum Redriven {
    /// The job is pending again with a fresh attempt budget.
    Applied(Job, DateTime<Utc>),
    /// Only dead jobs can be redriven.
    NotDead(Job),
}

/// A dead-letter record owed: the job as it is now, the attempt it died at
/// and the error it died of.
#[derive(Debug)]
pub struct DeadLetter {
    pub job: Job,
    pub attempt: u32,
    pub error: Option<String>,
    /// How many times this record was claimed, this one included.
    pub tries: u32,
}

/// A job as read for a decision: what the decision is taken on.
struct Seen {
    state: JobState,
    version: u32,
    topic: String,
    ack_expired: bool,
    /// The dispatcher claim it is (or was last) under.
    claim_token: Option<u64>,
}

/// One row's change.
struct Change {
    id: JobId,
    version: u32,
    /// The status and attempt the decision was taken on: the write's
    /// compare-and-set repeats them beside the version (a hand edit need
    /// not move the version).
    was: Status,
    /// The decision counted on the ack deadline being past: the write
    /// checks it still is.
    deadline_past: bool,
    status: Status,
    /// For a retry: the delay from now.
    delay_ms: Option<u64>,
    error: Option<String>,
    attempt: u32,
    dead_letter: bool,
}

impl Store {
    /// Applies consumers' reports. `dead_letter(topic)` says whether a job
    /// of that topic that dies gets a dead-letter record.
    pub async fn job_report_many(
        &self,
        reports: &[ResultReport],
        dead_letter: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Decided, StoreError> {
        contention_retry(|| self.job_report_many_once(reports, dead_letter)).await
    }

    async fn job_report_many_once(
        &self,
        reports: &[ResultReport],
        dead_letter: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Decided, StoreError> {
        let ids: Vec<JobId> = reports.iter().map(|r| r.job_id).collect();
        let mut tx = self.begin().await?;
        let mut seen = read(&mut tx, &ids).await?;
        fail_point_pause!("results-read");
        let mut changes: Vec<Change> = Vec::new();
        let dispositions = {
            let mut rng = rand::rng();
            reports
                .iter()
                .map(|report| match seen.get_mut(&report.job_id) {
                    None => Disposition::Ignored(Ignored::UnknownJob),
                    Some(job) => {
                        let decision = outcome::decide(&job.state, report, &mut rng);
                        change_push(
                            &mut changes,
                            report.job_id,
                            job,
                            decision,
                            dead_letter,
                            false,
                        )
                    }
                })
                .collect()
        };
        let mut settled = finish(tx, &self.actor, &changes).await?;
        settled.dispositions = dispositions;
        Ok(settled)
    }

    /// Treats dispatched jobs whose ack deadline passed (by the database's
    /// clock) as if their consumer had said `retry`; at most `limit`.
    pub async fn job_ack_expire(
        &self,
        limit: u32,
        dead_letter: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Decided, StoreError> {
        // Served by (status, ack_deadline); read again by id to decide.
        let ids: Vec<JobId> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'dispatched' \
             AND ack_deadline < UTC_TIMESTAMP(3) ORDER BY ack_deadline LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        if ids.is_empty() {
            return Ok(Decided::default());
        }
        contention_retry(|| async {
            let mut tx = self.begin().await?;
            let mut seen = read(&mut tx, &ids).await?;
            let mut changes = Vec::new();
            {
                let mut rng = rand::rng();
                for id in &ids {
                    let Some(job) = seen.get_mut(id) else {
                        continue;
                    };
                    // A report may have settled it since the first read.
                    if job.state.status == Status::Dispatched && job.ack_expired {
                        let decision = outcome::decide_silence(&job.state, &mut rng);
                        change_push(&mut changes, *id, job, decision, dead_letter, true);
                    }
                }
            }
            finish(tx, &self.actor, &changes).await
        })
        .await
    }

    /// Counts a failed attempt for jobs of claim `token` whose record the
    /// broker refused for the job's own sake (its topic does not exist, the
    /// record is too large, ...): `dispatching → pending` at now + backoff
    /// with the next attempt, or `dead` when no attempt is left, with the
    /// refusal in `last_error`. Rows no longer under `token` (the lease
    /// expired and the job moved on) are left alone.
    ///
    /// Crash before this commits: the rows stay `dispatching` until the
    /// lease expires, then go back to `pending` without counting the
    /// attempt; the next dispatch is refused again and counted then.
    pub async fn job_refuse_many(
        &self,
        token: u64,
        refused: &[(JobId, String)],
        dead_letter: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<Decided, StoreError> {
        if refused.is_empty() {
            return Ok(Decided::default());
        }
        let ids: Vec<JobId> = refused.iter().map(|(id, _)| *id).collect();
        contention_retry(|| async {
            let mut tx = self.begin().await?;
            let mut seen = read(&mut tx, &ids).await?;
            let mut changes = Vec::new();
            {
                let mut rng = rand::rng();
                for (id, error) in refused {
                    let Some(job) = seen.get_mut(id) else {
                        continue;
                    };
                    // Under `token` still: another claim moved the version.
                    if job.state.status == Status::Dispatching && job.claim_token == Some(token) {
                        let decision = outcome::decide_refused(&job.state, error, &mut rng);
                        change_push(&mut changes, *id, job, decision, dead_letter, false);
                    }
                }
            }
            finish(tx, &self.actor, &changes).await
        })
        .await
    }

    /// Sends a dead job back to `pending` with `attempts` more attempts, at
    /// `schedule` (now when None). The attempt number goes on counting
    /// (consumers deduplicate on job id and attempt, so a redriven job must
    /// not repeat an attempt number they have seen).
    pub async fn job_redrive(
        &self,
        id: JobId,
        attempts: u32,
        schedule: Option<Schedule>,
    ) -> Result<Redriven, StoreError> {
        let (at, delay_us) = match schedule {
            Some(Schedule::At(at)) => (Some(db_time(at)), 0),
            Some(Schedule::After { delay_ms }) => (None, delay_ms.saturating_mul(1000)),
            None => (None, 0),
        };
        // One transaction, so the answer reads the row as the redrive left
        // it, not as the loader and a dispatcher took it a moment later.
        let mut tx = self.begin().await?;
        let token = event_token();
        // max_attempts is assigned before attempt, from the old attempt, so
        // the result is the same whether the server evaluates assignments
        // left to right (MySQL, MariaDB) or all at once.
        let applied = sqlx::query(
            "UPDATE jobs SET event_token = ?, status = 'pending', max_attempts = attempt + ?, \
             attempt = LEAST(attempt, 4294967294) + 1, \
             schedule_time = COALESCE(?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))), \
             ack_deadline = NULL, version = version % 4294967295 + 1 WHERE id = ? AND status = 'dead'",
        )
        .bind(token)
        .bind(attempts)
        .bind(at)
        .bind(delay_us)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if applied {
            events_record(&mut tx, &self.actor, &[id], token).await?;
        }
        let (job, now) = job_read_back(&mut tx, self, id).await?;
        tx.commit().await?;
        if applied {
            Ok(Redriven::Applied(job, now))
        } else {
            Ok(Redriven::NotDead(job))
        }
    }

    /// Deletes finished jobs — `succeeded`, `dead`, `cancelled`, and
    /// `dispatched` ones not waiting for a result — unchanged for longer than
    /// `retention`, at most `limit`, with their history, in one transaction.
    /// Returns how many. A row changed meanwhile (say, redriven) is kept.
    pub async fn job_purge_finished(
        &self,
        retention: Duration,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let retention_us = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
        let cutoff: NaiveDateTime =
            sqlx::query_scalar("SELECT TIMESTAMPADD(MICROSECOND, -?, UTC_TIMESTAMP(3))")
                .bind(retention_us)
                .fetch_one(&self.pool)
                .await?;
        // One range scan of `ix_jobs_status_at` for each status a job is
        // done with in (`status_at` is then `updated_at`, and NULL for a
        // dispatched job still awaiting its result): the cost follows the
        // rows to purge, not the table. The oldest `limit` of the five,
        // so that no status waits behind another's backlog.
        let mut found: Vec<(NaiveDateTime, JobId)> = Vec::new();
        for status in ["succeeded", "dead", "cancelled", "expired", "dispatched"] {
            let rows: Vec<(NaiveDateTime, JobId)> = sqlx::query_as(
                "SELECT status_at, id FROM jobs WHERE status = ? AND status_at < ? \
                 ORDER BY status_at LIMIT ?",
            )
            .bind(status)
            .bind(cutoff)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
            found.extend(rows);
        }
        found.sort_unstable();
        let ids: Vec<JobId> = found
            .into_iter()
            .take(limit as usize)
            .map(|(_, id)| id)
            .collect();
        if ids.is_empty() {
            return Ok(0);
        }
        let mut tx = self.begin().await?;
        let mut delete = QueryBuilder::<MySql>::new("DELETE FROM jobs WHERE id IN ");
        push_id_list(&mut delete, &ids);
        delete
            .push(
                " AND status IN ('succeeded', 'dead', 'cancelled', 'expired', 'dispatched') \
                 AND (status <> 'dispatched' OR ack_deadline IS NULL) AND updated_at < ",
            )
            .push_bind(cutoff);
        let purged = delete.build().execute(&mut *tx).await?.rows_affected();
        // The history of the jobs now gone (this transaction's deletes, and
        // any another purger made): one table at a time.
        let mut present = QueryBuilder::<MySql>::new("SELECT id FROM jobs WHERE id IN ");
        push_id_list(&mut present, &ids);
        let present: HashSet<JobId> = present
            .build_query_scalar()
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
        let gone: Vec<JobId> = ids.into_iter().filter(|id| !present.contains(id)).collect();
        if !gone.is_empty() {
            let mut events = QueryBuilder::<MySql>::new("DELETE FROM job_events WHERE job_id IN ");
            push_id_list(&mut events, &gone);
            events.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(purged)
    }

    /// Claims up to `limit` dead-letter records owed (oldest first) for
    /// `claim` (the caller's token) and `lease`: no other instance takes them
    /// until the lease expires, and a record that failed is tried again when
    /// it does. Entries whose job is gone are dropped. An entry whose job's
    /// payload or headers do not decode (a hand edit the column accepts) goes
    /// without them; one whose other columns do not decode is left out and
    /// logged: it is claimed again after its lease, until the row is
    /// repaired, and the letters claimed beside it go on.
    ///
    /// Long because the claim is read in order: the lease taken in one
    /// UPDATE, what it took read, their jobs read and decoded, the gone ones
    /// dropped.
    pub async fn dead_letter_claim(
        &self,
        claim: u64,
        lease: Duration,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let lease_us = u64::try_from(lease.as_micros()).unwrap_or(u64::MAX);
        let claimed = sqlx::query(
            "UPDATE dead_letters SET claim_token = ?, tries = tries + 1, \
             claimed_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)) \
             WHERE claimed_until IS NULL OR claimed_until < UTC_TIMESTAMP(3) \
             ORDER BY created_at LIMIT ?",
        )
        .bind(claim)
        .bind(lease_us)
        .bind(limit)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if claimed == 0 {
            return Ok(Vec::new());
        }
        let owed: Vec<(JobId, u32, Option<Vec<u8>>, u32)> = sqlx::query_as(
            "SELECT job_id, attempt, error, tries FROM dead_letters WHERE claim_token = ? \
             ORDER BY created_at",
        )
        .bind(claim)
        .fetch_all(&self.pool)
        .await?;
        let ids: Vec<JobId> = owed.iter().map(|(id, ..)| *id).collect();
        let mut jobs: HashMap<JobId, Job> = HashMap::new();
        let mut unreadable: HashSet<JobId> = HashSet::new();
        if !ids.is_empty() {
            let mut query =
                QueryBuilder::<MySql>::new(format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id IN "));
            push_id_list(&mut query, &ids);
            for row in query.build().fetch_all(&self.pool).await? {
                match job_from_row(&row, &self.keys, &self.codec) {
                    Ok(job) => {
                        jobs.insert(job.id, job);
                    }
                    // Its payload or headers do not decode: the letter
                    // goes without them (the job, its attempt and error
                    // say what died), rather than wait without end for
                    // a repair.
                    Err(err) => {
                        let id: JobId = row.try_get("id")?;
                        match job_from_row_without_body(&row) {
                            Ok(job) => {
                                tracing::warn!(
                                    job = id,
                                    error = %err,
                                    "a dead job's payload or headers do not decode: its dead letter goes without them"
                                );
                                jobs.insert(job.id, job);
                            }
                            Err(_) => {
                                tracing::warn!(
                                    job = id,
                                    error = %err,
                                    "a dead job's row does not decode: its dead letter waits until the row is repaired"
                                );
                                unreadable.insert(id);
                            }
                        }
                    }
                }
            }
        }
        let mut letters = Vec::with_capacity(owed.len());
        let mut orphans = Vec::new();
        for (id, attempt, error, tries) in owed {
            if unreadable.contains(&id) {
                continue;
            }
            match jobs.get(&id) {
                Some(job) => letters.push(DeadLetter {
                    job: job.clone(),
                    attempt,
                    error: error.map(|e| String::from_utf8_lossy(&e).into_owned()),
                    tries,
                }),
                None => orphans.push((id, attempt)),
            }
        }
        self.dead_letter_delete(&orphans).await?;
        Ok(letters)
    }

    /// Forgets dead-letter records once produced.
    pub async fn dead_letter_delete(&self, done: &[(JobId, u32)]) -> Result<(), StoreError> {
        if done.is_empty() {
            return Ok(());
        }
        let mut query =
            QueryBuilder::<MySql>::new("DELETE FROM dead_letters WHERE (job_id, attempt) IN (");
        let mut list = query.separated(", ");
        for (id, attempt) in done {
            list.push("(")
                .push_bind_unseparated(*id)
                .push_unseparated(", ")
                .push_bind_unseparated(*attempt)
                .push_unseparated(")");
        }
        query.push(")");
        query.build().execute(&self.pool).await?;
        Ok(())
    }
}

/// Reads what decisions need of the rows of `ids` that exist, plainly:
/// the write repeats what a decision was taken on ([`finish`]). Only the
/// columns a decision needs are read, so a row a person garbled elsewhere
/// (say, its headers) does not hold up the reports of a batch.
async fn read(
    conn: &mut sqlx::MySqlConnection,
    ids: &[JobId],
) -> Result<HashMap<JobId, Seen>, StoreError> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let mut query = QueryBuilder::<MySql>::new(
        "SELECT id, topic, CAST(status AS CHAR) AS status, attempt, version, claim_token, \
         expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms, \
         (ack_deadline IS NOT NULL AND ack_deadline < UTC_TIMESTAMP(3)) AS ack_expired \
         FROM jobs WHERE id IN ",
    );
    push_id_list(&mut query, &ids);
    let rows = query.build().fetch_all(conn).await?;
    let mut seen = HashMap::with_capacity(rows.len());
    for row in &rows {
        let id: JobId = row.try_get("id")?;
        let status: Vec<u8> = row.try_get("status")?;
        let status = std::str::from_utf8(&status)
            .ok()
            .and_then(|s| s.parse::<Status>().ok())
            .ok_or_else(|| StoreError::Corrupt(format!("job {id}: unknown status")))?;
        let topic: Vec<u8> = row.try_get("topic")?;
        let ack_expired: i64 = row.try_get("ack_expired")?;
        seen.insert(
            id,
            Seen {
                state: JobState {
                    status,
                    attempt: row.try_get("attempt")?,
                    policy: policy_from_row(row)?,
                },
                version: row.try_get("version")?,
                topic: String::from_utf8_lossy(&topic).into_owned(),
                ack_expired: ack_expired != 0,
                claim_token: row.try_get("claim_token")?,
            },
        );
    }
    Ok(seen)
}

/// Records `decision` for a job as read, and moves its in-memory state so
/// a later report of the same batch is judged against the new state.
/// `deadline_past`: the decision is a missed ack deadline's.
fn change_push(
    changes: &mut Vec<Change>,
    id: JobId,
    job: &mut Seen,
    decision: Decision,
    dead_letter: &(dyn Fn(&str) -> bool + Sync),
    deadline_past: bool,
) -> Disposition {
    let attempt = job.state.attempt;
    let (status, delay_ms, error) = match decision {
        Decision::Ignore(why) => return Disposition::Ignored(why),
        Decision::Succeed => (Status::Succeeded, None, None),
        Decision::Retry { delay_ms, error } => (Status::Pending, Some(delay_ms), Some(error)),
        Decision::Dead { error } => (Status::Dead, None, Some(error)),
    };
    // At most one change per row: after one, the state is finished or a new
    // attempt that no report of this batch can have seen dispatched.
    changes.push(Change {
        id,
        version: job.version,
        was: job.state.status,
        deadline_past,
        status,
        delay_ms,
        error,
        attempt,
        dead_letter: status == Status::Dead && dead_letter(&job.topic),
    });
    job.state.status = status;
    if status == Status::Pending {
        job.state.attempt += 1;
    }
    Disposition::Applied(status)
}

/// Changes written by one statement when they carry only a status.
const CHANGES_PLAIN_MAX: usize = 1_000;

/// Changes written by one statement when each has its own time or error:
/// a `CASE id WHEN` costs each row a walk of its arms, so they stay few.
const CHANGES_OWN_MAX: usize = 64;

/// One single-table UPDATE of `changes`: by id, each row still as its
/// decision read it (a row constructor per row: version, status,
/// attempt; a missed deadline's still past), to its new status, and for
/// those that have one their new time (a retry, with the next attempt)
/// and error. Returns how many rows it changed.
async fn changes_write(
    tx: &mut sqlx::MySqlConnection,
    token: u64,
    changes: &[&Change],
) -> Result<u64, StoreError> {
    let ids: Vec<JobId> = changes.iter().map(|change| change.id).collect();
    let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
    update.push_bind(token);
    let retried: Vec<(JobId, i64)> = changes
        .iter()
        .filter_map(|change| {
            change.delay_ms.map(|ms| {
                let us = i64::try_from(ms.saturating_mul(1000)).unwrap_or(i64::MAX);
                (change.id, us)
            })
        })
        .collect();
    if !retried.is_empty() {
        update.push(", schedule_time = CASE id");
        for (id, us) in &retried {
            update
                .push(" WHEN ")
                .push_bind(*id)
                .push(" THEN TIMESTAMPADD(MICROSECOND, ")
                .push_bind(*us)
                .push(", UTC_TIMESTAMP(3))");
        }
        update.push(" ELSE schedule_time END, attempt = IF(id IN ");
        let retried_ids: Vec<JobId> = retried.iter().map(|(id, _)| *id).collect();
        push_id_list(&mut update, &retried_ids);
        update.push(", LEAST(attempt, 4294967294) + 1, attempt)");
    }
    let errors: Vec<(JobId, &str)> = changes
        .iter()
        .filter_map(|change| change.error.as_deref().map(|error| (change.id, error)))
        .collect();
    if !errors.is_empty() {
        update.push(", last_error = CASE id");
        for (id, error) in &errors {
            update
                .push(" WHEN ")
                .push_bind(*id)
                .push(" THEN ")
                .push_bind(*error);
        }
        update.push(" ELSE last_error END");
    }
    // The claim token is kept: a dispatcher still marking this attempt
    // records its position by it.
    update.push(", ack_deadline = NULL, version = version % 4294967295 + 1, status = ");
    let mut statuses: Vec<Status> = changes.iter().map(|change| change.status).collect();
    statuses.sort_unstable_by_key(|status| status.as_str());
    statuses.dedup();
    if let [status] = statuses[..] {
        update.push_bind(status.as_str());
    } else {
        update.push("CASE");
        for status in statuses {
            let of_status: Vec<JobId> = changes
                .iter()
                .filter(|change| change.status == status)
                .map(|change| change.id)
                .collect();
            update.push(" WHEN id IN ");
            push_id_list(&mut update, &of_status);
            update.push(" THEN ").push_bind(status.as_str());
        }
        update.push(" ELSE status END");
    }
    update.push(" WHERE id IN ");
    push_id_list(&mut update, &ids);
    update.push(" AND (id, version, status, attempt) IN (");
    let mut rows = update.separated(", ");
    for change in changes {
        rows.push("(")
            .push_bind_unseparated(change.id)
            .push_unseparated(", ")
            .push_bind_unseparated(change.version)
            .push_unseparated(", ")
            .push_bind_unseparated(change.was.as_str())
            .push_unseparated(", ")
            .push_bind_unseparated(change.attempt)
            .push_unseparated(")");
    }
    update.push(")");
    let deadlines: Vec<JobId> = changes
        .iter()
        .filter(|change| change.deadline_past)
        .map(|change| change.id)
        .collect();
    if !deadlines.is_empty() {
        update.push(" AND (id NOT IN ");
        push_id_list(&mut update, &deadlines);
        update.push(" OR ack_deadline < UTC_TIMESTAMP(3))");
    }
    Ok(update.build().execute(&mut *tx).await?.rows_affected())
}

/// Writes the changes (single-table UPDATEs: [`changes_write`]), the
/// dead-letter outbox rows, and commits.
///
/// Long because it is the one write of a settlement: the UPDATEs, the
/// history, the dead-letter rows, the retries read back for Redis, the
/// counts, then the commit.
async fn finish(
    mut tx: Transaction<'_, MySql>,
    actor: &str,
    changes: &[Change],
) -> Result<Decided, StoreError> {
    let mut settled = Decided::default();
    if !changes.is_empty() {
        // Every change moves the status or the attempt: each is recorded.
        let token = event_token();
        // Changes with nothing of their own but a status (a success, a
        // death without a message) go many to a statement; those with a
        // time or an error of their own, a few, each named in a CASE.
        let (plain, own): (Vec<&Change>, Vec<&Change>) = changes
            .iter()
            .partition(|change| change.delay_ms.is_none() && change.error.is_none());
        let mut written = 0;
        for chunk in plain.chunks(CHANGES_PLAIN_MAX) {
            written += changes_write(&mut tx, token, chunk).await?;
        }
        for chunk in own.chunks(CHANGES_OWN_MAX) {
            written += changes_write(&mut tx, token, chunk).await?;
        }
        if written != changes.len() as u64 {
            // A row moved since it was read (a report, a deadline, another
            // instance, a person): nothing of this batch is kept, and it
            // is decided again on the rows as they are now.
            return Err(StoreError::lost_race(format!(
                "{} of {} results' rows changed since they were read",
                changes.len() as u64 - written.min(changes.len() as u64),
                changes.len()
            )));
        }
        let ids: Vec<JobId> = changes.iter().map(|c| c.id).collect();
        events_record(&mut tx, actor, &ids, token).await?;

        let letters: Vec<&Change> = changes.iter().filter(|c| c.dead_letter).collect();
        if !letters.is_empty() {
            let mut insert = QueryBuilder::<MySql>::new(
                "INSERT IGNORE INTO dead_letters (job_id, attempt, error, created_at) ",
            );
            insert.push_values(&letters, |mut row, change| {
                row.push_bind(change.id)
                    .push_bind(change.attempt)
                    .push_bind(change.error.clone())
                    .push("UTC_TIMESTAMP(3)");
            });
            insert.build().execute(&mut *tx).await?;
        }

        let retried: Vec<JobId> = changes
            .iter()
            .filter(|c| c.status == Status::Pending)
            .map(|c| c.id)
            .collect();
        if !retried.is_empty() {
            let mut select = QueryBuilder::<MySql>::new(
                "SELECT id, schedule_time, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id IN ",
            );
            push_id_list(&mut select, &retried);
            for row in select.build().fetch_all(&mut *tx).await? {
                let now: NaiveDateTime = row.try_get("db_now")?;
                settled.db_now = Some(now.and_utc());
                settled.retried.push(WindowEntry::from_row(&row)?);
            }
        }
        settled.succeeded = changes
            .iter()
            .filter(|c| c.status == Status::Succeeded)
            .count();
        settled.dead_ids = changes
            .iter()
            .filter(|c| c.status == Status::Dead)
            .map(|c| c.id)
            .collect();
        settled.dead = settled.dead_ids.len();
        settled.dead_lettered = letters.len();
    }
    tx.commit().await?;
    Ok(settled)
}
