//! What happens after a job is produced: its result policy, the report a
//! consumer sends back, the backoff of a retry, and the decision a report (or
//! its absence) leads to. Pure logic, no IO: the store applies decisions
//! under row locks, the results role and the API feed it reports.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::job::{JobId, Status};

/// Longest `retry_after_ms`, backoff cap or ack timeout: 30 days (the
/// columns are `INT UNSIGNED` milliseconds).
pub const DELAY_MAX_MS: u32 = 30 * 86_400_000;
/// Longest `max_attempts`.
pub const ATTEMPTS_MAX: u32 = 10_000;
/// `last_error` keeps at most this many bytes of a reported error.
pub const ERROR_MAX_BYTES: usize = 4_096;

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

/// What a consumer says became of an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    Retry,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Retry => "retry",
            Outcome::Failed => "failed",
        }
    }
}

/// The JSON of a report, as it arrives on the results topic or on
/// `POST /v1/jobs/{id}/result` (where `job_id` may be left out).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportBody {
    pub job_id: Option<JobId>,
    pub attempt: Option<u32>,
    pub outcome: Option<Outcome>,
    pub error: Option<String>,
    pub retry_after_ms: Option<u64>,
}

/// A checked report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub job_id: JobId,
    pub attempt: u32,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub retry_after_ms: Option<u32>,
}

impl ReportBody {
    /// Checks the body; `path_id` is the job named by the URL, if any. The
    /// error is a sentence for the caller.
    pub fn check(self, path_id: Option<JobId>) -> Result<Report, String> {
        let job_id = match (self.job_id, path_id) {
            (Some(body), Some(path)) if body != path => {
                return Err(format!(
                    "job_id {body} in the body is not the job {path} of the URL"
                ))
            }
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => return Err("job_id is required".to_owned()),
        };
        let attempt = self
            .attempt
            .filter(|a| *a >= 1)
            .ok_or("attempt is required: the tickler-attempt header of the record (1 or more)")?;
        let outcome = self
            .outcome
            .ok_or("outcome is required: \"ok\", \"retry\" or \"failed\"")?;
        let retry_after_ms = match (outcome, self.retry_after_ms) {
            (_, None) => None,
            (Outcome::Retry, Some(ms)) if ms <= u64::from(DELAY_MAX_MS) => Some(ms as u32),
            (Outcome::Retry, Some(_)) => {
                return Err(format!(
                    "retry_after_ms must be at most {DELAY_MAX_MS} (30 days)"
                ))
            }
            (_, Some(_)) => {
                return Err("retry_after_ms goes only with outcome \"retry\"".to_owned())
            }
        };
        Ok(Report {
            job_id,
            attempt,
            outcome,
            error: self.error.map(error_truncate),
            retry_after_ms,
        })
    }
}

/// Parses a record of the results topic.
pub fn report_parse(bytes: &[u8]) -> Result<Report, String> {
    let body: ReportBody =
        serde_json::from_slice(bytes).map_err(|err| format!("not a report: {err}"))?;
    body.check(None)
}

/// Cuts an error to `ERROR_MAX_BYTES` on a character boundary.
pub fn error_truncate(mut error: String) -> String {
    if error.len() > ERROR_MAX_BYTES {
        let mut end = ERROR_MAX_BYTES;
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        error.truncate(end);
    }
    error
}

/// What a job is, as far as a decision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobState {
    pub status: Status,
    pub attempt: u32,
    pub policy: Policy,
}

/// Why a report changed nothing. The words are stable: they are the API's
/// answer and the `reason` label of `tickler_results_ignored_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// No such job.
    UnknownJob,
    /// The report names another attempt than the job's current one: late,
    /// repeated after a retry, or from the future.
    StaleAttempt,
    /// The job is succeeded, dead or cancelled already (a repeated report).
    Finished,
    /// The job does not expect a result: it finished when dispatched.
    NotExpected,
    /// The job's current attempt has not been produced (pending).
    NotDispatched,
}

impl Ignored {
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::UnknownJob => "unknown_job",
            Ignored::StaleAttempt => "stale_attempt",
            Ignored::Finished => "finished",
            Ignored::NotExpected => "not_expected",
            Ignored::NotDispatched => "not_dispatched",
        }
    }
}

/// What a report or a missed ack deadline does to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// → `succeeded`.
    Succeed,
    /// → `pending` at now + `delay_ms`, attempt + 1.
    Retry {
        delay_ms: u64,
        error: String,
    },
    /// → `dead`.
    Dead {
        error: String,
    },
    Ignore(Ignored),
}

/// The decision for `report` about a job in `state`.
///
/// A report applies to the current attempt while it is `dispatching` (the
/// consumer can be faster than the dispatcher's marking) or `dispatched`.
pub fn decide(state: &JobState, report: &Report, rng: &mut impl Rng) -> Decision {
    match state.status {
        Status::Succeeded | Status::Dead | Status::Cancelled => {
            return Decision::Ignore(Ignored::Finished)
        }
        _ if !state.policy.expects_result => return Decision::Ignore(Ignored::NotExpected),
        _ if report.attempt != state.attempt => return Decision::Ignore(Ignored::StaleAttempt),
        Status::Pending => return Decision::Ignore(Ignored::NotDispatched),
        Status::Dispatching | Status::Dispatched => {}
    }
    let reason = |default: &str| report.error.clone().unwrap_or_else(|| default.to_owned());
    match report.outcome {
        Outcome::Ok => Decision::Succeed,
        Outcome::Failed => Decision::Dead {
            error: reason("the consumer reported failed"),
        },
        Outcome::Retry => retry_or_dead(
            state,
            reason("the consumer asked for a retry"),
            report.retry_after_ms.map(u64::from),
            rng,
        ),
    }
}

/// The decision when a dispatched job's ack deadline passed in silence: as
/// if the consumer had said `retry`.
pub fn decide_silence(state: &JobState, rng: &mut impl Rng) -> Decision {
    let error = format!(
        "no result within the ack timeout of {} ms",
        state.policy.ack_timeout_ms
    );
    retry_or_dead(state, error, None, rng)
}

/// The decision when the broker refused a job's record for the job's own
/// sake (a missing topic, a record too large...): a failed attempt, retried
/// after backoff while attempts are left.
pub fn decide_refused(state: &JobState, refusal: &str, rng: &mut impl Rng) -> Decision {
    let error = error_truncate(format!("the broker refused the record: {refusal}"));
    retry_or_dead(state, error, None, rng)
}

fn retry_or_dead(
    state: &JobState,
    error: String,
    retry_after_ms: Option<u64>,
    rng: &mut impl Rng,
) -> Decision {
    if state.attempt >= state.policy.max_attempts {
        return Decision::Dead {
            error: error_truncate(format!(
                "attempts exhausted ({} of {}): {error}",
                state.attempt, state.policy.max_attempts
            )),
        };
    }
    let delay_ms = retry_after_ms.unwrap_or_else(|| state.policy.backoff_delay(state.attempt, rng));
    Decision::Retry { delay_ms, error }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32) -> Policy {
        Policy {
            expects_result: true,
            max_attempts,
            backoff_base_ms: 1_000,
            backoff_cap_ms: 60_000,
            ack_timeout_ms: 10_000,
        }
    }

    fn dispatched(attempt: u32, max_attempts: u32) -> JobState {
        JobState {
            status: Status::Dispatched,
            attempt,
            policy: policy(max_attempts),
        }
    }

    fn report(attempt: u32, outcome: Outcome) -> Report {
        Report {
            job_id: 7,
            attempt,
            outcome,
            error: Some("boom".to_owned()),
            retry_after_ms: None,
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_equal_jitter() {
        let p = policy(10);
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
    fn outcomes_decide_by_attempts_left() {
        let mut rng = rand::rng();
        let state = dispatched(1, 3);
        assert_eq!(
            decide(&state, &report(1, Outcome::Ok), &mut rng),
            Decision::Succeed
        );
        assert_eq!(
            decide(&state, &report(1, Outcome::Failed), &mut rng),
            Decision::Dead {
                error: "boom".to_owned()
            }
        );
        match decide(&state, &report(1, Outcome::Retry), &mut rng) {
            Decision::Retry { delay_ms, error } => {
                assert!((500..=1_000).contains(&delay_ms));
                assert_eq!(error, "boom");
            }
            other => panic!("{other:?}"),
        }
        let asked = Report {
            retry_after_ms: Some(42_000),
            ..report(1, Outcome::Retry)
        };
        assert!(matches!(
            decide(&state, &asked, &mut rng),
            Decision::Retry {
                delay_ms: 42_000,
                ..
            }
        ));
        let last = dispatched(3, 3);
        assert_eq!(
            decide(&last, &report(3, Outcome::Retry), &mut rng),
            Decision::Dead {
                error: "attempts exhausted (3 of 3): boom".to_owned()
            }
        );
        let early = JobState {
            status: Status::Dispatching,
            ..state
        };
        assert_eq!(
            decide(&early, &report(1, Outcome::Ok), &mut rng),
            Decision::Succeed,
            "a report may beat the dispatcher's marking"
        );
    }

    #[test]
    fn reports_that_do_not_fit_are_ignored() {
        let mut rng = rand::rng();
        let ok = report(1, Outcome::Ok);
        for (state, why) in [
            (dispatched(2, 3), Ignored::StaleAttempt),
            (
                JobState {
                    status: Status::Succeeded,
                    ..dispatched(1, 3)
                },
                Ignored::Finished,
            ),
            (
                JobState {
                    status: Status::Cancelled,
                    ..dispatched(1, 3)
                },
                Ignored::Finished,
            ),
            (
                JobState {
                    status: Status::Pending,
                    ..dispatched(1, 3)
                },
                Ignored::NotDispatched,
            ),
            (
                JobState {
                    policy: Policy {
                        expects_result: false,
                        ..policy(3)
                    },
                    ..dispatched(1, 3)
                },
                Ignored::NotExpected,
            ),
        ] {
            assert_eq!(decide(&state, &ok, &mut rng), Decision::Ignore(why));
        }
    }

    #[test]
    fn silence_is_a_retry() {
        let mut rng = rand::rng();
        match decide_silence(&dispatched(1, 2), &mut rng) {
            Decision::Retry { error, .. } => assert!(error.contains("ack timeout of 10000 ms")),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decide_silence(&dispatched(2, 2), &mut rng),
            Decision::Dead { error } if error.starts_with("attempts exhausted (2 of 2)")
        ));
    }

    #[test]
    fn a_refused_send_is_a_failed_attempt() {
        let mut rng = rand::rng();
        let dispatching = |attempt| JobState {
            status: Status::Dispatching,
            ..dispatched(attempt, 3)
        };
        match decide_refused(&dispatching(1), "unknown topic", &mut rng) {
            Decision::Retry { delay_ms, error } => {
                assert!((500..=1_000).contains(&delay_ms), "backoff of attempt 1");
                assert_eq!(error, "the broker refused the record: unknown topic");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            decide_refused(&dispatching(3), "unknown topic", &mut rng),
            Decision::Dead {
                error: "attempts exhausted (3 of 3): the broker refused the record: unknown topic"
                    .to_owned()
            }
        );
    }

    #[test]
    fn reports_are_checked() {
        let parsed =
            report_parse(br#"{"job_id":5,"attempt":2,"outcome":"retry","retry_after_ms":100}"#)
                .unwrap();
        assert_eq!(parsed.retry_after_ms, Some(100));
        for (bad, says) in [
            (&b"not json"[..], "not a report"),
            (
                br#"{"job_id":5,"attempt":1,"outcome":"maybe"}"#,
                "not a report",
            ),
            (
                br#"{"job_id":5,"attempt":1,"outcome":"ok","extra":1}"#,
                "unknown field",
            ),
            (br#"{"attempt":1,"outcome":"ok"}"#, "job_id is required"),
            (br#"{"job_id":5,"attempt":0,"outcome":"ok"}"#, "attempt"),
            (br#"{"job_id":5,"attempt":1}"#, "outcome is required"),
            (
                br#"{"job_id":5,"attempt":1,"outcome":"ok","retry_after_ms":5}"#,
                "only with outcome",
            ),
            (
                br#"{"job_id":5,"attempt":1,"outcome":"retry","retry_after_ms":9999999999}"#,
                "at most",
            ),
            (
                br#"{"job_id":-5,"attempt":1,"outcome":"ok"}"#,
                "not a report",
            ),
        ] {
            let err = report_parse(bad).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
        let body = ReportBody {
            job_id: Some(1),
            attempt: Some(1),
            outcome: Some(Outcome::Ok),
            error: Some("é".repeat(3_000)),
            retry_after_ms: None,
        };
        assert!(body.clone().check(Some(2)).is_err(), "ids must agree");
        let checked = body.check(Some(1)).unwrap();
        assert!(checked.error.unwrap().len() <= ERROR_MAX_BYTES);
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
