//! Who may call the API: tokens, their scopes and topic patterns, their rate
//! limits, and the in-memory cache that answers "who is this secret" without
//! a database round trip.
//!
//! A secret is `tkl_` and 43 characters of base64url (32 random bytes); the
//! table keeps only its SHA-256. The cache holds every active token and is
//! read again every `api.token_refresh_ms`, so a revoke takes effect within that
//! time. A secret the cache does not know makes it read the table again
//! (at most once per `MISS_REFRESH`), so a token created a moment ago works
//! on its first request and garbage costs the database at most a few small
//! queries a second.

pub mod rate;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::Config;
use crate::domain::topic_pattern;
use crate::index::Index;
use crate::roles::auth::rate::SharedRate;
use crate::roles::service::Service;
use crate::store::{Store, StoreError, TokenRow};

/// What a token may do. `admin` includes the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Read jobs and their history.
    Read,
    /// Create, change and cancel jobs.
    Write,
    /// Report results over HTTP.
    Results,
    /// Redrive dead jobs, and everything the others allow.
    Admin,
    /// Read `/metrics`.
    Metrics,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::Read,
        Scope::Write,
        Scope::Results,
        Scope::Admin,
        Scope::Metrics,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Results => "results",
            Scope::Admin => "admin",
            Scope::Metrics => "metrics",
        }
    }

    pub fn parse(word: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == word)
    }
}

/// A token's scopes, as a small bit set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub fn all() -> Scopes {
        Scopes::from_iter(Scope::ALL)
    }

    /// Whether these scopes allow `scope` (`admin` allows all).
    pub fn allow(self, scope: Scope) -> bool {
        let bit = |s: Scope| 1u8 << (s as u8);
        self.0 & bit(scope) != 0 || self.0 & bit(Scope::Admin) != 0
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        Scopes(iter.into_iter().fold(0, |bits, s| bits | 1 << (s as u8)))
    }
}

/// Checks a token name: 1 to 100 of `[A-Za-z0-9._-]`.
pub fn name_validate(name: &str) -> Result<(), String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 100 || !name.chars().all(legal) {
        return Err(format!(
            "token name {name:?} must be 1 to 100 letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(())
}

/// A fresh secret: `tkl_` and 32 random bytes in base64url.
pub fn secret_generate() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("tkl_{}", URL_SAFE_NO_PAD.encode(bytes))
}

pub fn secret_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

pub use crate::roles::auth::rate::Throttled;

/// Who is calling, as the cache knows them.
#[derive(Debug)]
pub struct Principal {
    /// The token's name; `None` for an anonymous caller (`auth = none`).
    pub name: Option<String>,
    pub scopes: Scopes,
    /// Topic patterns; `None` allows every topic.
    pub topics: Option<Vec<String>>,
    /// Its rates, shared by every instance (None: unlimited).
    requests: Option<SharedRate>,
    jobs: Option<SharedRate>,
    /// The token's id when it has a quota: its creates are charged to it.
    pub quota: Option<u64>,
    /// The token's id (None: an anonymous caller): what a topic grouped by
    /// token groups its jobs by.
    pub token_id: Option<u64>,
}

impl Principal {
    /// The caller of an API without authentication: every scope, every
    /// topic, the default limits.
    pub fn anonymous(config: &Config) -> Principal {
        Principal {
            name: None,
            scopes: Scopes::all(),
            topics: None,
            requests: SharedRate::new("anonymous:requests".to_owned(), config.api.rate_requests),
            jobs: SharedRate::new("anonymous:jobs".to_owned(), config.api.rate_jobs),
            quota: None,
            token_id: None,
        }
    }

    /// The jobs' history's actor for changes this caller makes.
    pub fn actor(&self) -> String {
        match &self.name {
            Some(name) => format!("api:{name}"),
            None => "api".to_owned(),
        }
    }

    pub fn topic_allowed(&self, topic: &str) -> bool {
        match &self.topics {
            None => true,
            Some(patterns) => patterns.iter().any(|p| topic_pattern::matches(p, topic)),
        }
    }

    /// Counts one request against the caller's request rate, shared by
    /// every instance through `index` (None: this instance's alone).
    pub async fn request_admit(&self, index: Option<&Index>) -> Result<(), Throttled> {
        match &self.requests {
            Some(rate) => rate.admit(index, 1).await,
            None => Ok(()),
        }
    }

    /// Counts `n` new jobs against the caller's job rate, likewise.
    pub async fn jobs_admit(&self, index: Option<&Index>, n: u32) -> Result<(), Throttled> {
        match &self.jobs {
            Some(rate) => rate.admit(index, n).await,
            None => Ok(()),
        }
    }
}

/// How long a secret the cache does not know waits, at most, for the cache
/// to be read again.
const MISS_REFRESH: Duration = Duration::from_millis(250);

/// The active tokens by the hash of their secret. Cheap to clone.
#[derive(Clone)]
pub struct TokenCache {
    store: Store,
    refresh: Duration,
    default_requests: u32,
    default_jobs: u32,
    known: Arc<RwLock<Known>>,
    /// One reload at a time; holds when the last one started.
    reload: Arc<Mutex<Option<Instant>>>,
}

#[derive(Default)]
struct Known {
    by_hash: HashMap<[u8; 32], Arc<Principal>>,
    /// The rows the principals were built from, by id, so a reload keeps
    /// the rate limiters (and their state) of unchanged tokens.
    rows: HashMap<u64, TokenRow>,
}

/// Why a secret was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("no such token, or it was revoked")]
    Unknown,
    #[error("the token table cannot be read: {0}")]
    Unavailable(#[from] StoreError),
}

/// The token cache's settings.
#[derive(Debug, Clone)]
pub struct TokenCacheConfig {
    /// How often the table is read again (`api.token_refresh_ms`).
    pub refresh: Duration,
    /// Rate limits of a token that sets none (`api.rate_requests`,
    /// `api.rate_jobs`).
    pub default_requests: u32,
    pub default_jobs: u32,
}

impl Default for TokenCacheConfig {
    fn default() -> Self {
        TokenCacheConfig::from_config(&Config::default())
    }
}

impl TokenCacheConfig {
    pub fn from_config(config: &Config) -> Self {
        TokenCacheConfig {
            refresh: Duration::from_millis(config.api.token_refresh_ms),
            default_requests: config.api.rate_requests,
            default_jobs: config.api.rate_jobs,
        }
    }
}

/// What one read of the table found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TokensReport {
    /// Tokens that are not revoked.
    pub active: usize,
}

/// Reads the table again every `refresh`. A failed read keeps the tokens
/// known.
impl Service for TokenCache {
    type Report = TokensReport;
    type Error = StoreError;
    const NAME: &'static str = "token cache";
    const PASS: &'static str = "tokens";

    fn interval(&self) -> Duration {
        self.refresh
    }

    /// Reads the table once.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<TokensReport, StoreError> {
        self.reload(None).await?;
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        Ok(TokensReport {
            active: known.rows.len(),
        })
    }
}

impl TokenCache {
    pub fn new(store: Store, config: TokenCacheConfig) -> TokenCache {
        TokenCache {
            store,
            refresh: config.refresh,
            default_requests: config.default_requests,
            default_jobs: config.default_jobs,
            known: Arc::default(),
            reload: Arc::default(),
        }
    }

    /// The caller `secret` belongs to.
    pub async fn authenticate(&self, secret: &str) -> Result<Arc<Principal>, AuthError> {
        let hash = secret_hash(secret);
        if let Some(found) = self.lookup(&hash) {
            return Ok(found);
        }
        // Perhaps created since the last read: read the table again, once
        // it has been read after this request arrived.
        self.reload(Some(Instant::now())).await?;
        self.lookup(&hash).ok_or(AuthError::Unknown)
    }

    fn lookup(&self, hash: &[u8; 32]) -> Option<Arc<Principal>> {
        let known = self.known.read().unwrap_or_else(|e| e.into_inner());
        known.by_hash.get(hash).cloned()
    }

    /// Reads the table. With `arrived`, only when no read started after
    /// that instant, and no sooner than `MISS_REFRESH` after the last one.
    async fn reload(&self, arrived: Option<Instant>) -> Result<(), StoreError> {
        let mut last = self.reload.lock().await;
        if let (Some(arrived), Some(started)) = (arrived, *last) {
            if started >= arrived {
                return Ok(()); // a read that saw this request's token, if any
            }
            tokio::time::sleep_until(started + MISS_REFRESH).await;
        }
        let started = Instant::now();
        let rows = self.store.tokens_active().await?;
        *last = Some(started);
        let mut known = self.known.write().unwrap_or_else(|e| e.into_inner());
        let mut by_hash = HashMap::with_capacity(rows.len());
        let mut by_id = HashMap::with_capacity(rows.len());
        for row in rows {
            let unchanged = known.rows.get(&row.id) == Some(&row);
            let principal = match known.by_hash.get(&row.secret_sha256) {
                Some(principal) if unchanged => principal.clone(),
                _ => Arc::new(self.principal_of(&row)),
            };
            by_hash.insert(row.secret_sha256, principal);
            by_id.insert(row.id, row);
        }
        *known = Known {
            by_hash,
            rows: by_id,
        };
        Ok(())
    }

    fn principal_of(&self, row: &TokenRow) -> Principal {
        let topics = if row.topics.iter().any(|p| p == "*") {
            None
        } else {
            Some(row.topics.clone())
        };
        Principal {
            name: Some(row.name.clone()),
            scopes: row.scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
            topics,
            requests: SharedRate::new(
                format!("token:{}:requests", row.id),
                row.rate_requests.unwrap_or(self.default_requests),
            ),
            jobs: SharedRate::new(
                format!("token:{}:jobs", row.id),
                row.rate_jobs.unwrap_or(self.default_jobs),
            ),
            quota: (row.max_pending_jobs.is_some() || row.max_payload_bytes.is_some())
                .then_some(row.id),
            token_id: Some(row.id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_allows_every_scope_and_others_only_their_own() {
        let admin = Scopes::from_iter([Scope::Admin]);
        assert!(Scope::ALL.iter().all(|s| admin.allow(*s)));
        let write = Scopes::from_iter([Scope::Write]);
        assert!(write.allow(Scope::Write));
        assert!(!write.allow(Scope::Read));
        assert!(!write.allow(Scope::Admin));
        assert!(!write.allow(Scope::Metrics));
        assert!(!Scopes::default().allow(Scope::Read));
        assert_eq!(Scope::parse("results"), Some(Scope::Results));
        assert_eq!(Scope::parse("root"), None);
    }

    #[test]
    fn secrets_are_random_and_only_their_hash_identifies_them() {
        let a = secret_generate();
        let b = secret_generate();
        assert_ne!(a, b);
        assert!(a.starts_with("tkl_") && a.len() == 4 + 43, "{a}");
        assert_eq!(secret_hash(&a), secret_hash(&a));
        assert_ne!(secret_hash(&a), secret_hash(&b));
    }

    #[test]
    fn names_are_checked() {
        assert!(name_validate("billing-svc.v2_1").is_ok());
        assert!(name_validate("").is_err());
        assert!(name_validate("a b").is_err());
        assert!(name_validate("a,b").is_err());
        assert!(name_validate(&"x".repeat(101)).is_err());
    }

    #[tokio::test]
    async fn a_principal_is_limited_per_second_and_told_when_to_come_back() {
        let principal = Principal {
            name: Some("t".to_owned()),
            scopes: Scopes::from_iter([Scope::Write]),
            topics: Some(vec!["orders.*".to_owned()]),
            requests: SharedRate::new("t:requests".to_owned(), 3),
            jobs: SharedRate::new("t:jobs".to_owned(), 10),
            quota: None,
            token_id: Some(1),
        };
        assert_eq!(principal.actor(), "api:t");
        assert!(principal.topic_allowed("orders.eu"));
        assert!(!principal.topic_allowed("billing"));
        for _ in 0..3 {
            assert!(principal.request_admit(None).await.is_ok());
        }
        let throttled = principal.request_admit(None).await.unwrap_err();
        assert!(!throttled.never);
        assert!(throttled.retry_after > Duration::ZERO);
        assert!(throttled.retry_after <= Duration::from_secs(1));
        assert!(principal.jobs_admit(None, 10).await.is_ok());
        assert!(principal.jobs_admit(None, 1).await.is_err());
        assert!(principal.jobs_admit(None, 11).await.unwrap_err().never);
        let unlimited = Principal {
            requests: None,
            ..principal
        };
        for _ in 0..1000 {
            assert!(unlimited.request_admit(None).await.is_ok());
        }
    }
}
