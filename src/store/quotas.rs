//! Quotas per API token: `api_tokens.max_pending_jobs` and
//! `max_payload_bytes`, the usage in `token_usage`, the jobs counted in
//! `token_jobs` (V48) with the payload bytes each counts for (V56).
//!
//! A create through a token with a quota charges its jobs in its own
//! transaction, after its INSERT and before its commit: one conditional
//! UPDATE of the token's usage row, which matches nothing when the charge
//! would pass a quota, and the whole create is then rolled back. A change
//! of a counted job's payload charges (or gives back) the difference to
//! the token the job counts for, the same way. Jobs leave the usage at the
//! next recount, which counts the token's pending jobs exactly under the
//! usage row's lock.
//!
//! A payload's bytes are its length as the client gave it, before
//! compression and sealing: what the create charges, kept in
//! `token_jobs.payload_bytes`, is what the recount adds up. (Rows written
//! before V56 have none there, and count their stored length.)

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::{contention_retry, StoreError};
use super::handle::Store;
use super::sql::push_id_list;
use crate::domain::job::JobId;

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

/// Charges created `jobs`, each (id, payload bytes), to `token`'s usage
/// on `conn` (inside the create's transaction), and notes the jobs in
/// `token_jobs` with their bytes. `Err(QuotaExceeded)` when a quota would
/// be passed: the caller's transaction must then be rolled back.
pub(super) async fn charge_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
    jobs: &[(JobId, u64)],
) -> Result<(), StoreError> {
    if jobs.is_empty() {
        return Ok(());
    }
    let bytes = jobs.iter().map(|(_, bytes)| bytes).sum();
    usage_charge_on(conn, token, jobs.len() as u64, bytes).await?;
    let mut note =
        QueryBuilder::<MySql>::new("INSERT INTO token_jobs (token_id, job_id, payload_bytes) ");
    note.push_values(jobs, |mut row, (id, bytes)| {
        row.push_bind(token).push_bind(*id).push_bind(*bytes);
    });
    note.build().execute(&mut *conn).await?;
    Ok(())
}

/// Adds `jobs` pending jobs (0 for a payload change) and `bytes` payload
/// bytes to `token`'s usage on `conn`, unless that passes one of its
/// quotas: then `Err(QuotaExceeded)`, and the caller's transaction must be
/// rolled back.
///
/// A token's first charge finds no usage row (a quota set in SQL): the row
/// is made, then charged. Two first charges racing both find none; the
/// second's INSERT then waits for the first's commit and finds its row, so
/// whether this INSERT made the row or found it never decides: the second
/// UPDATE, reading the row as committed, does (an `INSERT IGNORE` would
/// take a shared lock there, and two of them a deadlock on the UPDATE).
async fn usage_charge_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
    jobs: u64,
    bytes: u64,
) -> Result<(), StoreError> {
    // The token's quotas, read plainly and bound into the charge (one
    // table written): a quota changed meanwhile counts from the next charge,
    // as if it had been changed a moment later.
    let limits: Option<(Option<u64>, Option<u64>)> =
        sqlx::query_as("SELECT max_pending_jobs, max_payload_bytes FROM api_tokens WHERE id = ?")
            .bind(token)
            .fetch_optional(&mut *conn)
            .await?;
    let (max_jobs, max_bytes) = limits.unwrap_or((None, None));
    for row_made in [false, true] {
        let charged = sqlx::query(
            "UPDATE token_usage \
             SET pending_jobs = pending_jobs + ?, payload_bytes = payload_bytes + ? \
             WHERE token_id = ? \
             AND (? = 0 OR ? IS NULL OR pending_jobs + ? <= ?) \
             AND (? IS NULL OR payload_bytes + ? <= ?)",
        )
        .bind(jobs)
        .bind(bytes)
        .bind(token)
        .bind(jobs)
        .bind(max_jobs)
        .bind(jobs)
        .bind(max_jobs)
        .bind(max_bytes)
        .bind(bytes)
        .bind(max_bytes)
        .execute(&mut *conn)
        .await?
        .rows_affected();
        if charged > 0 {
            return Ok(());
        }
        if !row_made {
            // No usage row yet, or over a quota: which, the UPDATE above
            // tells once the row surely exists.
            usage_missing_pause().await;
            usage_row_ensure_on(conn, token).await?;
        }
    }
    let usage = usage_on(conn, token).await?;
    Err(StoreError::QuotaExceeded(exceeded_message(
        usage.as_ref(),
        jobs,
        bytes,
    )))
}

/// With the `failpoints` feature, the fail point `quota-usage-missing` set
/// to `return(<ms>)` pauses a charge that found no usage row that long
/// before it makes the row: the tests make every first create of a token
/// find none. Without it, nothing at all.
async fn usage_missing_pause() {
    #[cfg(feature = "failpoints")]
    if let Some(Some(ms)) = fail::eval("quota-usage-missing", |ms| {
        ms.and_then(|ms| ms.parse::<u64>().ok())
    }) {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// Makes `token`'s usage row if it has none, and locks it either way (an
/// exclusive lock, which the UPDATE that follows keeps: no lock upgrade for
/// two transactions to deadlock on).
async fn usage_row_ensure_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO token_usage (token_id) VALUES (?) \
         ON DUPLICATE KEY UPDATE token_id = token_id",
    )
    .bind(token)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// What a job counts for in `token_jobs`: the payload bytes of a row, as
/// charged, or its stored length less the sealing's overhead for a row
/// noted before V56 (`t` the `token_jobs` row, `j` the job). One bind: the
/// overhead.
const COUNTED_BYTES: &str = "COALESCE(t.payload_bytes, \
     GREATEST(CAST(LENGTH(j.payload) AS SIGNED) - IF(j.enc_key IS NULL, 0, ?), 0))";

/// The token job `id` counts for, and the payload bytes it counts for
/// now; None when it counts for none (created through a token without a
/// quota, by a schedule, by the ingress). Read on `conn` before a change
/// of its payload, in the change's transaction: a change that commits
/// meanwhile moves the job's version, and the caller's then applies
/// nothing.
pub(super) async fn job_counted_on(
    conn: &mut sqlx::MySqlConnection,
    id: JobId,
) -> Result<Option<(u64, u64)>, StoreError> {
    let row = sqlx::query(&format!(
        "SELECT t.token_id, CAST({COUNTED_BYTES} AS UNSIGNED) AS bytes \
         FROM token_jobs t JOIN jobs j ON j.id = t.job_id WHERE t.job_id = ? LIMIT 1"
    ))
    .bind(crate::domain::keys::OVERHEAD as i64)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    row.map(|row| Ok((row.try_get("token_id")?, row.try_get("bytes")?)))
        .transpose()
}

/// Charges a change of job `id`'s payload from `counted` bytes (as
/// [`job_counted_on`] read them) to `bytes` to `token`, on `conn` inside
/// the change's transaction, after its compare-and-set applied and before
/// its commit. `enforce` (an API change): a payload grown past the token's
/// `max_payload_bytes` is `Err(QuotaExceeded)`, and the change must be
/// rolled back. Otherwise (the Kafka ingress, which no quota refuses) the
/// growth is only counted. One shrunk gives its room back at once.
pub(super) async fn payload_recharge_on(
    conn: &mut sqlx::MySqlConnection,
    token: u64,
    id: JobId,
    (counted, bytes): (u64, u64),
    enforce: bool,
) -> Result<(), StoreError> {
    if bytes > counted && enforce {
        usage_charge_on(conn, token, 0, bytes - counted).await?;
    } else if bytes > counted {
        usage_row_ensure_on(conn, token).await?;
        sqlx::query("UPDATE token_usage SET payload_bytes = payload_bytes + ? WHERE token_id = ?")
            .bind(bytes - counted)
            .bind(token)
            .execute(&mut *conn)
            .await?;
    } else if bytes < counted {
        sqlx::query(
            "UPDATE token_usage SET payload_bytes = payload_bytes - LEAST(payload_bytes, ?) \
             WHERE token_id = ?",
        )
        .bind(counted - bytes)
        .bind(token)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query("UPDATE token_jobs SET payload_bytes = ? WHERE token_id = ? AND job_id = ?")
        .bind(bytes)
        .bind(token)
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// What a refused create is told: the quota it would pass, and the usage.
fn exceeded_message(usage: Option<&QuotaUsage>, jobs: u64, bytes: u64) -> String {
    let Some(usage) = usage else {
        return "the token's quota cannot be read".to_owned();
    };
    match (usage.max_pending_jobs, usage.max_payload_bytes) {
        (Some(max), _) if jobs > 0 && usage.pending_jobs + jobs > max => format!(
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

    /// The tokens whose usage the quota counter counts again: those with a
    /// quota, and those whose jobs were noted without one (a topic grouped
    /// by token), so that their `token_jobs` rows are forgotten once the
    /// jobs are done.
    pub async fn quota_tokens_counted(&self) -> Result<Vec<u64>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT t.id FROM api_tokens t WHERE t.revoked_at IS NULL \
             AND (t.max_pending_jobs IS NOT NULL OR t.max_payload_bytes IS NOT NULL \
             OR EXISTS (SELECT 1 FROM token_usage u WHERE u.token_id = t.id))",
        )
        .fetch_all(&self.pool)
        .await?)
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
    /// makes them its usage; then forgets the jobs finished for good.
    /// Returns the usage.
    ///
    /// No lock (#62): the usage and the count are read by one statement,
    /// so from one read view — a charge committed before it is in both, one
    /// committed after in neither — and the difference is added to the
    /// usage, not the count written over it: charges made meanwhile are
    /// kept. The write is a compare-and-set on `counted_at` as read, so of
    /// two recounts at once the second reads again rather than adding the
    /// same difference twice.
    ///
    /// Crash after the UPDATE commits: the usage is right; the finished
    /// jobs are forgotten by the next recount.
    pub async fn quota_recount(&self, token: u64) -> Result<QuotaUsage, StoreError> {
        contention_retry(|| self.quota_recount_once(token)).await?;
        // Read, then deleted from the one table by id: a job that leaves
        // its end state between the two (a verification's new attempt) is
        // counted again by the next recount, as before.
        let done: Vec<JobId> = sqlx::query_scalar(
            "SELECT t.job_id FROM token_jobs t LEFT JOIN jobs j ON j.id = t.job_id \
             WHERE t.token_id = ? AND (j.id IS NULL \
             OR j.status IN ('succeeded', 'cancelled', 'expired') \
             OR (j.status = 'dispatched' AND j.ack_deadline IS NULL))",
        )
        .bind(token)
        .fetch_all(&self.pool)
        .await?;
        for chunk in done.chunks(1_000) {
            let mut delete = QueryBuilder::<MySql>::new("DELETE FROM token_jobs WHERE token_id = ");
            delete.push_bind(token).push(" AND job_id IN ");
            push_id_list(&mut delete, chunk);
            delete.build().execute(&self.pool).await?;
        }
        self.quota_usage(token)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("token {token} vanished while counted")))
    }
}

impl Store {
    /// One recount's read and compare-and-set (see [`Store::quota_recount`]).
    async fn quota_recount_once(&self, token: u64) -> Result<(), StoreError> {
        // Made if missing, committed at once: no lock is held past it.
        let mut conn = self.pool.acquire().await?;
        usage_row_ensure_on(&mut conn, token).await?;
        drop(conn);
        let counted = format!(
            "FROM token_jobs t JOIN jobs j ON j.id = t.job_id \
             WHERE t.token_id = u.token_id AND j.status = 'pending'"
        );
        let row = sqlx::query(&format!(
            "SELECT CAST(u.pending_jobs AS SIGNED) AS used_jobs, \
             CAST(u.payload_bytes AS SIGNED) AS used_bytes, u.counted_at, \
             (SELECT COUNT(*) {counted}) AS jobs, \
             (SELECT CAST(COALESCE(SUM({COUNTED_BYTES}), 0) AS SIGNED) {counted}) AS bytes \
             FROM token_usage u WHERE u.token_id = ?"
        ))
        .bind(crate::domain::keys::OVERHEAD as i64)
        .bind(token)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::lost_race(format!("token {token}'s usage row is gone")))?;
        let used_jobs: i64 = row.try_get("used_jobs")?;
        let used_bytes: i64 = row.try_get("used_bytes")?;
        let counted_at: Option<NaiveDateTime> = row.try_get("counted_at")?;
        let jobs: i64 = row.try_get("jobs")?;
        let bytes: i64 = row.try_get("bytes")?;
        fail_point_pause!("recount-read");
        let moved = sqlx::query(
            "UPDATE token_usage \
             SET pending_jobs = GREATEST(CAST(pending_jobs AS SIGNED) + ?, 0), \
             payload_bytes = GREATEST(CAST(payload_bytes AS SIGNED) + ?, 0), \
             counted_at = UTC_TIMESTAMP(3) \
             WHERE token_id = ? AND (counted_at = ? OR (counted_at IS NULL AND ? IS NULL))",
        )
        .bind(jobs.saturating_sub(used_jobs))
        .bind(bytes.saturating_sub(used_bytes))
        .bind(token)
        .bind(counted_at)
        .bind(counted_at)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if moved == 0 {
            return Err(StoreError::lost_race(format!(
                "token {token} was recounted by another meanwhile"
            )));
        }
        Ok(())
    }
}
