//! The HTTP(S) server: accepts connections up to a cap, gives each one a
//! deadline for its TLS handshake and for every request's headers (counted
//! from the connection's start, then from each request's first byte), closes
//! a kept-alive connection after a longer idle time, and stops taking
//! connections — letting the ones open finish their request — when
//! cancelled.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics;

/// What one listener allows.
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections held at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// For the TLS handshake and each request's headers.
    pub header_timeout: Duration,
    /// For a kept-alive connection that sends nothing after an answer.
    pub idle_timeout: Duration,
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
        .map_err(|err| error("api.tls_cert", cert, err.to_string()))?;
    if certs.is_empty() {
        return Err(error(
            "api.tls_cert",
            cert,
            "holds no certificate".to_owned(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(Path::new(key))
        .map_err(|err| error("api.tls_key", key, err.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| error("api.tls_cert", cert, err.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|err| {
            error(
                "api.tls_key",
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
        let (stream, peer) = tokio::select! {
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
                None => connection_serve(stream, peer, router, limits, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_timeout, acceptor.accept(stream)).await
                    {
                        Ok(Ok(stream)) => {
                            connection_serve(stream, peer, router, limits, stop).await
                        }
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

/// The address a request's connection came from (a request extension):
/// the audit log's "from where".
#[derive(Debug, Clone, Copy)]
pub struct PeerAddr(pub std::net::SocketAddr);

async fn connection_serve<S>(
    stream: S,
    peer: std::net::SocketAddr,
    router: Router,
    limits: ServeLimits,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let clock = Arc::new(HeadClock::new());
    let stream = Watched {
        inner: stream,
        clock: clock.clone(),
    };
    let inner = TowerToHyperService::new(router);
    let in_hand = clock.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        in_hand.request_in_hand();
        request.extensions_mut().insert(PeerAddr(peer));
        let answer = inner.call(request);
        let clock = in_hand.clone();
        async move {
            let answer = answer.await;
            clock.answered();
            answer
        }
    });
    let mut builder = http1::Builder::new();
    // hyper's own clock runs from the end of an answer to the end of the
    // next request's headers: the idle time. The header deadline, counted
    // from the request's first byte, is `clock`'s.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let mut stopping = false;
    let served: Result<(), hyper::Error> = loop {
        let check = clock
            .head_deadline(limits.header_timeout)
            .unwrap_or_else(|| Instant::now() + limits.header_timeout);
        tokio::select! {
            served = connection.as_mut() => break served,
            _ = stop.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = tokio::time::sleep_until(check) => {
                if clock.head_deadline(limits.header_timeout).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!("request headers not in within the header timeout: closing");
                    return;
                }
            }
        }
    };
    if let Err(err) = served {
        if !is_routine(&err) {
            tracing::debug!(error = %err, "connection ended with an error");
        }
    }
}

/// When the request being read began: the connection's start for its first
/// request, the first byte after an answer for the next ones.
struct HeadClock {
    origin: Instant,
    /// `IDLE`, `IN_HAND`, or 1 + the milliseconds from `origin` at which
    /// the request's first byte came.
    state: AtomicU64,
}

const IDLE: u64 = 0;
const IN_HAND: u64 = u64::MAX;

impl HeadClock {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            state: AtomicU64::new(1),
        }
    }

    fn bytes_arrived(&self) {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let _ = self
            .state
            .compare_exchange(IDLE, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn request_in_hand(&self) {
        self.state.store(IN_HAND, Ordering::Relaxed);
    }

    fn answered(&self) {
        self.state.store(IDLE, Ordering::Relaxed);
    }

    /// When the headers being read must be in, if some are being read.
    fn head_deadline(&self, header_timeout: Duration) -> Option<Instant> {
        match self.state.load(Ordering::Relaxed) {
            IDLE | IN_HAND => None,
            started => Some(self.origin + Duration::from_millis(started - 1) + header_timeout),
        }
    }
}

/// A connection's stream that starts its `HeadClock` when bytes come.
struct Watched<S> {
    inner: S,
    clock: Arc<HeadClock>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.bytes_arrived();
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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
