//! The index: the only code that speaks Redis. Redis holds the near-term
//! jobs only — ids due within the window — in one ZSET per logical shard,
//! plus an in-flight ZSET per shard for claims under a lease. It may lose
//! everything: MySQL is rebuilt into it.
//!
//! Every multi-key operation is one Lua script from `lua/`. The keys of one
//! shard share a hash tag (`{prefix:16:7}:due`, `{prefix:16:7}:inflight`
//! for shard 7 of 16) so the scripts run unchanged on Redis Cluster, where
//! nothing ever spans two shards (no pipeline either). The shard count is
//! part of the tag: a deployment whose count is raised starts on fresh keys,
//! which the loader fills from MySQL (their sentinels are missing), while
//! the reconciler drains the old ones.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::try_join_all;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Script, Value};

use crate::config::Config;
use crate::domain::clock::Clock;
use crate::domain::job::{shard_of, JobId};

pub mod scratch;
pub mod sentinel;

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
    pub next_at_ms: Option<i64>,
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
    adopt: Script,
    pace: Script,
    rate: Script,
}

/// One Redis server (a multiplexed connection that reconnects by itself),
/// a Redis Cluster (the cluster client, which follows the slots), or the
/// master a Redis Sentinel names (followed through its failovers).
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(sentinel::SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            Conn::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
            Conn::Sentinel(conn) => conn.get_db(),
        }
    }
}

/// How to reach Redis: one server, the seed nodes of a cluster, or the
/// sentinels that name the master (and the database to select on it).
// Made once at start-up: the size of its variants does not matter.
#[allow(clippy::large_enum_variant)]
pub enum RedisClient {
    Single(redis::Client),
    Cluster(redis::cluster::ClusterClient),
    Sentinel(redis::sentinel::SentinelClient, i64),
}

/// Handle to the Redis index. Cheap to clone.
#[derive(Clone)]
pub struct Index {
    conn: Conn,
    prefix: Arc<str>,
    /// The deployment's shard count (MySQL's `shard_leases` decides; the
    /// membership loop keeps this in step).
    shards: Arc<AtomicU32>,
    scripts: Arc<Scripts>,
    /// Added to Redis's `TIME` where due-ness is decided (see
    /// [`crate::domain::clock`]): 0 but under `tickler dev`.
    clock: Clock,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("prefix", &self.prefix)
            .field("shards", &self.shards())
            .field("cluster", &matches!(self.conn, Conn::Cluster(_)))
            .finish()
    }
}

/// Makes Redis follow jobs MySQL has just written: indexed at their time
/// if pending and due within `window` of `db_now`, otherwise not in Redis
/// at all; wakes the dispatcher when one was indexed. A failure is logged,
/// never returned: MySQL has the truth, and the loader and reconciler
/// repair the index.
pub async fn follow(
    index: &Index,
    window: Duration,
    wake: &tokio::sync::Notify,
    jobs: &[&crate::domain::job::Job],
    db_now: DateTime<Utc>,
) {
    use crate::domain::job::Status;
    let horizon = db_now + window;
    let (inside, outside): (Vec<&crate::domain::job::Job>, Vec<&crate::domain::job::Job>) = jobs
        .iter()
        .partition(|job| job.status == Status::Pending && job.schedule_time < horizon);
    let add: Vec<(JobId, DateTime<Utc>)> = inside.iter().map(|j| (j.id, j.schedule_time)).collect();
    let remove: Vec<JobId> = outside.iter().map(|j| j.id).collect();
    let result = async {
        index.job_add_many(&add).await?;
        index.job_remove_many(&remove).await
    };
    match result.await {
        Ok(_) if !add.is_empty() => wake.notify_one(),
        Ok(_) => {}
        Err(err) => crate::metrics::index_failed("index created or changed jobs", jobs.len(), &err),
    }
}

/// [`follow`] for jobs MySQL has just created: those due within `window`
/// of `db_now` are indexed; the others need nothing, as a job just
/// created is in Redis nowhere (a removal for each would be a Redis call
/// for every job due later than the window: most of them).
pub async fn follow_created(
    index: &Index,
    window: Duration,
    wake: &tokio::sync::Notify,
    jobs: &[&crate::domain::job::Job],
    db_now: DateTime<Utc>,
) {
    let horizon = db_now + window;
    let near: Vec<&crate::domain::job::Job> = jobs
        .iter()
        .copied()
        .filter(|job| job.schedule_time < horizon)
        .collect();
    if !near.is_empty() {
        follow(index, window, wake, &near, db_now).await;
    }
}

pub fn ms_of(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

impl Index {
    pub async fn connect(url: &str, prefix: &str, shards: u32) -> Result<Index, IndexError> {
        Index::connect_with(
            RedisClient::Single(redis::Client::open(url)?),
            prefix,
            shards,
        )
    }

    /// The index through `client` (see [`client_open`]).
    pub fn connect_with(
        client: RedisClient,
        prefix: &str,
        shards: u32,
    ) -> Result<Index, IndexError> {
        // Short timeouts: a caller blocked on a dead Redis would rather carry
        // on (MySQL has the job) than wait. Lazy: tickler starts (and its
        // API takes jobs into MySQL) while Redis is down; the connection is
        // made, and remade, on use.
        let conn = match client {
            RedisClient::Single(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(Some(Duration::from_secs(2)))
                    .set_number_of_retries(1);
                Conn::Single(ConnectionManager::new_lazy_with_config(client, config)?)
            }
            RedisClient::Cluster(client) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(Duration::from_secs(1))
                    .set_response_timeout(Duration::from_secs(2));
                Conn::Cluster(client.get_pending_async_connection_with_config(config))
            }
            RedisClient::Sentinel(client, db) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(1)))
                    .set_response_timeout(Some(Duration::from_secs(2)));
                Conn::Sentinel(sentinel::SentinelConn::new(client, db, config))
            }
        };
        Ok(Index {
            conn,
            prefix: prefix.into(),
            shards: Arc::new(AtomicU32::new(shards.max(1))),
            scripts: Arc::new(Scripts {
                claim: Script::new(include_str!("../../lua/claim.lua")),
                requeue: Script::new(include_str!("../../lua/requeue.lua")),
                remove: Script::new(include_str!("../../lua/remove.lua")),
                refeed: Script::new(include_str!("../../lua/refeed.lua")),
                adopt: Script::new(include_str!("../../lua/adopt.lua")),
                pace: Script::new(include_str!("../../lua/pace.lua")),
                rate: Script::new(include_str!("../../lua/rate.lua")),
            }),
            clock: Clock::real(),
        })
    }

    /// This handle on `clock` (`tickler dev`'s virtual clock): its claims
    /// and paces take Redis's clock plus the offset for now.
    pub fn with_clock(mut self, clock: Clock) -> Index {
        self.clock = clock;
        self
    }

    /// The clock this handle decides due-ness by.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The shard count the keys are laid out for now.
    pub fn shards(&self) -> u32 {
        self.shards.load(Ordering::Relaxed)
    }

    /// Lays the keys out for `shards` from now on (every clone of this
    /// handle follows). Returns the count before.
    pub fn shards_set(&self, shards: u32) -> u32 {
        self.shards.swap(shards.max(1), Ordering::Relaxed)
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub fn shard_of(&self, id: JobId) -> u32 {
        shard_of(id, self.shards())
    }

    /// `{prefix:count:shard}:name`: one hash tag per shard of a count.
    fn key(&self, count: u32, shard: u32, name: &str) -> String {
        format!("{{{}:{}:{}}}:{}", self.prefix, count, shard, name)
    }

    /// The due-set key of a shard.
    pub fn due_key(&self, shard: u32) -> String {
        self.key(self.shards(), shard, "due")
    }

    /// The in-flight-set key of a shard.
    pub fn inflight_key(&self, shard: u32) -> String {
        self.key(self.shards(), shard, "inflight")
    }

    /// The sentinel key of a shard: present while the shard's sets are known
    /// to hold everything they should. Redis losing its data loses it too.
    pub fn sentinel_key(&self, shard: u32) -> String {
        self.key(self.shards(), shard, "intact")
    }

    /// Whether every shard's sentinel is present. False after a FLUSHALL, a
    /// restart without persistence (of any node of a cluster), on a
    /// brand-new Redis, or after the shard count changed.
    pub async fn intact(&self) -> Result<bool, IndexError> {
        let count = self.shards();
        let checks = (0..count).map(|shard| {
            let key = self.key(count, shard, "intact");
            let mut conn = self.conn.clone();
            async move { conn.exists::<_, bool>(key).await }
        });
        let present = try_join_all(checks).await?;
        Ok(present.into_iter().all(|p| p))
    }

    /// Sets every shard's sentinel. Called *before* a full re-index, so a
    /// flush during the re-index is noticed by the next check.
    pub async fn mark_intact(&self) -> Result<(), IndexError> {
        let count = self.shards();
        let sets = (0..count).map(|shard| {
            let key = self.key(count, shard, "intact");
            let mut conn = self.conn.clone();
            async move { conn.set::<_, _, ()>(key, 1).await }
        });
        try_join_all(sets).await?;
        Ok(())
    }

    /// A shard changed owner: the previous owner's claims in its in-flight
    /// set go back to the due set, due now, so the new owner does not wait
    /// for their leases. Returns how many.
    pub async fn shard_adopt(&self, shard: u32) -> Result<u64, IndexError> {
        let count = self.shards();
        let moved: i64 = self
            .scripts
            .adopt
            .key(self.key(count, shard, "due"))
            .key(self.key(count, shard, "inflight"))
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(u64::try_from(moved).unwrap_or(0))
    }

    /// Adds back ids the index has lost, leaving alone those already due or
    /// in flight. Returns how many were added.
    pub async fn job_refeed_many(
        &self,
        jobs: &[(JobId, DateTime<Utc>)],
    ) -> Result<u64, IndexError> {
        let mut added = 0;
        let count = self.shards();
        for (shard, entries) in group_by_shard(count, jobs.iter().map(|(id, at)| (*id, ms_of(*at))))
        {
            let mut invocation = self.scripts.refeed.key(self.key(count, shard, "due"));
            invocation.key(self.key(count, shard, "inflight"));
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
        let count = self.shards();
        let adds = group_by_shard(count, jobs.iter().map(|(id, at)| (*id, ms_of(*at))))
            .into_iter()
            .map(|(shard, entries)| {
                let key = self.key(count, shard, "due");
                let members: Vec<(i64, JobId)> =
                    entries.into_iter().map(|(id, ms)| (ms, id)).collect();
                let mut conn = self.conn.clone();
                async move { conn.zadd_multiple::<_, _, _, ()>(key, &members).await }
            });
        try_join_all(adds).await?;
        Ok(())
    }

    /// Claims up to `limit` ids of `shard` due within `lookahead` (by
    /// Redis's clock) under a lease.
    pub async fn job_claim(
        &self,
        shard: u32,
        limit: u32,
        lease: Duration,
        lookahead: Duration,
    ) -> Result<Claim, IndexError> {
        let count = self.shards();
        let reply: Vec<i64> = self
            .scripts
            .claim
            .key(self.key(count, shard, "due"))
            .key(self.key(count, shard, "inflight"))
            .arg(limit)
            .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
            .arg(u64::try_from(lookahead.as_millis()).unwrap_or(u64::MAX))
            .arg(self.clock.offset_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        let [now_ms, next_at_ms, requeued, ids @ ..] = reply.as_slice() else {
            return Err(IndexError::Protocol(format!("claim returned {reply:?}")));
        };
        Ok(Claim {
            shard,
            now_ms: *now_ms,
            next_at_ms: (*next_at_ms >= 0).then_some(*next_at_ms),
            requeued: u64::try_from(*requeued).unwrap_or(0),
            ids: ids.iter().map(|id| *id as JobId).collect(),
        })
    }

    /// Asks the topic's shared pace for `n` jobs to go now at `rate` a
    /// second, with a burst of `tick`. Returns how many may go, and the
    /// time (ms, Redis's clock) from which the refused ones are spread at
    /// the rate, in order, after every job refused before them.
    ///
    /// `fair`: keep no backlog (a topic whose jobs are grouped): the
    /// refused jobs are spread from the next free instant, so each pass's
    /// groups, served round-robin, share the pace rather than queue behind
    /// what was refused before.
    pub async fn pace(
        &self,
        topic: &str,
        n: usize,
        rate: u32,
        tick: Duration,
        fair: bool,
    ) -> Result<(usize, i64), IndexError> {
        let key = format!("{{{}:pace:{}}}", self.prefix, topic);
        self.pace_on(key, n, 0, rate, tick, fair).await
    }

    /// The pace of one group of a topic's jobs (fair dispatch by tenant),
    /// as [`Index::pace`] with a backlog of the group's own.
    pub async fn pace_group(
        &self,
        topic: &str,
        group: &str,
        n: usize,
        rate: u32,
        tick: Duration,
    ) -> Result<(usize, i64), IndexError> {
        let key = format!("{{{}:pace:{}}}:g:{}", self.prefix, topic, group);
        self.pace_on(key, n, 0, rate, tick, false).await
    }

    /// The deployment-wide pace of jobs with a flexible window
    /// (`dispatcher.smooth_per_second`): `forced` jobs go now whatever it
    /// says and take their share of it first; of the `n` others, as many as
    /// it lets through. Returns that number and the time from which the
    /// refused ones are spread, as [`Index::pace`].
    pub async fn smooth(
        &self,
        n: usize,
        forced: usize,
        rate: u32,
        tick: Duration,
    ) -> Result<(usize, i64), IndexError> {
        let key = format!("{{{}:smooth}}", self.prefix);
        self.pace_on(key, n, forced, rate, tick, false).await
    }

    /// Takes from the rate `bucket` (an API token's requests or jobs),
    /// shared by every instance: `need` or nothing, and up to `want` while
    /// there is room. Returns what was granted (0 or `need` ..= `want`) and,
    /// when 0, how long until `need` fits.
    pub async fn rate_take(
        &self,
        bucket: &str,
        need: u32,
        want: u32,
        per_second: u32,
    ) -> Result<(u32, Duration), IndexError> {
        let key = format!("{{{}:rate:{}}}", self.prefix, bucket);
        let reply: Vec<i64> = self
            .scripts
            .rate
            .key(key)
            .arg(need)
            .arg(want.max(need))
            .arg(per_second.max(1))
            .invoke_async(&mut self.conn.clone())
            .await?;
        let [granted, retry_ms] = reply.as_slice() else {
            return Err(IndexError::Protocol(format!("rate returned {reply:?}")));
        };
        Ok((
            u32::try_from(*granted).unwrap_or(0),
            Duration::from_millis(u64::try_from(*retry_ms).unwrap_or(0)),
        ))
    }

    async fn pace_on(
        &self,
        key: String,
        n: usize,
        forced: usize,
        rate: u32,
        tick: Duration,
        fair: bool,
    ) -> Result<(usize, i64), IndexError> {
        let reply: Vec<i64> = self
            .scripts
            .pace
            .key(key)
            .arg(n)
            .arg(rate.max(1))
            .arg(u64::try_from(tick.as_millis()).unwrap_or(u64::MAX))
            .arg(forced)
            .arg(if fair { "1" } else { "0" })
            .arg(self.clock.offset_ms())
            .invoke_async(&mut self.conn.clone())
            .await?;
        let [granted, slot] = reply.as_slice() else {
            return Err(IndexError::Protocol(format!("pace returned {reply:?}")));
        };
        Ok((usize::try_from(*granted).unwrap_or(0).min(n), *slot))
    }

    /// Returns claimed ids to their due sets at the given times.
    pub async fn job_requeue_many(&self, jobs: &[(JobId, i64)]) -> Result<(), IndexError> {
        let count = self.shards();
        for (shard, entries) in group_by_shard(count, jobs.iter().copied()) {
            let mut invocation = self.scripts.requeue.key(self.key(count, shard, "due"));
            invocation.key(self.key(count, shard, "inflight"));
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
        let count = self.shards();
        for (shard, entries) in group_by_shard(count, ids.iter().map(|id| (*id, 0))) {
            let mut invocation = self.scripts.remove.key(self.key(count, shard, "due"));
            invocation.key(self.key(count, shard, "inflight"));
            for (id, _) in entries {
                invocation.arg(id);
            }
            let count: i64 = invocation.invoke_async(&mut self.conn.clone()).await?;
            removed += u64::try_from(count).unwrap_or(0);
        }
        Ok(removed)
    }

    /// Every id of the current layout: due ones with their times (ms), and
    /// in-flight ones. For the doctor, which compares them with MySQL.
    pub async fn members(&self) -> Result<(Vec<(JobId, i64)>, Vec<JobId>), IndexError> {
        let count = self.shards();
        let mut due = Vec::new();
        let mut inflight = Vec::new();
        for shard in 0..count {
            let mut conn = self.conn.clone();
            let entries: Vec<(JobId, f64)> = conn
                .zrange_withscores(self.key(count, shard, "due"), 0, -1)
                .await?;
            due.extend(entries.into_iter().map(|(id, ms)| (id, ms as i64)));
            let ids: Vec<JobId> = conn
                .zrange(self.key(count, shard, "inflight"), 0, -1)
                .await?;
            inflight.extend(ids);
        }
        Ok((due, inflight))
    }

    /// Redis's clock (`TIME`, plus `tickler dev`'s offset), in milliseconds
    /// since the epoch.
    pub async fn now_ms(&self) -> Result<i64, IndexError> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(secs * 1000 + micros / 1000 + self.clock.offset_ms())
    }

    /// Where `id` sits in the index, if anywhere.
    pub async fn job_locate(&self, id: JobId) -> Result<Option<Location>, IndexError> {
        let count = self.shards();
        let shard = shard_of(id, count);
        let mut conn = self.conn.clone();
        let due: Option<f64> = conn.zscore(self.key(count, shard, "due"), id).await?;
        if let Some(ms) = due {
            return Ok(Some(Location::Due(ms as i64)));
        }
        let inflight: Option<f64> = conn.zscore(self.key(count, shard, "inflight"), id).await?;
        Ok(inflight.map(|ms| Location::InFlight(ms as i64)))
    }

    /// Moves what the key layout of `old` shards still holds into the
    /// current layout (due ids at their times, in-flight ones due now —
    /// MySQL's compare-and-set decides), leaving alone ids the current
    /// layout has already; then deletes the old keys. Run after the shard
    /// count changed, until instances still on the old count have
    /// followed. Returns how many ids moved.
    pub async fn drain_layout(&self, old: u32) -> Result<u64, IndexError> {
        const CHUNK: isize = 1000;
        if old == self.shards() {
            return Ok(0);
        }
        let mut conn = self.conn.clone();
        let mut moved = 0;
        for shard in 0..old {
            let now_ms = Utc::now().timestamp_millis();
            for (name, keep_score) in [("due", true), ("inflight", false)] {
                let key = self.key(old, shard, name);
                loop {
                    let entries: Vec<(JobId, f64)> =
                        conn.zrange_withscores(&key, 0, CHUNK - 1).await?;
                    if entries.is_empty() {
                        break;
                    }
                    let back: Vec<(JobId, DateTime<Utc>)> = entries
                        .iter()
                        .map(|(id, score)| {
                            let ms = if keep_score { *score as i64 } else { now_ms };
                            (
                                *id,
                                DateTime::from_timestamp_millis(ms).unwrap_or_else(Utc::now),
                            )
                        })
                        .collect();
                    moved += self.job_refeed_many(&back).await?;
                    let ids: Vec<JobId> = entries.iter().map(|(id, _)| *id).collect();
                    conn.zrem::<_, _, ()>(&key, ids).await?;
                }
            }
            conn.del::<_, ()>(self.key(old, shard, "intact")).await?;
        }
        Ok(moved)
    }

    /// Ids in the due set of every shard, and in-flight ones. For operators
    /// and tests; two `ZCARD`s a shard, every shard's at once (no pipeline:
    /// on a Redis Cluster the shards' keys live on different nodes).
    pub async fn len(&self) -> Result<(u64, u64), IndexError> {
        self.len_of(self.shards()).await
    }

    /// `len` of the keys laid out for `count` shards.
    pub async fn len_of(&self, count: u32) -> Result<(u64, u64), IndexError> {
        let cards = (0..count).map(|shard| {
            let (due, inflight) = (
                self.key(count, shard, "due"),
                self.key(count, shard, "inflight"),
            );
            let mut conn = self.conn.clone();
            async move {
                let due: u64 = conn.zcard(due).await?;
                let inflight: u64 = conn.zcard(inflight).await?;
                Ok::<_, redis::RedisError>((due, inflight))
            }
        });
        let counts = try_join_all(cards).await?;
        Ok(counts
            .into_iter()
            .fold((0, 0), |(d, i), (due, inflight)| (d + due, i + inflight)))
    }

    pub async fn ping(&self) -> Result<(), IndexError> {
        redis::cmd("PING")
            .query_async::<String>(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

fn group_by_shard(
    count: u32,
    entries: impl Iterator<Item = (JobId, i64)>,
) -> BTreeMap<u32, Vec<(JobId, i64)>> {
    let mut groups: BTreeMap<u32, Vec<(JobId, i64)>> = BTreeMap::new();
    for (id, ms) in entries {
        groups
            .entry(shard_of(id, count))
            .or_default()
            .push((id, ms));
    }
    groups
}

/// The seed URLs in `redis.url`: one, or several comma-separated (a
/// Sentinel URL, whose commas separate sentinels, is one).
pub fn redis_urls(config: &Config) -> Vec<&str> {
    if sentinel::is_sentinel_url(&config.redis.url) {
        return vec![config.redis.url.trim()];
    }
    config
        .redis
        .url
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

/// The Redis client the settings ask for: `redis.url` (with several
/// comma-separated seed URLs, or `redis.cluster = true`, a Redis Cluster;
/// `redis+sentinel://`, the master a Sentinel names), and for TLS the CA
/// (`redis.tls_ca`; the system's roots otherwise) and the client
/// certificate and key (`redis.tls_cert`, `redis.tls_key`).
pub fn client_open(config: &Config) -> Result<RedisClient, String> {
    let urls = redis_urls(config);
    let certificates = tls_certificates(config)?;
    if sentinel::is_sentinel_url(&config.redis.url) {
        let url = sentinel::SentinelUrl::parse(config.redis.url.trim())
            .map_err(|problem| format!("redis.url (sentinel): {problem}"))?;
        return sentinel::client_build(&url, certificates)
            .map(|client| RedisClient::Sentinel(client, url.db))
            .map_err(|err| format!("redis.url (sentinel): {err}"));
    }
    if config.redis.cluster || urls.len() > 1 {
        let mut builder = redis::cluster::ClusterClient::builder(urls);
        if let Some(certificates) = certificates {
            builder = builder.certs(certificates);
        }
        return builder
            .build()
            .map(RedisClient::Cluster)
            .map_err(|err| format!("redis.url (cluster seeds): {err}"));
    }
    single_client(urls.first().copied().unwrap_or_default(), certificates).map(RedisClient::Single)
}

fn single_client(
    url: &str,
    certificates: Option<redis::TlsCertificates>,
) -> Result<redis::Client, String> {
    match certificates {
        None => redis::Client::open(url).map_err(|err| format!("redis.url: {err}")),
        Some(certificates) => redis::Client::build_with_tls(url, certificates)
            .map_err(|err| format!("redis.url with redis.tls_*: {err}")),
    }
}

fn tls_certificates(config: &Config) -> Result<Option<redis::TlsCertificates>, String> {
    let tls_files = [
        &config.redis.tls_ca,
        &config.redis.tls_cert,
        &config.redis.tls_key,
    ];
    if tls_files.iter().all(|file| file.is_none()) {
        return Ok(None);
    }
    let read = |setting: &str, path: &str| {
        std::fs::read(path).map_err(|err| format!("{setting} ({path}): {err}"))
    };
    let root_cert = match &config.redis.tls_ca {
        Some(path) => Some(read("redis.tls_ca", path)?),
        None => None,
    };
    let client_tls = match (&config.redis.tls_cert, &config.redis.tls_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read("redis.tls_cert", cert)?,
            client_key: read("redis.tls_key", key)?,
        }),
        _ => None,
    };
    Ok(Some(redis::TlsCertificates {
        client_tls,
        root_cert,
    }))
}

/// Connects once, at start-up, to tell a TLS failure (wrong CA, expired
/// or mismatched certificate) from a Redis that is merely down: the first
/// stops start-up, naming the settings and the host; the second does not
/// (jobs are kept in MySQL until Redis is back). For a cluster, the first
/// seed stands for all.
pub async fn tls_probe(config: &Config) -> Result<(), String> {
    let Some(url) = redis_urls(config).first().copied() else {
        return Err("redis.url: empty".to_owned());
    };
    // A Sentinel URL's TLS is tried on first use, through the sentinels.
    if !url.starts_with("rediss://") {
        return Ok(());
    }
    let client = single_client(url, tls_certificates(config)?)?;
    let target = url_redacted(url);
    let connected = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await;
    match connected {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) if is_tls_failure(&err.to_string()) => Err(format!(
            "redis.url: TLS to {target} failed: {err} (check redis.tls_ca, redis.tls_cert and redis.tls_key)"
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

/// `url` without its password (nor its query, where a sentinel's password
/// may be), for messages.
pub fn url_redacted(url: &str) -> String {
    let url = url.split_once('?').map_or(url, |(url, _)| url);
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, host))) => format!("{scheme}://{host}"),
        _ => url.to_owned(),
    }
}
