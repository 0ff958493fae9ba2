//! Reading an envelope's JSON document: the body as an object, its string
//! fields, and the JSON type names errors give. Shared by the SNS and
//! EventBridge readers, so both refuse a malformed body the same way.

use serde_json::{Map, Value};

use super::{Envelope, EnvelopeError};

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(super) fn parse_object(
    envelope: Envelope,
    body: &str,
) -> Result<Map<String, Value>, EnvelopeError> {
    let doc: Value = serde_json::from_str(body).map_err(|e| {
        use serde_json::error::Category;
        let class = match e.classify() {
            Category::Io => "I/O error",
            Category::Syntax => "syntax error",
            Category::Data => "data error",
            Category::Eof => "unexpected end of input",
        };
        EnvelopeError::NotJson {
            envelope,
            detail: format!("{class} at line {} column {}", e.line(), e.column()),
        }
    })?;
    match doc {
        Value::Object(map) => Ok(map),
        other => Err(EnvelopeError::NotAnObject {
            envelope,
            found: kind(&other),
        }),
    }
}

/// The string at `field`, or why there is none.
pub(super) fn string_field(
    envelope: Envelope,
    doc: &mut Map<String, Value>,
    field: &'static str,
) -> Result<String, EnvelopeError> {
    named_string_field(envelope, doc, field, field)
}

/// The string at `key`, or why there is none, naming it `field` (its path).
pub(super) fn named_string_field(
    envelope: Envelope,
    doc: &mut Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<String, EnvelopeError> {
    match doc.remove(key) {
        None => Err(EnvelopeError::Missing { envelope, field }),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(EnvelopeError::WrongType {
            envelope,
            field,
            found: kind(&other),
            expected: "string",
        }),
    }
}
