//! The outbox in DynamoDB: an effect's follow-up jobs stored in its marker
//! item (attribute [`FOLLOW_UPS_ATTRIBUTE`]), committed in the same
//! transaction as the effect and read back when a duplicate finds the
//! marker ([`crate::followup`] decides what is sent, and when).

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageAttributeValue;

use super::effect::Item;
use crate::followup::{FOLLOW_UPS_ATTRIBUTE, FollowUp};

/// Bytes a separate marker item takes besides its follow-ups, at most: key,
/// job id (each up to [`crate::job::MAX_JOB_ID_BYTES`]), hash, timestamps,
/// queue name and attribute names, rounded up.
pub(crate) const SEPARATE_MARKER_BYTES: usize = 2 * 1024;

/// The marker attribute holding `list`, as an item of one attribute (for
/// its size) or to merge into a marker item; empty when `list` is.
pub(crate) fn stored(list: &[FollowUp]) -> Item {
    if list.is_empty() {
        return Item::new();
    }
    Item::from([(
        FOLLOW_UPS_ATTRIBUTE.to_owned(),
        AttributeValue::L(list.iter().map(to_attribute).collect()),
    )])
}

/// The follow-ups a stored marker carries (none if it carries none).
pub(crate) fn from_marker(item: &Item) -> Result<Vec<FollowUp>, String> {
    let Some(v) = item.get(FOLLOW_UPS_ATTRIBUTE) else {
        return Ok(Vec::new());
    };
    let list = v
        .as_l()
        .map_err(|_| format!("the marker's {FOLLOW_UPS_ATTRIBUTE} is not a list"))?;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            from_attribute(v).ok_or_else(|| {
                format!(
                    "the marker's follow-up {i} is not one idemq stored ({FOLLOW_UPS_ATTRIBUTE})"
                )
            })
        })
        .collect()
}

/// A follow-up as stored in the marker: a map of strings (and the
/// attributes' values as they are).
fn to_attribute(f: &FollowUp) -> AttributeValue {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let mut m = HashMap::from([
        ("queue".to_owned(), s(f.queue_url())),
        ("job_id".to_owned(), s(f.job_id())),
        ("body".to_owned(), s(f.body())),
    ]);
    if let Some(g) = f.group_id() {
        m.insert("group".to_owned(), s(g));
    }
    if !f.attributes().is_empty() {
        let attrs = f
            .attributes()
            .iter()
            .map(|(name, v)| {
                let mut a = HashMap::from([("type".to_owned(), s(v.data_type()))]);
                if let Some(v) = v.string_value() {
                    a.insert("string".to_owned(), s(v));
                }
                if let Some(b) = v.binary_value() {
                    a.insert(
                        "binary".to_owned(),
                        AttributeValue::B(Blob::new(b.as_ref().to_vec())),
                    );
                }
                (name.clone(), AttributeValue::M(a))
            })
            .collect();
        m.insert("attributes".to_owned(), AttributeValue::M(attrs));
    }
    AttributeValue::M(m)
}

fn from_attribute(v: &AttributeValue) -> Option<FollowUp> {
    let m = v.as_m().ok()?;
    let s = |name: &str| m.get(name).and_then(|v| v.as_s().ok()).cloned();
    let mut attributes = HashMap::new();
    if let Some(attrs) = m.get("attributes") {
        for (name, a) in attrs.as_m().ok()? {
            let a = a.as_m().ok()?;
            let mut value = MessageAttributeValue::builder().data_type(a.get("type")?.as_s().ok()?);
            if let Some(s) = a.get("string") {
                value = value.string_value(s.as_s().ok()?);
            }
            if let Some(b) = a.get("binary") {
                let bytes = b.as_b().ok()?.as_ref().to_vec();
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

    const URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/next";

    #[test]
    fn a_follow_up_survives_the_marker_round_trip() {
        let f = FollowUp::raw(URL, "j/then", "{\"a\":1}")
            .in_group("g")
            .string_attribute("tenant", "acme")
            .attribute(
                "blob",
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(aws_sdk_sqs::primitives::Blob::new(vec![0u8, 1, 2]))
                    .build()
                    .unwrap(),
            );
        let plain = FollowUp::raw(URL, "k", "x");
        let item = stored(&[f.clone(), plain.clone()]);
        assert_eq!(from_marker(&item), Ok(vec![f, plain]));
        assert_eq!(from_marker(&Item::new()), Ok(vec![]));
        let bad = Item::from([(
            FOLLOW_UPS_ATTRIBUTE.to_owned(),
            AttributeValue::S("x".into()),
        )]);
        assert!(from_marker(&bad).is_err());
    }
}
