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
    /// A compare-and-set that found its row moved since it was read: the
    /// transaction is dropped (nothing written) and, like a rolled-back
    /// conflict, the write may simply be tried again on the rows as they
    /// are now ([`contention_retry`]).
    pub(super) fn lost_race(what: String) -> Self {
        StoreError::Contention(sqlx::Error::Protocol(format!(
            "a compare-and-set lost to a concurrent write: {what}"
        )))
    }

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
/// Replication, Aurora, TiDB, and MySQL as vtgate relays it) that say "not
/// now" rather than "this request is wrong", with the server's `message`
/// for the numbers that need it (1105, and 1317 and 1203 from vtgate).
/// Everything else is a failure of the statement.
fn server_refusal_kind(number: u16, message: &str) -> Option<Refusal> {
    match number {
        // 1213: deadlock (and Galera's certification failure), 1205: lock
        // wait timeout, 1467: the same on a table's AUTO-INC lock, 3100:
        // group replication rolled the commit back. TiDB's: 9007 write
        // conflict (at COMMIT in optimistic mode), 8005 the same found by
        // TiDB's own latches ("Write conflict, txnStartTS … is stale"),
        // 8002 a locking read's conflict, 8022 the transaction's retry
        // failed, 8028 the table's schema changed under the transaction.
        // For 8002, 8022 and 8028 TiDB's docs say the application can
        // safely retry the whole transaction (pingcap/docs
        // error-codes.md); TiDB marks 9007, 8005 and 8022 "[try again
        // later]" (pingcap/tidb pkg/kv/error.go). In pessimistic mode its
        // lock waits and deadlocks are MySQL's 1205 and 1213.
        //
        // 1180, "Got error N during COMMIT": the engine refused the commit
        // and rolled the transaction back whole; on Galera, its
        // certification failed or a replicated write aborted it
        // (brute-force abort), so nothing was committed anywhere. 3101,
        // Group Replication's "Plugin instructed the server to rollback
        // the current transaction": it lost certification to another
        // member's write, and was rolled back.
        1213 | 1205 | 1467 | 1180 | 3100 | 3101 | 9007 | 8005 | 8002 | 8022 | 8028 => {
            Some(Refusal::Contention)
        }
        // 1105 is ER_UNKNOWN_ERROR, every server's and proxy's catch-all:
        // a refusal only when its text names one (unknown_error_refusal).
        1105 => unknown_error_refusal(message),
        // 1290: running with --read-only / --super-read-only, 1836: in
        // read-only mode, 1047: Galera's "WSREP has not yet prepared node
        // for application use" (a node that left its cluster's primary
        // component), 1792: a READ ONLY transaction, which tickler never
        // starts, so the server made it one (an Aurora writer demoted to a
        // reader by a failover).
        1290 | 1836 | 1047 | 1792 => Some(Refusal::NotPrimary),
        // vtgate sends a vttablet's ABORTED as 1317 and its
        // RESOURCE_EXHAUSTED as 1203 (vitessio/vitess
        // go/mysql/sqlerror/sql_error.go), Vitess's row limit among them:
        // "Row count exceeded N" (the tablet's max result size) and
        // "in-memory row count exceeded allowed limit of N" (vtgate's).
        // The statement asks for more rows than Vitess hands out, and
        // asking again would not change that.
        1317 | 1203 if mentions(message, &["row count exceeded"]) => None,
        // 1040: too many connections, 1203: the account's
        // max_user_connections, 1226: an account resource limit, 1053:
        // server shutdown in progress, 1927 (MariaDB) and 3169 (MySQL): the
        // connection was killed, 1317: the query was interrupted (KILL
        // QUERY), 4031: disconnected for inactivity, 1158-1161: network
        // read or write errors, 2006 and 2013: gone away or lost (as a
        // proxy relays them), 1969 (MariaDB max_statement_time) and 3024
        // (MySQL max_execution_time): the statement ran out of time, 1637:
        // too many active transactions, 1041: out of memory.
        //
        // vtgate's own: 1317 for a vttablet's CANCELED, DEADLINE_EXCEEDED
        // or ABORTED (a transaction its killer ended), 1203 for
        // RESOURCE_EXHAUSTED ("transaction pool connection limit
        // exceeded", a pool's timeout), 1041 for "Transaction throttled".
        //
        // TiDB's (pingcap/tidb pkg/errno/errcode.go, pingcap/docs
        // error-codes.md): 9001 PD server timeout, 9002 TiKV server
        // timeout, 9003 TiKV server is busy, 9004 resolve lock timeout,
        // 9005 region is unavailable, 9006 GC life time is shorter than
        // the transaction's (one held up too long; begun again, it reads
        // after the GC safe point), 9008 TiKV's store token limit,
        // 9010 a stale command, 9011 TiKV's max timestamp not synced,
        // 9012 and 9013 TiFlash timed out or busy, 8027 the schema is out
        // of date (its schema lease lapsed), 8120 no start timestamp from PD,
        // 8176 the query was cancelled because the tidb-server instance
        // ran short of memory (tidb_server_memory_limit) while it was the
        // largest, 8252 the resource group's quota is spent, 8253 and 8254
        // a runaway-query rule of the resource group killed the query (as
        // max_execution_time does) or holds its digest in quarantine for
        // a while.
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
        | 9001..=9006
        | 9008
        | 9010..=9013
        | 8027
        | 8120
        | 8176
        | 8252..=8254 => Some(Refusal::NotNow),
        // TiDB's that look like the server's state but are the
        // statement's own: 8004 "Transaction is too large" and 9500 "A
        // single transaction is too large" (txn-total-size-limit), 8025
        // "entry too large" (txn-entry-size-limit: a row over 6 MiB),
        // 8175 "exceeding the allowed memory limit for a single SQL query"
        // and 8001 a request over the same quota (tidb_mem_quota_query),
        // 8229 "TTL manager has timed out" (a transaction open past
        // max-txn-ttl), 8147 a lazy uniqueness check's failure. The same
        // statement fails the same way however often it is tried, so none
        // is retried nor answered with 503: the caller sees its failure.
        8004 | 9500 | 8025 | 8175 | 8001 | 8229 | 8147 => None,
        _ => None,
    }
}

/// What an error 1105 (ER_UNKNOWN_ERROR) refuses, by its text, compared
/// without case; any other 1105 is the statement's:
///
/// - **Not the primary**, when no text below matched: Aurora's during a
///   failover ("The MySQL server is running with the --read-only
///   option…", "…failover in progress…"), a proxy's "not the primary".
/// - **Rolled back**: TiDB's errors that have no number of their own
///   arrive as 1105 with their text, and TiDB marks the ones that rolled
///   the transaction back and may be retried "[try again later]"
///   (`TxnRetryableMark`, pingcap/tidb pkg/kv/error.go: "changing this
///   string will affect the backward compatibility"); older TiDB sent its
///   schema change that way ("Information schema is changed. [try again
///   later]", pingcap/tidb domain/domain.go), and a pessimistic statement
///   that lost to other writers 256 times in a row ends with "pessimistic
///   lock retry limit reached" (pkg/executor/adapter.go; pingcap/docs
///   pessimistic-transaction.md).
/// - **Not now**: TiDB's "Information schema is out of date" (8027's text,
///   1105 on older TiDB), and vtgate's CLUSTER_EVENT, UNAVAILABLE and
///   FAILED_PRECONDITION errors, which reach the client as 1105
///   (vitessio/vitess go/mysql/sqlerror/sql_error.go): a reparent, a
///   resharding or a MoveTables switch in progress, a buffer full, a
///   tablet not serving or no longer of the type asked for, a transaction
///   vttablet ended. Not "not the primary": tickler's connections go to
///   vtgate, which finds the new primary itself, so none is closed.
fn unknown_error_refusal(message: &str) -> Option<Refusal> {
    const NOT_PRIMARY: &[&str] = &[
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
    const ROLLED_BACK: &[&str] = &[
        // TiDB's TxnRetryableMark, brackets included.
        "[try again later]",
        "information schema is changed",
        "pessimistic lock retry limit reached",
    ];
    const NOT_NOW: &[&str] = &[
        // TiDB: its schema lease lapsed ("… schema failed to update in 1
        // lease, please make sure TiDB can connect to TiKV").
        "information schema is out of date",
        // vtgate finds no serving primary: a reparent ("primary is not
        // serving, there may be a reparent operation in progress"; "there
        // is a reparent operation in progress" in PlanetScale's error
        // reference) or a resharding (go/vt/vtgate/buffer/buffer.go,
        // raised by go/vt/vtgate/tabletgateway.go).
        "primary is not serving",
        "current keyspace is being resharded",
        "destination shard is missing after a resharding operation",
        "no healthy tablet available",
        // vtgate's failover buffer gave up on the request.
        "primary buffer is full",
        "buffer full: request evicted",
        "context was canceled before failover finished",
        // vttablet, during a reparent or a shutdown: "operation not
        // allowed in state NOT_SERVING" or "… SHUTTING_DOWN", "tx engine
        // can't accept new connections in state …" (both in
        // go/vt/vterrors/constants.go), and a tablet no longer of the
        // type vtgate asked for ("wrong tablet type: REPLICA, want:
        // PRIMARY or []", go/vt/vttablet/tabletserver/state_manager.go;
        // "invalid tablet type", the other spelling vtgate's
        // RxWrongTablet takes).
        "operation not allowed in state",
        "tx engine can't accept new connections",
        "wrong tablet type",
        "invalid tablet type",
        // A MoveTables switching writes: the source primary refuses the
        // moved tables ("disallowed due to rule: enforce denied tables").
        "enforce denied tables",
        // vttablet's transaction cap, as older vtgates relay it.
        "transaction pool connection limit exceeded",
        // vtgate's wrap of a query that failed because its transaction
        // is gone (a reparent, a rollout, a primary down), which vtgate
        // then rolls back, and its refusal of the session until ROLLBACK
        // (changelog/22.0/22.0.0/summary.md, "Wrapped fatal transaction
        // errors").
        "vt15001:",
        "vt09032:",
    ];
    let message = message.to_ascii_lowercase();
    let names = |texts: &[&str]| texts.iter().any(|text| message.contains(text));
    // TiDB's and Vitess's own texts first: vtgate's may name a failover
    // ("context was canceled before failover finished") or wrap a
    // tablet's read-only answer, and still no connection of tickler's
    // points at a demoted server.
    if names(ROLLED_BACK) {
        Some(Refusal::Contention)
    } else if names(NOT_NOW) || vitess_transaction_ended(&message) {
        Some(Refusal::NotNow)
    } else if names(NOT_PRIMARY) {
        Some(Refusal::NotPrimary)
    } else {
        None
    }
}

/// Whether `message` (in lower case) is vttablet's word that the
/// transaction it was given is gone: "transaction <id>: ended at <time>
/// (<why>)" (its killer's "exceeded timeout: 30s", a pool closed for a
/// reparent), "transaction <id>: not found", "transaction <id>: in use:
/// for tx killer rollback" (`TxClosed` in vitessio/vitess
/// go/vt/vterrors/constants.go; here the id must hold a digit). vttablet
/// rolled it back; nothing of it was committed.
fn vitess_transaction_ended(message: &str) -> bool {
    const ENDINGS: [&str; 3] = ["ended", "not found", "in use: for tx killer rollback"];
    message.match_indices("transaction ").any(|(at, text)| {
        let rest = &message[at + text.len()..];
        let id_len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
            .unwrap_or(rest.len());
        let (id, after) = rest.split_at(id_len);
        id.bytes().any(|b| b.is_ascii_digit())
            && after
                .strip_prefix(' ')
                .is_some_and(|after| ENDINGS.iter().any(|ending| after.starts_with(ending)))
    })
}

/// Whether `message` names one of `texts` (given in lower case), compared
/// without case.
fn mentions(message: &str, texts: &[&str]) -> bool {
    let message = message.to_ascii_lowercase();
    texts.iter().any(|text| message.contains(text))
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
    fn tidb_errors_are_classed_by_their_documented_numbers_and_texts() {
        // Numbers and texts from pingcap/tidb pkg/errno/errcode.go and
        // errname.go (with kv.TxnRetryableMark appended as
        // pkg/kv/error.go does), and the docs' error-codes.md.
        for (number, message) in [
            (9007, "Write conflict, txnStartTS=452189348157095937, conflictStartTS=452189348157095938, conflictCommitTS=452189348157095939, key={tableID=112, handle=1} primary={tableID=112, handle=1}, reason=Optimistic [try again later]"),
            (8005, "Write conflict, txnStartTS 452189348157095937 is stale [try again later]"),
            (8002, "[452189348157095937] can not retry select for update statement"),
            (8022, "Error: KV error safe to retry txn 452189348157095937 not found [try again later]"),
            (8028, "Information schema is changed during the execution of the statement(for example, table definition may be updated by other DDL ran in parallel). If you see this error often, try increasing `tidb_max_delta_schema_count`"),
            // Pessimistic mode's lock wait and deadlock are MySQL's.
            (1205, "Lock wait timeout exceeded; try restarting transaction"),
            (1213, "Deadlock found when trying to get lock; try restarting transaction"),
        ] {
            assert_eq!(
                server_refusal_kind(number, message),
                Some(Refusal::Contention),
                "{number}"
            );
        }
        for (number, message) in [
            (9001, "PD server timeout: start timestamp may fall behind safe point"),
            (9002, "TiKV server timeout"),
            (9003, "TiKV server is busy"),
            (9004, "Resolve lock timeout"),
            (9005, "Region is unavailable"),
            (9006, "GC life time is shorter than transaction duration, transaction start ts is 452189348157095937 (2024-09-01 10:00:00), txn safe point is 452189400000000000 (2024-09-01 10:10:00)"),
            (9008, "Store token is up to the limit, store id = 4"),
            (9010, "TiKV server reports stale command"),
            (9011, "TiKV max timestamp is not synced"),
            (9012, "TiFlash server timeout"),
            (9013, "TiFlash server is busy"),
            (8027, "Information schema is out of date: schema failed to update in 1 lease, please make sure TiDB can connect to TiKV"),
            (8120, "Can not get start ts"),
            (8176, "Your query has been cancelled due to exceeding the allowed memory limit for the tidb-server instance and this query is currently using the most memory. Please try narrowing your query scope or increase the tidb_server_memory_limit and try again.[conn=2097154]"),
            (8252, "Exceeded resource group quota limitation"),
            (8253, "Query execution was interrupted, identified as runaway query [runaway exceed tidb side]"),
            (8254, "Quarantined and interrupted because of being in runaway watch list"),
        ] {
            assert_eq!(
                server_refusal_kind(number, message),
                Some(Refusal::NotNow),
                "{number}"
            );
        }
        // Too large or over a per-statement limit: the statement's own,
        // never retried, or it would be retried forever.
        for (number, message) in [
            (8004, "Transaction is too large, size: 104857600"),
            (9500, "A single transaction is too large."),
            (8025, "entry too large, the max entry size is 6291456, the size of data is 7340032"),
            (8175, "Your query has been cancelled due to exceeding the allowed memory limit for a single SQL query. Please try narrowing your query scope or increase the tidb_mem_quota_query limit and try again.[conn=2097154]"),
            (8001, "select holds 1073741825B memory, exceeds threshold 1073741824B."),
            (8229, "TTL manager has timed out, pessimistic locks may expire, please commit or rollback this transaction"),
            (8147, "transaction aborted because lazy uniqueness check is enabled and an error occurred: [kv:1062]Duplicate entry '1' for key 't.uk'"),
            // Not supported, whatever the moment.
            (8200, "Unsupported modify column: this column has primary key flag"),
        ] {
            assert_eq!(server_refusal_kind(number, message), None, "{number}");
        }
    }

    #[test]
    fn tidb_texts_under_an_unknown_error_are_classed_by_their_retry_mark() {
        // Older TiDB sent its domain errors as 1105 with their text
        // (pingcap/tidb domain/domain.go, no MySQL code registered); a
        // pessimistic statement out of retries sends a bare text
        // (pkg/executor/adapter.go, pingcap/docs
        // pessimistic-transaction.md).
        for message in [
            "Information schema is changed. [try again later]",
            "[domain:2]Information schema is changed. [try again later]",
            "pessimistic lock retry limit reached",
        ] {
            assert_eq!(
                server_refusal_kind(1105, message),
                Some(Refusal::Contention),
                "{message}"
            );
        }
        assert_eq!(
            server_refusal_kind(1105, "Information schema is out of date."),
            Some(Refusal::NotNow)
        );
        // TiDB's other 1105s, e.g. a TiKV of another version
        // (pingcap/docs error-codes.md), and an unmarked "try again".
        for message in [
            "other error: unknown error Wire Error(InvalidEnumValue(4004))",
            "Transaction is too large, size: 104857600",
            "please try again",
        ] {
            assert_eq!(server_refusal_kind(1105, message), None, "{message}");
        }
    }

    #[test]
    fn vitess_errors_as_vtgate_sends_them_are_classed() {
        // vtgate's CLUSTER_EVENT, UNAVAILABLE and FAILED_PRECONDITION
        // reach the client as 1105 (vitessio/vitess
        // go/mysql/sqlerror/sql_error.go); texts from
        // go/vt/vtgate/buffer/buffer.go, go/vt/vtgate/tabletgateway.go,
        // go/vt/vterrors/constants.go, go/vt/vttablet/tabletserver
        // (state_manager.go, tx_pool.go, query_executor.go), vitess#12779
        // and PlanetScale's error reference.
        for message in [
            "target: commerce.-.primary: primary is not serving, there may be a reparent operation in progress",
            "primary is not serving, there is a reparent operation in progress",
            "target: commerce.-.primary: current keyspace is being resharded",
            "destination shard is missing after a resharding operation",
            "target: commerce.-.primary: no healthy tablet available for 'keyspace:\"commerce\" shard:\"-\" tablet_type:PRIMARY'",
            "primary buffer is full",
            "buffer full: request evicted for newer request",
            "context was canceled before failover finished",
            "target: commerce.-.primary: vttablet: operation not allowed in state NOT_SERVING",
            "target: commerce.-.primary: vttablet: operation not allowed in state SHUTTING_DOWN",
            "vttablet: tx engine can't accept new connections in state NotServing",
            "vttablet: rpc error: code = FailedPrecondition desc = wrong tablet type: PRIMARY, want: REPLICA or []",
            "target: commerce.-.primary: vttablet: rpc error: code = FailedPrecondition desc = disallowed due to rule: enforce denied tables",
            "vttablet: rpc error: code = ResourceExhausted desc = transaction pool connection limit exceeded",
            "target: platform.-.primary: vttablet: rpc error: code = Aborted desc = transaction 1712345678901234567: ended at 2024-04-05 10:11:12.345 UTC (exceeded timeout: 20s)",
            "vttablet: rpc error: code = Aborted desc = transaction 1712345678901234567: not found",
            "transaction 1712345678901234567: in use: for tx killer rollback",
            "VT15001: Query execution was interrupted, maximum statement execution time exceeded",
        ] {
            assert_eq!(
                server_refusal_kind(1105, message),
                Some(Refusal::NotNow),
                "{message}"
            );
        }
        // A MySQL error vttablet passes on keeps its number: read-only is
        // still "not the primary", a lost query still "not now".
        assert_eq!(
            server_refusal_kind(
                1290,
                "target: commerce.-.primary: vttablet: rpc error: code = FailedPrecondition desc = The MySQL server is running with the --read-only option so it cannot execute this statement (errno 1290) (sqlstate HY000)"
            ),
            Some(Refusal::NotPrimary)
        );
        for (number, message) in [
            (2013, "vttablet: (errno 2013) due to context deadline exceeded, elapsed time: 20.000588s, killing query ID 3"),
            (1317, "target: commerce.-.primary: vttablet: rpc error: code = Aborted desc = transaction 1712345678901234567: ended at 2024-04-05 10:11:12.345 UTC (exceeded timeout: 20s)"),
            (1203, "query pool timeout"),
            (1041, "Transaction throttled"),
        ] {
            assert_eq!(
                server_refusal_kind(number, message),
                Some(Refusal::NotNow),
                "{number}"
            );
        }
        // Vitess's row limits, and vtgate's refusals of the statement
        // itself: the statement's own, never retried.
        for (number, message) in [
            (
                1317,
                "vttablet: rpc error: code = Aborted desc = Row count exceeded 100000",
            ),
            (1203, "in-memory row count exceeded allowed limit of 300000"),
            (1153, "in-memory row count exceeded allowed limit of 300000"),
            (10001, "caller id: tickler: row count exceeded 10000"),
            (1105, "VT12001: unsupported: cross-shard foreign keys"),
            (1105, "VT09015: schema tracking required"),
            (1105, "the transaction 42 of the batch failed"),
        ] {
            assert_eq!(server_refusal_kind(number, message), None, "{message}");
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
