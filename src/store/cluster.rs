//! Instances and shard leases: `instances` (who is alive, by heartbeats on
//! the database's clock) and `shard_leases` (who alone claims each shard,
//! with an epoch that grows with every change of owner).
//!
//! What a crash leaves behind: an instance killed mid-round keeps its row
//! and its leases; its heartbeat ages past the TTL, after which everyone
//! treats it as dead: its shards are taken over (epoch + 1) and its
//! `dispatching` rows rescued (`job_rescue_dead`, with the other writes of
//! the dispatch path in dispatch.rs).

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::handle::Store;
use super::sql::micros;
use crate::config::Role;
use crate::domain::zones;

/// Who an instance is, as its row says.
#[derive(Debug, Clone)]
pub struct InstanceInfo {
    pub host: String,
    pub pid: u32,
    /// The process-id namespace (`/proc/self/ns/pid`), where known: a pid
    /// says something only within it.
    pub pid_namespace: Option<String>,
    pub version: String,
    /// Comma-separated roles.
    pub roles: String,
    /// Its `cluster.instance_ttl_ms`: the others take it for dead by this.
    pub ttl: Option<Duration>,
    /// Its `kafka.message_timeout_ms` + `kafka.doubt_margin_ms`: how long its
    /// claims stay in doubt once it is dead.
    pub quiet: Option<Duration>,
    /// The `ingress.group` whose request partitions it reads, if any.
    pub ingress_group: Option<String>,
    /// The ids of the encryption keys it holds, comma-separated (None:
    /// not said).
    pub enc_keys: Option<String>,
}

/// A row of `instances`, with whether it is alive by the database's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRow {
    pub id: u64,
    pub host: String,
    pub pid: u32,
    pub pid_namespace: Option<String>,
    pub version: String,
    pub roles: Vec<String>,
    /// The `ingress.group` whose request partitions it reads, if any.
    pub ingress_group: Option<String>,
    /// The ids of the encryption keys it holds; None for an instance built
    /// before it said (V54).
    pub enc_keys: Option<Vec<String>>,
    /// The tzdata release it resolves local times with; None for an
    /// instance built before it said (V61).
    pub tzdata_version: Option<String>,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    /// Heartbeat within the TTL.
    pub live: bool,
}

impl InstanceRow {
    pub fn has_role(&self, role: Role) -> bool {
        self.roles.iter().any(|r| r == role.as_str())
    }
}

/// Instances as an operator finds them: id, host, pid and version each.
pub fn instances_describe(instances: &[InstanceRow]) -> String {
    instances
        .iter()
        .map(|row| {
            format!(
                "instance {} ({} pid {}, version {})",
                row.id, row.host, row.pid, row.version
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row of `shard_leases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRow {
    pub shard: u32,
    pub owner: Option<u64>,
    pub epoch: u64,
}

/// What a claim's compare-and-set must prove: that `instance` is alive and
/// still holds each shard at the epoch it acquired it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    pub instance: u64,
    /// (shard, epoch) of every shard the claimed ids come from.
    pub leases: Vec<(u32, u64)>,
    /// An instance whose heartbeat is older is dead.
    pub ttl: Duration,
}

/// `TIMESTAMPADD(MICROSECOND, -ttl, UTC_TIMESTAMP(3))` pushed with `ttl`
/// bound: heartbeats at or after it are alive.
fn push_alive_since(query: &mut QueryBuilder<'_, MySql>, ttl: Duration) {
    query
        .push("TIMESTAMPADD(MICROSECOND, -")
        .push_bind(micros(ttl))
        .push(", UTC_TIMESTAMP(3))");
}

/// As [`push_alive_since`], by each `instances` row's own TTL (`ttl` for
/// rows that name none): the instant since which its heartbeat must have
/// beaten for it to be alive.
pub(super) fn push_alive_since_own(query: &mut QueryBuilder<'_, MySql>, ttl: Duration) {
    query
        .push("TIMESTAMPADD(MICROSECOND, -COALESCE(ttl_ms * 1000, ")
        .push_bind(micros(ttl))
        .push("), UTC_TIMESTAMP(3))");
}

/// A duration as whole milliseconds for an `INT UNSIGNED` column.
fn duration_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// A boolean SQL expression true while `fence` holds: its instance alive and
/// owning every shard of it at that epoch. Used inside the claim's UPDATE
/// (so a fenced-off instance wins nothing) and its SELECT (to tell why).
pub(super) fn push_fence(query: &mut QueryBuilder<'_, MySql>, fence: &Fence) {
    query
        .push("((SELECT COUNT(*) FROM shard_leases l JOIN instances i ON i.id = l.owner WHERE l.owner = ")
        .push_bind(fence.instance)
        .push(" AND i.heartbeat_at >= ");
    push_alive_since(query, fence.ttl);
    query.push(" AND (l.shard, l.epoch) IN (");
    let mut list = query.separated(", ");
    for (shard, epoch) in &fence.leases {
        list.push("(")
            .push_bind_unseparated(*shard)
            .push_unseparated(", ")
            .push_bind_unseparated(*epoch)
            .push_unseparated(")");
    }
    query
        .push(")) = ")
        .push_bind(fence.leases.len() as u64)
        .push(")");
}

/// What a heartbeat found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// The instance was alive for the others until this beat.
    Kept,
    /// Its last beat was older than the TTL: the others may have taken it
    /// for dead meanwhile.
    Lapsed,
    /// Its row was gone (it left, or was forgotten): taken for dead.
    Gone,
}

impl Beat {
    /// Whether the others may have taken the instance for dead before
    /// this beat.
    pub fn ended_a_lapse(self) -> bool {
        self != Beat::Kept
    }
}

impl Store {
    /// Registers this process; returns its instance id.
    pub async fn instance_register(&self, info: &InstanceInfo) -> Result<u64, StoreError> {
        self.instance_insert(None, info).await
    }

    /// Beats this instance's heart; puts its row back (same id) if someone
    /// purged it while it was away. Says whether the instance was alive for
    /// the others until this beat, by the database's clock: a beat that
    /// finds the last one older than `ttl` (or the row gone) ends a lapse,
    /// during which the others may have put its claims in doubt and settled
    /// them.
    ///
    /// The check and the beat are one statement: a rescue judges with the
    /// same clock and row, so no rescue can have found this instance dead
    /// before a beat that answers [`Beat::Kept`].
    pub async fn instance_heartbeat(
        &self,
        id: u64,
        info: &InstanceInfo,
        ttl: Duration,
    ) -> Result<Beat, StoreError> {
        let mut beat = QueryBuilder::<MySql>::new(
            // Never back: `tickler dev` moves beats forward with its clock.
            "UPDATE instances SET heartbeat_at = GREATEST(heartbeat_at, UTC_TIMESTAMP(3)), \
             tzdata_version = ",
        );
        // The release it resolves local times with, as of this beat (it
        // reloads a newer one while running).
        beat.push_bind(zones::current().version().to_owned())
            .push(" WHERE id = ")
            .push_bind(id)
            .push(" AND heartbeat_at >= ");
        push_alive_since(&mut beat, ttl);
        // Rows matched, not changed (the driver asks for found rows): 0
        // only when the row is gone or its last beat is too old.
        if beat.build().execute(&self.pool).await?.rows_affected() > 0 {
            return Ok(Beat::Kept);
        }
        Ok(if self.instance_reinsert(id, info).await? {
            Beat::Gone
        } else {
            Beat::Lapsed
        })
    }

    /// `tickler dev`, about to move its clock `ms` forward: moves every
    /// instance's last heartbeat and every claim's lease the same way, so
    /// that the jump kills no instance and puts no claim in doubt (they
    /// measure real time; due times, ack deadlines and expiries do not
    /// move, and so fall due). Heartbeats never move back (see
    /// [`Store::instance_heartbeat`]): a beat racing this cannot undo it.
    pub async fn dev_clock_leases_shift(&self, ms: i64) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE instances SET heartbeat_at = TIMESTAMPADD(MICROSECOND, ? * 1000, heartbeat_at)",
        )
        .bind(ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE jobs SET claim_expires_at = TIMESTAMPADD(MICROSECOND, ? * 1000, claim_expires_at) \
             WHERE status = 'dispatching' AND claim_expires_at IS NOT NULL",
        )
        .bind(ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Puts back the row of `id`; returns whether it was gone.
    async fn instance_reinsert(&self, id: u64, info: &InstanceInfo) -> Result<bool, StoreError> {
        Ok(self.instance_upsert(Some(id), info).await?.1)
    }

    /// A row for `info`, under `id` or (None) a new one; returns the id.
    async fn instance_insert(
        &self,
        id: Option<u64>,
        info: &InstanceInfo,
    ) -> Result<u64, StoreError> {
        Ok(self.instance_upsert(id, info).await?.0)
    }

    /// Inserts the row (or, if `id` has one, beats its heart); returns the
    /// id and whether a row was inserted.
    async fn instance_upsert(
        &self,
        id: Option<u64>,
        info: &InstanceInfo,
    ) -> Result<(u64, bool), StoreError> {
        let result = sqlx::query(
            "INSERT INTO instances (id, host, pid, pid_namespace, version, roles, ttl_ms, quiet_ms, \
             ingress_group, enc_keys, tzdata_version, started_at, heartbeat_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)) \
             ON DUPLICATE KEY UPDATE heartbeat_at = UTC_TIMESTAMP(3)",
        )
        .bind(id)
        .bind(&info.host)
        .bind(info.pid)
        .bind(&info.pid_namespace)
        .bind(&info.version)
        .bind(&info.roles)
        .bind(info.ttl.map(duration_ms))
        .bind(info.quiet.map(duration_ms))
        .bind(&info.ingress_group)
        .bind(&info.enc_keys)
        .bind(zones::current().version().to_owned())
        .execute(&self.pool)
        .await?;
        // 1: inserted; 2 (or 0, the same millisecond): updated.
        let inserted = result.rows_affected() == 1;
        Ok((id.unwrap_or_else(|| result.last_insert_id()), inserted))
    }

    /// Every registered instance, alive or not (by `ttl` on the database's
    /// clock), in id order.
    pub async fn instances_list(&self, ttl: Duration) -> Result<Vec<InstanceRow>, StoreError> {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, host, pid, pid_namespace, version, roles, ingress_group, enc_keys, \
             tzdata_version, started_at, heartbeat_at, \
             heartbeat_at >= ",
        );
        push_alive_since_own(&mut query, ttl);
        // id-order: a stable order for `tickler instances`; nothing depends on it.
        query.push(" AS live FROM instances ORDER BY id");
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| {
                let roles: String = row.try_get("roles")?;
                let live: i64 = row.try_get("live")?;
                Ok(InstanceRow {
                    id: row.try_get("id")?,
                    host: row.try_get("host")?,
                    pid: row.try_get("pid")?,
                    pid_namespace: row.try_get("pid_namespace")?,
                    version: row.try_get("version")?,
                    roles: roles.split(',').map(str::to_owned).collect(),
                    ingress_group: row.try_get("ingress_group")?,
                    // Hostile input like any column: ids that are not
                    // ASCII are no key this process has.
                    enc_keys: row.try_get::<Option<Vec<u8>>, _>("enc_keys")?.map(|ids| {
                        String::from_utf8_lossy(&ids)
                            .split(',')
                            .filter(|id| !id.is_empty())
                            .map(str::to_owned)
                            .collect()
                    }),
                    tzdata_version: row
                        .try_get::<Option<Vec<u8>>, _>("tzdata_version")
                        .ok()
                        .flatten()
                        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
                    started_at: row.try_get::<NaiveDateTime, _>("started_at")?.and_utc(),
                    heartbeat_at: row.try_get::<NaiveDateTime, _>("heartbeat_at")?.and_utc(),
                    live: live != 0,
                })
            })
            .collect()
    }

    /// Leaves: hands every shard of `id` back (epoch + 1) and deletes its
    /// row, so the others take over at once rather than after the TTL.
    /// Crash in between: the row ages out like a dead instance's.
    pub async fn instance_leave(&self, id: u64) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, acquired_at = NULL \
             WHERE owner = ?",
        )
        .bind(id)
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM instances WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Deletes the row of instance `id` if it is still the process `pid`
    /// on `host` (a restarted process's predecessor, found gone): it is
    /// then dead for everyone at once, its shards free to take and its
    /// claims put in doubt. Returns whether it was deleted.
    pub async fn instance_forget(&self, id: u64, host: &str, pid: u32) -> Result<bool, StoreError> {
        let deleted = sqlx::query("DELETE FROM instances WHERE id = ? AND host = ? AND pid = ?")
            .bind(id)
            .bind(host)
            .bind(pid)
            .execute(&self.pool)
            .await?;
        Ok(deleted.rows_affected() == 1)
    }

    /// Deletes rows of instances silent for longer than `age`.
    pub async fn instances_purge(&self, age: Duration) -> Result<u64, StoreError> {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM instances WHERE heartbeat_at < ");
        push_alive_since(&mut query, age);
        Ok(query.build().execute(&self.pool).await?.rows_affected())
    }

    /// Creates the lease rows of a deployment's first start (`shards` of
    /// them) and returns the deployment's shard count: the rows there are.
    /// Idempotent, and safe on several instances starting at once.
    pub async fn shard_leases_ensure(&self, shards: u32) -> Result<u32, StoreError> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shard_leases")
            .fetch_one(&self.pool)
            .await?;
        if count > 0 {
            return Ok(count as u32);
        }
        for chunk in (0..shards).collect::<Vec<_>>().chunks(1000) {
            let mut insert = QueryBuilder::<MySql>::new("INSERT IGNORE INTO shard_leases (shard) ");
            insert.push_values(chunk, |mut row, shard| {
                row.push_bind(*shard);
            });
            insert.build().execute(&self.pool).await?;
        }
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shard_leases")
            .fetch_one(&self.pool)
            .await?;
        Ok(count as u32)
    }

    /// Raises the deployment's shard count to `shards` by adding lease rows
    /// (free, epoch 0). Returns the count before. Every instance follows
    /// within a heartbeat: its index moves to the new key layout (which the
    /// loader fills from MySQL) and the old layout is drained. Lowering is
    /// not supported: the caller refuses it.
    ///
    /// Crash part way: some rows added; run it again (idempotent).
    pub async fn shard_leases_raise(&self, shards: u32) -> Result<u32, StoreError> {
        let before: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM shard_leases")
            .fetch_one(&self.pool)
            .await?;
        let before = before as u32;
        let new: Vec<u32> = (before..shards).collect();
        let mut tx = self.pool.begin().await?;
        for chunk in new.chunks(1000) {
            let mut insert = QueryBuilder::<MySql>::new("INSERT IGNORE INTO shard_leases (shard) ");
            insert.push_values(chunk, |mut row, shard| {
                row.push_bind(*shard);
            });
            insert.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(before)
    }

    /// Every shard's lease, in shard order.
    pub async fn shard_leases(&self) -> Result<Vec<LeaseRow>, StoreError> {
        let rows = sqlx::query("SELECT shard, owner, epoch FROM shard_leases ORDER BY shard")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(LeaseRow {
                    shard: row.try_get("shard")?,
                    owner: row.try_get("owner")?,
                    epoch: row.try_get("epoch")?,
                })
            })
            .collect()
    }

    /// Takes `shard` for `owner` if its lease is still at `epoch` (nobody
    /// took it since it was read). Returns the new epoch if taken.
    pub async fn shard_acquire(
        &self,
        shard: u32,
        epoch: u64,
        owner: u64,
    ) -> Result<Option<u64>, StoreError> {
        let taken = sqlx::query(
            "UPDATE shard_leases SET owner = ?, epoch = epoch + 1, acquired_at = UTC_TIMESTAMP(3) \
             WHERE shard = ? AND epoch = ?",
        )
        .bind(owner)
        .bind(shard)
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok((taken.rows_affected() == 1).then_some(epoch + 1))
    }

    /// Hands `shards` back (epoch + 1), those `owner` still holds.
    pub async fn shard_release(&self, shards: &[u32], owner: u64) -> Result<u64, StoreError> {
        if shards.is_empty() {
            return Ok(0);
        }
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE shard_leases SET owner = NULL, epoch = epoch + 1, acquired_at = NULL WHERE owner = ",
        );
        query.push_bind(owner).push(" AND shard IN (");
        let mut list = query.separated(", ");
        for shard in shards {
            list.push_bind(*shard);
        }
        query.push(")");
        Ok(query.build().execute(&self.pool).await?.rows_affected())
    }
}
