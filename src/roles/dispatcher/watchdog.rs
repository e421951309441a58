//! The dispatcher's watch over itself: a loop that stops moving (a call
//! to a store that never returns) ends the dispatcher, as one of its tasks
//! ending on its own does.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// Watches the dispatcher's loop for a stall: a pass (or the wait for room
/// in the pipeline) that does not end, because a call to MySQL, Redis or
/// Kafka never returns. Membership beats on its own connections, so such
/// a dispatcher would keep its shards, and their jobs, for good.
///
/// It counts its own ticks, a second apart, while the loop is busy and
/// has not moved: a process stopped and resumed (SIGSTOP, a VM paused)
/// sees one late tick on waking, not a stall.
#[derive(Clone, Default)]
pub(super) struct Watchdog {
    /// Passes finished.
    moved: Arc<AtomicU64>,
    /// Inside a pass or waiting for room, not sleeping between passes.
    busy: Arc<AtomicBool>,
}

impl Watchdog {
    const TICK: Duration = Duration::from_secs(1);

    pub(super) fn busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
        if !busy {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Resolves once the loop has been busy without moving for `stall`.
    pub(super) async fn stalled(self, stall: Duration) {
        let ticks = stall.as_millis().div_ceil(Self::TICK.as_millis()).max(1);
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + Self::TICK, Self::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut seen = self.moved.load(Ordering::Relaxed);
        let mut still = 0u128;
        loop {
            tick.tick().await;
            let moved = self.moved.load(Ordering::Relaxed);
            if moved != seen || !self.busy.load(Ordering::Relaxed) {
                seen = moved;
                still = 0;
                continue;
            }
            still += 1;
            if still >= ticks {
                return;
            }
        }
    }
}

/// Spawns one of the dispatcher's tasks; `ended` fires when it ends, by
/// returning or by a panic. Dropped unfinished (the dispatcher panicked),
/// the task is aborted: its claims are recovered as after a crash.
pub(super) fn spawn_watched<F>(ended: &CancellationToken, task: F) -> AbortOnDropHandle<()>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let ended = ended.clone().drop_guard();
    AbortOnDropHandle::new(tokio::spawn(async move {
        let _ended = ended;
        task.await
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the watchdog calls a stall of `stall` within `within`,
    /// while `drive` works the loop's side.
    async fn stalls<F>(stall: Duration, within: Duration, drive: impl FnOnce(Watchdog) -> F) -> bool
    where
        F: std::future::Future<Output = ()>,
    {
        let watchdog = Watchdog::default();
        let watching = watchdog.clone().stalled(stall);
        tokio::select! {
            _ = watching => true,
            _ = async { drive(watchdog).await; std::future::pending::<()>().await } => false,
            _ = tokio::time::sleep(within) => false,
        }
    }

    #[tokio::test]
    async fn the_watchdog_calls_a_pass_that_does_not_end_a_stall() {
        let stalled = stalls(
            Duration::from_secs(2),
            Duration::from_secs(5),
            |w| async move {
                w.busy(true);
            },
        )
        .await;
        assert!(stalled);
    }

    #[tokio::test]
    async fn the_watchdog_leaves_a_loop_that_moves_or_sleeps_alone() {
        let moving = stalls(
            Duration::from_secs(1),
            Duration::from_secs(3),
            |w| async move {
                loop {
                    w.busy(true);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    w.busy(false);
                }
            },
        );
        let sleeping = stalls(
            Duration::from_secs(1),
            Duration::from_secs(3),
            |w| async move {
                w.busy(false);
            },
        );
        let (moving, sleeping) = tokio::join!(moving, sleeping);
        assert!(!moving && !sleeping);
    }
}
