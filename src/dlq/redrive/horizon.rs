//! How old a letter's job is, and whether a copy of it may still be sent:
//! the replay-horizon check that both the default redrive and SQS's move
//! task ([`super::check_native`]) answer to.

use std::time::{Duration, SystemTime};

use super::{Redrive, Refused, dead_letter_sources};
use crate::dlq::peek::{DeadMessage, Peek};
use crate::failure::DlqError;
use crate::horizon::ReplayHorizon;
use crate::job::JobIdResolver;

impl Redrive<'_> {
    /// When `msg`'s job was first enqueued, at the latest (see
    /// [`DeadMessage::first_enqueued`]).
    fn first_enqueued(&self, msg: &DeadMessage) -> Option<SystemTime> {
        msg.first_enqueued(self.peek.is_fifo(), self.source_retention)
    }

    /// Whether a copy of `msg` may be sent at `now` ([`judge_age`]).
    pub(super) fn judge_age(&self, msg: &DeadMessage, now: SystemTime) -> Result<(), String> {
        judge_age(self.first_enqueued(msg), &self.options.horizon, now)
    }

    /// The first-enqueued time a copy of `msg` carries: the letter's job's,
    /// or now for a letter sent past the horizon (forced): as far as the
    /// consumer can tell, a new job.
    pub(super) fn copy_first_enqueued(&self, msg: &DeadMessage, now: SystemTime) -> SystemTime {
        match self.first_enqueued(msg) {
            Some(first) if self.options.horizon.check(first, now).is_ok() => first,
            _ => now,
        }
    }
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
pub(super) async fn longest_retention(
    sqs: &aws_sdk_sqs::Client,
    queues: &[String],
) -> Result<Duration, DlqError> {
    let mut longest = Duration::ZERO;
    for q in queues {
        longest = longest.max(crate::queue::retention(sqs, q).await?);
    }
    Ok(longest)
}
