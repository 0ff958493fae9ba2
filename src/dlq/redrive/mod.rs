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
//! Messages are sent as they were: body, every producer attribute, FIFO
//! group and deduplication id; their `idemq-*` attributes are replaced by
//! `idemq-job-id`, the id the consumer resolved for them, so a job known
//! only by its MessageId (which SQS changes on the way back) stays the same
//! job, and `idemq-first-enqueued`, the job's first-enqueued time, so the
//! copy's new `SentTimestamp` does not make an old job look new. Requests:
//! one receive, one `SendMessageBatch` and one `DeleteMessageBatch` per 10
//! messages.
//!
//! **Never past the markers' lifetime.** A letter whose job was first
//! enqueued longer ago than the [`ReplayHorizon`] (the marker TTL less a
//! day to process the copy) stays in the DLQ, reported with the reason
//! ([`RedriveReport::past_horizon`]): its marker may be gone before the copy
//! is processed, and the job would be applied twice. An operator who wants
//! it applied anyway sets [`RedriveOptions::allow_expired_markers`]; the
//! copy is then stamped as first enqueued now, a new job to the consumer,
//! and listed in [`RedriveReport::forced`].
//!
//! [`ReplayHorizon`]: crate::horizon::ReplayHorizon

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_sqs::error::DisplayErrorContext;

use super::copies::Moving;
use super::peek::{DeadMessage, Peek, Sweep};
use super::records::Records;
use crate::failure::DlqError;
use crate::producer::Producer;

#[cfg(test)]
mod bounds_tests;
mod filter;
mod horizon;
mod native;
mod options;
mod run;
mod send;
#[cfg(test)]
mod tests;

pub use filter::{Filter, InvalidFilter, parse_when};
pub use horizon::{first_enqueued_times, past_horizon};
pub use native::{
    InvalidNativeRate, MoveTask, NativeRate, NativeRefusal, cancel_native, check_native,
    native_status, start_native, wait_native,
};
pub use options::{
    HeldElsewhere, InvalidRate, MAX_CONCURRENCY, Progress, Rate, RedriveOptions, RedriveReport,
    Refused, Waiting,
};

/// How often a redrive with [`RedriveOptions::wait`] looks again.
const WAIT_POLL: Duration = Duration::from_secs(1);

/// Shared state of the receive loops.
struct Run {
    sweep: Sweep,
    /// Received and left alone: made visible again at the end.
    held: HashMap<String, DeadMessage>,
    report: RedriveReport,
    budget: Option<usize>,
    next_slot: Instant,
    /// Jobs (by the id the consumer resolves) this run moves, each by the
    /// copy it chose.
    moving: HashMap<String, Moving>,
    /// Of `held`: further copies of a moved job (message id -> job id),
    /// deleted once the chosen copy is sent.
    copies: HashMap<String, String>,
    started: SystemTime,
    /// The latest `ApproximateFirstReceiveTimestamp` read: a time by SQS's
    /// clock that has passed.
    sqs_passed: Option<SystemTime>,
}

/// Moves dead letters from `peek`'s DLQ back to their source queues.
pub struct Redrive<'a> {
    peek: &'a Peek,
    records: Option<&'a Records>,
    options: RedriveOptions,
    producers: tokio::sync::Mutex<HashMap<String, Producer>>,
    destinations: tokio::sync::Mutex<HashMap<String, Result<String, String>>>,
    /// The DLQ's sources (`ListDeadLetterSourceQueues`): the only queues a
    /// letter goes back to without `--to`.
    sources: Vec<String>,
    /// The longest retention of those sources: how long before its
    /// `SentTimestamp` a letter without `idemq-first-enqueued` may have
    /// been enqueued ([`DeadMessage::first_enqueued`]).
    source_retention: Duration,
}

impl<'a> Redrive<'a> {
    /// Reads the DLQ's source queues once.
    pub async fn new(
        peek: &'a Peek,
        records: Option<&'a Records>,
        options: RedriveOptions,
    ) -> Result<Self, DlqError> {
        let sources = dead_letter_sources(peek.sqs(), peek.dlq_url()).await?;
        let source_retention = horizon::longest_retention(peek.sqs(), &sources).await?;
        Ok(Self {
            peek,
            records,
            options,
            producers: tokio::sync::Mutex::default(),
            destinations: tokio::sync::Mutex::default(),
            sources,
            source_retention,
        })
    }

    /// Moves the matching dead letters, each sent to its destination before
    /// it is deleted from the DLQ, and reports what happened. `progress` is
    /// called with (messages done, messages seen).
    pub async fn run(&self, progress: Progress<'_>) -> Result<RedriveReport, DlqError> {
        self.run_waiting(progress, &|_| {}).await
    }

    /// [`Self::run`], and with [`RedriveOptions::wait`], reads again while
    /// letters are held elsewhere, calling `waiting` before each wait.
    pub async fn run_waiting(
        &self,
        progress: Progress<'_>,
        waiting: Waiting<'_>,
    ) -> Result<RedriveReport, DlqError> {
        let run = Mutex::new(Run {
            sweep: Sweep::default(),
            held: HashMap::new(),
            report: RedriveReport::default(),
            budget: self.options.max,
            next_slot: Instant::now(),
            moving: HashMap::new(),
            copies: HashMap::new(),
            started: crate::clock::now(),
            sqs_passed: None,
        });
        let deadline = self.options.wait.map(|w| Instant::now() + w);
        let mut result = loop {
            if let Err(e) = self.pass(&run, progress).await {
                break Err(e);
            }
            let held = match self.held_elsewhere(&run).await {
                Ok(h) => h,
                Err(e) => break Err(e),
            };
            let now = Instant::now();
            let done = held.count == 0
                || run.lock().expect("lock").budget == Some(0)
                || deadline.is_none_or(|d| now >= d);
            if done {
                if held.count > 0 {
                    run.lock().expect("lock").report.held_elsewhere = Some(held);
                }
                break Ok(());
            }
            waiting(&held);
            let left = deadline.map_or(WAIT_POLL, |d| d - now);
            tokio::time::sleep(left.min(WAIT_POLL)).await;
        };
        let mut run = run.into_inner().expect("no loop panicked holding the lock");
        if result.is_ok() && self.peek.is_fifo() && run.budget != Some(0) {
            // What is still in the DLQ: the letters left in place, the ones
            // whose delete failed, and any this run never read.
            let present = run.held.len() + run.report.sent_not_deleted.len();
            result = self.peek.unseen(present).await.map(|n| {
                run.report.unseen = n;
            });
        }
        if self.options.dry_run {
            let mut would: Vec<String> = run.copies.keys().cloned().collect();
            would.sort();
            run.report.copies = would;
        }
        // Released in message-id order, not the map's: the same run releases
        // the same letters in the same calls (the simulation replays a seed
        // exactly). Copies whose chosen copy was never sent (its send
        // failed, or a dry run) go back too.
        let mut held: Vec<DeadMessage> = run.held.drain().map(|(_, m)| m).collect();
        held.sort_by(|a, b| a.message_id.cmp(&b.message_id));
        self.peek.release(&held).await;
        result?;
        Ok(run.report)
    }
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
