//! A create request and the rules it is checked by — the only place they
//! stand. Every edge reads its own wire format (the API's JSON, the
//! ingress's Kafka headers, `tickler import`'s lines) into a
//! [`JobRequest`] of typed fields; [`JobRequest::build`] checks it and
//! decides what is written: the instant in a window, the expiry, the
//! policy over the topic's. A new job field is added here once, then to
//! the store's insert, and to each wire format that carries it.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::domain::job::{
    self, Expiry, InvalidJob, NewJob, PayloadKind, Schedule, Window, WINDOW_MAX_MS,
};
use crate::domain::policy::{Policy, PolicyOverrides};
use crate::domain::zones::{self, InvalidWallClock, WallClock};

/// The limits a job is checked against (`jobs.payload_max_bytes`,
/// `jobs.max_schedule_ahead_days`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub payload_max_bytes: usize,
    pub max_schedule_ahead_days: u64,
}

impl Limits {
    /// Whether a payload of `size` bytes may be stored.
    pub fn payload_check(&self, size: usize) -> Result<(), InvalidJob> {
        if size > self.payload_max_bytes {
            return Err(InvalidJob::PayloadTooLarge {
                size,
                limit: self.payload_max_bytes,
            });
        }
        Ok(())
    }

    /// Whether `schedule` lies within the horizon from `now` (the past is
    /// accepted: such a job is due at once).
    pub fn horizon_check(&self, schedule: &Schedule, now: DateTime<Utc>) -> Result<(), InvalidJob> {
        let max_ahead_ms = self.max_schedule_ahead_days.saturating_mul(86_400_000);
        let ahead_ms = match *schedule {
            Schedule::After { delay_ms } => delay_ms,
            Schedule::At(at) => u64::try_from((at - now).num_milliseconds()).unwrap_or(0),
        };
        if ahead_ms > max_ahead_ms {
            return Err(InvalidJob::TooFar {
                max_days: self.max_schedule_ahead_days,
            });
        }
        Ok(())
    }
}

/// What a job inherits from its topic when the request says nothing of
/// it (`[topics.T]`): its result policy, and an expiry after its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicDefaults {
    pub policy: Policy,
    /// `default_ttl_ms`: a job given no expiry gets `ttl_ms` this.
    pub ttl_ms: Option<u64>,
}

impl From<Policy> for TopicDefaults {
    fn from(policy: Policy) -> Self {
        TopicDefaults {
            policy,
            ttl_ms: None,
        }
    }
}

/// What a caller asks to create, read from its wire format but not yet
/// checked.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRequest {
    pub topic: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub payload_kind: PayloadKind,
    pub headers: BTreeMap<String, String>,
    /// The time asked for (a window's start, with one).
    pub schedule: Schedule,
    /// A flexible window's length; 0 for none.
    pub window_ms: u32,
    pub expiry: Option<Expiry>,
    /// The result policy asked for; the rest comes from the topic's.
    pub policy: PolicyOverrides,
    /// The W3C `traceparent` of the request.
    pub trace_parent: Option<String>,
    /// The wall-clock time `schedule` was computed from
    /// ([`JobRequest::new_local`]).
    pub wall: Option<WallClock>,
    /// What happens when a job holds (topic, key) already.
    pub on_conflict: OnConflict,
}

/// What a create does when a job holds its (topic, key) already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnConflict {
    /// The same request again is answered with the job; another is
    /// refused (`key_conflict`).
    #[default]
    Reject,
    /// The pending job is moved to the new time with the new payload and
    /// headers, never past its generation's first request +
    /// `max_delay_ms` (None: no ceiling); once it went out, a new job (the
    /// next generation) takes the key.
    Debounce { max_delay_ms: Option<u64> },
}

impl OnConflict {
    /// The wire's `on_conflict` (`reject`, `debounce`; None: reject) and
    /// `max_delay_ms`, read; [`JobRequest::build`] checks the rest.
    pub fn parse(name: Option<&str>, max_delay_ms: Option<i64>) -> Result<OnConflict, Refusal> {
        let max_delay_ms =
            match max_delay_ms {
                None => None,
                Some(ms) => Some(u64::try_from(ms).ok().filter(|ms| *ms >= 1).ok_or_else(
                    || Refusal::OnConflict(format!("max_delay_ms must be 1 or more, not {ms}")),
                )?),
            };
        match (name, max_delay_ms) {
            (None | Some("reject"), None) => Ok(OnConflict::Reject),
            (None | Some("reject"), Some(_)) => Err(Refusal::OnConflict(
                "max_delay_ms goes with on_conflict: \"debounce\"".to_owned(),
            )),
            (Some("debounce"), max_delay_ms) => Ok(OnConflict::Debounce { max_delay_ms }),
            (Some(other), _) => Err(Refusal::OnConflict(format!(
                "on_conflict must be \"reject\" or \"debounce\", not {other:?}"
            ))),
        }
    }

    /// Whether this is a debounce.
    pub fn debounces(&self) -> bool {
        matches!(self, OnConflict::Debounce { .. })
    }
}

/// Why a request is refused. Each edge words it in its own terms (the
/// API's error codes, the ingress's replies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A rule of the job itself: topic, key, headers, payload, horizon.
    Job(InvalidJob),
    /// The window's length.
    Window(String),
    /// The expiry does not come after the job is due, or is out of range.
    Expiry(String),
    /// The result policy, over the topic's, is not one tickler runs.
    Policy(String),
    /// `run_local` or `time_zone`.
    WallClock(InvalidWallClock),
    /// `on_conflict` or `max_delay_ms`.
    OnConflict(String),
}

impl From<InvalidJob> for Refusal {
    fn from(err: InvalidJob) -> Refusal {
        Refusal::Job(err)
    }
}

impl JobRequest {
    /// A request for `topic` at `schedule`, with nothing else.
    pub fn new(topic: impl Into<String>, schedule: Schedule) -> JobRequest {
        JobRequest {
            topic: topic.into(),
            key: None,
            payload: Vec::new(),
            payload_kind: PayloadKind::Bytes,
            headers: BTreeMap::new(),
            schedule,
            window_ms: 0,
            expiry: None,
            policy: PolicyOverrides::default(),
            trace_parent: None,
            wall: None,
            on_conflict: OnConflict::Reject,
        }
    }

    /// A request for `topic` at a wall-clock time: `local` in the IANA zone
    /// `zone`, resolved with the rules this process has loaded (a skipped
    /// local time is the moment of the change, a repeated one its first
    /// occurrence). The local time, the zone and the tzdata release are
    /// kept, so that a newer tzdata moves the job where its instant changes.
    pub fn new_local(
        topic: impl Into<String>,
        local: NaiveDateTime,
        zone: &str,
    ) -> Result<JobRequest, Refusal> {
        let (at, wall) =
            zones::wall_resolve(&zones::current(), local, zone).map_err(Refusal::WallClock)?;
        let mut request = JobRequest::new(topic, Schedule::At(at));
        request.wall = Some(wall);
        Ok(request)
    }

    /// Checks every create rule and builds the job to write. `now` bounds
    /// the horizon and stands for the database's clock a delay counts
    /// from; `topic_defaults` gives what the job inherits from its topic (its result policy, its `default_ttl_ms`).
    ///
    /// A window decides the instant in it once: from the topic and key for
    /// a keyed job (the same request lands on the same instant), drawn
    /// for an unkeyed one. An expiry comes after the window's end; a ttl
    /// after a delay is added, in the database, to the instant decided.
    pub fn build<D: Into<TopicDefaults>>(
        self,
        limits: Limits,
        now: DateTime<Utc>,
        topic_defaults: impl FnOnce(&str) -> D,
    ) -> Result<NewJob, Refusal> {
        job::topic_validate(&self.topic)?;
        let defaults: TopicDefaults = topic_defaults(&self.topic).into();
        if let Some(key) = &self.key {
            job::key_validate_unreserved(key)?;
        }
        job::headers_validate(&self.headers)?;
        limits.horizon_check(&self.schedule, now)?;
        if let OnConflict::Debounce { max_delay_ms } = self.on_conflict {
            if self.key.is_none() {
                return Err(Refusal::OnConflict(
                    "on_conflict: \"debounce\" needs a key: the debounced job is the one holding it"
                        .to_owned(),
                ));
            }
            let max_ms = limits.max_schedule_ahead_days.saturating_mul(86_400_000);
            if max_delay_ms.is_some_and(|ms| ms == 0 || ms > max_ms) {
                return Err(Refusal::OnConflict(format!(
                    "max_delay_ms must be 1 to {max_ms} (jobs.max_schedule_ahead_days)"
                )));
            }
        }
        limits.payload_check(self.payload.len())?;
        if self.window_ms > WINDOW_MAX_MS {
            return Err(Refusal::Window(format!(
                "window_ms must be 0 to {WINDOW_MAX_MS} (a day)"
            )));
        }
        let window = (self.window_ms > 0).then(|| {
            let offset = job::window_offset_ms(&self.topic, self.key.as_deref(), self.window_ms);
            let window = Window {
                ms: self.window_ms,
                start: self.schedule,
            };
            (window, offset)
        });
        // An expiry comes after the window's end, where the job may go out.
        let latest = window.map_or(self.schedule, |(w, _)| {
            self.schedule.later_by(u64::from(w.ms))
        });
        // The topic's default_ttl_ms for a job that says nothing of it.
        let expiry = self.expiry.or_else(|| {
            defaults
                .ttl_ms
                .map(|ttl_ms| job::Expiry::AfterRun { ttl_ms })
        });
        let (expires_at, expires_after_ms) = match expiry {
            Some(expiry) => job::expiry_resolve(expiry, &latest, now).map_err(Refusal::Expiry)?,
            None => (None, None),
        };
        // A ttl after a delay counts from the window's end: from the
        // decided instant to the end, then the ttl.
        let expires_after_ms = match (expires_after_ms, window) {
            (Some(ttl), Some((w, offset))) => Some(ttl + u64::from(w.ms) - offset),
            (ttl, _) => ttl,
        };
        let schedule = window.map_or(self.schedule, |(_, offset)| self.schedule.later_by(offset));
        let policy = self.policy.over(defaults.policy);
        policy.validate().map_err(Refusal::Policy)?;
        Ok(NewJob {
            topic: self.topic,
            key: self.key,
            payload: self.payload,
            payload_kind: self.payload_kind,
            headers: self.headers,
            schedule,
            policy,
            trace_parent: self.trace_parent,
            schedule_id: None,
            expires_at,
            expires_after_ms,
            window: window.map(|(w, _)| w),
            wall: self.wall,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        payload_max_bytes: 16,
        max_schedule_ahead_days: 10,
    };

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn build(request: JobRequest) -> Result<NewJob, Refusal> {
        request.build(LIMITS, now(), |_| Policy::default())
    }

    #[test]
    fn each_rule_refuses_with_its_reason() {
        let at = Schedule::At(now() + chrono::Duration::hours(1));
        assert!(build(JobRequest::new("t", at)).is_ok());
        assert_eq!(
            build(JobRequest::new("a b", at)),
            Err(Refusal::Job(InvalidJob::Topic))
        );
        let far = Schedule::After {
            delay_ms: 10 * 86_400_000 + 1,
        };
        assert_eq!(
            build(JobRequest::new("t", far)),
            Err(Refusal::Job(InvalidJob::TooFar { max_days: 10 }))
        );
        let mut big = JobRequest::new("t", at);
        big.payload = vec![0; 17];
        assert_eq!(
            build(big),
            Err(Refusal::Job(InvalidJob::PayloadTooLarge {
                size: 17,
                limit: 16
            }))
        );
        let mut wide = JobRequest::new("t", at);
        wide.window_ms = WINDOW_MAX_MS + 1;
        assert!(matches!(build(wide), Err(Refusal::Window(_))));
        let mut early = JobRequest::new("t", at);
        early.expiry = Some(Expiry::At(now()));
        assert!(matches!(build(early), Err(Refusal::Expiry(_))));
        let mut policy = JobRequest::new("t", at);
        policy.policy.max_attempts = Some(0);
        assert!(matches!(build(policy), Err(Refusal::Policy(_))));
        let mut reserved = JobRequest::new("t", at);
        reserved.headers.insert("tickler-x".into(), "1".into());
        assert!(matches!(
            build(reserved),
            Err(Refusal::Job(InvalidJob::Header(_)))
        ));
    }

    #[test]
    fn a_topic_default_ttl_is_inherited_by_jobs_that_give_no_expiry() {
        let at = now() + chrono::Duration::hours(1);
        let topic = |_: &str| TopicDefaults {
            policy: Policy::default(),
            ttl_ms: Some(60_000),
        };
        let inherited = JobRequest::new("t", Schedule::At(at))
            .build(LIMITS, now(), topic)
            .unwrap();
        assert_eq!(
            inherited.expires_at,
            Some(at + chrono::Duration::minutes(1))
        );
        let mut own = JobRequest::new("t", Schedule::At(at));
        own.expiry = Some(Expiry::At(at + chrono::Duration::hours(5)));
        let own = own.build(LIMITS, now(), topic).unwrap();
        assert_eq!(
            own.expires_at,
            Some(at + chrono::Duration::hours(5)),
            "its own wins"
        );
        let delayed = JobRequest::new("t", Schedule::After { delay_ms: 5 })
            .build(LIMITS, now(), topic)
            .unwrap();
        assert_eq!(
            (delayed.expires_at, delayed.expires_after_ms),
            (None, Some(60_000)),
            "counted from the database's run_at"
        );
        let none = JobRequest::new("t", Schedule::At(at))
            .build(LIMITS, now(), |_| Policy::default())
            .unwrap();
        assert_eq!(none.expires_at, None);
    }

    #[test]
    fn a_debounce_needs_a_key_and_a_ceiling_within_the_horizon() {
        let at = Schedule::At(now() + chrono::Duration::hours(1));
        let debounce = |key: Option<&str>, max_delay_ms| {
            let mut request = JobRequest::new("t", at);
            request.key = key.map(str::to_owned);
            request.on_conflict = OnConflict::Debounce { max_delay_ms };
            build(request)
        };
        assert!(debounce(Some("k"), None).is_ok());
        assert!(debounce(Some("k"), Some(10 * 86_400_000)).is_ok());
        assert!(matches!(debounce(None, None), Err(Refusal::OnConflict(_))));
        assert!(matches!(
            debounce(Some("k"), Some(10 * 86_400_000 + 1)),
            Err(Refusal::OnConflict(_))
        ));
        assert_eq!(OnConflict::parse(None, None), Ok(OnConflict::Reject));
        assert_eq!(
            OnConflict::parse(Some("debounce"), Some(5)),
            Ok(OnConflict::Debounce {
                max_delay_ms: Some(5)
            })
        );
        for (name, max) in [
            (Some("merge"), None),
            (Some("reject"), Some(5)),
            (None, Some(5)),
            (Some("debounce"), Some(0)),
            (Some("debounce"), Some(-1)),
        ] {
            assert!(
                matches!(OnConflict::parse(name, max), Err(Refusal::OnConflict(_))),
                "{name:?} {max:?}"
            );
        }
    }

    #[test]
    fn the_past_is_due_at_once_not_refused() {
        let past = Schedule::At(now() - chrono::Duration::days(400));
        assert!(build(JobRequest::new("t", past)).is_ok());
    }

    #[test]
    fn a_window_moves_the_instant_and_the_expiry_follows_its_end() {
        let start = now() + chrono::Duration::hours(1);
        let mut request = JobRequest::new("t", Schedule::At(start));
        request.key = Some("k".into());
        request.window_ms = 600_000;
        request.expiry = Some(Expiry::AfterRun { ttl_ms: 60_000 });
        let job = build(request.clone()).unwrap();
        let Schedule::At(at) = job.schedule else {
            panic!("absolute")
        };
        assert!(at >= start && at <= start + chrono::Duration::minutes(10));
        assert_eq!(job.expires_at, Some(start + chrono::Duration::minutes(11)));
        assert_eq!(build(request).unwrap().schedule, job.schedule, "keyed");
    }
}
