//! `idemq dlq`: see why every dead letter died, and replay it without
//! losing or doubling anything.

use std::collections::{BTreeMap, HashSet};
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use idemq::dlq::archive::{self, Archived};
use idemq::dlq::peek::{Context, DeadMessage, Peek};
use idemq::dlq::redrive::{
    Filter, Redrive, RedriveOptions, cancel_native, dead_letter_sources, native_status, queue_arn,
    start_native,
};
use idemq::dlq::{DeadLetters, FailureRecord};
use idemq::producer::Producer;
use idemq::queue::{QueueError, QueueInfo};
use idemq::{TableLayout, config::DEFAULT_MARKER_TTL};

use crate::usage_error;

#[derive(Debug, clap::Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Debug, Clone, clap::Args)]
struct Common {
    /// The dead-letter queue.
    #[arg(long, env = "IDEMQ_DLQ_URL")]
    dlq_url: String,
    /// The idemq table, for failure records (the whole error chain).
    #[arg(long, env = "IDEMQ_TABLE")]
    table: Option<String>,
    /// Seconds each message stays invisible while it is read; then it is
    /// made visible again.
    #[arg(long, default_value_t = 60)]
    hold_secs: u64,
}

#[derive(Debug, clap::Subcommand)]
enum DlqCommand {
    /// Depth, age of the oldest message, counts by error, source queues.
    Stats {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        json: bool,
    },
    /// One row per dead letter (JSON lines with --json).
    List {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        json: bool,
    },
    /// The whole context of one dead letter, by job id or message id.
    Show {
        #[command(flatten)]
        common: Common,
        id: String,
        /// Print the payload too (it may hold personal data).
        #[arg(long)]
        payload: bool,
    },
    /// Move dead letters back to their source queue: sent first, then
    /// deleted, so a kill at any instant loses nothing.
    Redrive {
        #[command(flatten)]
        common: Common,
        /// Only this job id or message id (repeatable).
        #[arg(long = "job-id")]
        job_ids: Vec<String>,
        /// Only those whose last error contains this (case-insensitive).
        #[arg(long)]
        error_contains: Option<String>,
        /// Only those that failed at or after this: a time
        /// (2026-12-01T10:00:00Z) or a duration ago (2h).
        #[arg(long)]
        since: Option<String>,
        /// Only those that failed at or before this.
        #[arg(long)]
        until: Option<String>,
        #[arg(long)]
        max: Option<usize>,
        /// Messages per second.
        #[arg(long)]
        rate: Option<f64>,
        /// List what would move; move nothing.
        #[arg(long)]
        dry_run: bool,
        /// Send here instead of to each message's source queue.
        #[arg(long)]
        to: Option<String>,
        /// SQS's own StartMessageMoveTask: every message, up to 500/s.
        #[arg(long)]
        native: bool,
        /// Cancel the running native move task.
        #[arg(long)]
        cancel: bool,
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
    },
    /// Write every dead letter with its attributes and context as JSON lines.
    Export {
        #[command(flatten)]
        common: Common,
        file: PathBuf,
        /// Delete the exported messages from the DLQ once the file is
        /// written and read back.
        #[arg(long)]
        delete: bool,
    },
    /// Send the messages of an export to a queue, exactly as they were.
    Import {
        file: PathBuf,
        #[arg(long)]
        to: String,
    },
}

pub async fn run(args: DlqArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let common = match &args.command {
        DlqCommand::Stats { common, .. }
        | DlqCommand::List { common, .. }
        | DlqCommand::Show { common, .. }
        | DlqCommand::Redrive { common, .. }
        | DlqCommand::Export { common, .. } => Some(common.clone()),
        DlqCommand::Import { .. } => None,
    };
    let explicit_destination = matches!(&args.command, DlqCommand::Redrive { to: Some(_), .. });
    let ctx = match common {
        Some(c) => match Ctx::open(sqs.clone(), ddb, c, explicit_destination).await {
            Ok(ctx) => Some(ctx),
            Err(msg) => return usage_error(&msg),
        },
        None => None,
    };
    let result = match (args.command, ctx) {
        (DlqCommand::Stats { json, .. }, Some(ctx)) => ctx.stats(json).await,
        (DlqCommand::List { json, .. }, Some(ctx)) => ctx.list(json).await,
        (DlqCommand::Show { id, payload, .. }, Some(ctx)) => ctx.show(&id, payload).await,
        (
            DlqCommand::Redrive {
                job_ids,
                error_contains,
                since,
                until,
                max,
                rate,
                dry_run,
                to,
                native,
                cancel,
                concurrency,
                ..
            },
            Some(ctx),
        ) => {
            let filter =
                match build_filter(job_ids, error_contains, since.as_deref(), until.as_deref()) {
                    Ok(f) => f,
                    Err(msg) => return usage_error(&msg),
                };
            if let Some(r) = rate
                && !(r > 0.0 && r.is_finite())
            {
                return usage_error(&format!("--rate {r} must be a positive number"));
            }
            if native || cancel {
                if filter != Filter::default() || max.is_some() || dry_run {
                    return usage_error(
                        "--native moves every message: filters, --max and --dry-run need the default redrive",
                    );
                }
                ctx.native(cancel, to.as_deref(), rate).await
            } else {
                let options = RedriveOptions {
                    filter,
                    max,
                    rate,
                    dry_run,
                    to,
                    concurrency: concurrency.max(1),
                };
                ctx.redrive(options).await
            }
        }
        (DlqCommand::Export { file, delete, .. }, Some(ctx)) => ctx.export(&file, delete).await,
        (DlqCommand::Import { file, to }, _) => import(&sqs, &file, &to).await,
        (_, None) => unreachable!("every command but import has common arguments"),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemq dlq: {e}");
            ExitCode::FAILURE
        }
    }
}

type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// What every subcommand on a DLQ needs, checked once.
struct Ctx {
    peek: Peek,
    records: Option<DeadLetters>,
    dlq: QueueInfo,
}

impl Ctx {
    /// Refuses, with one line, a queue that does not exist or is not a DLQ.
    async fn open(
        sqs: aws_sdk_sqs::Client,
        ddb: aws_sdk_dynamodb::Client,
        c: Common,
        explicit_destination: bool,
    ) -> Result<Self, String> {
        let dlq = QueueInfo::discover(&sqs, &c.dlq_url)
            .await
            .map_err(|e| match e {
                QueueError::NotFound(_) => format!("{}: no such queue", c.dlq_url),
                other => other.to_string(),
            })?;
        let sources = dead_letter_sources(&sqs, &c.dlq_url)
            .await
            .map_err(|e| e.to_string())?;
        if sources.is_empty() && !explicit_destination {
            return Err(format!(
                "{} is not a dead-letter queue: no queue's RedrivePolicy names it (to move its messages anyway, pass --to)",
                c.dlq_url
            ));
        }
        let records = c
            .table
            .filter(|t| !t.is_empty())
            .map(|t| DeadLetters::new(ddb, sqs.clone(), TableLayout::new(t), DEFAULT_MARKER_TTL));
        Ok(Self {
            peek: Peek::new(sqs, c.dlq_url, Duration::from_secs(c.hold_secs.max(1))),
            records,
            dlq,
        })
    }

    /// Every dead letter with its context; left invisible until `release`.
    async fn scan(&self) -> Result<Vec<(DeadMessage, Context)>, Box<dyn std::error::Error>> {
        let total = self.peek.depth().await?.total();
        let bar = crate::progress::bar(total, "read");
        let messages = self.peek.scan(None, |n| bar.set_position(n as u64)).await?;
        bar.finish_and_clear();
        let records = match &self.records {
            Some(r) => {
                let keys: Vec<_> = messages.iter().map(DeadMessage::record_key).collect();
                r.read_many(&keys).await?
            }
            None => Default::default(),
        };
        Ok(messages
            .into_iter()
            .map(|m| {
                let c = Context::of(&m, records.get(&m.record_key()));
                (m, c)
            })
            .collect())
    }

    async fn release(&self, items: &[(DeadMessage, Context)]) {
        let messages: Vec<DeadMessage> = items.iter().map(|(m, _)| m.clone()).collect();
        self.peek.release(&messages).await;
    }

    async fn stats(&self, json: bool) -> CmdResult {
        let depth = self.peek.depth().await?;
        let items = self.scan().await?;
        self.release(&items).await;
        let mut by_error: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_source: BTreeMap<String, usize> = BTreeMap::new();
        for (_, c) in &items {
            let error = c
                .last_error
                .clone()
                .unwrap_or_else(|| "(no context)".into());
            *by_error.entry(error).or_default() += 1;
            *by_source
                .entry(c.source_queue.clone().unwrap_or_else(|| "(unknown)".into()))
                .or_default() += 1;
        }
        let oldest = items.iter().filter_map(|(m, _)| m.sent_at()).min();
        let age = oldest.and_then(|t| SystemTime::now().duration_since(t).ok());
        if json {
            let v = serde_json::json!({
                "dlq": self.dlq.name,
                "depth": depth,
                "oldest_age_secs": age.map(|a| a.as_secs()),
                "by_error": by_error,
                "source_queues": by_source,
            });
            println!("{v}");
            return Ok(ExitCode::SUCCESS);
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
        Ok(ExitCode::SUCCESS)
    }

    async fn list(&self, json: bool) -> CmdResult {
        let items = self.scan().await?;
        self.release(&items).await;
        let mut out = std::io::stdout().lock();
        if json {
            for (_, c) in &items {
                let row = serde_json::json!({
                    "job_id": c.job_id,
                    "message_id": c.message_id,
                    "attempts": c.attempts,
                    "last_error": one_line(&c.error_line(), usize::MAX),
                    "failed_at": c.failed_at.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                    "source_queue": c.source_queue,
                    "payload_bytes": c.payload_bytes,
                });
                writeln!(out, "{row}")?;
            }
            return Ok(ExitCode::SUCCESS);
        }
        let width = if std::io::stdout().is_terminal() {
            60
        } else {
            usize::MAX
        };
        writeln!(
            out,
            "{:<24} {:<36} {:>3} {:<20} {:<16} {:>7}  LAST ERROR",
            "JOB ID", "MESSAGE ID", "ATT", "FAILED AT", "SOURCE", "BYTES"
        )?;
        for (_, c) in &items {
            writeln!(
                out,
                "{:<24} {:<36} {:>3} {:<20} {:<16} {:>7}  {}",
                one_line(c.job_id.as_deref().unwrap_or("-"), 24),
                c.message_id,
                c.attempts.map_or("-".into(), |a| a.to_string()),
                c.failed_at
                    .map_or("-".into(), |t| humantime::format_rfc3339_seconds(t)
                        .to_string()),
                one_line(c.source_queue.as_deref().unwrap_or("-"), 16),
                c.payload_bytes,
                one_line(&c.error_line(), width),
            )?;
        }
        writeln!(out, "{} dead letters", items.len())?;
        Ok(ExitCode::SUCCESS)
    }

    async fn show(&self, id: &str, payload: bool) -> CmdResult {
        let items = self.scan().await?;
        self.release(&items).await;
        let found = items
            .iter()
            .find(|(m, c)| m.message_id == id || c.job_id.as_deref() == Some(id));
        let Some((msg, c)) = found else {
            eprintln!("{id}: not in the DLQ");
            if let Some(records) = &self.records
                && let Some(r) = records.read(Some(id), id).await?
            {
                print_record(&r);
            }
            return Ok(ExitCode::FAILURE);
        };
        println!("job id:        {}", c.job_id.as_deref().unwrap_or("-"));
        println!("message id:    {}", c.message_id);
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

    async fn redrive(&self, options: RedriveOptions) -> CmdResult {
        let dry_run = options.dry_run;
        let total = match options.max {
            Some(m) => m as u64,
            None => self.peek.depth().await?.total(),
        };
        let redrive = Redrive::new(&self.peek, self.records.as_ref(), options).await?;
        let bar = crate::progress::bar(total, if dry_run { "matched" } else { "moved" });
        let report = redrive
            .run(&|moved, _seen| bar.set_position(moved as u64))
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
        for id in &report.sent_not_deleted {
            eprintln!(
                "warning: {id} was sent but not deleted from the DLQ; a rerun sends it again (absorbed as a duplicate)"
            );
        }
        let verb = if dry_run { "would move" } else { "moved" };
        println!(
            "{verb} {}, skipped {}, failed {}",
            report.moved.len(),
            report.skipped,
            report.failed.len()
        );
        Ok(if report.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }

    async fn native(&self, cancel: bool, to: Option<&str>, rate: Option<f64>) -> CmdResult {
        let sqs = self.peek.sqs();
        let dlq_arn = queue_arn(sqs, self.peek.dlq_url()).await?;
        if cancel {
            match cancel_native(sqs, &dlq_arn).await? {
                Some(moved) => println!("cancelled the move task after {moved} messages"),
                None => println!("no move task is running"),
            }
            return Ok(ExitCode::SUCCESS);
        }
        let to_arn = match to {
            Some(url) => Some(queue_arn(sqs, url).await?),
            None => None,
        };
        let rate = rate.map(|r| r.round().clamp(1.0, 500.0) as i32);
        start_native(sqs, &dlq_arn, to_arn.as_deref(), rate).await?;
        let bar = crate::progress::bar(self.peek.depth().await?.total(), "moved");
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

    async fn export(&self, file: &PathBuf, delete: bool) -> CmdResult {
        let items = self.scan().await?;
        let lines: Vec<String> = items
            .iter()
            .map(|(m, c)| serde_json::to_string(&Archived::of(m, c)))
            .collect::<Result<_, _>>()?;
        // Written whole, synced and renamed, then read back: only a file
        // that holds every message is allowed to stand for the DLQ.
        let tmp = file.with_extension("partial");
        {
            let mut f = std::fs::File::create(&tmp)?;
            for l in &lines {
                writeln!(f, "{l}")?;
            }
            f.sync_all()?;
        }
        std::fs::rename(&tmp, file)?;
        let written: HashSet<String> = archive::parse(&std::fs::read_to_string(file)?)
            .into_iter()
            .filter_map(|(_, a)| a.ok().map(|a| a.message_id))
            .collect();
        let all_there = items.iter().all(|(m, _)| written.contains(&m.message_id));
        if !delete || !all_there {
            self.release(&items).await;
            if delete {
                eprintln!("the file does not read back whole: nothing deleted");
                return Ok(ExitCode::FAILURE);
            }
            println!("exported {} to {}", items.len(), file.display());
            return Ok(ExitCode::SUCCESS);
        }
        let messages: Vec<DeadMessage> = items.into_iter().map(|(m, _)| m).collect();
        let handles: Vec<&str> = messages.iter().map(|m| m.receipt_handle.as_str()).collect();
        let not_deleted: Vec<&str> =
            idemq::queue::delete_messages(self.peek.sqs(), self.peek.dlq_url(), &handles)
                .await
                .into_iter()
                .map(|i| messages[i].message_id.as_str())
                .collect();
        for id in &not_deleted {
            eprintln!("failed: {id}: exported but not deleted");
        }
        println!(
            "exported {} to {}, deleted {}",
            messages.len(),
            file.display(),
            messages.len() - not_deleted.len()
        );
        Ok(if not_deleted.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

async fn import(sqs: &aws_sdk_sqs::Client, file: &PathBuf, to: &str) -> CmdResult {
    let input = match std::fs::read_to_string(file) {
        Ok(s) => s,
        Err(e) => return Ok(usage_error(&format!("cannot read {}: {e}", file.display()))),
    };
    let producer = match Producer::with_client(sqs.clone(), to).await {
        Ok(p) => p,
        Err(e) => return Ok(usage_error(&e.to_string())),
    };
    let mut failures = Vec::new();
    let mut jobs = Vec::new();
    let mut numbers = Vec::new();
    for (line, parsed) in archive::parse(&input) {
        match parsed.and_then(|a| a.to_job()) {
            Ok(job) => {
                jobs.push(job);
                numbers.push(line);
            }
            Err(e) => failures.push(format!("line {line}: {e}")),
        }
    }
    let bar = crate::progress::bar(jobs.len() as u64, "sent");
    let mut sent = 0;
    let mut numbers = numbers.into_iter();
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        let chunk: Vec<_> = jobs.by_ref().take(100).collect();
        for (_, result) in producer.send_batch(chunk).await {
            let line = numbers.next().unwrap_or_default();
            match result {
                Ok(_) => sent += 1,
                Err(e) => failures.push(format!("line {line}: {e}")),
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    for f in &failures {
        eprintln!("failed: {f}");
    }
    println!("imported {sent}, failed {}", failures.len());
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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

fn build_filter(
    job_ids: Vec<String>,
    error_contains: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<Filter, String> {
    let now = SystemTime::now();
    let filter = Filter {
        job_ids: job_ids.into_iter().collect(),
        error_contains: error_contains.filter(|s| !s.is_empty()),
        since: since.map(|s| parse_when("--since", s, now)).transpose()?,
        until: until.map(|s| parse_when("--until", s, now)).transpose()?,
    };
    if let (Some(s), Some(u)) = (filter.since, filter.until)
        && s > u
    {
        return Err("--since is after --until: nothing could match".into());
    }
    Ok(filter)
}

/// A time (RFC 3339) or a duration before `now` (`2h`, `30m`).
fn parse_when(flag: &str, value: &str, now: SystemTime) -> Result<SystemTime, String> {
    if let Ok(t) = humantime::parse_rfc3339_weak(value) {
        return Ok(t);
    }
    if let Ok(d) = humantime::parse_duration(value) {
        return now
            .checked_sub(d)
            .ok_or_else(|| format!("{flag} {value:?} reaches before 1970"));
    }
    Err(format!(
        "{flag} {value:?} is neither a time (2026-12-01T10:00:00Z) nor a duration ago (2h)"
    ))
}

/// `s` on one line, cut to `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let flat = s.replace(['\n', '\r', '\t'], " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn times_are_absolute_or_ago() {
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        assert_eq!(
            parse_when("--since", "2h", now),
            Ok(UNIX_EPOCH + Duration::from_secs(2_800))
        );
        assert_eq!(
            parse_when("--since", "1970-01-01T00:00:05Z", now),
            Ok(UNIX_EPOCH + Duration::from_secs(5))
        );
        let err = parse_when("--until", "yesterday", now).unwrap_err();
        assert!(err.starts_with("--until \"yesterday\" is neither"), "{err}");
    }

    #[test]
    fn filters_refuse_an_empty_window() {
        let err = build_filter(
            vec![],
            None,
            Some("2026-12-02T00:00:00Z"),
            Some("2026-12-01T00:00:00Z"),
        )
        .unwrap_err();
        assert!(err.contains("after --until"));
        let f = build_filter(
            vec!["a".into(), "a".into()],
            Some(String::new()),
            None,
            None,
        )
        .unwrap();
        assert_eq!(f.job_ids.len(), 1);
        assert_eq!(f.error_contains, None);
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }
}
