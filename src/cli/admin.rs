//! The operator's commands that work on the stores directly rather than
//! over the API: tokens, the instances table, the shard count. Each prints
//! what it did; a refusal says why (the binary exits 1 with it).

use clap::Subcommand;

use serde_json::json;

use crate::config::{Config, HandEdits};
use crate::domain::topic_pattern;
use crate::roles::audit;
use crate::roles::auth;
use crate::store::{Actor, HandEditsState, NewToken, Store, StoreError};

/// Why an admin command did nothing.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The request itself is wrong (a bad name, an unknown scope, a
    /// shard count that may not be lowered); the message says how.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Subcommand)]
pub enum ShardsCommand {
    /// Raise the shard count of a running deployment (e.g. 16 → 64): every
    /// instance follows within a heartbeat, with no job lost, doubled or
    /// early (see docs/scaling.md).
    Resize { shards: u32 },
}

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Make a token and print its secret, once, alone on the last line.
    Create {
        /// A name for it, shown in `list` and in the jobs' history as
        /// `api:NAME` (letters, digits, '.', '_', '-').
        name: String,
        /// Topics it may use, as patterns with '*' (e.g. 'orders.*'; '*' for
        /// all). Repeat or separate with commas.
        #[arg(long, required = true, value_delimiter = ',')]
        topics: Vec<String>,
        /// What it may do: read, write, results, admin (all of these, and
        /// redrive), metrics. Repeat or separate with commas.
        #[arg(long = "scope", required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        /// Requests per second (default: api.rate_requests; 0: unlimited).
        #[arg(long)]
        rate_requests: Option<u32>,
        /// Jobs created per second (default: api.rate_jobs; 0: unlimited).
        #[arg(long)]
        rate_jobs: Option<u32>,
        /// Quota: the most pending jobs it may hold (default: no limit).
        #[arg(long)]
        max_pending_jobs: Option<u64>,
        /// Quota: the most payload bytes its pending jobs may hold
        /// (default: no limit).
        #[arg(long)]
        max_payload_bytes: Option<u64>,
    },
    /// Every token, revoked ones too; never a secret.
    List,
    /// One token: its topics, scopes, rates, quotas and what it uses of
    /// them (counted now).
    Show { name: String },
    /// Sets a token's quotas: a number, or `none` for no limit. A quota
    /// counts the jobs created after it is set.
    Quota {
        name: String,
        /// The most pending jobs (`none`: no limit).
        #[arg(long)]
        max_pending_jobs: Option<Limit>,
        /// The most payload bytes of pending jobs (`none`: no limit).
        #[arg(long)]
        max_payload_bytes: Option<Limit>,
    },
    /// Revoke a token: refused by every instance within api.token_refresh_ms.
    Revoke { name: String },
}

/// `tickler token create|list|revoke`.
///
/// Long because it is a dispatch table: create, list and revoke, each
/// with its checks and output.
pub async fn token(config: &Config, command: TokenCommand) -> Result<(), AdminError> {
    Store::migrate(&config.mysql.url).await?;
    let store = Store::connect_lazy(&config.mysql.url, 1, Actor::Api)?;
    match command {
        TokenCommand::Create {
            name,
            topics,
            scopes,
            rate_requests,
            rate_jobs,
            max_pending_jobs,
            max_payload_bytes,
        } => {
            auth::name_validate(&name).map_err(AdminError::Refused)?;
            for pattern in &topics {
                topic_pattern::validate(pattern).map_err(AdminError::Refused)?;
            }
            for scope in &scopes {
                if auth::Scope::parse(scope).is_none() {
                    return Err(AdminError::Refused(format!(
                        "unknown scope {scope:?}: use read, write, results, admin or metrics"
                    )));
                }
            }
            let secret = auth::secret_generate();
            let asked = json!({"name": name, "topics": topics, "scopes": scopes,
                               "rate_requests": rate_requests, "rate_jobs": rate_jobs,
                               "max_pending_jobs": max_pending_jobs,
                               "max_payload_bytes": max_payload_bytes});
            let created = audit::recorded(
                &store,
                "cli",
                "token.create",
                Some(name.clone()),
                Some(asked),
                async {
                    store
                        .token_create(&NewToken {
                            name: &name,
                            secret_sha256: auth::secret_hash(&secret),
                            topics: &topics,
                            scopes: &scopes,
                            rate_requests,
                            rate_jobs,
                            max_pending_jobs,
                            max_payload_bytes,
                        })
                        .await
                        .map(|row| TokenShown::from(&row))
                },
            )
            .await?;
            match created {
                Ok(row) => {
                    println!(
                        "token {} created: topics {}, scopes {}",
                        row.name,
                        row.topics.join(","),
                        row.scopes.join(",")
                    );
                    println!(
                        "the secret is shown this once; send it as Authorization: Bearer <secret>"
                    );
                    println!("{secret}");
                }
                Err(StoreError::DuplicateKey) => {
                    return Err(AdminError::Refused(format!(
                        "a token called {name:?} exists already (revoked ones keep their name)"
                    )))
                }
                Err(err) => return Err(err.into()),
            }
        }
        TokenCommand::List => {
            println!(
                "{:<24} {:<24} {:<28} {:>9} {:>9} {:<24} revoked",
                "name", "created", "scopes", "req/s", "jobs/s", "topics"
            );
            let rate = |r: Option<u32>| r.map_or("default".to_owned(), |r| r.to_string());
            for row in store.token_list().await? {
                println!(
                    "{:<24} {:<24} {:<28} {:>9} {:>9} {:<24} {}",
                    row.name,
                    row.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
                    row.scopes.join(","),
                    rate(row.rate_requests),
                    rate(row.rate_jobs),
                    row.topics.join(","),
                    row.revoked_at.map_or("-".to_owned(), |at| at
                        .format("%Y-%m-%dT%H:%M:%SZ")
                        .to_string())
                );
            }
        }
        TokenCommand::Show { name } => token_show(&store, &name).await?,
        TokenCommand::Quota {
            name,
            max_pending_jobs,
            max_payload_bytes,
        } => {
            let Some(row) = store
                .token_list()
                .await?
                .into_iter()
                .find(|row| row.name.eq_ignore_ascii_case(&name))
            else {
                return Err(AdminError::Refused(format!("no token called {name:?}")));
            };
            let jobs = max_pending_jobs.map_or(row.max_pending_jobs, |limit| limit.0);
            let bytes = max_payload_bytes.map_or(row.max_payload_bytes, |limit| limit.0);
            let before = json!({"max_pending_jobs": row.max_pending_jobs,
                                "max_payload_bytes": row.max_payload_bytes});
            let asked = json!({"max_pending_jobs": jobs, "max_payload_bytes": bytes});
            let set = audit::recorded_with_before(
                &store,
                "cli",
                "token.quota",
                Some(row.name.clone()),
                before,
                Some(asked.clone()),
                async {
                    store
                        .quota_set(&row.name, jobs, bytes)
                        .await
                        .map(|_| asked.clone())
                },
            )
            .await?;
            set?;
            if row.max_pending_jobs.is_none() && row.max_payload_bytes.is_none() {
                // A quota counts what is created from now on.
                store.quota_recount(row.id).await?;
            }
            println!(
                "token {}: at most {} pending jobs and {} payload bytes; within {} ms on every instance",
                row.name,
                jobs.map_or("any number of".to_owned(), |n| n.to_string()),
                bytes.map_or("any number of".to_owned(), |n| n.to_string()),
                config.api.token_refresh_ms
            );
        }
        TokenCommand::Revoke { name } => {
            let revoked = audit::recorded(
                &store,
                "cli",
                "token.revoke",
                Some(name.clone()),
                None,
                async {
                    match store.token_revoke(&name).await {
                        Ok(true) => Ok(json!({"revoked": name})),
                        Ok(false) => Err(AdminError::Refused(format!("no token called {name:?}"))),
                        Err(err) => Err(err.into()),
                    }
                },
            )
            .await?;
            revoked?;
            println!(
                "token {name} revoked: refused within {} ms",
                config.api.token_refresh_ms
            );
        }
    }
    store.close().await;
    Ok(())
}

/// A quota's value on the command line: a number, or `none` for no limit.
#[derive(Debug, Clone, Copy)]
pub struct Limit(pub Option<u64>);

impl std::str::FromStr for Limit {
    type Err = String;

    fn from_str(text: &str) -> Result<Limit, String> {
        if text.eq_ignore_ascii_case("none") {
            return Ok(Limit(None));
        }
        text.parse::<u64>()
            .map(|n| Limit(Some(n)))
            .map_err(|_| format!("{text:?} is neither a whole number nor `none`"))
    }
}

/// `tickler token show NAME`.
async fn token_show(store: &Store, name: &str) -> Result<(), AdminError> {
    let Some(row) = store
        .token_list()
        .await?
        .into_iter()
        .find(|row| row.name.eq_ignore_ascii_case(name))
    else {
        return Err(AdminError::Refused(format!("no token called {name:?}")));
    };
    let rate = |r: Option<u32>| r.map_or("default".to_owned(), |r| r.to_string());
    let limit = |q: Option<u64>| q.map_or("no limit".to_owned(), |q| q.to_string());
    println!("token      {}", row.name);
    println!("created    {}", row.created_at.format("%Y-%m-%dT%H:%M:%SZ"));
    if let Some(at) = row.revoked_at {
        println!("revoked    {}", at.format("%Y-%m-%dT%H:%M:%SZ"));
    }
    println!("topics     {}", row.topics.join(","));
    println!("scopes     {}", row.scopes.join(","));
    println!(
        "rates      {} requests/s, {} jobs/s",
        rate(row.rate_requests),
        rate(row.rate_jobs)
    );
    let has_quota = row.max_pending_jobs.is_some() || row.max_payload_bytes.is_some();
    let usage = if has_quota {
        Some(store.quota_recount(row.id).await?)
    } else {
        None
    };
    let used = |n: Option<u64>| n.map_or("-".to_owned(), |n| n.to_string());
    println!(
        "pending    {} of {}",
        used(usage.as_ref().map(|u| u.pending_jobs)),
        limit(row.max_pending_jobs)
    );
    println!(
        "bytes      {} of {}",
        used(usage.as_ref().map(|u| u.payload_bytes)),
        limit(row.max_payload_bytes)
    );
    Ok(())
}

/// A token as the audit log shows it: never its secret or its hash.
#[derive(Debug, serde::Serialize)]
struct TokenShown {
    id: u64,
    name: String,
    topics: Vec<String>,
    scopes: Vec<String>,
    rate_requests: Option<u32>,
    rate_jobs: Option<u32>,
    max_pending_jobs: Option<u64>,
    max_payload_bytes: Option<u64>,
}

impl From<&crate::store::TokenRow> for TokenShown {
    fn from(row: &crate::store::TokenRow) -> TokenShown {
        TokenShown {
            id: row.id,
            name: row.name.clone(),
            topics: row.topics.clone(),
            scopes: row.scopes.clone(),
            rate_requests: row.rate_requests,
            rate_jobs: row.rate_jobs,
            max_pending_jobs: row.max_pending_jobs,
            max_payload_bytes: row.max_payload_bytes,
        }
    }
}

/// `tickler instances`: a table of the instances and the shards each holds.
pub async fn instances(config: &Config) -> Result<(), AdminError> {
    let store = Store::connect_lazy(&config.mysql.url, 1, Actor::Cli)?;
    let rows = store.instances_list(config.instance_ttl()).await?;
    let leases = store.shard_leases().await?;
    let now = store.db_now().await?;
    println!(
        "{:>6} {:<5} {:<24} {:>8} {:<10} {:<36} {:>12} {:>7}",
        "id", "state", "host", "pid", "version", "roles", "heartbeat", "shards"
    );
    for row in &rows {
        let held = leases.iter().filter(|l| l.owner == Some(row.id)).count();
        let age_ms = (now - row.heartbeat_at).num_milliseconds();
        println!(
            "{:>6} {:<5} {:<24} {:>8} {:<10} {:<36} {:>9} ms {:>7}",
            row.id,
            if row.live { "live" } else { "dead" },
            row.host,
            row.pid,
            row.version,
            row.roles.join(","),
            age_ms,
            held
        );
    }
    let free = leases.iter().filter(|l| l.owner.is_none()).count();
    println!(
        "{} live of {} registered; {} shards, {} free (cluster.instance_ttl_ms {})",
        rows.iter().filter(|r| r.live).count(),
        rows.len(),
        leases.len(),
        free,
        config.cluster.instance_ttl_ms
    );
    store.close().await;
    Ok(())
}

/// `tickler shards [resize N]`.
pub async fn shards(config: &Config, command: Option<ShardsCommand>) -> Result<(), AdminError> {
    Store::migrate(&config.mysql.url).await?;
    let store = Store::connect_lazy(&config.mysql.url, 1, Actor::Cli)?;
    match command {
        None => {
            let leases = store.shard_leases().await?;
            println!("{:>6} {:>8} {:>8}", "shard", "owner", "epoch");
            for lease in &leases {
                let owner = lease.owner.map_or("-".to_owned(), |o| o.to_string());
                println!("{:>6} {:>8} {:>8}", lease.shard, owner, lease.epoch);
            }
            println!("{} shards", leases.len());
        }
        Some(ShardsCommand::Resize { shards }) => {
            if !(1..=16_384).contains(&shards) {
                return Err(AdminError::Refused(
                    "the shard count must be between 1 and 16384".to_owned(),
                ));
            }
            let current = store.shard_leases_ensure(config.cluster.shards).await?;
            if shards < current {
                return Err(AdminError::Refused(format!(
                    "the deployment has {current} shards; the count can only be raised (lowering would strand claims under shards that no longer exist)"
                )));
            }
            if shards == current {
                println!("the deployment has {current} shards already");
            } else {
                store.shard_leases_raise(shards).await?;
                println!(
                    "shards raised from {current} to {shards}: every instance follows within {} ms (a fifth of cluster.instance_ttl_ms)",
                    config.cluster.instance_ttl_ms / 5
                );
            }
        }
    }
    store.close().await;
    Ok(())
}

/// `tickler migrate`: applies the schema's migrations not yet applied and
/// names them, then installs, drops or keeps the triggers that record hand
/// edits (`mysql.history_hand_edits`). A trigger the account may not create is a
/// warning, not a failure: tickler's own history does not need it.
///
/// With `to`, stops after that migration (a live upgrade's first step).
pub async fn migrate(config: &Config, to: Option<u32>) -> Result<(), StoreError> {
    let applied = Store::migrate_with(&config.mysql.url, to, config.mysql.schema_baseline).await?;
    if applied.is_empty() {
        println!("schema is up to date");
    }
    for name in applied {
        println!("applied {name}");
    }
    let store = Store::connect_lazy(&config.mysql.url, 1, Actor::Cli)?;
    let mode = config.mysql.history_hand_edits;
    match store.hand_edits_apply_on(mode, config.mysql.engine).await {
        Ok(HandEditsState::Recorded) if mode == HandEdits::Keep => println!(
            "hand edits in SQL are recorded in the history (the triggers were there and are \
             kept; history_hand_edits = off drops them)"
        ),
        Ok(HandEditsState::Recorded) => println!("hand edits in SQL are recorded in the history"),
        Ok(HandEditsState::NotRecorded) if mode == HandEdits::Keep => println!(
            "hand edits in SQL are not recorded (mysql.history_hand_edits = trigger records them)"
        ),
        Ok(HandEditsState::NotRecorded) => {
            println!("hand edits in SQL are not recorded (mysql.history_hand_edits = off)")
        }
        Ok(HandEditsState::Observed) => println!(
            "hand edits in SQL are recorded in the history by the reconciler, which compares \
             changed rows with their history (no trigger)"
        ),
        Err(err @ StoreError::MigrationRefused(_)) => {
            store.close().await;
            return Err(err);
        }
        Err(err) if mode == HandEdits::Trigger => eprintln!(
            "warning: mysql.history_hand_edits = trigger, but the triggers that record hand edits \
             cannot be created: {err}. tickler records its own changes regardless. Grant \
             TRIGGER, and where binary logging is on SUPER or log_bin_trust_function_creators \
             = 1 (a parameter group on RDS and Aurora), then run migrate again; or set \
             history_hand_edits = off (docs/schema.md, \"History\")."
        ),
        Err(err) => return Err(err),
    }
    store.close().await;
    Ok(())
}
