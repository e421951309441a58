//! A client of a running tickler's HTTP API, for the CLI: one place that
//! knows the address, the token and how the API says no.

use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// How a call failed; each maps to the CLI's exit code.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API refused, with its stable code: the caller's mistake or the
    /// job's state (exit 1).
    #[error("{code}: {message}")]
    Refused {
        status: StatusCode,
        code: String,
        message: String,
        body: Value,
    },
    /// Our own usage mistake, found before sending (exit 2).
    #[error("{0}")]
    Usage(String),
    /// The API could not be reached, or failed on its side (exit 3).
    #[error("{0}")]
    Unavailable(String),
}

impl ClientError {
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Refused { .. } => 1,
            ClientError::Usage(_) => 2,
            ClientError::Unavailable(_) => 3,
        }
    }
}

/// The CLI's client: [`tickler_client::Client`] (the crate users install),
/// its answers and errors mapped to the CLI's exit codes. No retries: a
/// person at a terminal decides.
#[derive(Clone)]
pub struct Client {
    inner: tickler_client::Client,
}

impl Client {
    /// A client of the API at `url` (e.g. `https://tickler.internal:8443`),
    /// sending `token` as a bearer token, trusting `ca_cert` (PEM) besides
    /// the system's roots.
    pub fn new(
        url: &str,
        token: Option<&str>,
        ca_cert: Option<&Path>,
    ) -> Result<Client, ClientError> {
        // rustls needs its crypto chosen once per process; already chosen
        // is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = tickler_client::Client::builder(url)
            .retries(0)
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tickler-cli/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = token {
            builder = builder.token(token);
        }
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).map_err(|err| {
                ClientError::Usage(format!(
                    "cannot read the CA certificate {}: {err}",
                    path.display()
                ))
            })?;
            builder = builder.ca_pem(pem);
        }
        let inner = builder.build().map_err(|err| match err {
            tickler_client::Error::Usage(problem) => ClientError::Usage(format!(
                "{problem} (--url or TICKLER_URL, --token or TICKLER_TOKEN, --ca-cert)"
            )),
            other => ClientError::Usage(other.to_string()),
        })?;
        Ok(Client { inner })
    }

    pub fn base(&self) -> &str {
        self.inner.base()
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, None).await.map(|(_, v)| v)
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<(StatusCode, Value), ClientError> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::PATCH, path, Some(body))
            .await
            .map(|(_, v)| v)
    }

    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::DELETE, path, None).await.map(|(_, v)| v)
    }

    /// Sends one request; a 2xx answer's JSON, or why not.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), ClientError> {
        match self.inner.request(method, path, body).await {
            Ok(answer) => Ok(answer),
            Err(tickler_client::Error::Usage(problem)) => Err(ClientError::Usage(problem)),
            Err(tickler_client::Error::Unavailable(problem)) => Err(ClientError::Unavailable(
                format!("{problem} (is it running? --url or TICKLER_URL)"),
            )),
            Err(tickler_client::Error::Api {
                status,
                code_text,
                message,
                body,
                ..
            }) => {
                if status.is_server_error() || code_text.is_empty() {
                    return Err(ClientError::Unavailable(format!(
                        "tickler answered {status}{}: {message}",
                        if code_text.is_empty() {
                            String::new()
                        } else {
                            format!(" {code_text}")
                        }
                    )));
                }
                Err(ClientError::Refused {
                    status,
                    code: code_text,
                    message,
                    body,
                })
            }
        }
    }
}
