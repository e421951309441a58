//! Payload schemas: a topic may name a JSON Schema its jobs' payloads must
//! match. Compiling a schema and checking a payload against it are pure:
//! the edges check on create (and on a payload's change), the dispatcher
//! checks again before it produces, against the schema in force then.
//!
//! Nothing is fetched: remote and file `$ref`s do not resolve (the crate is
//! built without its HTTP and file retrievers), so such a schema does not
//! compile.
//!
//! Which payloads a schema checks: a JSON payload as the JSON it is (none
//! given reads as `null`); a bytes payload (`payload_base64`) only if its
//! bytes are UTF-8 JSON — they are what consumers read — else it is
//! refused: the topic's payloads are JSON checked against a schema.

use std::fmt;

use serde_json::Value;

use super::job::PayloadKind;

/// A schema compiled once, with the text it came from.
pub struct PayloadSchema {
    text: String,
    validator: jsonschema::Validator,
}

impl fmt::Debug for PayloadSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PayloadSchema")
            .field("text", &self.text)
            .finish_non_exhaustive()
    }
}

/// Why a payload does not match its topic's schema: where (a JSON pointer
/// into the payload, `/` for the whole of it), which keyword of the schema
/// failed, and the validator's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMismatch {
    pub path: String,
    /// The schema keyword that failed (`type`, `required`, …); empty when
    /// the payload is not JSON at all.
    pub keyword: String,
    /// The validator's words, quoting the failing value: for the caller
    /// who sent the payload.
    pub message: String,
    /// The same without the payload's values (`value is not of type
    /// "number"`): what is logged and stored in `held_reason`, since logs
    /// never carry payloads and a payload may be sealed at rest.
    pub masked: String,
}

impl SchemaMismatch {
    /// The failure without the payload's values: path, masked words, keyword.
    pub fn without_values(&self) -> String {
        SchemaMismatch {
            message: self.masked.clone(),
            ..self.clone()
        }
        .to_string()
    }
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if !self.keyword.is_empty() {
            write!(f, " (keyword {:?})", self.keyword)?;
        }
        Ok(())
    }
}

impl PayloadSchema {
    /// Compiles `text` (a JSON Schema, any draft the crate knows; draft
    /// 2020-12 when it names none). Err says why not.
    pub fn compile(text: &str) -> Result<PayloadSchema, String> {
        let schema: Value = serde_json::from_str(text).map_err(|err| format!("not JSON: {err}"))?;
        PayloadSchema::compile_value(&schema, text.to_owned())
    }

    /// Compiles a schema given as JSON; its text is its compact form.
    pub fn of_value(schema: &Value) -> Result<PayloadSchema, String> {
        PayloadSchema::compile_value(schema, schema.to_string())
    }

    fn compile_value(schema: &Value, text: String) -> Result<PayloadSchema, String> {
        if !(schema.is_object() || schema.is_boolean()) {
            return Err("a JSON Schema is an object (or true/false)".to_owned());
        }
        let validator = jsonschema::options()
            .build(schema)
            .map_err(|err| err.to_string())?;
        Ok(PayloadSchema { text, validator })
    }

    /// The text it was compiled from.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Checks a payload as stored (`kind`, its bytes): Ok, or the first
    /// place it fails.
    pub fn check(&self, kind: PayloadKind, payload: &[u8]) -> Result<(), SchemaMismatch> {
        let value = match payload_json(kind, payload) {
            Ok(value) => value,
            Err(message) => {
                return Err(SchemaMismatch {
                    path: "/".to_owned(),
                    keyword: String::new(),
                    masked: message.clone(),
                    message,
                })
            }
        };
        self.check_value(&value)
    }

    /// Checks a JSON value.
    pub fn check_value(&self, value: &Value) -> Result<(), SchemaMismatch> {
        let Some(error) = self.validator.iter_errors(value).next() else {
            return Ok(());
        };
        let path = error.instance_path().as_str().to_owned();
        let keyword = error
            .schema_path()
            .as_str()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        Err(SchemaMismatch {
            path: if path.is_empty() {
                "/".to_owned()
            } else {
                path
            },
            keyword,
            message: error.to_string(),
            masked: error.masked().to_string(),
        })
    }
}

/// A stored payload as the JSON a schema checks.
fn payload_json(kind: PayloadKind, payload: &[u8]) -> Result<Value, String> {
    match kind {
        PayloadKind::Json if payload.is_empty() => Ok(Value::Null),
        PayloadKind::Json => serde_json::from_slice(payload)
            .map_err(|err| format!("the payload is not JSON ({err})")),
        PayloadKind::Bytes => serde_json::from_slice(payload).map_err(|_| {
            "the topic's payloads are JSON checked against a schema: these bytes are not JSON"
                .to_owned()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order_schema() -> PayloadSchema {
        PayloadSchema::compile(
            r#"{"type":"object","required":["amount"],
                "properties":{"amount":{"type":"number"},"lines":{"type":"array","items":{"type":"string"}}}}"#,
        )
        .expect("compiles")
    }

    #[test]
    fn a_matching_payload_passes() {
        let schema = order_schema();
        assert_eq!(
            schema.check(PayloadKind::Json, br#"{"amount": 12.5, "lines": ["a"]}"#),
            Ok(())
        );
    }

    #[test]
    fn a_mismatch_names_the_path_and_the_keyword() {
        let schema = order_schema();
        let err = schema
            .check(PayloadKind::Json, br#"{"amount": "x"}"#)
            .unwrap_err();
        assert_eq!(err.path, "/amount");
        assert_eq!(err.keyword, "type");
        assert_eq!(
            err.to_string(),
            r#"/amount: "x" is not of type "number" (keyword "type")"#
        );
        assert_eq!(
            err.without_values(),
            r#"/amount: value is not of type "number" (keyword "type")"#
        );
        let nested = schema
            .check(PayloadKind::Json, br#"{"amount": 1, "lines": ["a", 2]}"#)
            .unwrap_err();
        assert_eq!(nested.path, "/lines/1");
        let missing = schema.check(PayloadKind::Json, b"{}").unwrap_err();
        assert_eq!(
            (missing.path.as_str(), missing.keyword.as_str()),
            ("/", "required")
        );
    }

    #[test]
    fn no_payload_is_checked_as_null() {
        let schema = order_schema();
        assert_eq!(
            schema.check(PayloadKind::Json, b"").unwrap_err().keyword,
            "type"
        );
        let anything = PayloadSchema::compile("true").expect("compiles");
        assert_eq!(anything.check(PayloadKind::Json, b""), Ok(()));
    }

    #[test]
    fn bytes_pass_only_as_json_that_matches() {
        let schema = order_schema();
        assert_eq!(
            schema.check(PayloadKind::Bytes, br#"{"amount": 3}"#),
            Ok(())
        );
        let binary = schema.check(PayloadKind::Bytes, &[0xff, 0x00]).unwrap_err();
        assert!(binary.message.contains("not JSON"), "{binary}");
        assert_eq!(binary.path, "/");
    }

    #[test]
    fn a_schema_that_does_not_compile_says_why() {
        assert!(PayloadSchema::compile("{not json")
            .unwrap_err()
            .starts_with("not JSON"));
        assert!(PayloadSchema::compile("42").is_err());
        let bad_type = PayloadSchema::compile(r#"{"type": "numbr"}"#).unwrap_err();
        assert!(!bad_type.is_empty());
        let bad_pattern = PayloadSchema::compile(r#"{"pattern": "(["}"#);
        assert!(bad_pattern.is_err());
    }

    #[test]
    fn remote_references_are_never_fetched() {
        let remote = PayloadSchema::compile(r#"{"$ref": "https://example.com/order.json"}"#);
        assert!(remote.is_err(), "a remote $ref does not compile");
        let local = PayloadSchema::compile(
            r##"{"$defs": {"n": {"type": "number"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}"##,
        )
        .expect("a local $ref compiles");
        assert_eq!(
            local
                .check_value(&serde_json::json!({"a": "x"}))
                .unwrap_err()
                .path,
            "/a"
        );
    }
}
