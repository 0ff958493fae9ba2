//! The outbox on PostgreSQL: an effect's follow-up jobs stored in the
//! marker row (column `follow_ups`, `jsonb`), committed in the same
//! transaction as the effect and read back when a duplicate finds the
//! marker ([`crate::followup`] decides what is sent, and when).

use std::collections::HashMap;

use aws_sdk_sqs::types::MessageAttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::followup::FollowUp;

/// The column's value for `list`: `None` (SQL `NULL`) when it is empty.
pub(crate) fn encode(list: &[FollowUp]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    Some(Value::Array(list.iter().map(to_json).collect()).to_string())
}

/// The follow-ups a stored marker carries (none when the column is
/// `NULL`).
pub(crate) fn decode(column: Option<&str>) -> Result<Vec<FollowUp>, String> {
    let Some(text) = column else {
        return Ok(Vec::new());
    };
    let value: Value = serde_json::from_str(text)
        .map_err(|e| format!("the marker's follow_ups are not JSON: {e}"))?;
    let list = value
        .as_array()
        .ok_or("the marker's follow_ups are not a list")?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            from_json(v)
                .ok_or_else(|| format!("the marker's follow-up {i} is not one idemq stored"))
        })
        .collect()
}

fn to_json(f: &FollowUp) -> Value {
    let mut m = Map::new();
    m.insert("queue".into(), json!(f.queue_url()));
    m.insert("job_id".into(), json!(f.job_id()));
    m.insert("body".into(), json!(f.body()));
    if let Some(g) = f.group_id() {
        m.insert("group".into(), json!(g));
    }
    if !f.attributes().is_empty() {
        let attrs: Map<String, Value> = f
            .attributes()
            .iter()
            .map(|(name, v)| {
                let mut a = Map::new();
                a.insert("type".into(), json!(v.data_type()));
                if let Some(s) = v.string_value() {
                    a.insert("string".into(), json!(s));
                }
                if let Some(b) = v.binary_value() {
                    a.insert("binary".into(), json!(STANDARD.encode(b.as_ref())));
                }
                (name.clone(), Value::Object(a))
            })
            .collect();
        m.insert("attributes".into(), Value::Object(attrs));
    }
    Value::Object(m)
}

fn from_json(v: &Value) -> Option<FollowUp> {
    let s = |name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
    let mut attributes = HashMap::new();
    if let Some(attrs) = v.get("attributes") {
        for (name, a) in attrs.as_object()? {
            let mut value = MessageAttributeValue::builder().data_type(a.get("type")?.as_str()?);
            if let Some(s) = a.get("string") {
                value = value.string_value(s.as_str()?);
            }
            if let Some(b) = a.get("binary") {
                let bytes = STANDARD.decode(b.as_str()?).ok()?;
                value = value.binary_value(aws_sdk_sqs::primitives::Blob::new(bytes));
            }
            attributes.insert(name.clone(), value.build().ok()?);
        }
    }
    Some(FollowUp::from_parts(
        s("queue")?,
        s("job_id")?,
        s("body")?,
        s("group"),
        attributes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_ups_survive_the_column_round_trip() {
        let url = "https://sqs.us-east-1.amazonaws.com/123456789012/next";
        let attrs = HashMap::from([
            (
                "tenant".to_owned(),
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("acme")
                    .build()
                    .unwrap(),
            ),
            (
                "sig".to_owned(),
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![0, 159, 255]))
                    .build()
                    .unwrap(),
            ),
        ]);
        let list = vec![
            FollowUp::from_parts(url.into(), "a".into(), "{\"n\":1}".into(), None, attrs),
            FollowUp::from_parts(
                format!("{url}.fifo"),
                "b".into(),
                "x".into(),
                Some("g".into()),
                HashMap::new(),
            ),
        ];
        let stored = encode(&list);
        assert_eq!(decode(stored.as_deref()).unwrap(), list);
        assert_eq!(encode(&[]), None);
        assert_eq!(decode(None).unwrap(), Vec::new());
        assert!(decode(Some("[{\"queue\":1}]")).is_err());
    }
}
