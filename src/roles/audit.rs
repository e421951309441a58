//! The audit log's writers outside the API (its middleware is in
//! `api/audit.rs`): token changes and doctor repairs from the CLI, and an
//! instance's start-up with the settings in force. Each writes its row
//! before the change and completes it after, as the API does: a change that
//! cannot be recorded is not made.

use std::fmt::Display;
use std::future::Future;

use serde::Serialize;
use serde_json::{json, Value};

use crate::store::{AuditEntry, Store, StoreError};

/// The fields of a job or schedule that carry the business's data: left
/// out of the audit log, which says who changed what, not what it sends.
const PAYLOAD_FIELDS: [&str; 2] = ["payload", "payload_base64"];

/// The field encryption at rest seals with the payload (jobs' and
/// schedules' `headers`): left out too wherever it is on, or a sealed
/// job's headers would be kept plain beside their ciphertext.
const SEALED_FIELD: &str = "headers";

/// Whether the audit log leaves headers out as well as payloads: this
/// process holds an encryption key. Any key, not only an active one:
/// rows sealed before encryption was held back, or turned off, still
/// open, and their headers must stay sealed.
pub fn headers_sealed(store: &Store) -> bool {
    !store.keys().ids().is_empty()
}

/// `value` as the audit log keeps it: every payload replaced by
/// `"<left out>"`, and, with `headers_too` ([`headers_sealed`]), every
/// `headers` (names and values) replaced by `"<sealed>"`.
pub fn contents_left_out(mut value: Value, headers_too: bool) -> Value {
    fn walk(value: &mut Value, headers_too: bool) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if field.is_null() {
                        continue;
                    }
                    if PAYLOAD_FIELDS.contains(&key.as_str()) {
                        *field = Value::String("<left out>".to_owned());
                    } else if headers_too && key == SEALED_FIELD {
                        *field = Value::String("<sealed>".to_owned());
                    } else {
                        walk(field, headers_too);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|item| walk(item, headers_too)),
            _ => {}
        }
    }
    walk(&mut value, headers_too);
    value
}

/// Where this process runs: the audit log's "from where" for the CLI and
/// the instances.
pub fn origin_here() -> String {
    format!(
        "{} (pid {})",
        crate::roles::membership::hostname(),
        std::process::id()
    )
}

/// Makes `change` under a row of the audit log by `actor` from this host:
/// the row first (its failure is returned and nothing is changed), then the
/// change, then the row completed — status 200 and the change's answer, or
/// 0 and its error.
pub async fn recorded<T, E, F>(
    store: &Store,
    actor: &str,
    action: &str,
    target: Option<String>,
    request: Option<Value>,
    change: F,
) -> Result<Result<T, E>, StoreError>
where
    T: Serialize,
    E: Display,
    F: Future<Output = Result<T, E>>,
{
    recorded_with_before(store, actor, action, target, Value::Null, request, change).await
}

/// [`recorded`], with the state `before` the change (Null: none to show).
pub async fn recorded_with_before<T, E, F>(
    store: &Store,
    actor: &str,
    action: &str,
    target: Option<String>,
    before: Value,
    request: Option<Value>,
    change: F,
) -> Result<Result<T, E>, StoreError>
where
    T: Serialize,
    E: Display,
    F: Future<Output = Result<T, E>>,
{
    let sealed = headers_sealed(store);
    let entry = AuditEntry {
        actor: actor.to_owned(),
        action: action.to_owned(),
        target,
        origin: Some(origin_here()),
        before: (!before.is_null()).then(|| contents_left_out(before, sealed)),
        request: request.map(|request| contents_left_out(request, sealed)),
    };
    let id = store.audit_begin(&entry).await?;
    let outcome = change.await;
    let (status, after) = match &outcome {
        Ok(answer) => (
            200,
            serde_json::to_value(answer)
                .ok()
                .map(|answer| contents_left_out(answer, sealed)),
        ),
        Err(err) => (0, Some(json!({"error": err.to_string()}))),
    };
    if let Err(err) = store.audit_end(id, status, after.as_ref()).await {
        tracing::warn!(error = %err, audit_id = id, action, "cannot complete the audit log's row: it shows no outcome");
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_left_out_wherever_they_are() {
        let shown = contents_left_out(
            json!({
                "topic": "t", "payload": {"card": "4111"},
                "jobs": [{"payload_base64": "AAEC", "key": "k"}],
                "schedule": {"payload": null}
            }),
            false,
        );
        assert_eq!(
            shown,
            json!({"topic": "t", "payload": "<left out>",
                   "jobs": [{"payload_base64": "<left out>", "key": "k"}],
                   "schedule": {"payload": null}})
        );
    }

    #[test]
    fn with_encryption_on_headers_are_left_out_too_names_and_all() {
        let body = json!({
            "headers": {"customer": "alice"},
            "sample": [{"id": 1, "headers": {"x-card": "4111"}, "payload": null}],
            "schedule": {"headers": null}
        });
        assert_eq!(
            contents_left_out(body.clone(), true),
            json!({"headers": "<sealed>",
                   "sample": [{"id": 1, "headers": "<sealed>", "payload": null}],
                   "schedule": {"headers": null}})
        );
        assert_eq!(contents_left_out(body.clone(), false), body);
    }
}
