//! What a redrive is asked to do and what it answers: its pace ([`Rate`]),
//! its [`RedriveOptions`] and its [`RedriveReport`]. Plain data, read by the
//! run and by the CLI, apart from the code that moves letters.

use std::time::Duration;

use serde::Serialize;

use super::Filter;
use crate::dlq::peek::Context;
use crate::horizon::ReplayHorizon;
use crate::job::JobIdResolver;

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
