//! A rate limit every instance shares: an API token's requests or jobs a
//! second, counted in one GCRA bucket in Redis (`lua/rate.lua`, under the
//! index's prefix) rather than once per instance, so a token's rate does not
//! multiply with the instances behind the load balancer.
//!
//! Asking Redis on every request would put a round trip on each. So an
//! instance takes, while there is room, a twentieth of a second's worth at
//! once and spends it locally (for at most a second) before it asks again:
//! together the instances admit at most that much over the rate, each.
//!
//! Redis unreachable or slow (no answer in [`ASK_WITHIN`]), the check fails
//! open to a per-instance limiter of the same rate (the old behaviour),
//! counted in `tickler_rate_fallback_total`, and for [`AFTER_FAILURE`] the
//! instance's checks do not ask Redis at all, so an outage of the index
//! neither refuses requests nor makes each one wait for it.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::index::Index;
use crate::metrics;

/// An instance takes this fraction of a second's worth at once.
const TAKE_DIVISOR: u32 = 20;
/// What it took and did not spend is dropped after this long.
const SPARE_FOR: Duration = Duration::from_secs(1);
/// A check waits this long for Redis before it counts on this instance.
const ASK_WITHIN: Duration = Duration::from_millis(250);
/// After Redis failed a check, this instance's checks count on their own
/// for this long.
const AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Until when this process's checks do not ask Redis (it just failed one).
static REDIS_RESTING: Mutex<Option<Instant>> = Mutex::new(None);

fn redis_resting() -> bool {
    let until = *REDIS_RESTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    until.is_some_and(|until| until > Instant::now())
}

fn redis_failed() {
    *REDIS_RESTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now() + AFTER_FAILURE);
}

/// Refused by a rate limit: try again after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttled {
    pub retry_after: Duration,
    /// The request can never pass: it asks for more than a second's worth.
    pub never: bool,
}

/// One shared rate: a bucket name and its rate, with this instance's spare
/// and its fallback.
pub struct SharedRate {
    bucket: String,
    per_second: NonZeroU32,
    fallback: DefaultDirectRateLimiter,
    spare: Mutex<Spare>,
}

#[derive(Debug, Clone, Copy)]
struct Spare {
    n: u32,
    until: Instant,
}

impl std::fmt::Debug for SharedRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRate")
            .field("bucket", &self.bucket)
            .field("per_second", &self.per_second)
            .finish_non_exhaustive()
    }
}

impl SharedRate {
    /// `per_second` of `bucket` (a name unique in the deployment, e.g.
    /// `token:7:jobs`); None when 0 (unlimited).
    pub fn new(bucket: String, per_second: u32) -> Option<SharedRate> {
        let per_second = NonZeroU32::new(per_second)?;
        Some(SharedRate {
            bucket,
            per_second,
            fallback: RateLimiter::direct(Quota::per_second(per_second)),
            spare: Mutex::new(Spare {
                n: 0,
                until: Instant::now(),
            }),
        })
    }

    pub fn per_second(&self) -> u32 {
        self.per_second.get()
    }

    /// Counts `n` against the rate: in Redis through `index` (or this
    /// instance's spare), else, with no index or Redis failing, on this
    /// instance alone.
    pub async fn admit(&self, index: Option<&Index>, n: u32) -> Result<(), Throttled> {
        let Some(need) = NonZeroU32::new(n) else {
            return Ok(());
        };
        if need > self.per_second {
            return Err(Throttled {
                retry_after: Duration::from_secs(1),
                never: true,
            });
        }
        if self.spare_take(n) {
            return Ok(());
        }
        let Some(index) = index else {
            return self.local(need);
        };
        if redis_resting() {
            metrics::rate_fallback(None);
            return self.local(need);
        }
        let want = (self.per_second.get() / TAKE_DIVISOR).max(n);
        let asked = index.rate_take(&self.bucket, n, want, self.per_second.get());
        match tokio::time::timeout(ASK_WITHIN, asked).await {
            Ok(Ok((granted, _))) if granted >= n => {
                self.spare_add(granted - n);
                Ok(())
            }
            Ok(Ok((_, retry_after))) => Err(Throttled {
                retry_after: retry_after.max(Duration::from_millis(1)),
                never: false,
            }),
            Ok(Err(err)) => {
                redis_failed();
                let why = format!("are out of reach ({err})");
                metrics::rate_fallback(Some(&why));
                self.local(need)
            }
            Err(_) => {
                redis_failed();
                metrics::rate_fallback(Some(&"answer slowly"));
                self.local(need)
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spare> {
        self.spare
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spare_take(&self, n: u32) -> bool {
        let mut spare = self.lock();
        if spare.until > Instant::now() && spare.n >= n {
            spare.n -= n;
            return true;
        }
        false
    }

    fn spare_add(&self, n: u32) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let mut spare = self.lock();
        let kept = if spare.until > now { spare.n } else { 0 };
        *spare = Spare {
            n: kept.saturating_add(n),
            until: now + SPARE_FOR,
        };
    }

    fn local(&self, need: NonZeroU32) -> Result<(), Throttled> {
        match self.fallback.check_n(need) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Throttled {
                retry_after: not_until.wait_time_from(DefaultClock::default().now()),
                never: false,
            }),
            Err(_) => Err(Throttled {
                retry_after: Duration::from_secs(1),
                never: true,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_redis_it_counts_on_this_instance_and_says_when_to_come_back() {
        assert!(SharedRate::new("t".into(), 0).is_none(), "0 is unlimited");
        let rate = SharedRate::new("t".into(), 3).unwrap();
        for _ in 0..3 {
            assert!(rate.admit(None, 1).await.is_ok());
        }
        let throttled = rate.admit(None, 1).await.unwrap_err();
        assert!(!throttled.never);
        assert!(throttled.retry_after > Duration::ZERO);
        assert!(throttled.retry_after <= Duration::from_secs(1));
        assert!(rate.admit(None, 4).await.unwrap_err().never);
        assert!(
            rate.admit(None, 0).await.is_ok(),
            "nothing asked, nothing counted"
        );
    }

    #[tokio::test]
    async fn the_spare_is_spent_first_and_dropped_after_a_second() {
        let rate = SharedRate::new("t".into(), 100).unwrap();
        rate.spare_add(4);
        assert!(rate.spare_take(3));
        assert!(!rate.spare_take(2), "one left");
        assert!(rate.spare_take(1));
        rate.spare_add(5);
        rate.lock().until = Instant::now() - Duration::from_millis(1);
        assert!(!rate.spare_take(1), "too old");
        rate.spare_add(2);
        assert_eq!(rate.lock().n, 2, "an old spare is not added to");
    }
}
