//! Job identity: which id a message carries, and the hash of its payload.
//!
//! SQS delivers at least once and mints a new `MessageId` when a message is
//! redriven, so the id that dedup keys on is chosen by the producer and
//! travels with the message: the `idemq-job-id` attribute first, then an
//! optional JSON pointer into the body, and only then the `MessageId`.

use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use crate::envelope::Envelope;

pub(crate) use crate::attribute::first_enqueued_value;
pub use crate::attribute::{FIRST_ENQUEUED_ATTRIBUTE, IDEMQ_ATTRIBUTE_PREFIX, JOB_ID_ATTRIBUTE};

/// Longest job id accepted, in bytes. The marker key and every derived
/// idempotency key must stay well inside DynamoDB's 2 KB partition key.
pub const MAX_JOB_ID_BYTES: usize = 512;

/// A validated job id: non-empty, at most [`MAX_JOB_ID_BYTES`] bytes, no
/// control characters.
///
/// ```
/// use idemq::job::JobId;
/// let id = JobId::new("transfer-42").unwrap();
/// assert_eq!(id.as_str(), "transfer-42");
/// assert!(JobId::new("").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobId(String);

/// Why a job id was refused. Always permanent: redelivering the message
/// cannot change its id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidJobId {
    /// The id is empty.
    #[error("job id is empty")]
    Empty,
    /// The id is over [`MAX_JOB_ID_BYTES`].
    #[error("job id is {len} bytes long; the limit is {MAX_JOB_ID_BYTES}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The id holds a control character.
    #[error("job id contains control character U+{code:04X} at byte {at}")]
    ControlCharacter {
        /// The character's code point.
        code: u32,
        /// Its byte offset.
        at: usize,
    },
    /// The body pointer names something that is not a string or a number.
    #[error("job id pointer {pointer} names a {found} in the body; expected a string or a number")]
    NotAScalar {
        /// The pointer (`IDEMQ_JOB_ID_POINTER`).
        pointer: String,
        /// What it names: `boolean`, `array` or `object`.
        found: &'static str,
    },
    /// The SNS or EventBridge envelope the job should be in does not parse
    /// (`IDEMQ_ENVELOPE`, [`crate::envelope`]).
    #[error(transparent)]
    Envelope(#[from] crate::envelope::EnvelopeError),
}

impl JobId {
    /// Validates `id` and wraps it.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidJobId> {
        let id = id.into();
        if id.is_empty() {
            return Err(InvalidJobId::Empty);
        }
        if id.len() > MAX_JOB_ID_BYTES {
            return Err(InvalidJobId::TooLong { len: id.len() });
        }
        if let Some((at, c)) = id.char_indices().find(|(_, c)| c.is_control()) {
            return Err(InvalidJobId::ControlCharacter {
                code: u32::from(c),
                at,
            });
        }
        Ok(Self(id))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A deterministic idempotency key for a side effect outside DynamoDB
    /// (a card charge, an e-mail, a third-party API call): the same job and
    /// step always give the same key, so the downstream service can drop the
    /// second request. 64 lowercase hex characters (SHA-256), which fits the
    /// usual 255-character limits of such APIs and reveals nothing of the id.
    ///
    /// ```
    /// use idemq::job::JobId;
    /// let job = JobId::new("order-7").unwrap();
    /// assert_eq!(job.downstream_key("charge"), job.downstream_key("charge"));
    /// assert_ne!(job.downstream_key("charge"), job.downstream_key("email"));
    /// ```
    ///
    /// This key names no consumer: two consumers of one job (a fan-out)
    /// get the same key for the same step. Inside a handler use
    /// [`JobMeta::downstream_key`](crate::JobMeta::downstream_key),
    /// which is this key in the consumer's namespace
    /// ([`JobId::downstream_key_in`]).
    pub fn downstream_key(&self, step: &str) -> String {
        downstream_key(self, step)
    }

    /// [`JobId::downstream_key`] in `namespace`: another consumer of the
    /// same job gets another key, so a downstream service does not drop
    /// its request as the first consumer's repeat.
    ///
    /// ```
    /// use idemq::job::JobId;
    /// let job = JobId::new("order-7").unwrap();
    /// assert_ne!(job.downstream_key_in("billing", "notify"), job.downstream_key_in("emails", "notify"));
    /// assert_ne!(job.downstream_key_in("billing", "notify"), job.downstream_key("notify"));
    /// ```
    pub fn downstream_key_in(&self, namespace: &str, step: &str) -> String {
        let mut h = Sha256::new();
        h.update(b"idemq-downstream-v2\0");
        for part in [namespace, &self.0, step] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        hex::encode(h.finalize())
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for JobId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// See [`JobId::downstream_key`].
pub fn downstream_key(job: &JobId, step: &str) -> String {
    let mut h = Sha256::new();
    // Length-prefix both parts so ("ab", "c") and ("a", "bc") differ.
    h.update(b"idemq-downstream-v1\0");
    h.update((job.0.len() as u64).to_be_bytes());
    h.update(job.0.as_bytes());
    h.update((step.len() as u64).to_be_bytes());
    h.update(step.as_bytes());
    hex::encode(h.finalize())
}

/// Where a job's id was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobIdSource {
    /// The `idemq-job-id` message attribute.
    Attribute,
    /// The body, at the configured JSON pointer.
    BodyPointer,
    /// SQS's `MessageId` (a fallback: a copy sent again gets a new one).
    MessageId,
    /// The SNS `MessageId` or EventBridge event `id` of an enveloped job
    /// ([`crate::envelope`]).
    EnvelopeId,
}

/// How to find a message's job id. The attribute always wins; the body
/// pointer (RFC 6901, e.g. `/transfer_id`) is optional; `envelope` says
/// whether the job is wrapped in an SNS notification or EventBridge event
/// ([`JobIdResolver::resolve_job`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobIdResolver {
    /// A JSON pointer (RFC 6901) to the id in the body, e.g. `/transfer_id`.
    pub body_pointer: Option<String>,
    /// The envelope the job arrives in (`IDEMQ_ENVELOPE`), if any.
    pub envelope: crate::envelope::Envelope,
}

impl JobIdResolver {
    /// The attribute, then the `MessageId`: no body pointer.
    pub const fn new() -> Self {
        Self {
            body_pointer: None,
            envelope: crate::envelope::Envelope::None,
        }
    }

    /// Also looks for the id at `pointer` in the body, after the attribute.
    pub fn with_body_pointer(mut self, pointer: impl Into<String>) -> Self {
        self.body_pointer = Some(pointer.into());
        self
    }

    /// Resolves the job id of one message from its `idemq-job-id` attribute
    /// value, its body and its `MessageId`, in that order of preference
    /// (inside the envelope, if any: see [`JobIdResolver::resolve_job`]).
    ///
    /// ```
    /// use idemq::job::{JobIdResolver, JobIdSource};
    /// let r = JobIdResolver::new().with_body_pointer("/transfer_id");
    /// let (id, from) = r.resolve(None, r#"{"transfer_id":"t-1"}"#, "m-1").unwrap();
    /// assert_eq!((id.as_str(), from), ("t-1", JobIdSource::BodyPointer));
    /// ```
    pub fn resolve(
        &self,
        attribute: Option<&str>,
        body: &str,
        message_id: &str,
    ) -> Result<(JobId, JobIdSource), InvalidJobId> {
        self.resolve_job(attribute, body, message_id)
            .map(|job| (job.id, job.source))
    }

    /// [`JobIdResolver::resolve`] of a body that is the job itself.
    pub(crate) fn resolve_plain(
        &self,
        attribute: Option<&str>,
        body: &str,
        message_id: &str,
    ) -> Result<(JobId, JobIdSource), InvalidJobId> {
        if let Some(id) = attribute {
            return Ok((JobId::new(id)?, JobIdSource::Attribute));
        }
        if let Some(pointer) = &self.body_pointer {
            if let Some(id) = pointed_id(body, pointer)? {
                return Ok((JobId::new(id)?, JobIdSource::BodyPointer));
            }
            tracing::warn!(
                pointer = pointer.as_str(),
                message_id,
                "job id pointer not found in body; falling back to the MessageId, \
                 so a re-sent copy of this job will not be recognised"
            );
        }
        Ok((JobId::new(message_id)?, JobIdSource::MessageId))
    }
}

/// A message's job: its id, where the id came from, and the payload the
/// handler decodes and the hash covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedJob<'a> {
    /// The job id.
    pub id: JobId,
    /// Where the id came from.
    pub source: JobIdSource,
    /// The job itself: the body, or the message inside its envelope.
    pub payload: Cow<'a, str>,
}

impl JobIdResolver {
    /// Jobs arrive in `envelope` (default [`Envelope::None`]).
    ///
    /// ```
    /// use idemq::envelope::Envelope;
    /// use idemq::job::JobIdResolver;
    /// let r = JobIdResolver::new().with_envelope(Envelope::EventBridge);
    /// let event = r#"{"id":"e-1","detail-type":"t","source":"s","detail":{"b":1,"a":2}}"#;
    /// let job = r.resolve_job(None, event, "sqs-1").unwrap();
    /// assert_eq!((job.id.as_str(), job.payload.as_ref()), ("e-1", r#"{"a":2,"b":1}"#));
    /// ```
    pub fn with_envelope(mut self, envelope: Envelope) -> Self {
        self.envelope = envelope;
        self
    }

    /// The job in one SQS message: opens the envelope and resolves the id.
    ///
    /// `attribute` is the SQS message's own `idemq-job-id` attribute and
    /// always wins: it is what a producer sends with `SendMessage` and what
    /// idemq's own tools stamp on every copy they send (a DLQ redrive or
    /// import carries the id the consumer resolved). With an envelope, next
    /// come the envelope's `idemq-job-id` SNS message attribute, then
    /// [`JobIdResolver::body_pointer`] applied to the inner message (the SNS
    /// `Message`, the EventBridge `detail`), then the envelope's own id (SNS
    /// `MessageId`, event `id`: [`JobIdSource::EnvelopeId`]). An envelope
    /// that does not parse is [`InvalidJobId::Envelope`], a permanent
    /// failure.
    pub fn resolve_job<'a>(
        &self,
        attribute: Option<&str>,
        body: &'a str,
        message_id: &str,
    ) -> Result<ResolvedJob<'a>, InvalidJobId> {
        if self.envelope == Envelope::None {
            let (id, source) = self.resolve_plain(attribute, body, message_id)?;
            return Ok(ResolvedJob {
                id,
                source,
                payload: Cow::Borrowed(body),
            });
        }
        let opened = self.envelope.open(body)?;
        let resolved = |id: &str, source| {
            Ok(ResolvedJob {
                id: JobId::new(id)?,
                source,
                payload: opened.payload.clone(),
            })
        };
        if let Some(id) = attribute.or(opened.job_id_attribute.as_deref()) {
            return resolved(id, JobIdSource::Attribute);
        }
        if let Some(pointer) = &self.body_pointer {
            if let Some(id) = pointed_id(&opened.payload, pointer)? {
                return resolved(&id, JobIdSource::BodyPointer);
            }
            tracing::warn!(
                pointer = pointer.as_str(),
                message_id,
                envelope = self.envelope.as_str(),
                "job id pointer not found in the inner message; falling back to the envelope's id, \
                 so a re-published copy of this job will not be recognised"
            );
        }
        match opened.envelope_id.as_deref() {
            Some(id) => resolved(id, JobIdSource::EnvelopeId),
            // Every envelope that opens has an id; kept total all the same.
            None => resolved(message_id, JobIdSource::MessageId),
        }
    }
}

/// Set once this process has warned that it identifies a job by its
/// `MessageId`.
static MESSAGE_ID_IDENTITY_WARNED: AtomicBool = AtomicBool::new(false);

/// Logs, once per process, that a job was identified by its SQS
/// `MessageId` (no `idemq-job-id` attribute, no body pointer or nothing at
/// it) and what that costs. True the one time it logs.
///
/// A `MessageId` survives SQS's own redrive to the DLQ, but a copy sent
/// back by anything other than idemq's own tools (a redrive task from the
/// console or `StartMessageMoveTask`, a producer's retry, a replay script)
/// is a new message with a new `MessageId`
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>):
/// a new job to idemq, applied again.
pub(crate) fn warn_message_id_identity() -> bool {
    warn_once(&MESSAGE_ID_IDENTITY_WARNED)
}

fn warn_once(warned: &AtomicBool) -> bool {
    if warned.swap(true, Ordering::Relaxed) {
        return false;
    }
    tracing::warn!(
        "a job has no {JOB_ID_ATTRIBUTE} attribute and no id in its body (IDEMQ_JOB_ID_POINTER), \
         so idemq identifies it by its SQS MessageId. That id survives SQS's own redrive to the \
         DLQ, but a copy sent back by anything other than idemq's own tools (idemq dlq redrive / \
         import keep the id) gets a new MessageId: a console or StartMessageMoveTask redrive, a \
         producer's retry or a replay script makes it a new job, applied again. Send \
         {JOB_ID_ATTRIBUTE} (idemq::producer::Producer does) or set IDEMQ_JOB_ID_POINTER. \
         (Logged once per process.)"
    );
    true
}

/// The value at `pointer` in `body` as an id, `None` when the body is not
/// JSON or has nothing there.
pub(crate) fn pointed_id(body: &str, pointer: &str) -> Result<Option<String>, InvalidJobId> {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(body) else {
        return Ok(None);
    };
    let found = match doc.pointer(pointer) {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) => return Ok(Some(s.clone())),
        Some(serde_json::Value::Number(n)) => return Ok(Some(n.to_string())),
        Some(serde_json::Value::Bool(_)) => "boolean",
        Some(serde_json::Value::Array(_)) => "array",
        Some(serde_json::Value::Object(_)) => "object",
    };
    Err(InvalidJobId::NotAScalar {
        pointer: pointer.to_owned(),
        found,
    })
}

/// SHA-256 of a message body, hex encoded. Stored in the marker so that a
/// second delivery of the same job id can be told apart from a different job
/// that reuses the id (a conflict).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PayloadHash(String);

impl PayloadHash {
    /// The hash of `body`.
    pub fn of(body: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(body)))
    }

    /// Wraps a hash read back from a marker.
    pub fn from_hex(hex: impl Into<String>) -> Self {
        Self(hex.into())
    }

    /// The hash as lowercase hex.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PayloadHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_wins_over_pointer_and_message_id() {
        let r = JobIdResolver::new().with_body_pointer("/id");
        let (id, from) = r.resolve(Some("attr"), r#"{"id":"body"}"#, "msg").unwrap();
        assert_eq!(id.as_str(), "attr");
        assert_eq!(from, JobIdSource::Attribute);
    }

    #[test]
    fn pointer_then_message_id() {
        let r = JobIdResolver::new().with_body_pointer("/a/b");
        let (id, from) = r.resolve(None, r#"{"a":{"b":"x-1"}}"#, "msg").unwrap();
        assert_eq!((id.as_str(), from), ("x-1", JobIdSource::BodyPointer));

        let (id, from) = r.resolve(None, r#"{"a":{"b":17}}"#, "msg").unwrap();
        assert_eq!((id.as_str(), from), ("17", JobIdSource::BodyPointer));

        for body in [r#"{"a":{}}"#, "not json", r#"{"a":{"b":null}}"#] {
            let (id, from) = r.resolve(None, body, "msg").unwrap();
            assert_eq!(
                (id.as_str(), from),
                ("msg", JobIdSource::MessageId),
                "{body}"
            );
        }

        let (id, from) = JobIdResolver::new()
            .resolve(None, r#"{"a":{"b":"x"}}"#, "msg")
            .unwrap();
        assert_eq!((id.as_str(), from), ("msg", JobIdSource::MessageId));
    }

    #[test]
    fn pointer_to_a_non_scalar_is_refused() {
        let r = JobIdResolver::new().with_body_pointer("/a");
        let err = r.resolve(None, r#"{"a":{"b":1}}"#, "msg").unwrap_err();
        assert_eq!(
            err,
            InvalidJobId::NotAScalar {
                pointer: "/a".into(),
                found: "object"
            }
        );
        assert!(err.to_string().contains("/a"));
    }

    #[test]
    fn validation() {
        assert_eq!(JobId::new(""), Err(InvalidJobId::Empty));
        assert!(JobId::new("a".repeat(512)).is_ok());
        assert_eq!(
            JobId::new("a".repeat(513)),
            Err(InvalidJobId::TooLong { len: 513 })
        );
        // Multi-byte characters count in bytes, not characters.
        assert_eq!(
            JobId::new("é".repeat(257)),
            Err(InvalidJobId::TooLong { len: 514 })
        );
        assert_eq!(
            JobId::new("ab\ncd"),
            Err(InvalidJobId::ControlCharacter { code: 0x0a, at: 2 })
        );
        assert!(matches!(
            JobId::new("x\u{7f}"),
            Err(InvalidJobId::ControlCharacter { code: 0x7f, .. })
        ));
        assert!(JobId::new("ünïcode-ok ✓").is_ok());
        // An invalid attribute is an error, not a fallback to the MessageId.
        let r = JobIdResolver::new();
        assert_eq!(r.resolve(Some(""), "{}", "msg"), Err(InvalidJobId::Empty));
        assert!(
            JobId::new("a\tb")
                .unwrap_err()
                .to_string()
                .contains("U+0009")
        );
    }

    /// A writer that keeps what the log subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn message_id_identity_is_warned_once_per_process() {
        let log = Captured::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let warned = AtomicBool::new(false);
        let said: Vec<bool> = tracing::subscriber::with_default(subscriber, || {
            (0..5).map(|_| warn_once(&warned)).collect()
        });
        assert_eq!(said, [true, false, false, false, false]);
        let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        for want in [
            "WARN",
            "no idemq-job-id attribute",
            "SQS MessageId",
            "new MessageId",
            "applied again",
            "IDEMQ_JOB_ID_POINTER",
            "once per process",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }

        // Racing threads: exactly one warns.
        let warned = std::sync::Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let w = std::sync::Arc::clone(&warned);
                std::thread::spawn(move || warn_once(&w))
            })
            .collect();
        let warnings = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|w| *w)
            .count();
        assert_eq!(warnings, 1);
        // The process-wide flag: whatever warned before, never twice.
        warn_message_id_identity();
        assert!(!warn_message_id_identity());
    }

    #[test]
    fn payload_hash_is_sha256_hex() {
        assert_eq!(
            PayloadHash::of(b"abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn downstream_keys_are_stable_and_distinct() {
        let a = JobId::new("ab").unwrap();
        let b = JobId::new("a").unwrap();
        assert_eq!(a.downstream_key("c"), downstream_key(&a, "c"));
        assert_ne!(a.downstream_key("c"), b.downstream_key("bc"));
        assert_eq!(a.downstream_key("c").len(), 64);
        // Pinned: a key handed to a payment API must never change between
        // releases, or a redelivery after an upgrade would charge twice.
        // (Computed independently: sha256(b"idemq-downstream-v1\0" +
        // u64be(len) + "order-7" + u64be(len) + "charge").)
        assert_eq!(
            JobId::new("order-7").unwrap().downstream_key("charge"),
            "b8084f76844065a1cda3cf84c2f04c8287c661176578d816b601cfae5556484b"
        );
    }
}
