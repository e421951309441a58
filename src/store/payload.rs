//! A job's payload and headers on their way to and from its row — the one
//! place in the store that compresses, seals, opens and expands. Written:
//! the payload compressed by the codec when that is smaller (`payload_kind`
//! says `+zstd`), then payload and headers sealed under the active key
//! under the row's id (bound into the seal, known before its INSERT), or plain
//! without a key. Read: opened with the key the row names (`enc_key`),
//! then expanded. The statement files hand rows to it and write what it
//! returns; none of them calls the keyring or the codec.

use std::collections::BTreeMap;

use sqlx::mysql::MySqlRow;
use sqlx::{MySql, QueryBuilder, Row};

use super::error::StoreError;
use super::sql::text;
use crate::domain::compression::{Codec, CodecError};
use crate::domain::job::{JobId, PayloadKind};
use crate::domain::keys::Keyring;

/// What a row's `payload_kind` stores: the payload's kind, and `+zstd`
/// when the payload is compressed ([`crate::domain::compression`]).
pub(super) fn stored_kind(kind: PayloadKind, compressed: bool) -> &'static str {
    match (kind, compressed) {
        (PayloadKind::Json, false) => "json",
        (PayloadKind::Bytes, false) => "bytes",
        (PayloadKind::Json, true) => "json+zstd",
        (PayloadKind::Bytes, true) => "bytes+zstd",
    }
}

/// A row's `payload_kind` read: the kind, and whether the payload is
/// compressed.
pub(super) fn stored_kind_parse(stored: &str) -> Option<(PayloadKind, bool)> {
    let (kind, compressed) = match stored.strip_suffix("+zstd") {
        Some(kind) => (kind, true),
        None => (stored, false),
    };
    Some((kind.parse().ok()?, compressed))
}

/// A row's payload and headers as they were written: opened with `keys`
/// when the row names the key they are sealed under (`enc_key`), then the
/// payload expanded when the row says it is compressed (`payload_kind`).
/// A row whose key is missing, or that does not open or expand, is
/// corrupt (set aside unsent by the dispatcher, named by the doctor),
/// never a panic; one whose dictionary this instance has not loaded yet
/// is [`StoreError::DictionaryUnknown`], a moment's wait.
pub(super) fn payload_and_headers(
    row: &MySqlRow,
    keys: &Keyring,
    codec: &Codec,
    id: JobId,
    compressed: bool,
) -> Result<(Vec<u8>, Option<String>), StoreError> {
    // NULL: a listing's row, read without its payload.
    let payload: Option<Vec<u8>> = row.try_get("payload")?;
    let headers = text(row, "headers")?;
    let key = text(row, "enc_key")?;
    let (payload, headers) = keys
        .open_row(
            key.as_deref(),
            id,
            crate::domain::keys::JOB,
            payload,
            headers,
        )
        .map_err(|err| match err {
            crate::domain::keys::KeyError::Missing(key) => StoreError::KeyMissing { id, key },
            err => StoreError::Corrupt(format!("job {id}: {err}")),
        })?;
    let payload = codec.unpack(payload, compressed).map_err(|err| match err {
        CodecError::Unknown(dict) => StoreError::DictionaryUnknown(dict),
        CodecError::Broken(_) => StoreError::Corrupt(format!("job {id}: {err}")),
    })?;
    Ok((payload, headers))
}

/// A job's new payload and headers as its row stores them: the payload
/// compressed by `codec` when it is on (and that is smaller), then both
/// sealed for row `id` under the active key of `keys`, or plain without
/// one. Returns (payload, headers, key, `payload_kind`).
pub(super) fn packed_sealed(
    (keys, codec): (&Keyring, &Codec),
    id: JobId,
    payload: &[u8],
    kind: PayloadKind,
    headers: &BTreeMap<String, String>,
) -> (Vec<u8>, Option<String>, Option<String>, &'static str) {
    let (packed, compressed) = codec.pack(payload);
    let (payload, headers, key) = keys.seal_row(
        id,
        crate::domain::keys::JOB,
        &packed,
        headers_encode(headers).as_deref(),
    );
    (payload, headers, key, stored_kind(kind, compressed))
}

/// Writes one payload and headers to every job of `ids` (a schedule's
/// pending occurrences, changed with it), each sealed under its own id.
pub(super) async fn seal_rows_on(
    conn: &mut sqlx::MySqlConnection,
    keys: &Keyring,
    ids: &[JobId],
    payload: &[u8],
    headers: &BTreeMap<String, String>,
) -> Result<(), StoreError> {
    let sealed: Vec<(JobId, Vec<u8>, String)> = ids
        .iter()
        .map(|id| sealed_row(keys, *id, payload, headers))
        .collect();
    seal_sealed_on(conn, keys, &sealed).await
}

/// (id, payload, headers or '' for none), sealed for row `id`.
pub(super) fn sealed_row(
    keys: &Keyring,
    id: JobId,
    payload: &[u8],
    headers: &BTreeMap<String, String>,
) -> (JobId, Vec<u8>, String) {
    let (payload, headers, _) = keys.seal_row(
        id,
        crate::domain::keys::JOB,
        payload,
        headers_encode(headers).as_deref(),
    );
    (id, payload, headers.unwrap_or_default())
}

/// Writes sealed (id, payload, headers) rows with the active key's id: one
/// UPDATE of `jobs` alone per chunk, each row's values chosen by a `CASE`
/// on its id. `updated_at` is kept: a row sealed with its schedule's
/// change is changed by that, not by this.
pub(super) async fn seal_sealed_on(
    conn: &mut sqlx::MySqlConnection,
    keys: &Keyring,
    sealed: &[(JobId, Vec<u8>, String)],
) -> Result<(), StoreError> {
    let Some(active) = keys.active() else {
        return Ok(());
    };
    for chunk in sealed.chunks(SEAL_ROWS_MAX) {
        let mut update = QueryBuilder::<MySql>::new("UPDATE jobs SET payload = CASE id");
        for (id, payload, _) in chunk {
            update
                .push(" WHEN ")
                .push_bind(*id)
                .push(" THEN ")
                .push_bind(&payload[..]);
        }
        update.push(" END, headers = CASE id");
        for (id, _, headers) in chunk {
            update
                .push(" WHEN ")
                .push_bind(*id)
                .push(" THEN NULLIF(")
                .push_bind(headers.as_str())
                .push(", '')");
        }
        update
            .push(" END, enc_key = ")
            .push_bind(active)
            .push(", updated_at = updated_at WHERE id IN (");
        let mut ids = update.separated(", ");
        for (id, _, _) in chunk {
            ids.push_bind(*id);
        }
        update.push(")");
        update.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// The rows one sealing UPDATE writes: five values a row.
const SEAL_ROWS_MAX: usize = 200;

pub(super) fn headers_encode(headers: &BTreeMap<String, String>) -> Option<String> {
    if headers.is_empty() {
        None
    } else {
        serde_json::to_string(headers).ok()
    }
}

/// A job row's headers only, opened (pacing reads no payload): None when
/// they do not open.
pub(super) fn headers_opened(
    keys: &Keyring,
    key: Option<&str>,
    id: JobId,
    headers: Option<String>,
) -> Option<String> {
    keys.open_row(key, id, crate::domain::keys::JOB, None, headers)
        .ok()
        .and_then(|(_, headers)| headers)
}

/// A schedule's payload and headers as its row stores them: (payload,
/// headers, key), sealed for row `id` under the active key of `keys`, or
/// plain without one.
pub(super) fn schedule_sealed(
    keys: &Keyring,
    id: u64,
    payload: &[u8],
    headers: &BTreeMap<String, String>,
) -> (Vec<u8>, Option<String>, Option<String>) {
    keys.seal_row(
        id,
        crate::domain::keys::SCHEDULE,
        payload,
        headers_encode(headers).as_deref(),
    )
}

/// A schedule row's payload and headers, opened with the key it names.
pub(super) fn schedule_opened(
    keys: &Keyring,
    key: Option<&str>,
    id: u64,
    payload: Vec<u8>,
    headers: Option<String>,
) -> Result<(Vec<u8>, Option<String>), StoreError> {
    let (payload, headers) = keys
        .open_row(
            key,
            id,
            crate::domain::keys::SCHEDULE,
            Some(payload),
            headers,
        )
        .map_err(|err| StoreError::Corrupt(format!("schedule {id}: {err}")))?;
    Ok((payload, headers))
}
