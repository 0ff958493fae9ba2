//! Sending a list of jobs in batch calls: packing them by count and size,
//! and retrying each call's failed entries with backoff. Shared by
//! [`Producer`](super::Producer) and SNS's `TopicProducer`, which differ
//! only in the call they make.

use std::collections::HashSet;
use std::ops::Range;
use std::time::Duration;

use futures_util::{StreamExt, stream};

use crate::backoff::Backoff;

use super::{Job, MAX_BATCH_ENTRIES, SendError};

/// Tries of one entry before it is reported failed.
const MAX_ATTEMPTS: u32 = 6;
/// Batches in flight at once on a standard queue or topic (FIFO: one, for
/// order).
const CONCURRENCY: usize = 4;
const RETRY_BACKOFF: Backoff = Backoff::new()
    .with_base(Duration::from_millis(100))
    .with_cap(Duration::from_secs(5));

/// What both producers (SQS's [`Producer`](super::Producer) and SNS's
/// `TopicProducer`) do with a list of jobs: refuse before any request what
/// `check` refuses, pack the rest into calls of at most 10 entries and
/// `max_bytes`, send those calls with `send` (which retries its own failed
/// entries), one call at a time for FIFO (order within a group holds only
/// then), and answer one result per job, in input order.
pub(crate) async fn send_in_batches<Fut>(
    jobs: &[Job],
    check: impl Fn(&Job) -> Result<(), SendError>,
    max_bytes: usize,
    fifo: bool,
    send: impl Fn(Vec<usize>) -> Fut,
) -> Vec<Result<String, SendError>>
where
    Fut: std::future::Future<Output = Vec<(usize, Result<String, SendError>)>>,
{
    let mut results: Vec<Option<Result<String, SendError>>> =
        jobs.iter().map(|j| check(j).err().map(Err)).collect();
    let valid: Vec<usize> = (0..jobs.len()).filter(|&i| results[i].is_none()).collect();
    let sizes: Vec<usize> = valid.iter().map(|&i| jobs[i].size()).collect();
    let batches: Vec<Vec<usize>> = pack(&sizes, max_bytes)
        .into_iter()
        .map(|r| valid[r].to_vec())
        .collect();
    let concurrency = if fifo { 1 } else { CONCURRENCY };
    let sent: Vec<Vec<(usize, Result<String, SendError>)>> = stream::iter(batches)
        .map(send)
        .buffered(concurrency)
        .collect()
        .await;
    for (i, r) in sent.into_iter().flatten() {
        results[i] = Some(r);
    }
    jobs.iter()
        .zip(results)
        .map(|(j, r)| {
            // `send` answers every index it is given; should that ever
            // break, the job is reported, never a panic.
            r.unwrap_or_else(|| {
                Err(SendError::GaveUp {
                    job_id: j.id.clone(),
                    attempts: 0,
                    last_error: "no result recorded for this job".into(),
                })
            })
        })
        .collect()
}

/// Splits entries of the given sizes, in order, into batches of at most
/// `MAX_BATCH_ENTRIES` and at most `max_bytes` in all.
pub(crate) fn pack(sizes: &[usize], max_bytes: usize) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start == MAX_BATCH_ENTRIES || bytes + size > max_bytes) {
            batches.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        batches.push(start..sizes.len());
    }
    batches
}

/// What one batch call (`SendMessageBatch`, SNS's `PublishBatch`) answered
/// for one of its entries.
pub(crate) enum EntryAnswer {
    /// Sent, with the id the service gave the message.
    Sent { id: String, message_id: String },
    /// Not sent. `refused`: the service refused the entry itself (its
    /// contents, size or attributes), so a retry cannot pass.
    Failed {
        id: String,
        code: String,
        message: String,
        refused: bool,
    },
}

/// Sends the jobs at `batch` (indexes into `jobs`, which are also the
/// entries' ids) with `call`, up to `MAX_ATTEMPTS` times with backoff,
/// retrying only what can pass: a whole call that failed (throttling,
/// network: nothing is known to be sent), an entry that failed on the
/// service's side, and an entry the answer leaves out of both lists (not
/// known to be sent: retried, since a second copy is what job ids are
/// for). Each entry is answered once, by the first result naming it; an id
/// that names no pending entry is ignored. One result per index of
/// `batch`: the message id, or why the job was not sent.
pub(crate) async fn send_batch_with_retries<E, Fut>(
    op: &str,
    jobs: &[Job],
    batch: Vec<usize>,
    entry: impl Fn(usize, &Job) -> Result<E, String>,
    call: impl Fn(Vec<E>) -> Fut,
) -> Vec<(usize, Result<String, SendError>)>
where
    Fut: Future<Output = Result<Vec<EntryAnswer>, String>>,
{
    let mut done = Vec::with_capacity(batch.len());
    let mut pending = batch;
    let mut last_error = String::new();
    for attempt in 1..=MAX_ATTEMPTS {
        if attempt > 1 {
            // The clock's jitter source: seeded in the simulation, so a run
            // replays exactly (it drifted by milliseconds here). The delay
            // is drawn before the await: the generator is not Send.
            let delay = crate::clock::with_jitter(|r| RETRY_BACKOFF.delay(attempt - 1, r));
            tokio::time::sleep(delay).await;
        }
        let entries: Result<Vec<E>, String> = pending.iter().map(|&i| entry(i, &jobs[i])).collect();
        let answers = match entries {
            Ok(entries) => call(entries).await,
            Err(e) => {
                last_error = e;
                break;
            }
        };
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                last_error = e;
                continue;
            }
        };
        let mut unanswered: HashSet<usize> = pending.iter().copied().collect();
        let mut answer = |id: &str| id.parse::<usize>().ok().filter(|i| unanswered.remove(i));
        let mut retry = Vec::new();
        for a in answers {
            match a {
                EntryAnswer::Sent { id, message_id } => {
                    if let Some(i) = answer(&id) {
                        done.push((i, Ok(message_id)));
                    }
                }
                EntryAnswer::Failed {
                    id,
                    code,
                    message,
                    refused,
                } => {
                    let Some(i) = answer(&id) else {
                        continue;
                    };
                    if refused {
                        let job_id = jobs[i].id.clone();
                        done.push((
                            i,
                            Err(SendError::Rejected {
                                job_id,
                                code,
                                message,
                            }),
                        ));
                    } else {
                        // Retried alone: on a FIFO queue it then lands after
                        // the later messages of its group that did go
                        // through. Rare (service-side faults), and the
                        // alternative, holding back the rest of the group,
                        // cannot undo what was sent.
                        last_error = format!("{code}: {message}");
                        retry.push(i);
                    }
                }
            }
        }
        if !unanswered.is_empty() {
            let mut missing: Vec<usize> = unanswered.into_iter().collect();
            missing.sort_unstable();
            last_error = format!(
                "{op} left {} entries out of both Successful and Failed",
                missing.len()
            );
            retry.extend(missing);
            retry.sort_unstable();
        }
        pending = retry;
        if pending.is_empty() {
            return done;
        }
    }
    done.extend(pending.into_iter().map(|i| {
        let err = SendError::GaveUp {
            job_id: jobs[i].id.clone(),
            attempts: MAX_ATTEMPTS,
            last_error: last_error.clone(),
        };
        (i, Err(err))
    }));
    done
}
