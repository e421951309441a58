//! A client of a running tickler's HTTP API, for the CLI: one place that
//! knows the address, the token and how the API says no.

use std::path::Path;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
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

#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
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
        let base = url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::Usage(format!(
                "the API address {url:?} must start with http:// or https:// (--url or TICKLER_URL)"
            )));
        }
        // rustls needs its crypto chosen once per process; already chosen
        // is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut headers = HeaderMap::new();
        if let Some(token) = token.filter(|t| !t.is_empty()) {
            let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ClientError::Usage(
                    "the token is not a valid header value (--token or TICKLER_TOKEN)".to_owned(),
                )
            })?;
            headers.insert(AUTHORIZATION, value);
        }
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tickler-cli/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = ca_cert {
            let pem = std::fs::read(path).map_err(|err| {
                ClientError::Usage(format!(
                    "cannot read the CA certificate {}: {err}",
                    path.display()
                ))
            })?;
            let cert = reqwest::Certificate::from_pem(&pem).map_err(|err| {
                ClientError::Usage(format!(
                    "{} is not a PEM certificate: {err}",
                    path.display()
                ))
            })?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder
            .build()
            .map_err(|err| ClientError::Usage(format!("cannot make an HTTP client: {err}")))?;
        Ok(Client { base, http })
    }

    pub fn base(&self) -> &str {
        &self.base
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
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|err| {
            ClientError::Unavailable(format!(
                "cannot reach tickler at {}: {} (is it running? --url or TICKLER_URL)",
                self.base,
                error_chain(&err)
            ))
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|err| {
            ClientError::Unavailable(format!("reading the answer from {url}: {err}"))
        })?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok((status, value));
        }
        let code = value["error"]["code"].as_str().unwrap_or("").to_owned();
        let message = value["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| text.chars().take(200).collect());
        if status.is_server_error() || code.is_empty() {
            return Err(ClientError::Unavailable(format!(
                "tickler answered {status}{}: {message}",
                if code.is_empty() {
                    String::new()
                } else {
                    format!(" {code}")
                }
            )));
        }
        Err(ClientError::Refused {
            status,
            code,
            message,
            body: value,
        })
    }
}

/// An error with its causes, one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
