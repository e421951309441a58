//! How a job is written in the API's answers (and in error bodies that
//! carry the job: a conflict shows its state). Below the handlers and
//! [`super::error`], which both use it.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::domain::job::{time_format, Job, JobId, PayloadKind};

/// A job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: JobId,
    pub topic: String,
    pub key: Option<String>,
    pub status: String,
    pub run_at: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub version: u32,
    pub expects_result: bool,
    pub backoff_base_ms: u32,
    pub backoff_cap_ms: u32,
    pub ack_timeout_ms: u32,
    /// While dispatched and waiting for a result: when silence becomes a
    /// retry.
    pub ack_deadline: Option<String>,
    /// A JSON payload, as sent; absent in listings and for bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    /// A bytes payload, base64; absent in listings and for JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub created_at: String,
    pub updated_at: String,
    pub dispatched_at: Option<String>,
    pub kafka: Option<KafkaPosition>,
    /// When tickler read its record back at `kafka`'s position and found
    /// it there (`dispatcher.verify`); null: not verified (not yet, not
    /// sampled, verification off, or dispatched before it existed).
    pub verified_at: Option<String>,
    /// When each consumer group that reads its partition read past its
    /// record (`at` null: not yet); absent in listings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed: Vec<ConsumedView>,
    pub last_error: Option<String>,
    /// The W3C trace context of the creating request, put on the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The schedule whose occurrence it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_id: Option<u64>,
    /// Not produced by then, it ends `expired` and is never produced
    /// (`expires_at` or `ttl_ms` on create, or an occurrence of a
    /// `misfire: skip` schedule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Its flexible window: it may go out at any instant of [run_at,
    /// run_at + window_ms].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u32>,
    /// With a window: the instant tickler decided on in it, when it goes
    /// out (`dispatched_at` says when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub produce_at: Option<String>,
    /// Given a wall-clock time: the local time (`2027-03-28T09:00:00.000`)
    /// its run_at was computed from, in `time_zone`, with tzdata release
    /// `tzdata_version`. A newer tzdata moves run_at where it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_local: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tzdata_version: Option<String>,
    /// Debounced with `max_delay_ms`: the latest a debounce may move it to
    /// (its generation's first request + `max_delay_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_until: Option<String>,
    /// Its key's generation, from 1 for a job a debounce created after the
    /// one before went out (absent for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u32>,
    /// The job of the generation before, which held the key until this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_id: Option<JobId>,
    /// In a debounce's answer: true, the pending job was moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounced: Option<bool>,
    /// In a debounce's answer: whether the time asked for was past the
    /// ceiling, so the job was moved to `debounce_until` instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capped: Option<bool>,
    /// Held back, still pending, because its payload no longer matched its
    /// topic's payload schema when it came due: since when, and where the
    /// payload failed. `POST /v1/jobs/{id}/release` lets it go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_reason: Option<String>,
}

/// When one consumer group read past a job's record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ConsumedView {
    pub group: String,
    /// When tickler saw the group's committed offset pass the record
    /// (within `consumption.interval_ms`); null: not yet.
    pub at: Option<String>,
}

impl From<crate::store::Consumed> for ConsumedView {
    fn from(consumed: crate::store::Consumed) -> Self {
        ConsumedView {
            group: consumed.group,
            at: consumed.at.map(time_format),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct KafkaPosition {
    pub partition: i32,
    pub offset: i64,
}

impl JobView {
    /// The view without its payload (for listings).
    pub fn without_payload(job: Job) -> JobView {
        let mut view = JobView::from(job);
        view.payload = None;
        view.payload_base64 = None;
        view
    }
}

impl From<Job> for JobView {
    fn from(job: Job) -> Self {
        let (payload, payload_base64) = payload_shown(job.payload_kind, job.payload);
        let kafka = match (job.kafka_partition, job.kafka_offset) {
            (Some(partition), Some(offset)) => Some(KafkaPosition { partition, offset }),
            _ => None,
        };
        JobView {
            id: job.id,
            topic: job.topic,
            key: job.key,
            status: job.status.to_string(),
            // With a window, the time asked for: its start.
            run_at: time_format(job.window_start.unwrap_or(job.schedule_time)),
            attempt: job.attempt,
            max_attempts: job.policy.max_attempts,
            version: job.version,
            expects_result: job.policy.expects_result,
            backoff_base_ms: job.policy.backoff_base_ms,
            backoff_cap_ms: job.policy.backoff_cap_ms,
            ack_timeout_ms: job.policy.ack_timeout_ms,
            ack_deadline: job.ack_deadline.map(time_format),
            traceparent: job.trace_parent,
            schedule_id: job.schedule_id,
            expires_at: job.expires_at.map(time_format),
            window_ms: job.window_ms,
            produce_at: job.window_ms.map(|_| time_format(job.schedule_time)),
            run_local: job
                .wall
                .as_ref()
                .map(|wall| wall.local.format("%Y-%m-%dT%H:%M:%S%.3f").to_string()),
            time_zone: job.wall.as_ref().map(|wall| wall.zone.clone()),
            tzdata_version: job.wall.map(|wall| wall.tzdata_version),
            debounce_until: job.debounce_until.map(time_format),
            generation: (job.generation > 0).then_some(job.generation),
            previous_id: job.previous_id,
            debounced: None,
            capped: None,
            payload,
            payload_base64,
            headers: job.headers,
            created_at: time_format(job.created_at),
            updated_at: time_format(job.updated_at),
            dispatched_at: job.dispatched_at.map(time_format),
            kafka,
            verified_at: job.verified_at.map(time_format),
            consumed: Vec::new(),
            last_error: job.last_error,
            held_at: job.held_at.map(time_format),
            held_reason: job.held_at.and(job.held_reason),
        }
    }
}

/// A stored payload as the API shows it: JSON as sent, bytes (and JSON
/// that is not UTF-8, which only a hand edit can make) as base64.
pub(super) fn payload_shown(
    kind: PayloadKind,
    payload: Vec<u8>,
) -> (Option<Box<RawValue>>, Option<String>) {
    match kind {
        PayloadKind::Json => match String::from_utf8(payload) {
            Ok(text) => (RawValue::from_string(text).ok(), None),
            Err(err) => (None, Some(BASE64.encode(err.into_bytes()))),
        },
        PayloadKind::Bytes => (None, Some(BASE64.encode(&payload))),
    }
}
