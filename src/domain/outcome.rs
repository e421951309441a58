//! What happens after a job is produced: the report a consumer sends back
//! and the decision a report (or its absence) leads to, under the job's
//! [`Policy`]. Pure logic, no IO: the store applies decisions
//! under row locks, the results role and the API feed it reports.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::domain::job::{JobId, Status};
use crate::domain::policy::{Policy, DELAY_MAX_MS};

/// `last_error` keeps at most this many bytes of a reported error.
pub const ERROR_MAX_BYTES: usize = 4_096;

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

/// A consumer's report of an attempt's result, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultReport {
    pub job_id: JobId,
    pub attempt: u32,
    pub outcome: Outcome,
    pub error: Option<String>,
    pub retry_after_ms: Option<u32>,
}

impl ReportBody {
    /// Checks the body; `path_id` is the job named by the URL, if any. The
    /// error is a sentence for the caller.
    pub fn check(self, path_id: Option<JobId>) -> Result<ResultReport, String> {
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
        Ok(ResultReport {
            job_id,
            attempt,
            outcome,
            error: self.error.map(error_truncate),
            retry_after_ms,
        })
    }
}

/// Parses a record of the results topic.
pub fn report_parse(bytes: &[u8]) -> Result<ResultReport, String> {
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
pub fn decide(state: &JobState, report: &ResultReport, rng: &mut impl Rng) -> Decision {
    match state.status {
        Status::Succeeded | Status::Dead | Status::Cancelled | Status::Expired => {
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

    fn report(attempt: u32, outcome: Outcome) -> ResultReport {
        ResultReport {
            job_id: 7,
            attempt,
            outcome,
            error: Some("boom".to_owned()),
            retry_after_ms: None,
        }
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
        let asked = ResultReport {
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
}
