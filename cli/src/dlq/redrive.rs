//! `redrive`: idemq's own (send, then delete; every copy stamped with its
//! job id) and SQS's move task (`--native`).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};

use idemq::dlq::inspect::one_line;
use idemq::dlq::redrive::{
    HeldElsewhere, NativeRate, NativeRefusal, Redrive, RedriveOptions, cancel_native, check_native,
    start_native, wait_native,
};

use super::{CmdResult, Ctx, unseen_warning};

impl Ctx {
    pub(super) async fn redrive(&self, options: RedriveOptions, json: bool) -> CmdResult {
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
                bar.suspend(|| eprintln!("idemq dlq: waiting: {held}"));
            }
        };
        let report = redrive
            .run_waiting(&|moved, _seen| bar.set_position(moved as u64), &waiting)
            .await?;
        bar.finish_and_clear();
        if json {
            let refused = |v: &[idemq::dlq::redrive::Refused]| -> Vec<serde_json::Value> {
                v.iter()
                    .map(|r| {
                        serde_json::json!({"message_id": r.message_id, "job_id": r.job_id, "why": r.why})
                    })
                    .collect()
            };
            let pairs = |v: &[(String, String)], a: &str, b: &str| -> Vec<serde_json::Value> {
                v.iter()
                    .map(|(x, y)| serde_json::json!({a: x, b: y}))
                    .collect()
            };
            let moved: Vec<serde_json::Value> = report
                .moved
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "message_id": c.message_id,
                        "job_id": c.job_id,
                        "last_error": one_line(&c.error_line(), usize::MAX),
                    })
                })
                .collect();
            let value = serde_json::json!({
                "dry_run": dry_run,
                "moved": moved,
                "skipped": report.skipped,
                "failed": pairs(&report.failed, "message_id", "error"),
                "past_horizon": refused(&report.past_horizon),
                "forced": refused(&report.forced),
                "sent_not_deleted": report.sent_not_deleted,
                "unjudged": report.unjudged,
                "again": report.again,
                "different_payload": pairs(&report.different_payload, "job_id", "message_id"),
                "copies_removed": report.copies,
                "copies_not_deleted": report.copies_not_deleted,
                "unseen": report.unseen,
                "held_elsewhere": report.held_elsewhere.as_ref().map(|h| h.to_string()),
                "complete": report.is_complete(),
            });
            println!("{value}");
            return Ok(if report.is_complete() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
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
            eprintln!("idemq dlq: not read: {held}");
            eprintln!(
                "idemq dlq: rerun once they are back, or pass --wait <duration> to wait for them"
            );
        }
        Ok(if report.is_complete() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }

    /// SQS's move task, once [`check_native`] finds nothing it would
    /// harm (unless `--force` and `--allow-expired-markers` say otherwise).
    pub(super) async fn native(
        &self,
        cancel: bool,
        force: bool,
        to: Option<&str>,
        rate: Option<NativeRate>,
        allow_expired_markers: bool,
        json: bool,
    ) -> CmdResult {
        let peek = self.dlq.peek();
        let sqs = peek.sqs();
        let dlq_arn = peek.arn().await?;
        if cancel {
            match (cancel_native(sqs, &dlq_arn).await?, json) {
                (moved, true) => println!(
                    "{}",
                    serde_json::json!({"native": true, "cancelled": moved.is_some(), "moved": moved})
                ),
                (Some(moved), false) => println!("cancelled the move task after {moved} messages"),
                (None, false) => println!("no move task is running"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        if !(force && allow_expired_markers) {
            let read = self.read_letters().await?;
            self.dlq.release(&read.items).await;
            let letters: Vec<_> = read.items.into_iter().map(|(m, _)| m).collect();
            let checked = check_native(
                peek,
                &letters,
                read.unseen,
                self.dlq.resolver(),
                &self.horizon,
                force,
                allow_expired_markers,
            )
            .await;
            match checked {
                Ok(()) => {}
                Err(refusal @ NativeRefusal::Unseen(unseen)) => {
                    eprintln!("idemq dlq: {}", unseen_warning(unseen));
                    eprintln!("idemq dlq: {refusal}");
                    return Ok(ExitCode::FAILURE);
                }
                Err(refusal) if refusal.is_usage() => {
                    if let NativeRefusal::PastHorizon { refused, .. } = &refusal {
                        for r in refused {
                            eprintln!("past horizon: {}: {}", r.message_id, r.why);
                        }
                    }
                    return Ok(crate::usage_error(&refusal.to_string()));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let to_arn = match to {
            Some(url) => Some(peek.destination_arn(url).await?),
            None => None,
        };
        start_native(
            sqs,
            &dlq_arn,
            to_arn.as_deref(),
            rate.map(NativeRate::messages_per_second),
        )
        .await?;
        let bar = crate::progress::bar(peek.depth().await?.total(), "moved");
        let task = wait_native(sqs, &dlq_arn, |task| {
            if let Some(n) = task.to_move {
                bar.set_length(n as u64);
            }
            bar.set_position(task.moved as u64);
        })
        .await?;
        bar.finish_and_clear();
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "native": true,
                    "status": task.status.to_lowercase(),
                    "moved": task.moved,
                    "failure_reason": task.failure_reason,
                    "complete": task.status == "COMPLETED",
                })
            );
        } else {
            println!(
                "native move task {}: moved {}",
                task.status.to_lowercase(),
                task.moved
            );
        }
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
