//! Redis with Sentinel: the master a set of sentinels names, followed
//! through its failovers.
//!
//! `redis.url` names the sentinels and the master's name:
//!
//! ```text
//! redis+sentinel://[user:password@]host[:port][,host[:port]...]/master-name[/db][?sentinel_username=...&sentinel_password=...]
//! rediss+sentinel://...   (TLS to the sentinels and to the master)
//! ```
//!
//! The user and password are the master's (and its replicas'); sentinels
//! often have none or their own, given by the query. Port 26379 unless
//! said.
//!
//! One multiplexed connection to the master is kept and shared. It is
//! forgotten when it breaks or times out, or when the server answers
//! `READONLY` (a demoted master that has not yet closed its clients): the
//! next command asks the sentinels again. A master killed and replaced
//! loses its last writes; the index is only a cache of MySQL, so the loader
//! and the reconciler put back what went missing (see docs/faults.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use percent_encoding::percent_decode_str;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, ConnectionAddr, Pipeline, RedisError, RedisFuture, Value};

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// How long finding the master may take before a command fails as
/// unavailable (the caller carries on: MySQL has the job).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);

/// A `redis+sentinel://` URL, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelUrl {
    pub tls: bool,
    pub sentinels: Vec<(String, u16)>,
    pub master_name: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

/// Whether `url` names Redis through Sentinel.
pub fn is_sentinel_url(url: &str) -> bool {
    url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
}

impl SentinelUrl {
    pub fn parse(url: &str) -> Result<SentinelUrl, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            (true, rest)
        } else {
            return Err("must start with redis+sentinel:// or rediss+sentinel://".to_owned());
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                (non_empty(decoded(user)?), non_empty(decoded(password)?))
            }
        };
        let sentinels = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(host_port)
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err("names no sentinel (redis+sentinel://host:26379/master-name)".to_owned());
        }
        let mut segments = path.split('/').filter(|s| !s.is_empty());
        let master_name = match segments.next() {
            Some(name) => decoded(name)?,
            None => {
                return Err("names no master (redis+sentinel://host:26379/master-name)".to_owned())
            }
        };
        let db = match segments.next() {
            None => 0,
            Some(db) => db
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| format!("has database {db:?}: expected a number"))?,
        };
        if let Some(extra) = segments.next() {
            return Err(format!("has {extra:?} after the database"));
        }
        let mut sentinel_username = None;
        let mut sentinel_password = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sentinel_username" => sentinel_username = non_empty(decoded(value)?),
                "sentinel_password" => sentinel_password = non_empty(decoded(value)?),
                other => {
                    return Err(format!(
                    "has unknown parameter {other:?} (known: sentinel_username, sentinel_password)"
                ))
                }
            }
        }
        Ok(SentinelUrl {
            tls,
            sentinels,
            master_name,
            db,
            username,
            password,
            sentinel_username,
            sentinel_password,
        })
    }
}

fn decoded(text: &str) -> Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| "has a percent-encoded part that is not UTF-8".to_owned())
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

fn host_port(text: &str) -> Result<(String, u16), String> {
    // `[::1]:26379`, `host:26379`, `host`.
    let (host, port) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("has sentinel {text:?} without its closing ']'"))?;
            (host, after.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| format!("has sentinel {text:?} with port {port:?}: expected a number"))?,
    };
    if host.is_empty() {
        return Err(format!("has sentinel {text:?} without a host"));
    }
    Ok((host.to_owned(), port))
}

/// The Sentinel client `url` asks for, with `certificates` for TLS (to the
/// sentinels and the master alike).
pub fn client_build(
    url: &SentinelUrl,
    certificates: Option<redis::TlsCertificates>,
) -> Result<SentinelClient, RedisError> {
    let addrs = url.sentinels.iter().map(|(host, port)| {
        if url.tls {
            ConnectionAddr::TcpTls {
                host: host.clone(),
                port: *port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.clone(), *port)
        }
    });
    let mut builder =
        SentinelClientBuilder::new(addrs, &url.master_name, SentinelServerType::Master)?
            .set_client_to_redis_db(url.db);
    if url.tls {
        builder = builder
            .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure);
        if let Some(certificates) = certificates {
            builder = builder
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_certificates(certificates);
        }
    }
    if let Some(username) = &url.username {
        builder = builder.set_client_to_redis_username(username);
    }
    if let Some(password) = &url.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(username) = &url.sentinel_username {
        builder = builder.set_client_to_sentinel_username(username);
    }
    if let Some(password) = &url.sentinel_password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    builder.build()
}

/// The connection to whichever server the sentinels name master now.
/// Cheap to clone; clones share the connection.
#[derive(Clone)]
pub(super) struct SentinelConn(Arc<Inner>);

struct Inner {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
    db: i64,
}

impl SentinelConn {
    pub(super) fn new(client: SentinelClient, db: i64, config: AsyncConnectionConfig) -> Self {
        SentinelConn(Arc::new(Inner {
            sentinel: tokio::sync::Mutex::new(client),
            current: Mutex::new(None),
            config,
            db,
        }))
    }

    fn current(&self) -> Option<MultiplexedConnection> {
        // A poisoned lock only means a panic elsewhere while holding a
        // clone of the connection: the value is still whole.
        self.0
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The shared connection, asking the sentinels for the master first
    /// when there is none. One caller asks; the others wait for its answer.
    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let mut sentinel = self.0.sentinel.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let resolve = async {
            let client = sentinel.async_get_client().await?;
            client
                .get_multiplexed_async_connection_with_config(&self.0.config)
                .await
        };
        let conn = match tokio::time::timeout(RESOLVE_TIMEOUT, resolve).await {
            Ok(conn) => conn?,
            Err(_) => {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no master found through the sentinels in time",
                )))
            }
        };
        tracing::info!(target: "tickler::index", "redis master found through the sentinels");
        *self.0.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after an error that says it points at the
    /// wrong server or at none: the next command asks the sentinels.
    fn forget_after(&self, err: &RedisError) {
        if must_reresolve(err) {
            *self.0.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }
}

/// Errors after which the master is looked up again: the connection is
/// gone or silent, or the server is a replica now (`READONLY`).
fn must_reresolve(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        || err.code() == Some("READONLY")
        || err.code() == Some("MASTERDOWN")
        || err.code() == Some("LOADING")
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            if let Err(err) = &result {
                self.forget_after(err);
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(err) = &result {
                self.forget_after(err);
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.0.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_the_sentinels_the_master_and_the_credentials() {
        let url = SentinelUrl::parse(
            "redis+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/orders/2?sentinel_password=sp",
        )
        .unwrap();
        assert_eq!(
            url,
            SentinelUrl {
                tls: false,
                sentinels: vec![
                    ("s1".to_owned(), 26380),
                    ("s2".to_owned(), 26379),
                    ("::1".to_owned(), 26381)
                ],
                master_name: "orders".to_owned(),
                db: 2,
                username: Some("app".to_owned()),
                password: Some("p@ss".to_owned()),
                sentinel_username: None,
                sentinel_password: Some("sp".to_owned()),
            }
        );
        let url = SentinelUrl::parse("rediss+sentinel://:pw@s1/m").unwrap();
        assert!(url.tls);
        assert_eq!(url.username, None);
        assert_eq!(url.password.as_deref(), Some("pw"));
        assert_eq!(url.db, 0);
    }

    #[test]
    fn a_sentinel_url_without_a_master_or_a_sentinel_or_with_junk_is_refused() {
        for (url, says) in [
            ("redis+sentinel://s1:26379", "names no master"),
            ("redis+sentinel://s1:26379/", "names no master"),
            ("redis+sentinel:///m", "names no sentinel"),
            ("redis+sentinel://s1:x/m", "expected a number"),
            ("redis+sentinel://s1/m/zero", "expected a number"),
            ("redis+sentinel://s1/m/0/x", "after the database"),
            ("redis+sentinel://s1/m?password=x", "unknown parameter"),
            ("redis://s1/m", "must start with"),
        ] {
            let err = SentinelUrl::parse(url).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn a_connection_is_looked_up_again_after_readonly_or_a_broken_socket() {
        let readonly = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "READONLY",
            "You can't write against a read only replica.".to_owned(),
        ));
        assert!(must_reresolve(&readonly), "{readonly:?}");
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(must_reresolve(&io));
        let script = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR",
            "wrong number of arguments".to_owned(),
        ));
        assert!(
            !must_reresolve(&script),
            "a script's own error keeps the connection"
        );
    }
}
