//! The audit log: `audit_log`, one row per control-plane change, written
//! before the change and completed after it ([`Store::audit_begin`],
//! [`Store::audit_end`]), read newest first.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde_json::Value;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::sql::db_time;

/// Longest `target` and `origin` kept (the columns' width).
const TEXT_MAX: usize = 300;

/// A change about to be made.
#[derive(Debug, Clone, Default)]
pub struct AuditEntry {
    /// `api:NAME`, `api`, `cli`, `instance`.
    pub actor: String,
    /// `topic.pause`, `schedule.modify`, `token.create`, …
    pub action: String,
    pub target: Option<String>,
    pub origin: Option<String>,
    pub before: Option<Value>,
    pub request: Option<Value>,
}

/// A row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRow {
    pub id: u64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub origin: Option<String>,
    pub before: Option<Value>,
    pub request: Option<Value>,
    pub after: Option<Value>,
    /// The answer's HTTP status (0: a CLI change that failed); None: not
    /// recorded (running, or the process died before).
    pub status: Option<u16>,
}

/// Which rows to list.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// An action (`topic.pause`) or a family (`topic`: every `topic.*`).
    pub action: Option<String>,
    pub actor: Option<String>,
    pub target: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

fn cut(text: Option<String>) -> Option<String> {
    text.map(|mut text| {
        if text.len() > TEXT_MAX {
            let mut at = TEXT_MAX;
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.truncate(at);
        }
        text
    })
}

fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

/// A text column (the `_bin` collations read as bytes).
fn text_of(row: &sqlx::mysql::MySqlRow, column: &str) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = row.try_get(column)?;
    Ok(bytes.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

fn json_of(row: &sqlx::mysql::MySqlRow, column: &str) -> Result<Option<Value>, StoreError> {
    let text = text_of(row, column)?;
    // A hand-edited row that is not JSON is shown as the text it holds.
    Ok(text.map(|text| serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

impl Store {
    /// Writes the row of a change about to be made; returns its id, for
    /// [`Store::audit_end`]. A change must not be made when this fails.
    pub async fn audit_begin(&self, entry: &AuditEntry) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "INSERT INTO audit_log (at, actor, action, target, origin, before_json, request_json) \
             VALUES (UTC_TIMESTAMP(3), ?, ?, ?, ?, ?, ?)",
        )
        .bind(&entry.actor)
        .bind(&entry.action)
        .bind(cut(entry.target.clone()))
        .bind(cut(entry.origin.clone()))
        .bind(json_text(&entry.before))
        .bind(json_text(&entry.request))
        .execute(&self.pool)
        .await?;
        Ok(done.last_insert_id())
    }

    /// Completes the row of a change: its answer's status and what it
    /// answered (the state after).
    pub async fn audit_end(
        &self,
        id: u64,
        status: u16,
        after: Option<&Value>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE audit_log SET status = ?, after_json = ? WHERE id = ?")
            .bind(status)
            .bind(after.map(Value::to_string))
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Rows matching `filter`, newest first, after the cursor `(at, id)`
    /// of the last row of the page before.
    pub async fn audit_list(
        &self,
        filter: &AuditFilter,
        after: Option<(DateTime<Utc>, u64)>,
        limit: u32,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, at, actor, action, target, origin, before_json, request_json, \
             after_json, status FROM audit_log WHERE 1 = 1",
        );
        if let Some(action) = &filter.action {
            if action.contains('.') {
                query.push(" AND action = ").push_bind(action.clone());
            } else {
                query
                    .push(" AND action LIKE ")
                    .push_bind(format!("{}.%", action.replace(['%', '_'], "")));
            }
        }
        if let Some(actor) = &filter.actor {
            query.push(" AND actor = ").push_bind(actor.clone());
        }
        if let Some(target) = &filter.target {
            query.push(" AND target = ").push_bind(target.clone());
        }
        if let Some(from) = filter.from {
            query.push(" AND at >= ").push_bind(db_time(from));
        }
        if let Some(to) = filter.to {
            query.push(" AND at < ").push_bind(db_time(to));
        }
        if let Some((at, id)) = after {
            query
                .push(" AND (at < ")
                .push_bind(db_time(at))
                .push(" OR (at = ")
                .push_bind(db_time(at))
                .push(" AND id < ")
                .push_bind(id)
                .push("))");
        }
        query
            .push(" ORDER BY at DESC, id DESC LIMIT ")
            .push_bind(limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                Ok(AuditRow {
                    id: row.try_get("id")?,
                    at: row.try_get::<NaiveDateTime, _>("at")?.and_utc(),
                    actor: text_of(row, "actor")?.unwrap_or_default(),
                    action: text_of(row, "action")?.unwrap_or_default(),
                    target: text_of(row, "target")?,
                    origin: text_of(row, "origin")?,
                    before: json_of(row, "before_json")?,
                    request: json_of(row, "request_json")?,
                    after: json_of(row, "after_json")?,
                    status: row.try_get("status")?,
                })
            })
            .collect()
    }

    /// Deletes up to `limit` rows older than `age` (the database's clock);
    /// returns how many.
    pub async fn audit_purge(
        &self,
        age: std::time::Duration,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM audit_log WHERE at < TIMESTAMPADD(SECOND, ?, UTC_TIMESTAMP(3)) \
             ORDER BY at LIMIT ?",
        )
        .bind(-i64::try_from(age.as_secs()).unwrap_or(i64::MAX))
        .bind(limit)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
