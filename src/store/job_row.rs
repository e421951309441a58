//! How a row of `jobs` is read: the columns a [`Job`] is selected with and
//! their decoding (a row that does not decode is an error, never a panic), a job read back after a compare-and-set, a job just
//! inserted, and the window's (id, time) entries. The statements that
//! change rows are the others' (jobs.rs, dispatch.rs, results.rs, …); this
//! file only reads.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::mysql::MySqlRow;
use sqlx::Row;

use super::error::StoreError;
use super::payload::{payload_and_headers, stored_kind_parse};
pub(super) use super::sql::text;
use crate::domain::compression::Codec;
use crate::domain::job::{Job, JobId, NewJob, PayloadKind};
use crate::domain::keys::Keyring;
use crate::domain::policy::Policy;
use crate::domain::zones::WallClock;

/// The columns a [`Job`] is read from, with `$payload` in the payload's
/// place (listings read everything but the payload, which may be large).
macro_rules! job_columns {
    ($payload:literal) => {
        concat!(
            "id, topic, COALESCE(job_key, retired_key) AS job_key, ",
            $payload,
            ", payload_kind, headers, schedule_time, status, attempt, max_attempts, version, \
             created_at, updated_at, dispatched_at, kafka_partition, kafka_offset, verified_at, last_error, \
             expects_result, backoff_base_ms, backoff_cap_ms, ack_timeout_ms, ack_deadline, \
             trace_parent, schedule_id, expires_at, window_ms, window_start, enc_key, \
             run_local, time_zone, tzdata_version, generation, previous_id, \
             TIMESTAMPADD(MICROSECOND, LEAST(debounce_max_ms, 1000000000000) * 1000, \
             debounce_first_at) AS debounce_until, held_at, held_reason, schema_waived_attempt"
        )
    };
}

pub(super) const JOB_COLUMNS: &str = job_columns!("payload");

pub(super) const JOB_COLUMNS_NO_PAYLOAD: &str = job_columns!("CAST(NULL AS BINARY) AS payload");

/// How `last_error` starts on a job set aside because its row does not
/// decode (`tickler doctor` names them by it).
pub const UNREADABLE_PREFIX: &str = "unreadable row: ";

/// A pending job the loader found entering the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowEntry {
    pub id: JobId,
    pub schedule_time: DateTime<Utc>,
}

impl WindowEntry {
    /// From a row with `id` and `schedule_time`.
    pub(super) fn from_row(row: &MySqlRow) -> Result<WindowEntry, StoreError> {
        let at: NaiveDateTime = row.try_get("schedule_time")?;
        Ok(WindowEntry {
            id: row.try_get("id")?,
            schedule_time: at.and_utc(),
        })
    }
}

/// Reads a job back after a compare-and-set on it, with the database's
/// clock at that moment (a payload dictionary not loaded is loaded, see
/// `Store::job_decode`).
pub(super) async fn job_read_back(
    conn: &mut sqlx::MySqlConnection,
    store: &super::handle::Store,
    id: JobId,
) -> Result<(Job, DateTime<Utc>), StoreError> {
    let row = sqlx::query(&format!(
        "SELECT {JOB_COLUMNS}, UTC_TIMESTAMP(3) AS db_now FROM jobs WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await?
    .ok_or(StoreError::NotFound(id))?;
    let now: NaiveDateTime = row.try_get("db_now")?;
    Ok((store.job_decode(&row).await?, now.and_utc()))
}

/// The columns a job just inserted is read back with: what the database
/// decided (its id, the time a `delay_ms` comes to, the defaults). The
/// rest is the request's ([`job_created`]).
pub(super) const CREATED_COLUMNS: &str =
    "id, schedule_time, status, attempt, version, created_at, updated_at, expires_at, window_start";

/// A job just inserted from `new`, as stored: [`CREATED_COLUMNS`] from
/// `row`, the rest from `new` as it was bound (times to the millisecond),
/// and nothing yet of a dispatch. What `job_get` reads of it, without
/// sending back and decoding what the request already says
/// (tests/store_jobs.rs compares the two for every kind of field).
pub(super) fn job_created(new: &NewJob, row: &MySqlRow) -> Result<Job, StoreError> {
    let id: JobId = row.try_get("id")?;
    let status = text(row, "status")?.unwrap_or_default();
    let at = |column: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: NaiveDateTime = row.try_get(column)?;
        Ok(value.and_utc())
    };
    Ok(Job {
        id,
        topic: new.topic.clone(),
        key: new.key.clone(),
        payload: new.payload.clone(),
        payload_kind: new.payload_kind,
        headers: new.headers.clone(),
        schedule_time: at("schedule_time")?,
        status: status
            .parse()
            .map_err(|_| StoreError::Corrupt(format!("job {id}: unknown status")))?,
        attempt: row.try_get("attempt")?,
        policy: new.policy,
        version: row.try_get("version")?,
        created_at: at("created_at")?,
        updated_at: at("updated_at")?,
        dispatched_at: None,
        kafka_partition: None,
        kafka_offset: None,
        verified_at: None,
        last_error: None,
        ack_deadline: None,
        trace_parent: new.trace_parent.clone(),
        schedule_id: new.schedule_id,
        expires_at: row
            .try_get::<Option<NaiveDateTime>, _>("expires_at")?
            .map(|at| at.and_utc()),
        window_ms: new.window.map(|window| window.ms),
        window_start: row
            .try_get::<Option<NaiveDateTime>, _>("window_start")?
            .map(|at| at.and_utc()),
        wall: new.wall.clone(),
        debounce_until: None,
        generation: 0,
        previous_id: None,
        held_at: None,
        held_reason: None,
        schema_waived_attempt: None,
    })
}

pub(super) fn job_from_row(
    row: &MySqlRow,
    keys: &Keyring,
    codec: &Codec,
) -> Result<Job, StoreError> {
    let id: JobId = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("job {id}: {what}"));
    let kind = text(row, "payload_kind")?.unwrap_or_default();
    let (kind, compressed) =
        stored_kind_parse(&kind).ok_or_else(|| corrupt("unknown payload_kind"))?;
    let (payload, headers) = payload_and_headers(row, keys, codec, id, compressed)?;
    let headers = match headers.as_deref() {
        None | Some("") => BTreeMap::new(),
        Some(text) => serde_json::from_str(text)
            .map_err(|_| corrupt("headers is not a JSON object of strings"))?,
    };
    job_with_body(row, kind, payload, headers)
}

/// A job of a listing, read without its payload: one whose headers do not
/// decode (edited by hand, sealed under a key this instance lacks) is
/// listed without them, so that one row never fails a page, a sample or
/// a bulk batch.
pub(super) fn job_from_row_listed(
    row: &MySqlRow,
    keys: &Keyring,
    codec: &Codec,
) -> Result<Job, StoreError> {
    match job_from_row(row, keys, codec) {
        Err(
            err @ (StoreError::Corrupt(_)
            | StoreError::KeyMissing { .. }
            | StoreError::DictionaryUnknown(_)),
        ) => {
            tracing::debug!(error = %err, "a listed row does not decode; listed without its headers");
            job_from_row_without_body(row)
        }
        decoded => decoded,
    }
}

/// A job from a row whose payload or headers do not decode (broken by
/// hand, sealed under a key or compressed with a dictionary this instance
/// lacks), for a write that has committed on it already or a listing:
/// everything but them, its payload left empty as a JSON one (which the
/// API shows as none, as in a listing) and no headers.
pub(super) fn job_from_row_without_body(row: &MySqlRow) -> Result<Job, StoreError> {
    job_with_body(row, PayloadKind::Json, Vec::new(), BTreeMap::new())
}

/// A job from `row` with its payload and headers already decoded.
fn job_with_body(
    row: &MySqlRow,
    kind: PayloadKind,
    payload: Vec<u8>,
    headers: BTreeMap<String, String>,
) -> Result<Job, StoreError> {
    let id: JobId = row.try_get("id")?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("job {id}: {what}"));
    let status = text(row, "status")?.unwrap_or_default();
    let at = |column: &str| -> Result<DateTime<Utc>, StoreError> {
        let value: NaiveDateTime = row.try_get(column)?;
        Ok(value.and_utc())
    };
    let dispatched_at: Option<NaiveDateTime> = row.try_get("dispatched_at")?;
    let ack_deadline: Option<NaiveDateTime> = row.try_get("ack_deadline")?;
    let expires_at: Option<NaiveDateTime> = row.try_get("expires_at")?;
    Ok(Job {
        id,
        topic: text(row, "topic")?.unwrap_or_default(),
        key: text(row, "job_key")?,
        payload,
        payload_kind: kind,
        headers,
        schedule_time: at("schedule_time")?,
        status: status.parse().map_err(|_| corrupt("unknown status"))?,
        attempt: row.try_get("attempt")?,
        policy: policy_from_row(row)?,
        version: row.try_get("version")?,
        created_at: at("created_at")?,
        updated_at: at("updated_at")?,
        dispatched_at: dispatched_at.map(|at| at.and_utc()),
        kafka_partition: row.try_get("kafka_partition")?,
        kafka_offset: row.try_get("kafka_offset")?,
        // Informational: a value that does not decode (a hand edit) reads
        // as not verified, and never costs the job its dispatch.
        verified_at: row
            .try_get::<Option<NaiveDateTime>, _>("verified_at")
            .ok()
            .flatten()
            .map(|at| at.and_utc()),
        last_error: text(row, "last_error")?,
        ack_deadline: ack_deadline.map(|at| at.and_utc()),
        trace_parent: text(row, "trace_parent")?,
        schedule_id: row.try_get("schedule_id")?,
        expires_at: expires_at.map(|at| at.and_utc()),
        window_ms: row.try_get("window_ms")?,
        window_start: row
            .try_get::<Option<NaiveDateTime>, _>("window_start")?
            .map(|at| at.and_utc()),
        wall: wall_from_row(row),
        // Informational beside `schedule_time`: a value that does not
        // decode (a hand edit) reads as no ceiling, and costs nothing else.
        debounce_until: row
            .try_get::<Option<NaiveDateTime>, _>("debounce_until")
            .ok()
            .flatten()
            .map(|at| at.and_utc()),
        generation: row.try_get("generation").unwrap_or_default(),
        previous_id: row.try_get("previous_id").ok().flatten(),
        held_at: row
            .try_get::<Option<NaiveDateTime>, _>("held_at")?
            .map(|at| at.and_utc()),
        held_reason: text(row, "held_reason")?,
        schema_waived_attempt: row.try_get("schema_waived_attempt")?,
    })
}

/// A job's wall-clock time. Informational beside `schedule_time`, which
/// alone decides when it is due: columns that do not decode, or a zone
/// without its local time (a hand edit), read as none, never costing the
/// job its dispatch; a row without a release reads as release `0`, older
/// than any, so a newer tzdata computes it again.
fn wall_from_row(row: &MySqlRow) -> Option<WallClock> {
    let local: NaiveDateTime = row
        .try_get::<Option<NaiveDateTime>, _>("run_local")
        .ok()??;
    let zone = text(row, "time_zone").ok()??;
    let tzdata_version = text(row, "tzdata_version")
        .ok()
        .flatten()
        .unwrap_or_else(|| "0".to_owned());
    Some(WallClock {
        local,
        zone,
        tzdata_version,
    })
}

/// The result policy columns of a row.
pub(super) fn policy_from_row(row: &MySqlRow) -> Result<Policy, StoreError> {
    Ok(Policy {
        expects_result: row.try_get("expects_result")?,
        max_attempts: row.try_get("max_attempts")?,
        backoff_base_ms: row.try_get("backoff_base_ms")?,
        backoff_cap_ms: row.try_get("backoff_cap_ms")?,
        ack_timeout_ms: row.try_get("ack_timeout_ms")?,
    })
}
