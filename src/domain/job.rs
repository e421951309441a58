//! The job: its states, the rules a new job must satisfy, and which shard it
//! belongs to. Pure logic only — no IO — so every rule here is unit-tested.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::policy::Policy;
use crate::domain::zones::WallClock;

/// Job identifier: the `jobs.id` primary key.
pub type JobId = u64;

/// Prefix reserved for the headers tickler itself puts on every record.
pub const RESERVED_HEADER_PREFIX: &str = "tickler-";
pub const HEADER_JOB_ID: &str = "tickler-job-id";
pub const HEADER_ATTEMPT: &str = "tickler-attempt";
pub const HEADER_SCHEDULED_AT: &str = "tickler-scheduled-at";
pub const HEADER_DISPATCHED_AT: &str = "tickler-dispatched-at";
/// On an occurrence of a schedule: the schedule's id.
pub const HEADER_SCHEDULE_ID: &str = "tickler-schedule-id";
/// W3C trace context: kept from the create request, put on the record.
pub const HEADER_TRACEPARENT: &str = "traceparent";

/// A W3C `traceparent` (version 00 layout: `vv-<32 hex>-<16 hex>-ff`,
/// lowercase, version not `ff`, ids not all zero), or None. An invalid one
/// is dropped, as the W3C recommends, never a reason to refuse a job.
pub fn traceparent_parse(value: &str) -> Option<String> {
    let parts: Vec<&str> = value.trim().split('-').collect();
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let [version, trace, parent, flags] = parts.as_slice() else {
        return None;
    };
    let valid = hex(version, 2)
        && *version != "ff"
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then(|| value.trim().to_owned())
}

/// The `jobs.status` column. The words are part of the product: operators
/// read and write them in SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Dispatching,
    Dispatched,
    Succeeded,
    Dead,
    Cancelled,
    /// Not produced by its `expires_at`: never will be.
    Expired,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Pending,
        Status::Dispatching,
        Status::Dispatched,
        Status::Succeeded,
        Status::Dead,
        Status::Cancelled,
        Status::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Dispatching => "dispatching",
            Status::Dispatched => "dispatched",
            Status::Succeeded => "succeeded",
            Status::Dead => "dead",
            Status::Cancelled => "cancelled",
            Status::Expired => "expired",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown job status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// How the payload was given, so it can be handed back the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadKind {
    /// Any JSON value, stored as its UTF-8 text.
    Json,
    /// Raw bytes, given as base64.
    Bytes,
}

impl PayloadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadKind::Json => "json",
            PayloadKind::Bytes => "bytes",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown payload kind {0:?}")]
pub struct UnknownPayloadKind(pub String);

impl FromStr for PayloadKind {
    type Err = UnknownPayloadKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(PayloadKind::Json),
            "bytes" => Ok(PayloadKind::Bytes),
            other => Err(UnknownPayloadKind(other.to_owned())),
        }
    }
}

/// When a new job should run: an absolute time, or a delay counted from the
/// database's clock at insert time (never from the caller's or tickler's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    At(DateTime<Utc>),
    After { delay_ms: u64 },
}

/// Longest flexible window: a day.
pub const WINDOW_MAX_MS: u32 = 86_400_000;

/// A job's flexible window: it may be produced at any instant of
/// `[start, start + ms]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub ms: u32,
    /// The time asked for: the window's start.
    pub start: Schedule,
}

/// Where in a window of `window_ms` a job goes out, decided once: a keyed
/// job's offset comes from its topic and key (FNV-1a, the same in every
/// build), so a create sent again lands on the same instant; an unkeyed
/// one's is drawn. Spread evenly over the window, what falls due together
/// goes out at `count / window` a second. The last tenth of the window (at
/// most a second) is left as room for the dispatch itself, so that a job
/// decided for the window's very end does not go out a millisecond past it.
pub fn window_offset_ms(topic: &str, key: Option<&str>, window_ms: u32) -> u64 {
    let room = (window_ms / 10).min(1_000);
    let span = u64::from(window_ms - room) + 1;
    match key {
        Some(key) => {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in topic.bytes().chain([0xff]).chain(key.bytes()) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
            hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (hash ^ (hash >> 31)) % span
        }
        None => rand::random::<u64>() % span,
    }
}

impl Schedule {
    /// This schedule `ms` later.
    pub fn later_by(self, ms: u64) -> Schedule {
        match self {
            Schedule::At(at) => Schedule::At(
                at + chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX)),
            ),
            Schedule::After { delay_ms } => Schedule::After {
                delay_ms: delay_ms.saturating_add(ms),
            },
        }
    }
}

/// When a job expires: at an instant, or this long after its run_at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    At(DateTime<Utc>),
    AfterRun { ttl_ms: u64 },
}

/// Checks a job's expiry against its `schedule` (`now` stands for the
/// database's clock a delay counts from) and returns what
/// [`NewJob::expires_at`] and [`NewJob::expires_after_ms`] hold. An expiry
/// must come after the job is due: one at or before would end it unsent
/// the moment it falls due.
pub fn expiry_resolve(
    expiry: Expiry,
    schedule: &Schedule,
    now: DateTime<Utc>,
) -> Result<(Option<DateTime<Utc>>, Option<u64>), String> {
    let run_at = match *schedule {
        Schedule::At(at) => at,
        Schedule::After { delay_ms } => {
            now + chrono::Duration::milliseconds(i64::try_from(delay_ms).unwrap_or(i64::MAX))
        }
    };
    match expiry {
        Expiry::AfterRun { ttl_ms: 0 } => Err("ttl_ms must be 1 or more".to_owned()),
        Expiry::AfterRun { ttl_ms } => {
            let at = i64::try_from(ttl_ms)
                .ok()
                .and_then(chrono::Duration::try_milliseconds)
                .and_then(|ttl| run_at.checked_add_signed(ttl))
                .filter(|at| time_in_range(*at))
                .ok_or_else(|| {
                    format!("ttl_ms {ttl_ms} puts the expiry after 9999-12-31T23:59:59.999Z")
                })?;
            Ok(match schedule {
                Schedule::At(_) => (Some(at), None),
                Schedule::After { .. } => (None, Some(ttl_ms)),
            })
        }
        Expiry::At(at) => {
            let at = truncate_to_ms(at);
            if !time_in_range(at) {
                return Err(
                    "expires_at must lie between 1970 and 9999-12-31T23:59:59.999Z".to_owned(),
                );
            }
            if at <= run_at {
                return Err(format!(
                    "expires_at {} is not after the job's run_at {}: it would expire unsent as it falls due",
                    time_format(at),
                    time_format(run_at)
                ));
            }
            Ok((Some(at), None))
        }
    }
}

/// A job that passed validation and may be written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub topic: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub payload_kind: PayloadKind,
    pub headers: BTreeMap<String, String>,
    pub schedule: Schedule,
    pub policy: Policy,
    /// The W3C `traceparent` of the request that created it.
    pub trace_parent: Option<String>,
    /// The schedule whose occurrence it is.
    pub schedule_id: Option<u64>,
    /// Still pending at this time, it expires instead of being produced.
    pub expires_at: Option<DateTime<Utc>>,
    /// Or it expires this long after its run_at, where the database sets
    /// the run_at (a `delay_ms`): resolved on the database's clock.
    pub expires_after_ms: Option<u64>,
    /// Its flexible window, when it has one: `schedule` is then the
    /// instant decided in it.
    pub window: Option<Window>,
    /// The wall-clock time `schedule` was computed from, when it was
    /// given one (`run_local` + `time_zone`).
    pub wall: Option<WallClock>,
}

impl NewJob {
    /// Whether `existing`, the job already holding this (topic, key), is
    /// what this request asks for: a retried create, answered with the
    /// job as it is rather than refused or changed.
    pub fn asks_for_same(&self, existing: &Job) -> bool {
        let same_time = match self.schedule {
            Schedule::At(at) => at == existing.schedule_time,
            // A retried delay cannot land on the same instant; the key decides.
            Schedule::After { .. } => true,
        };
        same_time
            && existing.payload == self.payload
            && existing.payload_kind == self.payload_kind
            && existing.headers == self.headers
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: JobId,
    pub topic: String,
    pub key: Option<String>,
    pub payload: Vec<u8>,
    pub payload_kind: PayloadKind,
    pub headers: BTreeMap<String, String>,
    pub schedule_time: DateTime<Utc>,
    pub status: Status,
    pub attempt: u32,
    /// `policy.max_attempts` is the `max_attempts` column.
    pub policy: Policy,
    pub version: u32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub dispatched_at: Option<DateTime<Utc>>,
    pub kafka_partition: Option<i32>,
    pub kafka_offset: Option<i64>,
    /// When its record was read back at that position and found there
    /// (`dispatcher.verify`); None: not (yet) verified.
    pub verified_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// When a dispatched job expecting a result stops waiting for it.
    pub ack_deadline: Option<DateTime<Utc>>,
    /// The W3C `traceparent` of the request that created it, put on its
    /// Kafka record.
    pub trace_parent: Option<String>,
    /// The schedule whose occurrence it is.
    pub schedule_id: Option<u64>,
    /// Still pending at this time, it is cancelled instead of produced
    /// (a `skip` schedule's occurrence past its misfire grace).
    pub expires_at: Option<DateTime<Utc>>,
    /// Its flexible window's length and start (the time asked for); its
    /// `schedule_time` is the instant decided in it.
    pub window_ms: Option<u32>,
    pub window_start: Option<DateTime<Utc>>,
    /// The wall-clock time its `schedule_time` was computed from, when it
    /// was given one; a newer tzdata computes it again.
    pub wall: Option<WallClock>,
    /// Debounced with a ceiling: the latest a debounce may move it to (its
    /// generation's first request time + `max_delay_ms`).
    pub debounce_until: Option<DateTime<Utc>>,
    /// Its (topic, key)'s generation: 0 for the first job of a key, one
    /// more for each job a debounce started after the one before went out.
    pub generation: u32,
    /// The job of the generation before, which held the key until this one.
    pub previous_id: Option<JobId>,
    /// When it was held back, pending, because its payload no longer
    /// matched its topic's schema when it came due (None: not held), and
    /// where it failed. A held job is not claimed until released.
    pub held_at: Option<DateTime<Utc>>,
    pub held_reason: Option<String>,
    /// The attempt a forced release lets go without the schema check.
    pub schema_waived_attempt: Option<u32>,
}

impl Job {
    /// The Kafka record key: the job's key, or its id when it has none, so
    /// that records of one job always land on one partition.
    pub fn record_key(&self) -> String {
        self.key.clone().unwrap_or_else(|| self.id.to_string())
    }

    /// The end of its flexible window, if it has one: produced after it,
    /// the job missed its window.
    pub fn window_end(&self) -> Option<DateTime<Utc>> {
        self.window_ms
            .zip(self.window_start)
            .map(|(ms, start)| start + chrono::Duration::milliseconds(i64::from(ms)))
    }
}

/// Why a job was refused. Each variant maps to a stable API error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidJob {
    #[error("topic must be 1 to 249 characters of [a-zA-Z0-9._-], and not '.' or '..'")]
    Topic,
    #[error("key must be 1 to 255 characters")]
    Key,
    #[error("keys ending in '@' and an RFC 3339 instant in UTC with milliseconds (like 'member-42@2027-03-01T08:00:00.000Z') are reserved for the occurrences of recurring schedules")]
    KeyReserved,
    #[error(
        "header {0:?} is invalid: names are 1 to 255 characters and may not start with 'tickler-'"
    )]
    Header(String),
    #[error("run_at is not after 1970-01-01T00:00:00Z")]
    TooEarly,
    #[error("the job would run more than {max_days} days from now")]
    TooFar { max_days: u64 },
    #[error("payload is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge { size: usize, limit: usize },
    #[error("headers take {size} bytes as JSON, over the limit of {HEADERS_MAX_BYTES} bytes")]
    HeadersTooLarge { size: usize },
    #[error("payload nests deeper than {JSON_DEPTH_MAX} levels of arrays and objects")]
    PayloadTooDeep,
    #[error("payload null is ambiguous: leave payload out for an empty payload")]
    PayloadNull,
}

impl InvalidJob {
    /// The stable code an answer carries for this mistake, on every channel
    /// (the API's error bodies, the Kafka ingress's replies).
    pub fn code(&self) -> &'static str {
        match self {
            InvalidJob::Topic => "invalid_topic",
            InvalidJob::Key | InvalidJob::KeyReserved => "invalid_key",
            InvalidJob::Header(_) | InvalidJob::HeadersTooLarge { .. } => "invalid_headers",
            InvalidJob::PayloadTooDeep | InvalidJob::PayloadNull => "invalid_payload",
            InvalidJob::TooEarly => "invalid_run_at",
            InvalidJob::TooFar { .. } => "schedule_too_far",
            InvalidJob::PayloadTooLarge { .. } => "payload_too_large",
        }
    }
}

/// Most bytes a job's headers take, encoded as the JSON object stored in
/// the `headers` column (a `TEXT`).
pub const HEADERS_MAX_BYTES: usize = 65_535;

/// Deepest nesting of arrays and objects a JSON payload may have, on every
/// endpoint and for every item of a batch. Consumers parse what tickler
/// produces; many parsers stop at 128 levels or overflow their stack.
pub const JSON_DEPTH_MAX: usize = 64;

/// How deeply the arrays and objects of a well-formed JSON text nest
/// (0 for a scalar). Counts brackets outside strings, without recursion.
pub fn json_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Kafka's own rule for topic names.
pub fn topic_validate(topic: &str) -> Result<(), InvalidJob> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Err(InvalidJob::Topic);
    }
    if !topic.chars().all(legal) {
        return Err(InvalidJob::Topic);
    }
    Ok(())
}

/// Refuses a key of the form schedule occurrences take,
/// `<schedule key>@<YYYY-MM-DDTHH:MM:SS.mmmZ>`, for a job created directly:
/// it would take an occurrence's (topic, key) and the occurrence would then
/// never be created.
pub fn key_validate_unreserved(key: &str) -> Result<(), InvalidJob> {
    if key_is_occurrence_form(key) {
        return Err(InvalidJob::KeyReserved);
    }
    key_validate(key)
}

/// Whether `key` ends in `@` and an instant as
/// [`crate::domain::schedule::occurrence_key`] writes it.
pub fn key_is_occurrence_form(key: &str) -> bool {
    let Some((_, instant)) = key.rsplit_once('@') else {
        return false;
    };
    // 2027-03-01T08:00:00.000Z: 24 characters, digits where digits go.
    let shape = b"dddd-dd-ddTdd:dd:dd.dddZ";
    instant.len() == shape.len()
        && instant
            .bytes()
            .zip(shape.iter())
            .all(|(c, want)| match want {
                b'd' => c.is_ascii_digit(),
                want => c == *want,
            })
}

pub fn key_validate(key: &str) -> Result<(), InvalidJob> {
    // The column is VARCHAR(255) in characters.
    let len = key.chars().count();
    if len == 0 || len > 255 {
        return Err(InvalidJob::Key);
    }
    Ok(())
}

pub fn headers_validate(headers: &BTreeMap<String, String>) -> Result<(), InvalidJob> {
    for name in headers.keys() {
        if name.is_empty() || name.len() > 255 || header_reserved(name) {
            return Err(InvalidJob::Header(name.clone()));
        }
    }
    // At most `{}` and, a header, `"name":"value",` with every byte escaped
    // as `\uXXXX`: within the limit, nothing to count.
    let most = 2 + headers
        .iter()
        .map(|(name, value)| 6 * (name.len() + value.len()) + 6)
        .sum::<usize>();
    if most <= HEADERS_MAX_BYTES {
        return Ok(());
    }
    // The size as stored: serde's encoding escapes what JSON must escape.
    let size = serde_json::to_string(headers).map_or(usize::MAX, |text| text.len());
    if size > HEADERS_MAX_BYTES {
        return Err(InvalidJob::HeadersTooLarge { size });
    }
    Ok(())
}

/// Whether a header's name starts with `tickler-` in any case: such names
/// are tickler's own.
pub fn header_reserved(name: &str) -> bool {
    let prefix = RESERVED_HEADER_PREFIX.as_bytes();
    name.as_bytes()
        .get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

/// Earliest and latest instants tickler stores or filters on: the Unix
/// epoch (Redis scores and Kafka timestamps are milliseconds since it) and
/// the end of `DATETIME`'s range.
pub fn time_in_range(at: DateTime<Utc>) -> bool {
    const LATEST_MS: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z
    (0..=LATEST_MS).contains(&at.timestamp_millis())
}

/// `90s`, `10m`, `1h30m`, `2d`, `500ms`, with a leading `-` for earlier;
/// in milliseconds.
pub fn duration_parse(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a duration such as 500ms, 90s, 10m, 1h30m or 2d");
    let (sign, rest) = match text.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    let mut chars = rest.chars().peekable();
    while chars.peek().is_some() {
        let mut digits = String::new();
        while let Some(c) = chars.peek().filter(|c| c.is_ascii_digit()) {
            digits.push(*c);
            chars.next();
        }
        let mut unit = String::new();
        while let Some(c) = chars.peek().filter(|c| c.is_ascii_alphabetic()) {
            unit.push(*c);
            chars.next();
        }
        let n: i64 = digits.parse().map_err(|_| bad())?;
        let scale = match unit.as_str() {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(scale)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(bad)?;
    }
    Ok(sign * total)
}

/// Truncates a time to the millisecond: the precision of `DATETIME(3)` and
/// of the Redis scores. Truncating (not rounding) keeps MySQL and MariaDB,
/// which differ in how they round on insert, in agreement.
pub fn truncate_to_ms(at: DateTime<Utc>) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(at.timestamp_millis())
        .single()
        .unwrap_or(at)
}

/// The logical shard of a job: a stable mix of the id, modulo the shard
/// count. The mix (splitmix64's finaliser) must never change: a different
/// function would strand jobs already indexed under the old shard.
pub fn shard_of(id: JobId, shards: u32) -> u32 {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % u64::from(shards.max(1))) as u32
}

/// A time as the API, the CLI and the gauges write it: RFC 3339 in UTC with
/// milliseconds (`2030-01-31T09:00:00.000Z`).
pub fn time_format(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_is_kept() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(traceparent_parse(good).as_deref(), Some(good));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(traceparent_parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn status_words_round_trip() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>().unwrap(), status);
        }
        assert!("Pending".parse::<Status>().is_err());
        assert!("canceled".parse::<Status>().is_err());
    }

    #[test]
    fn topic_rules_follow_kafka() {
        assert!(topic_validate("orders.v1_retry-2").is_ok());
        assert!(topic_validate(&"a".repeat(249)).is_ok());
        for bad in [
            "",
            ".",
            "..",
            "has space",
            "ünïcode",
            "a/b",
            &"a".repeat(250),
        ] {
            assert_eq!(topic_validate(bad), Err(InvalidJob::Topic), "{bad:?}");
        }
    }

    #[test]
    fn keys_of_the_occurrence_form_are_reserved() {
        let occurrence = crate::domain::schedule::occurrence_key(
            "member-42",
            "2027-03-01T08:00:00Z".parse().unwrap(),
        );
        assert_eq!(occurrence, "member-42@2027-03-01T08:00:00.000Z");
        assert_eq!(
            key_validate_unreserved(&occurrence),
            Err(InvalidJob::KeyReserved)
        );
        for free in [
            "member-42",
            "a@b.com",
            "x@2027-03-01",
            "x@2027-03-01T08:00:00Z",
            "x@2027-03-01T08:00:00.000+01:00",
        ] {
            assert!(key_validate_unreserved(free).is_ok(), "{free}");
        }
    }

    #[test]
    fn key_length_is_counted_in_characters() {
        assert!(key_validate(&"é".repeat(255)).is_ok());
        assert_eq!(key_validate(&"é".repeat(256)), Err(InvalidJob::Key));
        assert_eq!(key_validate(""), Err(InvalidJob::Key));
    }

    #[test]
    fn reserved_header_names_are_refused() {
        let mut headers = BTreeMap::new();
        headers.insert("trace-id".to_owned(), "abc".to_owned());
        assert!(headers_validate(&headers).is_ok());
        headers.insert("Tickler-Job-Id".to_owned(), "1".to_owned());
        assert!(matches!(
            headers_validate(&headers),
            Err(InvalidJob::Header(name)) if name == "Tickler-Job-Id"
        ));
    }

    #[test]
    fn headers_are_bounded_by_their_stored_size() {
        let mut headers = BTreeMap::new();
        headers.insert("big".to_owned(), "x".repeat(HEADERS_MAX_BYTES - 20));
        assert!(headers_validate(&headers).is_ok());
        headers.insert("more".to_owned(), "y".repeat(100));
        assert!(matches!(
            headers_validate(&headers),
            Err(InvalidJob::HeadersTooLarge { size }) if size > HEADERS_MAX_BYTES
        ));
        // Escapes count: a quote is stored as two bytes.
        let mut quoted = BTreeMap::new();
        quoted.insert("q".to_owned(), "\"".repeat(HEADERS_MAX_BYTES / 2));
        assert!(headers_validate(&quoted).is_err());
        // A control character as six (`\u0001`): 11,000 bytes stored as
        // 66,000, over the limit, though far under it unescaped.
        let mut controls = BTreeMap::new();
        controls.insert("c".to_owned(), "\u{1}".repeat(11_000));
        assert!(matches!(
            headers_validate(&controls),
            Err(InvalidJob::HeadersTooLarge { size }) if size > HEADERS_MAX_BYTES
        ));
        controls.insert("c".to_owned(), "\u{1}".repeat(10_000));
        assert!(headers_validate(&controls).is_ok());
    }

    #[test]
    fn a_header_is_reserved_when_it_starts_with_tickler_in_any_case() {
        for name in ["tickler-run-at", "Tickler-Job-Id", "TICKLER-", "tIcKlEr-x"] {
            assert!(header_reserved(name), "{name}");
        }
        for name in [
            "tickler",
            "tick",
            "",
            "x-tickler-a",
            "ticklers-a",
            "tickler_a",
            "ü-tickler-",
        ] {
            assert!(!header_reserved(name), "{name}");
        }
    }

    #[test]
    fn json_depth_counts_brackets_outside_strings() {
        assert_eq!(json_depth("1"), 0);
        assert_eq!(json_depth(r#""[[[""#), 0);
        assert_eq!(json_depth(r#"{"a":[1,{"b":"]}\\\"["}]}"#), 3);
        assert_eq!(
            json_depth(&format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))),
            100_000
        );
    }

    #[test]
    fn times_are_bounded_by_the_epoch_and_datetime() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert!(time_in_range(at("1970-01-01T00:00:00Z")));
        assert!(time_in_range(at("9999-12-31T23:59:59.999Z")));
        assert!(!time_in_range(at("1969-12-31T23:59:59.999Z")));
        assert!(!time_in_range(at("0000-01-01T00:00:00+00:01")));
        assert!(!time_in_range(at("9999-12-31T23:59:59-01:00")));
    }

    #[test]
    fn truncation_drops_sub_millisecond_digits() {
        let at = DateTime::parse_from_rfc3339("2030-01-02T03:04:05.123999+02:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            truncate_to_ms(at).to_rfc3339(),
            "2030-01-02T01:04:05.123+00:00"
        );
    }

    #[test]
    fn shards_are_stable_and_spread() {
        // Pinned values: changing the mix would strand indexed jobs.
        assert_eq!(shard_of(1, 16), shard_of(1, 16));
        let pinned: Vec<u32> = (1..=8).map(|id| shard_of(id, 16)).collect();
        assert_eq!(pinned, vec![1, 14, 13, 10, 10, 0, 7, 6]);

        let mut counts = [0u32; 16];
        for id in 1..=160_000 {
            counts[shard_of(id, 16) as usize] += 1;
        }
        for count in counts {
            assert!((9_000..11_000).contains(&count), "uneven: {counts:?}");
        }
        assert_eq!(shard_of(42, 1), 0);
        assert_eq!(shard_of(42, 0), 0, "zero shards is treated as one");
    }
}
