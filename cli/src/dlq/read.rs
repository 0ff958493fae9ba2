//! `stats`, `list`, `show`: reading the DLQ without consuming it.

use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;

use idemq::dlq::copies::{Letter, letters};
use idemq::dlq::inspect::{Row, Stats, find_letter, one_line};
use idemq::failure::FailureRecord;

use super::{CmdResult, Ctx, unseen_warning};

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
        let depth = self.dlq.peek().depth().await?;
        let read = self.read_letters().await?;
        self.dlq.release(&read.items).await;
        let warnings = self.warnings(&read);
        let stats = Stats::of(
            &self.dlq.info().name,
            depth,
            read,
            std::time::SystemTime::now(),
        );
        let unseen = stats.unseen;
        if json {
            // Through a `Value`, so that keys come out as serde_json orders
            // an object's (as they always have), not in field order.
            let mut value = serde_json::to_value(&stats)?;
            value["warnings"] = serde_json::to_value(&warnings)?;
            println!("{value}");
            return Ok(finish(unseen));
        }
        println!(
            "DLQ {}: {} messages (visible {}, in flight {}, delayed {})",
            stats.dlq,
            depth.total(),
            depth.visible,
            depth.in_flight,
            depth.delayed
        );
        match stats.oldest_age {
            Some(a) => println!("oldest: {} old", humantime::format_duration(a)),
            None => println!("oldest: -"),
        }
        println!("source queues:");
        for (q, n) in &stats.by_source {
            println!("  {n:>6}  {q}");
        }
        println!("by error:");
        for (e, n) in stats.errors_by_count() {
            println!("  {n:>6}  {}", one_line(e, 100));
        }
        // Which deploy failed them, in the order the deploys began to:
        // one error under every deploy reads as a downstream's outage,
        // every error under one new deploy as a bug it shipped.
        println!("by deploy (in the order they began to fail):");
        for (d, f) in stats.deploys_by_first_failure() {
            let since = f.first_failed_at.map_or("-".into(), |t| {
                humantime::format_rfc3339_seconds(t).to_string()
            });
            println!(
                "  {:>6}  {}  (first failed {since})",
                f.jobs,
                one_line(d, 60)
            );
            for (e, n) in f.errors_by_count() {
                println!("  {:>14}  {}", n, one_line(e, 92));
            }
        }
        println!(
            "read: {} messages, {} jobs ({} duplicate copies)",
            stats.read, stats.jobs, stats.copies
        );
        Ok(finish(unseen))
    }

    pub(super) async fn list(&self, json: bool) -> CmdResult {
        let read = self.read_letters().await?;
        self.dlq.release(&read.items).await;
        // On stderr: stdout's lines are the letters (each row's
        // `failure_record` says the same, letter by letter).
        self.warnings(&read);
        let unseen = read.unseen;
        let letters = letters(read.items);
        let rows: Vec<Row> = letters.iter().map(Row::of).collect();
        let mut out = std::io::stdout().lock();
        if json {
            for row in &rows {
                // Through a `Value`: keys in serde_json's object order.
                writeln!(out, "{}", serde_json::to_value(row)?)?;
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
        for r in &rows {
            let job = match (&r.job_id, r.conflicting) {
                (Some(j), true) => format!("{j} (!)"),
                (Some(j), false) => j.clone(),
                (None, _) => "-".into(),
            };
            writeln!(
                out,
                "{:<24} {:<36} {:>3} {:>3} {:<20} {:<16} {:>7}  {}",
                one_line(&job, 24),
                r.message_id,
                r.copies,
                r.attempts.map_or("-".into(), |a| a.to_string()),
                r.failed_at
                    .map_or("-".into(), |t| humantime::format_rfc3339_seconds(t)
                        .to_string()),
                one_line(r.source_queue.as_deref().unwrap_or("-"), 16),
                r.payload_bytes,
                one_line(&r.last_error, width),
            )?;
        }
        let read: usize = rows.iter().map(|r| r.copies).sum();
        writeln!(
            out,
            "{} dead letters ({read} messages: CPY counts a job's copies, same job id and payload)",
            rows.len()
        )?;
        if rows.iter().any(|r| r.conflicting) {
            writeln!(
                out,
                "(!): another letter has this job id and a different payload (not a copy)"
            )?;
        }
        Ok(finish(unseen))
    }

    pub(super) async fn show(&self, id: &str, payload: bool, json: bool) -> CmdResult {
        let read = self.read_letters().await?;
        self.dlq.release(&read.items).await;
        let warnings = self.warnings(&read);
        let unseen = read.unseen;
        let letters = letters(read.items);
        let found = find_letter(&letters, id);
        if json {
            let record = match found {
                Some(l) if !l.context.failure_record => None,
                Some(l) => {
                    let key = l.context.job_id.as_deref().unwrap_or(&l.context.message_id);
                    self.dlq.failure_record(key).await?
                }
                None => self.dlq.failure_record(id).await?,
            };
            let value = serde_json::json!({
                "id": id,
                "found": found.is_some(),
                "letter": found.map(|l| letter_json(l, payload)),
                "failure_record": record.as_ref().map(record_json),
                "unseen": unseen,
                "warnings": warnings,
            });
            println!("{value}");
            if found.is_none() && unseen > 0 {
                eprintln!("idemq dlq: {}", unseen_warning(unseen));
            }
            return Ok(if found.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
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
            if let Some(r) = self.dlq.failure_record(id).await? {
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
        println!("deploy:        {}", c.deploy_line());
        println!("last error:    {}", c.last_error.as_deref().unwrap_or("-"));
        for (depth, e) in c.error_chain.iter().enumerate() {
            println!("  {}caused by: {e}", "  ".repeat(depth));
        }
        if let Some(bt) = &c.backtrace {
            println!("where:");
            for line in bt.lines() {
                println!("  {line}");
            }
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

/// One letter for `show --json`: its context, copies and attributes
/// (binary ones by size), and its payload only when asked for.
fn letter_json(l: &Letter, payload: bool) -> serde_json::Value {
    let attributes: serde_json::Map<String, serde_json::Value> = l
        .message
        .attributes
        .iter()
        .map(|(name, v)| {
            let value = match v.string_value() {
                Some(s) => serde_json::json!({"data_type": v.data_type(), "string_value": s}),
                None => serde_json::json!({
                    "data_type": v.data_type(),
                    "binary_bytes": v.binary_value().map_or(0, |b| b.as_ref().len()),
                }),
            };
            (name.clone(), value)
        })
        .collect();
    let mut value = serde_json::to_value(&l.context).unwrap_or_default();
    value["copy_message_ids"] = serde_json::json!(l.copies);
    value["conflicting"] = serde_json::json!(l.conflicting);
    value["group_id"] = serde_json::json!(l.message.group_id());
    value["attributes"] = serde_json::Value::Object(attributes);
    if payload {
        value["payload"] = serde_json::json!(l.message.body);
    }
    value
}

fn record_json(r: &FailureRecord) -> serde_json::Value {
    serde_json::json!({
        "job_id": r.job_id,
        "message_id": r.message_id,
        "attempt": r.attempt,
        "failed_at": humantime::format_rfc3339_millis(r.failed_at).to_string(),
        "kind": r.failure.kind.as_str(),
        "error": r.failure.error,
        "error_chain": r.failure.chain,
        "source_queue": r.source_queue,
        "deploy": r.deploy,
        "idemq_version": r.idemq_version,
        "backtrace": r.failure.backtrace,
    })
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
