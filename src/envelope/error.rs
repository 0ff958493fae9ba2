//! The error of an envelope that does not parse, and the hint its text
//! gives when the body looks like a job sent without its envelope: one
//! type every envelope's reading returns, kept apart from the readers.

use crate::attribute::JOB_ID_ATTRIBUTE;

use super::Envelope;

/// An envelope that does not parse. Permanent: redelivering the message
/// cannot change its body. The text names fields and JSON types only, never
/// a value from the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error(
        "{label} envelope: the body is not JSON ({detail}){hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// The body is not JSON.
    NotJson {
        /// The envelope expected.
        envelope: Envelope,
        /// The error's class and position, without serde's quoted values.
        detail: String,
    },
    #[error(
        "{label} envelope: the body is a JSON {found}, not an object{hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// The body is JSON but not an object.
    NotAnObject {
        /// The envelope expected.
        envelope: Envelope,
        /// The JSON type found.
        found: &'static str,
    },
    #[error(
        "{label} envelope: no `{field}` field{hint}",
        label = envelope.label(),
        hint = raw_hint(*envelope)
    )]
    /// A field the envelope must have is absent.
    Missing {
        /// The envelope expected.
        envelope: Envelope,
        /// The field's name.
        field: &'static str,
    },
    #[error(
        "{label} envelope: `{field}` is a JSON {found}; expected a {expected}",
        label = envelope.label()
    )]
    /// A field has the wrong JSON type.
    WrongType {
        /// The envelope expected.
        envelope: Envelope,
        /// The field's name.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
        /// The JSON type the envelope's format has there.
        expected: &'static str,
    },
    /// A body whose `Type` is not `Notification`: a subscription or
    /// unsubscription confirmation (delivered to the queue when the topic is
    /// in another account), or something that is not SNS's at all.
    #[error(
        "SNS envelope: Type is {found}, not Notification: no job in it{}",
        if *found == "SubscriptionConfirmation" {
            " (confirm the subscription with its SubscribeURL or ConfirmSubscription; idemq does not)"
        } else {
            ""
        }
    )]
    NotANotification {
        /// `SubscriptionConfirmation`, `UnsubscribeConfirmation`, or
        /// `an unknown type` (the value is not echoed).
        found: &'static str,
    },
    #[error(
        "SNS envelope: message attribute {JOB_ID_ATTRIBUTE} is of type {found}; expected String or Number"
    )]
    /// The SNS `idemq-job-id` message attribute is neither a String nor a
    /// Number.
    JobIdAttributeType {
        /// `Binary`, `String.Array`, or `an unknown type`.
        found: &'static str,
    },
}

fn raw_hint(envelope: Envelope) -> &'static str {
    match envelope {
        Envelope::Sns => {
            " (IDEMQ_ENVELOPE=sns expects SNS notifications: is raw message delivery on for this \
             subscription, or is something else sending to the queue?)"
        }
        Envelope::EventBridge => {
            " (IDEMQ_ENVELOPE=eventbridge expects whole EventBridge events: does the rule's target \
             have an input transformer or input path, or is something else sending to the queue?)"
        }
        Envelope::None => "",
    }
}
