//! Starts the roles a configuration asks for, all under one cancellation
//! token and one task tracker, and stops them in order: the HTTP server
//! stops taking requests, the dispatcher finishes the batch in hand, then
//! the process exits.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::FutureExt;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::Readiness;
use crate::api::{self, ApiState, ServeLimits};
use crate::config::{AuthMode, Config, PayloadCompression, Role};
use crate::domain::clock::Clock;
use crate::domain::keys::Keyring;
use crate::index::{self, Index, IndexError};
use crate::kafka::{self, Topics};
use crate::metrics;
use crate::roles::auth::{Principal, TokenCache, TokenCacheConfig};
use crate::roles::bulk::BulkRunner;
use crate::roles::consumption::{Consumption, ConsumptionConfig};
use crate::roles::dispatcher::{DispatchError, Dispatcher, DispatcherConfig};
use crate::roles::ingress::{Ingress, IngressConfig};
use crate::roles::jobs::Jobs;
use crate::roles::loader::{Loader, LoaderConfig};
use crate::roles::materializer::{Materializer, MaterializerConfig};
use crate::roles::membership::{Membership, MembershipConfig};
use crate::roles::purger::{Purger, PurgerConfig};
use crate::roles::reconciler::{Reconciler, ReconcilerConfig};
use crate::roles::reporter::{Reporter, ReporterConfig};
use crate::roles::resolver::Resolver;
use crate::roles::results::{
    DeadLetterConfig, DeadLetterProducer, ResultsConsumer, ResultsConsumerConfig,
};
use crate::roles::service;
use crate::roles::topic_controls::{ControlsRefresher, ControlsRefresherConfig, TopicControls};
use crate::roles::verifier::{Feed, Verifier, VerifierConfig};
use crate::store::{self, Actor, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("mysql: {0}")]
    Store(#[from] StoreError),
    #[error("redis: {0}")]
    Index(#[from] IndexError),
    #[error("kafka: {0}")]
    Dispatcher(#[from] DispatchError),
    #[error("kafka (ingress): {0}")]
    Ingress(kafka::KafkaError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("https: {0}")]
    Tls(#[from] api::TlsError),
    /// A store refused the connection's TLS or credentials, or a TLS
    /// setting cannot be read: never a fallback to plaintext.
    #[error("{0}")]
    StoreTls(String),
    #[error("kafka: {0}")]
    KafkaTls(#[from] kafka::ProbeError),
    /// A role ended on its own while serving (see [`RoleFailure`]); the
    /// instance stopped in order, and exits non-zero to be restarted.
    #[error(
        "the {0} role stopped on its own (its error is logged above); this instance stopped so that the others take over its shards and claims: restart it"
    )]
    RoleFailed(&'static str),
    /// The roles did not all stop within `shutdown_timeout_ms`: one waits
    /// on a call that does not return. The process exits all the same;
    /// what it held is taken over once its heartbeat is missed.
    #[error(
        "the roles did not stop within shutdown_timeout_ms ({0:?}): a call to a store does not return; exiting all the same, and the others take over this instance's shards after cluster.instance_ttl_ms"
    )]
    ShutdownTimedOut(Duration),
    /// A configured key does not open the canary sealed under its id by
    /// the first process that held it (`enc_key_canaries`).
    #[error(
        "encryption key(s) {0}: not the key material rows were sealed under with this id (enc_key_canaries); check the key's file or variable, or give new material a new id"
    )]
    KeyCanary(String),
    /// `tickler dev` beside a `tickler serve` in one database, or the
    /// other way round: dev's clock would make the other's jobs due early.
    #[error(
        "instance {instance} on {host} is a {} alive in this database: `tickler dev` and `tickler serve` never share one (dev's clock would make serve's jobs due early); give `tickler dev` a database of its own",
        if *dev { "`tickler serve`" } else { "`tickler dev`" }
    )]
    ClockNeighbour {
        instance: u64,
        host: String,
        dev: bool,
    },
    /// An `[encryption]` key cannot be read, or the active key is not
    /// among the keys (the error names keys by their id only).
    #[error("{0}")]
    Keys(#[from] crate::domain::keys::KeyError),
}

/// The first role of this process to end on its own: it panicked, or it
/// returned before shutdown (its dependency is unusable for good). Only a
/// bug or a broken setting does that, and a process without one of its
/// roles would look alive while doing nothing: a dispatcher gone while the
/// heartbeat goes on would hold its shards, and their jobs, forever. So
/// the whole instance stops — in order, handing its shards back — and
/// `tickler serve` exits non-zero for its supervisor to restart it.
#[derive(Clone, Default)]
struct RoleFailure {
    role: Arc<OnceLock<&'static str>>,
    happened: CancellationToken,
}

impl RoleFailure {
    fn record(&self, role: &'static str) {
        let _ = self.role.set(role);
        self.happened.cancel();
    }

    fn role(&self) -> Option<&'static str> {
        self.role.get().copied()
    }
}

/// Runs `role` in `tracker` and watches how it ends: on its own (a panic,
/// or a return before `cancel` fired), it is recorded in `failure` and
/// every role told to stop.
fn spawn_role<F>(
    tracker: &TaskTracker,
    cancel: &CancellationToken,
    failure: &RoleFailure,
    role: &'static str,
    run: F,
) where
    F: Future<Output = ()> + Send + 'static,
{
    let cancel = cancel.clone();
    let failure = failure.clone();
    tracker.spawn(async move {
        // The panic itself is printed by the panic hook where it happened.
        let ended = AssertUnwindSafe(run).catch_unwind().await;
        if ended.is_ok() && cancel.is_cancelled() {
            return;
        }
        let how = if ended.is_err() {
            "panicked"
        } else {
            "returned before shutdown"
        };
        tracing::error!(
            role,
            how,
            "a role stopped on its own: stopping this instance so that the others take over its shards and claims; restart it"
        );
        failure.record(role);
        cancel.cancel();
    });
}

/// A started tickler. Dropping it does not stop it: call `shutdown`.
pub struct Running {
    /// Where the API listens, when this process runs the `api` role.
    pub http_addr: Option<SocketAddr>,
    pub store: Store,
    pub index: Index,
    /// The other roles' pools, closed on shutdown.
    stores: Vec<Store>,
    cancel: CancellationToken,
    draining: CancellationToken,
    tracker: TaskTracker,
    failure: RoleFailure,
    started: Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl Running {
    /// The services this instance started, by their names in the role
    /// table ([`services`]).
    pub fn services(&self) -> Vec<&'static str> {
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Resolves when a role has stopped on its own, with its name; every
    /// role has been told to stop by then.
    pub async fn role_failed(&self) -> &'static str {
        self.failure.happened.cancelled().await;
        self.failure.role().unwrap_or("unknown")
    }

    /// The role that stopped on its own, if one did.
    pub fn failed_role(&self) -> Option<&'static str> {
        self.failure.role()
    }

    /// Starts to drain: `/readyz` answers 503 from now on; every role goes
    /// on until [`Running::shutdown`].
    pub fn drain(&self) {
        self.draining.cancel();
    }

    /// Stops every role and waits for in-flight work to finish.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.wait().await;
    }

    /// Waits until every role has stopped (after the token is cancelled).
    pub async fn wait(self) {
        self.tracker.close();
        self.tracker.wait().await;
        self.store.close().await;
        for store in &self.stores {
            store.close().await;
        }
    }
}

async fn listen(addr: &str) -> Result<(TcpListener, SocketAddr), StartError> {
    let failed = |source| StartError::Listen {
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    Ok((listener, local))
}

/// `tickler serve`: starts the configured roles and runs them until SIGTERM
/// or Ctrl-C, then stops them in order.
pub async fn serve(config: Config) -> Result<(), StartError> {
    run_until_signal(config, Clock::real()).await
}

/// `tickler dev`: applies the migrations, then runs every configured role
/// on a virtual clock (`POST /v1/dev/clock`) until SIGTERM or Ctrl-C. For
/// a service's own tests, on a database of their own.
pub async fn dev(config: Config) -> Result<(), StartError> {
    let applied = Store::migrate(&config.mysql.url).await?;
    if !applied.is_empty() {
        tracing::info!(
            migrations = applied.len(),
            "tickler dev: the schema is applied"
        );
    }
    tracing::warn!(
        "tickler dev: the clock moves on POST /v1/dev/clock; never point it at a database tickler serve uses"
    );
    run_until_signal(config, Clock::virtual_time()).await
}

async fn run_until_signal(config: Config, clock: Clock) -> Result<(), StartError> {
    let shutdown_timeout = Duration::from_millis(config.shutdown_timeout_ms);
    let config_drain_ms = config.api.drain_ms;
    let running = start_on(config, CancellationToken::new(), clock).await?;
    tokio::select! {
        _ = shutdown_signal() => {
            tracing::info!("shutting down: finishing in-flight batches");
        }
        role = running.role_failed() => {
            tracing::error!(role, "shutting down after a role stopped on its own");
        }
    }
    let failed = running.failed_role();
    running.drain();
    let drain = Duration::from_millis(config_drain_ms);
    if failed.is_none() && !drain.is_zero() {
        tracing::info!(
            drain_ms = config_drain_ms,
            "draining: /readyz answers 503 before the roles stop"
        );
        tokio::time::sleep(drain).await;
    }
    if tokio::time::timeout(shutdown_timeout, running.shutdown())
        .await
        .is_err()
    {
        return Err(StartError::ShutdownTimedOut(shutdown_timeout));
    }
    match failed {
        Some(role) => Err(StartError::RoleFailed(role)),
        None => Ok(()),
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// The role table: the services each role runs, declared once (`None`:
/// those every instance runs). An instance starts only these, each watched
/// ([`RoleFailure`]): [`Shared::spawn_service`] refuses a name its role's
/// row does not hold, and `tests/roles.rs` holds the table against
/// running instances. Some run only when a setting asks: `topics` with
/// the api, dispatcher or ingress role; `token cache` with `api.auth =
/// tokens`; `metrics` with `api.metrics_addr`; `purger` with a retention (the
/// default has one);
/// `ingress` with `ingress.topics`; `overdue caps` with a topic's
/// `max_overdue`; `hand edits` with `mysql.history_hand_edits = observe`.
pub fn services(role: Option<Role>) -> &'static [&'static str] {
    match role {
        None => &[
            "membership",
            "topic controls",
            "topics",
            "codec upkeep",
            "clock guard",
            "tzdata",
        ],
        Some(Role::Api) => &["api", "metrics", "token cache", "bulk"],
        Some(Role::Loader) => &["loader", "materializer"],
        Some(Role::Dispatcher) => &["dispatcher", "verifier"],
        Some(Role::Reconciler) => &[
            "reconciler",
            "reporter",
            "watermarks",
            "quotas",
            "purger",
            "consumption",
            "wall clock",
            "overdue caps",
            "hand edits",
        ],
        Some(Role::Results) => &["results", "dead letters"],
        Some(Role::Ingress) => &["ingress"],
    }
}

/// One pool per actor, so the jobs' history says who changed what.
struct Pools {
    api: Store,
    dispatcher: Store,
    /// Its own pool (as the dispatcher's actor): reading records back never
    /// makes a claim wait for a connection.
    verifier: Store,
    reconciler: Store,
    results: Store,
    /// Its own pool: heartbeats must not queue behind the reconciler's scans.
    membership: Store,
    scheduler: Store,
    ingress: Store,
}

impl Pools {
    fn connect(config: &Config, clock: &Clock, keys: &Keyring) -> Result<Pools, StoreError> {
        let url = &config.mysql.url;
        // One codec for every pool: they share its dictionaries.
        let codec = config.compression.codec();
        let pool = |size, actor| {
            Store::connect_clocked(url, size, actor, clock)
                .map(|store| store.with_keys(keys.clone()).with_codec(codec.clone()))
        };
        Ok(Pools {
            api: pool(config.mysql.pool_size, Actor::Api)?,
            dispatcher: pool(4, Actor::Dispatcher)?,
            verifier: pool(2, Actor::Dispatcher)?,
            // The loader, the reconciler, the reporter, the purger and the
            // watermarks share it.
            reconciler: pool(4, Actor::Reconciler)?,
            results: pool(2, Actor::Results)?,
            membership: pool(2, Actor::Membership)?,
            scheduler: pool(2, Actor::Scheduler)?,
            // Two passes write at once, each a few transactions at once.
            ingress: pool(crate::roles::ingress::CONNECTIONS, Actor::Ingress)?,
        })
    }
}

/// What the roles of one process share.
struct Shared {
    config: Arc<Config>,
    index: Index,
    /// Wakes the dispatcher: a job entered the index.
    wake: Arc<Notify>,
    /// Wakes the dead-letter producer: a job died.
    dead_letters: Arc<Notify>,
    topics: Topics,
    controls: TopicControls,
    tracker: TaskTracker,
    cancel: CancellationToken,
    /// Cancelled when the instance starts to drain: `/readyz` says so.
    draining: CancellationToken,
    failure: RoleFailure,
    /// The services started, by name.
    started: Arc<std::sync::Mutex<Vec<&'static str>>>,
}

impl Shared {
    /// Spawns service `name` of `role` (`None`: of every instance),
    /// watched: see [`RoleFailure`]. A name the role table does not give
    /// the role is a bug, refused here.
    fn spawn_service<F>(&self, role: Option<Role>, name: &'static str, run: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        assert!(
            services(role).contains(&name),
            "service {name:?} is not in the role table's row for {role:?}"
        );
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(name);
        spawn_role(&self.tracker, &self.cancel, &self.failure, name, run);
    }

    /// The resolver, writing through `store` (and so as its actor).
    fn resolver(&self, store: &Store) -> Resolver {
        Resolver::new(
            store.clone(),
            self.index.clone(),
            &self.config,
            self.wake.clone(),
            self.dead_letters.clone(),
        )
    }
}

/// Checks, before anything starts, that each store takes this process's
/// TLS settings and credentials. A TLS or credentials failure stops
/// start-up, naming the setting and the host; a store that is merely down
/// does not.
async fn probe(config: &mut Config) -> Result<index::RedisClient, StartError> {
    // One TLS implementation for every client that uses rustls (MySQL,
    // Redis, the HTTPS API); librdkafka brings OpenSSL for Kafka. Fails
    // only when already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    store::tls_probe(&config.mysql.url)
        .await
        .map_err(StartError::StoreTls)?;
    let redis_client = index::client_open(config).map_err(StartError::StoreTls)?;
    index::tls_probe(config)
        .await
        .map_err(StartError::StoreTls)?;
    let brokers = kafka::probe(&config.kafka.brokers, &config.kafka.options).await?;
    let lag = kafka::replica_lag(&config.kafka.brokers, &config.kafka.options, &brokers).await;
    doubt_margin_check(config, &lag);
    Ok(redis_client)
}

/// Raises `kafka.doubt_margin_ms` to the brokers' `replica.lag.time.max.ms` when
/// they answer a longer one (a record given up by its producer may become
/// visible that long after, when a lagging follower leaves the in-sync
/// replicas: reading its topic back sooner could conclude "absent" and
/// produce the job twice), and `dispatcher.claim_lease_ms` with it where the lease
/// would no longer leave time to send. Says so; says too when the brokers
/// could not be asked.
fn doubt_margin_check(config: &mut Config, lag: &kafka::ReplicaLag) {
    match lag {
        kafka::ReplicaLag::SingleBroker => {}
        kafka::ReplicaLag::Unanswered(why) => tracing::info!(
            doubt_margin_ms = config.kafka.doubt_margin_ms,
            reason = %why,
            "the brokers did not say their replica.lag.time.max.ms; on a replicated cluster kafka.doubt_margin_ms must be at least it"
        ),
        kafka::ReplicaLag::Answered { brokers, lag_ms }
            if *lag_ms > config.kafka.doubt_margin_ms =>
        {
            let lease_least = config.claim_lease_least(*lag_ms);
            tracing::warn!(
                brokers,
                replica_lag_time_max_ms = lag_ms,
                doubt_margin_ms = config.kafka.doubt_margin_ms,
                claim_lease_ms = config.dispatcher.claim_lease_ms.max(lease_least),
                "kafka.doubt_margin_ms raised to the brokers' replica.lag.time.max.ms (set it so to keep this quiet)"
            );
            config.kafka.doubt_margin_ms = *lag_ms;
            config.dispatcher.claim_lease_ms = config.dispatcher.claim_lease_ms.max(lease_least);
        }
        kafka::ReplicaLag::Answered { .. } => {}
    }
}

/// Connects to the stores and starts the configured roles. Returns once
/// every role is running; they stop when `cancel` fires.
pub async fn start(config: Config, cancel: CancellationToken) -> Result<Running, StartError> {
    start_on(config, cancel, Clock::real()).await
}

/// `tickler dev`: as [`start`], on a virtual clock that `POST
/// /v1/dev/clock` moves forward (see [`crate::domain::clock`]). Refuses to start
/// beside an instance of `tickler serve` in the same database.
pub async fn start_dev(config: Config, cancel: CancellationToken) -> Result<Running, StartError> {
    start_on(config, cancel, Clock::virtual_time()).await
}

/// The role name that marks a `tickler dev` instance in `instances.roles`.
pub use crate::roles::clock_guard::DEV_MARK;

/// Connects, runs each feature's start-up check, then starts the roles.
///
/// Long because start-up is read in order: probe, pools, the features'
/// checks, the index, what the roles share, the roles, the API.
async fn start_on(
    config: Config,
    cancel: CancellationToken,
    clock: Clock,
) -> Result<Running, StartError> {
    let mut config = config;
    let redis_client = probe(&mut config).await?;
    let keys = Keyring::load(
        config.encryption.active_key.as_deref(),
        &config.encryption.keys,
    )?;
    let config = Arc::new(config);
    // Before any role: the first request is resolved with these rules.
    let tzdata = crate::roles::tzdata::TzdataConfig::from_config(&config);
    crate::roles::tzdata::load_at_start(&tzdata);
    let pools = Pools::connect(&config, &clock, &keys)?;
    // Each feature's start-up check, in its own module.
    let compression = (config.compression.payloads == PayloadCompression::Zstd)
        .then_some(config.compression.level);
    let wrong =
        crate::roles::codec_upkeep::start_check(&pools.api, config.instance_ttl(), compression)
            .await?;
    if !wrong.is_empty() {
        return Err(StartError::KeyCanary(wrong.join(", ")));
    }
    crate::roles::clock_guard::start_check(&pools.membership, &clock, config.instance_ttl())
        .await
        .map_err(|refused| match refused {
            crate::roles::clock_guard::StartRefused::Neighbour { instance, host } => {
                StartError::ClockNeighbour {
                    instance,
                    host,
                    dev: clock.is_virtual(),
                }
            }
            crate::roles::clock_guard::StartRefused::Store(err) => StartError::Store(err),
        })?;
    let index = Index::connect_with(redis_client, &config.redis.prefix, config.cluster.shards)?
        .with_clock(clock);
    let shared = Shared {
        topics: Topics::new(
            &config.kafka.brokers,
            &config.kafka.options,
            Duration::from_millis(config.kafka.topic_refresh_ms),
        ),
        controls: TopicControls::new(pools.reconciler.clone(), &config),
        config,
        index,
        wake: Arc::new(Notify::new()),
        dead_letters: Arc::new(Notify::new()),
        tracker: TaskTracker::new(),
        cancel,
        draining: CancellationToken::new(),
        failure: RoleFailure::default(),
        started: Arc::default(),
    };
    let readiness = start_roles(&shared, &pools)?;
    // In the background: a MySQL slow to answer at start-up does not hold
    // the instance back for its audit row.
    let (audit_store, audit_config) = (pools.api.clone(), shared.config.clone());
    shared
        .tracker
        .spawn(async move { start_recorded(&audit_store, &audit_config).await });
    shared.spawn_service(
        None,
        "codec upkeep",
        crate::roles::codec_upkeep::run(
            pools.api.clone(),
            shared.config.instance_ttl(),
            shared.cancel.child_token(),
        ),
    );
    // A dev instance that finds a serve one stops: the role ends.
    shared.spawn_service(
        None,
        "clock guard",
        crate::roles::clock_guard::run(
            pools.membership.clone(),
            shared.index.clock().clone(),
            shared.config.instance_ttl(),
            shared.cancel.child_token(),
        ),
    );
    shared.spawn_service(
        None,
        "tzdata",
        service::run(
            crate::roles::tzdata::TzdataReload::new(tzdata),
            shared.cancel.child_token(),
        ),
    );
    let http_addr = if shared.config.has_role(Role::Api) {
        Some(start_api(&shared, &pools.api, readiness).await?)
    } else {
        None
    };
    Ok(Running {
        http_addr,
        store: pools.api,
        index: shared.index,
        stores: vec![
            pools.dispatcher,
            pools.verifier,
            pools.reconciler,
            pools.results,
            pools.membership,
            pools.scheduler,
            pools.ingress,
        ],
        cancel: shared.cancel,
        draining: shared.draining,
        tracker: shared.tracker,
        failure: shared.failure,
        started: shared.started,
    })
}

/// The audit log's row of this start-up: the roles and every setting in
/// force, secrets masked. A failure to write it is logged; the instance
/// starts regardless (the settings are also in its log).
async fn start_recorded(store: &Store, config: &Config) {
    let roles: Vec<&str> = config.roles.iter().map(|role| role.as_str()).collect();
    let written = crate::roles::audit::recorded(
        store,
        "instance",
        "instance.start",
        Some(roles.join(",")),
        None,
        async { Ok::<_, std::convert::Infallible>(config.masked()) },
    )
    .await;
    if let Err(err) = written {
        tracing::warn!(error = %err, "cannot write this start-up to the audit log");
    }
}

/// Starts the background roles the configuration asks for (and those every
/// instance runs: membership, the topic controls' refresher).
///
/// Long because membership and the dispatcher start together (the
/// dispatcher claims only what membership hands it, and membership leaves
/// once the dispatcher has ended); every other role is one call of its own.
fn start_roles(shared: &Shared, pools: &Pools) -> Result<Readiness, StartError> {
    let Shared {
        config,
        index,
        wake,
        cancel,
        ..
    } = shared;
    let ingress = config.has_role(Role::Ingress) && !config.ingress.topics.is_empty();
    if config.has_role(Role::Api) || config.has_role(Role::Dispatcher) || ingress {
        shared.spawn_service(
            None,
            "topics",
            service::run(shared.topics.clone(), cancel.child_token()),
        );
    }
    // Paused and paced topics, read every second; the reconciler's role
    // puts a resumed topic's jobs back in the index.
    let reindex = config
        .has_role(Role::Reconciler)
        .then(|| (index.clone(), wake.clone()));
    let refresher = ControlsRefresher::new(
        shared.controls.clone(),
        ControlsRefresherConfig::from_config(config),
        reindex,
    );
    shared.spawn_service(
        None,
        "topic controls",
        service::run(refresher, cancel.child_token()),
    );

    // Every instance registers; a dispatcher also shares the shards.
    let mut membership_config = MembershipConfig::from_config(config);
    if index.clock().is_virtual() {
        // Marks the instance as `tickler dev`'s: no `serve` starts beside it.
        membership_config.info.roles.push_str(",");
        membership_config.info.roles.push_str(DEV_MARK);
    }
    let membership = Membership::new(
        pools.membership.clone(),
        index.clone(),
        membership_config,
        wake.clone(),
    );
    let dispatcher_done = CancellationToken::new();
    if config.has_role(Role::Dispatcher) {
        let dispatcher = Dispatcher::new(
            pools.dispatcher.clone(),
            index.clone(),
            DispatcherConfig::from_config(config),
            wake.clone(),
            shared.topics.clone(),
            shared.resolver(&pools.dispatcher),
            membership.holding(),
            shared.controls.clone(),
        )?;
        let dispatcher = match start_verifier(shared, pools, &index) {
            Some(feed) => dispatcher.verified_by(feed),
            None => dispatcher,
        };
        let stop = cancel.child_token();
        let done = dispatcher_done.clone();
        shared.spawn_service(Some(Role::Dispatcher), "dispatcher", async move {
            // Also when the dispatcher panics: membership then leaves.
            let _done = done.drop_guard();
            dispatcher.run(stop).await;
        });
    }
    let ownership = membership.subscribe();
    let readers = membership.subscribe();
    let readiness = Readiness {
        draining: shared.draining.clone(),
        ownership: config
            .has_role(Role::Dispatcher)
            .then(|| membership.subscribe()),
    };
    shared.spawn_service(
        None,
        "membership",
        membership.run(cancel.child_token(), dispatcher_done),
    );
    if config.has_role(Role::Loader) {
        start_loader(shared, pools);
    }
    if config.has_role(Role::Reconciler) {
        start_reconciler(shared, pools, ownership);
    }
    if config.has_role(Role::Results) {
        start_results(shared, pools);
    }
    if ingress {
        start_ingress(shared, pools, readers)?;
    }
    Ok(readiness)
}

/// The verifier beside the dispatcher (unless `dispatcher.verify = off`):
/// the feed the dispatcher hands what it produced to.
fn start_verifier(shared: &Shared, pools: &Pools, index: &Index) -> Option<Feed> {
    let config = &shared.config;
    if config.dispatcher.verify.is_off() {
        return None;
    }
    let (verifier, feed) = Verifier::new(
        pools.verifier.clone(),
        index.clone(),
        VerifierConfig::from_config(config),
    );
    let stop = shared.cancel.child_token();
    shared.spawn_service(Some(Role::Dispatcher), "verifier", verifier.run(stop));
    Some(feed)
}

/// The loader role's services: the loader and the materializer.
fn start_loader(shared: &Shared, pools: &Pools) {
    let Shared {
        config,
        index,
        wake,
        cancel,
        ..
    } = shared;
    let loader = Loader::new(
        pools.reconciler.clone(),
        index.clone(),
        LoaderConfig::from_config(config),
        wake.clone(),
    );
    shared.spawn_service(
        Some(Role::Loader),
        "loader",
        service::run(loader, cancel.child_token()),
    );
    let materializer = Materializer::new(
        pools.scheduler.clone(),
        index.clone(),
        MaterializerConfig::from_config(config),
        wake.clone(),
    );
    shared.spawn_service(
        Some(Role::Loader),
        "materializer",
        service::run(materializer, cancel.child_token()),
    );
}

/// The reconciler role's services: the reporter, the reconciler, the watermarks, the quotas counted again, the purger.
fn start_reconciler(
    shared: &Shared,
    pools: &Pools,
    ownership: tokio::sync::watch::Receiver<crate::roles::membership::Ownership>,
) {
    let Shared {
        config,
        index,
        wake,
        cancel,
        ..
    } = shared;
    let reporter = Reporter::new(
        pools.reconciler.clone(),
        index.clone(),
        ReporterConfig::from_config(config.clone()),
        ownership,
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "reporter",
        service::run(reporter, cancel.child_token()),
    );
    let reconciler = Reconciler::new(
        pools.reconciler.clone(),
        index.clone(),
        ReconcilerConfig::from_config(config),
        wake.clone(),
        shared.resolver(&pools.reconciler),
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "reconciler",
        service::run(reconciler, cancel.child_token()),
    );
    let watermarks = crate::roles::watermarks::Watermarks::new(
        pools.reconciler.clone(),
        crate::roles::watermarks::WatermarksConfig::from_config(config),
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "watermarks",
        service::run(watermarks, cancel.child_token()),
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "quotas",
        service::run(
            crate::roles::quotas::QuotaCounter::new(pools.reconciler.clone(), config),
            cancel.child_token(),
        ),
    );
    if config.mysql.history_hand_edits == crate::config::HandEdits::Observe {
        shared.spawn_service(
            Some(Role::Reconciler),
            "hand edits",
            service::run(
                crate::roles::hand_edits::HandEditObserver::new(pools.reconciler.clone(), config),
                cancel.child_token(),
            ),
        );
    }
    let purger = PurgerConfig::from_config(config);
    if purger.retention.is_some() {
        let purger = Purger::new(pools.reconciler.clone(), purger);
        shared.spawn_service(
            Some(Role::Reconciler),
            "purger",
            service::run(purger, cancel.child_token()),
        );
    }
    let consumption = Consumption::new(
        pools.reconciler.clone(),
        ConsumptionConfig::from_config(config),
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "consumption",
        service::run(consumption, cancel.child_token()),
    );
    let wall_clock = crate::roles::tzdata::WallClockMover::new(
        Jobs::new(
            pools.reconciler.clone(),
            index.clone(),
            config.window(),
            wake.clone(),
        ),
        &crate::roles::tzdata::TzdataConfig::from_config(config),
    );
    shared.spawn_service(
        Some(Role::Reconciler),
        "wall clock",
        service::run(wall_clock, cancel.child_token()),
    );
    let caps = crate::roles::overdue_caps::OverdueCapsConfig::from_config(config);
    if !caps.caps.is_empty() {
        let caps = crate::roles::overdue_caps::OverdueCaps::new(
            Jobs::new(
                pools.reconciler.clone(),
                index.clone(),
                config.window(),
                wake.clone(),
            ),
            caps,
        );
        shared.spawn_service(
            Some(Role::Reconciler),
            "overdue caps",
            service::run(caps, cancel.child_token()),
        );
    }
}

/// The results role's services: the results consumer and the dead-letter producer.
fn start_results(shared: &Shared, pools: &Pools) {
    let Shared { config, cancel, .. } = shared;
    let consumer = ResultsConsumer::new(
        shared.resolver(&pools.results),
        ResultsConsumerConfig::from_config(config),
    );
    shared.spawn_service(
        Some(Role::Results),
        "results",
        consumer.run(cancel.child_token()),
    );
    let producer = DeadLetterProducer::new(
        pools.results.clone(),
        DeadLetterConfig::from_config(config),
        shared.dead_letters.clone(),
    );
    shared.spawn_service(
        Some(Role::Results),
        "dead letters",
        service::run(producer, cancel.child_token()),
    );
}

/// The ingress role's service, with `ingress.topics`.
fn start_ingress(
    shared: &Shared,
    pools: &Pools,
    readers: tokio::sync::watch::Receiver<crate::roles::membership::Ownership>,
) -> Result<(), StartError> {
    let Shared {
        config,
        index,
        wake,
        cancel,
        ..
    } = shared;
    let ingress = Ingress::new(
        pools.ingress.clone(),
        index.clone(),
        wake.clone(),
        shared.topics.clone(),
        config,
        IngressConfig::from_config(config),
    )
    .map_err(StartError::Ingress)?
    .with_controls(shared.controls.clone());
    shared.spawn_service(
        Some(Role::Ingress),
        "ingress",
        ingress.run(cancel.child_token(), readers),
    );
    Ok(())
}

/// Starts the API (and the metrics listener, when it has its own address)
/// with the token cache and the bulk runner it needs; returns where it
/// listens.
///
/// Long because the API's state is built in one place, from every part it
/// answers with.
async fn start_api(
    shared: &Shared,
    store: &Store,
    ready: Readiness,
) -> Result<SocketAddr, StartError> {
    let Shared {
        config,
        index,
        wake,
        tracker,
        cancel,
        ..
    } = shared;
    let limits = ServeLimits {
        max_connections: config.api.max_connections,
        header_timeout: Duration::from_millis(config.api.header_timeout_ms),
        idle_timeout: Duration::from_millis(config.api.idle_timeout_ms),
    };
    let tls = match (&config.api.tls_cert, &config.api.tls_key) {
        (Some(cert), Some(key)) => Some(api::tls_config(cert, key)?),
        _ => None,
    };
    let (listener, addr) = listen(&config.api.addr).await?;
    let tokens = TokenCache::new(store.clone(), TokenCacheConfig::from_config(config));
    let anonymous = match config.api.auth {
        AuthMode::Tokens => {
            shared.spawn_service(
                Some(Role::Api),
                "token cache",
                service::run(tokens.clone(), cancel.child_token()),
            );
            None
        }
        AuthMode::None => {
            if addr.ip().is_loopback() {
                tracing::info!("api.auth = none: the API takes any caller on loopback");
            } else {
                tracing::warn!(%addr, "api.auth = none and api.allow_anonymous = true: anyone who reaches the API may produce to any topic and change any job");
            }
            Some(Arc::new(Principal::anonymous(config)))
        }
    };
    let metrics_handle = metrics::install();
    let bulk = BulkRunner::new(
        store.clone(),
        index.clone(),
        config,
        shared.controls.clone(),
        wake.clone(),
        tracker.clone(),
        cancel.child_token(),
    );
    shared.spawn_service(
        Some(Role::Api),
        "bulk",
        service::run(bulk.clone(), cancel.child_token()),
    );
    let router = api::router(ApiState {
        store: store.clone(),
        index: index.clone(),
        config: config.clone(),
        rules: Arc::new(config.topic_rules()),
        wake: wake.clone(),
        resolver: shared.resolver(store),
        metrics: metrics_handle.clone(),
        topics: shared.topics.clone(),
        tokens,
        anonymous,
        bulk,
        controls: shared.controls.clone(),
        stats: api::StatsCache::default(),
        ready,
    });
    let stop = cancel.child_token();
    let scheme = if tls.is_some() { "https" } else { "http" };
    shared.spawn_service(Some(Role::Api), "api", async move {
        tracing::info!(%addr, scheme, "api listening");
        api::serve(listener, router, limits, tls, stop).await;
        tracing::info!("api stopped");
    });
    if let Some(metrics_addr) = &config.api.metrics_addr {
        let (listener, metrics_at) = listen(metrics_addr).await?;
        let router = api::metrics_router(metrics_handle);
        let stop = cancel.child_token();
        shared.spawn_service(Some(Role::Api), "metrics", async move {
            tracing::info!(addr = %metrics_at, "metrics listening (no token needed)");
            api::serve(listener, router, limits, None, stop).await;
        });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doubt_margin_is_raised_to_the_brokers_replica_lag_and_the_lease_with_it() {
        let mut config = Config::default();
        let before = config.clone();
        doubt_margin_check(&mut config, &kafka::ReplicaLag::SingleBroker);
        doubt_margin_check(&mut config, &kafka::ReplicaLag::Unanswered("no".into()));
        doubt_margin_check(
            &mut config,
            &kafka::ReplicaLag::Answered {
                brokers: 3,
                lag_ms: before.kafka.doubt_margin_ms,
            },
        );
        assert_eq!(config, before, "nothing longer answered: nothing changes");

        doubt_margin_check(
            &mut config,
            &kafka::ReplicaLag::Answered {
                brokers: 3,
                lag_ms: 30_000,
            },
        );
        assert_eq!(config.kafka.doubt_margin_ms, 30_000);
        assert_eq!(
            config.dispatcher.claim_lease_ms,
            before.dispatcher.lookahead_ms + before.kafka.message_timeout_ms + 30_000 + 500
        );
        config.validate().expect("what it raised is valid");

        // A lease already long enough stays.
        let mut long = Config::default();
        long.dispatcher.claim_lease_ms = 120_000;
        doubt_margin_check(
            &mut long,
            &kafka::ReplicaLag::Answered {
                brokers: 3,
                lag_ms: 30_000,
            },
        );
        assert_eq!(long.dispatcher.claim_lease_ms, 120_000);
    }

    /// Runs `role` watched, waits for every role to end, and says which
    /// role failed and whether the others were told to stop.
    async fn watched<F>(role: F, cancel_first: bool) -> (Option<&'static str>, bool)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let tracker = TaskTracker::new();
        let cancel = CancellationToken::new();
        let failure = RoleFailure::default();
        // A role that runs until told to stop, like most.
        let stop = cancel.clone();
        spawn_role(&tracker, &cancel, &failure, "steady", async move {
            stop.cancelled().await
        });
        if cancel_first {
            cancel.cancel();
        }
        spawn_role(&tracker, &cancel, &failure, "tested", role);
        tracker.close();
        let ended = tokio::time::timeout(Duration::from_secs(10), tracker.wait()).await;
        assert!(ended.is_ok(), "every role ended");
        (failure.role(), cancel.is_cancelled())
    }

    #[tokio::test]
    async fn a_role_that_panics_stops_every_role_and_is_named() {
        let (failed, stopped) = watched(async { panic!("a bug") }, false).await;
        assert_eq!(failed, Some("tested"));
        assert!(stopped);
    }

    #[tokio::test]
    async fn a_role_that_returns_before_shutdown_stops_every_role_and_is_named() {
        let (failed, stopped) = watched(async {}, false).await;
        assert_eq!(failed, Some("tested"));
        assert!(stopped);
    }

    #[tokio::test]
    async fn a_role_that_returns_at_shutdown_is_no_failure() {
        let (failed, _) = watched(async {}, true).await;
        assert_eq!(failed, None);
    }

    #[tokio::test]
    async fn a_role_that_panics_during_shutdown_is_still_named() {
        let (failed, _) = watched(async { panic!("a bug while stopping") }, true).await;
        assert_eq!(failed, Some("tested"));
    }
}
