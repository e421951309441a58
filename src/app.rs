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
use crate::config::{AuthMode, Config};
use crate::dispatcher::{DispatchError, Dispatcher, DispatcherConfig};
use crate::index::{self, Index, IndexError};
use crate::kafka::{self, Topics};
use crate::loader::{Loader, LoaderConfig};
use crate::materializer::{Materializer, MaterializerConfig};
use crate::membership::{Membership, MembershipConfig};
use crate::metrics;
use crate::reconciler::{Reconciler, ReconcilerConfig};
use crate::reporter::{Reporter, ReporterConfig};
use crate::results::{
    DeadLetterConfig, DeadLetterProducer, Resolver, ResultsConsumer, ResultsConsumerConfig,
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

/// Connects to the stores and starts the configured roles. Returns once
/// every role is running; they stop when `cancel` fires.
pub async fn start(config: Config, cancel: CancellationToken) -> Result<Running, StartError> {
    let config = Arc::new(config);
    // One TLS implementation for every client that uses rustls (MySQL,
    // Redis, the HTTPS API); librdkafka brings OpenSSL for Kafka. Fails
    // only when already installed, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // A TLS or credentials failure stops start-up, naming the setting and
    // the host; a store that is merely down does not.
    store::tls_probe(&config.mysql_url)
        .await
        .map_err(StartError::StoreTls)?;
    let redis_client = index::client_open(&config).map_err(StartError::StoreTls)?;
    index::tls_probe(&config)
        .await
        .map_err(StartError::StoreTls)?;
    kafka::probe(&config.kafka_brokers, &config.kafka_options).await?;
    // One pool per actor, so the jobs' history says who changed what.
    let store = Store::connect_lazy(&config.mysql_url, config.mysql_pool_size, Actor::Api)?;
    let dispatcher_store = Store::connect_lazy(&config.mysql_url, 4, Actor::Dispatcher)?;
    let reconciler_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Reconciler)?;
    let results_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Results)?;
    // Its own pool: heartbeats must not queue behind the reconciler's scans.
    let membership_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Membership)?;
    let scheduler_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Scheduler)?;
    let index = Index::connect_with(redis_client, &config.redis_prefix, config.shards)?;
    let wake = Arc::new(Notify::new());
    let dead_letters = Arc::new(Notify::new());
    let resolver_for = |store: &Store| {
        Resolver::new(
            store.clone(),
            index.clone(),
            config.clone(),
            wake.clone(),
            dead_letters.clone(),
        )
    };
    let tracker = TaskTracker::new();
    let topics = Topics::new(
        &config.kafka_brokers,
        &config.kafka_options,
        Duration::from_millis(config.topic_refresh_ms),
    );
    if config.has_role("api") || config.has_role("dispatcher") {
        tracker.spawn(topics.clone().run(cancel.child_token()));
    }
    // Paused and paced topics, read every second; the reconciler's role
    // puts a resumed topic's jobs back in the index.
    let controls = TopicControls::new(reconciler_store.clone(), config.clone());
    let reindex = config
        .has_role("reconciler")
        .then(|| (index.clone(), wake.clone()));
    let refresher = ControlsRefresher::new(
        controls.clone(),
        ControlsRefresherConfig::from_config(&config),
        reindex,
    );
    tracker.spawn(refresher.run(cancel.child_token()));

    // Every instance registers; a dispatcher also shares the shards.
    let membership = Membership::new(
        membership_store.clone(),
        index.clone(),
        MembershipConfig::from_config(&config),
        wake.clone(),
    );
    let dispatcher_done = CancellationToken::new();
    if config.has_role("dispatcher") {
        let dispatcher = Dispatcher::new(
            dispatcher_store.clone(),
            index.clone(),
            DispatcherConfig::from_config(&config),
            wake.clone(),
            topics.clone(),
            resolver_for(&dispatcher_store),
            membership.holding(),
            controls.clone(),
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
            reconciler_store.clone(),
            index.clone(),
            LoaderConfig::from_config(&config),
            wake.clone(),
        );
        tracker.spawn(loader.run(cancel.child_token()));
        let materializer = Materializer::new(
            scheduler_store.clone(),
            index.clone(),
            MaterializerConfig::from_config(&config),
            wake.clone(),
        );
        tracker.spawn(materializer.run(cancel.child_token()));
    }

    if config.has_role("reconciler") {
        let reporter = Reporter::new(
            reconciler_store.clone(),
            index.clone(),
            ReporterConfig::from_config(config.clone()),
            ownership,
        );
        tracker.spawn(reporter.run(cancel.child_token()));
        let reconciler = Reconciler::new(
            reconciler_store.clone(),
            index.clone(),
            ReconcilerConfig::from_config(&config),
            wake.clone(),
            resolver_for(&reconciler_store),
        );
        tracker.spawn(reconciler.run(cancel.child_token()));
    }
    if config.has_role("results") {
        let consumer = ResultsConsumer::new(
            resolver_for(&results_store),
            ResultsConsumerConfig::from_config(&config),
        );
        tracker.spawn(consumer.run(cancel.child_token()));
        let producer = DeadLetterProducer::new(
            results_store.clone(),
            DeadLetterConfig::from_config(config.clone()),
            dead_letters.clone(),
        );
        tracker.spawn(producer.run(cancel.child_token()));
    }

    let mut http_addr = None;
    if config.has_role("api") {
        let limits = ServeLimits {
            max_connections: config.api_max_connections,
            header_timeout: Duration::from_millis(config.api_header_timeout_ms),
        };
        let tls = match (&config.api_tls_cert, &config.api_tls_key) {
            (Some(cert), Some(key)) => Some(api::tls_config(cert, key)?),
            _ => None,
        };
        let (listener, addr) = listen(&config.http_addr).await?;
        http_addr = Some(addr);
        let tokens = TokenCache::new(store.clone(), TokenCacheConfig::from_config(&config));
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
                Some(Arc::new(Principal::anonymous(&config)))
            }
        };
        let metrics_handle = metrics::install();
        let bulk = crate::bulk::BulkRunner::new(
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
            resolver: resolver_for(&store),
            metrics: metrics_handle.clone(),
            topics: topics.clone(),
            tokens,
            anonymous,
            bulk,
            controls: controls.clone(),
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
            let (listener, addr) = listen(metrics_addr).await?;
            let router = api::metrics_router(metrics_handle);
            let stop = cancel.child_token();
            tracker.spawn(async move {
                tracing::info!(%addr, "metrics listening (no token needed)");
                api::serve(listener, router, limits, None, stop).await;
            });
        }
    }

    Ok(Running {
        http_addr,
        stores: vec![
            dispatcher_store,
            reconciler_store,
            results_store,
            membership_store,
            scheduler_store,
        ],
        store,
        index,
        cancel,
        tracker,
    })
}
