//! What the batch does with a failed job: the failure record, a retry
//! that would outlive the queue's retention turned into a dead letter now,
//! the dead letter itself, and the record of a message handed back
//! untried on its last receive.

use super::*;

impl<E: Send + Sync + 'static> Core<E> {
    /// A retry whose next attempt could come after SQS deletes the message
    /// (its retention run out) becomes a dead letter now, its error saying
    /// why with the numbers and the original error after it.
    ///
    /// The delay weighed is the longest this retry could get (the backoff's
    /// ceiling or the handler's retry-after, clamped to 12 h in flight); the
    /// margin is [`RETENTION_SAFETY_MARGIN`] plus the queue's visibility
    /// timeout, so the next attempt is received *and* over before expiry.
    pub(super) fn within_retention(
        &self,
        queue: &QueueInfo,
        msg: &Message,
        verdict: Verdict,
    ) -> Verdict {
        let Verdict::Retry {
            failure,
            retry_after,
        } = &verdict
        else {
            return verdict;
        };
        let Some(age) = msg.age(crate::clock::now()) else {
            return verdict;
        };
        let longest = retry_after.unwrap_or_else(|| self.config.backoff.ceiling(msg.receive_count));
        let delay = visibility_timeout(longest, msg.received_at.elapsed());
        let margin = RETENTION_SAFETY_MARGIN + queue.visibility_timeout;
        match check_retry_within_retention(age, delay, queue.retention, margin) {
            Ok(()) => verdict,
            Err(late) => {
                let chain = std::iter::once(failure.error.clone())
                    .chain(failure.chain.iter().cloned())
                    .collect();
                Verdict::DeadLetter {
                    failure: Failure {
                        kind: failure.kind,
                        error: late.to_string(),
                        chain,
                        backtrace: failure.backtrace.clone(),
                    },
                }
            }
        }
    }

    /// The failure record of a message handed back untried (`why`) on its
    /// last allowed receive.
    pub(super) fn untried_record(
        &self,
        queue: &QueueInfo,
        msg: &Message,
        why: &str,
    ) -> FailureRecord {
        let resolved =
            self.resolver
                .resolve_job(msg.job_id_attribute(), &msg.body, &msg.message_id);
        let payload = resolved.as_ref().map_or(msg.body.as_str(), |j| &j.payload);
        failure_record(
            queue,
            msg,
            resolved.as_ref().ok().map(|j| j.id.to_string()),
            &PayloadHash::of(payload.as_bytes()),
            Failure {
                kind: FailureKind::Transient,
                error: format!(
                    "not attempted on its last allowed receive ({why}): SQS's redrive moves it \
                     to the DLQ without it having run"
                ),
                chain: Vec::new(),
                backtrace: None,
            },
        )
    }

    /// Writes the failure record if the budget leaves time for it: it is
    /// context for `idemq dlq`, not something the batch's outcome needs.
    /// Whether it was written.
    pub(super) async fn record(&self, record: &FailureRecord, budget: &Budget) -> bool {
        match bounded(budget.optional_by, self.store.record_failure(record)).await {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                tracing::error!("could not write the failure record: {e}");
                false
            }
            None => {
                tracing::warn!(
                    "failure record dropped: not written before the deadline's cut-off for optional work"
                );
                false
            }
        }
    }

    /// Sends a permanent failure to the DLQ. If that fails, the message
    /// stays on the source queue (retried, and redriven in the end):
    /// nothing is acknowledged that is not safely somewhere else.
    pub(super) async fn dead_letter(
        &self,
        queue: &QueueInfo,
        msg: &Message,
        rec: &FailureRecord,
        verdict: Verdict,
        budget: &Budget,
    ) -> Verdict {
        let Some(dlq_url) = &queue.dlq_url else {
            tracing::error!(
                "queue {} has no DLQ (RedrivePolicy); leaving the message on it",
                queue.name
            );
            return Verdict::Retry {
                failure: rec.failure.clone(),
                retry_after: None,
            };
        };
        let letter = DeadLetter {
            body: &msg.body,
            attributes: &msg.attributes,
            group_id: msg.group_id.as_deref(),
            first_enqueued: msg.first_enqueued(),
        };
        // Not sent in time means not sent: the message stays on the queue
        // and is reported failed, never acknowledged. (If SQS took the send
        // after all, a later dead-lettering adds a second copy to the DLQ;
        // both carry the job's id, so replayed, the marker applies it once.)
        match bounded(
            budget.required_by,
            self.dead_letters.send(dlq_url, &letter, rec),
        )
        .await
        {
            Some(Ok(())) => verdict,
            Some(Err(e)) => {
                tracing::error!("could not send to the DLQ, leaving the message on the queue: {e}");
                Verdict::Retry {
                    failure: rec.failure.clone(),
                    retry_after: None,
                }
            }
            None => {
                tracing::error!(
                    "the DLQ send did not finish before the deadline; leaving the message on the queue"
                );
                Verdict::Retry {
                    failure: rec.failure.clone(),
                    retry_after: None,
                }
            }
        }
    }
}

/// The failure record of `msg`'s receive (idemq's DLQ context: error,
/// attempt, time, source).
pub(super) fn failure_record(
    queue: &QueueInfo,
    msg: &Message,
    job_id: Option<String>,
    payload_hash: &PayloadHash,
    failure: Failure,
) -> FailureRecord {
    FailureRecord {
        job_id,
        message_id: msg.message_id.clone(),
        attempt: msg.receive_count,
        failure,
        failed_at: crate::clock::now(),
        source_queue: queue.name.clone(),
        payload_hash: payload_hash.to_string(),
        deploy: crate::failure::deploy().to_owned(),
        idemq_version: crate::failure::IDEMQ_VERSION.to_owned(),
    }
}
