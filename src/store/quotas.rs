//! Quotas per API token: `api_tokens.max_pending_jobs` and
//! `max_payload_bytes`, the usage in `token_usage`, the jobs counted in
//! `token_jobs` (V48).
//!
//! A create through a token with a quota charges its jobs in its own
//! transaction, after its INSERT and before its commit: one conditional
//! UPDATE of the token's usage row, which matches nothing when the charge
//! would pass a quota, and the whole create is then rolled back. Jobs
//! leave the usage at the next recount, which counts the token's pending
//! jobs exactly under the usage row's lock.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::{Store, StoreError};
use crate::job::JobId;

/// A token's quotas and what it uses of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaUsage {
    pub token_id: u64,
    pub token: String,
    pub pending_jobs: u64,
    pub max_pending_jobs: Option<u64>,
    pub payload_bytes: u64,
    pub max_payload_bytes: Option<u64>,
    /// When the usage was last counted exactly (None: never yet; the
    /// figures are then the creates' charges alone).
    pub counted_at: Option<DateTime<Utc>>,
}

/// Charges `jobs` created jobs of `bytes` payload bytes to `token`'s usage
/// on `conn` (inside the create's transaction), and notes the jobs in
/// `token_jobs`. `Err(QuotaExceeded)` when a quota would be passed: the
/// caller's transaction must then be rolled back.
pub(super) async fn charge_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
    ids: &[JobId],
    bytes: u64,
) -> Result<(), StoreError> {
    if ids.is_empty() {
        return Ok(());
    }
    let jobs = ids.len() as u64;
    for first in [true, false] {
        let charged = sqlx::query(
            "UPDATE token_usage u JOIN api_tokens t ON t.id = u.token_id \
             SET u.pending_jobs = u.pending_jobs + ?, u.payload_bytes = u.payload_bytes + ? \
             WHERE u.token_id = ? \
             AND (t.max_pending_jobs IS NULL OR u.pending_jobs + ? <= t.max_pending_jobs) \
             AND (t.max_payload_bytes IS NULL OR u.payload_bytes + ? <= t.max_payload_bytes)",
        )
        .bind(jobs)
        .bind(bytes)
        .bind(token)
        .bind(jobs)
        .bind(bytes)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if charged > 0 {
            break;
        }
        // No usage row yet (a quota set in SQL), or over a quota.
        let inserted = sqlx::query("INSERT IGNORE INTO token_usage (token_id) VALUES (?)")
            .bind(token)
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if !first || inserted == 0 {
            let usage = usage_on(conn, token).await?;
            return Err(StoreError::QuotaExceeded(exceeded_message(
                usage.as_ref(),
                jobs,
                bytes,
            )));
        }
    }
    let mut note = QueryBuilder::<MySql>::new("INSERT INTO token_jobs (token_id, job_id) ");
    note.push_values(ids, |mut row, id| {
        row.push_bind(token).push_bind(*id);
    });
    note.build().execute(&mut *conn).await?;
    Ok(())
}

/// What a refused create is told: the quota it would pass, and the usage.
fn exceeded_message(usage: Option<&QuotaUsage>, jobs: u64, bytes: u64) -> String {
    let Some(usage) = usage else {
        return "the token's quota cannot be read".to_owned();
    };
    match (usage.max_pending_jobs, usage.max_payload_bytes) {
        (Some(max), _) if usage.pending_jobs + jobs > max => format!(
            "token {} holds {} pending jobs of its quota of {max}; {jobs} more would pass it",
            usage.token, usage.pending_jobs
        ),
        (_, Some(max)) => format!(
            "token {} holds {} payload bytes of its quota of {max}; {bytes} more would pass it",
            usage.token, usage.payload_bytes
        ),
        _ => format!("token {} is over its quota", usage.token),
    }
}

const USAGE_SELECT: &str = "SELECT t.id, t.name, t.max_pending_jobs, t.max_payload_bytes, \
     CAST(COALESCE(u.pending_jobs, 0) AS UNSIGNED) AS pending_jobs, \
     CAST(COALESCE(u.payload_bytes, 0) AS UNSIGNED) AS payload_bytes, \
     u.counted_at FROM api_tokens t LEFT JOIN token_usage u ON u.token_id = t.id";

fn usage_of(row: &sqlx::mysql::MySqlRow) -> Result<QuotaUsage, StoreError> {
    Ok(QuotaUsage {
        token_id: row.try_get("id")?,
        token: row.try_get("name")?,
        pending_jobs: row.try_get("pending_jobs")?,
        max_pending_jobs: row.try_get("max_pending_jobs")?,
        payload_bytes: row.try_get("payload_bytes")?,
        max_payload_bytes: row.try_get("max_payload_bytes")?,
        counted_at: row
            .try_get::<Option<NaiveDateTime>, _>("counted_at")?
            .map(|at| at.and_utc()),
    })
}

async fn usage_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
) -> Result<Option<QuotaUsage>, StoreError> {
    let row = sqlx::query(&format!("{USAGE_SELECT} WHERE t.id = ?"))
        .bind(token)
        .fetch_optional(&mut *conn)
        .await?;
    row.as_ref().map(usage_of).transpose()
}

impl Store {
    /// The token `id`'s quotas and usage (None: no such token).
    pub async fn quota_usage(&self, token: u64) -> Result<Option<QuotaUsage>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        usage_on(&mut conn, token).await
    }

    /// The quotas and usage of every token that is not revoked and has a
    /// quota.
    pub async fn quota_usages(&self) -> Result<Vec<QuotaUsage>, StoreError> {
        let rows = sqlx::query(&format!(
            "{USAGE_SELECT} WHERE t.revoked_at IS NULL \
             AND (t.max_pending_jobs IS NOT NULL OR t.max_payload_bytes IS NOT NULL) ORDER BY t.name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(usage_of).collect()
    }

    /// Sets the token `name`'s quotas (None: no limit); `Ok(false)` when
    /// there is no such token.
    pub async fn quota_set(
        &self,
        name: &str,
        max_pending_jobs: Option<u64>,
        max_payload_bytes: Option<u64>,
    ) -> Result<bool, StoreError> {
        let found = sqlx::query(
            "UPDATE api_tokens SET max_pending_jobs = ?, max_payload_bytes = ? WHERE name = ?",
        )
        .bind(max_pending_jobs)
        .bind(max_payload_bytes)
        .bind(name)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(found > 0)
    }

    /// Counts the token's pending jobs and their payload bytes exactly and
    /// makes them its usage, under the usage row's lock (a create of the
    /// token waits meanwhile, so none is counted twice or missed); then
    /// forgets the jobs finished for good. Returns the usage.
    pub async fn quota_recount(&self, token: u64) -> Result<QuotaUsage, StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query("INSERT IGNORE INTO token_usage (token_id) VALUES (?)")
            .bind(token)
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT pending_jobs FROM token_usage WHERE token_id = ? FOR UPDATE")
            .bind(token)
            .fetch_one(&mut *tx)
            .await?;
        let row = sqlx::query(
            "SELECT COUNT(*) AS jobs, CAST(COALESCE(SUM(LENGTH(j.payload) - IF(j.enc_key IS NULL, 0, ?)), 0) AS UNSIGNED) AS bytes \
             FROM token_jobs t JOIN jobs j ON j.id = t.job_id \
             WHERE t.token_id = ? AND j.status = 'pending'",
        )
        .bind(crate::keys::OVERHEAD as u64)
        .bind(token)
        .fetch_one(&mut *tx)
        .await?;
        let jobs: i64 = row.try_get("jobs")?;
        let bytes: u64 = row.try_get("bytes")?;
        sqlx::query(
            "UPDATE token_usage SET pending_jobs = ?, payload_bytes = ?, \
             counted_at = UTC_TIMESTAMP(3) WHERE token_id = ?",
        )
        .bind(jobs)
        .bind(bytes)
        .bind(token)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        sqlx::query(
            "DELETE t FROM token_jobs t LEFT JOIN jobs j ON j.id = t.job_id \
             WHERE t.token_id = ? AND (j.id IS NULL \
             OR j.status IN ('succeeded', 'cancelled', 'expired') \
             OR (j.status = 'dispatched' AND j.ack_deadline IS NULL))",
        )
        .bind(token)
        .execute(&self.pool)
        .await?;
        self.quota_usage(token)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("token {token} vanished while counted")))
    }
}
