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

use crate::api::{self, ApiState};
use crate::config::Config;
use crate::dispatcher::{DispatchError, Dispatcher, DispatcherConfig};
use crate::index::{Index, IndexError};
use crate::kafka::Topics;
use crate::loader::{Loader, LoaderConfig};
use crate::metrics;
use crate::reconciler::{Reconciler, ReconcilerConfig};
use crate::results::{
    DeadLetterConfig, DeadLetterProducer, Resolver, ResultsConsumer, ResultsConsumerConfig,
};
use crate::store::{Actor, Store, StoreError};

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

/// Connects to the stores and starts the configured roles. Returns once
/// every role is running; they stop when `cancel` fires.
pub async fn start(config: Config, cancel: CancellationToken) -> Result<Running, StartError> {
    let config = Arc::new(config);
    // One pool per actor, so the jobs' history says who changed what.
    let store = Store::connect_lazy(&config.mysql_url, config.mysql_pool_size, Actor::Api)?;
    let dispatcher_store = Store::connect_lazy(&config.mysql_url, 4, Actor::Dispatcher)?;
    let reconciler_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Reconciler)?;
    let results_store = Store::connect_lazy(&config.mysql_url, 2, Actor::Results)?;
    let index = Index::connect(&config.redis_url, &config.redis_prefix, config.shards).await?;
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

    if config.has_role("dispatcher") {
        let dispatcher = Dispatcher::new(
            dispatcher_store.clone(),
            index.clone(),
            DispatcherConfig::from_config(&config),
            wake.clone(),
            topics.clone(),
            resolver_for(&dispatcher_store),
        )?;
        tracker.spawn(dispatcher.run(cancel.child_token()));
    }
    if config.has_role("loader") {
        let loader = Loader::new(
            reconciler_store.clone(),
            index.clone(),
            LoaderConfig::from_config(&config),
            wake.clone(),
        );
        tracker.spawn(loader.run(cancel.child_token()));
    }

    if config.has_role("reconciler") {
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
        let listener = TcpListener::bind(&config.http_addr)
            .await
            .map_err(|source| StartError::Listen {
                addr: config.http_addr.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.http_addr.clone(),
            source,
        })?;
        http_addr = Some(addr);
        let router = api::router(ApiState {
            store: store.clone(),
            index: index.clone(),
            config: config.clone(),
            wake: wake.clone(),
            resolver: resolver_for(&store),
            metrics: metrics::install(),
            topics: topics.clone(),
        });
        let stop = cancel.child_token();
        tracker.spawn(async move {
            tracing::info!(%addr, "api listening");
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await;
            if let Err(err) = served {
                tracing::error!(error = %err, "http server failed");
            }
            tracing::info!("api stopped");
        });
    }

    Ok(Running {
        http_addr,
        stores: vec![dispatcher_store, reconciler_store, results_store],
        store,
        index,
        cancel,
        tracker,
    })
}
