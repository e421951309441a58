//! The HTTP(S) server: accepts connections up to a cap, gives each one a
//! deadline for its TLS handshake and for every request's headers (an idle
//! kept-alive connection is closed after it too), and stops taking
//! connections — letting the ones open finish their request — when
//! cancelled.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics;

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections held at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// For the TLS handshake, each request's headers, and idleness.
    pub header_timeout: Duration,
}

/// A certificate or key that cannot serve HTTPS, naming the setting.
#[derive(Debug, thiserror::Error)]
#[error("{setting} ({path}): {problem}")]
pub struct TlsError {
    pub setting: &'static str,
    pub path: String,
    pub problem: String,
}

/// The rustls configuration for `cert` (a PEM chain) and `key`.
pub fn tls_config(cert: &str, key: &str) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let error = |setting, path: &str, problem: String| TlsError {
        setting,
        path: path.to_owned(),
        problem,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(Path::new(cert))
        .and_then(|certs| certs.collect())
        .map_err(|err| error("api_tls_cert", cert, err.to_string()))?;
    if certs.is_empty() {
        return Err(error(
            "api_tls_cert",
            cert,
            "holds no certificate".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(Path::new(key))
        .map_err(|err| error("api_tls_key", key, err.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| error("api_tls_cert", cert, err.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| {
            error(
                "api_tls_key",
                cert,
                format!("does not fit the certificate: {err}"),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves `router` on `listener` until `cancel` fires, then waits for the
/// connections open to finish the request in hand.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    tls: Option<Arc<rustls::ServerConfig>>,
    cancel: CancellationToken,
) {
    let tls = tls.map(TlsAcceptor::from);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    loop {
        let slot = tokio::select! {
            _ = cancel.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let (stream, _peer) = tokio::select! {
            _ = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors, mostly: wait for some to close.
                    tracing::warn!(error = %err, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let tls = tls.clone();
        let stop = cancel.clone();
        connections.spawn(async move {
            let _slot = slot;
            metrics::api_connection_opened();
            match tls {
                None => connection_serve(stream, router, limits, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => connection_serve(stream, router, limits, stop).await,
                        Ok(Err(err)) => tracing::debug!(error = %err, "tls handshake failed"),
                        Err(_) => tracing::debug!("tls handshake timed out"),
                    }
                }
            }
            metrics::api_connection_closed();
        });
    }
    connections.close();
    connections.wait().await;
}

async fn connection_serve<S>(
    stream: S,
    router: Router,
    limits: ServeLimits,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let connection =
        builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::pin!(connection);
    let served: Result<(), hyper::Error> = tokio::select! {
        served = connection.as_mut() => served,
        _ = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(err) = served {
        if !is_routine(&err) {
            tracing::debug!(error = %err, "connection ended with an error");
        }
    }
}

/// A client that went away or was too slow: not worth a log line.
fn is_routine(err: &hyper::Error) -> bool {
    err.is_timeout()
        || err.is_incomplete_message()
        || std::error::Error::source(err)
            .and_then(|s| s.downcast_ref::<io::Error>())
            .is_some_and(|e| {
                matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                )
            })
}
