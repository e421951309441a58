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

/// `value` with every payload replaced by what it was (`"<left out>"`).
pub fn payloads_left_out(mut value: Value) -> Value {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, field) in map.iter_mut() {
                    if PAYLOAD_FIELDS.contains(&key.as_str()) && !field.is_null() {
                        *field = Value::String("<left out>".to_owned());
                    } else {
                        walk(field);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut value);
    value
}

/// Where this process runs: the audit log's "from where" for the CLI and
/// the instances.
pub fn origin_here() -> String {
    format!(
        "{} (pid {})",
        crate::membership::hostname(),
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
    let entry = AuditEntry {
        actor: actor.to_owned(),
        action: action.to_owned(),
        target,
        origin: Some(origin_here()),
        before: (!before.is_null()).then_some(before),
        request: request.map(payloads_left_out),
    };
    let id = store.audit_begin(&entry).await?;
    let outcome = change.await;
    let (status, after) = match &outcome {
        Ok(answer) => (
            200,
            serde_json::to_value(answer).ok().map(payloads_left_out),
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
        let shown = payloads_left_out(json!({
            "topic": "t", "payload": {"card": "4111"},
            "jobs": [{"payload_base64": "AAEC", "key": "k"}],
            "schedule": {"payload": null}
        }));
        assert_eq!(
            shown,
            json!({"topic": "t", "payload": "<left out>",
                   "jobs": [{"payload_base64": "<left out>", "key": "k"}],
                   "schedule": {"payload": null}})
        );
    }
}
