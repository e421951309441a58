//! The index: the only code that speaks Redis. Redis holds the near-term
//! jobs only — ids due within the window — in one ZSET per logical shard,
//! plus an in-flight ZSET per shard for claims under a lease. It may lose
//! everything: MySQL is rebuilt into it.
//!
//! Every multi-key operation is one Lua script from `lua/`. The keys of one
//! shard share a hash tag (`{prefix:7}:due`, `{prefix:7}:inflight`) so the
//! scripts run unchanged on Redis Cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Script};

use crate::config::Config;
use crate::job::{shard_of, JobId};

pub mod support;

/// Index failures. Redis is never the truth, so callers log these and carry
/// on: a lost write costs latency (the reconciler repairs it), not a job.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("redis is unavailable: {0}")]
    Unavailable(#[from] redis::RedisError),
    #[error("unexpected reply from a script: {0}")]
    Protocol(String),
}

/// What a claim took from one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub shard: u32,
    /// Redis's clock when the claim ran, ms since the epoch.
    pub now_ms: i64,
    /// When this shard next needs attention (earliest due time or lease
    /// expiry left), ms since the epoch; None when the shard is empty.
    pub next_ms: Option<i64>,
    /// Expired leases returned to the due set by this claim.
    pub requeued: u64,
    pub ids: Vec<JobId>,
}

/// Where an id sits in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// In the due set, due at this time (ms since the epoch).
    Due(i64),
    /// Claimed, with the lease expiring at this time (ms since the epoch).
    InFlight(i64),
}

struct Scripts {
    claim: Script,
    requeue: Script,
    remove: Script,
    refeed: Script,
}

/// Handle to the Redis index. Cheap to clone; one multiplexed connection
/// that reconnects by itself.
#[derive(Clone)]
pub struct Index {
    conn: ConnectionManager,
    prefix: Arc<str>,
    shards: u32,
    scripts: Arc<Scripts>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("prefix", &self.prefix)
            .field("shards", &self.shards)
            .finish()
    }
}

pub fn ms_of(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

impl Index {
    pub async fn connect(url: &str, prefix: &str, shards: u32) -> Result<Index, IndexError> {
        Index::connect_with(redis::Client::open(url)?, prefix, shards)
    }

    /// The index through `client` (see [`client_open`]).
    pub fn connect_with(
        client: redis::Client,
        prefix: &str,
        shards: u32,
    ) -> Result<Index, IndexError> {
        // Short timeouts: a caller blocked on a dead Redis would rather carry
        // on (MySQL has the job) than wait.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_number_of_retries(1);
        // Lazy: tickler starts (and its API takes jobs into MySQL) while
        // Redis is down; the connection is made, and remade, on use.
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Index {
            conn,
            prefix: prefix.into(),
            shards: shards.max(1),
            scripts: Arc::new(Scripts {
                claim: Script::new(include_str!("../../lua/claim.lua")),
                requeue: Script::new(include_str!("../../lua/requeue.lua")),
                remove: Script::new(include_str!("../../lua/remove.lua")),
                refeed: Script::new(include_str!("../../lua/refeed.lua")),
            }),
        })
    }

    pub fn shards(&self) -> u32 {
        self.shards
    }

    pub fn shard_of(&self, id: JobId) -> u32 {
        shard_of(id, self.shards)
    }

    /// The due-set key of a shard.
    pub fn due_key(&self, shard: u32) -> String {
        format!("{{{}:{}}}:due", self.prefix, shard)
    }

    /// The in-flight-set key of a shard.
    pub fn inflight_key(&self, shard: u32) -> String {
        format!("{{{}:{}}}:inflight", self.prefix, shard)
    }

    /// The sentinel key of a shard: present while the shard's sets are known
    /// to hold everything they should. Redis losing its data loses it too.
    pub fn sentinel_key(&self, shard: u32) -> String {
        format!("{{{}:{}}}:intact", self.prefix, shard)
    }

    /// Whether every shard's sentinel is present. False after a FLUSHALL, a
    /// restart without persistence, or on a brand-new Redis.
    pub async fn intact(&self) -> Result<bool, IndexError> {
        let mut pipe = redis::pipe();
        for shard in 0..self.shards {
            pipe.exists(self.sentinel_key(shard));
        }
        let present: Vec<bool> = pipe.query_async(&mut self.conn.clone()).await?;
        Ok(present.into_iter().all(|p| p))
    }

    /// Sets every shard's sentinel. Called *before* a full re-index, so a
    /// flush during the re-index is noticed by the next check.
    pub async fn mark_intact(&self) -> Result<(), IndexError> {
        let mut pipe = redis::pipe();
        for shard in 0..self.shards {
            pipe.set(self.sentinel_key(shard), 1).ignore();
        }
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Adds back ids the index has lost, leaving alone those already due or
    /// in flight. Returns how many were added.
    pub async fn job_refeed_many(
        &self,
        jobs: &[(JobId, DateTime<Utc>)],
    ) -> Result<u64, IndexError> {
        let mut added = 0;
        for (shard, entries) in self.group_by_shard(jobs.iter().map(|(id, at)| (*id, ms_of(*at)))) {
            let mut invocation = self.scripts.refeed.key(self.due_key(shard));
            invocation.key(self.inflight_key(shard));
            for (id, ms) in entries {
                invocation.arg(id).arg(ms);
            }
            let count: i64 = invocation.invoke_async(&mut self.conn.clone()).await?;
            added += u64::try_from(count).unwrap_or(0);
        }
        Ok(added)
    }

    /// Indexes jobs at their due times. Idempotent: re-adding an id moves it
    /// to the given time.
    pub async fn job_add_many(&self, jobs: &[(JobId, DateTime<Utc>)]) -> Result<(), IndexError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (shard, entries) in self.group_by_shard(jobs.iter().map(|(id, at)| (*id, ms_of(*at)))) {
            let members: Vec<(i64, JobId)> = entries.into_iter().map(|(id, ms)| (ms, id)).collect();
            pipe.zadd_multiple(self.due_key(shard), &members).ignore();
        }
        pipe.query_async::<()>(&mut self.conn.clone()).await?;
        Ok(())
    }

    /// Claims up to `limit` due ids of `shard` under a lease.
    pub async fn job_claim(
        &self,
        shard: u32,
        limit: u32,
        lease: Duration,
    ) -> Result<Claim, IndexError> {
        let reply: Vec<i64> = self
            .scripts
            .claim
            .key(self.due_key(shard))
            .key(self.inflight_key(shard))
            .arg(limit)
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let [now_ms, next_ms, requeued, ids @ ..] = reply.as_slice() else {
            return Err(IndexError::Protocol(format!("claim returned {reply:?}")));
        };
        Ok(Claim {
            shard,
            now_ms: *now_ms,
            next_ms: (*next_ms >= 0).then_some(*next_ms),
            requeued: u64::try_from(*requeued).unwrap_or(0),
            ids: ids.iter().map(|id| *id as JobId).collect(),
        })
    }

    /// Returns claimed ids to their due sets at the given times.
    pub async fn job_requeue_many(&self, jobs: &[(JobId, i64)]) -> Result<(), IndexError> {
        for (shard, entries) in self.group_by_shard(jobs.iter().copied()) {
            let mut invocation = self.scripts.requeue.key(self.due_key(shard));
            invocation.key(self.inflight_key(shard));
            for (id, ms) in entries {
                invocation.arg(id).arg(ms);
            }
            invocation
                .invoke_async::<i64>(&mut self.conn.clone())
                .await?;
        }
        Ok(())
    }

    /// Forgets ids entirely (due and in-flight). Returns entries removed.
    pub async fn job_remove_many(&self, ids: &[JobId]) -> Result<u64, IndexError> {
        let mut removed = 0;
        for (shard, entries) in self.group_by_shard(ids.iter().map(|id| (*id, 0))) {
            let mut invocation = self.scripts.remove.key(self.due_key(shard));
            invocation.key(self.inflight_key(shard));
            for (id, _) in entries {
                invocation.arg(id);
            }
            let count: i64 = invocation.invoke_async(&mut self.conn.clone()).await?;
            removed += u64::try_from(count).unwrap_or(0);
        }
        Ok(removed)
    }

    /// Where `id` sits in the index, if anywhere.
    pub async fn job_locate(&self, id: JobId) -> Result<Option<Location>, IndexError> {
        let shard = self.shard_of(id);
        let mut conn = self.conn.clone();
        let due: Option<f64> = conn.zscore(self.due_key(shard), id).await?;
        if let Some(ms) = due {
            return Ok(Some(Location::Due(ms as i64)));
        }
        let inflight: Option<f64> = conn.zscore(self.inflight_key(shard), id).await?;
        Ok(inflight.map(|ms| Location::InFlight(ms as i64)))
    }

    /// Ids in the due set of every shard, and in-flight ones. For operators
    /// and tests; one pipelined round trip.
    pub async fn len(&self) -> Result<(u64, u64), IndexError> {
        let mut pipe = redis::pipe();
        for shard in 0..self.shards {
            pipe.zcard(self.due_key(shard))
                .zcard(self.inflight_key(shard));
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.conn.clone()).await?;
        let due = counts.iter().step_by(2).sum();
        let inflight = counts.iter().skip(1).step_by(2).sum();
        Ok((due, inflight))
    }

    pub async fn ping(&self) -> Result<(), IndexError> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    fn group_by_shard(
        &self,
        entries: impl Iterator<Item = (JobId, i64)>,
    ) -> BTreeMap<u32, Vec<(JobId, i64)>> {
        let mut groups: BTreeMap<u32, Vec<(JobId, i64)>> = BTreeMap::new();
        for (id, ms) in entries {
            groups.entry(self.shard_of(id)).or_default().push((id, ms));
        }
        groups
    }
}

/// The Redis client the settings ask for: `redis_url`, and for
/// `rediss://` the CA (`redis_tls_ca`; the system's roots otherwise) and
/// the client certificate and key (`redis_tls_cert`, `redis_tls_key`).
pub fn client_open(config: &Config) -> Result<redis::Client, String> {
    let url = config.redis_url.as_str();
    let tls_files = [
        &config.redis_tls_ca,
        &config.redis_tls_cert,
        &config.redis_tls_key,
    ];
    if tls_files.iter().all(|file| file.is_none()) {
        return redis::Client::open(url).map_err(|err| format!("redis_url: {err}"));
    }
    let read = |setting: &str, path: &str| {
        std::fs::read(path).map_err(|err| format!("{setting} ({path}): {err}"))
    };
    let root_cert = match &config.redis_tls_ca {
        Some(path) => Some(read("redis_tls_ca", path)?),
        None => None,
    };
    let client_tls = match (&config.redis_tls_cert, &config.redis_tls_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("redis_tls_cert", cert)?,
            client_key: read("redis_tls_key", key)?,
        }),
        _ => None,
    };
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|err| format!("redis_url with redis_tls_*: {err}"))
}

/// Connects once, at start-up, to tell a TLS failure (wrong CA, expired
/// or mismatched certificate) from a Redis that is merely down: the first
/// stops start-up, naming the settings and the host; the second does not
/// (jobs are kept in MySQL until Redis is back).
pub async fn tls_probe(client: &redis::Client, url: &str) -> Result<(), String> {
    if !url.starts_with("rediss://") {
        return Ok(());
    }
    let target = url_redacted(url);
    let connected = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await;
    match connected {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) if is_tls_failure(&err.to_string()) => Err(format!(
            "redis_url: TLS to {target} failed: {err} (check redis_tls_ca, redis_tls_cert and redis_tls_key)"
        )),
        Ok(Err(err)) => {
            tracing::warn!(%target, error = %err, "redis does not answer yet; starting all the same");
            Ok(())
        }
        Err(_) => {
            tracing::warn!(%target, "redis did not answer within 5 s; starting all the same");
            Ok(())
        }
    }
}

fn is_tls_failure(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["certificate", "tls", "ssl", "handshake", "unknownissuer"]
        .iter()
        .any(|word| message.contains(word))
}

/// `url` without its password, for messages.
pub fn url_redacted(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
        _ => url.to_owned(),
    }
}
