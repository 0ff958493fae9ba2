//! The SQS message attributes idemq reads and writes on a job's messages.
//!
//! A leaf module: [`crate::job`] re-exports these names, and the modules that
//! only need an attribute's name (the envelopes, the dead-letter sender, the
//! producers) import them from here without pulling in job identity.

/// Name of the SQS message attribute that carries the job id.
pub const JOB_ID_ATTRIBUTE: &str = "idemq-job-id";
/// Name of the SQS message attribute that carries when the job's first copy
/// was enqueued (epoch milliseconds, as SQS's `SentTimestamp`), on every
/// copy idemq makes of a job after the first: its own dead-letter send, a
/// redrive, an import, a follow-up re-sent from a marker. A copy restarts
/// SQS's retention and gets a new `SentTimestamp`, so this is what tells a
/// consumer how old the job really is, against its markers' lifetime. A
/// message without it is its job's first copy: its `SentTimestamp` is the
/// first-enqueued time (a native source-to-DLQ redrive keeps it).
pub const FIRST_ENQUEUED_ATTRIBUTE: &str = "idemq-first-enqueued";
/// `at` as the value of [`FIRST_ENQUEUED_ATTRIBUTE`]: a String of epoch
/// milliseconds, as SQS writes `SentTimestamp`.
pub(crate) fn first_enqueued_value(
    at: std::time::SystemTime,
) -> aws_sdk_sqs::types::MessageAttributeValue {
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(ms.to_string())
        .build()
        .expect("data type and value are set")
}

/// Every message attribute idemq reads or writes starts with this; a copy
/// idemq sends again drops them and sets its own.
pub const IDEMQ_ATTRIBUTE_PREFIX: &str = "idemq-";
