//! Moving dead letters back to their source queue.
//!
//! **Send before delete.** A dead letter is sent to its destination first and
//! deleted from the DLQ only after SQS accepted the copy. Killed at any
//! instant, a redrive leaves each message either still in the DLQ (it comes
//! back after its hold, and a rerun moves it) or sent and possibly not yet
//! deleted (a rerun sends it again, and the idempotent consumer recognises
//! the copy by its `idemq-job-id`). Nothing is lost; at worst something is
//! delivered twice, which is what idemq is for.
//!
//! Messages are sent exactly as they were: body, every attribute, FIFO group
//! and deduplication id. Requests: one receive, one `SendMessageBatch` and one
//! `DeleteMessageBatch` per 10 messages.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;
use futures_util::future::join_all;
use serde::Serialize;

use super::peek::{Context, DeadMessage, Peek};
use super::{DeadLetters, DlqError};
use crate::producer::{Job, Producer};
use crate::queue::url_of_arn;

/// Which dead letters to move. Empty: all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these job ids (or message ids).
    pub job_ids: HashSet<String>,
    /// Only those whose last error contains this, case-insensitively.
    pub error_contains: Option<String>,
    pub since: Option<SystemTime>,
    pub until: Option<SystemTime>,
}

impl Filter {
    pub fn matches(&self, c: &Context) -> bool {
        let id_ok = self.job_ids.is_empty()
            || self.job_ids.contains(&c.message_id)
            || c.job_id.as_ref().is_some_and(|j| self.job_ids.contains(j));
        let error_ok = self.error_contains.as_ref().is_none_or(|needle| {
            c.error_line()
                .to_lowercase()
                .contains(&needle.to_lowercase())
        });
        let since_ok = self
            .since
            .is_none_or(|s| c.failed_at.is_some_and(|t| t >= s));
        let until_ok = self
            .until
            .is_none_or(|u| c.failed_at.is_some_and(|t| t <= u));
        id_ok && error_ok && since_ok && until_ok
    }
}

#[derive(Debug, Clone)]
pub struct RedriveOptions {
    pub filter: Filter,
    /// At most this many messages.
    pub max: Option<usize>,
    /// At most this many messages per second.
    pub rate: Option<f64>,
    /// List what would move; move nothing.
    pub dry_run: bool,
    /// Send everything here instead of to each message's source queue.
    pub to: Option<String>,
    /// Receive loops at once.
    pub concurrency: usize,
}

impl Default for RedriveOptions {
    fn default() -> Self {
        Self {
            filter: Filter::default(),
            max: None,
            rate: None,
            dry_run: false,
            to: None,
            concurrency: 4,
        }
    }
}

/// What a redrive did.
#[derive(Debug, Default, Clone, Serialize)]
pub struct RedriveReport {
    /// Moved (or, in a dry run, would move): their context.
    pub moved: Vec<Context>,
    /// Seen and left in place (did not match, or past `--max`).
    pub skipped: usize,
    /// Could not be moved: (message id, why). They stay in the DLQ.
    pub failed: Vec<(String, String)>,
    /// Sent, but the delete from the DLQ failed: it will be delivered again
    /// by a rerun, and absorbed as a duplicate.
    pub sent_not_deleted: Vec<String>,
}

/// Progress after each batch: (moved so far, seen so far).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Shared state of the receive loops.
struct Run {
    seen: HashSet<String>,
    /// Received and left alone: made visible again at the end.
    held: HashMap<String, DeadMessage>,
    report: RedriveReport,
    budget: Option<usize>,
    next_slot: Instant,
}

/// Moves dead letters from `peek`'s DLQ back to their source queues.
pub struct Redrive<'a> {
    peek: &'a Peek,
    records: Option<&'a DeadLetters>,
    options: RedriveOptions,
    producers: tokio::sync::Mutex<HashMap<String, Producer>>,
    destinations: tokio::sync::Mutex<HashMap<String, Result<String, String>>>,
    /// The DLQ's sources (`ListDeadLetterSourceQueues`), for messages that
    /// name none.
    sources: Vec<String>,
}

impl<'a> Redrive<'a> {
    /// Reads the DLQ's source queues once.
    pub async fn new(
        peek: &'a Peek,
        records: Option<&'a DeadLetters>,
        options: RedriveOptions,
    ) -> Result<Self, DlqError> {
        let sources = dead_letter_sources(peek.sqs(), peek.dlq_url()).await?;
        Ok(Self {
            peek,
            records,
            options,
            producers: tokio::sync::Mutex::default(),
            destinations: tokio::sync::Mutex::default(),
            sources,
        })
    }

    pub async fn run(&self, progress: Progress<'_>) -> Result<RedriveReport, DlqError> {
        let run = Mutex::new(Run {
            seen: HashSet::new(),
            held: HashMap::new(),
            report: RedriveReport::default(),
            budget: self.options.max,
            next_slot: Instant::now(),
        });
        let loops = (0..self.options.concurrency.max(1)).map(|_| self.receive_loop(&run, progress));
        let results = join_all(loops).await;
        let mut run = run.into_inner().expect("no loop panicked holding the lock");
        let held: Vec<DeadMessage> = run.held.drain().map(|(_, m)| m).collect();
        self.peek.release(&held).await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(run.report)
    }

    async fn receive_loop(&self, run: &Mutex<Run>, progress: Progress<'_>) -> Result<(), DlqError> {
        let mut empty = 0;
        while empty < 2 {
            if run.lock().expect("lock").budget == Some(0) {
                return Ok(());
            }
            let batch = self.peek.receive().await?;
            let records = match self.records {
                Some(r) => {
                    let keys: Vec<_> = batch.iter().map(DeadMessage::record_key).collect();
                    r.read_many(&keys).await?
                }
                None => HashMap::new(),
            };
            let mut to_move = Vec::new();
            let mut fresh = 0;
            {
                let mut run = run.lock().expect("lock");
                for msg in batch {
                    let context = Context::of(&msg, records.get(&msg.record_key()));
                    if !run.seen.insert(msg.message_id.clone()) {
                        // Came back after its hold: still left alone, newest handle kept.
                        if run.held.contains_key(&msg.message_id) {
                            run.held.insert(msg.message_id.clone(), msg);
                        }
                        continue;
                    }
                    fresh += 1;
                    let within_budget = run.budget.is_none_or(|b| b > 0);
                    if within_budget && self.options.filter.matches(&context) {
                        if let Some(b) = run.budget.as_mut() {
                            *b -= 1;
                        }
                        to_move.push((msg, context));
                    } else {
                        run.report.skipped += 1;
                        run.held.insert(msg.message_id.clone(), msg);
                    }
                }
            }
            if fresh == 0 {
                empty += 1;
                continue;
            }
            empty = 0;
            if self.options.dry_run {
                let mut run = run.lock().expect("lock");
                for (msg, context) in to_move {
                    run.report.moved.push(context);
                    run.held.insert(msg.message_id.clone(), msg);
                }
            } else {
                self.pace(run, to_move.len()).await;
                self.move_batch(run, to_move).await;
            }
            let r = run.lock().expect("lock");
            progress(r.report.moved.len(), r.seen.len());
        }
        Ok(())
    }

    /// Waits until `n` more messages fit under `--rate`.
    async fn pace(&self, run: &Mutex<Run>, n: usize) {
        let Some(rate) = self.options.rate else {
            return;
        };
        let at = {
            let mut run = run.lock().expect("lock");
            let at = run.next_slot.max(Instant::now());
            run.next_slot = at + Duration::from_secs_f64(n as f64 / rate);
            at
        };
        tokio::time::sleep_until(at.into()).await;
    }

    /// Sends one received batch to its destinations, then deletes from the
    /// DLQ exactly the messages whose copy SQS accepted.
    async fn move_batch(&self, run: &Mutex<Run>, batch: Vec<(DeadMessage, Context)>) {
        let mut by_destination: HashMap<String, Vec<(DeadMessage, Context)>> = HashMap::new();
        let mut failed = Vec::new();
        for (msg, context) in batch {
            match self.destination(&msg).await {
                Ok(url) => by_destination.entry(url).or_default().push((msg, context)),
                Err(why) => failed.push((msg, why)),
            }
        }
        let mut sent = Vec::new();
        for (url, items) in by_destination {
            let producer = match self.producer(&url).await {
                Ok(p) => p,
                Err(why) => {
                    failed.extend(items.into_iter().map(|(m, _)| (m, why.clone())));
                    continue;
                }
            };
            let back_to_source = self.options.to.is_none();
            let jobs = items
                .iter()
                .map(|(m, _)| {
                    Job::as_received(
                        m.job_id().unwrap_or(&m.message_id),
                        m.body.clone(),
                        m.attributes.clone(),
                        m.group_id().map(str::to_owned),
                        redrive_deduplication_id(m, back_to_source, SystemTime::now()),
                    )
                })
                .collect();
            let results = producer.send_batch(jobs).await;
            for ((msg, context), (_, result)) in items.into_iter().zip(results) {
                match result {
                    Ok(_) => sent.push((msg, context)),
                    Err(e) => failed.push((msg, e.to_string())),
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

    /// Where a dead letter goes: `--to`, else the queue SQS's redrive took
    /// it from, else the `idemq-source-queue` it was dead-lettered from by
    /// idemq, else the DLQ's only source queue.
    async fn destination(&self, msg: &DeadMessage) -> Result<String, String> {
        if let Some(to) = &self.options.to {
            return Ok(to.clone());
        }
        let key = match (msg.source_arn(), Context::of(msg, None).source_queue) {
            (Some(arn), _) => format!("arn:{arn}"),
            (None, Some(name)) => format!("name:{name}"),
            (None, None) => {
                return match self.sources.as_slice() {
                    [only] => Ok(only.clone()),
                    [] => Err("no source queue known (not redriven by SQS, no idemq-source-queue); pass --to".into()),
                    _ => Err("the DLQ has several source queues and the message names none; pass --to".into()),
                };
            }
        };
        let mut cache = self.destinations.lock().await;
        if let Some(found) = cache.get(&key) {
            return found.clone();
        }
        let sqs = self.peek.sqs();
        let found = match key.split_once(':') {
            Some(("arn", arn)) => url_of_arn(sqs, arn).await.map_err(|e| e.to_string()),
            Some((_, name)) => sqs
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .map(|o| o.queue_url().unwrap_or_default().to_owned())
                .map_err(|e| format!("source queue {name}: {}", DisplayErrorContext(e))),
            None => Err("unreachable key".into()),
        };
        cache.insert(key, found.clone());
        found
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

/// SQS's FIFO deduplication interval, plus a margin for clock skew.
const DEDUP_WINDOW: Duration = Duration::from_secs(5 * 60 + 30);

/// The deduplication id a FIFO dead letter is sent back with: its own,
/// unless it goes back to the queue it came from within SQS's 5-minute
/// deduplication interval of its first send. There SQS would accept the
/// copy and silently drop it, and the redrive would then delete the only
/// copy. Such a message gets an id derived from its own and its DLQ message
/// id instead: still the same on a rerun (so SQS drops a rerun's second
/// copy), never the original's.
pub fn redrive_deduplication_id(
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

/// The queues whose `RedrivePolicy` names this DLQ.
pub async fn dead_letter_sources(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
) -> Result<Vec<String>, DlqError> {
    let out = sqs
        .list_dead_letter_source_queues()
        .queue_url(dlq_url)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(out.queue_urls().to_vec())
}

/// SQS's own redrive (`StartMessageMoveTask`): every message, up to 500/s,
/// back to its source queue (or to `to`). Returns the task handle.
pub async fn start_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
    to_arn: Option<&str>,
    rate: Option<i32>,
) -> Result<String, DlqError> {
    let out = sqs
        .start_message_move_task()
        .source_arn(dlq_arn)
        .set_destination_arn(to_arn.map(str::to_owned))
        .set_max_number_of_messages_per_second(rate)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(out.task_handle().unwrap_or_default().to_owned())
}

/// The newest move task of a DLQ, as `ListMessageMoveTasks` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoveTask {
    pub status: String,
    pub task_handle: Option<String>,
    pub moved: i64,
    pub to_move: Option<i64>,
    pub failure_reason: Option<String>,
}

pub async fn native_status(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
) -> Result<Option<MoveTask>, DlqError> {
    let out = sqs
        .list_message_move_tasks()
        .source_arn(dlq_arn)
        .max_results(1)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(out.results().first().map(|t| MoveTask {
        status: t.status().unwrap_or("UNKNOWN").to_owned(),
        task_handle: t.task_handle().map(str::to_owned),
        moved: t.approximate_number_of_messages_moved(),
        to_move: t.approximate_number_of_messages_to_move(),
        failure_reason: t.failure_reason().map(str::to_owned),
    }))
}

/// Cancels the running move task of a DLQ, if there is one.
pub async fn cancel_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
) -> Result<Option<i64>, DlqError> {
    let Some(task) = native_status(sqs, dlq_arn).await? else {
        return Ok(None);
    };
    let (true, Some(handle)) = (task.status == "RUNNING", task.task_handle) else {
        return Ok(None);
    };
    let out = sqs
        .cancel_message_move_task()
        .task_handle(handle)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(Some(out.approximate_number_of_messages_moved()))
}

/// A queue's ARN.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<String, DlqError> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    out.attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or_else(|| DlqError::Sqs(format!("queue {url} has no QueueArn")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;
    use std::time::UNIX_EPOCH;

    #[test]
    fn fifo_dedup_id_is_kept_unless_it_would_be_dropped() {
        let sent_ms = 1_000_000_000_000u64;
        let sent = UNIX_EPOCH + Duration::from_millis(sent_ms);
        let m = DeadMessage {
            message_id: "m-1".into(),
            receipt_handle: "rh".into(),
            body: String::new(),
            attributes: HashMap::new(),
            system: HashMap::from([
                (Sys::MessageDeduplicationId, "d-1".to_string()),
                (Sys::SentTimestamp, sent_ms.to_string()),
            ]),
        };
        let long_after = sent + Duration::from_secs(3600);
        assert_eq!(
            redrive_deduplication_id(&m, true, long_after).as_deref(),
            Some("d-1")
        );
        assert_eq!(
            redrive_deduplication_id(&m, false, sent).as_deref(),
            Some("d-1"),
            "--to another queue"
        );
        let soon = redrive_deduplication_id(&m, true, sent + Duration::from_secs(60)).unwrap();
        assert_ne!(soon, "d-1");
        assert!(soon.len() <= 128);
        assert_eq!(
            Some(soon),
            redrive_deduplication_id(&m, true, sent + Duration::from_secs(90)),
            "stable for reruns"
        );
        let standard = DeadMessage {
            system: HashMap::new(),
            ..m
        };
        assert_eq!(redrive_deduplication_id(&standard, true, sent), None);
    }

    fn ctx(job: &str, error: &str, at_secs: u64) -> Context {
        Context {
            job_id: Some(job.into()),
            message_id: format!("m-{job}"),
            attempts: Some(6),
            last_error: Some(error.into()),
            error_chain: vec!["connection reset".into()],
            failed_at: Some(UNIX_EPOCH + Duration::from_secs(at_secs)),
            source_queue: Some("q".into()),
            payload_bytes: 10,
        }
    }

    #[test]
    fn an_empty_filter_matches_everything() {
        assert!(Filter::default().matches(&ctx("a", "x", 5)));
    }

    #[test]
    fn filters_combine() {
        let f = Filter {
            job_ids: HashSet::from(["a".to_string(), "m-b".to_string()]),
            error_contains: Some("OUTAGE".into()),
            since: Some(UNIX_EPOCH + Duration::from_secs(10)),
            until: Some(UNIX_EPOCH + Duration::from_secs(20)),
        };
        assert!(f.matches(&ctx("a", "downstream outage", 10)));
        assert!(
            f.matches(&ctx("b", "downstream outage", 20)),
            "by message id"
        );
        assert!(!f.matches(&ctx("c", "downstream outage", 15)), "other job");
        assert!(!f.matches(&ctx("a", "amount 0", 15)), "other error");
        assert!(
            !f.matches(&ctx("a", "downstream outage", 9)),
            "before since"
        );
        assert!(
            !f.matches(&ctx("a", "downstream outage", 21)),
            "after until"
        );
        let chain_only = Filter {
            error_contains: Some("connection reset".into()),
            ..Filter::default()
        };
        assert!(
            chain_only.matches(&ctx("a", "outer", 1)),
            "the chain is searched too"
        );
        let mut unknown_time = ctx("a", "downstream outage", 15);
        unknown_time.failed_at = None;
        assert!(
            !f.matches(&unknown_time),
            "a time filter never matches an unknown time"
        );
    }
}
