//! `idemq send`: JSON lines in, one job per line, each with a stable id.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use idemq::Producer;
use idemq::producer::Job;

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    #[arg(long, env = "IDEMQ_QUEUE_URL")]
    pub queue_url: String,
    /// A JSON-lines file, one job per line; stdin when absent or `-`.
    pub file: Option<PathBuf>,
    /// JSON pointer to each job's id (e.g. /transfer_id). Without it ids are
    /// generated, and sending the same input twice sends every job twice.
    #[arg(long)]
    pub job_id_pointer: Option<String>,
    /// JSON pointer to each job's message group (required for FIFO queues).
    #[arg(long)]
    pub group_pointer: Option<String>,
    /// At most this many jobs per second.
    #[arg(long)]
    pub rate: Option<f64>,
}

/// One input line turned into a job, or why it cannot be one.
#[derive(Debug, PartialEq)]
pub struct Line {
    pub number: usize,
    pub job: Result<Job, String>,
}

/// Parses the input: blank lines are skipped; each other line must be JSON
/// with a string or number at the pointers given.
pub fn parse(input: &str, id_pointer: Option<&str>, group_pointer: Option<&str>) -> Vec<Line> {
    input
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, line)| Line {
            number: i + 1,
            job: parse_line(line.trim(), id_pointer, group_pointer),
        })
        .collect()
}

fn parse_line(
    line: &str,
    id_pointer: Option<&str>,
    group_pointer: Option<&str>,
) -> Result<Job, String> {
    let doc: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let scalar = |pointer: &str, what: &str| match doc.pointer(pointer) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Number(n)) => Ok(n.to_string()),
        Some(_) => Err(format!("{what} at {pointer} is not a string or number")),
        None => Err(format!("no {what} at {pointer}")),
    };
    let id = match id_pointer {
        Some(p) => scalar(p, "job id")?,
        None => format!("gen-{:032x}", rand::random::<u128>()),
    };
    // The line is sent byte for byte, so a re-sent line hashes the same.
    let mut job = Job::raw(id, line);
    if let Some(p) = group_pointer {
        job = job.in_group(scalar(p, "message group")?);
    }
    Ok(job)
}

pub async fn run(args: SendArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    let input = match read_input(args.file.as_ref()) {
        Ok(s) => s,
        Err(e) => return crate::usage_error(&e),
    };
    if let Some(rate) = args.rate
        && !(rate > 0.0 && rate.is_finite())
    {
        return crate::usage_error(&format!("--rate {rate} must be a positive number"));
    }
    for p in [&args.job_id_pointer, &args.group_pointer]
        .into_iter()
        .flatten()
    {
        if !p.starts_with('/') {
            return crate::usage_error(&format!(
                "{p:?} is not a JSON pointer: it starts with '/', e.g. /transfer_id"
            ));
        }
    }
    if args.job_id_pointer.is_none() {
        eprintln!(
            "warning: no --job-id-pointer: job ids are generated, so sending this input again \
             would not be recognised as the same jobs"
        );
    }
    let producer = match Producer::new(sdk, &args.queue_url).await {
        Ok(p) => p,
        Err(e) => return crate::usage_error(&e.to_string()),
    };
    let lines = parse(
        &input,
        args.job_id_pointer.as_deref(),
        args.group_pointer.as_deref(),
    );

    let bar = crate::progress::bar(lines.len() as u64, "jobs");
    let mut failures: Vec<String> = Vec::new();
    let mut sent = 0usize;
    let mut jobs = Vec::new();
    let mut numbers = Vec::new();
    for line in lines {
        match line.job {
            Ok(job) => {
                jobs.push(job);
                numbers.push(line.number);
            }
            Err(e) => {
                failures.push(format!("line {}: {e}", line.number));
                bar.inc(1);
            }
        }
    }
    // Paced in chunks: one SendMessageBatch worth when rate-limited, larger
    // chunks (sent 4 batches at a time) when not.
    let chunk = if args.rate.is_some() { 10 } else { 100 };
    let start = Instant::now();
    let mut done = 0usize;
    let mut numbers = numbers.into_iter();
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        let batch: Vec<Job> = jobs.by_ref().take(chunk).collect();
        let n = batch.len();
        for (_, result) in producer.send_batch(batch).await {
            let number = numbers.next().unwrap_or_default();
            match result {
                Ok(_) => sent += 1,
                Err(e) => failures.push(format!("line {number}: {e}")),
            }
        }
        done += n;
        bar.inc(n as u64);
        if let Some(rate) = args.rate {
            let due = Duration::from_secs_f64(done as f64 / rate);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    bar.finish_and_clear();
    for f in &failures {
        eprintln!("failed: {f}");
    }
    println!(
        "sent {sent}, failed {} ({:.1} s)",
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn read_input(file: Option<&PathBuf>) -> Result<String, String> {
    match file {
        Some(path) if path.as_os_str() != "-" => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            Ok(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_jobs_with_ids_and_groups() {
        let input = "{\"id\":\"a\",\"g\":\"x\"}\n\n  {\"id\":7,\"g\":\"y\"}  \nnot json\n{\"g\":\"x\"}\n{\"id\":{},\"g\":\"x\"}\n{\"id\":\"b\"}\n";
        let lines = parse(input, Some("/id"), Some("/g"));
        assert_eq!(lines.len(), 6, "blank line skipped");
        let job = lines[0].job.as_ref().unwrap();
        assert_eq!((job.id.as_str(), job.group_id.as_deref()), ("a", Some("x")));
        assert_eq!(job.body, "{\"id\":\"a\",\"g\":\"x\"}", "sent byte for byte");
        assert_eq!(lines[1].number, 3);
        assert_eq!(lines[1].job.as_ref().unwrap().id, "7");
        assert_eq!(
            lines[1].job.as_ref().unwrap().body,
            "{\"id\":7,\"g\":\"y\"}",
            "trimmed"
        );
        assert!(lines[2].job.as_ref().unwrap_err().starts_with("not JSON"));
        assert_eq!(lines[3].job.as_ref().unwrap_err(), "no job id at /id");
        assert!(
            lines[4]
                .job
                .as_ref()
                .unwrap_err()
                .contains("not a string or number")
        );
        assert_eq!(lines[5].job.as_ref().unwrap_err(), "no message group at /g");
    }

    #[test]
    fn without_a_pointer_ids_are_generated_and_distinct() {
        let lines = parse("{}\n{}\n", None, None);
        let a = &lines[0].job.as_ref().unwrap().id;
        let b = &lines[1].job.as_ref().unwrap().id;
        assert!(a.starts_with("gen-") && a != b);
    }
}
