//! What a FIFO queue adds to the SQS model (tests/sim/sqs.rs calls it):
//! message groups, deduplication, sequence numbers and the receive that
//! never hands out a group with a message in flight. Each rule cites the
//! page it follows; what is not here (high-throughput mode, per-group
//! deduplication scope, `ReceiveRequestAttemptId`, fair queues on standard
//! queues) is refused or left out rather than approximated.
//!
//! - A queue is FIFO when its name ends in `.fifo`, and says so with the
//!   attributes `FifoQueue` and `ContentBasedDeduplication`
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html>,
//!   <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_GetQueueAttributes.html>).
//! - Every send names a `MessageGroupId`, and a `MessageDeduplicationId`
//!   unless the queue has `ContentBasedDeduplication` (then the SHA-256 of
//!   the body, not of the attributes); a send given neither fails
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>).
//!   The messages LocalStack 2026.3 answers with are the ones used here
//!   (measured: `MissingParameter` "The request must contain the parameter
//!   MessageGroupId.", and `InvalidParameterValue` "The queue should either
//!   have ContentBasedDeduplication enabled or MessageDeduplicationId
//!   provided explicitly").
//! - A send with a deduplication id already accepted in the last 5 minutes
//!   "is accepted successfully but isn't delivered"
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-exactly-once-processing.html>;
//!   "Amazon SQS continues tracking the deduplication ID even after the
//!   message has been received and deleted",
//!   <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html>).
//!   What the answer carries is not documented; LocalStack returns the
//!   first message's `MessageId` (and a fresh `SequenceNumber`): the model
//!   returns the first message's `MessageId` and `SequenceNumber`.
//! - "When you set FifoQueue, you can't set DelaySeconds per message"
//!   (SendMessage, as above; LocalStack: `InvalidParameterValue` "Value 5 for
//!   parameter DelaySeconds is invalid. Reason: The request include
//!   parameter that is not valid for this queue type."). The queue's own
//!   `DelaySeconds` applies.
//! - A receive returns, in order, "as many messages with the same message
//!   group ID as possible", and may add messages of other groups; it never
//!   returns a message of a group that has a message in flight ("Inflight
//!   messages block delivery of available messages within the same message
//!   group",
//!   <https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned>;
//!   <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html>).
//! - SQS's redrive moves a message to its DLQ, which must be FIFO too
//!   ("a FIFO queue can only use a FIFO DLQ",
//!   <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue.html>),
//!   with its MessageId and group; its deduplication id "will be replaced
//!   with the original message's ID"
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>),
//!   and "the enqueue timestamp resets"
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::net::Reply;
use super::sqs::{Msg, Queue, err};

/// SQS's deduplication interval.
pub const DEDUP_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// A FIFO queue's own state.
#[derive(Debug, Clone, Default)]
pub struct Fifo {
    pub content_based_deduplication: bool,
    /// Deduplication ids accepted, with when they stop counting and the
    /// (MessageId, SequenceNumber) the first send was given.
    pub accepted: BTreeMap<String, (Instant, String, String)>,
}

/// A FIFO send's group and deduplication id, or the error SQS answers.
pub fn check_send(fifo: &Fifo, entry: &Value, body: &str) -> Result<(String, String), Reply> {
    let Some(group) = entry["MessageGroupId"].as_str() else {
        return Err(err(
            "MissingParameter",
            "The request must contain the parameter MessageGroupId.",
        ));
    };
    if let Some(delay) = entry.get("DelaySeconds") {
        return Err(err(
            "InvalidParameterValue",
            format!(
                "Value {delay} for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."
            ),
        ));
    }
    let dedup = match entry["MessageDeduplicationId"].as_str() {
        Some(d) => d.to_owned(),
        None if fifo.content_based_deduplication => hex::encode(Sha256::digest(body.as_bytes())),
        None => {
            return Err(err(
                "InvalidParameterValue",
                "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly",
            ));
        }
    };
    Ok((group.to_owned(), dedup))
}

/// The (MessageId, SequenceNumber) of an earlier send with this
/// deduplication id, if it was accepted less than 5 minutes ago: the send
/// succeeds and enqueues nothing ([`accept`] remembers a send that did
/// enqueue).
pub fn deduplicate(fifo: &mut Fifo, dedup: &str, now: Instant) -> Option<(String, String)> {
    fifo.accepted.retain(|_, (until, _, _)| *until > now);
    fifo.accepted
        .get(dedup)
        .map(|(_, id, seq)| (id.clone(), seq.clone()))
}

/// Remembers an accepted send for the deduplication interval.
pub fn accept(fifo: &mut Fifo, dedup: String, id: String, sequence: String, now: Instant) {
    fifo.accepted
        .insert(dedup, (now + DEDUP_INTERVAL, id, sequence));
}

/// A sequence number as SQS writes it: "large, non-consecutive", 128 bits,
/// growing within a group
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html>).
pub fn sequence_number(seq: u64) -> String {
    format!(
        "{:020}",
        18_000_000_000_000_000_000u128 + u128::from(seq) * 7
    )
}

fn in_flight(m: &Msg, now: Instant) -> bool {
    m.handle.is_some() && m.visible_at > now
}

/// Which messages a receive of at most `max` takes, in the order it returns
/// them, and which it moves to the DLQ instead (their receive count reached
/// `max_receives`). Groups come in the order of their oldest message; each
/// gives every message it can, in order, up to the first that is not
/// visible; a group with a message in flight gives none.
pub fn select(
    q: &Queue,
    now: Instant,
    max: usize,
    max_receives: Option<u32>,
) -> (Vec<u64>, Vec<u64>) {
    let blocked: BTreeSet<&str> = q
        .messages
        .values()
        .filter(|m| in_flight(m, now))
        .filter_map(|m| m.group.as_deref())
        .collect();
    let mut groups: Vec<&str> = Vec::new();
    let mut of_group: BTreeMap<&str, Vec<(u64, &Msg)>> = BTreeMap::new();
    for (seq, m) in &q.messages {
        let g = m.group.as_deref().unwrap_or_default();
        if !of_group.contains_key(g) {
            groups.push(g);
        }
        of_group.entry(g).or_default().push((*seq, m));
    }
    let (mut take, mut moved) = (Vec::new(), Vec::new());
    for g in groups {
        if take.len() == max {
            break;
        }
        if blocked.contains(g) {
            continue;
        }
        for (seq, m) in &of_group[g] {
            if take.len() == max || m.visible_at > now {
                break;
            }
            if max_receives.is_some_and(|n| m.receive_count >= n) {
                moved.push(*seq);
                continue;
            }
            take.push(*seq);
        }
    }
    (take, moved)
}
