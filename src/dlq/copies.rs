//! Several dead letters of one job.
//!
//! A crash can leave one job in the DLQ twice: idemq's own dead-letter send
//! landed, then the consumer died before deleting the original, and SQS's
//! redrive moved that too after `maxReceiveCount`. Both are the same job
//! with the same payload; the job is owed once. So the tools count, show
//! and redrive a job's *copies* (same job id, same payload hash) as one
//! letter. Letters that share a job id but carry different payloads are not
//! copies: the consumer would take the second for a conflict, so both are
//! kept and shown.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use crate::job::PayloadHash;

use super::peek::{Context, DeadMessage};

/// One job's dead letters, as the tools show them.
#[derive(Debug, Clone)]
pub struct Letter {
    /// The first copy read: the one shown (and the one a redrive sends).
    pub message: DeadMessage,
    /// Its context.
    pub context: Context,
    /// The MessageIds of its other copies, in the order read.
    pub copies: Vec<String>,
    /// Another letter in the DLQ has the same job id and a different
    /// payload.
    pub conflicting: bool,
}

impl Letter {
    /// How many messages the DLQ holds of this letter (1 + its copies).
    pub fn count(&self) -> usize {
        1 + self.copies.len()
    }
}

/// The hash copies are matched by: the body as the DLQ holds it. Copies of
/// one delivery have the same bytes; two bodies that differ (even only by
/// an envelope) are never taken for copies, the safe side.
pub fn payload_hash(m: &DeadMessage) -> PayloadHash {
    PayloadHash::of(m.body.as_bytes())
}

/// Groups read letters into one [`Letter`] per (job id, payload hash), in
/// the order first read. A letter with no job id stands alone.
pub fn letters(items: Vec<(DeadMessage, Context)>) -> Vec<Letter> {
    let mut out: Vec<Letter> = Vec::new();
    let mut index: HashMap<(String, PayloadHash), usize> = HashMap::new();
    let mut hashes_of: HashMap<String, Vec<PayloadHash>> = HashMap::new();
    for (message, context) in items {
        let Some(job) = context.job_id.clone() else {
            out.push(Letter {
                message,
                context,
                copies: Vec::new(),
                conflicting: false,
            });
            continue;
        };
        let key = (job, payload_hash(&message));
        if let Some(&i) = index.get(&key) {
            out[i].copies.push(message.message_id);
            continue;
        }
        hashes_of
            .entry(key.0.clone())
            .or_default()
            .push(key.1.clone());
        index.insert(key, out.len());
        out.push(Letter {
            message,
            context,
            copies: Vec::new(),
            conflicting: false,
        });
    }
    for letter in &mut out {
        letter.conflicting = letter
            .context
            .job_id
            .as_ref()
            .is_some_and(|j| hashes_of.get(j).is_some_and(|h| h.len() > 1));
    }
    out
}

/// How far SQS's clock may be from ours: SQS does not process a request
/// whose time stamp is more than 15 minutes from the time on its servers
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/AboutTimestamp.html>;
/// the general signing page names five minutes for most services,
/// <https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_aws-signing.html>),
/// so a client whose requests succeed is within it. One more minute for
/// the request itself.
pub(crate) const MAX_CLOCK_SKEW: Duration = Duration::from_secs(16 * 60);

/// A job a redrive is sending back, by the copy it chose.
#[derive(Debug, Clone)]
pub(crate) struct Moving {
    pub hash: PayloadHash,
    /// When the send of the chosen copy began, once it has.
    pub send_started: Option<Instant>,
    /// A time by SQS's clock known to be before that send: the latest
    /// first-receive time of the letters read before it.
    pub sqs_before_send: Option<SystemTime>,
    /// SQS accepted the chosen copy.
    pub sent: bool,
}

/// What a redrive makes of a further letter of a job it is sending back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Further {
    /// A copy that was in the DLQ before the chosen one was sent: removed
    /// once the chosen copy is sent.
    Copy,
    /// Maybe a new death of the copy this run sent (a job that fails again
    /// dies as a new letter): left for the next run, or a permanently
    /// failing job would be moved forever, and its letter must not be
    /// removed as a copy.
    Again,
    /// Same job id, different payload: not a copy; kept and reported.
    Different,
}

/// Judges a further letter of `moving`'s job, with payload `hash`, whose
/// receive returned at `received_at`, sent to the DLQ at `sent_at` (its
/// `SentTimestamp`, SQS's clock), in a run that started at `run_started`
/// (our clock).
///
/// It is a copy only when it surely existed before the chosen copy was
/// sent, so that it cannot be that copy dying again (which SQS stamps after
/// the send: idemq's own dead letter when it is sent, SQS's redrive with the
/// copy's own enqueue time): its receive returned before the send began (no
/// clock involved); or SQS stamped it before a time SQS itself reported
/// before the send ([`Moving::sqs_before_send`], one clock); or more than
/// [`MAX_CLOCK_SKEW`] before the run started.
pub(crate) fn judge_further(
    moving: &Moving,
    hash: &PayloadHash,
    received_at: Instant,
    sent_at: Option<SystemTime>,
    run_started: SystemTime,
) -> Further {
    if &moving.hash != hash {
        return Further::Different;
    }
    let read_before_send = moving.send_started.is_none_or(|s| received_at < s);
    let stamped_before_send = sent_at
        .zip(moving.sqs_before_send)
        .is_some_and(|(t, floor)| t < floor);
    let stamped_before_run = sent_at.is_some_and(|t| {
        t.checked_add(MAX_CLOCK_SKEW)
            .is_some_and(|t| t < run_started)
    });
    if read_before_send || stamped_before_send || stamped_before_run {
        Further::Copy
    } else {
        Further::Again
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Sys};
    use std::time::UNIX_EPOCH;

    fn item(id: &str, job: Option<&str>, body: &str) -> (DeadMessage, Context) {
        let mut attributes = HashMap::new();
        if let Some(j) = job {
            attributes.insert(
                crate::job::JOB_ID_ATTRIBUTE.to_string(),
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(j)
                    .build()
                    .unwrap(),
            );
        }
        let m = DeadMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            body: body.into(),
            attributes,
            system: HashMap::from([(Sys::SentTimestamp, "1".to_string())]),
        };
        let c = Context::of(&m, job, None);
        (m, c)
    }

    #[test]
    fn copies_group_by_job_and_payload() {
        let got = letters(vec![
            item("m1", Some("a"), "{}"),
            item("m2", Some("b"), "{}"),
            item("m3", Some("a"), "{}"),
            item("m4", Some("c"), "{\"n\":1}"),
            item("m5", Some("c"), "{\"n\":2}"),
            item("m6", None, "{}"),
            item("m7", None, "{}"),
        ]);
        let shown: Vec<(&str, Vec<&str>, bool)> = got
            .iter()
            .map(|l| {
                (
                    l.message.message_id.as_str(),
                    l.copies.iter().map(String::as_str).collect(),
                    l.conflicting,
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("m1", vec!["m3"], false),
                ("m2", vec![], false),
                ("m4", vec![], true),
                ("m5", vec![], true),
                ("m6", vec![], false),
                ("m7", vec![], false),
            ]
        );
        assert_eq!(got[0].count(), 2);
    }

    #[test]
    fn only_a_letter_that_surely_predates_the_send_is_a_copy() {
        let start = Instant::now();
        let run_started = UNIX_EPOCH + Duration::from_secs(100_000);
        let hash = PayloadHash::of(b"{}");
        let mut moving = Moving {
            hash: hash.clone(),
            send_started: None,
            sqs_before_send: None,
            sent: false,
        };
        let recent = Some(run_started - Duration::from_secs(5));
        let old = Some(run_started - MAX_CLOCK_SKEW - Duration::from_secs(1));
        assert_eq!(
            judge_further(&moving, &PayloadHash::of(b"x"), start, old, run_started),
            Further::Different
        );
        assert_eq!(
            judge_further(&moving, &hash, start, recent, run_started),
            Further::Copy,
            "read while the chosen copy was not sent yet"
        );
        moving.send_started = Some(start + Duration::from_millis(10));
        assert_eq!(
            judge_further(&moving, &hash, start, recent, run_started),
            Further::Copy,
            "its receive returned before the send began"
        );
        let later = start + Duration::from_millis(20);
        assert_eq!(
            judge_further(&moving, &hash, later, recent, run_started),
            Further::Again,
            "read after the send, stamped recently: may be that copy dying again"
        );
        assert_eq!(
            judge_further(&moving, &hash, later, None, run_started),
            Further::Again
        );
        assert_eq!(
            judge_further(&moving, &hash, later, old, run_started),
            Further::Copy,
            "stamped before the run, beyond any clock skew"
        );
        // SQS reported 10 s before the run, by its own clock, before the send.
        moving.sqs_before_send = Some(run_started - Duration::from_secs(10));
        assert_eq!(
            judge_further(
                &moving,
                &hash,
                later,
                Some(run_started - Duration::from_secs(11)),
                run_started
            ),
            Further::Copy,
            "stamped before a time SQS gave before the send"
        );
        assert_eq!(
            judge_further(&moving, &hash, later, recent, run_started),
            Further::Again,
            "stamped after it: may be the sent copy dying"
        );
    }
}
