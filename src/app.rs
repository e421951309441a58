//! Starts the roles a configuration asks for, all under one cancellation
//! token and one task tracker, and stops them in order: the HTTP server
//! stops taking requests, the dispatcher finishes the batch in hand, then
//! the process exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ApiState, ServeLimits};
use crate::auth::{Principal, TokenCache, TokenCacheConfig};
use crate::bulk::BulkRunner;
use crate::config::{AuthMode, Config};
use crate::dispatcher::{DispatchError, Dispatcher, DispatcherConfig};
use crate::index::{self, Index, IndexError};
use crate::ingress::{Ingress, IngressConfig};
use crate::kafka::{self, Topics};
use crate::loader::{Loader, LoaderConfig};
use crate::materializer::{Materializer, MaterializerConfig};
use crate::membership::{Membership, MembershipConfig};
use crate::metrics;
use crate::reconciler::{Reconciler, ReconcilerConfig};
use crate::reporter::{Reporter, ReporterConfig};
use crate::resolver::Resolver;
use crate::results::{
    DeadLetterConfig, DeadLetterProducer, ResultsConsumer, ResultsConsumerConfig,
};
use crate::store::{self, Actor, Store, StoreError};
use crate::topic_controls::{ControlsRefresher, ControlsRefresherConfig, TopicControls};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("mysql: {0}")]
    Store(#[from] StoreError),
    #[error("redis: {0}")]
    Index(#[from] IndexError),
    #[error("kafka: {0}")]
    Dispatcher(#[from] DispatchError),
    #[error("kafka (ingress): {0}")]
    Ingress(rdkafka::error::KafkaError),
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
    tracker: TaskTracker,
}

impl Running {
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
    let running = start(config, CancellationToken::new()).await?;
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight batches");
    running.shutdown().await;
    Ok(())
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

/// One pool per actor, so the jobs' history says who changed what.
struct Pools {
    api: Store,
    dispatcher: Store,
    reconciler: Store,
    results: Store,
    /// Its own pool: heartbeats must not queue behind the reconciler's scans.
    membership: Store,
    scheduler: Store,
    ingress: Store,
}

impl Pools {
    fn connect(config: &Config) -> Result<Pools, StoreError> {
        let url = &config.mysql_url;
        Ok(Pools {
            api: Store::connect_lazy(url, config.mysql_pool_size, Actor::Api)?,
            dispatcher: Store::connect_lazy(url, 4, Actor::Dispatcher)?,
            reconciler: Store::connect_lazy(url, 2, Actor::Reconciler)?,
            results: Store::connect_lazy(url, 2, Actor::Results)?,
            membership: Store::connect_lazy(url, 2, Actor::Membership)?,
            scheduler: Store::connect_lazy(url, 2, Actor::Scheduler)?,
            // Two passes write at once, each a few transactions at once.
            ingress: Store::connect_lazy(url, crate::ingress::CONNECTIONS, Actor::Ingress)?,
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
}

impl Shared {
    /// The resolver, writing through `store` (and so as its actor).
    fn resolver(&self, store: &Store) -> Resolver {
        Resolver::new(
            store.clone(),
            self.index.clone(),
            self.config.clone(),
            self.wake.clone(),
            self.dead_letters.clone(),
        )
    }
}

/// Checks, before anything starts, that each store takes this process's
/// TLS settings and credentials. A TLS or credentials failure stops
/// start-up, naming the setting and the host; a store that is merely down
/// does not.
async fn probe(config: &Config) -> Result<index::RedisClient, StartError> {
    // One TLS implementation for every client that uses rustls (MySQL,
    // Redis, the HTTPS API); librdkafka brings OpenSSL for Kafka. Fails
    // only when already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    store::tls_probe(&config.mysql_url)
        .await
        .map_err(StartError::StoreTls)?;
    let redis_client = index::client_open(config).map_err(StartError::StoreTls)?;
    index::tls_probe(config)
        .await
        .map_err(StartError::StoreTls)?;
    kafka::probe(&config.kafka_brokers, &config.kafka_options).await?;
    Ok(redis_client)
}

/// Connects to the stores and starts the configured roles. Returns once
/// every role is running; they stop when `cancel` fires.
pub async fn start(config: Config, cancel: CancellationToken) -> Result<Running, StartError> {
    let config = Arc::new(config);
    let redis_client = probe(&config).await?;
    let pools = Pools::connect(&config)?;
    let index = Index::connect_with(redis_client, &config.redis_prefix, config.shards)?;
    let shared = Shared {
        topics: Topics::new(
            &config.kafka_brokers,
            &config.kafka_options,
            Duration::from_millis(config.topic_refresh_ms),
        ),
        controls: TopicControls::new(pools.reconciler.clone(), config.clone()),
        config,
        index,
        wake: Arc::new(Notify::new()),
        dead_letters: Arc::new(Notify::new()),
        tracker: TaskTracker::new(),
        cancel,
    };
    start_roles(&shared, &pools)?;
    let http_addr = if shared.config.has_role("api") {
        Some(start_api(&shared, &pools.api).await?)
    } else {
        None
    };
    Ok(Running {
        http_addr,
        store: pools.api,
        index: shared.index,
        stores: vec![
            pools.dispatcher,
            pools.reconciler,
            pools.results,
            pools.membership,
            pools.scheduler,
            pools.ingress,
        ],
        cancel: shared.cancel,
        tracker: shared.tracker,
    })
}

/// Starts the background roles the configuration asks for (and those every
/// instance runs: membership, the topic controls' refresher).
///
/// Long because it is a list: each role the configuration asks for, built
/// and spawned in the order they depend on each other.
fn start_roles(shared: &Shared, pools: &Pools) -> Result<(), StartError> {
    let Shared {
        config,
        index,
        wake,
        tracker,
        cancel,
        ..
    } = shared;
    let ingress = config.has_role("ingress") && !config.ingress.topics.is_empty();
    if config.has_role("api") || config.has_role("dispatcher") || ingress {
        tracker.spawn(shared.topics.clone().run(cancel.child_token()));
    }
    // Paused and paced topics, read every second; the reconciler's role
    // puts a resumed topic's jobs back in the index.
    let reindex = config
        .has_role("reconciler")
        .then(|| (index.clone(), wake.clone()));
    let refresher = ControlsRefresher::new(
        shared.controls.clone(),
        ControlsRefresherConfig::from_config(config),
        reindex,
    );
    tracker.spawn(refresher.run(cancel.child_token()));

    // Every instance registers; a dispatcher also shares the shards.
    let membership = Membership::new(
        pools.membership.clone(),
        index.clone(),
        MembershipConfig::from_config(config),
        wake.clone(),
    );
    let dispatcher_done = CancellationToken::new();
    if config.has_role("dispatcher") {
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
        let stop = cancel.child_token();
        let done = dispatcher_done.clone();
        tracker.spawn(async move {
            dispatcher.run(stop).await;
            done.cancel();
        });
    }
    let ownership = membership.subscribe();
    tracker.spawn(membership.run(cancel.child_token(), dispatcher_done));
    if config.has_role("loader") {
        let loader = Loader::new(
            pools.reconciler.clone(),
            index.clone(),
            LoaderConfig::from_config(config),
            wake.clone(),
        );
        tracker.spawn(loader.run(cancel.child_token()));
        let materializer = Materializer::new(
            pools.scheduler.clone(),
            index.clone(),
            MaterializerConfig::from_config(config),
            wake.clone(),
        );
        tracker.spawn(materializer.run(cancel.child_token()));
    }
    if config.has_role("reconciler") {
        let reporter = Reporter::new(
            pools.reconciler.clone(),
            index.clone(),
            ReporterConfig::from_config(config.clone()),
            ownership,
        );
        tracker.spawn(reporter.run(cancel.child_token()));
        let reconciler = Reconciler::new(
            pools.reconciler.clone(),
            index.clone(),
            ReconcilerConfig::from_config(config),
            wake.clone(),
            shared.resolver(&pools.reconciler),
        );
        tracker.spawn(reconciler.run(cancel.child_token()));
    }
    if config.has_role("results") {
        let consumer = ResultsConsumer::new(
            shared.resolver(&pools.results),
            ResultsConsumerConfig::from_config(config),
        );
        tracker.spawn(consumer.run(cancel.child_token()));
        let producer = DeadLetterProducer::new(
            pools.results.clone(),
            DeadLetterConfig::from_config(config.clone()),
            shared.dead_letters.clone(),
        );
        tracker.spawn(producer.run(cancel.child_token()));
    }
    if ingress {
        let ingress = Ingress::new(
            pools.ingress.clone(),
            index.clone(),
            wake.clone(),
            shared.topics.clone(),
            config.clone(),
            IngressConfig::from_config(config),
        )
        .map_err(StartError::Ingress)?;
        tracker.spawn(ingress.run(cancel.child_token()));
    }
    Ok(())
}

/// Starts the API (and the metrics listener, when it has its own address)
/// with the token cache and the bulk runner it needs; returns where it
/// listens.
async fn start_api(shared: &Shared, store: &Store) -> Result<SocketAddr, StartError> {
    let Shared {
        config,
        index,
        wake,
        tracker,
        cancel,
        ..
    } = shared;
    let limits = ServeLimits {
        max_connections: config.api_max_connections,
        header_timeout: Duration::from_millis(config.api_header_timeout_ms),
        idle_timeout: Duration::from_millis(config.api_idle_timeout_ms),
    };
    let tls = match (&config.api_tls_cert, &config.api_tls_key) {
        (Some(cert), Some(key)) => Some(api::tls_config(cert, key)?),
        _ => None,
    };
    let (listener, addr) = listen(&config.http_addr).await?;
    let tokens = TokenCache::new(store.clone(), TokenCacheConfig::from_config(config));
    let anonymous = match config.auth {
        AuthMode::Tokens => {
            tracker.spawn(tokens.clone().run(cancel.child_token()));
            None
        }
        AuthMode::None => {
            if addr.ip().is_loopback() {
                tracing::info!("auth = none: the API takes any caller on loopback");
            } else {
                tracing::warn!(%addr, "auth = none and allow_anonymous = true: anyone who reaches the API may produce to any topic and change any job");
            }
            Some(Arc::new(Principal::anonymous(config)))
        }
    };
    let metrics_handle = metrics::install();
    let bulk = BulkRunner::new(
        store.clone(),
        index.clone(),
        config.clone(),
        wake.clone(),
        tracker.clone(),
        cancel.child_token(),
    );
    tracker.spawn(bulk.clone().run());
    let router = api::router(ApiState {
        store: store.clone(),
        index: index.clone(),
        config: config.clone(),
        wake: wake.clone(),
        resolver: shared.resolver(store),
        metrics: metrics_handle.clone(),
        topics: shared.topics.clone(),
        tokens,
        anonymous,
        bulk,
        controls: shared.controls.clone(),
        stats: api::StatsCache::default(),
    });
    let stop = cancel.child_token();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracker.spawn(async move {
        tracing::info!(%addr, scheme, "api listening");
        api::serve(listener, router, limits, tls, stop).await;
        tracing::info!("api stopped");
    });
    if let Some(metrics_addr) = &config.metrics_addr {
        let (listener, metrics_at) = listen(metrics_addr).await?;
        let router = api::metrics_router(metrics_handle);
        let stop = cancel.child_token();
        tracker.spawn(async move {
            tracing::info!(addr = %metrics_at, "metrics listening (no token needed)");
            api::serve(listener, router, limits, None, stop).await;
        });
    }
    Ok(addr)
}
