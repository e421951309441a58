//! Membership: instances that know each other, and shards shared among
//! them through leases in MySQL.
//!
//! Every instance registers a row in `instances` and beats its heart on the
//! database's clock every fifth of `cluster.instance_ttl_ms`. Each round it also:
//!
//! 1. **Balances the shards** (dispatcher role): with `n` live dispatchers
//!    and `N` shards, each should hold `N / n` (the first `N mod n` by id
//!    one more). An instance above its share hands back its highest shards;
//!    one below takes free shards or those of dead instances, each with a
//!    compare-and-set on the lease's epoch, which grows with every change of
//!    owner. What it holds, with the epochs, goes to its dispatcher, whose
//!    claims carry them: a paused instance that lost a shard wins nothing.
//! 2. **Rescues the dead's claims**: rows `dispatching` under an instance
//!    whose heartbeat is older than the TTL go back to `pending` at once and
//!    return to Redis, instead of waiting out the claim lease.
//! 3. Keeps the index's shard count in step with the deployment's (the
//!    number of `shard_leases` rows), so `tickler shards resize` takes
//!    effect everywhere within a round.
//!
//! An instance that was itself cut off from the database for longer than
//! the TTL judges nobody in its first round back: the others were cut off
//! too, and deserve a round to beat again.
//!
//! Correctness never depends on the leases — the MySQL compare-and-set on
//! `status` does — only promptness: a dead instance's jobs go out within
//! `cluster.instance_ttl_ms` plus a round.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Role};
use crate::index::Index;
use crate::metrics;
use crate::store::{Beat, Fence, InstanceInfo, LeaseRow, Store, StoreError};

/// Rows of instances silent for this long are deleted.
const INSTANCE_FORGET_AFTER: Duration = Duration::from_secs(86_400);
/// How often the rows of instances gone for a day are looked for.
const INSTANCE_PURGE_EVERY: Duration = Duration::from_secs(600);
/// Longest a leaving instance waits for its dispatcher to drain.
const DRAIN_MAX: Duration = Duration::from_secs(60);
/// Most dead claims rescued per round.
const RESCUE_BATCH: u32 = 5_000;

#[derive(Debug, Clone)]
pub struct MembershipConfig {
    pub ttl: Duration,
    /// Time between rounds (heartbeats).
    pub heartbeat: Duration,
    /// Whether this instance dispatches (and so holds shards).
    pub dispatcher: bool,
    /// How long after a dead instance's claims are put in doubt nothing of
    /// them can still become visible: `kafka.message_timeout_ms` and
    /// `kafka.doubt_margin_ms`.
    pub doubt_quiet: Duration,
    /// `kafka.doubt_margin_ms`: how long the claims of an instance whose process
    /// is known to have exited stay in doubt (nothing of them is left in a
    /// producer; only what was on the wire can still become visible).
    pub doubt_margin: Duration,
    /// The shard count a brand-new deployment starts with.
    pub shards_initial: u32,
    pub info: InstanceInfo,
}

impl MembershipConfig {
    pub fn from_config(config: &Config) -> Self {
        let ttl = config.instance_ttl();
        MembershipConfig {
            ttl,
            heartbeat: (ttl / 5).max(Duration::from_millis(100)),
            dispatcher: config.has_role(Role::Dispatcher),
            doubt_margin: Duration::from_millis(config.kafka.doubt_margin_ms),
            doubt_quiet: Duration::from_millis(config.kafka.message_timeout_ms)
                + Duration::from_millis(config.kafka.doubt_margin_ms),
            shards_initial: config.cluster.shards,
            info: InstanceInfo {
                host: hostname(),
                pid: std::process::id(),
                pid_namespace: pid_namespace(),
                // Semver build metadata: the schema this binary was built
                // for, so that `migrate` knows who still reads what a
                // migration takes away.
                version: format!(
                    "{}+schema.{}",
                    env!("CARGO_PKG_VERSION"),
                    crate::store::schema_newest()
                ),
                roles: config
                    .roles
                    .iter()
                    .map(|role| role.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                // Set by `Membership::new` from `ttl` and `doubt_quiet`.
                ttl: None,
                quiet: None,
                ingress_group: (config.has_role(Role::Ingress)
                    && !config.ingress.topics.is_empty())
                .then(|| config.ingress.group.clone()),
                enc_keys: Some(
                    config
                        .encryption
                        .keys
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            },
        }
    }
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// This process's pid namespace (`pid:[4026531836]`), where the system
/// says.
fn pid_namespace() -> Option<String> {
    // The namespace's inode alone repeats across machines (every host's
    // first namespace has the same one): the boot's id makes it this
    // machine's, this boot's.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(format!("{} {}", boot.trim(), namespace.to_string_lossy()))
}

/// Whether a process `pid` runs in this pid namespace.
fn pid_running(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether `/proc` shows this namespace's other processes: with `hidepid`
/// or systemd's `ProtectProc`, processes of other users are hidden, and a
/// live predecessor would look gone. Init (pid 1 of the namespace) is shown
/// wherever they are not hidden.
fn pids_visible() -> bool {
    std::process::id() == 1 || pid_running(1)
}

/// What this instance holds: its id, and each shard it owns with the epoch
/// its claims must carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// None until the instance is registered.
    pub instance: Option<u64>,
    pub shards: BTreeMap<u32, u64>,
    pub ttl: Duration,
    /// Until when this instance is surely alive for the others: its last
    /// heartbeat's TTL, less a margin, counted from before the heartbeat
    /// was sent. Past it the dispatcher sends nothing (the others may have
    /// declared it dead and put its claims in doubt). None before the
    /// first heartbeat.
    pub alive_until: Option<tokio::time::Instant>,
    /// How many lapses this instance has come back from: a heartbeat that
    /// found its last one older than the TTL (or its row gone) starts a new
    /// incarnation. The others may have put every claim of an earlier one
    /// in doubt and settled it (returned it to pending, cancelled it), so
    /// nothing claimed in an earlier incarnation is ever sent.
    pub incarnation: u64,
    /// The live instances reading this instance's request topics (its
    /// `ingress.group`), this one among them, by id: they share the
    /// topics' partitions ([`crate::roles::ingress::partitions_mine`]). Empty
    /// without request topics, and until the first round.
    pub readers: Vec<u64>,
}

impl Ownership {
    /// Whether this instance may still send records at `now`.
    pub fn alive_at(&self, now: tokio::time::Instant) -> bool {
        self.alive_until.is_some_and(|until| now < until)
    }

    /// Whether a claim made in `incarnation` may be sent at `now`: this
    /// instance is still trusted alive, and has not lapsed since.
    pub fn may_send(&self, incarnation: u64, now: tokio::time::Instant) -> bool {
        self.incarnation == incarnation && self.alive_at(now)
    }

    /// The fence for a claim on `shards` (those of them this instance
    /// holds), or None if it holds none of them.
    pub fn fence(&self, shards: impl IntoIterator<Item = u32>) -> Option<Fence> {
        let instance = self.instance?;
        let leases: Vec<(u32, u64)> = shards
            .into_iter()
            .filter_map(|shard| self.shards.get(&shard).map(|epoch| (shard, *epoch)))
            .collect();
        (!leases.is_empty()).then_some(Fence {
            instance,
            leases,
            ttl: self.ttl,
        })
    }
}

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RoundReport {
    /// Instances alive by the database's clock (any role).
    pub live: usize,
    /// Shards this instance holds after the round (dispatchers only).
    pub held: usize,
    /// Shards it handed back to rebalance.
    pub released: usize,
    /// Shards it took: free ones, or the dead's.
    pub acquired: usize,
    /// Claims of dead instances it returned to pending.
    pub rescued: usize,
}

/// The dispatcher's view of membership.
#[derive(Debug, Clone)]
pub struct Holding {
    /// The shards this instance holds, with their epochs.
    pub ownership: watch::Receiver<Ownership>,
    /// Notified, membership runs a round at once.
    pub refresh: Arc<Notify>,
}

/// The changes one instance makes to the leases in a round.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Shards to hand back.
    pub release: Vec<u32>,
    /// Shards to take, each with the epoch it was read at.
    pub acquire: Vec<(u32, u64)>,
}

/// Decides `me`'s changes to the leases: `live` are the live dispatchers'
/// ids. Every instance computes the same shares from the same rows, so
/// they converge without talking; between views that differ for a round,
/// the epochs arbitrate.
pub fn plan(me: u64, live: &[u64], leases: &[LeaseRow]) -> Plan {
    let mut members: Vec<u64> = live.to_vec();
    if !members.contains(&me) {
        members.push(me);
    }
    members.sort_unstable();
    members.dedup();
    let n = members.len();
    let total = leases.len();
    let rank = members.iter().position(|id| *id == me).unwrap_or(0);
    let share = total / n + usize::from(rank < total % n);
    let alive: HashSet<u64> = members.iter().copied().collect();

    let mine: Vec<u32> = leases
        .iter()
        .filter(|lease| lease.owner == Some(me))
        .map(|lease| lease.shard)
        .collect();
    let mut plan = Plan::default();
    if mine.len() > share {
        plan.release = mine[share..].to_vec();
        return plan;
    }
    // Free shards, or held by the dead; starting at this instance's place
    // in the ring, so that instances racing for them mostly pick apart.
    let start = if total == 0 { 0 } else { rank * total / n };
    let takeable = leases
        .iter()
        .cycle()
        .skip(start)
        .take(total)
        .filter(|lease| lease.owner.is_none_or(|owner| !alive.contains(&owner)));
    plan.acquire = takeable
        .take(share - mine.len())
        .map(|lease| (lease.shard, lease.epoch))
        .collect();
    plan
}

pub struct Membership {
    store: Store,
    index: Index,
    config: MembershipConfig,
    /// After the shard count changed: the old count, and until when its
    /// key layout is drained each round (instances still on it follow
    /// within a round; a paused one's stray writes are left to the
    /// reconciler's overdue probe).
    draining: std::sync::Mutex<Option<(u32, tokio::time::Instant)>>,
    ownership: watch::Sender<Ownership>,
    /// Wakes the local dispatcher (ownership changed, claims rescued).
    wake: Arc<Notify>,
    /// Asks for a round now (the dispatcher found itself fenced off).
    refresh: Arc<Notify>,
}

impl Membership {
    pub fn new(
        store: Store,
        index: Index,
        mut config: MembershipConfig,
        wake: Arc<Notify>,
    ) -> Self {
        // The others judge this instance, and time its claims in doubt, by
        // its own settings, which its row carries.
        config.info.ttl = Some(config.ttl);
        config.info.quiet = Some(config.doubt_quiet);
        let (ownership, _) = watch::channel(Ownership {
            ttl: config.ttl,
            ..Ownership::default()
        });
        Membership {
            store,
            index,
            config,
            ownership,
            wake,
            refresh: Arc::new(Notify::new()),
            draining: std::sync::Mutex::new(None),
        }
    }

    /// What this instance holds, kept current.
    pub fn subscribe(&self) -> watch::Receiver<Ownership> {
        self.ownership.subscribe()
    }

    /// What the dispatcher needs: the shards held, and a way to ask for a
    /// round at once (after it found itself fenced off).
    pub fn holding(&self) -> Holding {
        Holding {
            ownership: self.ownership.subscribe(),
            refresh: self.refresh.clone(),
        }
    }

    /// Registers (trying again while MySQL is down), then runs a round per
    /// heartbeat until `cancel` fires. Then waits for `dispatcher_done` (the
    /// dispatcher's last batch recorded) and leaves: the shards are handed
    /// back at once and the row deleted.
    pub async fn run(self, cancel: CancellationToken, dispatcher_done: CancellationToken) {
        let id = loop {
            match self.join().await {
                Ok(id) => break id,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot register this instance; trying again");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(self.config.heartbeat) => {}
                    }
                }
            }
        };
        tracing::info!(
            instance = id,
            ttl_ms = self.config.ttl.as_millis() as u64,
            "instance registered"
        );
        let mut last_beat: Option<tokio::time::Instant> = None;
        let mut purged_at: Option<tokio::time::Instant> = None;
        while !cancel.is_cancelled() {
            let cut_off = last_beat.is_none_or(|at| at.elapsed() > self.config.ttl);
            let judge_nobody = cut_off && last_beat.is_some();
            if let Err(err) = self
                .run_once_beating(id, judge_nobody, &mut last_beat)
                .await
            {
                crate::metrics::store_failed("membership round", &err);
                metrics::membership_failed();
            }
            if purged_at.is_none_or(|at| at.elapsed() >= INSTANCE_PURGE_EVERY) {
                purged_at = Some(tokio::time::Instant::now());
                if let Err(err) = self.store.instances_purge(INSTANCE_FORGET_AFTER).await {
                    tracing::debug!(error = %err, "cannot purge old instance rows");
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.refresh.notified() => {}
                _ = tokio::time::sleep(self.config.heartbeat) => {}
            }
        }
        if self.config.dispatcher {
            self.beat_until(id, dispatcher_done).await;
        }
        // Sends nothing more: once the row is gone the others put what the
        // dispatcher still holds in doubt.
        self.ownership.send_modify(|o| {
            o.shards.clear();
            o.alive_until = None;
        });
        fail_point_stall!("membership-leave");
        match self.store.instance_leave(id).await {
            Ok(()) => tracing::info!(instance = id, "instance left; its shards are free"),
            Err(err) => {
                tracing::warn!(error = %err, "cannot leave; the shards free up after cluster.instance_ttl_ms")
            }
        }
    }

    /// Keeps beating (nothing else) while the dispatcher drains, so that a
    /// drain longer than the TTL — a slow broker during a deploy — is not
    /// taken for a death, its claims put in doubt and its sends refused.
    /// At most [`DRAIN_MAX`].
    async fn beat_until(&self, id: u64, dispatcher_done: CancellationToken) {
        let deadline = tokio::time::Instant::now() + DRAIN_MAX;
        loop {
            if let Err(err) = self.beat(id).await {
                crate::metrics::store_failed("drain heartbeat", &err);
            }
            tokio::select! {
                _ = dispatcher_done.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!("the dispatcher did not stop within 60 s; leaving all the same");
                    return;
                }
                _ = tokio::time::sleep(self.config.heartbeat) => {}
            }
        }
    }

    /// A heartbeat sent at `beat_sent` succeeded. If it ended a lapse (the
    /// last beat older than the TTL, or the row gone), the others may have
    /// taken this instance for dead and settled its claims: it becomes a
    /// new incarnation, and sends nothing claimed before.
    fn beat_recorded(&self, beat_sent: tokio::time::Instant, beat: Beat) {
        if beat.ended_a_lapse() {
            let incarnation = self.ownership.borrow().incarnation + 1;
            tracing::warn!(
                ?beat,
                incarnation,
                "this instance was taken for dead (heartbeat older than cluster.instance_ttl_ms): nothing it claimed before is sent"
            );
            metrics::instance_lapsed();
            // In one change, before the beat makes it alive again: a
            // claim of the old incarnation is never sendable in between.
            self.ownership.send_modify(|o| o.incarnation = incarnation);
        }
        self.alive_from(beat_sent);
    }

    /// A heartbeat sent at `beat_sent` succeeded: this instance is alive
    /// for the others until that instant plus the TTL; the dispatcher
    /// trusts it until a quarter of the TTL before (room for a send under
    /// way, and for the clocks' rates).
    fn alive_from(&self, beat_sent: tokio::time::Instant) {
        let until = beat_sent + self.config.ttl - self.config.ttl / 4;
        self.ownership.send_modify(|o| {
            if o.alive_until.is_none_or(|before| before < until) {
                o.alive_until = Some(until);
            }
        });
    }

    /// Registers this instance (creating the deployment's lease rows on its
    /// first start) and returns its id. `run` does it; tests call it to
    /// drive `run_once` themselves.
    pub async fn join(&self) -> Result<u64, StoreError> {
        let count = self
            .store
            .shard_leases_ensure(self.config.shards_initial)
            .await?;
        self.count_follow(count);
        let id = self.store.instance_register(&self.config.info).await?;
        self.ownership.send_modify(|o| o.instance = Some(id));
        Ok(id)
    }

    /// The index follows the deployment's shard count.
    fn count_follow(&self, count: u32) {
        if count == 0 {
            return;
        }
        let before = self.index.shards_set(count);
        metrics::shards(count);
        if before != count {
            tracing::warn!(from = before, to = count, "the shard count changed; following it (the loader re-indexes the window, the old keys are drained)");
            let until = tokio::time::Instant::now() + self.config.ttl * 2;
            *self
                .draining
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((before, until));
        }
    }

    /// Drains the old key layout after a change of shard count, each round
    /// until some time after the change.
    async fn drain(&self) {
        let Some((old, until)) = *self
            .draining
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        else {
            return;
        };
        match self.index.drain_layout(old).await {
            Ok(moved) => {
                if moved > 0 {
                    tracing::info!(
                        from_shards = old,
                        moved,
                        "ids moved from the old key layout"
                    );
                    self.wake.notify_one();
                }
                if tokio::time::Instant::now() >= until {
                    *self
                        .draining
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                }
            }
            Err(err) => metrics::index_failed("drain old layout", 0, &err),
        }
    }

    /// [`Membership::run_once`], beating again every heartbeat while the
    /// round's work after its beat goes on: a slow Redis (adopting shards,
    /// draining a layout) or a slow rescue must not age this instance's
    /// heartbeat into a false death.
    /// `last_beat` is set at every beat that succeeds.
    async fn run_once_beating(
        &self,
        id: u64,
        judge_nobody: bool,
        last_beat: &mut Option<tokio::time::Instant>,
    ) -> Result<RoundReport, StoreError> {
        self.beat(id).await?;
        *last_beat = Some(tokio::time::Instant::now());
        let round = self.round(id, judge_nobody);
        tokio::pin!(round);
        loop {
            tokio::select! {
                report = &mut round => return report,
                _ = tokio::time::sleep(self.config.heartbeat) => {
                    match self.beat(id).await {
                        Ok(()) => *last_beat = Some(tokio::time::Instant::now()),
                        Err(err) => crate::metrics::store_failed("heartbeat", &err),
                    }
                }
            }
        }
    }

    /// One round as instance `id`: beat, balance, rescue, drain.
    /// `judge_nobody` after this instance was itself cut off: it then takes
    /// only free shards and rescues nobody's claims.
    pub async fn run_once(&self, id: u64, judge_nobody: bool) -> Result<RoundReport, StoreError> {
        self.beat(id).await?;
        self.round(id, judge_nobody).await
    }

    /// Beats this instance's heart, and records what the beat found.
    async fn beat(&self, id: u64) -> Result<(), StoreError> {
        let beat_sent = tokio::time::Instant::now();
        let beat = self
            .store
            .instance_heartbeat(id, &self.config.info, self.config.ttl)
            .await?;
        self.beat_recorded(beat_sent, beat);
        Ok(())
    }

    /// A round's work after its beat: balance, rescue, drain.
    async fn round(&self, id: u64, judge_nobody: bool) -> Result<RoundReport, StoreError> {
        let mut report = RoundReport::default();
        let mut instances = self.store.instances_list(self.config.ttl).await?;
        if self.predecessors_forget(id, &instances).await? > 0 {
            instances = self.store.instances_list(self.config.ttl).await?;
        }
        let mut leases = self.store.shard_leases().await?;
        self.count_follow(leases.len() as u32);
        let live: Vec<u64> = instances
            .iter()
            .filter(|i| i.live && i.has_role(Role::Dispatcher))
            .map(|i| i.id)
            .collect();
        report.live = instances.iter().filter(|i| i.live).count();
        metrics::instances_live(report.live);
        self.readers_publish(id, &instances);

        if self.config.dispatcher {
            let mut plan = plan(id, &live, &leases);
            if judge_nobody {
                // Take only free shards this round, not the others'.
                plan.acquire.retain(|(shard, _)| {
                    leases
                        .iter()
                        .any(|l| l.shard == *shard && l.owner.is_none())
                });
            }
            if !plan.release.is_empty() || !plan.acquire.is_empty() {
                report.released = plan.release.len();
                report.acquired = self.apply(id, &plan).await?;
                leases = self.store.shard_leases().await?;
            }
            report.held = self.publish(id, &leases).await;
        }
        if !judge_nobody {
            report.rescued = self.rescue().await?;
        }
        self.drain().await;
        Ok(report)
    }

    /// Tells the ingress who reads its request topics now: the live
    /// instances of its `ingress.group`, and this one.
    fn readers_publish(&self, id: u64, instances: &[crate::store::InstanceRow]) {
        let Some(group) = &self.config.info.ingress_group else {
            return;
        };
        let mut readers: Vec<u64> = instances
            .iter()
            .filter(|i| i.live && i.ingress_group.as_ref() == Some(group))
            .map(|i| i.id)
            .chain([id])
            .collect();
        readers.sort_unstable();
        readers.dedup();
        self.ownership.send_if_modified(|o| {
            let changed = o.readers != readers;
            o.readers = readers;
            changed
        });
    }

    /// Forgets the rows of live-looking instances that were processes of
    /// this host and pid namespace whose pid is gone: a process killed and
    /// restarted here is taken over at once, not after its TTL. Returns how
    /// many it forgot. (A pid reused since only delays this to the TTL.)
    async fn predecessors_forget(
        &self,
        id: u64,
        instances: &[crate::store::InstanceRow],
    ) -> Result<usize, StoreError> {
        let me = &self.config.info;
        if me.pid_namespace.is_none() || !pids_visible() {
            return Ok(0);
        }
        let mut forgotten = 0;
        for gone in instances.iter().filter(|i| {
            i.id != id
                && i.live
                && i.host == me.host
                && i.pid_namespace == me.pid_namespace
                && i.pid != me.pid
                && !pid_running(i.pid)
        }) {
            if self
                .store
                .instance_forget(gone.id, &gone.host, gone.pid)
                .await?
            {
                // Its process exited: its claims need only the margin.
                let rescued = self
                    .store
                    .job_rescue_exited(gone.id, self.config.doubt_margin, RESCUE_BATCH)
                    .await?;
                tracing::warn!(
                    instance = gone.id,
                    pid = gone.pid,
                    num_jobs = rescued,
                    "an instance of this host whose process is gone is dead: taking over at once"
                );
                metrics::dead_instance_rescued(rescued as usize);
                forgotten += 1;
            }
        }
        Ok(forgotten)
    }

    /// Returns how many shards it took.
    async fn apply(&self, id: u64, plan: &Plan) -> Result<usize, StoreError> {
        if !plan.release.is_empty() {
            // The dispatcher stops claiming them first; a pass already under
            // way is fenced off by the new epoch.
            self.ownership.send_modify(|o| {
                for shard in &plan.release {
                    o.shards.remove(shard);
                }
            });
            let released = self.store.shard_release(&plan.release, id).await?;
            tracing::info!(shards = ?plan.release, released, "shards handed back to rebalance");
        }
        let mut taken = Vec::new();
        for (shard, epoch) in &plan.acquire {
            if self
                .store
                .shard_acquire(*shard, *epoch, id)
                .await?
                .is_some()
            {
                taken.push(*shard);
            }
        }
        metrics::shards_acquired(&taken);
        Ok(taken.len())
    }

    /// Hands the dispatcher what this instance holds now. A shard new to it
    /// is adopted first: the previous owner's Redis claims return to the
    /// due set, so its jobs need not wait out their leases. Returns how
    /// many it holds.
    async fn publish(&self, id: u64, leases: &[LeaseRow]) -> usize {
        let held: BTreeMap<u32, u64> = leases
            .iter()
            .filter(|l| l.owner == Some(id))
            .map(|l| (l.shard, l.epoch))
            .collect();
        let count = held.len();
        let before = self.ownership.borrow().shards.clone();
        if held == before {
            return count;
        }
        for (shard, epoch) in &held {
            if before.get(shard) == Some(epoch) {
                continue;
            }
            match self.index.shard_adopt(*shard).await {
                Ok(0) => {}
                Ok(moved) => tracing::info!(
                    shard,
                    moved,
                    "claims of the previous owner returned to the due set"
                ),
                // Their Redis leases expire in time anyway.
                Err(err) => metrics::index_failed("adopt shard", 0, &err),
            }
        }
        metrics::shards_owned(count);
        self.ownership.send_modify(|o| o.shards = held);
        self.wake.notify_one();
        count
    }

    /// Claims of dead instances: put in doubt, for the reconciler to read
    /// back once nothing more of them can arrive. Returns how many.
    async fn rescue(&self) -> Result<usize, StoreError> {
        let rescued = self
            .store
            .job_rescue_dead(self.config.ttl, self.config.doubt_quiet, RESCUE_BATCH)
            .await? as usize;
        if rescued > 0 {
            tracing::warn!(
                num_jobs = rescued,
                quiet_ms = self.config.doubt_quiet.as_millis() as u64,
                "jobs claimed by a dead instance are in doubt until their topics are read back"
            );
            metrics::dead_instance_rescued(rescued);
        }
        Ok(rescued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(owners: &[Option<u64>]) -> Vec<LeaseRow> {
        owners
            .iter()
            .enumerate()
            .map(|(shard, owner)| LeaseRow {
                shard: shard as u32,
                owner: *owner,
                epoch: 3,
            })
            .collect()
    }

    /// Runs every instance's plan against the rows in turn, as the rounds
    /// would, until nothing changes; returns the owners.
    fn settle(live: &[u64], mut rows: Vec<LeaseRow>) -> Vec<Option<u64>> {
        for _ in 0..10 {
            let mut changed = false;
            for me in live {
                let p = plan(*me, live, &rows);
                for shard in p.release {
                    rows[shard as usize].owner = None;
                    rows[shard as usize].epoch += 1;
                    changed = true;
                }
                for (shard, epoch) in p.acquire {
                    let row = &mut rows[shard as usize];
                    if row.epoch == epoch {
                        row.owner = Some(*me);
                        row.epoch += 1;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        rows.iter().map(|r| r.owner).collect()
    }

    fn counts(owners: &[Option<u64>], live: &[u64]) -> Vec<usize> {
        live.iter()
            .map(|id| owners.iter().filter(|o| **o == Some(*id)).count())
            .collect()
    }

    #[test]
    fn shards_spread_evenly_and_every_one_is_owned() {
        for (n, shards) in [(1, 16), (2, 16), (3, 16), (3, 64), (5, 7), (4, 2)] {
            let live: Vec<u64> = (10..10 + n).collect();
            let owners = settle(&live, leases(&vec![None; shards]));
            let counts = counts(&owners, &live);
            let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
            assert!(max - min <= 1, "{n} instances, {shards} shards: {counts:?}");
            if shards >= n as usize {
                assert!(owners.iter().all(Option::is_some), "{owners:?}");
            }
        }
    }

    #[test]
    fn a_dead_instances_shards_are_taken_and_a_newcomer_gets_its_share() {
        let live = [1, 2, 3];
        let owners = settle(&live, leases(&[None; 16]));
        // 3 dies: 1 and 2 take its shards over.
        let rows: Vec<LeaseRow> = owners
            .iter()
            .enumerate()
            .map(|(shard, owner)| LeaseRow {
                shard: shard as u32,
                owner: *owner,
                epoch: 1,
            })
            .collect();
        let after = settle(&[1, 2], rows.clone());
        assert_eq!(counts(&after, &[1, 2]), vec![8, 8]);
        // Shards 1 and 2 kept are not moved.
        for (shard, owner) in owners.iter().enumerate() {
            if *owner != Some(3) {
                assert_eq!(after[shard], *owner, "shard {shard} stays where it was");
            }
        }
        // A fourth joins: the others hand back what is above their share.
        let rows: Vec<LeaseRow> = after
            .iter()
            .enumerate()
            .map(|(shard, owner)| LeaseRow {
                shard: shard as u32,
                owner: *owner,
                epoch: 5,
            })
            .collect();
        let joined = settle(&[1, 2, 4], rows);
        let c = counts(&joined, &[1, 2, 4]);
        assert!(c.iter().all(|n| (5..=6).contains(n)), "{c:?}");
    }

    #[test]
    fn the_fence_covers_only_the_shards_held() {
        let ownership = Ownership {
            instance: Some(7),
            shards: [(1, 4), (3, 9)].into(),
            ttl: Duration::from_secs(5),
            alive_until: None,
            incarnation: 0,
            readers: Vec::new(),
        };
        let fence = ownership.fence([1, 2, 3]).unwrap();
        assert_eq!(fence.leases, vec![(1, 4), (3, 9)]);
        assert!(ownership.fence([2]).is_none());
        assert!(Ownership::default().fence([1]).is_none());
    }

    #[test]
    fn an_instance_sends_only_while_its_heartbeat_is_trusted() {
        let now = tokio::time::Instant::now();
        let mut ownership = Ownership::default();
        assert!(!ownership.alive_at(now), "never beat: send nothing");
        ownership.alive_until = Some(now + Duration::from_millis(10));
        assert!(ownership.alive_at(now));
        assert!(!ownership.alive_at(now + Duration::from_millis(10)));
    }

    #[test]
    fn a_claim_of_an_earlier_incarnation_is_never_sendable() {
        let now = tokio::time::Instant::now();
        let mut ownership = Ownership {
            alive_until: Some(now + Duration::from_secs(1)),
            ..Ownership::default()
        };
        assert!(ownership.may_send(0, now));
        // A lapse ended: alive again, but the claim is of the old one.
        ownership.incarnation = 1;
        assert!(!ownership.may_send(0, now));
        assert!(ownership.may_send(1, now));
        assert!(!ownership.may_send(1, now + Duration::from_secs(1)));
    }
}
