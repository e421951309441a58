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

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::{instances_describe, Store, StoreError};

/// How often the dictionaries and the live instances are read again.
pub const EVERY: Duration = Duration::from_secs(5);

/// The key this process seals with is noted every this many rounds (5 min).
const KEY_NOTE_EVERY: u32 = 60;

/// Before anything is written: learns the dictionaries and holds
/// compression if an instance that cannot read it is live. A database
/// that does not answer holds it too (the safe side) until
/// [`run`] reads the instances.
pub async fn start(store: &Store, ttl: Duration) {
    if let Err(err) = store.dicts_refresh().await {
        tracing::debug!(error = %err, "cannot load payload dictionaries yet");
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
