//! Send before delete: a batch judged to move is sent to its destinations
//! and deleted from the DLQ only where SQS accepted the copy, and a moved
//! job's further copies only after that. Where each letter goes and the
//! deduplication id it goes with are decided here too.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use super::{Redrive, Run};
use crate::dlq::peek::{Context, DeadMessage};
use crate::producer::{Job, Producer};
use crate::queue::url_of_arn;

impl Redrive<'_> {
    /// Deletes the copies held of jobs whose chosen copy SQS accepted. Only
    /// then: killed before, the run leaves both, and a rerun sends the job
    /// again (a duplicate the consumer absorbs), never none.
    pub(super) async fn remove_sent_copies(&self, run: &Mutex<Run>) {
        let copies: Vec<DeadMessage> = {
            let mut r = run.lock().expect("lock");
            let mut ids: Vec<String> = r
                .copies
                .iter()
                .filter(|(_, job)| r.moving.get(*job).is_some_and(|m| m.sent))
                .map(|(id, _)| id.clone())
                .collect();
            // In message-id order: the simulation replays a seed exactly.
            ids.sort();
            ids.iter()
                .filter_map(|id| {
                    r.copies.remove(id);
                    r.held.remove(id)
                })
                .collect()
        };
        if copies.is_empty() {
            return;
        }
        let handles: Vec<&str> = copies.iter().map(|m| m.receipt_handle.as_str()).collect();
        let not_deleted: HashSet<usize> =
            crate::queue::delete_messages(self.peek.sqs(), self.peek.dlq_url(), &handles)
                .await
                .into_iter()
                .collect();
        let mut r = run.lock().expect("lock");
        for (i, m) in copies.into_iter().enumerate() {
            if not_deleted.contains(&i) {
                // Still in the DLQ: released at the end, like a letter left
                // in place.
                r.report.copies_not_deleted.push(m.message_id.clone());
                r.held.insert(m.message_id.clone(), m);
            } else {
                r.report.copies.push(m.message_id);
            }
        }
    }
    /// Sends one received batch to its destinations, then deletes from the
    /// DLQ exactly the messages whose copy SQS accepted.
    pub(super) async fn move_batch(&self, run: &Mutex<Run>, batch: Vec<(DeadMessage, Context)>) {
        let mut by_destination: HashMap<String, Vec<(DeadMessage, Context, String)>> =
            HashMap::new();
        let mut failed = Vec::new();
        for (msg, context) in batch {
            // The copy carries the id the consumer resolved: SQS gives it a
            // new MessageId, so a job known by its MessageId keeps the old
            // one only this way.
            let job_id = match msg.resolve(&self.options.resolver) {
                Ok((id, _)) => id,
                Err(e) => {
                    failed.push((
                        msg,
                        format!("no valid job id ({e}): the consumer would refuse it again"),
                    ));
                    continue;
                }
            };
            match self.destination(&msg).await {
                Ok(url) => by_destination
                    .entry(url)
                    .or_default()
                    .push((msg, context, job_id)),
                Err(why) => failed.push((msg, why)),
            }
        }
        let mut sent = Vec::new();
        for (url, items) in by_destination {
            let producer = match self.producer(&url).await {
                Ok(p) => p,
                Err(why) => {
                    failed.extend(items.into_iter().map(|(m, _, _)| (m, why.clone())));
                    continue;
                }
            };
            let back_to_source = self.options.to.is_none();
            let now = crate::clock::now();
            let jobs = items
                .iter()
                .map(|(m, _, job_id)| {
                    let job = Job::as_received(
                        job_id.clone(),
                        m.body.clone(),
                        m.attributes.clone(),
                        m.group_id().map(str::to_owned),
                        redrive_deduplication_id(m, back_to_source, now),
                    );
                    if job.first_enqueued_fits() {
                        job.first_enqueued(self.copy_first_enqueued(m, now))
                    } else {
                        // Nine attributes of the producer's: the copy's own
                        // SentTimestamp will stand for its first enqueue.
                        tracing::warn!(
                            message_id = m.message_id.as_str(),
                            "no attribute slot left for idemq-first-enqueued; sent without it"
                        );
                        job
                    }
                })
                .collect();
            {
                // Letters of these jobs read from now on may be this very
                // copy dying again: see `judge_further`.
                let mut run = run.lock().expect("lock");
                let now = Instant::now();
                let sqs_passed = run.sqs_passed;
                for (_, _, job_id) in &items {
                    if let Some(m) = run.moving.get_mut(job_id) {
                        m.send_started.get_or_insert(now);
                        m.sqs_before_send = m.sqs_before_send.or(sqs_passed);
                    }
                }
            }
            let results = producer.send_batch(jobs).await;
            let mut accepted = Vec::new();
            for ((msg, context, job_id), (_, result)) in items.into_iter().zip(results) {
                match result {
                    Ok(_) => {
                        accepted.push(job_id);
                        sent.push((msg, context));
                    }
                    Err(e) => failed.push((msg, e.to_string())),
                }
            }
            let mut run = run.lock().expect("lock");
            for job_id in accepted {
                if let Some(m) = run.moving.get_mut(&job_id) {
                    m.sent = true;
                }
            }
        }
        let not_deleted = self.delete(&sent).await;
        let mut run = run.lock().expect("lock");
        for (msg, why) in failed {
            run.report.failed.push((msg.message_id.clone(), why));
            run.held.insert(msg.message_id.clone(), msg);
        }
        for (msg, context) in sent {
            if not_deleted.contains(&msg.message_id) {
                run.report.sent_not_deleted.push(msg.message_id.clone());
            }
            run.report.moved.push(context);
        }
    }

    /// Deletes sent messages from the DLQ; returns the ids whose delete failed.
    async fn delete(&self, sent: &[(DeadMessage, Context)]) -> HashSet<String> {
        let handles: Vec<&str> = sent
            .iter()
            .map(|(m, _)| m.receipt_handle.as_str())
            .collect();
        crate::queue::delete_messages(self.peek.sqs(), self.peek.dlq_url(), &handles)
            .await
            .into_iter()
            .map(|i| sent[i].0.message_id.clone())
            .collect()
    }

    /// Where a dead letter goes, from SQS's own data only: `--to`, else
    /// the queue SQS's redrive took it from (`DeadLetterQueueSourceArn`, a
    /// system attribute no sender can set), else its `idemq-source-queue`
    /// when that names one of the DLQ's real source queues
    /// (`ListDeadLetterSourceQueues`), else the DLQ's only source queue.
    /// Any sender can write `idemq-*` attributes, so one naming another
    /// queue is never followed.
    async fn destination(&self, msg: &DeadMessage) -> Result<String, String> {
        if let Some(to) = &self.options.to {
            return Ok(to.clone());
        }
        if let Some(arn) = msg.source_arn() {
            let key = format!("arn:{arn}");
            let mut cache = self.destinations.lock().await;
            if let Some(found) = cache.get(&key) {
                return found.clone();
            }
            let found = url_of_arn(self.peek.sqs(), arn)
                .await
                .map_err(|e| e.to_string());
            cache.insert(key, found.clone());
            return found;
        }
        let named = msg.source_queue_attribute();
        if let Some(url) = named.and_then(|name| source_named(&self.sources, name)) {
            return Ok(url.to_owned());
        }
        match self.sources.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err("no source queue known (not redriven by SQS, and the DLQ has no source queue); pass --to".into()),
            _ => Err(match named {
                Some(_) => "its idemq-source-queue names none of the DLQ's source queues, and the DLQ has several; pass --to".into(),
                None => "the DLQ has several source queues and the message names none; pass --to".into(),
            }),
        }
    }

    async fn producer(&self, url: &str) -> Result<Producer, String> {
        let mut producers = self.producers.lock().await;
        if let Some(p) = producers.get(url) {
            return Ok(p.clone());
        }
        let p = Producer::with_client(self.peek.sqs().clone(), url)
            .await
            .map_err(|e| e.to_string())?;
        producers.insert(url.to_owned(), p.clone());
        Ok(p)
    }
}

/// The source queue URL whose queue name is `name`, if any (a queue URL
/// ends with its name).
pub(crate) fn source_named<'s>(sources: &'s [String], name: &str) -> Option<&'s str> {
    sources
        .iter()
        .find(|url| url.rsplit('/').next() == Some(name))
        .map(String::as_str)
}

/// SQS's FIFO deduplication interval, plus a margin for clock skew.
const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60 + 30);

/// The deduplication id a FIFO dead letter is sent back with: its own,
/// unless it goes back to the queue it came from within SQS's 5-minute
/// deduplication interval of its first send. There SQS would accept the
/// copy and silently drop it, and the redrive would then delete the only
/// copy. Such a message gets an id derived from its own and its DLQ message
/// id instead: still the same on a rerun (so SQS drops a rerun's second
/// copy), never the original's.
pub(crate) fn redrive_deduplication_id(
    m: &DeadMessage,
    back_to_source: bool,
    now: SystemTime,
) -> Option<String> {
    let original = m.deduplication_id()?;
    let recent = m
        .sent_at()
        .is_none_or(|sent| now.duration_since(sent).unwrap_or_default() < DEDUP_WINDOW);
    if back_to_source && recent {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(format!("idemq-redrive\0{original}\0{}", m.message_id));
        return Some(format!("redrive-{}", &hex::encode(digest)[..48]));
    }
    Some(original.to_owned())
}
