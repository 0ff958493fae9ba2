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

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use aws_sdk_sqs::error::DisplayErrorContext;
use futures_util::future::join_all;
use serde::Serialize;

use super::copies::{Further, Moving, judge_further, payload_hash};
use super::peek::{Context, DeadMessage, Peek, Sweep, join_records};
use super::records::Records;
use crate::dead_letter::DlqError;
use crate::horizon::ReplayHorizon;
use crate::job::JobIdResolver;
use crate::producer::{Job, Producer};
use crate::queue::{QueueInfo, url_of_arn};

/// Which dead letters to move. Empty: all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these job ids (or message ids).
    pub job_ids: HashSet<String>,
    /// Only those whose last error contains this, case-insensitively.
    pub error_contains: Option<String>,
    /// Only those that failed at or after this.
    pub since: Option<SystemTime>,
    /// Only those that failed at or before this.
    pub until: Option<SystemTime>,
}

impl Filter {
    /// Whether a dead letter with this context is to move.
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

    /// Whether `--error-contains` can judge this letter at all: a letter
    /// with no recorded error (no failure record, no `idemq-error`) never
    /// matches, and the operator is told how many there were.
    pub fn can_judge(&self, c: &Context) -> bool {
        self.error_contains.is_none() || !c.error_line().is_empty()
    }

    /// The filter an operator's flags describe: `job_ids` (duplicates
    /// count once), `error_contains` (empty: no filter), `since` and
    /// `until` as [`parse_when`] reads them at `now`. A window that ends
    /// before it starts is refused: nothing could match.
    pub fn from_flags(
        job_ids: impl IntoIterator<Item = String>,
        error_contains: Option<String>,
        since: Option<&str>,
        until: Option<&str>,
        now: SystemTime,
    ) -> Result<Self, InvalidFilter> {
        let filter = Self {
            job_ids: job_ids.into_iter().collect(),
            error_contains: error_contains.filter(|s| !s.is_empty()),
            since: since.map(|s| parse_when("--since", s, now)).transpose()?,
            until: until.map(|s| parse_when("--until", s, now)).transpose()?,
        };
        if let (Some(s), Some(u)) = (filter.since, filter.until)
            && s > u
        {
            return Err(InvalidFilter::EmptyWindow);
        }
        Ok(filter)
    }
}

/// Why an operator's filter flags describe no usable [`Filter`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidFilter {
    /// The value of this flag is neither a time nor a duration.
    #[error("{flag} {value:?} is neither a time (2026-12-01T10:00:00Z) nor a duration ago (2h)")]
    NotATime {
        /// The flag (`--since`, `--until`).
        flag: String,
        /// What was given.
        value: String,
    },
    /// This duration ago is before the Unix epoch.
    #[error("{flag} {value:?} reaches before 1970")]
    BeforeEpoch {
        /// The flag (`--since`, `--until`).
        flag: String,
        /// What was given.
        value: String,
    },
    /// `since` is after `until`.
    #[error("--since is after --until: nothing could match")]
    EmptyWindow,
}

/// A time (RFC 3339, `2026-12-01T10:00:00Z`) or a duration before `now`
/// (`2h`, `30m`), as the value of `flag`.
pub fn parse_when(flag: &str, value: &str, now: SystemTime) -> Result<SystemTime, InvalidFilter> {
    if let Ok(t) = humantime::parse_rfc3339_weak(value) {
        return Ok(t);
    }
    if let Ok(d) = humantime::parse_duration(value) {
        return now
            .checked_sub(d)
            .ok_or_else(|| InvalidFilter::BeforeEpoch {
                flag: flag.to_owned(),
                value: value.to_owned(),
            });
    }
    Err(InvalidFilter::NotATime {
        flag: flag.to_owned(),
        value: value.to_owned(),
    })
}

/// A redrive pace in messages per second, checked so that the wait it
/// implies is a real duration: `--rate 1e-300` would be one message every
/// 10^292 years, which no `Duration` holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(f64);

/// A `--rate` that is not a usable pace.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--rate {}: {why}", show_number(*value))]
pub struct InvalidRate {
    /// The number given.
    pub value: f64,
    /// Why it was refused.
    pub why: String,
}

/// A number as an operator would type it: `1e-300`, not 300 zeros.
fn show_number(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-3..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

impl Rate {
    /// The slowest pace: one message a day.
    pub const MIN_PER_SECOND: f64 = 1.0 / 86_400.0;

    /// A pace of `value` messages per second, at least [`Self::MIN_PER_SECOND`].
    pub fn per_second(value: f64) -> Result<Self, InvalidRate> {
        if !value.is_finite() || value <= 0.0 {
            return Err(InvalidRate {
                value,
                why: "must be a positive number of messages per second".into(),
            });
        }
        if value < Self::MIN_PER_SECOND {
            return Err(InvalidRate {
                value,
                why: format!(
                    "is slower than the slowest pace, one message a day ({:e}/s)",
                    Self::MIN_PER_SECOND
                ),
            });
        }
        Ok(Self(value))
    }

    /// Messages per second.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The time `n` messages take at this pace; at most `n` days.
    pub fn interval(self, n: usize) -> Duration {
        Duration::try_from_secs_f64(n as f64 / self.0).unwrap_or(Duration::MAX)
    }
}

/// A pace for SQS's move task: a whole number of messages per second, 1
/// to 500
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html>,
/// `MaxNumberOfMessagesPerSecond`: "The maximum value for messages per
/// second is 500").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeRate(i32);

/// A `--rate` SQS's move task cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--rate {value}: SQS's move task takes a whole number of messages per second, 1 to 500")]
pub struct InvalidNativeRate {
    /// The number given.
    pub value: f64,
}

impl NativeRate {
    /// `value` messages per second, if SQS's move task takes it.
    pub fn new(value: f64) -> Result<Self, InvalidNativeRate> {
        if value.is_finite() && (1.0..=500.0).contains(&value) && value.fract() == 0.0 {
            Ok(Self(value as i32))
        } else {
            Err(InvalidNativeRate { value })
        }
    }

    /// Messages per second, as [`start_native`] takes it.
    pub fn messages_per_second(self) -> i32 {
        self.0
    }
}

/// Receive loops at most (`--concurrency`): each holds up to 10 messages
/// and one request in flight; more only adds throttling.
pub const MAX_CONCURRENCY: usize = 32;

/// What `idemq dlq redrive` moves, how fast and where.
#[derive(Debug, Clone)]
pub struct RedriveOptions {
    /// Which dead letters move.
    pub filter: Filter,
    /// At most this many messages.
    pub max: Option<usize>,
    /// At most this many messages per second.
    pub rate: Option<Rate>,
    /// List what would move; move nothing.
    pub dry_run: bool,
    /// Send everything here instead of to each message's source queue.
    pub to: Option<String>,
    /// Receive loops at once (1 to [`MAX_CONCURRENCY`]).
    pub concurrency: usize,
    /// Finds each message's job id as the consumer does (the
    /// `idemq-job-id` attribute, the body pointer, the MessageId): the id
    /// its failure record is under, and the `idemq-job-id` its copy carries.
    pub resolver: JobIdResolver,
    /// While letters are held by another reader (in flight), read again
    /// for up to this long until they come back; `None`: one pass, and
    /// the held ones are reported in [`RedriveReport::held_elsewhere`].
    pub wait: Option<Duration>,
    /// How old a letter's job may be for a copy to be sent: the consumer's
    /// marker TTL (`IDEMQ_MARKER_TTL`) less a day.
    pub horizon: ReplayHorizon,
    /// Send letters past the horizon too (`--allow-expired-markers`),
    /// stamped as first enqueued now: their jobs may be applied twice.
    pub allow_expired_markers: bool,
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
            resolver: JobIdResolver::new(),
            wait: None,
            horizon: ReplayHorizon::default(),
            allow_expired_markers: false,
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
    /// Of the skipped: letters `--error-contains` could not judge, having
    /// no recorded error.
    pub unjudged: usize,
    /// Of the skipped: letters of a job this run had already moved. A job
    /// that fails permanently dies again while the run goes on, as a new
    /// letter (a new MessageId); moving it again would go on for as long as
    /// consumers run (the simulation saw one job moved 1,391 times in one
    /// run). Each job moves at most once per run; the next run takes the
    /// newer letter.
    pub again: usize,
    /// Could not be moved: (message id, why). They stay in the DLQ.
    pub failed: Vec<(String, String)>,
    /// Sent, but the delete from the DLQ failed: it will be delivered again
    /// by a rerun, and absorbed as a duplicate.
    pub sent_not_deleted: Vec<String>,
    /// About how many letters the redrive could not read at all (FIFO
    /// groups blocked behind letters it left in place); 0 on a standard
    /// queue or when `--max` ended the run.
    pub unseen: u64,
    /// Copies of a moved job (same job id, same payload) removed from the
    /// DLQ once the chosen copy was sent (dry run: would be removed): their
    /// MessageIds. Not counted as skipped.
    pub copies: Vec<String>,
    /// Copies whose delete failed: still in the DLQ, harmless (a rerun
    /// sends the job again, absorbed as a duplicate).
    pub copies_not_deleted: Vec<String>,
    /// Of the skipped: (job id, message id) of letters that share a moved
    /// letter's job id but not its payload. Not copies, so left in place:
    /// the consumer would take one of them for a conflict.
    pub different_payload: Vec<(String, String)>,
    /// Letters in flight, held by another reader (a killed run, a
    /// concurrent `idemq dlq` command), when the redrive ended: it could
    /// not read them.
    pub held_elsewhere: Option<HeldElsewhere>,
    /// Letters that matched but whose job was first enqueued past the
    /// [`ReplayHorizon`]: left in the DLQ, each with why. Not counted as
    /// skipped.
    pub past_horizon: Vec<Refused>,
    /// Of the moved: letters past the horizon sent anyway
    /// ([`RedriveOptions::allow_expired_markers`]), stamped as first
    /// enqueued now. Their jobs may be applied twice.
    pub forced: Vec<Refused>,
}

impl RedriveReport {
    /// Whether the redrive did all it was asked: nothing failed, every
    /// letter was read (none unseen, none held by another reader), and
    /// none was left past the replay horizon (work the operator asked for
    /// and did not get: a failure, not a quiet skip).
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty()
            && self.unseen == 0
            && self.held_elsewhere.is_none()
            && self.past_horizon.is_empty()
    }
}

/// A letter judged past the [`ReplayHorizon`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Its DLQ MessageId.
    pub message_id: String,
    /// The job id the consumer resolves for it, if any.
    pub job_id: Option<String>,
    /// Its first-enqueued time, age, the horizon, and the flag that
    /// overrides.
    pub why: String,
}

/// Dead letters another reader holds invisible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeldElsewhere {
    /// About how many (`ApproximateNumberOfMessagesNotVisible`, less the
    /// ones this run holds).
    pub count: u64,
    /// The DLQ's `VisibilityTimeout`: a reader that set none returns them
    /// within it; one that set its own (as `idemq dlq` does with
    /// `--hold-secs`) may hold them up to SQS's 12 hours
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-visibility-timeout.html>).
    pub queue_visibility_timeout: Option<Duration>,
}

/// How many letters another reader holds, and when they come back.
impl std::fmt::Display for HeldElsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "about {} dead letters are held by another reader (in flight: a killed run, another \
             idemq dlq command); ",
            self.count
        )?;
        match self.queue_visibility_timeout {
            Some(t) => write!(
                f,
                "they come back when that reader's hold ends: within the DLQ's visibility timeout ({}) \
                 if it set none, up to 12h if it set its own",
                humantime::format_duration(t)
            ),
            None => f.write_str("they come back when that reader's hold ends"),
        }
    }
}

/// Progress after each batch: (moved so far, seen so far).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// Called before each wait for letters held elsewhere.
pub type Waiting<'a> = &'a (dyn Fn(&HeldElsewhere) + Sync);

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
        let source_retention = longest_retention(peek.sqs(), &sources).await?;
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

    /// When `msg`'s job was first enqueued, at the latest (see
    /// [`DeadMessage::first_enqueued`]).
    fn first_enqueued(&self, msg: &DeadMessage) -> Option<SystemTime> {
        msg.first_enqueued(self.peek.is_fifo(), self.source_retention)
    }

    /// Whether a copy of `msg` may be sent at `now` ([`judge_age`]).
    fn judge_age(&self, msg: &DeadMessage, now: SystemTime) -> Result<(), String> {
        judge_age(self.first_enqueued(msg), &self.options.horizon, now)
    }

    /// The first-enqueued time a copy of `msg` carries: the letter's job's,
    /// or now for a letter sent past the horizon (forced): as far as the
    /// consumer can tell, a new job.
    fn copy_first_enqueued(&self, msg: &DeadMessage, now: SystemTime) -> SystemTime {
        match self.first_enqueued(msg) {
            Some(first) if self.options.horizon.check(first, now).is_ok() => first,
            _ => now,
        }
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

    /// Deletes the copies held of jobs whose chosen copy SQS accepted. Only
    /// then: killed before, the run leaves both, and a rerun sends the job
    /// again (a duplicate the consumer absorbs), never none.
    async fn remove_sent_copies(&self, run: &Mutex<Run>) {
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

    /// One pass: the receive loops until the DLQ shows nothing new, then
    /// (FIFO) the groups they may have cut short.
    async fn pass(&self, run: &Mutex<Run>, progress: Progress<'_>) -> Result<(), DlqError> {
        let concurrency = self.options.concurrency.clamp(1, MAX_CONCURRENCY);
        let loops = (0..concurrency).map(|_| self.receive_loop(run, progress));
        join_all(loops)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()?;
        if self.peek.is_fifo() {
            self.sweep_fifo_groups(run, progress).await?;
        }
        Ok(())
    }

    /// Letters in flight that this run does not hold: another reader's.
    async fn held_elsewhere(&self, run: &Mutex<Run>) -> Result<HeldElsewhere, DlqError> {
        let in_flight = self.peek.depth().await?.in_flight;
        let ours = {
            let r = run.lock().expect("lock");
            r.held.len() + r.report.sent_not_deleted.len()
        };
        let count = in_flight.saturating_sub(ours as u64);
        let queue_visibility_timeout = if count > 0 {
            QueueInfo::discover(self.peek.sqs(), self.peek.dlq_url())
                .await
                .ok()
                .map(|q| q.visibility_timeout)
        } else {
            None
        };
        Ok(HeldElsewhere {
            count,
            queue_visibility_timeout,
        })
    }

    /// FIFO: a letter left in place blocks its group, so letters behind it
    /// were never received. Each group a full response may have cut short
    /// is released alone and received again, until none brings anything
    /// new (see [`Sweep`]).
    async fn sweep_fifo_groups(
        &self,
        run: &Mutex<Run>,
        progress: Progress<'_>,
    ) -> Result<(), DlqError> {
        loop {
            let of_group: Vec<DeadMessage> = {
                let mut r = run.lock().expect("lock");
                if r.budget == Some(0) {
                    return Ok(());
                }
                let Some(group) = r.sweep.next_cut() else {
                    return Ok(());
                };
                r.held
                    .values()
                    .filter(|m| m.group_id() == Some(group.as_str()))
                    .cloned()
                    .collect()
            };
            self.peek.release(&of_group).await;
            let batch = self.peek.receive().await?;
            self.judge_and_move(run, batch, Instant::now(), progress)
                .await?;
        }
    }

    async fn receive_loop(&self, run: &Mutex<Run>, progress: Progress<'_>) -> Result<(), DlqError> {
        let mut empty = 0;
        while empty < 2 {
            if run.lock().expect("lock").budget == Some(0) {
                return Ok(());
            }
            let batch = self.peek.receive().await?;
            if self
                .judge_and_move(run, batch, Instant::now(), progress)
                .await?
            {
                empty = 0;
            } else {
                empty += 1;
            }
        }
        Ok(())
    }

    /// Judges one received batch (whose receive returned at `received_at`)
    /// and moves what matches; returns whether it held anything new.
    async fn judge_and_move(
        &self,
        run: &Mutex<Run>,
        batch: Vec<DeadMessage>,
        received_at: Instant,
        progress: Progress<'_>,
    ) -> Result<bool, DlqError> {
        let joined = join_records(self.records, &self.options.resolver, &batch).await?;
        let mut to_move = Vec::new();
        let mut fresh_any = false;
        {
            let mut run = run.lock().expect("lock");
            let passed = batch
                .iter()
                .filter_map(DeadMessage::first_received_at)
                .max();
            run.sqs_passed = run.sqs_passed.max(passed);
            let fresh = run.sweep.note(&batch);
            for ((msg, (key, context)), fresh) in batch.into_iter().zip(joined).zip(fresh) {
                if !fresh {
                    // Came back (after its hold, or released for its group):
                    // still left alone, newest handle kept.
                    if run.held.contains_key(&msg.message_id) {
                        run.held.insert(msg.message_id.clone(), msg);
                    }
                    continue;
                }
                fresh_any = true;
                let within_budget = run.budget.is_none_or(|b| b > 0);
                let hash = payload_hash(&msg);
                let further = key.0.as_ref().and_then(|job| {
                    let moving = run.moving.get(job)?;
                    Some(judge_further(
                        moving,
                        &hash,
                        received_at,
                        msg.sent_at(),
                        run.started,
                    ))
                });
                let again = further == Some(Further::Again);
                if let (Some(Further::Copy), Some(job)) = (further, &key.0) {
                    run.copies.insert(msg.message_id.clone(), job.clone());
                    run.held.insert(msg.message_id.clone(), msg);
                } else if let (Some(Further::Different), Some(job)) = (further, &key.0) {
                    run.report.skipped += 1;
                    run.report
                        .different_payload
                        .push((job.clone(), msg.message_id.clone()));
                    run.held.insert(msg.message_id.clone(), msg);
                } else if within_budget && !again && self.options.filter.matches(&context) {
                    // Past the horizon, its marker may expire before the
                    // copy is processed: only the operator may decide.
                    match self.judge_age(&msg, crate::clock::now()) {
                        Ok(()) => {}
                        Err(why) if !self.options.allow_expired_markers => {
                            run.report.past_horizon.push(Refused {
                                message_id: msg.message_id.clone(),
                                job_id: key.0.clone(),
                                why,
                            });
                            run.held.insert(msg.message_id.clone(), msg);
                            continue;
                        }
                        Err(why) => {
                            tracing::warn!(
                                message_id = msg.message_id.as_str(),
                                "sent past the replay horizon ({}), as a new job that may apply twice: {why}",
                                crate::horizon::ALLOW_EXPIRED_FLAG
                            );
                            run.report.forced.push(Refused {
                                message_id: msg.message_id.clone(),
                                job_id: key.0.clone(),
                                why,
                            });
                        }
                    }
                    if let Some(b) = run.budget.as_mut() {
                        *b -= 1;
                    }
                    if let Some(job) = key.0 {
                        run.moving.insert(
                            job,
                            Moving {
                                hash,
                                send_started: None,
                                sqs_before_send: None,
                                sent: false,
                            },
                        );
                    }
                    to_move.push((msg, context));
                } else {
                    run.report.skipped += 1;
                    if again {
                        run.report.again += 1;
                    } else if !self.options.filter.can_judge(&context) {
                        run.report.unjudged += 1;
                    }
                    run.held.insert(msg.message_id.clone(), msg);
                }
            }
        }
        if !fresh_any {
            return Ok(false);
        }
        if self.options.dry_run {
            let mut run = run.lock().expect("lock");
            for (msg, context) in to_move {
                run.report.moved.push(context);
                run.held.insert(msg.message_id.clone(), msg);
            }
        } else {
            if !to_move.is_empty() {
                self.pace(run, to_move.len()).await;
                self.move_batch(run, to_move).await;
            }
            // Copies of jobs sent earlier, read in this batch, and copies of
            // the jobs this batch sent.
            self.remove_sent_copies(run).await;
        }
        let r = run.lock().expect("lock");
        progress(r.report.moved.len(), r.sweep.seen());
        Ok(true)
    }

    /// Waits until `n` more messages fit under `--rate`.
    async fn pace(&self, run: &Mutex<Run>, n: usize) {
        let Some(rate) = self.options.rate else {
            return;
        };
        let at = {
            let mut run = run.lock().expect("lock");
            let at = run.next_slot.max(Instant::now());
            run.next_slot = at.checked_add(rate.interval(n)).unwrap_or(at);
            at
        };
        tokio::time::sleep_until(at.into()).await;
    }

    /// Sends one received batch to its destinations, then deletes from the
    /// DLQ exactly the messages whose copy SQS accepted.
    async fn move_batch(&self, run: &Mutex<Run>, batch: Vec<(DeadMessage, Context)>) {
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

/// Whether a copy of a letter whose job was first enqueued at `first` may
/// be sent at `now`: `Err` with why not, for a letter past `horizon` or of
/// unknown age.
fn judge_age(
    first: Option<SystemTime>,
    horizon: &ReplayHorizon,
    now: SystemTime,
) -> Result<(), String> {
    match first {
        Some(first) => horizon.check(first, now).map_err(|e| e.to_string()),
        None => Err(format!(
            "its first-enqueued time is unknown (no idemq-first-enqueued, no SentTimestamp); \
             left in the DLQ (pass {} to send it anyway, as a new job that may apply twice)",
            crate::horizon::ALLOW_EXPIRED_FLAG
        )),
    }
}

/// The letters among `letters`, read from `peek`'s DLQ, that are past
/// `horizon` at `now` (or of unknown age). SQS's move task
/// (`StartMessageMoveTask`) moves every letter and stamps none, so it must
/// not start while there is one: its copy would reach the consumer with a
/// new `SentTimestamp` and, lacking `idemq-first-enqueued`, look new.
pub async fn past_horizon(
    peek: &Peek,
    letters: &[DeadMessage],
    horizon: &ReplayHorizon,
    resolver: &JobIdResolver,
    now: SystemTime,
) -> Result<Vec<Refused>, DlqError> {
    let firsts = first_enqueued_times(peek, letters).await?;
    Ok(letters
        .iter()
        .zip(firsts)
        .filter_map(|(m, first)| {
            let why = judge_age(first, horizon, now).err()?;
            Some(Refused {
                message_id: m.message_id.clone(),
                job_id: m.resolve(resolver).ok().map(|(id, _)| id),
                why,
            })
        })
        .collect())
}

/// Why SQS's move task is not to start on a DLQ (see [`check_native`]).
#[derive(Debug, thiserror::Error)]
pub enum NativeRefusal {
    /// Letters past the replay horizon: the task would move them too.
    #[error(
        "{} of {read} dead letters are past the replay horizon: SQS's move task would \
         move them too, as new jobs their markers may no longer remember. Use the \
         default redrive (it leaves them in the DLQ and moves the rest), or pass \
         --allow-expired-markers to move them anyway",
        .refused.len()
    )]
    PastHorizon {
        /// Each letter past the horizon, with why.
        refused: Vec<Refused>,
        /// Letters read.
        read: usize,
    },
    /// Letters known only by their MessageId, which the task changes.
    #[error(
        "{unstable} of {read} dead letters carry no idemq-job-id{}: SQS's move task gives each \
         a new MessageId, so the consumer would apply them again as new jobs. Use the default \
         redrive (it stamps idemq-job-id), or pass --force to move them anyway",
        pointer_note(.body_pointer)
    )]
    NoStableId {
        /// How many.
        unstable: usize,
        /// Letters read.
        read: usize,
        /// Whether the consumer also looks for a job id in the body.
        body_pointer: bool,
    },
    /// About this many letters could not be read, and may be either.
    #[error(
        "not starting the move task: the unread letters may lack idemq-job-id \
         or be past the replay horizon (--force and --allow-expired-markers move anyway)"
    )]
    Unseen(u64),
    /// The letters' ages could not be read.
    #[error(transparent)]
    Dlq(#[from] DlqError),
}

/// What else the consumer looked at for a job id.
fn pointer_note(body_pointer: &bool) -> &'static str {
    if *body_pointer {
        " and no job id at IDEMQ_JOB_ID_POINTER"
    } else {
        ""
    }
}

impl NativeRefusal {
    /// Whether the operator can clear it with a flag (the default redrive,
    /// `--force`, `--allow-expired-markers`), rather than a rerun.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::PastHorizon { .. } | Self::NoStableId { .. })
    }
}

/// Whether SQS's move task may start on `peek`'s DLQ, whose letters
/// (`letters`, with about `unseen` more not read) the consumer resolves
/// with `resolver`.
///
/// The task cannot add `idemq-job-id`, and gives every message it moves a
/// new MessageId
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>:
/// "All redriven messages are considered new messages and are assigned a
/// new messageID"). A job known only by its MessageId would be applied
/// again, so it starts only when every letter carries a stable id
/// (attribute or body pointer), or with `force`. Nor can it leave a letter
/// behind or stamp `idemq-first-enqueued`: it starts only when no letter
/// is past `horizon`, or with `allow_expired_markers`.
pub async fn check_native(
    peek: &Peek,
    letters: &[DeadMessage],
    unseen: u64,
    resolver: &JobIdResolver,
    horizon: &ReplayHorizon,
    force: bool,
    allow_expired_markers: bool,
) -> Result<(), NativeRefusal> {
    if !allow_expired_markers {
        let refused = past_horizon(peek, letters, horizon, resolver, crate::clock::now()).await?;
        if !refused.is_empty() {
            return Err(NativeRefusal::PastHorizon {
                refused,
                read: letters.len(),
            });
        }
    }
    if !force {
        let unstable = letters
            .iter()
            .filter(|m| {
                matches!(
                    m.resolve(resolver),
                    Ok((_, crate::job::JobIdSource::MessageId))
                )
            })
            .count();
        if unstable > 0 {
            return Err(NativeRefusal::NoStableId {
                unstable,
                read: letters.len(),
                body_pointer: resolver.body_pointer.is_some(),
            });
        }
    }
    if unseen > 0 {
        return Err(NativeRefusal::Unseen(unseen));
    }
    Ok(())
}

/// When the job of each of `letters`, read from `peek`'s DLQ, was first
/// enqueued, at the latest ([`DeadMessage::first_enqueued`], with the
/// longest retention of the DLQ's source queues); `None`: unknown.
pub async fn first_enqueued_times(
    peek: &Peek,
    letters: &[DeadMessage],
) -> Result<Vec<Option<SystemTime>>, DlqError> {
    let sources = dead_letter_sources(peek.sqs(), peek.dlq_url()).await?;
    let shift = longest_retention(peek.sqs(), &sources).await?;
    Ok(letters
        .iter()
        .map(|m| m.first_enqueued(peek.is_fifo(), shift))
        .collect())
}

/// The longest `MessageRetentionPeriod` of `queues` (zero for none).
async fn longest_retention(
    sqs: &aws_sdk_sqs::Client,
    queues: &[String],
) -> Result<Duration, DlqError> {
    let mut longest = Duration::ZERO;
    for q in queues {
        longest = longest.max(crate::queue::retention(sqs, q).await?);
    }
    Ok(longest)
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
    /// `RUNNING`, `COMPLETED`, `CANCELLING`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// The handle to cancel it with, while it runs.
    pub task_handle: Option<String>,
    /// Messages moved so far (approximate).
    pub moved: i64,
    /// Messages it set out to move (approximate).
    pub to_move: Option<i64>,
    /// Why it failed, if it did.
    pub failure_reason: Option<String>,
}

/// The DLQ's newest move task (`ListMessageMoveTasks`), if any.
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

/// How often [`wait_native`] asks how the move task is doing.
const NATIVE_POLL: Duration = Duration::from_millis(500);

/// Waits for the DLQ's move task to end (any status but `RUNNING`) and
/// returns it; `progress` sees it each time it is read.
pub async fn wait_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
    mut progress: impl FnMut(&MoveTask),
) -> Result<MoveTask, DlqError> {
    loop {
        tokio::time::sleep(NATIVE_POLL).await;
        let Some(task) = native_status(sqs, dlq_arn).await? else {
            continue;
        };
        progress(&task);
        if task.status != "RUNNING" {
            return Ok(task);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;

    #[test]
    fn times_are_absolute_or_ago() {
        use std::time::UNIX_EPOCH;
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        assert_eq!(
            parse_when("--since", "2h", now),
            Ok(UNIX_EPOCH + Duration::from_secs(2_800))
        );
        assert_eq!(
            parse_when("--since", "1970-01-01T00:00:05Z", now),
            Ok(UNIX_EPOCH + Duration::from_secs(5))
        );
        let err = parse_when("--until", "yesterday", now)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--until \"yesterday\" is neither"), "{err}");
    }

    #[test]
    fn filters_refuse_an_empty_window() {
        let now = crate::clock::now();
        let err = Filter::from_flags(
            vec![],
            None,
            Some("2026-12-02T00:00:00Z"),
            Some("2026-12-01T00:00:00Z"),
            now,
        )
        .unwrap_err();
        assert!(err.to_string().contains("after --until"));
        let f = Filter::from_flags(
            vec!["a".to_string(), "a".to_string()],
            Some(String::new()),
            None,
            None,
            now,
        )
        .unwrap();
        assert_eq!(f.job_ids.len(), 1);
        assert_eq!(f.error_contains, None);
    }

    #[test]
    fn native_rates_are_whole_and_within_sqs_limits() {
        assert_eq!(
            NativeRate::new(500.0).map(NativeRate::messages_per_second),
            Ok(500)
        );
        assert_eq!(
            NativeRate::new(1.0).map(NativeRate::messages_per_second),
            Ok(1)
        );
        for bad in [0.0, 0.5, 1e-300, 501.0, f64::INFINITY, f64::NAN, 2.5] {
            assert!(NativeRate::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn letters_held_elsewhere_say_when_they_come_back() {
        let held = |t| HeldElsewhere {
            count: 3,
            queue_visibility_timeout: t,
        };
        assert_eq!(
            held(None).to_string(),
            "about 3 dead letters are held by another reader (in flight: a killed run, another \
             idemq dlq command); they come back when that reader's hold ends"
        );
        assert!(held(Some(Duration::from_secs(30))).to_string().ends_with(
            "within the DLQ's visibility timeout (30s) if it set none, up to 12h if it set its own"
        ),);
    }

    #[test]
    fn a_report_is_complete_only_when_nothing_was_left() {
        assert!(RedriveReport::default().is_complete());
        let left = |f: fn(&mut RedriveReport)| {
            let mut r = RedriveReport::default();
            f(&mut r);
            r.is_complete()
        };
        assert!(!left(|r| r.failed.push(("m".into(), "why".into()))));
        assert!(!left(|r| r.unseen = 1));
        assert!(!left(|r| r.held_elsewhere = Some(HeldElsewhere {
            count: 1,
            queue_visibility_timeout: None,
        })));
        assert!(!left(|r| r.past_horizon.push(Refused {
            message_id: "m".into(),
            job_id: None,
            why: "old".into(),
        })));
    }
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
            deploy: None,
            idemq_version: None,
            backtrace: None,
            payload_bytes: 10,
            failure_record: true,
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

#[cfg(test)]
mod bounds_tests {
    use super::*;

    /// `--rate 1e-300` made `Duration::from_secs_f64` panic on infinity.
    #[test]
    fn a_rate_is_a_usable_pace_or_refused() {
        for bad in [1e-300, 0.0, -1.0, f64::NAN, f64::INFINITY, 1.0 / 86_401.0] {
            let err = Rate::per_second(bad).unwrap_err();
            assert!(err.to_string().starts_with("--rate "), "{err}");
        }
        assert!(
            Rate::per_second(1e-300)
                .unwrap_err()
                .to_string()
                .starts_with("--rate 1e-300: ")
        );
        let slowest = Rate::per_second(Rate::MIN_PER_SECOND).unwrap();
        assert_eq!(slowest.interval(1).as_secs(), 86_400);
        assert!(slowest.interval(10) < Duration::from_secs(11 * 86_400));
        let fast = Rate::per_second(f64::MAX).unwrap();
        assert_eq!(fast.interval(10), Duration::ZERO);
        assert_eq!(
            Rate::per_second(400.0).unwrap().interval(10),
            Duration::from_millis(25)
        );
    }

    #[test]
    fn a_source_queue_attribute_must_name_a_real_source() {
        let sources = vec![
            "http://localhost/000000000000/orders".to_string(),
            "http://localhost/000000000000/payments".to_string(),
        ];
        assert_eq!(
            source_named(&sources, "payments"),
            Some("http://localhost/000000000000/payments")
        );
        assert_eq!(source_named(&sources, "admin-commands"), None);
        assert_eq!(source_named(&sources, "000000000000"), None);
    }

    #[test]
    fn letters_without_an_error_cannot_be_judged_by_error_contains() {
        let mut c = Context {
            job_id: None,
            message_id: "m".into(),
            attempts: None,
            last_error: None,
            error_chain: vec![],
            failed_at: None,
            source_queue: None,
            deploy: None,
            idemq_version: None,
            backtrace: None,
            payload_bytes: 0,
            failure_record: false,
        };
        let f = Filter {
            error_contains: Some("outage".into()),
            ..Filter::default()
        };
        assert!(!f.matches(&c) && !f.can_judge(&c));
        assert!(Filter::default().can_judge(&c));
        c.last_error = Some("other".into());
        assert!(!f.matches(&c) && f.can_judge(&c));
    }
}
