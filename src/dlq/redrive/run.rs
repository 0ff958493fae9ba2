//! One pass of a redrive: the receive loops, the FIFO group sweep, and the
//! judging of each received batch (filter, copies, horizon, budget, pace).
//! What is judged to move is handed to the send, in its own file.

use std::sync::Mutex;
use std::time::Instant;

use futures_util::future::join_all;

use super::{HeldElsewhere, MAX_CONCURRENCY, Progress, Redrive, Refused, Run};
use crate::dlq::copies::{Further, Moving, judge_further, payload_hash};
use crate::dlq::peek::{DeadMessage, join_records};
use crate::failure::DlqError;
use crate::queue::QueueInfo;

impl Redrive<'_> {
    /// One pass: the receive loops until the DLQ shows nothing new, then
    /// (FIFO) the groups they may have cut short.
    pub(super) async fn pass(
        &self,
        run: &Mutex<Run>,
        progress: Progress<'_>,
    ) -> Result<(), DlqError> {
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
    pub(super) async fn held_elsewhere(&self, run: &Mutex<Run>) -> Result<HeldElsewhere, DlqError> {
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
    ///
    /// [`Sweep`]: crate::dlq::peek::Sweep
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
}
