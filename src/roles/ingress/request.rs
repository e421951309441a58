//! What a record of a request topic asks for, read from its key, value and
//! headers, and checked by the same rules as the API's create. Pure logic:
//! no IO, so every rule is unit-tested here.
//!
//! A record asks to create (or move) the job whose key is the record's key
//! (or `tickler-target-key`) on `tickler-target-topic`, due at
//! `tickler-run-at` or `tickler-delay-ms` after the record's own timestamp;
//! its value is the payload, byte for byte; its other headers go onto the
//! delivered record. A tombstone (no value) cancels that job.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeZone, Utc};

use crate::domain::job::{self, Expiry, InvalidJob, NewJob, PayloadKind, Schedule};
use crate::domain::policy::PolicyOverrides;
use crate::domain::request::{JobRequest, Limits, OnConflict, Refusal, TopicDefaults};
use crate::domain::zones::{self, InvalidWallClock};

/// Where the job goes: the topic its record is produced to.
pub const HEADER_TARGET_TOPIC: &str = "tickler-target-topic";
/// When, as an RFC 3339 time (any offset, normalised to UTC).
pub const HEADER_RUN_AT: &str = "tickler-run-at";
/// When, as milliseconds after the request record's timestamp.
pub const HEADER_DELAY_MS: &str = "tickler-delay-ms";
/// The job's key, when it is not the request record's key.
pub const HEADER_TARGET_KEY: &str = "tickler-target-key";
/// Copied onto the reply, for the requester to match it.
pub const HEADER_CORRELATION_ID: &str = "tickler-correlation-id";
pub const HEADER_EXPECTS_RESULT: &str = "tickler-expects-result";
pub const HEADER_MAX_ATTEMPTS: &str = "tickler-max-attempts";
pub const HEADER_BACKOFF_BASE_MS: &str = "tickler-backoff-base-ms";
pub const HEADER_BACKOFF_CAP_MS: &str = "tickler-backoff-cap-ms";
pub const HEADER_ACK_TIMEOUT_MS: &str = "tickler-ack-timeout-ms";
/// Not produced by this RFC 3339 time (after its run-at), the job ends
/// `expired`, never produced.
pub const HEADER_EXPIRES_AT: &str = "tickler-expires-at";
/// A flexible window, milliseconds after the run-at in which the job may
/// go out (as `window_ms` on create).
pub const HEADER_WINDOW_MS: &str = "tickler-window-ms";
/// A wall-clock time instead of a run-at, with [`HEADER_TIME_ZONE`] (as
/// `run_local` and `time_zone` on create).
pub const HEADER_RUN_LOCAL: &str = "tickler-run-local";
pub const HEADER_TIME_ZONE: &str = "tickler-time-zone";
/// `debounce`: a later request for a pending job moves it, never past
/// [`HEADER_MAX_DELAY_MS`] after its generation's first request, and one
/// for a job that went out creates the next generation. `reject` (or
/// none): the ingress's own way (a pending job moved, without a ceiling;
/// one that went out answered `too_late`).
pub const HEADER_ON_CONFLICT: &str = "tickler-on-conflict";
/// With `debounce`: the ceiling, milliseconds after the first request.
pub const HEADER_MAX_DELAY_MS: &str = "tickler-max-delay-ms";

/// Every `tickler-` header a request may carry; any other is a mistake
/// (a misspelt `tickler-run-at` must not be delivered as a plain header).
const HEADERS_KNOWN: [&str; 16] = [
    HEADER_TARGET_TOPIC,
    HEADER_RUN_AT,
    HEADER_DELAY_MS,
    HEADER_TARGET_KEY,
    HEADER_CORRELATION_ID,
    HEADER_EXPECTS_RESULT,
    HEADER_MAX_ATTEMPTS,
    HEADER_BACKOFF_BASE_MS,
    HEADER_BACKOFF_CAP_MS,
    HEADER_ACK_TIMEOUT_MS,
    HEADER_EXPIRES_AT,
    HEADER_WINDOW_MS,
    HEADER_RUN_LOCAL,
    HEADER_TIME_ZONE,
    HEADER_ON_CONFLICT,
    HEADER_MAX_DELAY_MS,
];

/// A request record as this module reads it, so that it can be tested
/// without a broker.
#[derive(Debug, Clone, Default)]
pub struct RequestRecord<'a> {
    pub key: Option<&'a [u8]>,
    /// None: a tombstone.
    pub value: Option<&'a [u8]>,
    /// In the record's order; a header may have no value.
    /// Names as read: bytes, which a request must give as UTF-8.
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    /// The record's timestamp (create or log-append time), milliseconds
    /// since the epoch, when it has one.
    pub timestamp_ms: Option<i64>,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Create the job, or, when its (topic, key) is taken by a pending job
    /// that differs, move it there.
    Put(NewJob),
    /// Create the job, or debounce onto the one holding its (topic, key)
    /// ([`HEADER_ON_CONFLICT`]).
    Debounce {
        job: NewJob,
        max_delay_ms: Option<u64>,
    },
    /// Cancel the job with this (topic, key).
    Cancel { topic: String, key: String },
}

impl Request {
    /// The (topic, key) it is about.
    pub fn target(&self) -> (&str, &str) {
        match self {
            Request::Put(job) | Request::Debounce { job, .. } => {
                (&job.topic, job.key.as_deref().unwrap_or_default())
            }
            Request::Cancel { topic, key } => (topic, key),
        }
    }
}

/// Why a request is refused, with the API's code for the same mistake.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Job(#[from] InvalidJob),
    /// The key is missing or not text.
    #[error("{0}")]
    Key(String),
    #[error("{0}")]
    Headers(String),
    #[error("{0}")]
    Schedule(String),
    #[error("{0}")]
    RunAt(String),
    #[error("{0}")]
    Expiry(String),
    #[error("{0}")]
    WallClock(InvalidWallClock),
    #[error("{0}")]
    Policy(String),
    /// The request topic may not schedule onto the target topic.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}: jobs may not be produced there")]
    Reserved(String),
    /// The payload does not match the target topic's payload schema.
    #[error("the payload does not match the topic's payload_schema: {0}")]
    PayloadSchema(String),
    #[error("topic {0:?} does not exist on the broker: create it first (or see the kafka.topic_check setting)")]
    UnknownTopic(String),
    /// A cancel for a (topic, key) no job holds.
    #[error("no job has key {key:?} on topic {topic:?}")]
    NotFound { topic: String, key: String },
    /// A create or move for a job that was cancelled.
    #[error("{0}")]
    NotPending(String),
    /// The job the request names is stored in a form that cannot be read
    /// (edited by hand, restored): the row is left as it is for repair.
    #[error(
        "the job with this key is stored unreadable ({0}); repair it, then send the request again"
    )]
    Unreadable(String),
    /// The database keeps refusing it for a reason other than being down.
    #[error("the request could not be written; it is skipped")]
    Internal,
}

impl RequestError {
    /// Stable: the API's code for the same mistake (docs/api.md).
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::Job(invalid) => invalid.code(),
            RequestError::Key(_) => "invalid_key",
            RequestError::Headers(_) => "invalid_headers",
            RequestError::Schedule(_) => "invalid_schedule",
            RequestError::RunAt(_) => "invalid_run_at",
            RequestError::Expiry(_) => "invalid_expiry",
            RequestError::WallClock(invalid) => invalid.code(),
            RequestError::Policy(_) => "invalid_policy",
            RequestError::Forbidden(_) => "forbidden_topic",
            RequestError::Reserved(_) => "reserved_topic",
            RequestError::PayloadSchema(_) => "payload_schema",
            RequestError::UnknownTopic(_) => "unknown_topic",
            RequestError::NotFound { .. } => "not_found",
            RequestError::NotPending(_) => "not_pending",
            RequestError::Unreadable(_) => "unreadable_row",
            RequestError::Internal => "internal",
        }
    }
}

/// Reads and checks a request record. `now` only bounds the horizon (and
/// stands in for a record without a timestamp); due-ness is the database's
/// call. `topic_defaults` gives what a job inherits from its target topic.
///
/// Long because it is one pass over the headers, then each rule in turn.
pub fn request_parse(
    record: &RequestRecord<'_>,
    limits: Limits,
    now: DateTime<Utc>,
    topic_defaults: impl FnOnce(&str) -> TopicDefaults,
) -> Result<Request, RequestError> {
    let mut ours: BTreeMap<&str, &str> = BTreeMap::new();
    let mut passed: BTreeMap<String, String> = BTreeMap::new();
    let mut trace_parent = None;
    for (name, value) in &record.headers {
        let name = std::str::from_utf8(name).map_err(|_| {
            RequestError::Headers(format!(
                "a header's name is not UTF-8 text: {:?}",
                String::from_utf8_lossy(name)
            ))
        })?;
        let text = match value {
            Some(bytes) => std::str::from_utf8(bytes)
                .map_err(|_| RequestError::Headers(format!("header {name:?} is not UTF-8 text")))?,
            None => "",
        };
        if job::header_reserved(name) {
            let Some(known) = HEADERS_KNOWN
                .iter()
                .find(|known| known.eq_ignore_ascii_case(name))
            else {
                return Err(RequestError::Headers(format!(
                    "header {name:?} is not one tickler reads (known: {}); names starting with 'tickler-' are reserved",
                    HEADERS_KNOWN.join(", ")
                )));
            };
            if ours.insert(known, text).is_some() {
                return Err(RequestError::Headers(format!(
                    "header {name:?} is given twice"
                )));
            }
        } else if name.eq_ignore_ascii_case(job::HEADER_TRACEPARENT) {
            // Kept as the job's trace context, put back on its record.
            trace_parent = job::traceparent_parse(text);
        } else if passed.insert((*name).to_owned(), text.to_owned()).is_some() {
            return Err(RequestError::Headers(format!(
                "header {name:?} is given twice: a job's headers are a map"
            )));
        }
    }
    let topic = ours.remove(HEADER_TARGET_TOPIC).ok_or_else(|| {
        RequestError::Headers(format!(
            "header {HEADER_TARGET_TOPIC} is required: the topic the job is produced to"
        ))
    })?;
    job::topic_validate(topic)?;
    let topic = topic.to_owned();
    let key = match ours.remove(HEADER_TARGET_KEY) {
        Some(key) => key.to_owned(),
        None => {
            let bytes = record.key.ok_or_else(|| {
                RequestError::Key(format!(
                    "a request needs a key (the job's key, which makes it idempotent): give the record a key or the {HEADER_TARGET_KEY} header"
                ))
            })?;
            std::str::from_utf8(bytes)
                .map_err(|_| RequestError::Key("the record's key is not UTF-8 text".to_owned()))?
                .to_owned()
        }
    };
    job::key_validate_unreserved(&key)?;
    let Some(payload) = record.value else {
        return Ok(Request::Cancel { topic, key });
    };
    let (run_at, delay_ms) = (ours.remove(HEADER_RUN_AT), ours.remove(HEADER_DELAY_MS));
    let wall = match (ours.remove(HEADER_RUN_LOCAL), ours.remove(HEADER_TIME_ZONE)) {
        (None, None) => None,
        (Some(local), Some(zone)) if run_at.is_none() && delay_ms.is_none() => {
            let local = zones::local_parse(local.trim()).map_err(RequestError::WallClock)?;
            Some(
                zones::wall_resolve(&zones::current(), local, zone.trim())
                    .map_err(RequestError::WallClock)?,
            )
        }
        _ => {
            return Err(RequestError::Schedule(format!(
                "give {HEADER_RUN_AT}, {HEADER_DELAY_MS}, or {HEADER_RUN_LOCAL} with {HEADER_TIME_ZONE}"
            )))
        }
    };
    let schedule = match &wall {
        Some((at, _)) => Schedule::At(*at),
        None => schedule_parse(run_at, delay_ms, record.timestamp_ms, limits, now)?,
    };
    let window_ms = match ours.remove(HEADER_WINDOW_MS) {
        None => 0,
        Some(text) => text
            .trim()
            .parse()
            .ok()
            .filter(|ms| *ms <= job::WINDOW_MAX_MS)
            .ok_or_else(|| {
                RequestError::Schedule(format!(
                    "{HEADER_WINDOW_MS} {text:?} is not a whole number of milliseconds from 0 to {}",
                    job::WINDOW_MAX_MS
                ))
            })?,
    };
    let expiry = match ours.remove(HEADER_EXPIRES_AT) {
        Some(text) => {
            let at = DateTime::parse_from_rfc3339(text.trim()).map_err(|err| {
                RequestError::Expiry(format!(
                    "{HEADER_EXPIRES_AT} {text:?} is not an RFC 3339 time ({err}), e.g. 2030-01-31T09:05:00.000Z"
                ))
            })?;
            Some(Expiry::At(at.with_timezone(&Utc)))
        }
        None => None,
    };
    let policy = PolicyOverrides {
        expects_result: flag_parse(&mut ours, HEADER_EXPECTS_RESULT)?,
        max_attempts: number_parse(&mut ours, HEADER_MAX_ATTEMPTS)?,
        backoff_base_ms: number_parse(&mut ours, HEADER_BACKOFF_BASE_MS)?,
        backoff_cap_ms: number_parse(&mut ours, HEADER_BACKOFF_CAP_MS)?,
        ack_timeout_ms: number_parse(&mut ours, HEADER_ACK_TIMEOUT_MS)?,
    };
    let max_delay_ms = match ours.remove(HEADER_MAX_DELAY_MS) {
        None => None,
        Some(text) => Some(text.trim().parse::<i64>().map_err(|_| {
            RequestError::Headers(format!(
                "{HEADER_MAX_DELAY_MS} {text:?} is not a whole number of milliseconds"
            ))
        })?),
    };
    let on_conflict =
        OnConflict::parse(ours.remove(HEADER_ON_CONFLICT).map(str::trim), max_delay_ms).map_err(
            |refusal| match refusal {
                Refusal::OnConflict(why) => RequestError::Headers(format!(
                    "{why} ({HEADER_ON_CONFLICT}, {HEADER_MAX_DELAY_MS})"
                )),
                _ => RequestError::Internal,
            },
        )?;
    let request = JobRequest {
        topic,
        key: Some(key),
        payload: payload.to_vec(),
        payload_kind: PayloadKind::Bytes,
        headers: passed,
        schedule,
        window_ms,
        expiry,
        policy,
        trace_parent,
        wall: wall.map(|(_, wall)| wall),
        on_conflict,
    };
    request
        .build(limits, now, topic_defaults)
        .map(|job| match on_conflict {
            OnConflict::Reject => Request::Put(job),
            OnConflict::Debounce { max_delay_ms } => Request::Debounce { job, max_delay_ms },
        })
        .map_err(|refusal| match refusal {
            Refusal::Job(invalid) => invalid.into(),
            Refusal::Window(why) => RequestError::Schedule(why),
            Refusal::Expiry(why) => RequestError::Expiry(format!("{HEADER_EXPIRES_AT}: {why}")),
            Refusal::Policy(why) => RequestError::Policy(why),
            Refusal::WallClock(invalid) => RequestError::WallClock(invalid),
            Refusal::OnConflict(why) => RequestError::Headers(why),
        })
}

/// `tickler-run-at` or `tickler-delay-ms`, exactly one. A delay counts from
/// the record's timestamp, so a request read twice (after a crash, before
/// its offset was committed) asks for the same instant both times.
fn schedule_parse(
    run_at: Option<&str>,
    delay_ms: Option<&str>,
    timestamp_ms: Option<i64>,
    limits: Limits,
    now: DateTime<Utc>,
) -> Result<Schedule, RequestError> {
    let at = match (run_at, delay_ms) {
        (Some(_), Some(_)) => {
            return Err(RequestError::Schedule(format!(
                "give {HEADER_RUN_AT} (RFC 3339 time) or {HEADER_DELAY_MS}, not both"
            )))
        }
        (None, None) => {
            return Err(RequestError::Schedule(format!(
                "give {HEADER_RUN_AT} (RFC 3339 time) or {HEADER_DELAY_MS}"
            )))
        }
        (None, Some(delay)) => {
            let delay_ms: u64 = delay.trim().parse().map_err(|_| {
                RequestError::Schedule(format!(
                    "{HEADER_DELAY_MS} {delay:?} is not a whole number of milliseconds, zero or more"
                ))
            })?;
            // Too far is too far from whichever instant it counts.
            limits.horizon_check(&Schedule::After { delay_ms }, now)?;
            let Some(from_ms) = timestamp_ms.filter(|ms| *ms >= 0) else {
                // No timestamp to count from: the database's now.
                return Ok(Schedule::After { delay_ms });
            };
            Utc.timestamp_millis_opt(from_ms.saturating_add(delay_ms as i64))
                .single()
                .ok_or_else(|| RequestError::RunAt(format!("{HEADER_DELAY_MS} lands out of range")))?
        }
        (Some(run_at), None) => DateTime::parse_from_rfc3339(run_at.trim())
            .map_err(|err| {
                RequestError::RunAt(format!(
                    "{HEADER_RUN_AT} {run_at:?} is not an RFC 3339 time ({err}), e.g. 2030-01-31T09:00:00.000Z"
                ))
            })?
            .with_timezone(&Utc),
    };
    if at.timestamp_millis() < 0 {
        return Err(InvalidJob::TooEarly.into());
    }
    if !job::time_in_range(at) {
        return Err(RequestError::RunAt(format!(
            "the job's time {} is after 9999-12-31T23:59:59.999Z",
            job::time_format(at)
        )));
    }
    Ok(Schedule::At(job::truncate_to_ms(at)))
}

fn number_parse(
    headers: &mut BTreeMap<&str, &str>,
    name: &'static str,
) -> Result<Option<u32>, RequestError> {
    headers
        .remove(name)
        .map(|text| {
            text.trim()
                .parse::<u32>()
                .map_err(|_| RequestError::Policy(format!("{name} {text:?} is not a whole number")))
        })
        .transpose()
}

fn flag_parse(
    headers: &mut BTreeMap<&str, &str>,
    name: &'static str,
) -> Result<Option<bool>, RequestError> {
    headers
        .remove(name)
        .map(|text| match text.trim() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(RequestError::Policy(format!(
                "{name} {text:?} is not true or false"
            ))),
        })
        .transpose()
}

/// Whether a request topic whose target patterns are `targets` may
/// schedule onto `topic`.
pub fn target_allowed(targets: &[String], topic: &str) -> bool {
    targets
        .iter()
        .any(|pattern| crate::domain::topic_pattern::matches(pattern, topic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::Policy;

    const LIMITS: Limits = Limits {
        payload_max_bytes: 16,
        max_schedule_ahead_days: 10,
    };

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn record<'a>(value: Option<&'a [u8]>, headers: &[(&'a str, &'a str)]) -> RequestRecord<'a> {
        RequestRecord {
            key: Some(b"order-1"),
            value,
            headers: headers
                .iter()
                .map(|(n, v)| (n.as_bytes(), Some(v.as_bytes())))
                .collect(),
            timestamp_ms: Some(now().timestamp_millis()),
        }
    }

    fn parse(record: &RequestRecord<'_>) -> Result<Request, RequestError> {
        request_parse(record, LIMITS, now(), |_| {
            Policy {
                max_attempts: 3,
                ..Policy::default()
            }
            .into()
        })
    }

    fn put(record: &RequestRecord<'_>) -> NewJob {
        match parse(record).expect("a valid request") {
            Request::Put(job) => job,
            other => panic!("not a put: {other:?}"),
        }
    }

    fn code(value: Option<&[u8]>, headers: &[(&str, &str)]) -> &'static str {
        parse(&record(value, headers))
            .expect_err("should be refused")
            .code()
    }

    #[test]
    fn debounce_headers_ask_for_a_debounce_and_bad_ones_are_refused() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut headers = vec![
                ("tickler-target-topic", "orders"),
                ("tickler-delay-ms", "1000"),
            ];
            headers.extend_from_slice(extra);
            headers
        };
        let debounce = with(&[
            ("tickler-on-conflict", "debounce"),
            ("tickler-max-delay-ms", "5000"),
        ]);
        match parse(&record(Some(b"x"), &debounce)).expect("a valid request") {
            Request::Debounce { job, max_delay_ms } => {
                assert_eq!(max_delay_ms, Some(5000));
                assert!(job.headers.is_empty(), "not delivered: {:?}", job.headers);
            }
            other => panic!("not a debounce: {other:?}"),
        }
        let reject = with(&[("tickler-on-conflict", "reject")]);
        assert!(matches!(
            parse(&record(Some(b"x"), &reject)),
            Ok(Request::Put(_))
        ));
        for bad in [
            with(&[("tickler-on-conflict", "merge")]),
            with(&[("tickler-max-delay-ms", "5000")]),
            with(&[
                ("tickler-on-conflict", "debounce"),
                ("tickler-max-delay-ms", "soon"),
            ]),
            with(&[
                ("tickler-on-conflict", "debounce"),
                ("tickler-max-delay-ms", "0"),
            ]),
        ] {
            assert_eq!(code(Some(b"x"), &bad), "invalid_headers", "{bad:?}");
        }
    }

    #[test]
    fn a_window_header_spreads_the_job_by_its_key_and_bad_ones_are_refused() {
        let headers = [
            ("tickler-target-topic", "orders"),
            ("tickler-run-at", "2030-01-02T00:00:00Z"),
            ("tickler-window-ms", "60000"),
        ];
        let job = put(&record(Some(b"x"), &headers));
        let start = DateTime::parse_from_rfc3339("2030-01-02T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            job.window.map(|w| (w.ms, w.start)),
            Some((60_000, Schedule::At(start)))
        );
        let Schedule::At(at) = job.schedule else {
            panic!("absolute")
        };
        assert!(at >= start && at <= start + chrono::Duration::minutes(1));
        assert_eq!(
            put(&record(Some(b"x"), &headers)).schedule,
            job.schedule,
            "read again, the same instant"
        );
        for bad in ["-1", "86400001", "soon"] {
            assert_eq!(
                code(
                    Some(b"x"),
                    &[
                        ("tickler-target-topic", "orders"),
                        ("tickler-run-at", "2030-01-02T00:00:00Z"),
                        ("tickler-window-ms", bad),
                    ],
                ),
                "invalid_schedule",
                "{bad}"
            );
        }
    }

    #[test]
    fn an_expiry_header_after_the_run_at_is_the_jobs_expiry_and_one_before_is_refused() {
        let job = put(&record(
            Some(b"x"),
            &[
                ("tickler-target-topic", "orders"),
                ("tickler-run-at", "2030-01-02T00:00:00Z"),
                ("Tickler-Expires-At", "2030-01-02T00:10:00.0009Z"),
            ],
        ));
        assert_eq!(
            job.expires_at.map(job::time_format).as_deref(),
            Some("2030-01-02T00:10:00.000Z")
        );
        for expires in ["2030-01-02T00:00:00Z", "2030-01-01T00:00:00Z", "soon"] {
            assert_eq!(
                code(
                    Some(b"x"),
                    &[
                        ("tickler-target-topic", "orders"),
                        ("tickler-run-at", "2030-01-02T00:00:00Z"),
                        ("tickler-expires-at", expires),
                    ],
                ),
                "invalid_expiry",
                "{expires}"
            );
        }
    }

    #[test]
    fn the_value_is_the_payload_byte_for_byte_and_other_headers_pass_through() {
        let job = put(&record(
            Some(&[0, 159, 146, 150]),
            &[
                ("tickler-target-topic", "orders"),
                ("tickler-run-at", "2030-01-02T01:00:00.1239+01:00"),
                ("content-type", "application/octet-stream"),
                ("tenant", "acme"),
            ],
        ));
        assert_eq!(job.topic, "orders");
        assert_eq!(job.key.as_deref(), Some("order-1"));
        assert_eq!(job.payload, vec![0, 159, 146, 150]);
        assert_eq!(job.payload_kind, PayloadKind::Bytes);
        assert_eq!(
            job.headers.keys().collect::<Vec<_>>(),
            vec!["content-type", "tenant"]
        );
        let Schedule::At(at) = job.schedule else {
            panic!("absolute")
        };
        assert_eq!(job::time_format(at), "2030-01-02T00:00:00.123Z");
        assert_eq!(job.policy.max_attempts, 3, "from the topic");
    }

    #[test]
    fn a_delay_counts_from_the_records_timestamp_so_a_reread_asks_for_the_same_instant() {
        let first = put(&record(
            Some(b"x"),
            &[("tickler-target-topic", "t"), ("tickler-delay-ms", "1500")],
        ));
        let again = put(&record(
            Some(b"x"),
            &[("tickler-target-topic", "t"), ("tickler-delay-ms", "1500")],
        ));
        assert_eq!(
            first.schedule,
            Schedule::At(now() + chrono::Duration::milliseconds(1500))
        );
        assert_eq!(first.schedule, again.schedule);
        let mut untimed = record(
            Some(b"x"),
            &[("tickler-target-topic", "t"), ("tickler-delay-ms", "5")],
        );
        untimed.timestamp_ms = None;
        assert_eq!(put(&untimed).schedule, Schedule::After { delay_ms: 5 });
    }

    #[test]
    fn a_tombstone_cancels_the_key_on_its_target_topic() {
        assert_eq!(
            parse(&record(None, &[("tickler-target-topic", "orders")])),
            Ok(Request::Cancel {
                topic: "orders".to_owned(),
                key: "order-1".to_owned()
            })
        );
    }

    #[test]
    fn the_target_key_header_names_the_job_instead_of_the_records_key() {
        let mut with = record(
            Some(b"x"),
            &[
                ("tickler-target-topic", "t"),
                ("tickler-target-key", "invoice-9"),
                ("tickler-delay-ms", "0"),
            ],
        );
        assert_eq!(put(&with).key.as_deref(), Some("invoice-9"));
        with.key = None;
        assert_eq!(put(&with).key.as_deref(), Some("invoice-9"));
    }

    #[test]
    fn policy_headers_override_the_topics_policy() {
        let job = put(&record(
            Some(b"x"),
            &[
                ("tickler-target-topic", "t"),
                ("tickler-delay-ms", "0"),
                ("tickler-expects-result", "true"),
                ("tickler-max-attempts", "7"),
                ("tickler-ack-timeout-ms", "2000"),
            ],
        ));
        assert!(job.policy.expects_result);
        assert_eq!(job.policy.max_attempts, 7);
        assert_eq!(job.policy.ack_timeout_ms, 2000);
    }

    #[test]
    fn a_traceparent_header_becomes_the_jobs_trace_context() {
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let job = put(&record(
            Some(b"x"),
            &[
                ("tickler-target-topic", "t"),
                ("tickler-delay-ms", "0"),
                ("traceparent", parent),
            ],
        ));
        assert_eq!(job.trace_parent.as_deref(), Some(parent));
        assert!(job.headers.is_empty());
    }

    #[test]
    fn each_mistake_has_the_apis_code() {
        let t = ("tickler-target-topic", "t");
        let soon = ("tickler-delay-ms", "1");
        assert_eq!(code(Some(b"x"), &[soon]), "invalid_headers");
        assert_eq!(
            code(Some(b"x"), &[("tickler-target-topic", "a b"), soon]),
            "invalid_topic"
        );
        assert_eq!(code(Some(b"x"), &[t]), "invalid_schedule");
        assert_eq!(
            code(
                Some(b"x"),
                &[t, soon, ("tickler-run-at", "2030-01-01T00:00:00Z")]
            ),
            "invalid_schedule"
        );
        assert_eq!(
            code(Some(b"x"), &[t, ("tickler-delay-ms", "-1")]),
            "invalid_schedule"
        );
        assert_eq!(
            code(Some(b"x"), &[t, ("tickler-run-at", "tomorrow")]),
            "invalid_run_at"
        );
        assert_eq!(
            code(Some(b"x"), &[t, ("tickler-run-at", "1969-12-31T23:59:59Z")]),
            "invalid_run_at"
        );
        assert_eq!(
            code(Some(b"x"), &[t, ("tickler-run-at", "2030-01-11T00:00:01Z")]),
            "schedule_too_far"
        );
        assert_eq!(
            code(Some(b"x"), &[t, ("tickler-delay-ms", "864000001")]),
            "schedule_too_far"
        );
        assert_eq!(code(Some(&[b'x'; 17]), &[t, soon]), "payload_too_large");
        assert_eq!(
            code(
                Some(b"x"),
                &[t, soon, ("tickler-runat", "2030-01-01T00:00:00Z")]
            ),
            "invalid_headers",
            "a misspelt tickler- header is refused, not delivered"
        );
        assert_eq!(
            code(Some(b"x"), &[t, soon, ("tickler-delay-ms", "2")]),
            "invalid_headers"
        );
        assert_eq!(
            code(Some(b"x"), &[t, soon, ("a", "1"), ("a", "2")]),
            "invalid_headers"
        );
        assert_eq!(
            code(Some(b"x"), &[t, soon, ("tickler-max-attempts", "0")]),
            "invalid_policy"
        );
        assert_eq!(
            code(Some(b"x"), &[t, soon, ("tickler-expects-result", "yes")]),
            "invalid_policy"
        );
        assert_eq!(
            code(
                Some(b"x"),
                &[
                    t,
                    soon,
                    ("tickler-target-key", "m@2027-03-01T08:00:00.000Z")
                ]
            ),
            "invalid_key"
        );
        let mut keyless = record(Some(b"x"), &[t, soon]);
        keyless.key = None;
        assert_eq!(parse(&keyless).unwrap_err().code(), "invalid_key");
        let mut binary_key = record(Some(b"x"), &[t, soon]);
        binary_key.key = Some(&[0xff, 0xfe]);
        assert_eq!(parse(&binary_key).unwrap_err().code(), "invalid_key");
        let binary_header = RequestRecord {
            headers: vec![
                (b"tickler-target-topic".as_slice(), Some(b"t".as_slice())),
                (b"tickler-delay-ms", Some(b"1".as_slice())),
                (b"h", Some([0xff].as_slice())),
            ],
            ..record(Some(b"x"), &[])
        };
        assert_eq!(parse(&binary_header).unwrap_err().code(), "invalid_headers");
        let binary_name = RequestRecord {
            headers: vec![
                (b"tickler-target-topic".as_slice(), Some(b"t".as_slice())),
                (b"tickler-delay-ms", Some(b"1".as_slice())),
                (b"h\xff", Some(b"v".as_slice())),
            ],
            ..record(Some(b"x"), &[])
        };
        let refused = parse(&binary_name).unwrap_err();
        assert_eq!(refused.code(), "invalid_headers");
        assert!(
            refused.to_string().contains("name is not UTF-8"),
            "{refused}"
        );
    }

    #[test]
    fn targets_are_matched_as_token_patterns() {
        let targets = vec!["orders.*".to_owned(), "billing".to_owned()];
        assert!(target_allowed(&targets, "orders.eu"));
        assert!(target_allowed(&targets, "billing"));
        assert!(!target_allowed(&targets, "billing.eu"));
        assert!(!target_allowed(&targets, "payments"));
    }
}
