//! The SNS envelope: the notification an SQS subscription with raw message
//! delivery off receives, opened to its `Message` and its `idemq-job-id`
//! message attribute.

use std::borrow::Cow;

use serde_json::Value;

use crate::attribute::JOB_ID_ATTRIBUTE;

use super::fields::{kind, named_string_field, parse_object, string_field};
use super::{Envelope, EnvelopeError, Opened};

/// An SNS notification as SNS delivers it to an SQS queue with raw message
/// delivery off: `Type` `Notification`, `MessageId`, `Message` (the
/// published string), and the publish's `MessageAttributes` as
/// `{"name": {"Type": "String", "Value": "…"}}`
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>).
/// `TopicArn`, `Timestamp`, `Signature` and the URLs are not needed to find
/// the job and are not checked (idemq does not verify signatures: the
/// queue's policy decides who may send to it).
pub(super) fn open_sns(body: &str) -> Result<Opened<'static>, EnvelopeError> {
    const E: Envelope = Envelope::Sns;
    let mut doc = parse_object(E, body)?;
    let kind_of_message = string_field(E, &mut doc, "Type")?;
    if kind_of_message != "Notification" {
        let found = match kind_of_message.as_str() {
            "SubscriptionConfirmation" => "SubscriptionConfirmation",
            "UnsubscribeConfirmation" => "UnsubscribeConfirmation",
            _ => "an unknown type",
        };
        return Err(EnvelopeError::NotANotification { found });
    }
    let message_id = string_field(E, &mut doc, "MessageId")?;
    let message = string_field(E, &mut doc, "Message")?;
    let job_id_attribute = match doc.remove("MessageAttributes") {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut attributes)) => match attributes.remove(JOB_ID_ATTRIBUTE) {
            None => None,
            Some(Value::Object(mut attribute)) => {
                let field = "MessageAttributes.idemq-job-id.Type";
                let data_type = match attribute.remove("Type") {
                    Some(Value::String(t)) => t,
                    None => return Err(EnvelopeError::Missing { envelope: E, field }),
                    Some(other) => {
                        return Err(EnvelopeError::WrongType {
                            envelope: E,
                            field,
                            found: kind(&other),
                            expected: "string",
                        });
                    }
                };
                match data_type.as_str() {
                    "String" | "Number" => {}
                    "Binary" => return Err(EnvelopeError::JobIdAttributeType { found: "Binary" }),
                    "String.Array" => {
                        return Err(EnvelopeError::JobIdAttributeType {
                            found: "String.Array",
                        });
                    }
                    _ => {
                        return Err(EnvelopeError::JobIdAttributeType {
                            found: "an unknown type",
                        });
                    }
                }
                Some(named_string_field(
                    E,
                    &mut attribute,
                    "Value",
                    "MessageAttributes.idemq-job-id.Value",
                )?)
            }
            Some(other) => {
                return Err(EnvelopeError::WrongType {
                    envelope: E,
                    field: "MessageAttributes.idemq-job-id",
                    found: kind(&other),
                    expected: "object",
                });
            }
        },
        Some(other) => {
            return Err(EnvelopeError::WrongType {
                envelope: E,
                field: "MessageAttributes",
                found: kind(&other),
                expected: "object",
            });
        }
    };
    Ok(Opened {
        payload: Cow::Owned(message),
        job_id_attribute,
        envelope_id: Some(message_id),
    })
}
