//! SQL fragments the store's files share: below every one of them, so that
//! none has to import another for a piece of a statement. With them, the
//! two helpers for time: a bound time as the database stores it
//! ([`db_time`]), and a session's clock set for a virtual clock
//! ([`session_clock_set`]).
//!
//! Counters never overflow on a row edited by hand (#57): an `INT
//! UNSIGNED` at its top would fail the statement, and with it every other
//! row of a batch. `version` wraps (`version % 4294967295 + 1`: after
//! 4294967295 comes 1), `attempt` stops at the top (`LEAST(attempt,
//! 4294967294) + 1`), written so in every statement that counts them.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use crate::domain::job::JobId;

/// A time as a `DATETIME(3)` bind: truncated to the millisecond first.
/// MySQL rounds extra digits into a `DATETIME(3)` (…59.9996 becomes the
/// next second) where MariaDB truncates them; truncating here makes both
/// store the same value, and never one later than asked.
pub(super) fn db_time(at: DateTime<Utc>) -> NaiveDateTime {
    crate::domain::job::truncate_to_ms(at).naive_utc()
}

/// Sets this session's `timestamp` to the server's own clock plus
/// `offset_ms` (`SYSDATE(6)`, which that variable does not move). From
/// then on the session's `NOW()` and `UTC_TIMESTAMP(3)`, column defaults
/// and triggers read that one instant, which stands still until it is set
/// again: the pool of a store on a virtual clock sets it as it opens a
/// connection and again each time the connection is acquired
/// (`super::pool`), so it holds for one use of the connection.
pub(super) async fn session_clock_set(
    conn: &mut sqlx::MySqlConnection,
    offset_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + ? / 1000")
        .bind(offset_ms)
        .execute(conn)
        .await?;
    Ok(())
}

/// `(?, ?, …)`: `ids` bound, for an `IN`.
pub(super) fn push_id_list(query: &mut QueryBuilder<'_, MySql>, ids: &[JobId]) {
    query.push("(");
    let mut list = query.separated(", ");
    for id in ids {
        list.push_bind(*id);
    }
    query.push(")");
}

/// A duration as whole microseconds, as `TIMESTAMPADD(MICROSECOND, ?, …)`
/// takes it bound (the longest past `u64` as `u64::MAX`).
pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// ` AND` due at or after `from` and before `to`.
pub(super) fn run_at_push(
    query: &mut QueryBuilder<'_, MySql>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
) {
    if let Some(from) = from {
        query
            .push(" AND schedule_time >= ")
            .push_bind(db_time(from));
    }
    if let Some(to) = to {
        query.push(" AND schedule_time < ").push_bind(db_time(to));
    }
}

/// ` AND` the topic matches one of `patterns` (None: any topic).
pub(super) fn topic_patterns_push(
    query: &mut QueryBuilder<'_, MySql>,
    patterns: Option<&[String]>,
) {
    if let Some(patterns) = patterns {
        query.push(" AND (FALSE");
        for pattern in patterns {
            query
                .push(" OR topic LIKE ")
                .push_bind(pattern_like(pattern))
                .push(" ESCAPE '!'");
        }
        query.push(")");
    }
}

/// The SQL `LIKE` pattern (escape character `!`) matching the topics a
/// topic pattern (`crate::domain::topic_pattern`) matches; topic names have no `%`
/// or `!`, only `_` to escape.
fn pattern_like(pattern: &str) -> String {
    let mut like = String::with_capacity(pattern.len() + 4);
    for c in pattern.chars() {
        match c {
            '*' => like.push('%'),
            '_' | '%' | '!' => {
                like.push('!');
                like.push(c);
            }
            c => like.push(c),
        }
    }
    like
}

/// A text column. The schema uses binary collations (case-sensitive keys),
/// which sqlx reports as binary, so text is read as bytes and checked UTF-8.
pub(super) fn text(row: &MySqlRow, column: &str) -> Result<Option<String>, StoreError> {
    let bytes: Option<Vec<u8>> = row.try_get(column)?;
    bytes
        .map(|b| {
            String::from_utf8(b).map_err(|_| StoreError::Corrupt(format!("{column} is not UTF-8")))
        })
        .transpose()
}

/// Most rows one INSERT statement carries: 16 placeholders a row keeps a
/// statement below the server's 65,535 (ERROR 1390), with room for the
/// history rows written after it.
pub(super) const INSERT_ROWS_MAX: usize = 2_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_time_is_truncated_to_the_millisecond_never_rounded_up() {
        let at = DateTime::parse_from_rfc3339("2026-12-31T23:59:59.9996Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(db_time(at).to_string(), "2026-12-31 23:59:59.999");
    }

    #[test]
    fn topic_patterns_become_like_patterns_that_match_the_same_topics() {
        assert_eq!(pattern_like("orders.*"), "orders.%");
        assert_eq!(pattern_like("a_b*c"), "a!_b%c");
        assert_eq!(pattern_like("*"), "%");
    }
}
