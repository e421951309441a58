//! A schedule's fires audited: the occurrences its timing expected in an
//! interval, and what became of each — produced, still to come, paused,
//! skipped by its misfire policy, or missing. Pure: the store reads the
//! occurrences' jobs and the schedule's gaps (`schedule_gaps`, the spans a
//! pause or a misfire policy passed over) and hands them here.
//!
//! An occurrence that exists as a job is told by its job, whatever a gap
//! says: `fire_once`'s one firing lies inside its span of skips, and an
//! occurrence created before a pause and kept is no less produced.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::job::{JobId, Status};
use super::schedule::Timing;

/// Most occurrences one audit walks; an interval holding more is refused
/// (ask for a shorter one).
pub const FIRES_MAX: usize = 10_000;

/// Where a schedule's occurrences may fall, within the interval asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The interval: `from` inclusive, `to` exclusive.
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// None at or before this: the schedule did not exist yet, or its
    /// `start_at` was later.
    pub after: DateTime<Utc>,
    /// None after this (inclusive): its `end_at`, or where it ended.
    pub until: Option<DateTime<Utc>>,
}

/// The interval holds more than `max` occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the interval holds more than {max} occurrences")]
pub struct TooMany {
    pub max: usize,
}

/// The occurrences `timing` gives within `span`, in order; at most `max`.
pub fn expected(timing: &Timing, span: &Span, max: usize) -> Result<Vec<DateTime<Utc>>, TooMany> {
    let mut out = Vec::new();
    let mut cursor = span.after.max(span.from - Duration::milliseconds(1));
    while let Some(next) = timing
        .next_after(cursor)
        .filter(|at| *at < span.to && span.until.is_none_or(|until| *at <= until))
    {
        if out.len() == max {
            return Err(TooMany { max });
        }
        out.push(next);
        cursor = next;
    }
    Ok(out)
}

/// What became of one occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FireOutcome {
    /// Its job exists and is due, not produced yet (late, or being
    /// produced this instant).
    Created,
    /// Its job was produced to Kafka (dispatched or succeeded; or pending
    /// again for a retry after it was).
    Produced,
    /// Its job ended `dead`.
    Dead,
    /// Its job was cancelled.
    Cancelled,
    /// Its job was not produced by its `expires_at` (a `skip` schedule's
    /// occurrence still pending past the grace).
    Expired,
    /// No job: the schedule was paused then.
    Paused,
    /// No job: missed while no tickler created it, and passed over by the
    /// schedule's misfire policy.
    Skipped,
    /// No job and no reason known: the alarming one (or its job was
    /// purged after `jobs.retention_days`).
    Missing,
    /// Not due yet (its job may exist already).
    Upcoming,
}

/// What a gap says of the occurrences it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapReason {
    Paused,
    Skipped,
}

impl GapReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GapReason::Paused => "paused",
            GapReason::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<GapReason> {
        match text {
            "paused" => Some(GapReason::Paused),
            "skipped" => Some(GapReason::Skipped),
            _ => None,
        }
    }
}

/// Instants a pause or a misfire policy passed over, both ends inclusive;
/// `to_at` None while a pause lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub reason: GapReason,
    pub from_at: DateTime<Utc>,
    pub to_at: Option<DateTime<Utc>>,
}

impl Gap {
    fn covers(&self, at: DateTime<Utc>) -> bool {
        self.from_at <= at && self.to_at.is_none_or(|to| at <= to)
    }
}

/// An occurrence's job, as an audit shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FireJob {
    pub id: JobId,
    pub status: Status,
    /// When it runs (or ran): its `schedule_time`.
    pub run_at: DateTime<Utc>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// When its record was read back at that position and found there.
    pub verified_at: Option<DateTime<Utc>>,
}

/// What is known of the schedule beside its jobs.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub gaps: Vec<Gap>,
    /// The schedule is paused, since this instant (its cursor): for a
    /// pause made before gaps were recorded.
    pub paused_since: Option<DateTime<Utc>>,
}

/// One occurrence audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fire {
    pub expected_at: DateTime<Utc>,
    pub outcome: FireOutcome,
    pub job: Option<FireJob>,
}

/// What became of the occurrence at `at`, at `now`.
pub fn outcome(
    at: DateTime<Utc>,
    job: Option<&FireJob>,
    known: &Known,
    now: DateTime<Utc>,
) -> FireOutcome {
    if let Some(job) = job {
        return match job.status {
            Status::Cancelled => FireOutcome::Cancelled,
            Status::Expired => FireOutcome::Expired,
            Status::Dead => FireOutcome::Dead,
            Status::Dispatched | Status::Succeeded => FireOutcome::Produced,
            Status::Pending | Status::Dispatching if job.dispatched_at.is_some() => {
                FireOutcome::Produced
            }
            Status::Pending | Status::Dispatching if job.run_at > now => FireOutcome::Upcoming,
            Status::Pending | Status::Dispatching => FireOutcome::Created,
        };
    }
    if let Some(gap) = known.gaps.iter().find(|gap| gap.covers(at)) {
        return match gap.reason {
            GapReason::Paused => FireOutcome::Paused,
            GapReason::Skipped => FireOutcome::Skipped,
        };
    }
    if known.paused_since.is_some_and(|since| at > since) {
        FireOutcome::Paused
    } else if at > now {
        FireOutcome::Upcoming
    } else {
        FireOutcome::Missing
    }
}

/// Each expected occurrence with its job (by instant) and its outcome.
pub fn audit(
    expected: &[DateTime<Utc>],
    jobs: &BTreeMap<DateTime<Utc>, FireJob>,
    known: &Known,
    now: DateTime<Utc>,
) -> Vec<Fire> {
    expected
        .iter()
        .map(|at| {
            let job = jobs.get(at).copied();
            Fire {
                expected_at: *at,
                outcome: outcome(*at, job.as_ref(), known, now),
                job,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn every_minute() -> Timing {
        Timing::from_parts(None, None, Some(60_000), utc("2027-01-01T00:00:00Z")).unwrap()
    }

    fn span(from: &str, to: &str) -> Span {
        Span {
            from: utc(from),
            to: utc(to),
            after: utc("2026-12-31T23:59:59.999Z"),
            until: None,
        }
    }

    fn job(status: Status, run_at: &str, dispatched: bool) -> FireJob {
        FireJob {
            id: 7,
            status,
            run_at: utc(run_at),
            dispatched_at: dispatched.then(|| utc(run_at)),
            partition: dispatched.then_some(0),
            offset: dispatched.then_some(41),
            verified_at: None,
        }
    }

    #[test]
    fn the_interval_takes_from_and_leaves_to() {
        let at = expected(
            &every_minute(),
            &span("2027-01-01T00:01:00Z", "2027-01-01T00:04:00Z"),
            10,
        )
        .unwrap();
        assert_eq!(
            at,
            [
                utc("2027-01-01T00:01:00Z"),
                utc("2027-01-01T00:02:00Z"),
                utc("2027-01-01T00:03:00Z")
            ]
        );
    }

    #[test]
    fn nothing_is_expected_before_the_schedule_or_after_its_end() {
        let mut bounded = span("2027-01-01T00:00:00Z", "2027-01-01T01:00:00Z");
        // Created at 00:02:00 exactly: its first occurrence is the next.
        bounded.after = utc("2027-01-01T00:02:00Z");
        bounded.until = Some(utc("2027-01-01T00:04:00Z"));
        let at = expected(&every_minute(), &bounded, 10).unwrap();
        assert_eq!(
            at,
            [utc("2027-01-01T00:03:00Z"), utc("2027-01-01T00:04:00Z")]
        );
    }

    #[test]
    fn an_interval_over_the_most_is_refused() {
        let day = span("2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z");
        assert_eq!(expected(&every_minute(), &day, 1_440).unwrap().len(), 1_440);
        assert_eq!(
            expected(&every_minute(), &day, 1_439),
            Err(TooMany { max: 1_439 })
        );
    }

    #[test]
    fn a_job_tells_its_occurrence_whatever_a_gap_says() {
        let known = Known {
            gaps: vec![Gap {
                reason: GapReason::Skipped,
                from_at: utc("2027-01-01T00:03:00Z"),
                to_at: Some(utc("2027-01-01T00:05:00Z")),
            }],
            paused_since: None,
        };
        let now = utc("2027-01-01T00:10:00Z");
        let at = utc("2027-01-01T00:04:00Z");
        let once = job(Status::Dispatched, "2027-01-01T00:05:30Z", true);
        assert_eq!(outcome(at, Some(&once), &known, now), FireOutcome::Produced);
        assert_eq!(outcome(at, None, &known, now), FireOutcome::Skipped);
        assert_eq!(
            outcome(utc("2027-01-01T00:05:00Z"), None, &known, now),
            FireOutcome::Skipped,
            "both ends inclusive"
        );
        assert_eq!(
            outcome(utc("2027-01-01T00:06:00Z"), None, &known, now),
            FireOutcome::Missing
        );
    }

    #[test]
    fn each_status_has_its_outcome() {
        let now = utc("2027-01-01T00:10:00Z");
        let at = utc("2027-01-01T00:09:00Z");
        let known = Known::default();
        let of = |status, run_at, dispatched| {
            outcome(at, Some(&job(status, run_at, dispatched)), &known, now)
        };
        let past = "2027-01-01T00:09:00Z";
        assert_eq!(of(Status::Succeeded, past, true), FireOutcome::Produced);
        assert_eq!(
            of(Status::Pending, "2027-01-01T00:11:00Z", true),
            FireOutcome::Produced,
            "a retry after a send"
        );
        assert_eq!(of(Status::Pending, past, false), FireOutcome::Created);
        assert_eq!(
            of(Status::Pending, "2027-01-01T00:10:30Z", false),
            FireOutcome::Upcoming
        );
        assert_eq!(of(Status::Dead, past, true), FireOutcome::Dead);
        assert_eq!(of(Status::Cancelled, past, false), FireOutcome::Cancelled);
        assert_eq!(of(Status::Expired, past, false), FireOutcome::Expired);
        assert_eq!(
            outcome(utc("2027-01-01T00:11:00Z"), None, &known, now),
            FireOutcome::Upcoming
        );
    }

    #[test]
    fn a_pause_covers_what_fell_in_it_and_an_open_one_what_comes() {
        let now = utc("2027-01-01T00:10:00Z");
        let open = Known {
            gaps: vec![Gap {
                reason: GapReason::Paused,
                from_at: utc("2027-01-01T00:05:30Z"),
                to_at: None,
            }],
            paused_since: None,
        };
        for at in ["2027-01-01T00:06:00Z", "2027-01-01T00:12:00Z"] {
            assert_eq!(outcome(utc(at), None, &open, now), FireOutcome::Paused);
        }
        // Paused before gaps were recorded: from its cursor on.
        let unrecorded = Known {
            gaps: Vec::new(),
            paused_since: Some(utc("2027-01-01T00:05:30Z")),
        };
        assert_eq!(
            outcome(utc("2027-01-01T00:05:00Z"), None, &unrecorded, now),
            FireOutcome::Missing
        );
        assert_eq!(
            outcome(utc("2027-01-01T00:06:00Z"), None, &unrecorded, now),
            FireOutcome::Paused
        );
    }
}
