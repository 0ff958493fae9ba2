//! Dead letters as JSON lines: to archive them, or to move them between
//! accounts. One message per line, with every attribute, its FIFO fields
//! and its context; an import sends each line back exactly as it was.
//!
//! An export is [`export_lines`] of what [`inspect::Dlq::read_letters`]
//! read, checked with [`written_whole`] before any letter is deleted; an
//! import is [`import_lines`], which judges each line against the replay
//! horizon ([`Archived::judge`]) and sends in chunks. Where the lines are
//! written (the `idemq` binary: a new 0600 file) is the caller's.
//!
//! [`inspect::Dlq::read_letters`]: super::inspect::Dlq::read_letters

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::MessageAttributeValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use crate::dlq::peek::{Context, DeadMessage};
use crate::horizon::{ALLOW_EXPIRED_FLAG, ReplayHorizon};
use crate::job::FIRST_ENQUEUED_ATTRIBUTE;
use crate::job::JOB_ID_ATTRIBUTE;
use crate::job::JobIdResolver;
use crate::producer::{Job, Producer};

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

/// One exported dead letter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Archived {
    /// Its `MessageId` in the DLQ.
    pub message_id: String,
    /// The body, as sent.
    pub body: String,
    /// Its message attributes, idemq's context attributes included.
    pub attributes: HashMap<String, Attribute>,
    /// `MessageGroupId` (FIFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// `MessageDeduplicationId` (FIFO).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deduplication_id: Option<String>,
    /// `DeadLetterQueueSourceArn`: the queue SQS's redrive moved it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_arn: Option<String>,
    /// Why it died, for the reader; not sent on import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
    /// When its job was first enqueued (RFC 3339), at the latest: what
    /// `idemq dlq redrive` weighs against the replay horizon. An import
    /// stamps it on the copy as `idemq-first-enqueued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_enqueued: Option<String>,
}

/// What an import does with a message past the replay horizon.
#[derive(Debug, Clone, Copy)]
pub struct AgeRule {
    /// The consumer's marker TTL less a day.
    pub horizon: ReplayHorizon,
    /// `--allow-expired-markers`: send it anyway, stamped as enqueued now.
    pub allow_expired_markers: bool,
}

/// An export line judged for import.
#[derive(Debug)]
pub enum Judged {
    /// Send this copy; with why, if it is past the horizon and sent only
    /// because the operator forced it.
    Send(Job, Option<String>),
    /// Past the horizon (or of unknown age): not sent, and why.
    PastHorizon(String),
}

/// A message attribute; binary values in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribute {
    /// `String`, `Number` or `Binary` (with an optional custom suffix).
    pub data_type: String,
    /// The value of a `String` or `Number` attribute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string_value: Option<String>,
    /// The value of a `Binary` attribute, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_value: Option<String>,
}

impl Archived {
    /// The export line of `msg`, with `context` for the reader and its
    /// job's `first_enqueued` time.
    pub fn of(msg: &DeadMessage, context: &Context, first_enqueued: Option<SystemTime>) -> Self {
        let attributes = msg
            .attributes
            .iter()
            .map(|(k, v)| {
                let a = Attribute {
                    data_type: v.data_type().to_owned(),
                    string_value: v.string_value().map(str::to_owned),
                    binary_value: v.binary_value().map(|b| BASE64.encode(b.as_ref())),
                };
                (k.clone(), a)
            })
            .collect();
        Self {
            message_id: msg.message_id.clone(),
            body: msg.body.clone(),
            attributes,
            group_id: msg.group_id().map(str::to_owned),
            deduplication_id: msg.deduplication_id().map(str::to_owned),
            source_arn: msg.source_arn().map(str::to_owned),
            context: serde_json::to_value(context).ok(),
            first_enqueued: first_enqueued.map(|t| humantime::format_rfc3339_millis(t).to_string()),
        }
    }

    /// When its job was first enqueued: the line's `first_enqueued`, else
    /// (an export made before lines carried it) the letter's own
    /// `idemq-first-enqueued`, else its context's `failed_at`. That last is
    /// all such a line has of the letter's time: its last failure, or the
    /// DLQ's `SentTimestamp` where it has no record of one; both come no
    /// earlier than the job's first enqueue, so the age read from them may
    /// be short by up to the source queue's retention. `None`: the line
    /// says nothing of its age.
    pub fn first_enqueued(&self) -> Option<SystemTime> {
        let rfc3339 = |t: &str| humantime::parse_rfc3339_weak(t).ok();
        if let Some(t) = self.first_enqueued.as_deref() {
            return rfc3339(t);
        }
        let attribute = self
            .attributes
            .get(FIRST_ENQUEUED_ATTRIBUTE)
            .and_then(|a| a.string_value.as_deref())
            .and_then(|ms| ms.parse::<u64>().ok())
            .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        attribute.or_else(|| {
            self.context
                .as_ref()?
                .get("failed_at")?
                .as_str()
                .and_then(rfc3339)
        })
    }

    /// The copy an import sends under `rule` at `now`: [`Self::to_job`]
    /// carrying its job's first-enqueued time, or, past the horizon, not
    /// sent (or, forced, stamped as enqueued now).
    pub fn judge(
        &self,
        resolver: &JobIdResolver,
        rule: &AgeRule,
        now: SystemTime,
    ) -> Result<Judged, String> {
        let job = self.to_job(resolver)?;
        let first = self.first_enqueued();
        let past = match first {
            Some(t) => rule.horizon.check(t, now).err().map(|e| e.to_string()),
            None => Some(format!(
                "its first-enqueued time is unknown (no first_enqueued, no idemq-first-enqueued, \
                 no context.failed_at); not sent (pass {ALLOW_EXPIRED_FLAG} to send it anyway, as \
                 a new job that may apply twice)"
            )),
        };
        if let Some(why) = &past
            && !rule.allow_expired_markers
        {
            return Ok(Judged::PastHorizon(why.clone()));
        }
        let stamp = match (first, &past) {
            (Some(t), None) => t,
            _ => now,
        };
        if !job.first_enqueued_fits() {
            return Ok(Judged::Send(job, past));
        }
        Ok(Judged::Send(job.first_enqueued(stamp), past))
    }

    /// The job that sends this message again as it was, carrying as
    /// `idemq-job-id` the id the consumer resolved for it with `resolver`
    /// (attribute, body pointer, else its DLQ MessageId, which is the
    /// MessageId the consumer saw when SQS's redrive moved it to the DLQ).
    pub fn to_job(&self, resolver: &JobIdResolver) -> Result<Job, String> {
        let mut attributes = HashMap::new();
        for (name, a) in &self.attributes {
            let mut v = MessageAttributeValue::builder()
                .data_type(&a.data_type)
                .set_string_value(a.string_value.clone());
            if let Some(b) = &a.binary_value {
                let bytes = BASE64
                    .decode(b)
                    .map_err(|e| format!("attribute {name}: binary value is not base64: {e}"))?;
                v = v.binary_value(Blob::new(bytes));
            }
            attributes.insert(
                name.clone(),
                v.build().map_err(|e| format!("attribute {name}: {e}"))?,
            );
        }
        let attribute = attributes
            .get(JOB_ID_ATTRIBUTE)
            .and_then(|v| v.string_value());
        let resolved =
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                resolver.resolve(attribute, &self.body, &self.message_id)
            });
        let id = match resolved {
            Ok((id, _)) => id.as_str().to_owned(),
            Err(e) => {
                return Err(format!(
                    "no valid job id ({e}): the consumer would refuse it again"
                ));
            }
        };
        Ok(Job::as_received(
            id,
            self.body.clone(),
            attributes,
            self.group_id.clone(),
            self.deduplication_id.clone(),
        ))
    }
}

/// Parses one line of an export: `None` for a blank line.
pub fn parse_line(line: &str) -> Option<Result<Archived, String>> {
    if line.trim().is_empty() {
        return None;
    }
    Some(serde_json::from_str(line).map_err(|e| {
        // serde's message can quote the payload: keep its class and place.
        format!(
            "not an exported dead letter ({:?} error at column {})",
            e.classify(),
            e.column()
        )
    }))
}

/// Parses an export: one [`Archived`] per non-blank line, or the line
/// number and why not.
pub fn parse(input: &str) -> Vec<(usize, Result<Archived, String>)> {
    input
        .lines()
        .enumerate()
        .filter_map(|(i, l)| parse_line(l).map(|r| (i + 1, r)))
        .collect()
}

/// The export lines of `items` (each message read with its context), with
/// their jobs' first-enqueued times `firsts` in the same order (see
/// [`first_enqueued_times`](super::redrive::first_enqueued_times)): one
/// JSON object each, without its newline.
pub fn export_lines(
    items: &[(DeadMessage, Context)],
    firsts: Vec<Option<SystemTime>>,
) -> Result<Vec<String>, serde_json::Error> {
    items
        .iter()
        .zip(firsts)
        .map(|((m, c), first)| serde_json::to_string(&Archived::of(m, c, first)))
        .collect()
}

/// Whether `text`, an export read back from where it was written, holds a
/// line for every message of `items`: only a file that holds every
/// message may stand for the DLQ (and let its letters be deleted).
pub fn written_whole(text: &str, items: &[(DeadMessage, Context)]) -> bool {
    let written: HashSet<String> = parse(text)
        .into_iter()
        .filter_map(|(_, a)| a.ok().map(|a| a.message_id))
        .collect();
    items.iter().all(|(m, _)| written.contains(&m.message_id))
}

/// What an import did.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// Messages sent.
    pub sent: usize,
    /// What could not be read, parsed or sent, in the order it happened.
    pub failures: Vec<ImportFailure>,
    /// Lines not sent, past the replay horizon (or of unknown age): each
    /// line number and why.
    pub past_horizon: Vec<(usize, String)>,
    /// Lines sent although past the horizon (`allow_expired_markers`),
    /// stamped as first enqueued now: each line number and why.
    pub forced: Vec<(usize, String)>,
}

impl ImportReport {
    /// Every line sent: nothing failed, nothing left past the horizon.
    pub fn is_complete(&self) -> bool {
        self.failures.is_empty() && self.past_horizon.is_empty()
    }
}

/// Why part of an import was not sent.
#[derive(Debug)]
pub enum ImportFailure {
    /// This line (its number) was not an exported dead letter, or its send
    /// failed: why.
    Line(usize, String),
    /// The input could not be read further; the lines before were judged.
    Unreadable(std::io::Error),
}

/// Jobs an import sends at once.
const IMPORT_CHUNK: usize = 100;

/// Sends the messages of an export read from `lines` with `producer`, 100
/// jobs in memory at a time. Each copy carries the job id `resolver`
/// resolves and its job's first-enqueued time; a line past `age`'s
/// horizon is not sent (unless the rule allows it), and reported with why.
/// `progress` is called with the bytes read after each chunk is sent.
pub async fn import_lines<R: std::io::BufRead>(
    producer: &Producer,
    lines: &mut Lines<R>,
    resolver: &JobIdResolver,
    age: &AgeRule,
    mut progress: impl FnMut(u64),
) -> ImportReport {
    let mut report = ImportReport::default();
    let mut chunk: Vec<(usize, Job)> = Vec::new();
    loop {
        let next = match lines.next_line() {
            Ok(n) => n,
            Err(e) => {
                report.failures.push(ImportFailure::Unreadable(e));
                None
            }
        };
        let done = next.is_none();
        if let Some((number, line)) = next {
            let parsed = match line {
                Line::Text(text) => parse_line(&text),
                Line::TooLong => Some(Err(format!(
                    "longer than {MAX_LINE_BYTES} bytes: not an exported dead letter"
                ))),
                Line::NotUtf8 => Some(Err("not UTF-8: not an exported dead letter".into())),
            };
            let now = crate::clock::now();
            match parsed.map(|p| p.and_then(|a| a.judge(resolver, age, now))) {
                None => {}
                Some(Ok(Judged::Send(job, forced))) => {
                    if let Some(why) = forced {
                        report.forced.push((number, why));
                    }
                    chunk.push((number, job));
                }
                Some(Ok(Judged::PastHorizon(why))) => report.past_horizon.push((number, why)),
                Some(Err(e)) => report.failures.push(ImportFailure::Line(number, e)),
            }
        }
        if chunk.len() >= IMPORT_CHUNK || (done && !chunk.is_empty()) {
            let (numbers, jobs): (Vec<usize>, Vec<Job>) =
                std::mem::take(&mut chunk).into_iter().unzip();
            for (line, (_, result)) in numbers.into_iter().zip(producer.send_batch(jobs).await) {
                match result {
                    Ok(_) => report.sent += 1,
                    Err(e) => report
                        .failures
                        .push(ImportFailure::Line(line, e.to_string())),
                }
            }
            progress(lines.bytes_read());
        }
        if done {
            return report;
        }
    }
}

/// Longest export line read: a 1 MiB body, JSON-escaped at worst six bytes
/// per byte, with its attributes and context.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Reads an export line by line, never holding more than one line (of at
/// most `max` bytes) in memory.
pub struct Lines<R> {
    input: R,
    max: usize,
    number: usize,
    bytes: u64,
    buf: Vec<u8>,
}

/// One line of an export as [`Lines`] reads it.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// A line of UTF-8 text (without its newline).
    Text(String),
    /// Longer than the limit: skipped to its end, never held whole.
    TooLong,
    /// Not UTF-8.
    NotUtf8,
}

impl<R: std::io::BufRead> Lines<R> {
    /// Reads `input`; a line longer than `max` bytes is [`Line::TooLong`].
    pub fn new(input: R, max: usize) -> Self {
        Self {
            input,
            max,
            number: 0,
            bytes: 0,
            buf: Vec::new(),
        }
    }

    /// Bytes consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The next line and its number (from 1), `None` at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<(usize, Line)>> {
        self.buf.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (part, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], Some(i + 1)),
                None => (chunk, None),
            };
            if !too_long {
                if self.buf.len() + part.len() > self.max {
                    too_long = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(part);
                }
            }
            let used = done.unwrap_or(chunk.len());
            self.input.consume(used);
            self.bytes += used as u64;
            if done.is_some() {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.number += 1;
        if too_long {
            return Ok(Some((self.number, Line::TooLong)));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some((
            self.number,
            match String::from_utf8(std::mem::take(&mut self.buf)) {
                Ok(s) => Line::Text(s),
                Err(_) => Line::NotUtf8,
            },
        )))
    }
}
