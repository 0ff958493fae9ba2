//! The EventBridge envelope: the whole event a rule's SQS target receives,
//! opened to its `detail` as canonical JSON, so the same detail hashes the
//! same however EventBridge laid it out.

use std::borrow::Cow;

use serde_json::Value;

use super::exact;
use super::fields::{parse_object, string_field};
use super::{Envelope, EnvelopeError, Opened};

/// An EventBridge event as a rule's SQS target receives it: the whole
/// event, `id` (a UUID per event) and `detail` (the JSON object the
/// producer put) among its top-level fields
/// (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-events-structure.html>).
pub(super) fn open_eventbridge(body: &str) -> Result<Opened<'static>, EnvelopeError> {
    const E: Envelope = Envelope::EventBridge;
    let mut doc = parse_object(E, body)?;
    let id = string_field(E, &mut doc, "id")?;
    let detail = match doc.remove("detail") {
        None | Some(Value::Null) => {
            return Err(EnvelopeError::Missing {
                envelope: E,
                field: "detail",
            });
        }
        Some(detail) => detail,
    };
    // From the text, not from `detail`: serde_json (without its crate-wide
    // `arbitrary_precision`) holds a number beyond i64/u64 as an f64, and
    // the handler would decode, and the hash cover, a rounded value.
    let payload = exact::canonical_detail(body).unwrap_or_else(|| canonical_json(&detail));
    Ok(Opened {
        payload: Cow::Owned(payload),
        job_id_attribute: None,
        envelope_id: Some(id),
    })
}

/// `value` as compact JSON with every object's keys in byte order.
///
/// An EventBridge `detail` is JSON that EventBridge parsed from the
/// producer's `Detail` string and wrote back into the event: its spacing
/// and key order are EventBridge's (or an emulator's), not the producer's.
/// The payload hash covers this canonical form, so the same detail always
/// hashes the same, however it was laid out. (serde_json keeps insertion
/// order in this build, `preserve_order` being on, so the keys are sorted
/// here rather than trusted to a `BTreeMap`.)
pub fn canonical_json(value: &Value) -> String {
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}
