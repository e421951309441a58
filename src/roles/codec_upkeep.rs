//! What every process that writes jobs keeps up beside its codec: the
//! payload dictionaries (`payload_dicts`), loaded at start and every few
//! seconds after, so it reads rows compressed with a new one and writes
//! with it once ripe; the key it seals with (`enc_keys_used`), noted for
//! the doctor; and, with compression on, whether every live instance can
//! read a compressed payload.
//!
//! An instance built before compression (V50, by the `+schema.N` of the
//! version it registers) cannot: it would set a compressed job aside as
//! dead. While one is live, compression is held — new payloads are
//! written as given — and it goes on by itself once none is. So a rolling
//! upgrade that turns compression on in the same step never stalls: the
//! new instances start held, and compress once the old ones are gone.
//!
//! Sealing follows the same rule (#57): new rows are sealed under the
//! active key only while every live instance holds it (`instances.enc_keys`);
//! until then under the newest key they all hold, or plain while an
//! instance built before sealing is live. So "add the key, make it active,
//! restart one by one" never seals a row that a live instance cannot open.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::domain::keys::Hold;
use crate::store::{instance_may_hold, instances_describe, Store, StoreError, SEALING_SCHEMA};

/// How often the dictionaries and the live instances are read again.
pub const EVERY: Duration = Duration::from_secs(5);

/// The key this process seals with is noted every this many rounds (5 min).
const KEY_NOTE_EVERY: u32 = 60;

/// Before anything is written: learns the dictionaries and holds
/// compression if an instance that cannot read it is live. A database
/// that does not answer holds it too (the safe side) until
/// [`run`] reads the instances.
/// What an instance checks of its codec before any role writes: says what
/// is on (encryption, compression), checks the keys against their
/// canaries (a key id given other key material stops it; a database down
/// at start-up does not — they are checked at the next start that reaches
/// it), then [`start`]. Returns the key ids whose canary does not open.
pub async fn start_check(
    store: &Store,
    ttl: Duration,
    compression_level: Option<i32>,
) -> Result<Vec<String>, StoreError> {
    let keys = store.keys();
    if let Some(active) = keys.active() {
        tracing::info!(active_key = active, keys = ?keys.ids(), "payloads and headers are encrypted at rest");
    }
    if let Some(level) = compression_level {
        tracing::info!(level, "payloads are compressed at rest (zstd)");
    }
    match store.key_canaries_check().await {
        Ok(wrong) if !wrong.is_empty() => return Ok(wrong),
        Ok(_) => {}
        Err(err) if err.is_transient() => {
            tracing::warn!(error = %err, "mysql does not answer: the keys' canaries are not checked at this start")
        }
        Err(err) => return Err(err),
    }
    // Held before any role writes, if an older instance is live.
    start(store, ttl).await;
    Ok(Vec::new())
}

pub async fn start(store: &Store, ttl: Duration) {
    if let Err(err) = store.dicts_refresh().await {
        tracing::debug!(error = %err, "cannot load payload dictionaries yet");
    }
    // Unread, sealing stays under the active key: never plain for a
    // database that did not answer (an instance that lacks the key leaves
    // such rows to one that holds it).
    if store.keys().active().is_some() {
        if let Err(err) = sealers_follow(store, ttl).await {
            tracing::warn!(error = %err, "cannot read which keys the live instances hold; sealing under the active key until it can");
        }
    }
    if store.codec().is_on() && readers_follow(store, ttl).await.is_err() {
        store.codec().hold(true);
        crate::metrics::compression_held(true);
    }
}

/// Every [`EVERY`] until `cancel`: the dictionaries, the readers, the key.
pub async fn run(store: Store, ttl: Duration, cancel: CancellationToken) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u32 = 0;
    let mut key_noted = false;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Err(err) = store.dicts_refresh().await {
            tracing::debug!(error = %err, "cannot load payload dictionaries; trying again");
        }
        if store.codec().is_on() {
            if let Err(err) = readers_follow(&store, ttl).await {
                tracing::debug!(error = %err, "cannot read which instances are live; trying again");
            }
        }
        if store.keys().active().is_some() {
            if let Err(err) = sealers_follow(&store, ttl).await {
                tracing::debug!(error = %err, "cannot read which keys the live instances hold; trying again");
            }
        }
        if !key_noted || ticks % KEY_NOTE_EVERY == 0 {
            match store.key_used_note().await {
                Ok(()) => key_noted = true,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot note the key this instance seals with; trying again")
                }
            }
        }
        ticks = ticks.wrapping_add(1);
    }
}

/// Holds compression while an instance that cannot read compressed
/// payloads is live (heartbeat within `ttl`), and lets it go on once none
/// is.
async fn readers_follow(store: &Store, ttl: Duration) -> Result<(), StoreError> {
    let older = store.instances_unable_to_expand(ttl).await?;
    let held = !older.is_empty();
    let was = store.codec().hold(held);
    if held && !was {
        tracing::warn!(
            instances = %instances_describe(&older),
            "compression held: these live instances are built before compression and cannot read compressed payloads; new payloads are written as given until they are gone"
        );
    } else if !held && was {
        tracing::info!("compression goes on: every live instance reads compressed payloads");
    }
    crate::metrics::compression_held(held);
    Ok(())
}

/// Holds the active key back while a live instance lacks it: new rows are
/// sealed under the newest key every live instance holds (by when a
/// process last sealed with it), or plain only while one is built before
/// sealing (it would send a sealed payload as stored). When no key is held
/// by all, the active key: what an instance lacks, it leaves to one that
/// holds it — never plaintext for a misconfigured instance.
async fn sealers_follow(store: &Store, ttl: Duration) -> Result<(), StoreError> {
    let Some(active) = store.keys().active().map(str::to_owned) else {
        return Ok(());
    };
    let live: Vec<_> = store
        .instances_list(ttl)
        .await?
        .into_iter()
        .filter(|row| row.live)
        .collect();
    // A payload sealed with its headers' presence bound opens only in
    // builds from V55 on.
    let unbound = live.iter().any(|row| {
        crate::store::built_for(&row.version) < crate::domain::keys::HEADERS_BOUND_SCHEMA
    });
    store.keys().unbind_headers(unbound);
    let lacking: Vec<_> = live
        .iter()
        .filter(|row| !instance_may_hold(&row.version, row.enc_keys.as_deref(), &active))
        .cloned()
        .collect();
    let hold = if lacking.is_empty() {
        Hold::No
    } else if lacking
        .iter()
        .any(|row| crate::store::built_for(&row.version) < SEALING_SCHEMA)
    {
        Hold::Plain
    } else {
        // The newest key every live instance holds, by its last use.
        let mut used = store.keys_used().await?;
        used.sort_by_key(|key| std::cmp::Reverse(key.last_at));
        let mut candidates: Vec<String> = used.into_iter().map(|key| key.key).collect();
        candidates.extend(store.keys().ids());
        candidates
            .into_iter()
            .find(|key| {
                store.keys().has(key)
                    && live
                        .iter()
                        .all(|row| instance_may_hold(&row.version, row.enc_keys.as_deref(), key))
            })
            .map_or(Hold::No, Hold::To)
    };
    if hold != store.keys().held() {
        match &hold {
            Hold::No => {
                tracing::info!(active_key = %active, "every live instance holds the active key: new rows are sealed under it")
            }
            Hold::To(key) => tracing::warn!(
                active_key = %active,
                sealing_key = %key,
                instances = %instances_describe(&lacking),
                "active key held back: these live instances lack it; new rows are sealed under a key they all hold until they have it"
            ),
            Hold::Plain => tracing::warn!(
                active_key = %active,
                instances = %instances_describe(&lacking),
                "sealing held: these live instances are built before encryption at rest and would send sealed payloads as stored; new rows are written plain until they are gone"
            ),
        }
    }
    hold_keys(store, hold);
    Ok(())
}

fn hold_keys(store: &Store, hold: Hold) {
    let gauge = match &hold {
        Hold::No => 0,
        Hold::To(_) => 1,
        Hold::Plain => 2,
    };
    store.keys().hold(hold);
    crate::metrics::sealing_held(gauge);
}
