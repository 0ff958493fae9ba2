//! Dead letters as JSON lines: to archive them, or to move them between
//! accounts. One message per line, with every attribute, its FIFO fields
//! and its context; an import sends each line back exactly as it was.

use std::collections::HashMap;

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::peek::{Context, DeadMessage};
use crate::producer::Job;

/// One exported dead letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    pub message_id: String,
    pub body: String,
    pub attributes: HashMap<String, Attribute>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplication_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_arn: Option<String>,
    /// Why it died, for the reader; not sent on import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
}

/// A message attribute; binary values in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    pub data_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
}

impl Archived {
    pub fn of(msg: &DeadMessage, context: &Context) -> Self {
        let attributes = msg
            .attributes
            .iter()
            .map(|(k, v)| {
                let a = Attribute {
                    data_type: v.data_type().to_owned(),
                    string_value: v.string_value().map(str::to_owned),
                    binary_value: v.binary_value().map(|b| BASE64.encode(b.as_ref())),
                };
                (k.clone(), a)
            })
            .collect();
        Self {
            message_id: msg.message_id.clone(),
            body: msg.body.clone(),
            attributes,
            group_id: msg.group_id().map(str::to_owned),
            deduplication_id: msg.deduplication_id().map(str::to_owned),
            source_arn: msg.source_arn().map(str::to_owned),
            context: serde_json::to_value(context).ok(),
        }
    }

    /// The job that sends this message again as it was.
    pub fn to_job(&self) -> Result<Job, String> {
        let mut attributes = HashMap::new();
        for (name, a) in &self.attributes {
            let mut v = MessageAttributeValue::builder()
                .data_type(&a.data_type)
                .set_string_value(a.string_value.clone());
            if let Some(b) = &a.binary_value {
                let bytes = BASE64
                    .decode(b)
                    .map_err(|e| format!("attribute {name}: binary value is not base64: {e}"))?;
                v = v.binary_value(Blob::new(bytes));
            }
            attributes.insert(
                name.clone(),
                v.build().map_err(|e| format!("attribute {name}: {e}"))?,
            );
        }
        let id = attributes
            .get(crate::job::JOB_ID_ATTRIBUTE)
            .and_then(|v| v.string_value())
            .unwrap_or(&self.message_id)
            .to_owned();
        Ok(Job::as_received(
            id,
            self.body.clone(),
            attributes,
            self.group_id.clone(),
            self.deduplication_id.clone(),
        ))
    }
}

/// Parses an export: one [`Archived`] per non-blank line, or the line
/// number and why not.
pub fn parse(input: &str) -> Vec<(usize, Result<Archived, String>)> {
    input
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            (
                i + 1,
                serde_json::from_str(l).map_err(|e| format!("not an exported dead letter: {e}")),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;

    #[test]
    fn a_dead_letter_round_trips_byte_for_byte() {
        let mut attributes = HashMap::new();
        let s = MessageAttributeValue::builder()
            .data_type("String")
            .string_value("j-1")
            .build()
            .unwrap();
        let b = MessageAttributeValue::builder()
            .data_type("Binary.gz")
            .binary_value(Blob::new(vec![0u8, 159, 255]))
            .build()
            .unwrap();
        let n = MessageAttributeValue::builder()
            .data_type("Number")
            .string_value("42")
            .build()
            .unwrap();
        attributes.insert("idemq-job-id".to_string(), s);
        attributes.insert("blob".to_string(), b);
        attributes.insert("n".to_string(), n);
        let msg = DeadMessage {
            message_id: "m-1".into(),
            receipt_handle: "rh".into(),
            body: "{\"x\": \"ünïcode\"}".into(),
            attributes: attributes.clone(),
            system: HashMap::from([
                (Sys::MessageGroupId, "g".to_string()),
                (Sys::MessageDeduplicationId, "d".to_string()),
            ]),
        };
        let a = Archived::of(&msg, &Context::of(&msg, None));
        let line = serde_json::to_string(&a).unwrap();
        let parsed = parse(&format!("\n{line}\nnot json\n"));
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].0, 2);
        let back = parsed[0].1.as_ref().unwrap();
        assert_eq!(back, &a);
        assert!(
            parsed[1]
                .1
                .as_ref()
                .unwrap_err()
                .contains("not an exported dead letter")
        );

        let job = back.to_job().unwrap();
        assert_eq!(job.id, "j-1");
        assert_eq!(job.body, msg.body);
        // The producer's attributes go back byte for byte; idemq's own are
        // dropped and `idemq-job-id` is set again from the job id.
        let mut producers = attributes.clone();
        producers.remove("idemq-job-id");
        assert_eq!(job.attributes, producers);
        assert!(job.set_id_attribute);
        assert_eq!(job.group_id.as_deref(), Some("g"));
        assert_eq!(job.deduplication_id.as_deref(), Some("d"));
    }
}
