//! Reading a DLQ without consuming it.
//!
//! SQS has no "peek": a message is read by receiving it. A scan receives
//! every message once, holding each invisible for a short while so it is not
//! seen twice, and then makes them all visible again. Nothing is deleted,
//! and a DLQ has no redrive policy of its own, so the extra receives push
//! nothing anywhere.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{MessageSystemAttributeName as Sys, QueueAttributeName};
use serde::Serialize;

use super::records::Records;
use crate::failure::{DlqError, LetterKey};
use crate::job::JobIdResolver;
use crate::queue::QueueError;

#[cfg(test)]
mod identity_tests;
mod letter;
#[cfg(test)]
mod tests;

pub use letter::{Context, DeadMessage};

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

    /// The DLQ's ARN (`GetQueueAttributes`): SQS's move task names the
    /// queue it moves from by ARN, not URL ([`start_native`],
    /// [`native_status`], [`wait_native`], [`cancel_native`]).
    ///
    /// [`start_native`]: super::redrive::start_native
    /// [`native_status`]: super::redrive::native_status
    /// [`wait_native`]: super::redrive::wait_native
    /// [`cancel_native`]: super::redrive::cancel_native
    pub async fn arn(&self) -> Result<String, QueueError> {
        crate::queue::arn(&self.sqs, &self.dlq_url).await
    }

    /// The ARN of the queue at `url`, read with the DLQ's client: where
    /// SQS's move task sends the DLQ's messages instead of back to their
    /// source queues ([`start_native`]'s `to_arn`: one of those source
    /// queues, or any other destination).
    ///
    /// [`start_native`]: super::redrive::start_native
    pub async fn destination_arn(&self, url: &str) -> Result<String, QueueError> {
        crate::queue::arn(&self.sqs, url).await
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
