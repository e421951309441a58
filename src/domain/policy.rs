//! A job's result policy: whether a consumer reports back, how many
//! attempts it gets, the backoff between them and how long a result may
//! take. Fixed when a job is created and stored on its row; the ground
//! floor, beside `job`.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Longest `retry_after_ms`, backoff cap or ack timeout: 30 days (the
/// columns are `INT UNSIGNED` milliseconds).
pub const DELAY_MAX_MS: u32 = 30 * 86_400_000;
/// Longest `max_attempts`.
pub const ATTEMPTS_MAX: u32 = 10_000;
/// A job's result policy, fixed when it is created and stored on its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// Whether a consumer reports back. Without, the job is finished once
    /// dispatched and reports about it are ignored.
    pub expects_result: bool,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub backoff_base_ms: u32,
    pub backoff_cap_ms: u32,
    /// How long a dispatched job waits for its result before the silence
    /// counts as `retry`.
    pub ack_timeout_ms: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            expects_result: false,
            max_attempts: 5,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 3_600_000,
            ack_timeout_ms: 300_000,
        }
    }
}

/// Parts of a policy given by a request or a topic's configuration; what is
/// left out comes from the next source (request, then topic, then defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expects_result: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_base_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_cap_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timeout_ms: Option<u32>,
}

impl PolicyOverrides {
    /// `self` where given, else `base`.
    pub fn over(&self, base: Policy) -> Policy {
        Policy {
            expects_result: self.expects_result.unwrap_or(base.expects_result),
            max_attempts: self.max_attempts.unwrap_or(base.max_attempts),
            backoff_base_ms: self.backoff_base_ms.unwrap_or(base.backoff_base_ms),
            backoff_cap_ms: self.backoff_cap_ms.unwrap_or(base.backoff_cap_ms),
            ack_timeout_ms: self.ack_timeout_ms.unwrap_or(base.ack_timeout_ms),
        }
    }
}

impl Policy {
    /// Checks the bounds; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=ATTEMPTS_MAX).contains(&self.max_attempts) {
            return Err(format!("max_attempts must be between 1 and {ATTEMPTS_MAX}"));
        }
        if !(1..=DELAY_MAX_MS).contains(&self.backoff_cap_ms) {
            return Err(format!(
                "backoff_cap_ms must be between 1 and {DELAY_MAX_MS} (30 days)"
            ));
        }
        if self.backoff_base_ms == 0 || self.backoff_base_ms > self.backoff_cap_ms {
            return Err("backoff_base_ms must be at least 1 and at most backoff_cap_ms".to_owned());
        }
        if !(1_000..=DELAY_MAX_MS).contains(&self.ack_timeout_ms) {
            return Err(format!(
                "ack_timeout_ms must be between 1000 and {DELAY_MAX_MS} (30 days)"
            ));
        }
        Ok(())
    }

    /// The bounds of the delay after attempt `attempt` (1-based) failed:
    /// the ceiling is `min(cap, base * 2^(attempt-1))`, and the delay lies
    /// between half of it and all of it ("equal jitter": retries of many
    /// jobs failed together spread out, yet none comes back early).
    pub fn backoff_bounds(&self, attempt: u32) -> (u64, u64) {
        let base = u64::from(self.backoff_base_ms);
        let cap = u64::from(self.backoff_cap_ms);
        let doublings = attempt.saturating_sub(1).min(40);
        let ceiling = base.saturating_mul(1u64 << doublings).min(cap);
        (ceiling / 2, ceiling)
    }

    /// A jittered delay within `backoff_bounds(attempt)`.
    pub fn backoff_delay(&self, attempt: u32, rng: &mut impl Rng) -> u64 {
        let (low, high) = self.backoff_bounds(attempt);
        rng.random_range(low..=high)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_equal_jitter() {
        let p = Policy {
            expects_result: true,
            max_attempts: 10,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 60_000,
            ack_timeout_ms: 10_000,
        };
        assert_eq!(p.backoff_bounds(1), (500, 1_000));
        assert_eq!(p.backoff_bounds(2), (1_000, 2_000));
        assert_eq!(p.backoff_bounds(6), (16_000, 32_000));
        assert_eq!(p.backoff_bounds(7), (30_000, 60_000));
        assert_eq!(p.backoff_bounds(5_000), (30_000, 60_000), "no overflow");
        let mut rng = rand::rng();
        let delays: Vec<u64> = (0..2_000).map(|_| p.backoff_delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| (2_000..=4_000).contains(d)));
        let low = delays.iter().filter(|d| **d < 3_000).count();
        assert!(
            (600..1_400).contains(&low),
            "jitter spreads: {low} of 2000 low"
        );
    }

    #[test]
    fn policies_layer_and_validate() {
        let topic = PolicyOverrides {
            expects_result: Some(true),
            max_attempts: Some(8),
            ..PolicyOverrides::default()
        };
        let request = PolicyOverrides {
            max_attempts: Some(2),
            ..PolicyOverrides::default()
        };
        let resolved = request.over(topic.over(Policy::default()));
        assert!(resolved.expects_result);
        assert_eq!(resolved.max_attempts, 2);
        assert_eq!(resolved.backoff_base_ms, 1_000);
        resolved.validate().unwrap();
        for bad in [
            Policy {
                max_attempts: 0,
                ..resolved
            },
            Policy {
                backoff_base_ms: 5_000,
                backoff_cap_ms: 4_000,
                ..resolved
            },
            Policy {
                ack_timeout_ms: 999,
                ..resolved
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
