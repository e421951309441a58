//! The store's error: [`StoreError`], the classes a caller acts on
//! ([`StoreError::is_transient`]), how a driver error is classified (a
//! server's refusal told from a statement's fault, by the server's error
//! number), and [`contention_retry`] for writes the database rolled back.
//!
//! Classifying is pure but for one thing, made in the `From` impl below:
//! a "not the primary" answer demotes every connection opened before it
//! ([`super::failover`]). Touches no database itself.

use std::time::Duration;

use super::failover;

/// Store failures a caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} not found")]
    NotFound(u64),
    #[error("a job with this topic and key exists already")]
    DuplicateKey,
    #[error("the database is unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// The database rolled the statement back to break a deadlock or a
    /// lock wait with another one: nothing was written, and trying again
    /// is safe.
    #[error("the database rolled back a conflicting statement: {0}")]
    Contention(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Query(#[source] sqlx::Error),
    #[error("stored row is malformed: {0}")]
    Corrupt(String),
    /// A payload compressed with a dictionary this instance has not
    /// loaded yet (`payload_dicts`): it is, within seconds.
    #[error("payload dictionary {0} is not loaded yet")]
    DictionaryUnknown(u16),
    /// A row sealed under a key this instance does not hold: another live
    /// instance may (a fleet halfway through adding a key), and the row is
    /// left to it; when none does, it is set aside like a broken row.
    #[error(
        "job {id}: sealed under key {key:?}, which this instance does not have (encryption.keys)"
    )]
    KeyMissing { id: u64, key: String },
    #[error("migration failed: {0}")]
    Migration(#[from] refinery_core::Error),
    /// A create through a token would pass its quota (`api_tokens`
    /// `max_pending_jobs`, `max_payload_bytes`): nothing was written.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A migration not applied, and why.
    #[error("migration refused: {0}")]
    MigrationRefused(String),
}

impl StoreError {
    /// A moment's failure that nothing was written by, to wait out and try
    /// again (the database failing over, a rolled-back conflict, a payload
    /// dictionary not loaded yet), never the caller's fault nor a reason to
    /// skip work.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Contention(_)
                | StoreError::DictionaryUnknown(_)
        )
    }
}

/// Every `?` on a driver error comes through here. Besides classifying the
/// error (a pure matter: `refusal_of`, then `classified`), it has one side
/// effect, process-wide: a server's "not the primary" answer demotes every
/// connection opened until now (`failover::connections_demote`), so the
/// pools reconnect to whatever the address names after a switchover. It is
/// made here because every such answer passes through here.
impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        let refusal = refusal_of(&err);
        if refusal == Some(Refusal::NotPrimary) {
            failover::connections_demote();
        }
        classified(err, refusal)
    }
}

/// The server's refusal `err` carries, if it is one: a database error
/// other than a duplicate key, whose number (and, for 1105, text) says
/// "not now" rather than "this statement is wrong".
fn refusal_of(err: &sqlx::Error) -> Option<Refusal> {
    match err {
        sqlx::Error::Database(db) if !db.is_unique_violation() => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .and_then(|e| server_refusal_kind(e.number(), e.message())),
        _ => None,
    }
}

/// `err` as the class a caller acts on, given its `refusal` ([`refusal_of`]).
fn classified(err: sqlx::Error, refusal: Option<Refusal>) -> StoreError {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => StoreError::Unavailable(err),
        sqlx::Error::Database(ref db) if db.is_unique_violation() => StoreError::DuplicateKey,
        sqlx::Error::Database(_) => match refusal {
            Some(Refusal::Contention) => StoreError::Contention(err),
            Some(Refusal::NotNow | Refusal::NotPrimary) => StoreError::Unavailable(err),
            None => StoreError::Query(err),
        },
        other => StoreError::Query(other),
    }
}

/// Why a server refused a statement, when the refusal is the server's
/// state and not the statement's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The statement was rolled back for a conflict with another one:
    /// nothing was written, and trying again at once is safe.
    Contention,
    /// The server cannot take it now (going away, full, killed, not
    /// ready): nothing the caller can fix, tried again later.
    NotNow,
    /// The server takes no writes: a demoted primary (read-only during a
    /// switchover), or a Galera node out of its cluster. Every connection
    /// made before this answer may point at it; they are not reused.
    NotPrimary,
}

/// The server-side error numbers (MySQL 8, MariaDB, Galera, Group
/// Replication, Aurora, TiDB) that say "not now" rather than "this request
/// is wrong", with the server's `message` for the one number that needs it
/// (1105). Everything else is a failure of the statement.
fn server_refusal_kind(number: u16, message: &str) -> Option<Refusal> {
    match number {
        // 1213: deadlock (and Galera's certification failure), 1205: lock
        // wait timeout, 1467: the same on a table's AUTO-INC lock, 3100:
        // group replication rolled the commit back. TiDB's: 9007 write
        // conflict (at COMMIT in optimistic mode), 8002 a locking read's
        // conflict, 8022 the transaction's retry failed, 8028 the table's
        // schema changed under the transaction.
        //
        // 1180, "Got error N during COMMIT": the engine refused the commit
        // and rolled the transaction back whole; on Galera, its
        // certification failed or a replicated write aborted it
        // (brute-force abort), so nothing was committed anywhere. 3101,
        // Group Replication's "Plugin instructed the server to rollback
        // the current transaction": it lost certification to another
        // member's write, and was rolled back.
        1213 | 1205 | 1467 | 1180 | 3100 | 3101 | 9007 | 8002 | 8022 | 8028 => {
            Some(Refusal::Contention)
        }
        // 1105 is ER_UNKNOWN_ERROR, every server's and proxy's catch-all:
        // a refusal only when its text names a failover or a server that
        // takes no writes (Aurora during a failover).
        1105 => unknown_error_refusal(message),
        // 1290: running with --read-only / --super-read-only, 1836: in
        // read-only mode, 1047: Galera's "WSREP has not yet prepared node
        // for application use" (a node that left its cluster's primary
        // component), 1792: a READ ONLY transaction, which tickler never
        // starts, so the server made it one (an Aurora writer demoted to a
        // reader by a failover).
        1290 | 1836 | 1047 | 1792 => Some(Refusal::NotPrimary),
        // 1040: too many connections, 1203: the account's
        // max_user_connections, 1226: an account resource limit, 1053:
        // server shutdown in progress, 1927 (MariaDB) and 3169 (MySQL): the
        // connection was killed, 1317: the query was interrupted (KILL
        // QUERY), 4031: disconnected for inactivity, 1158-1161: network
        // read or write errors, 2006 and 2013: gone away or lost (as a
        // proxy relays them), 1969 (MariaDB max_statement_time) and 3024
        // (MySQL max_execution_time): the statement ran out of time, 1637:
        // too many active transactions, 1041: out of memory. TiDB's 9001
        // (PD timeout), 9002 (TiKV timeout), 9003 (TiKV busy), 9004
        // (resolve-lock timeout), 9005 (region unavailable), 8027 (schema
        // out of date).
        1040
        | 1203
        | 1226
        | 1053
        | 1927
        | 3169
        | 1317
        | 4031
        | 1158..=1161
        | 2006
        | 2013
        | 1969
        | 3024
        | 1637
        | 1041
        | 9001..=9005
        | 8027 => Some(Refusal::NotNow),
        _ => None,
    }
}

/// The texts of an error 1105 that say the server takes no writes at the
/// moment: Aurora's during a failover ("The MySQL server is running with
/// the --read-only option…", "…failover in progress…"), a proxy's "not the
/// primary". Compared without case; any other 1105 is the statement's.
fn unknown_error_refusal(message: &str) -> Option<Refusal> {
    const NOT_PRIMARY: [&str; 10] = [
        "failover",
        "fail over",
        "failing over",
        "read-only",
        "read only",
        "read_only",
        "not primary",
        "not the primary",
        "not a primary",
        "not the master",
    ];
    let message = message.to_ascii_lowercase();
    NOT_PRIMARY
        .iter()
        .any(|text| message.contains(text))
        .then_some(Refusal::NotPrimary)
}

/// Runs `write` again, after a short jittered pause, while the database
/// rolls it back for contention (at most `CONTENTION_TRIES` times in all).
/// Only for writes that are one statement or one transaction: a rolled-back
/// attempt wrote nothing.
pub(super) async fn contention_retry<T, F, Fut>(mut write: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    const CONTENTION_TRIES: u32 = 4;
    let mut tries = 1;
    loop {
        match write().await {
            Err(StoreError::Contention(err)) if tries < CONTENTION_TRIES => {
                tracing::debug!(error = %err, tries, "write rolled back for contention; trying again");
                let pause_ms = rand::random_range(5..=20u64) * u64::from(tries);
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                tries += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_not_now_is_told_from_a_statements_fault() {
        // A switchover's read-only primary, a Galera node out of its
        // cluster, a READ ONLY transaction the server imposed: not the
        // primary.
        for number in [1290, 1836, 1047, 1792] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::NotPrimary),
                "{number}"
            );
        }
        // Full, going away, killed, out of time, TiDB busy.
        for number in [
            1040, 1203, 1053, 1927, 3169, 1317, 4031, 2006, 2013, 1969, 3024, 9003,
        ] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::NotNow),
                "{number}"
            );
        }
        // Rolled back for a conflict (Galera's certification failure is a
        // deadlock).
        for number in [1213, 1205, 1467, 3100, 9007] {
            assert_eq!(
                server_refusal_kind(number, ""),
                Some(Refusal::Contention),
                "{number}"
            );
        }
        // The statement's own fault: a syntax error, a missing table, a
        // bad value, access denied.
        for number in [1064, 1146, 1366, 1045, 1142] {
            assert_eq!(server_refusal_kind(number, ""), None, "{number}");
        }
    }

    #[test]
    fn a_commit_rolled_back_by_galera_or_group_replication_is_contention() {
        // Galera: certification failed, or a replicated write aborted the
        // transaction at its COMMIT; nothing was committed.
        for message in [
            "Got error 149 \"Lock deadlock; Try restarting transaction\" during COMMIT",
            "Got error 6 \"No such device or address\" during COMMIT",
        ] {
            assert_eq!(
                server_refusal_kind(1180, message),
                Some(Refusal::Contention),
                "{message}"
            );
        }
        // Group Replication: certification lost to another member.
        assert_eq!(
            server_refusal_kind(
                3101,
                "Plugin instructed the server to rollback the current transaction."
            ),
            Some(Refusal::Contention)
        );
    }

    #[test]
    fn an_unknown_error_is_a_refusal_only_when_it_names_a_failover() {
        // Aurora's during a failover, and a proxy's: not the primary.
        for message in [
            "The MySQL server is running with the --read-only option so it cannot execute this statement",
            "The MySQL server is running with the --super-read-only option so it cannot execute this statement",
            "Aurora failover in progress, try again",
            "Database is failing over",
            "Running in read only mode",
            "target is not the primary",
        ] {
            assert_eq!(
                server_refusal_kind(1105, message),
                Some(Refusal::NotPrimary),
                "{message}"
            );
        }
        // Any other 1105 is the statement's own failure.
        for message in [
            "",
            "Unknown error",
            "[planner:1105] Column 'x' in field list is ambiguous",
            "value too large for the primary key",
        ] {
            assert_eq!(server_refusal_kind(1105, message), None, "{message}");
        }
    }

    #[test]
    fn a_lost_connection_is_unavailable_and_a_garbled_answer_is_the_statements() {
        for err in [sqlx::Error::PoolTimedOut, sqlx::Error::WorkerCrashed] {
            assert_eq!(refusal_of(&err), None);
            assert!(matches!(classified(err, None), StoreError::Unavailable(_)));
        }
        let garbled = sqlx::Error::Protocol("unexpected packet".to_owned());
        assert_eq!(refusal_of(&garbled), None);
        assert!(matches!(classified(garbled, None), StoreError::Query(_)));
    }

    fn contention() -> StoreError {
        StoreError::Contention(sqlx::Error::Protocol("deadlock".to_owned()))
    }

    #[tokio::test]
    async fn a_write_rolled_back_for_contention_is_tried_again_a_few_times() {
        let mut calls = 0;
        let result = contention_retry(|| {
            calls += 1;
            let attempt = calls;
            async move {
                if attempt < 3 {
                    Err(contention())
                } else {
                    Ok(attempt)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: Result<(), StoreError> = contention_retry(|| {
            calls += 1;
            async { Err(contention()) }
        })
        .await;
        assert!(matches!(result, Err(StoreError::Contention(_))));
        assert_eq!(calls, 4, "gives up after four tries");

        let mut calls = 0;
        let result: Result<(), StoreError> = contention_retry(|| {
            calls += 1;
            async { Err(StoreError::DuplicateKey) }
        })
        .await;
        assert!(matches!(result, Err(StoreError::DuplicateKey)));
        assert_eq!(calls, 1, "other errors are not retried");
    }
}
