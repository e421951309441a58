//! Connecting: the connection options a `mysql_url` gives (TLS beyond
//! loopback, UTC sessions), the start-up probe that tells a TLS failure or
//! a server tickler cannot run on from a database that is merely down, and
//! the pool with its hooks: every new connection's session settings
//! (actor, isolation, causal reads, the session clock), and the closing of
//! connections a failover demoted ([`super::failover`]).

use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlSslMode};
use sqlx::{ConnectOptions, Connection, Executor, MySqlConnection};

use super::error::StoreError;
use super::failover::connection_demoted;

use super::sql::session_clock_set;
use crate::domain::clock::Clock;

/// A pool of at most `pool_size` connections to `url`, opened on first use
/// (so a process can start while MySQL is down). Each connection, as it is
/// opened, sets `@tickler_actor` to `actor` (the hand-edit trigger leaves
/// tickler's sessions alone by it), READ COMMITTED, causal reads when
/// `causal` (see [`causal_reads`]), and on a virtual `clock` its session
/// clock, which is set again on every later use of the connection.
pub(super) fn pool_lazy(
    url: &str,
    pool_size: u32,
    actor: &str,
    causal: bool,
    clock: &Clock,
) -> Result<MySqlPool, StoreError> {
    let options = connect_options(url)?;
    let set_actor = format!("SET @tickler_actor = '{actor}'");
    let connect_clock = clock.is_virtual().then(|| clock.clone());
    let acquire_clock = connect_clock.clone();
    Ok(MySqlPoolOptions::new()
        .max_connections(pool_size)
        .min_connections(0)
        // A caller waiting on a dead database gets an answer quickly.
        .acquire_timeout(Duration::from_secs(3))
        .after_connect(move |conn, _meta| {
            let set_actor = set_actor.clone();
            let clock = connect_clock.clone();
            Box::pin(async move {
                conn.execute(set_actor.as_str()).await?;
                // Every write here is a compare-and-set on rows found by
                // primary key, or a read of rows the transaction holds:
                // none needs REPEATABLE READ's gap locks, which
                // deadlocked creates, claims and marks under load.
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                if causal {
                    causal_reads(conn).await?;
                }
                if let Some(clock) = clock {
                    session_clock_set(conn, clock.offset_ms()).await?;
                }
                Ok(())
            })
        })
        // A connection opened before a server answered "not the
        // primary" is closed rather than used again, whether idle or
        // just returned.
        .before_acquire(move |conn, meta| {
            let clock = acquire_clock.clone();
            Box::pin(async move {
                if connection_demoted(meta.age) {
                    return Ok(false);
                }
                if let Some(clock) = clock {
                    session_clock_set(conn, clock.offset_ms()).await?;
                }
                Ok(true)
            })
        })
        .after_release(|_conn, meta| Box::pin(async move { Ok(!connection_demoted(meta.age)) }))
        .connect_lazy_with(options))
}

/// On Galera, makes this session's reads and writes wait until its node
/// has applied every transaction the cluster committed before them
/// (`wsrep_sync_wait`: reads, updates and deletes). Membership judges
/// other instances dead by their heartbeat rows, which other nodes write:
/// on a node applying late, a live instance's heartbeat would look old,
/// and its claims be settled while it still sends them. Elsewhere the
/// setting is harmless (MariaDB without Galera) or unknown (MySQL, TiDB:
/// error 1193, ignored).
async fn causal_reads(conn: &mut sqlx::MySqlConnection) -> Result<(), sqlx::Error> {
    match conn.execute("SET SESSION wsrep_sync_wait = 3").await {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(db))
            if db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|e| e.number() == 1193) =>
        {
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// What about the server tickler cannot run on, in words. On TiDB, its
/// optimistic transactions: tickler's compare-and-sets and fences rely on
/// a statement's locks being taken when it runs, not on a conflict found at
/// COMMIT (TiDB's default has been pessimistic since v3.0.8).
async fn server_refusal(conn: &mut sqlx::MySqlConnection) -> Option<String> {
    if !server_is_tidb(conn).await.unwrap_or(false) {
        return None;
    }
    let mode: Vec<u8> = sqlx::query_scalar("SELECT @@tidb_txn_mode")
        .fetch_one(conn)
        .await
        .ok()?;
    (String::from_utf8_lossy(&mode).eq_ignore_ascii_case("optimistic")).then(|| {
        "mysql.url: this TiDB runs optimistic transactions (tidb_txn_mode = 'optimistic'); \
         tickler needs pessimistic ones: SET GLOBAL tidb_txn_mode = 'pessimistic' \
         (docs/scaling.md, \"TiDB\")"
            .to_owned()
    })
}

/// Connects once, at start-up, to tell a TLS failure (a wrong CA, an
/// expired or mismatched certificate, a server without TLS where the URL
/// asks for it) from a database that is merely down: the first stops
/// start-up with a message naming the setting and the host; the second
/// does not (the API answers 503 until MySQL is back).
pub async fn tls_probe(url: &str) -> Result<(), String> {
    let options = connect_options(url).map_err(|err| err.to_string())?;
    let target = format!("{}:{}", options.get_host(), options.get_port());
    match tokio::time::timeout(Duration::from_secs(10), options.connect()).await {
        Ok(Ok(mut conn)) => {
            let refused = server_refusal(&mut conn).await;
            let _ = conn.close().await;
            refused.map_or(Ok(()), Err)
        }
        Ok(Err(err)) if is_tls_failure(&err) => Err(format!(
            "mysql.url: TLS to {target} failed: {err} (check ssl-mode, ssl-ca, ssl-cert and ssl-key in mysql.url)"
        )),
        Ok(Err(err)) => {
            tracing::warn!(%target, error = %err, "mysql does not answer yet; starting all the same");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(%target, "mysql did not answer within 10 s; starting all the same");
            Ok(())
        }
    }
}

/// A handshake the driver or rustls refused (an untrusted or mismatched
/// certificate arrives as an I/O error carrying rustls's).
fn is_tls_failure(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.is::<rustls::Error>()),
        _ => false,
    }
}

/// Whether the URL's query sets `ssl-mode` (or `sslmode`).
fn url_names_ssl_mode(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        query.split('&').any(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            key.eq_ignore_ascii_case("ssl-mode") || key.eq_ignore_ascii_case("sslmode")
        })
    })
}

/// Loopback addresses, `localhost` and Unix sockets: traffic that never
/// leaves the machine.
fn host_is_local(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.starts_with('/')
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The options `url` gives, with the TLS and session settings tickler
/// needs on every connection.
pub(super) fn connect_options(url: &str) -> Result<MySqlConnectOptions, StoreError> {
    let mut options = MySqlConnectOptions::from_str(url).map_err(StoreError::Query)?;
    // Beyond this machine, TLS with a verified certificate and host name,
    // unless the URL says otherwise (`?ssl-mode=disabled` on purpose). On
    // loopback, the driver's default: TLS if the server offers it.
    if !url_names_ssl_mode(url) && !host_is_local(options.get_host()) {
        options = options.ssl_mode(MySqlSslMode::VerifyIdentity);
    }
    // Every DATETIME tickler reads or writes is UTC, whatever the server's
    // default time zone; CURRENT_TIMESTAMP defaults follow the session zone.
    // sqlx adds PIPES_AS_CONCAT to the session's sql_mode unless told not
    // to; vtgate (Vitess) refuses that mode, and tickler never uses `||`.
    Ok(options
        .timezone(Some("+00:00".to_owned()))
        .charset("utf8mb4")
        .pipes_as_concat(false)
        .disable_statement_logging())
}

/// Whether the server is TiDB (its `VERSION()` says so, e.g.
/// `8.0.11-TiDB-v7.5.1`).
pub async fn server_is_tidb(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    Ok(server_version(conn).await?.contains("TiDB"))
}

/// The server's `VERSION()`: `10.11.6-MariaDB-0+deb12u1`,
/// `8.0.11-TiDB-v7.5.1`, `8.0.30-Vitess` (vtgate's own).
pub async fn server_version(conn: &mut MySqlConnection) -> Result<String, sqlx::Error> {
    let version: Vec<u8> = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(conn)
        .await?;
    Ok(String::from_utf8_lossy(&version).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beyond_loopback_the_certificate_is_verified_unless_the_url_says_otherwise() {
        assert!(url_names_ssl_mode("mysql://u:p@db/x?ssl-mode=disabled"));
        assert!(url_names_ssl_mode("mysql://u:p@db/x?a=1&sslmode=REQUIRED"));
        assert!(!url_names_ssl_mode("mysql://u:p@db/x?ssl-ca=/ca.pem"));
        assert!(!url_names_ssl_mode("mysql://u:p@db/x"));
        for host in [
            "127.0.0.1",
            "localhost",
            "::1",
            "[::1]",
            "/run/mysqld/mysqld.sock",
        ] {
            assert!(host_is_local(host), "{host}");
        }
        for host in ["db.internal", "10.0.0.5", "0.0.0.0"] {
            assert!(!host_is_local(host), "{host}");
        }
    }
}
