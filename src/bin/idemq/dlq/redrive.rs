//! `redrive`: idemq's own (send, then delete; every copy stamped with its
//! job id) and SQS's move task (`--native`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idemq::dlq::redrive::{
    HeldElsewhere, Redrive, RedriveOptions, cancel_native, native_status, past_horizon,
    start_native,
};
use idemq::job::JobIdSource;

use idemq::dlq::inspect::one_line;

use super::{CmdResult, Ctx, unseen_warning};

impl Ctx {
    pub(super) async fn redrive(&self, options: RedriveOptions) -> CmdResult {
        let dry_run = options.dry_run;
        let judging_errors = options.filter.error_contains.is_some();
        let total = match options.max {
            Some(m) => m as u64,
            None => self.dlq.peek().depth().await?.total(),
        };
        let redrive = Redrive::new(self.dlq.peek(), self.dlq.records(), options).await?;
        let bar = crate::progress::bar(total, if dry_run { "matched" } else { "moved" });
        // One line each time the number held changes, not one per look.
        let last_held = AtomicU64::new(0);
        let waiting = |held: &HeldElsewhere| {
            if last_held.swap(held.count, Ordering::Relaxed) != held.count {
                bar.suspend(|| eprintln!("idemq dlq: waiting: {}", held_line(held)));
            }
        };
        let report = redrive
            .run_waiting(&|moved, _seen| bar.set_position(moved as u64), &waiting)
            .await?;
        bar.finish_and_clear();
        if dry_run {
            for c in &report.moved {
                println!(
                    "would move {} (job {}): {}",
                    c.message_id,
                    c.job_id.as_deref().unwrap_or("-"),
                    one_line(&c.error_line(), 100)
                );
            }
        }
        for (id, why) in &report.failed {
            eprintln!("failed: {id}: {why}");
        }
        for r in &report.past_horizon {
            eprintln!(
                "past horizon: {} (job {}): {}",
                r.message_id,
                r.job_id.as_deref().unwrap_or("-"),
                r.why
            );
        }
        for r in &report.forced {
            eprintln!(
                "warning: {} {} (job {}) although {}; stamped as first enqueued now: its job may be applied twice",
                if dry_run { "would send" } else { "sent" },
                r.message_id,
                r.job_id.as_deref().unwrap_or("-"),
                r.why
            );
        }
        for id in &report.sent_not_deleted {
            eprintln!(
                "warning: {id} was sent but not deleted from the DLQ; a rerun sends it again (absorbed as a duplicate)"
            );
        }
        if judging_errors && report.unjudged > 0 {
            eprintln!(
                "warning: {} dead letters have no recorded error (no failure record{}, no idemq-error attribute): \
                 --error-contains could not judge them, and left them in the DLQ",
                report.unjudged,
                if self.dlq.records().is_some() {
                    ""
                } else {
                    "s read: pass --table or set IDEMQ_TABLE"
                }
            );
        }
        if report.again > 0 {
            eprintln!(
                "note: {} dead letters belong to jobs this run had already moved (they died again \
                 meanwhile): left in the DLQ for the next run",
                report.again
            );
        }
        for (job, id) in &report.different_payload {
            eprintln!(
                "kept: {id} has job id {job} like a moved letter but a different payload: not a copy \
                 (the consumer would take it for a conflict)"
            );
        }
        for id in &report.copies_not_deleted {
            eprintln!(
                "warning: copy {id} of a moved job could not be deleted from the DLQ; a rerun sends it again (absorbed as a duplicate)"
            );
        }
        let verb = if dry_run { "would move" } else { "moved" };
        let mut summary = format!(
            "{verb} {}, skipped {}, failed {}",
            report.moved.len(),
            report.skipped,
            report.failed.len()
        );
        if !report.past_horizon.is_empty() {
            summary.push_str(&format!(
                ", left {} past the replay horizon (marker TTL {} less {}; --allow-expired-markers sends them)",
                report.past_horizon.len(),
                humantime::format_duration(self.horizon.marker_ttl),
                humantime::format_duration(self.horizon.margin),
            ));
        }
        if !report.forced.is_empty() {
            summary.push_str(&format!(
                ", of which {} past the replay horizon",
                report.forced.len()
            ));
        }
        if !report.copies.is_empty() {
            summary.push_str(&format!(
                ", {} {} of moved jobs",
                if dry_run { "would remove" } else { "removed" },
                copies(report.copies.len())
            ));
        }
        println!("{summary}");
        if report.unseen > 0 {
            eprintln!("idemq dlq: {}", unseen_warning(report.unseen));
        }
        if let Some(held) = &report.held_elsewhere {
            eprintln!("idemq dlq: not read: {}", held_line(held));
            eprintln!(
                "idemq dlq: rerun once they are back, or pass --wait <duration> to wait for them"
            );
        }
        // Letters left past the horizon are work the operator asked for and
        // did not get: a failure, not a quiet skip.
        let complete =
            report.unseen == 0 && report.held_elsewhere.is_none() && report.past_horizon.is_empty();
        Ok(if report.failed.is_empty() && complete {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }

    /// SQS's move task cannot add `idemq-job-id`, and gives every message it
    /// moves a new MessageId
    /// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>:
    /// "All redriven messages are considered new messages and are assigned
    /// a new messageID"). A job known only by its MessageId would be applied
    /// again, so the task starts only when every letter carries a stable id
    /// (attribute or body pointer), or with `--force`.
    ///
    /// Nor can it leave a letter behind or stamp `idemq-first-enqueued`:
    /// it starts only when no letter is past the replay horizon (the
    /// marker TTL less a day), or with `--allow-expired-markers`.
    pub(super) async fn native(
        &self,
        cancel: bool,
        force: bool,
        to: Option<&str>,
        rate: Option<i32>,
        allow_expired_markers: bool,
    ) -> CmdResult {
        let sqs = self.dlq.peek().sqs();
        let dlq_arn = idemq::queue::arn(sqs, self.dlq.peek().dlq_url()).await?;
        if cancel {
            match cancel_native(sqs, &dlq_arn).await? {
                Some(moved) => println!("cancelled the move task after {moved} messages"),
                None => println!("no move task is running"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        if !(force && allow_expired_markers) {
            let read = self.read_letters().await?;
            self.dlq.release(&read.items).await;
            let (items, unseen) = (read.items, read.unseen);
            if !allow_expired_markers {
                let letters: Vec<_> = items.iter().map(|(m, _)| m.clone()).collect();
                let old = past_horizon(
                    self.dlq.peek(),
                    &letters,
                    &self.horizon,
                    self.dlq.resolver(),
                    idemq::clock::now(),
                )
                .await?;
                for r in &old {
                    eprintln!("past horizon: {}: {}", r.message_id, r.why);
                }
                if !old.is_empty() {
                    return Ok(crate::usage_error(&format!(
                        "{} of {} dead letters are past the replay horizon: SQS's move task would \
                         move them too, as new jobs their markers may no longer remember. Use the \
                         default redrive (it leaves them in the DLQ and moves the rest), or pass \
                         --allow-expired-markers to move them anyway",
                        old.len(),
                        items.len()
                    )));
                }
            }
            if !force {
                let unstable = items
                    .iter()
                    .filter(|(m, _)| {
                        matches!(
                            m.resolve(self.dlq.resolver()),
                            Ok((_, JobIdSource::MessageId))
                        )
                    })
                    .count();
                if unstable > 0 {
                    return Ok(crate::usage_error(&format!(
                        "{unstable} of {} dead letters carry no idemq-job-id{}: SQS's move task gives each \
                         a new MessageId, so the consumer would apply them again as new jobs. Use the default \
                         redrive (it stamps idemq-job-id), or pass --force to move them anyway",
                        items.len(),
                        if self.dlq.resolver().body_pointer.is_some() {
                            " and no job id at IDEMQ_JOB_ID_POINTER"
                        } else {
                            ""
                        }
                    )));
                }
            }
            if unseen > 0 {
                eprintln!("idemq dlq: {}", unseen_warning(unseen));
                eprintln!(
                    "idemq dlq: not starting the move task: the unread letters may lack idemq-job-id \
                     or be past the replay horizon (--force and --allow-expired-markers move anyway)"
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        let to_arn = match to {
            Some(url) => Some(idemq::queue::arn(sqs, url).await?),
            None => None,
        };
        start_native(sqs, &dlq_arn, to_arn.as_deref(), rate).await?;
        let bar = crate::progress::bar(self.dlq.peek().depth().await?.total(), "moved");
        let task = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let Some(task) = native_status(sqs, &dlq_arn).await? else {
                continue;
            };
            if let Some(n) = task.to_move {
                bar.set_length(n as u64);
            }
            bar.set_position(task.moved as u64);
            if task.status != "RUNNING" {
                break task;
            }
        };
        bar.finish_and_clear();
        println!(
            "native move task {}: moved {}",
            task.status.to_lowercase(),
            task.moved
        );
        if let Some(reason) = &task.failure_reason {
            eprintln!("failed: {reason}");
        }
        Ok(if task.status == "COMPLETED" {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

fn copies(n: usize) -> String {
    if n == 1 {
        "1 duplicate copy".into()
    } else {
        format!("{n} duplicate copies")
    }
}

/// How many letters another reader holds, and when they come back.
fn held_line(held: &HeldElsewhere) -> String {
    let when = match held.queue_visibility_timeout {
        Some(t) => format!(
            "they come back when that reader's hold ends: within the DLQ's visibility timeout ({}) \
             if it set none, up to 12h if it set its own",
            humantime::format_duration(t)
        ),
        None => "they come back when that reader's hold ends".into(),
    };
    format!(
        "about {} dead letters are held by another reader (in flight: a killed run, another \
         idemq dlq command); {when}",
        held.count
    )
}
