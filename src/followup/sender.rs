//! Sending follow-ups: after a new commit, and again from a duplicate's
//! stored marker while its commit is within the horizon (the re-send
//! rule). The I/O side, apart from what a follow-up is and its checks.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::horizon::ReplayHorizon;
use crate::producer::{Producer, SendError};

use super::{FollowUp, StoredMarker};

/// Whether a duplicate re-sends the follow-ups its marker stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// The commit is within the horizon: re-send them, each carrying the
    /// commit time as its first-enqueued time.
    Send {
        /// The parent's commit.
        committed_at: SystemTime,
    },
    /// The commit is at least the horizon ago: not re-sent.
    PastHorizon {
        /// The parent's commit.
        committed_at: SystemTime,
    },
    /// The marker has no commit time (a fused marker of an earlier
    /// version): its age is unknown, so not re-sent.
    Undated,
}

/// The re-send rule: within the horizon only, and never for a marker of
/// unknown age. A commit time ahead of `now` (another host's clock) counts
/// as age zero.
pub(crate) fn resend(
    committed_at: Option<SystemTime>,
    now: SystemTime,
    horizon: ReplayHorizon,
) -> Resend {
    match committed_at {
        None => Resend::Undated,
        Some(at) if horizon.check(at, now).is_ok() => Resend::Send { committed_at: at },
        Some(at) => Resend::PastHorizon { committed_at: at },
    }
}

/// A settled commit, as far as its follow-ups are concerned.
#[derive(Debug)]
pub(crate) enum AfterCommit<'a> {
    /// The effect committed now, with these follow-ups.
    Committed(&'a [FollowUp]),
    /// A duplicate: the marker as stored.
    Duplicate(StoredMarker),
}

/// Sends follow-ups through one [`Producer`] per queue, each built once
/// (it reads the queue's type and size limit) and kept for the process.
#[derive(Debug)]
pub(crate) struct FollowUpSender {
    sqs: aws_sdk_sqs::Client,
    producers: std::sync::Mutex<HashMap<String, Producer>>,
    /// Stored follow-ups that duplicates did not re-send since the last
    /// [`take_not_resent`](Self::take_not_resent) (`FollowUpsNotResent`).
    not_resent: AtomicU64,
}

impl FollowUpSender {
    pub(crate) fn new(sqs: aws_sdk_sqs::Client) -> Self {
        Self {
            sqs,
            producers: std::sync::Mutex::default(),
            not_resent: AtomicU64::new(0),
        }
    }

    /// The stored follow-ups not re-sent since the last call, for the
    /// batch's `FollowUpsNotResent` metric.
    pub(crate) fn take_not_resent(&self) -> u64 {
        self.not_resent.swap(0, Ordering::Relaxed)
    }

    async fn producer(&self, url: &str) -> Result<Producer, SendError> {
        if let Some(p) = self.lock().get(url) {
            return Ok(p.clone());
        }
        let p = Producer::with_client(self.sqs.clone(), url).await?;
        self.lock().insert(url.to_owned(), p.clone());
        Ok(p)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Producer>> {
        self.producers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends every follow-up, each carrying `first_enqueued` when given
    /// (a re-send: the parent's commit); the first error if any was not
    /// sent (the others may have been: the retry sends them again,
    /// deduplicated by their job ids).
    pub(crate) async fn send(
        &self,
        list: &[FollowUp],
        first_enqueued: Option<SystemTime>,
    ) -> Result<(), SendError> {
        let mut queues: Vec<&str> = Vec::new();
        for f in list {
            if !queues.contains(&f.queue_url.as_str()) {
                queues.push(&f.queue_url);
            }
        }
        for url in queues {
            let producer = self.producer(url).await?;
            let jobs = list
                .iter()
                .filter(|f| f.queue_url == url)
                .map(|f| match first_enqueued {
                    Some(at) => f.to_job().first_enqueued(at),
                    None => f.to_job(),
                })
                .collect();
            for (_, sent) in producer.send_batch(jobs).await {
                sent?;
            }
        }
        Ok(())
    }

    /// Deals with a job's follow-ups once its commit is settled: a new
    /// commit sends the effect's follow-ups; a duplicate sends again the
    /// follow-ups its stored marker carries if its commit is within the
    /// horizon ([`resend`]), each with the parent's commit as its
    /// first-enqueued time, and otherwise logs and counts them, not sent.
    /// `Err` says why a follow-up was not sent: the job must not be
    /// acknowledged (a transient failure), and its retry finds the marker
    /// and sends again.
    pub(crate) async fn after_commit(&self, settled: AfterCommit<'_>) -> Result<(), String> {
        let marker;
        let (list, first_enqueued): (&[FollowUp], _) = match settled {
            AfterCommit::Committed(list) => (list, None),
            AfterCommit::Duplicate(stored) => {
                marker = stored;
                match &marker.follow_ups {
                    Ok(list) if list.is_empty() => return Ok(()),
                    Ok(list) => {
                        match resend(marker.committed_at, crate::clock::now(), marker.horizon) {
                            Resend::Send { committed_at } => (list, Some(committed_at)),
                            decision => {
                                self.not_resending(&marker, list, decision);
                                return Ok(());
                            }
                        }
                    }
                    Err(reason) => return Err(reason.clone()),
                }
            }
        };
        if list.is_empty() {
            return Ok(());
        }
        // The chaos suite dies here: committed, follow-ups not yet sent.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("followup::before-send", |_| -> Result<(), String> {
            std::process::abort()
        });
        let ids: HashSet<&str> = list.iter().map(|f| f.job_id.as_str()).collect();
        match self.send(list, first_enqueued).await {
            Ok(()) => {
                tracing::debug!(follow_ups = ?ids, "follow-ups sent");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(
                    follow_ups = list.len(),
                    "committed, but a follow-up was not sent; the job is retried and its marker re-sends them: {e}"
                );
                Err(format!(
                    "committed, but follow-up not sent (the retry re-sends it from the marker): {e}"
                ))
            }
        }
    }

    /// A duplicate whose stored follow-ups are not re-sent: logged (job
    /// ids and times, never bodies) and counted.
    fn not_resending(&self, marker: &StoredMarker, list: &[FollowUp], decision: Resend) {
        self.not_resent
            .fetch_add(list.len() as u64, Ordering::Relaxed);
        let ids: Vec<&str> = list.iter().map(|f| f.job_id.as_str()).collect();
        let horizon = humantime::format_duration(marker.horizon.limit());
        match decision {
            Resend::PastHorizon { committed_at } => tracing::warn!(
                job_id = marker.job_id,
                follow_ups = ?ids,
                committed_at = %humantime::format_rfc3339_millis(committed_at),
                %horizon,
                "duplicate of a job committed longer ago than the follow-up horizon: its stored follow-ups are not re-sent"
            ),
            _ => tracing::warn!(
                job_id = marker.job_id,
                follow_ups = ?ids,
                %horizon,
                "duplicate of a job whose marker has no commit time (written by an earlier version): its stored follow-ups are not re-sent; send them by hand if the job's first run never did"
            ),
        }
    }
}
