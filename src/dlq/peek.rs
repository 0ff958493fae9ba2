//! Reading a DLQ without consuming it.
//!
//! SQS has no "peek": a message is read by receiving it. A scan receives
//! every message once, holding each invisible for a short while so it is not
//! seen twice, and then makes them all visible again. Nothing is deleted,
//! and a DLQ has no redrive policy of its own, so the extra receives push
//! nothing anywhere.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName as Sys, QueueAttributeName,
};
use serde::Serialize;

use super::records::Records;
use crate::dead_letter::{
    ATTR_ATTEMPTS, ATTR_BACKTRACE, ATTR_DEPLOY, ATTR_ERROR, ATTR_FAILED_AT, ATTR_SOURCE_QUEUE,
    DlqError, FailureRecord, LetterKey, parse_deploy,
};
use crate::job::{InvalidJobId, JOB_ID_ATTRIBUTE, JobIdResolver, JobIdSource};

/// A message in a DLQ, as received.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadMessage {
    /// Its `MessageId` in the DLQ.
    pub message_id: String,
    /// The receipt handle of the receive that returned it.
    pub receipt_handle: String,
    /// The body, as sent.
    pub body: String,
    /// Its message attributes.
    pub attributes: HashMap<String, MessageAttributeValue>,
    /// Its system attributes (`SentTimestamp`, `MessageGroupId`,
    /// `DeadLetterQueueSourceArn`, …).
    pub system: HashMap<Sys, String>,
}

impl DeadMessage {
    /// A received message, or `None` if SQS left out its id or handle.
    pub fn from_sdk(m: &aws_sdk_sqs::types::Message) -> Option<Self> {
        Some(Self {
            message_id: m.message_id()?.to_owned(),
            receipt_handle: m.receipt_handle()?.to_owned(),
            body: m.body().unwrap_or_default().to_owned(),
            attributes: m.message_attributes().cloned().unwrap_or_default(),
            system: m.attributes().cloned().unwrap_or_default(),
        })
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attributes.get(name)?.string_value()
    }

    /// The `idemq-job-id` attribute, if any.
    pub fn job_id(&self) -> Option<&str> {
        self.attr(JOB_ID_ATTRIBUTE)
    }

    /// The `idemq-source-queue` attribute idemq's own dead-lettering sets.
    /// Any sender can set it too: trust it only where SQS confirms it.
    pub fn source_queue_attribute(&self) -> Option<&str> {
        self.attr(ATTR_SOURCE_QUEUE)
    }

    /// `MessageGroupId` (FIFO).
    pub fn group_id(&self) -> Option<&str> {
        self.system.get(&Sys::MessageGroupId).map(String::as_str)
    }

    /// `MessageDeduplicationId` (FIFO).
    pub fn deduplication_id(&self) -> Option<&str> {
        self.system
            .get(&Sys::MessageDeduplicationId)
            .map(String::as_str)
    }

    /// The queue SQS's redrive moved it from (not set on messages idemq
    /// dead-lettered itself: those carry `idemq-source-queue`).
    pub fn source_arn(&self) -> Option<&str> {
        self.system
            .get(&Sys::DeadLetterQueueSourceArn)
            .map(String::as_str)
    }

    /// Its `SentTimestamp`: when idemq sent it to the DLQ; for a message
    /// SQS's redrive moved there, when it was first sent to its *standard*
    /// source queue (a FIFO DLQ resets it)
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>:
    /// "When a message is moved to a dead-letter queue, the enqueue
    /// timestamp is unchanged").
    pub fn sent_at(&self) -> Option<SystemTime> {
        let ms: u64 = self.system.get(&Sys::SentTimestamp)?.parse().ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The `idemq-first-enqueued` attribute: when the job's first copy was
    /// enqueued, carried by every copy idemq makes (its own dead letters, a
    /// redrive, an import). `None` if absent or not epoch milliseconds.
    pub fn first_enqueued_attribute(&self) -> Option<SystemTime> {
        self.attr(crate::job::FIRST_ENQUEUED_ATTRIBUTE)
            .and_then(crate::batch::epoch_ms)
    }

    /// When the letter's job was first enqueued, at the latest: its
    /// `idemq-first-enqueued`, else its `SentTimestamp`, less
    /// `unstamped_shift` unless SQS's redrive moved it into a *standard*
    /// DLQ (`fifo_dlq` false and `DeadLetterQueueSourceArn` set). Only
    /// there does `SentTimestamp` keep the job's first enqueue: "For
    /// standard queues, [...] When a message is moved to a dead-letter
    /// queue, the enqueue timestamp is unchanged", while "For FIFO queues,
    /// the enqueue timestamp resets when the message is moved to a
    /// dead-letter queue"
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>);
    /// and a letter that idemq sent without the attribute (before it
    /// carried one, or with no slot left for it) was sent when it died. In
    /// both cases the job sat at most its source queue's retention on that
    /// queue first: `unstamped_shift` is that retention, so the age is
    /// never understated.
    pub fn first_enqueued(&self, fifo_dlq: bool, unstamped_shift: Duration) -> Option<SystemTime> {
        if let Some(at) = self.first_enqueued_attribute() {
            return Some(at);
        }
        let sent = self.sent_at()?;
        if !fifo_dlq && self.source_arn().is_some() {
            return Some(sent);
        }
        Some(sent.checked_sub(unstamped_shift).unwrap_or(UNIX_EPOCH))
    }

    /// Its `ApproximateFirstReceiveTimestamp`: when some reader first
    /// received it, by SQS's clock; so no later than SQS's "now" at any
    /// receive that returned it.
    pub fn first_received_at(&self) -> Option<SystemTime> {
        let ms: u64 = self
            .system
            .get(&Sys::ApproximateFirstReceiveTimestamp)?
            .parse()
            .ok()?;
        Some(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// The job id the consumer resolved for this message, and where it
    /// came from: the `idemq-job-id` attribute, else the body pointer, else
    /// the MessageId. For a message SQS's own redrive moved here, the
    /// MessageId is the one the consumer saw: SQS moves the message itself
    /// to the DLQ (its enqueue timestamp unchanged,
    /// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>;
    /// on FIFO its deduplication id becomes "the original message's ID"),
    /// and only a move *back* mints a new MessageId
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
    /// `tests/dlq_cli.rs` measures it on the local stack.
    pub fn resolve(&self, resolver: &JobIdResolver) -> Result<(String, JobIdSource), InvalidJobId> {
        // The resolver warns when the pointer finds nothing, a warning for
        // the consumer: the CLI stamps the MessageId on every copy it sends,
        // so the warning would be wrong here, and once per message.
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            resolver.resolve(self.job_id(), &self.body, &self.message_id)
        })
        .map(|(id, from)| (id.as_str().to_owned(), from))
    }

    /// The key its failure record is stored under, as the consumer wrote it:
    /// `(resolved job id, message id)`, or `(None, message id)` when no
    /// valid job id resolves.
    pub fn record_key(&self, resolver: &JobIdResolver) -> (Option<String>, String) {
        (
            self.resolve(resolver).ok().map(|(id, _)| id),
            self.message_id.clone(),
        )
    }
}

/// Why a dead letter died, from its failure record and its own attributes
/// (the record wins: it has the whole chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Context {
    /// The job id, when one could be resolved.
    pub job_id: Option<String>,
    /// The DLQ `MessageId`.
    pub message_id: String,
    /// Attempts made, from the failure record or `idemq-attempts`.
    pub attempts: Option<u32>,
    /// The outermost error of the last attempt.
    pub last_error: Option<String>,
    /// The rest of its `source()` chain, outermost first.
    pub error_chain: Vec<String>,
    /// When the last attempt failed (without a record or attribute: the
    /// message's [`DeadMessage::sent_at`]).
    #[serde(serialize_with = "ser_time")]
    pub failed_at: Option<SystemTime>,
    /// The source queue's name.
    pub source_queue: Option<String>,
    /// Which deploy failed it ([`crate::failure::deploy`]), from the
    /// failure record or `idemq-deploy`.
    pub deploy: Option<String>,
    /// The idemq version of the consumer that failed it.
    pub idemq_version: Option<String>,
    /// Where it failed (a handler's error or panic): the user's frames
    /// first, from the failure record or `idemq-backtrace`.
    pub backtrace: Option<String>,
    /// The body's size in bytes (never the body itself).
    pub payload_bytes: usize,
    /// Whether the consumer's failure record of this letter was found
    /// (else the context is only what the letter's attributes carry).
    pub failure_record: bool,
}

fn ser_time<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string()),
        None => s.serialize_none(),
    }
}

impl Context {
    /// `job_id`: the id the consumer resolved (see [`DeadMessage::resolve`]).
    pub fn of(msg: &DeadMessage, job_id: Option<&str>, record: Option<&FailureRecord>) -> Self {
        let source_from_arn = msg
            .source_arn()
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned);
        Self {
            job_id: job_id
                .or(msg.job_id())
                .map(str::to_owned)
                .or_else(|| record.and_then(|r| r.job_id.clone())),
            message_id: msg.message_id.clone(),
            attempts: record
                .map(|r| r.attempt)
                .or_else(|| msg.attr(ATTR_ATTEMPTS).and_then(|a| a.parse().ok())),
            last_error: record
                .map(|r| r.failure.error.clone())
                .or_else(|| msg.attr(ATTR_ERROR).map(str::to_owned)),
            error_chain: record.map(|r| r.failure.chain.clone()).unwrap_or_default(),
            failed_at: record
                .map(|r| r.failed_at)
                .or_else(|| {
                    msg.attr(ATTR_FAILED_AT)
                        .and_then(|t| humantime::parse_rfc3339(t).ok())
                })
                .or_else(|| msg.sent_at()),
            // The consumer's record, then SQS's own DeadLetterQueueSourceArn,
            // and only then the attribute, which any sender can write.
            source_queue: record
                .map(|r| r.source_queue.clone())
                .filter(|q| !q.is_empty())
                .or(source_from_arn)
                .or_else(|| msg.attr(ATTR_SOURCE_QUEUE).map(str::to_owned)),
            deploy: record
                .map(|r| r.deploy.clone())
                .or_else(|| msg.attr(ATTR_DEPLOY).map(|a| parse_deploy(a).0))
                .filter(|d| !d.is_empty()),
            idemq_version: record
                .map(|r| r.idemq_version.clone())
                .or_else(|| msg.attr(ATTR_DEPLOY).map(|a| parse_deploy(a).1))
                .filter(|v| !v.is_empty()),
            backtrace: record
                .map(|r| r.failure.backtrace.clone())
                .unwrap_or_else(|| msg.attr(ATTR_BACKTRACE).map(str::to_owned))
                .filter(|b| !b.is_empty()),
            payload_bytes: msg.body.len(),
            failure_record: record.is_some(),
        }
    }

    /// Which deploy failed it, on one line: `7 (idemq 0.1.0)`, `-` where
    /// neither is known.
    pub fn deploy_line(&self) -> String {
        match (self.deploy.as_deref(), self.idemq_version.as_deref()) {
            (None, None) => "-".to_owned(),
            (Some(d), None) => d.to_owned(),
            (d, Some(v)) => format!("{} (idemq {v})", d.unwrap_or("-")),
        }
    }

    /// The error and its chain on one line.
    pub fn error_line(&self) -> String {
        let mut parts: Vec<&str> = self.last_error.iter().map(String::as_str).collect();
        parts.extend(self.error_chain.iter().map(String::as_str));
        parts.join(": ").replace(['\n', '\r'], " ")
    }
}

/// Depth as SQS reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Depth {
    /// `ApproximateNumberOfMessages`.
    pub visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible`: held by a reader.
    pub in_flight: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
}

impl Depth {
    /// All three.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// A DLQ's messages as one scan read them.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every message read, once each, in first-receive order, each with its
    /// newest receipt handle. Held invisible until [`Peek::release`].
    pub messages: Vec<DeadMessage>,
    /// About how many messages the DLQ holds that the scan could not read
    /// (FIFO groups blocked behind messages it holds, or letters that
    /// arrived during the scan); 0 on a standard queue.
    pub unseen: u64,
}

/// Which messages a scan has seen, and which FIFO groups may hide more.
///
/// SQS returns no further message of a FIFO group while one of its
/// messages is in flight, and a scan holds every message it reads; so a
/// group whose messages filled a 10-message response may have more behind
/// them that no receive will return. Releasing that group alone (and
/// holding the rest) lets the next receive return it again from its head
/// with what follows
/// (<https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned>:
/// "Inflight messages block delivery of available messages within the same
/// message group"; "SQS returns as many messages with the same message
/// group ID as possible").
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    seen: HashSet<String>,
    cut: BTreeSet<String>,
}

impl Sweep {
    /// Notes one receive's messages; returns which of them are new.
    /// Counting by MessageId keeps counts true however often a message
    /// comes back.
    pub fn note(&mut self, batch: &[DeadMessage]) -> Vec<bool> {
        let fresh: Vec<bool> = batch
            .iter()
            .map(|m| self.seen.insert(m.message_id.clone()))
            .collect();
        // A group can only be cut short by a full response, and it can only
        // grow when the response brought something new of it: so each
        // release of a group is paid for by a new message, and the sweep
        // ends.
        if batch.len() >= MAX_RECEIVE {
            for (m, new) in batch.iter().zip(&fresh) {
                if let (true, Some(g)) = (new, m.group_id()) {
                    self.cut.insert(g.to_owned());
                }
            }
        }
        fresh
    }

    /// The next FIFO group that may have unread messages behind the ones
    /// held.
    pub fn next_cut(&mut self) -> Option<String> {
        self.cut.pop_first()
    }

    pub fn seen(&self) -> usize {
        self.seen.len()
    }
}

/// Messages one `ReceiveMessage` returns at most.
const MAX_RECEIVE: usize = 10;

/// Scans one DLQ.
#[derive(Debug, Clone)]
pub struct Peek {
    sqs: aws_sdk_sqs::Client,
    dlq_url: String,
    hold: Duration,
    fifo: bool,
}

impl Peek {
    /// `hold`: how long each received message stays invisible during the
    /// scan; it must outlast the scan, or messages are seen twice (which
    /// the scan notices and skips). A FIFO queue's name ends in `.fifo`
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html>).
    pub fn new(sqs: aws_sdk_sqs::Client, dlq_url: impl Into<String>, hold: Duration) -> Self {
        let dlq_url = dlq_url.into();
        Self {
            fifo: dlq_url.ends_with(".fifo"),
            sqs,
            dlq_url,
            hold,
        }
    }

    /// Whether the DLQ is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// The DLQ's approximate depth.
    pub async fn depth(&self) -> Result<Depth, DlqError> {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.dlq_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        let get = |n: QueueAttributeName| {
            out.attributes()
                .and_then(|a| a.get(&n))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(Depth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }

    /// Receives up to 10 messages, held invisible for `hold`.
    pub async fn receive(&self) -> Result<Vec<DeadMessage>, DlqError> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.dlq_url)
            .max_number_of_messages(MAX_RECEIVE as i32)
            .wait_time_seconds(1)
            .visibility_timeout(i32::try_from(self.hold.as_secs()).unwrap_or(43_200).max(1))
            .message_attribute_names("All")
            // `SentTimestamp` among them: a letter without
            // `idemq-first-enqueued` is dated by it (`first_enqueued`), and
            // SQS returns system attributes only when asked
            // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html>,
            // `MessageSystemAttributeNames`).
            .message_system_attribute_names(Sys::All)
            .send()
            .await
            .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
        Ok(out
            .messages()
            .iter()
            .filter_map(DeadMessage::from_sdk)
            .collect())
    }

    /// Every message of the DLQ once (up to `limit`), in receive order.
    /// Call [`Peek::release`] afterwards to make them visible again.
    ///
    /// On a FIFO queue, each group a full response may have cut short is
    /// then released alone and read again from its head, until no group
    /// brings anything new; what still could not be read is counted in
    /// [`Scan::unseen`].
    pub async fn scan(
        &self,
        limit: Option<usize>,
        mut progress: impl FnMut(usize),
    ) -> Result<Scan, DlqError> {
        let mut sweep = Sweep::default();
        let mut order: Vec<String> = Vec::new();
        let mut held: HashMap<String, DeadMessage> = HashMap::new();
        let full = |n: usize| limit.is_some_and(|l| n >= l);
        let mut take = |batch: Vec<DeadMessage>,
                        sweep: &mut Sweep,
                        order: &mut Vec<String>,
                        held: &mut HashMap<String, DeadMessage>| {
            let fresh = sweep.note(&batch);
            let mut any = false;
            for (m, new) in batch.into_iter().zip(fresh) {
                if new {
                    if full(order.len()) {
                        // Past the limit: not part of the scan.
                        continue;
                    }
                    order.push(m.message_id.clone());
                    any = true;
                }
                // The newest receipt handle is the one that can release it.
                held.insert(m.message_id.clone(), m);
            }
            if any {
                progress(order.len());
            }
            any
        };
        let mut empty = 0;
        // Two empty long polls in a row: the queue has nothing visible left
        // to give.
        while empty < 2 && !full(order.len()) {
            let batch = self.receive().await?;
            if take(batch, &mut sweep, &mut order, &mut held) {
                empty = 0;
            } else {
                empty += 1;
            }
        }
        if self.fifo {
            while !full(order.len()) {
                let Some(group) = sweep.next_cut() else { break };
                let of_group: Vec<DeadMessage> = held
                    .values()
                    .filter(|m| m.group_id() == Some(group.as_str()))
                    .cloned()
                    .collect();
                self.release(&of_group).await;
                let batch = self.receive().await?;
                take(batch, &mut sweep, &mut order, &mut held);
            }
        }
        let unseen = if self.fifo && !full(order.len()) {
            self.unseen(held.len()).await?
        } else {
            0
        };
        // Messages received past the limit are held too: release them.
        let (messages, extra): (Vec<DeadMessage>, Vec<DeadMessage>) = {
            let mut messages = Vec::with_capacity(order.len());
            for id in &order {
                if let Some(m) = held.remove(id) {
                    messages.push(m);
                }
            }
            (messages, held.into_values().collect())
        };
        self.release(&extra).await;
        Ok(Scan { messages, unseen })
    }

    /// About how many messages the DLQ holds beyond the `present` this
    /// process has read and still holds. Approximate, as SQS's counts are
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html>).
    pub async fn unseen(&self, present: usize) -> Result<u64, DlqError> {
        Ok(self.depth().await?.total().saturating_sub(present as u64))
    }

    /// Makes messages visible again at once (10 per call). Handles that
    /// expired meanwhile are already visible: nothing to do for them.
    pub async fn release(&self, messages: &[DeadMessage]) {
        let entries: Vec<(&str, &str, Duration)> = messages
            .iter()
            .map(|m| {
                (
                    m.message_id.as_str(),
                    m.receipt_handle.as_str(),
                    Duration::ZERO,
                )
            })
            .collect();
        crate::queue::change_visibility(&self.sqs, &self.dlq_url, &entries).await;
    }

    /// The DLQ's URL.
    pub fn dlq_url(&self) -> &str {
        &self.dlq_url
    }

    /// The SQS client it reads with.
    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        &self.sqs
    }
}

/// The context of each of `messages`: its failure record, read from
/// `records` under the key the consumer stored it under (resolved with
/// `resolver`; 100 keys per `BatchGetItem`), joined with the message's own
/// attributes (from those alone without `records`). In the order of
/// `messages`, each with its record key.
pub async fn join_records(
    records: Option<&Records>,
    resolver: &JobIdResolver,
    messages: &[DeadMessage],
) -> Result<Vec<(LetterKey, Context)>, DlqError> {
    let keys: Vec<LetterKey> = messages.iter().map(|m| m.record_key(resolver)).collect();
    let found = match records {
        Some(r) => r.read_many(&keys).await?,
        None => HashMap::new(),
    };
    Ok(messages
        .iter()
        .zip(keys)
        .map(|(m, key)| {
            let c = Context::of(m, key.0.as_deref(), found.get(&key));
            (key, c)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Failure, FailureKind};

    /// The attribute wins; `SentTimestamp` stands for the first enqueue
    /// only where SQS's redrive kept it (into a standard DLQ); elsewhere
    /// the source's retention is taken off, so the age is never understated.
    #[test]
    fn a_letter_s_first_enqueue_never_reads_later_than_it_was() {
        let sent = UNIX_EPOCH + Duration::from_millis(1_700_000_000_000);
        let shift = Duration::from_secs(4 * 86_400);
        let moved = msg(&[]);
        assert_eq!(moved.first_enqueued(false, shift), Some(sent));
        assert_eq!(moved.first_enqueued(true, shift), Some(sent - shift));
        let mut sent_by_idemq = msg(&[]);
        sent_by_idemq.system.remove(&Sys::DeadLetterQueueSourceArn);
        assert_eq!(
            sent_by_idemq.first_enqueued(false, shift),
            Some(sent - shift)
        );
        let stamped = msg(&[(crate::job::FIRST_ENQUEUED_ATTRIBUTE, "1600000000000")]);
        let first = UNIX_EPOCH + Duration::from_millis(1_600_000_000_000);
        assert_eq!(stamped.first_enqueued_attribute(), Some(first));
        assert_eq!(stamped.first_enqueued(true, shift), Some(first));
        let garbled = msg(&[(crate::job::FIRST_ENQUEUED_ATTRIBUTE, "soon")]);
        assert_eq!(garbled.first_enqueued(false, shift), Some(sent));
        let mut silent = msg(&[]);
        silent.system.clear();
        assert_eq!(silent.first_enqueued(false, shift), None);
    }

    fn msg(attrs: &[(&str, &str)]) -> DeadMessage {
        DeadMessage {
            message_id: "m-1".into(),
            receipt_handle: "rh".into(),
            body: "{\"a\":1}".into(),
            attributes: attrs
                .iter()
                .map(|(k, v)| {
                    let v = MessageAttributeValue::builder()
                        .data_type("String")
                        .string_value(*v)
                        .build()
                        .unwrap();
                    (k.to_string(), v)
                })
                .collect(),
            system: HashMap::from([
                (Sys::SentTimestamp, "1700000000000".to_string()),
                (
                    Sys::DeadLetterQueueSourceArn,
                    "arn:aws:sqs:us-east-1:1:orders".to_string(),
                ),
            ]),
        }
    }

    #[test]
    fn context_prefers_the_record_and_falls_back_to_attributes() {
        let m = msg(&[
            ("idemq-job-id", "j-1"),
            ("idemq-error", "amount 0 is not positive"),
            ("idemq-attempts", "1"),
            ("idemq-failed-at", "2026-12-01T10:00:00Z"),
            ("idemq-deploy", "6, idemq 0.1.0"),
        ]);
        let c = Context::of(&m, None, None);
        assert_eq!(c.job_id.as_deref(), Some("j-1"));
        assert_eq!(
            (c.deploy.as_deref(), c.idemq_version.as_deref()),
            (Some("6"), Some("0.1.0"))
        );
        assert_eq!(c.deploy_line(), "6 (idemq 0.1.0)");
        assert_eq!(c.attempts, Some(1));
        assert_eq!(c.last_error.as_deref(), Some("amount 0 is not positive"));
        assert_eq!(
            c.failed_at,
            humantime::parse_rfc3339("2026-12-01T10:00:00Z").ok()
        );
        assert_eq!(
            c.source_queue.as_deref(),
            Some("orders"),
            "from DeadLetterQueueSourceArn"
        );
        assert_eq!(c.payload_bytes, 7);

        let record = FailureRecord {
            job_id: Some("j-1".into()),
            message_id: "m-0".into(),
            attempt: 6,
            failure: Failure {
                kind: FailureKind::Transient,
                error: "downstream outage".into(),
                chain: vec!["connection\nreset".into()],
                backtrace: None,
            },
            failed_at: UNIX_EPOCH + Duration::from_secs(5),
            source_queue: "ledger".into(),
            payload_hash: "h".into(),
            deploy: "7".into(),
            idemq_version: "0.1.0".into(),
        };
        let c = Context::of(&m, None, Some(&record));
        assert_eq!(
            (c.attempts, c.source_queue.as_deref(), c.deploy.as_deref()),
            (Some(6), Some("ledger"), Some("7"))
        );
        assert_eq!(c.error_line(), "downstream outage: connection reset");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["failed_at"], "1970-01-01T00:00:05.000Z");
    }

    #[test]
    fn without_anything_failed_at_is_the_send_time() {
        let c = Context::of(&msg(&[]), None, None);
        assert_eq!(
            c.failed_at,
            Some(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000))
        );
        assert_eq!(c.job_id, None);
        assert_eq!(c.error_line(), "");
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn dead(id: &str, body: &str, attr: Option<&str>, group: Option<&str>) -> DeadMessage {
        let mut attributes = HashMap::new();
        if let Some(a) = attr {
            attributes.insert(
                JOB_ID_ATTRIBUTE.to_string(),
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(a)
                    .build()
                    .unwrap(),
            );
        }
        let mut system = HashMap::new();
        if let Some(g) = group {
            system.insert(Sys::MessageGroupId, g.to_string());
        }
        DeadMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            body: body.into(),
            attributes,
            system,
        }
    }

    /// The consumer writes a failure record under the id it resolved
    /// (attribute, else body pointer, else MessageId); the CLI must look it
    /// up under the same id, not the attribute alone.
    #[test]
    fn records_are_keyed_by_the_id_the_consumer_resolved() {
        let r = JobIdResolver::new().with_body_pointer("/ref");
        let by_attr = dead("m-1", r#"{"ref":"p-9"}"#, Some("j-1"), None);
        assert_eq!(by_attr.record_key(&r), (Some("j-1".into()), "m-1".into()));
        let by_pointer = dead("m-2", r#"{"ref":"p-2"}"#, None, None);
        assert_eq!(
            by_pointer.record_key(&r),
            (Some("p-2".into()), "m-2".into())
        );
        assert_eq!(by_pointer.resolve(&r).unwrap().1, JobIdSource::BodyPointer);
        let by_message_id = dead("m-3", r#"{"x":1}"#, None, None);
        assert_eq!(
            by_message_id.record_key(&r),
            (Some("m-3".into()), "m-3".into())
        );
        // A pointer naming an object is refused by the consumer; its record
        // is under the message id.
        let invalid = dead("m-4", r#"{"ref":{"a":1}}"#, None, None);
        assert_eq!(invalid.record_key(&r), (None, "m-4".into()));

        let c = Context::of(&by_pointer, Some("p-2"), None);
        assert_eq!(c.job_id.as_deref(), Some("p-2"), "the resolved id is shown");
    }

    /// A sender can forge `idemq-source-queue`; SQS's own
    /// `DeadLetterQueueSourceArn` outranks it.
    #[test]
    fn the_source_sqs_reports_outranks_the_attribute() {
        let mut m = dead("m-1", "{}", Some("j"), None);
        m.attributes.insert(
            ATTR_SOURCE_QUEUE.to_string(),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("admin-commands")
                .build()
                .unwrap(),
        );
        assert_eq!(
            Context::of(&m, None, None).source_queue.as_deref(),
            Some("admin-commands"),
            "only the attribute: shown as it is"
        );
        m.system.insert(
            Sys::DeadLetterQueueSourceArn,
            "arn:aws:sqs:us-east-1:1:orders".into(),
        );
        assert_eq!(
            Context::of(&m, None, None).source_queue.as_deref(),
            Some("orders")
        );
        assert_eq!(m.source_queue_attribute(), Some("admin-commands"));
    }

    /// Only a full response can cut a FIFO group short, and a group is
    /// swept again only when it brought something new: the sweep ends.
    #[test]
    fn a_sweep_marks_groups_a_full_response_may_have_cut() {
        let mut sweep = Sweep::default();
        let first: Vec<DeadMessage> = (1..=6)
            .map(|i| dead(&format!("a{i}"), "", None, Some("A")))
            .chain((1..=4).map(|i| dead(&format!("b{i}"), "", None, Some("B"))))
            .collect();
        assert!(sweep.note(&first).iter().all(|f| *f));
        let small = vec![dead("c1", "", None, Some("C"))];
        assert_eq!(sweep.note(&small), vec![true]);
        assert_eq!(sweep.next_cut().as_deref(), Some("A"));
        assert_eq!(sweep.next_cut().as_deref(), Some("B"));
        assert_eq!(
            sweep.next_cut(),
            None,
            "C came in a response with room left"
        );

        // B again from its head, now with what was behind it.
        let again: Vec<DeadMessage> = (1..=6)
            .map(|i| dead(&format!("b{i}"), "", None, Some("B")))
            .collect();
        assert_eq!(
            sweep.note(&again),
            vec![false, false, false, false, true, true]
        );
        assert_eq!(sweep.seen(), 13, "counted by MessageId");
        // A full response of nothing new never queues its group again.
        let stale: Vec<DeadMessage> = (1..=10)
            .map(|i| dead(&format!("a{i}"), "", None, Some("A")))
            .take(6)
            .chain((1..=4).map(|i| dead(&format!("b{i}"), "", None, Some("B"))))
            .collect();
        assert!(sweep.note(&stale).iter().all(|f| !*f));
        assert_eq!(sweep.next_cut(), None);
    }
}
