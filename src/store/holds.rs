//! Jobs held back by their topic's payload schema (`held_at`,
//! `held_reason`, V66): the dispatcher's hold of a claimed job whose payload
//! no longer matches, a release, and the count the doctor reports. A held
//! job is `pending` and never claimed (the claim's compare-and-set asks
//! `held_at IS NULL`), so it is neither sent broken nor lost.

use chrono::{DateTime, Utc};
use sqlx::{MySql, QueryBuilder};

/// The schema of the first build that checks payload schemas at send and
/// honours holds (V66, `jobs.held_at`): an older instance would send a
/// held job, or one no longer matching, as it is.
pub const SCHEMA: i32 = 66;

use super::error::StoreError;
use super::handle::Store;
use super::history::{event_token, events_record};
use super::job_row::job_read_back;
use super::sql::push_id_list;
use crate::domain::job::{Job, JobId};

/// What a release made of a held job.
#[derive(Debug)]
pub enum HoldReleased {
    /// Released: due again at its time (at once when that has passed).
    Applied(Job, DateTime<Utc>),
    /// Not held (never, or released since), or no longer pending.
    NotHeld(Job),
    /// Changed since the caller read it (a new payload): read it again.
    VersionMismatch(Job),
}

impl Store {
    /// `dispatching → pending`, held, for jobs claim `token` won whose
    /// payload did not match their topic's schema right before their send:
    /// `(id, why)`. The attempt is not counted: nothing was sent. Returns
    /// how many rows were held.
    ///
    /// `updated_at` is kept (`held_at` says when), so the loader's scan of
    /// edited rows does not bring the held job back into the index.
    ///
    /// Crash before this commits: the rows stay `dispatching` under the
    /// claim, unsent; after the lease they are read back, found absent,
    /// claimed again and held then. After: they are pending and held, and
    /// whatever Redis still has of them is dropped by the next claim.
    pub async fn job_hold_many(
        &self,
        token: u64,
        held: &[(JobId, String)],
    ) -> Result<u64, StoreError> {
        if held.is_empty() {
            return Ok(0);
        }
        // One single-table UPDATE per reason (a batch's reasons are few:
        // one schema's failures), in one transaction.
        let mut reasons: Vec<&str> = held.iter().map(|(_, why)| why.as_str()).collect();
        reasons.sort_unstable();
        reasons.dedup();
        let event = event_token();
        let mut tx = self.begin().await?;
        let mut n = 0;
        for why in reasons {
            let ids: Vec<JobId> = held
                .iter()
                .filter(|(_, r)| r == why)
                .map(|(id, _)| *id)
                .collect();
            let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET event_token = ");
            update
                .push_bind(event)
                .push(
                    ", status = 'pending', version = version % 4294967295 + 1, \
                     updated_at = updated_at, held_at = UTC_TIMESTAMP(3), held_reason = ",
                )
                .push_bind(why)
                .push(", last_error = ")
                .push_bind(why)
                .push(", ")
                .push(super::dispatch::CLAIM_NONE)
                .push(" WHERE id IN ");
            push_id_list(&mut update, &ids);
            update
                .push(" AND status = 'dispatching' AND claim_token = ")
                .push_bind(token);
            n += update.build().execute(&mut *tx).await?.rows_affected();
        }
        let ids: Vec<JobId> = held.iter().map(|(id, _)| *id).collect();
        events_record(&mut tx, &self.actor, &ids, event).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// Releases held job `id`, still at `version`: it is due again at its
    /// time (at once when that has passed). With `waive`, its current
    /// attempt is sent without the schema check (a forced release).
    ///
    /// Crash after this commits: the job is pending and not held; the
    /// loader's scan of edited rows (or the overdue probe) indexes it.
    pub async fn job_hold_release(
        &self,
        id: JobId,
        version: u32,
        waive: bool,
    ) -> Result<HoldReleased, StoreError> {
        let event = event_token();
        let mut tx = self.begin().await?;
        let released = sqlx::query(
            "UPDATE jobs SET event_token = ?, held_at = NULL, held_reason = NULL, \
             schema_waived_attempt = IF(?, attempt, NULL), version = version % 4294967295 + 1 \
             WHERE id = ? AND version = ? AND status = 'pending' AND held_at IS NOT NULL",
        )
        .bind(event)
        .bind(waive)
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if released > 0 {
            events_record(&mut tx, &self.actor, &[id], event).await?;
        }
        let (job, db_now) = job_read_back(&mut tx, self, id).await?;
        tx.commit().await?;
        Ok(if released > 0 {
            HoldReleased::Applied(job, db_now)
        } else if job.version != version {
            HoldReleased::VersionMismatch(job)
        } else {
            HoldReleased::NotHeld(job)
        })
    }

    /// How many jobs are held, and the ids of the latest `limit` held.
    pub async fn jobs_held(&self, limit: u32) -> Result<(u64, Vec<JobId>), StoreError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM jobs WHERE status = 'pending' AND held_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        let ids: Vec<JobId> = sqlx::query_scalar(
            "SELECT id FROM jobs WHERE status = 'pending' AND held_at IS NOT NULL \
             ORDER BY held_at DESC LIMIT ?",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok((count.max(0) as u64, ids))
    }
}

/// ` AND` held or not, for a listing's filter.
pub(super) fn held_push(query: &mut QueryBuilder<'_, MySql>, held: Option<bool>) {
    match held {
        Some(true) => {
            query.push(" AND held_at IS NOT NULL");
        }
        Some(false) => {
            query.push(" AND held_at IS NULL");
        }
        None => {}
    }
}
