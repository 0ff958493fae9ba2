//! The batch contract, the same on Lambda and in the local worker.
//!
//! A batch is processed concurrently (bounded). FIFO messages run in order
//! within their group, and a group stops at its first failure. Near the
//! deadline no job is started. Then:
//! - committed and duplicate jobs are acknowledged (Lambda deletes them; the
//!   worker deletes them in batches);
//! - permanent failures are sent to the DLQ with context and acknowledged;
//! - the rest stay on the queue: their visibility is set with jittered
//!   backoff through `ChangeMessageVisibilityBatch`, and their message ids
//!   are returned, exactly once each, as the partial batch response;
//! - a retry whose next attempt could come after the queue's retention has
//!   run out is dead-lettered now instead (SQS would delete it unprocessed).
//!
//! Everything after the handlers runs on a time [`Budget`]: if Lambda's
//! function timeout passes before the response is returned, the *whole*
//! batch fails and comes back, whatever the handler decided ("If your
//! function throws an exception, the entire batch is considered a complete
//! failure",
//! <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>):
//! messages already dead-lettered would be dead-lettered again, and untried
//! ones would climb to maxReceiveCount. So every call is bounded, optional
//! work (failure records) stops before required work (DLQ sends), and the
//! response is always ready before the deadline.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt, stream};
use tracing::Instrument;

use crate::backoff::{RETENTION_SAFETY_MARGIN, check_retry_within_retention, visibility_timeout};
pub use crate::classify::Verdict;
use crate::classify::{Attempt, classify, rerun_lost_races};
use crate::commit::{CommitError, CommitOutcome, JobRef};
use crate::config::BatchConfig;
use crate::dead_letter::{DeadLetter, DeadLetters};
use crate::failure::{Failure, FailureKind, FailureRecord};
use crate::followup::{AfterCommit, FollowUp, FollowUpSender};
use crate::group_commit::GroupCommit;
use crate::handler::{Handler, JobError, JobMeta, LookUp};
use crate::job::{JOB_ID_ATTRIBUTE, JobIdResolver, JobIdSource, PayloadHash};
use crate::metrics::BatchMetrics;
use crate::queue::{CALL_TIMEOUT, QueueInfo};
use crate::store::{LookedUp, Settled, Store};

mod budget;
mod failures;
mod message;
mod schedule;

pub use budget::Budget;
use budget::bounded;
use failures::failure_record;
pub use message::Message;
#[cfg(any(feature = "lambda", feature = "ops", test))]
pub(crate) use message::epoch_ms;
pub(crate) use schedule::{failed_ids, schedule};

/// What happened to a batch.
#[derive(Debug, Default)]
pub struct BatchReport {
    /// One verdict per message, in batch order.
    pub verdicts: Vec<(String, Verdict)>,
    /// Message ids left on the queue: the partial batch response. Unique,
    /// each one of the batch, in batch order.
    pub failed: Vec<String>,
    /// Receipt handles of messages done with (acknowledged or dead-lettered
    /// by idemq), for a host that deletes them itself.
    pub done: Vec<String>,
    /// The batch's counts and job durations.
    pub metrics: BatchMetrics,
}

/// Processes batches for one handler and its store. Build it once per
/// process.
///
/// Generic over the handler at its edge only: the batch code behind it
/// holds the handler and the store as trait objects of the handler's
/// effect type (`dyn Store<Effect = H::Effect>`), so it is compiled once
/// per effect type and knows no store. A binary with several handlers of
/// one store, as `examples/ledger.rs` has, carries one copy of the batch
/// code, not one per handler.
pub struct Processor<H: Handler> {
    core: Core<H::Effect>,
}

/// A boxed handler future: what [`DynHandler::decode_and_handle`] returns.
type HandlerFuture<'a, E> = BoxFuture<'a, Result<E, JobError>>;

/// A [`Handler`] with its job type erased: the payload is decoded and
/// handled in one call, so the batch never holds a job of a type it does
/// not know.
trait DynHandler<E>: Send + Sync {
    /// Decodes `payload`, then returns the future that handles it. The
    /// handler's `handle` is called when the future is first polled, so
    /// that a panic in it, even before its first `.await`, happens where
    /// it is caught. (Named apart from every other method of the crate:
    /// tests/infra/sdk_calls.py follows a method call to every method of
    /// its name when it works out what a function may call.)
    fn decode_and_handle<'a>(
        &'a self,
        payload: &str,
        meta: JobMeta,
    ) -> Result<HandlerFuture<'a, E>, serde_json::Error>;

    /// What the handler says the look-up before it buys
    /// ([`Handler::look_up`]).
    fn declared_look_up(&self) -> LookUp;
}

/// A [`Handler`] as the batch holds it.
struct Erased<H>(H);

impl<H: Handler> DynHandler<H::Effect> for Erased<H> {
    fn decode_and_handle<'a>(
        &'a self,
        payload: &str,
        meta: JobMeta,
    ) -> Result<HandlerFuture<'a, H::Effect>, serde_json::Error> {
        let job = serde_json::from_str::<H::Job>(payload)?;
        Ok(Box::pin(async move { self.0.handle(job, meta).await }))
    }

    fn declared_look_up(&self) -> LookUp {
        self.0.look_up()
    }
}

/// A settled commit once its follow-ups are dealt with
/// ([`FollowUpSender::after_commit`]): committed, the effect's follow-ups
/// (`follow_ups`) are sent; a duplicate re-sends those its stored marker
/// carries. A follow-up not sent turns the outcome into a transient
/// failure, so the job is not acknowledged.
async fn after_commit(
    sender: &FollowUpSender,
    follow_ups: &[FollowUp],
    Settled { outcome, stored }: Settled,
) -> CommitOutcome {
    let settled = match (&outcome, stored) {
        (CommitOutcome::Committed, _) => AfterCommit::Committed(follow_ups),
        (CommitOutcome::Duplicate, Some(marker)) => AfterCommit::Duplicate(marker),
        _ => return outcome,
    };
    match sender.after_commit(settled).await {
        Ok(()) => outcome,
        Err(reason) => CommitOutcome::Transient { reason },
    }
}

/// A message as a job: its id resolved (or why it has none) and the hash
/// of its payload.
struct Job<'m> {
    resolved: Result<crate::job::ResolvedJob<'m>, crate::job::InvalidJobId>,
    hash: PayloadHash,
}

/// What the batch's look-up found of one job's marker.
enum Found {
    /// Nothing read: the store reads no markers before the handler, or the
    /// job is refused before any read (no valid id, past its horizon).
    NotRead,
    /// The store's answer for this job.
    Read(Result<LookedUp, CommitError>),
    /// The look-up did not answer before the deadline's cut-off.
    TimedOut,
    /// The store panicked while looking up.
    Panicked(String),
}

/// The batch code of a [`Processor`], the same for every handler of an
/// effect type, and for every store.
struct Core<E> {
    handler: Box<dyn DynHandler<E>>,
    store: Arc<dyn Store<Effect = E>>,
    dead_letters: DeadLetters,
    sqs: aws_sdk_sqs::Client,
    resolver: JobIdResolver,
    config: BatchConfig,
    /// Sends committed jobs' follow-ups, with `sqs` ([`crate::followup`]).
    follow_ups: FollowUpSender,
    /// How long markers live: no job first enqueued longer ago is run.
    marker_ttl: Duration,
}

impl<H: Handler> Processor<H> {
    /// A processor for `handler`, whose effects `store` commits and whose
    /// failures it records: sends dead letters and sets visibility with
    /// `sqs`, finds job ids with `resolver`. Jobs are weighed against the
    /// store's marker TTL. Hosts build it once per process
    /// ([`crate::Host`]).
    ///
    /// The first processor of a process puts a panic hook in front of the
    /// one set then, which notes where a panic happened for its job's
    /// failure record and calls that hook ([`crate::failure::BacktraceMode`];
    /// none with `IDEMQ_BACKTRACE=off`). Set a hook of your own before
    /// building the processor: one set after replaces idemq's, and a
    /// panic's failure record then has no backtrace.
    pub fn new(
        handler: H,
        store: Arc<dyn Store<Effect = H::Effect>>,
        sqs: aws_sdk_sqs::Client,
        resolver: JobIdResolver,
        config: BatchConfig,
    ) -> Self {
        crate::backtrace::note_panics();
        Self {
            core: Core {
                marker_ttl: store.marker_ttl(),
                handler: Box::new(Erased(handler)),
                store,
                dead_letters: DeadLetters::new(sqs.clone()),
                follow_ups: FollowUpSender::new(sqs.clone()),
                sqs,
                resolver,
                config,
            },
        }
    }

    /// Runs a batch to its verdicts, sends dead letters, records failures
    /// and sets the visibility of what stays on the queue.
    pub async fn process(
        &self,
        queue: &QueueInfo,
        messages: &[Message],
        deadline: Instant,
    ) -> BatchReport {
        self.core.process(queue, messages, deadline).await
    }

    /// This processor, weighing each job's age against `marker_ttl`: a
    /// job first enqueued that long ago or more is not run
    /// ([`crate::horizon`]). By default the store's marker TTL.
    pub fn with_marker_ttl(mut self, marker_ttl: Duration) -> Self {
        self.core.marker_ttl = marker_ttl;
        self
    }

    /// The marker TTL each job's age is weighed against.
    pub fn marker_ttl(&self) -> Duration {
        self.core.marker_ttl
    }

    /// The batch settings this processor runs with.
    pub fn config(&self) -> &BatchConfig {
        &self.core.config
    }
}

impl<E: Send + Sync + 'static> Core<E> {
    async fn process(
        &self,
        queue: &QueueInfo,
        messages: &[Message],
        deadline: Instant,
    ) -> BatchReport {
        let budget = Budget::new(deadline, self.config.deadline_margin);
        let contended = AtomicU64::new(0);
        // The one place a message becomes a job: its envelope opened (if
        // any), its id resolved, its payload found and hashed.
        let jobs: Vec<Job<'_>> = messages.iter().map(|msg| self.job_of(msg)).collect();
        let found = self.look_up(queue, messages, &jobs, &budget).await;
        // Commits of jobs whose handlers finish together go to the store at
        // once where it gains from that (src/group_commit.rs).
        let gate = GroupCommit::new(&*self.store);
        // Each job's future boxed: its type (decode, handle, commit,
        // classify, record) would otherwise nest inside the scheduler's
        // past what the compiler lays out.
        let verdicts = schedule(messages, deadline, &self.config, |i, msg| {
            Box::pin(self.run_one(
                queue, msg, &jobs[i], &found[i], deadline, &budget, &contended, &gate,
            ))
        })
        .await;
        let mut report = BatchReport {
            metrics: BatchMetrics {
                batch_size: messages.len() as u64,
                contended: contended.into_inner(),
                follow_ups_not_resent: self.follow_ups.take_not_resent(),
                ..BatchMetrics::default()
            },
            ..BatchReport::default()
        };
        let mut visibility = Vec::new();
        let mut untried_last = Vec::new();
        for (msg, (verdict, took)) in messages.iter().zip(verdicts) {
            let last_receive = queue.is_last_receive(msg.receive_count);
            let m = &mut report.metrics;
            match &verdict {
                Verdict::Succeeded => m.succeeded += 1,
                Verdict::Duplicate => m.duplicate += 1,
                Verdict::Retry { retry_after, .. } => {
                    // On its last allowed receive, SQS's redrive moves it next.
                    if last_receive {
                        m.dead_lettered += 1;
                    } else {
                        m.retried += 1;
                    }
                    let delay = retry_after.unwrap_or_else(|| {
                        crate::clock::with_jitter(|rng| {
                            self.config.backoff.delay(msg.receive_count, rng)
                        })
                    });
                    visibility.push((msg, visibility_timeout(delay, msg.received_at.elapsed())));
                }
                Verdict::DeadLetter { failure } => {
                    m.dead_lettered += 1;
                    match failure.kind {
                        FailureKind::Conflict => m.conflict += 1,
                        FailureKind::Expired => m.expired += 1,
                        _ => {}
                    }
                }
                Verdict::NotAttempted { why } => {
                    // Handed back untried: it comes again, so it counts as retried.
                    m.retried += 1;
                    tracing::info!(message_id = msg.message_id.as_str(), "not attempted: {why}");
                    visibility.push((msg, Duration::ZERO));
                    if last_receive {
                        untried_last.push((msg, *why));
                    }
                }
            }
            // One is enough to alarm on: every job fails alike until a
            // deploy fixes it.
            if let Verdict::Retry { failure, .. } | Verdict::DeadLetter { failure } = &verdict
                && failure.kind == FailureKind::Deployment
            {
                m.misconfigured += 1;
            }
            if let Some(took) = took {
                m.job_durations.push(took);
            }
            if !verdict.stays_on_queue() {
                report.done.push(msg.receipt_handle.clone());
            }
            report.verdicts.push((msg.message_id.clone(), verdict));
        }
        report.failed = failed_ids(messages.iter().zip(report.verdicts.iter().map(|(_, v)| v)));
        // Handed back untried on its last allowed receive (a FIFO message
        // behind a failed one of its group, or one the deadline left no
        // time to start), a message is moved to the DLQ by SQS's redrive
        // without ever having run: a failure record says so, or its dead
        // letter would have no context at all. Rare, and optional work.
        let untried = untried_last.iter().map(|(msg, why)| {
            let record = self.untried_record(queue, msg, why);
            let budget = &budget;
            async move { self.record(&record, budget).await }
        });
        futures_util::future::join_all(untried).await;
        let entries: Vec<(&str, &str, Duration)> = visibility
            .iter()
            .map(|(m, t)| (m.message_id.as_str(), m.receipt_handle.as_str(), *t))
            .collect();
        // The chaos suite dies here: failures known, visibility not yet set.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("batch::before-visibility", |_| -> BatchReport {
            std::process::abort()
        });
        // Parallel calls, none past the budget: one not made only means SQS
        // makes the message visible when its current timeout ends.
        let unchanged =
            crate::queue::change_visibility_by(&self.sqs, &queue.url, &entries, budget.respond_by)
                .await;
        if unchanged > 0 {
            tracing::warn!(
                messages = unchanged,
                "visibility not changed before the deadline: SQS makes these messages visible \
                 again when the queue's visibility timeout ({}s) ends",
                queue.visibility_timeout.as_secs()
            );
        }
        report
    }

    /// A message as a job: its id (or why it has none), its payload and
    /// the payload's hash, which covers an enveloped job's inner message,
    /// or the whole body when there is no job to find.
    fn job_of<'m>(&self, msg: &'m Message) -> Job<'m> {
        let resolved =
            self.resolver
                .resolve_job(msg.job_id_attribute(), &msg.body, &msg.message_id);
        let payload = resolved.as_ref().map_or(msg.body.as_str(), |j| &j.payload);
        let hash = PayloadHash::of(payload.as_bytes());
        Job { resolved, hash }
    }

    /// The markers of the batch's jobs, read before any handler runs, in
    /// one call of the store ([`Store::look_up`]; on DynamoDB one
    /// `BatchGetItem` per 100 keys, src/store/dynamodb/commit/look_up.rs;
    /// on PostgreSQL one statement): what each job's look-up found, or
    /// [`Found::NotRead`] for a job with no valid id, one past its markers'
    /// horizon (its run refuses it before anything is read), a store that
    /// reads nothing before the handler (`IDEMQ_READ_MARKER_FIRST=false`),
    /// or a handler that says the read buys nothing
    /// ([`LookUp::NotNeeded`]). A panic or a hang of the
    /// store is every job's that waited on it, as it would be one at a
    /// time.
    async fn look_up(
        &self,
        queue: &QueueInfo,
        messages: &[Message],
        jobs: &[Job<'_>],
        budget: &Budget,
    ) -> Vec<Found> {
        let mut found: Vec<Found> = jobs.iter().map(|_| Found::NotRead).collect();
        if !self.store.looks_up() || self.handler.declared_look_up() == LookUp::NotNeeded {
            return found;
        }
        let now = crate::clock::now();
        let mut at = Vec::new();
        let mut refs = Vec::new();
        for (i, (job, msg)) in jobs.iter().zip(messages).enumerate() {
            let remembered =
                crate::horizon::check_markers_remember(msg.first_enqueued(), now, self.marker_ttl)
                    .is_ok();
            if let (Ok(resolved), true) = (&job.resolved, remembered) {
                at.push(i);
                refs.push(JobRef {
                    id: &resolved.id,
                    payload_hash: &job.hash,
                    queue: &queue.name,
                });
            }
        }
        if refs.is_empty() {
            return found;
        }
        let read = AssertUnwindSafe(self.store.look_up(&refs)).catch_unwind();
        let results = match tokio::time::timeout_at(budget.abandon_at, read).await {
            Err(_) => at.iter().map(|_| Found::TimedOut).collect(),
            Ok(Err(panic)) => {
                let why = crate::backtrace::payload_text(panic.as_ref());
                at.iter().map(|_| Found::Panicked(why.clone())).collect()
            }
            Ok(Ok(results)) if results.len() == refs.len() => {
                results.into_iter().map(Found::Read).collect()
            }
            Ok(Ok(results)) => {
                let why = format!(
                    "the store's look-up answered for {} of {} jobs",
                    results.len(),
                    refs.len()
                );
                at.iter()
                    .map(|_| Found::Read(Err(CommitError::Service(why.clone()))))
                    .collect::<Vec<_>>()
            }
        };
        for (i, result) in at.into_iter().zip(results) {
            found[i] = result;
        }
        found
    }

    /// One job: decode, handle (panics caught), commit, and for a failure
    /// record it and, if permanent, dead-letter it. `found` is what its
    /// marker's look-up found.
    #[allow(clippy::too_many_arguments)]
    async fn run_one<'b>(
        &self,
        queue: &'b QueueInfo,
        msg: &Message,
        job: &'b Job<'_>,
        found: &Found,
        deadline: Instant,
        budget: &Budget,
        contended: &AtomicU64,
        gate: &GroupCommit<'b, E>,
    ) -> Verdict {
        let resolved = &job.resolved;
        match resolved.as_ref().map(|j| j.source) {
            Ok(JobIdSource::MessageId) => crate::job::warn_message_id_identity(),
            Ok(JobIdSource::EnvelopeId) => {
                crate::envelope::warn_envelope_id_identity(self.resolver.envelope)
            }
            _ => false,
        };
        // No payload in logs: ids, attempt and size only.
        let span = tracing::info_span!(
            "job",
            job_id = resolved.as_ref().ok().map(|j| j.id.as_str()),
            message_id = msg.message_id.as_str(),
            attempt = msg.receive_count,
            payload_bytes = msg.body.len(),
        );
        self.run_resolved(queue, msg, job, found, deadline, budget, contended, gate)
            .instrument(span)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_resolved<'b>(
        &self,
        queue: &'b QueueInfo,
        msg: &Message,
        job: &'b Job<'_>,
        found: &Found,
        deadline: Instant,
        budget: &Budget,
        contended: &AtomicU64,
        gate: &GroupCommit<'b, E>,
    ) -> Verdict {
        let Job { resolved, hash } = job;
        let payload = resolved.as_ref().map_or(msg.body.as_str(), |j| &j.payload);
        let job_id = resolved.as_ref().ok().map(|j| j.id.clone());
        // Before anything runs: a job its markers can no longer remember
        // could be applied twice, and its handler may act outside DynamoDB.
        // Every redelivery of it is judged alike.
        let remembered = crate::horizon::check_markers_remember(
            msg.first_enqueued(),
            crate::clock::now(),
            self.marker_ttl,
        );
        let attempt = match (resolved, remembered) {
            (Err(e), _) => Attempt::InvalidJobId(e.clone()),
            (Ok(_), Err(expired)) => Attempt::Expired(expired),
            (Ok(crate::job::ResolvedJob { id, .. }), Ok(())) => {
                let job_ref = JobRef {
                    id,
                    payload_hash: hash,
                    queue: &queue.name,
                };
                let meta = JobMeta {
                    job_id: id.clone(),
                    attempt: msg.receive_count,
                    queue: queue.name.clone(),
                    namespace: self.store.namespace_for(&queue.name).into(),
                    queue_url: queue.url.clone(),
                    message_id: msg.message_id.clone(),
                    deadline,
                };
                let work =
                    self.look_up_then_run(job_ref, found, payload, meta, budget, contended, gate);
                let guarded = AssertUnwindSafe(work).catch_unwind();
                match tokio::time::timeout_at(budget.abandon_at, guarded).await {
                    Err(_) => Attempt::TimedOut,
                    Ok(Err(panic)) => {
                        // Taken on the thread the panic unwound on, before
                        // anything else can panic there.
                        let message = crate::backtrace::payload_text(panic.as_ref());
                        let backtrace = crate::backtrace::take_panic(&message);
                        Attempt::Panicked { message, backtrace }
                    }
                    Ok(Ok(attempt)) => attempt,
                }
            }
        };
        let verdict = self.within_retention(queue, msg, classify(attempt));
        let failure = match &verdict {
            Verdict::Retry { failure, .. } | Verdict::DeadLetter { failure } => failure.clone(),
            Verdict::Succeeded => {
                tracing::debug!("committed");
                return verdict;
            }
            _ => return verdict,
        };
        let record = failure_record(queue, msg, job_id.map(|j| j.to_string()), hash, failure);
        tracing::warn!(
            kind = record.failure.kind.as_str(),
            error = record.failure.error,
            "job failed"
        );
        if matches!(verdict, Verdict::DeadLetter { .. }) {
            // Side by side: the record never delays the send that decides
            // whether the message may be acknowledged.
            let (verdict, _) = tokio::join!(
                self.dead_letter(queue, msg, &record, verdict, budget),
                self.record(&record, budget),
            );
            return verdict;
        }
        let recorded = self.record(&record, budget).await;
        // On its last allowed receive a retried message is moved to the DLQ
        // by SQS's redrive as it is, with no `idemq-error` attribute
        // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>):
        // its failure record is then the only context `idemq dlq` can show.
        // When that record could not be written (DynamoDB throttled or
        // down, often the very outage the job failed on), idemq dead-letters
        // the message itself now, its context in the letter's attributes;
        // if that send fails too, SQS's redrive still moves it.
        if !recorded
            && queue.is_last_receive(msg.receive_count)
            && let Verdict::Retry { failure, .. } = &verdict
        {
            let failure = failure.clone();
            return self
                .dead_letter(queue, msg, &record, Verdict::DeadLetter { failure }, budget)
                .await;
        }
        verdict
    }

    /// A job with a valid id: what the batch's look-up found of its marker
    /// (`found`; [`Core::look_up`]) first: a job already committed is
    /// settled without running its handler, and its stored follow-ups are
    /// re-sent. Then it is decoded, handled and committed, a lost race
    /// re-running it within this invocation.
    #[allow(clippy::too_many_arguments)]
    async fn look_up_then_run<'b>(
        &self,
        job_ref: JobRef<'b>,
        found: &Found,
        payload: &str,
        meta: JobMeta,
        budget: &Budget,
        contended: &AtomicU64,
        gate: &GroupCommit<'b, E>,
    ) -> Attempt {
        match found {
            Found::NotRead | Found::Read(Ok(LookedUp::Absent)) => {}
            Found::Read(Ok(LookedUp::Settled(settled))) => {
                let settled = settled.clone();
                return Attempt::Commit(Ok(after_commit(&self.follow_ups, &[], settled).await));
            }
            Found::Read(Err(e)) => return Attempt::Commit(Err(e.shared())),
            Found::TimedOut => return Attempt::TimedOut,
            Found::Panicked(why) => {
                return Attempt::Panicked {
                    message: why.clone(),
                    backtrace: None,
                };
            }
        }
        // A lost optimistic-concurrency race runs the job again (decoded
        // afresh), within this invocation.
        let running = gate.enter();
        let work = rerun_lost_races(
            self.config.contention_retries,
            budget.start_by,
            contended,
            || {
                let run = self.handler.decode_and_handle(payload, meta.clone());
                let running = &running;
                async move {
                    let effect = run
                        .map_err(Attempt::Undecodable)?
                        .await
                        .map_err(Attempt::Handler)?;
                    let (commit, effect) = gate.commit(running, job_ref, effect).await;
                    let follow_ups = effect
                        .as_ref()
                        .map_or(&[][..], |e| self.store.follow_ups(e));
                    // Follow-ups go out after the commit and before the
                    // acknowledgement (src/followup/).
                    Ok(match commit {
                        Ok(settled) => {
                            Ok(after_commit(&self.follow_ups, follow_ups, settled).await)
                        }
                        Err(e) => Err(e),
                    })
                }
            },
        );
        let result = work.await;
        gate.leave(running).await;
        match result {
            Err(attempt) => attempt,
            Ok(commit) => Attempt::Commit(commit),
        }
    }
}

#[cfg(test)]
mod tests;

/// The handler behind its trait object (`DynHandler`) keeps the contract:
/// a handler that panics before its future exists fails its own job only.
#[cfg(all(test, feature = "testing"))]
mod erased_handler_tests;
