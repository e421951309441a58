//! The one loop of every periodic role. A role that works in passes (the
//! loader, the reconciler, the purger, the schedule materializer, the
//! topic controls' refresher, the token cache, the reporter, the
//! dead-letter producer, the bulk runner's watch for stalled operations,
//! Kafka's topic metadata) implements [`Service`]: its `run_once(now)` is
//! one pass, and [`run`] calls it every `interval` until cancelled, logs
//! and counts a pass that failed, and tries again on the next.
//!
//! Tests call `run_once` directly, with the `now` they choose.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use crate::store::StoreError;

/// A role that works in passes.
pub trait Service: Send {
    /// What one pass did.
    type Report: Send;
    /// Why one pass failed: the next pass tries again.
    type Error: PassError + Send;
    /// The role's name: the `service` field of its log lines.
    const NAME: &'static str;
    /// The pass's name where a failure is counted: the `what` of
    /// `tickler_store_errors_total` and `tickler_pass_failures_total`.
    const PASS: &'static str;

    /// Time between the end of a pass and the start of the next.
    fn interval(&self) -> Duration;

    /// One pass, at `now`.
    fn run_once(
        &mut self,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Self::Report, Self::Error>> + Send;

    /// The time a pass runs at. The local clock by default; a role that
    /// compares rows' times with it reads the database's clock instead, so
    /// that instances whose clocks differ agree.
    fn now(&self) -> impl Future<Output = Result<DateTime<Utc>, Self::Error>> + Send {
        async { Ok(Utc::now()) }
    }

    /// Logs what a pass did, where it is worth a line; true when more work
    /// is waiting and the next pass should start at once.
    fn passed(&self, _report: &Self::Report) -> bool {
        false
    }

    /// Rung when work arrives between passes: the next pass starts early.
    fn woken(&self) -> Option<Arc<Notify>> {
        None
    }

    /// Before the first pass.
    fn start(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// How a failed pass is counted and logged.
pub trait PassError: Display + Sized {
    /// Counts and logs this failure of the pass `pass`.
    fn record(&self, pass: &'static str) {
        metrics::pass_failed(pass, self);
    }
}

impl PassError for StoreError {
    fn record(&self, pass: &'static str) {
        metrics::store_failed(pass, self);
    }
}

impl PassError for std::convert::Infallible {}

/// Runs `service` pass after pass until `cancel` fires; a pass in progress
/// is finished first.
pub async fn run<S: Service>(mut service: S, cancel: CancellationToken) {
    tracing::info!(
        service = S::NAME,
        interval_ms = service.interval().as_millis() as u64,
        "service started"
    );
    service.start().await;
    let wake = service.woken();
    loop {
        let pass = async {
            let now = service.now().await?;
            service.run_once(now).await
        };
        let again = match pass.await {
            Ok(report) => service.passed(&report),
            Err(err) => {
                err.record(S::PASS);
                false
            }
        };
        if cancel.is_cancelled() {
            break;
        }
        if again {
            continue;
        }
        let woken = async {
            match &wake {
                Some(wake) => wake.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = woken => {}
            _ = tokio::time::sleep(service.interval()) => {}
        }
    }
    tracing::info!(service = S::NAME, "service stopped");
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Asks for its next pass at once, but the third fails and rings its
    /// own bell instead; the sixth cancels the loop. Its interval is an
    /// hour: the loop ends in time only if both ways of going on work.
    struct Counter {
        passes: u32,
        failed: Arc<AtomicU32>,
        bell: Arc<Notify>,
        stop: CancellationToken,
    }

    #[derive(Debug)]
    struct Failed;

    impl Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("failed")
        }
    }

    impl PassError for Failed {}

    impl Service for Counter {
        type Report = ();
        type Error = Failed;
        const NAME: &'static str = "counter";
        const PASS: &'static str = "counter pass";

        fn interval(&self) -> Duration {
            Duration::from_secs(3600)
        }

        async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<(), Failed> {
            self.passes += 1;
            match self.passes {
                3 => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    self.bell.notify_one();
                    Err(Failed)
                }
                6 => {
                    self.stop.cancel();
                    Ok(())
                }
                _ => Ok(()),
            }
        }

        fn passed(&self, _report: &()) -> bool {
            true
        }

        fn woken(&self) -> Option<Arc<Notify>> {
            Some(self.bell.clone())
        }
    }

    #[tokio::test]
    async fn a_failed_pass_is_counted_and_the_loop_goes_on_until_cancelled() {
        let stop = CancellationToken::new();
        let failed = Arc::new(AtomicU32::new(0));
        let counter = Counter {
            passes: 0,
            failed: failed.clone(),
            bell: Arc::new(Notify::new()),
            stop: stop.clone(),
        };
        tokio::time::timeout(Duration::from_secs(5), run(counter, stop))
            .await
            .expect("six passes without waiting out an interval");
        assert_eq!(failed.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_cancelled_service_stops_during_its_wait() {
        struct Slow;
        impl Service for Slow {
            type Report = ();
            type Error = std::convert::Infallible;
            const NAME: &'static str = "slow";
            const PASS: &'static str = "slow pass";
            fn interval(&self) -> Duration {
                Duration::from_secs(3600)
            }
            async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<(), Self::Error> {
                Ok(())
            }
        }
        let stop = CancellationToken::new();
        let running = tokio::spawn(run(Slow, stop.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("stops without waiting out the hour")
            .unwrap();
    }
}
