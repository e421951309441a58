//! `tickler dev` and `tickler serve` never share a database (#57): the dev
//! clock, moved forward, would make the serve instances' jobs due early.
//! Checked at start-up (a start beside the other kind is refused), before
//! every move of the dev clock (`POST /v1/dev/clock` answers 409
//! `clock_neighbour`), and every [`EVERY`] while running: a `tickler dev`
//! that finds a live `tickler serve` stops — its role ends, and with it
//! the instance — and a `tickler serve` that finds a live `tickler dev`
//! says so in its log every time, and keeps serving.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::domain::clock::Clock;
use crate::store::{InstanceRow, Store, StoreError};

/// How often the live instances are read again.
pub const EVERY: Duration = Duration::from_secs(5);

/// The role name that marks a `tickler dev` instance in `instances.roles`.
pub const DEV_MARK: &str = "dev-clock";

/// Whether `row` is a `tickler dev` instance.
pub fn is_dev(row: &InstanceRow) -> bool {
    row.roles.iter().any(|role| role == DEV_MARK)
}

/// The first live instance of the other kind than this one's (a `tickler
/// serve` for a virtual clock, a `tickler dev` for the real one).
pub fn neighbour(instances: &[InstanceRow], virtual_clock: bool) -> Option<&InstanceRow> {
    instances
        .iter()
        .find(|row| row.live && is_dev(row) != virtual_clock)
}

/// The live neighbour of the other kind, by the database's clock.
/// Why an instance may not start on this database's clock.
#[derive(Debug)]
pub enum StartRefused {
    /// A live instance of the other kind (`dev` beside `serve`, or the
    /// reverse).
    Neighbour { instance: u64, host: String },
    /// `tickler dev` could not ask the database.
    Store(StoreError),
}

/// A `tickler dev` and a `tickler serve` never share a database: the dev
/// clock would make the other's jobs due early. Checked at start-up, by
/// the instances alive in the database (and after, by [`run`]). A database
/// down at start-up lets `serve` start and answer 503 as ever (the guard
/// checks again once it answers); `tickler dev` insists on an answer.
pub async fn start_check(store: &Store, clock: &Clock, ttl: Duration) -> Result<(), StartRefused> {
    match neighbour_find(store, clock, ttl).await {
        Ok(None) => Ok(()),
        Ok(Some(row)) => Err(StartRefused::Neighbour {
            instance: row.id,
            host: row.host.clone(),
        }),
        Err(err) if clock.is_virtual() => Err(StartRefused::Store(err)),
        Err(_) => Ok(()),
    }
}

pub async fn neighbour_find(
    store: &Store,
    clock: &Clock,
    ttl: Duration,
) -> Result<Option<InstanceRow>, StoreError> {
    let instances = store.instances_list(ttl).await?;
    Ok(neighbour(&instances, clock.is_virtual()).cloned())
}

/// Every [`EVERY`] until `cancel`; returns (ending the dev instance) when a
/// `tickler dev` finds a `tickler serve` alive in its database.
pub async fn run(store: Store, clock: Clock, ttl: Duration, cancel: CancellationToken) {
    let mut every = tokio::time::interval(EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = every.tick() => {}
        }
        let found = match neighbour_find(&store, &clock, ttl).await {
            Ok(found) => found,
            Err(err) => {
                tracing::debug!(error = %err, "cannot read the live instances; trying again");
                continue;
            }
        };
        let Some(row) = found else { continue };
        if clock.is_virtual() {
            tracing::error!(
                instance = row.id,
                host = %row.host,
                "a `tickler serve` is alive in this database: `tickler dev` stops (its clock would make that instance's jobs due early); give `tickler dev` a database of its own"
            );
            return;
        }
        tracing::error!(
            instance = row.id,
            host = %row.host,
            "a `tickler dev` is alive in this database: its clock makes this deployment's jobs due early; it stops on its own within seconds, give it a database of its own"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, roles: &str, live: bool) -> InstanceRow {
        InstanceRow {
            id,
            host: "h".to_owned(),
            pid: 1,
            pid_namespace: None,
            version: "v".to_owned(),
            roles: roles.split(',').map(str::to_owned).collect(),
            ingress_group: None,
            enc_keys: None,
            tzdata_version: None,
            started_at: chrono::Utc::now(),
            heartbeat_at: chrono::Utc::now(),
            live,
        }
    }

    #[test]
    fn each_kind_finds_only_a_live_one_of_the_other() {
        let serve = row(1, "api,dispatcher", true);
        let dev = row(2, "api,dispatcher,dev-clock", true);
        let dead_serve = row(3, "api", false);
        assert_eq!(neighbour(&[dev.clone(), dead_serve.clone()], true), None);
        assert_eq!(neighbour(&[dev.clone(), serve.clone()], true), Some(&serve));
        assert_eq!(neighbour(&[serve.clone(), dead_serve.clone()], false), None);
        assert_eq!(neighbour(&[serve, dev.clone()], false), Some(&dev));
    }
}
