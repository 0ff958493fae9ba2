//! `stats`, `list`, `show`: reading the DLQ without consuming it.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use idemq::dead_letter::FailureRecord;
use idemq::dlq::copies::{Letter, letters};

use super::{CmdResult, Ctx, one_line, unseen_warning};

/// Exit 0 when every letter was read; else the warning and exit 1.
fn finish(unseen: u64) -> ExitCode {
    if unseen == 0 {
        return ExitCode::SUCCESS;
    }
    eprintln!("idemq dlq: {}", unseen_warning(unseen));
    ExitCode::FAILURE
}

impl Ctx {
    pub(super) async fn stats(&self, json: bool) -> CmdResult {
        let depth = self.peek.depth().await?;
        let (items, unseen) = self.scan().await?;
        self.release(&items).await;
        let read = items.len();
        let oldest = items.iter().filter_map(|(m, _)| m.sent_at()).min();
        // Counted by job: a crash's second copy is not a second failure.
        let letters = letters(items);
        let mut by_error: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_source: BTreeMap<String, usize> = BTreeMap::new();
        for Letter { context: c, .. } in &letters {
            let error = c
                .last_error
                .clone()
                .unwrap_or_else(|| "(no context)".into());
            *by_error.entry(error).or_default() += 1;
            *by_source
                .entry(c.source_queue.clone().unwrap_or_else(|| "(unknown)".into()))
                .or_default() += 1;
        }
        let age = oldest.and_then(|t| idemq::clock::now().duration_since(t).ok());
        if json {
            let v = serde_json::json!({
                "dlq": self.dlq.name,
                "depth": depth,
                "oldest_age_secs": age.map(|a| a.as_secs()),
                "by_error": by_error,
                "source_queues": by_source,
                "read": read,
                "jobs": letters.len(),
                "copies": read - letters.len(),
                "unseen": unseen,
            });
            println!("{v}");
            return Ok(finish(unseen));
        }
        println!(
            "DLQ {}: {} messages (visible {}, in flight {}, delayed {})",
            self.dlq.name,
            depth.total(),
            depth.visible,
            depth.in_flight,
            depth.delayed
        );
        match age {
            Some(a) => println!(
                "oldest: {} old",
                humantime::format_duration(Duration::from_secs(a.as_secs()))
            ),
            None => println!("oldest: -"),
        }
        println!("source queues:");
        for (q, n) in &by_source {
            println!("  {n:>6}  {q}");
        }
        println!("by error:");
        let mut errors: Vec<_> = by_error.into_iter().collect();
        errors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (e, n) in errors {
            println!("  {n:>6}  {}", one_line(&e, 100));
        }
        println!(
            "read: {read} messages, {} jobs ({} duplicate copies)",
            letters.len(),
            read - letters.len()
        );
        Ok(finish(unseen))
    }

    pub(super) async fn list(&self, json: bool) -> CmdResult {
        let (items, unseen) = self.scan().await?;
        self.release(&items).await;
        let letters = letters(items);
        let mut out = std::io::stdout().lock();
        if json {
            for l in &letters {
                let c = &l.context;
                let row = serde_json::json!({
                    "job_id": c.job_id,
                    "message_id": c.message_id,
                    "attempts": c.attempts,
                    "last_error": one_line(&c.error_line(), usize::MAX),
                    "failed_at": c.failed_at.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                    "source_queue": c.source_queue,
                    "payload_bytes": c.payload_bytes,
                    "copies": l.count(),
                    "copy_message_ids": l.copies,
                    "conflicting": l.conflicting,
                });
                writeln!(out, "{row}")?;
            }
            return Ok(finish(unseen));
        }
        let width = if std::io::stdout().is_terminal() {
            60
        } else {
            usize::MAX
        };
        writeln!(
            out,
            "{:<24} {:<36} {:>3} {:>3} {:<20} {:<16} {:>7}  LAST ERROR",
            "JOB ID", "MESSAGE ID", "CPY", "ATT", "FAILED AT", "SOURCE", "BYTES"
        )?;
        for l in &letters {
            let c = &l.context;
            let job = match (&c.job_id, l.conflicting) {
                (Some(j), true) => format!("{j} (!)"),
                (Some(j), false) => j.clone(),
                (None, _) => "-".into(),
            };
            writeln!(
                out,
                "{:<24} {:<36} {:>3} {:>3} {:<20} {:<16} {:>7}  {}",
                one_line(&job, 24),
                c.message_id,
                l.count(),
                c.attempts.map_or("-".into(), |a| a.to_string()),
                c.failed_at
                    .map_or("-".into(), |t| humantime::format_rfc3339_seconds(t)
                        .to_string()),
                one_line(c.source_queue.as_deref().unwrap_or("-"), 16),
                c.payload_bytes,
                one_line(&c.error_line(), width),
            )?;
        }
        let read: usize = letters.iter().map(Letter::count).sum();
        writeln!(
            out,
            "{} dead letters ({read} messages: CPY counts a job's copies, same job id and payload)",
            letters.len()
        )?;
        if letters.iter().any(|l| l.conflicting) {
            writeln!(
                out,
                "(!): another letter has this job id and a different payload (not a copy)"
            )?;
        }
        Ok(finish(unseen))
    }

    pub(super) async fn show(&self, id: &str, payload: bool) -> CmdResult {
        let (items, unseen) = self.scan().await?;
        self.release(&items).await;
        let letters = letters(items);
        let found = letters.iter().find(|l| {
            l.message.message_id == id
                || l.copies.iter().any(|c| c == id)
                || l.context.job_id.as_deref() == Some(id)
        });
        let Some(Letter {
            message: msg,
            context: c,
            copies,
            conflicting,
        }) = found
        else {
            if unseen > 0 {
                eprintln!("{id}: not among the letters read");
                eprintln!("idemq dlq: {}", unseen_warning(unseen));
            } else {
                eprintln!("{id}: not in the DLQ");
            }
            if let Some(records) = &self.records
                && let Some(r) = records.read(Some(id), id).await?
            {
                print_record(&r);
            }
            return Ok(ExitCode::FAILURE);
        };
        println!("job id:        {}", c.job_id.as_deref().unwrap_or("-"));
        println!("message id:    {}", c.message_id);
        if !copies.is_empty() {
            println!(
                "copies:        {} more of this job, same payload: {}",
                copies.len(),
                copies.join(", ")
            );
        }
        if *conflicting {
            println!(
                "conflicting:   another letter has this job id and a different payload (not a copy)"
            );
        }
        println!(
            "attempts:      {}",
            c.attempts.map_or("-".into(), |a| a.to_string())
        );
        println!(
            "failed at:     {}",
            c.failed_at
                .map_or("-".into(), |t| humantime::format_rfc3339_millis(t)
                    .to_string())
        );
        println!(
            "source queue:  {}",
            c.source_queue.as_deref().unwrap_or("-")
        );
        println!("last error:    {}", c.last_error.as_deref().unwrap_or("-"));
        for (depth, e) in c.error_chain.iter().enumerate() {
            println!("  {}caused by: {e}", "  ".repeat(depth));
        }
        if let Some(g) = msg.group_id() {
            println!("group id:      {g}");
        }
        println!("attributes:");
        let mut names: Vec<&String> = msg.attributes.keys().collect();
        names.sort();
        for name in names {
            let v = &msg.attributes[name];
            let shown = v.string_value().map_or_else(
                || {
                    format!(
                        "({} bytes)",
                        v.binary_value().map_or(0, |b| b.as_ref().len())
                    )
                },
                str::to_owned,
            );
            println!("  {name} ({}): {shown}", v.data_type());
        }
        println!("payload:       {} bytes", c.payload_bytes);
        if payload {
            println!("{}", msg.body);
        } else {
            println!("               (--payload to print it)");
        }
        Ok(ExitCode::SUCCESS)
    }
}

fn print_record(r: &FailureRecord) {
    println!(
        "failure record of {}:",
        r.job_id.as_deref().unwrap_or(&r.message_id)
    );
    println!(
        "  attempt {} at {}",
        r.attempt,
        humantime::format_rfc3339_millis(r.failed_at)
    );
    println!("  {}: {}", r.failure.kind.as_str(), r.failure.full());
}
