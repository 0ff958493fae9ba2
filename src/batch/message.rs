//! One received SQS message, whichever host received it, and what the
//! batch reads of its attributes (receive count, first enqueue, job id).

use super::*;

/// One received SQS message, whichever host received it.
#[derive(Debug, Clone)]
pub struct Message {
    /// SQS's `MessageId`.
    pub message_id: String,
    /// The receipt handle of the receive that returned it.
    pub receipt_handle: String,
    /// The body, as sent.
    pub body: String,
    /// Its message attributes (`idemq-job-id` among them, when set).
    pub attributes: HashMap<String, MessageAttributeValue>,
    /// `ApproximateReceiveCount`: 1 on the first delivery.
    pub receive_count: u32,
    /// `MessageGroupId`: FIFO queues only.
    pub group_id: Option<String>,
    /// When the receive that issued `receipt_handle` happened, for SQS's
    /// 12-hour limit on time in flight.
    pub received_at: Instant,
    /// When the message was sent to this queue (`SentTimestamp`), from which
    /// SQS counts its retention; `None` if SQS did not say.
    pub sent_at: Option<SystemTime>,
}

impl Message {
    /// A message as the SDK received it, or `None` (logged) when SQS left out
    /// something every message has.
    pub fn from_sdk(m: &aws_sdk_sqs::types::Message, received_at: Instant) -> Option<Self> {
        let (Some(id), Some(handle)) = (m.message_id(), m.receipt_handle()) else {
            tracing::error!("received a message without id or receipt handle; leaving it");
            return None;
        };
        let system = m.attributes();
        let sys = |name: MessageSystemAttributeName| system.and_then(|a| a.get(&name)).cloned();
        Some(Self {
            message_id: id.to_owned(),
            receipt_handle: handle.to_owned(),
            body: m.body().unwrap_or_default().to_owned(),
            attributes: m.message_attributes().cloned().unwrap_or_default(),
            receive_count: sys(MessageSystemAttributeName::ApproximateReceiveCount)
                .and_then(|n| n.parse().ok())
                .unwrap_or(1),
            group_id: sys(MessageSystemAttributeName::MessageGroupId),
            received_at,
            sent_at: sys(MessageSystemAttributeName::SentTimestamp)
                .as_deref()
                .and_then(epoch_ms),
        })
    }

    pub(super) fn job_id_attribute(&self) -> Option<&str> {
        self.attributes.get(JOB_ID_ATTRIBUTE)?.string_value()
    }

    /// When the job's first copy was enqueued: the
    /// [`FIRST_ENQUEUED_ATTRIBUTE`](crate::job::FIRST_ENQUEUED_ATTRIBUTE)
    /// a later copy carries, else this message's `SentTimestamp`; `None`
    /// if neither is there (or the attribute is not epoch milliseconds).
    pub fn first_enqueued(&self) -> Option<SystemTime> {
        match self.attributes.get(crate::job::FIRST_ENQUEUED_ATTRIBUTE) {
            Some(v) => v.string_value().and_then(epoch_ms),
            None => self.sent_at,
        }
    }

    /// How long the message has been on this queue at `now`; zero if its
    /// `SentTimestamp` is ahead of this host's clock.
    pub fn age(&self, now: SystemTime) -> Option<Duration> {
        self.sent_at
            .map(|sent| now.duration_since(sent).unwrap_or_default())
    }
}

/// An SQS timestamp attribute (`SentTimestamp`: epoch milliseconds).
pub(crate) fn epoch_ms(value: &str) -> Option<SystemTime> {
    let ms: u64 = value.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}
