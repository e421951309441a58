//! API tokens: rows of `api_tokens`. Only the secret's hash is stored.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::Row;

use super::error::StoreError;
use super::handle::Store;

/// A token as stored, without its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub id: u64,
    pub name: String,
    pub secret_sha256: [u8; 32],
    /// Topic patterns, `*` for any run of characters.
    pub topics: Vec<String>,
    pub scopes: Vec<String>,
    pub rate_requests: Option<u32>,
    pub rate_jobs: Option<u32>,
    /// Quotas: the most pending jobs, and payload bytes of pending jobs,
    /// it may hold (None: no limit).
    pub max_pending_jobs: Option<u64>,
    pub max_payload_bytes: Option<u64>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What `token create` writes.
#[derive(Debug, Clone)]
pub struct NewToken<'a> {
    pub name: &'a str,
    pub secret_sha256: [u8; 32],
    pub topics: &'a [String],
    pub scopes: &'a [String],
    pub rate_requests: Option<u32>,
    pub rate_jobs: Option<u32>,
    pub max_pending_jobs: Option<u64>,
    pub max_payload_bytes: Option<u64>,
}

const TOKEN_COLUMNS: &str = "id, name, secret_sha256, topics, scopes, rate_requests, rate_jobs, \
     max_pending_jobs, max_payload_bytes, created_at, revoked_at";

fn token_from_row(row: &sqlx::mysql::MySqlRow) -> Result<TokenRow, StoreError> {
    let hash: Vec<u8> = row.try_get("secret_sha256")?;
    let secret_sha256: [u8; 32] = hash
        .try_into()
        .map_err(|_| StoreError::Corrupt("api_tokens.secret_sha256 is not 32 bytes".to_owned()))?;
    let list = |text: String| -> Vec<String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    Ok(TokenRow {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        secret_sha256,
        topics: list(row.try_get("topics")?),
        scopes: list(row.try_get("scopes")?),
        rate_requests: row.try_get("rate_requests")?,
        rate_jobs: row.try_get("rate_jobs")?,
        max_pending_jobs: row.try_get("max_pending_jobs")?,
        max_payload_bytes: row.try_get("max_payload_bytes")?,
        created_at: row.try_get::<NaiveDateTime, _>("created_at")?.and_utc(),
        revoked_at: row
            .try_get::<Option<NaiveDateTime>, _>("revoked_at")?
            .map(|at| at.and_utc()),
    })
}

impl Store {
    /// Stores a new token; `DuplicateKey` when the name is taken (revoked
    /// tokens keep theirs).
    pub async fn token_create(&self, token: &NewToken<'_>) -> Result<TokenRow, StoreError> {
        let id = sqlx::query(
            "INSERT INTO api_tokens (name, secret_sha256, topics, scopes, rate_requests, \
             rate_jobs, max_pending_jobs, max_payload_bytes, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3))",
        )
        .bind(token.name)
        .bind(&token.secret_sha256[..])
        .bind(token.topics.join(","))
        .bind(token.scopes.join(","))
        .bind(token.rate_requests)
        .bind(token.rate_jobs)
        .bind(token.max_pending_jobs)
        .bind(token.max_payload_bytes)
        .execute(&self.pool)
        .await?
        .last_insert_id();
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE id = ?"
        ))
        .bind(id)
        .fetch_one(&self.pool)
        .await?;
        token_from_row(&row)
    }

    /// Every token, revoked ones included, by name.
    pub async fn token_list(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_from_row).collect()
    }

    /// The tokens that are not revoked: what the API accepts.
    pub async fn tokens_active(&self) -> Result<Vec<TokenRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE revoked_at IS NULL"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes the token called `name`; `Ok(false)` when there is none.
    /// Revoking a revoked token changes nothing and answers `Ok(true)`.
    pub async fn token_revoke(&self, name: &str) -> Result<bool, StoreError> {
        sqlx::query(
            "UPDATE api_tokens SET revoked_at = UTC_TIMESTAMP(3) \
             WHERE name = ? AND revoked_at IS NULL",
        )
        .bind(name)
        .execute(&self.pool)
        .await?;
        let found: Option<u64> = sqlx::query_scalar("SELECT id FROM api_tokens WHERE name = ?")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        Ok(found.is_some())
    }
}
