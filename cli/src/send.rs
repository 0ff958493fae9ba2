//! `idemq send`: JSON lines in, one job per line, each with a stable id.
//!
//! The input (a file or stdin) is streamed: read line by line, a bounded
//! number of lines ahead of the sender, so memory stays bounded and jobs
//! from a pipe are sent as they come.

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use idemq::producer::Job;
use idemq::producer::Producer;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    #[arg(long, env = "IDEMQ_QUEUE_URL", required_unless_present = "topic_arn")]
    pub queue_url: Option<String>,
    /// Publish to this SNS topic instead of a queue, each job with the
    /// idemq-job-id message attribute (its consumers run with
    /// IDEMQ_ENVELOPE=sns when raw message delivery is off).
    #[arg(long)]
    pub topic_arn: Option<String>,
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
    /// One JSON object on stdout when done: `sent`, `failed`, `seconds`,
    /// and `failures` (each `line` and `error`; `line` null for input that
    /// could not be read).
    #[arg(long)]
    pub json: bool,
}

/// Lines read ahead of the sender, at most. With lines of at most
/// [`MAX_LINE_BYTES`], `send` holds at most this many lines plus the chunk
/// being sent, whatever the size of its input (typically kilobytes; 300
/// MiB if every line were a 1 MiB message).
const READ_AHEAD: usize = 200;
/// Longest input line read, in bytes: SQS's largest message (1 MiB). A
/// longer line could not be sent anyway; it is skipped and reported.
const MAX_LINE_BYTES: usize = idemq::producer::DEFAULT_MAX_MESSAGE_BYTES;

/// One input line turned into a job, or why it cannot be one.
#[derive(Debug, PartialEq)]
pub struct Line {
    pub number: usize,
    pub job: Result<Job, String>,
}

/// One line of input as read: its text, or why it has none.
#[derive(Debug, PartialEq)]
pub enum RawLine {
    Text { number: usize, text: String },
    TooLong { number: usize },
    NotUtf8 { number: usize },
}

/// Reads lines of at most `max` bytes (without their end) from a
/// `BufRead`, never holding more than one such line: a longer line is
/// read through to its end and reported as [`RawLine::TooLong`].
pub struct LineReader<R> {
    reader: R,
    max: usize,
    number: usize,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(reader: R, max: usize) -> Self {
        Self {
            reader,
            max,
            number: 0,
        }
    }

    /// The next line and the bytes it took in the input (its end included).
    pub fn next_line(&mut self) -> std::io::Result<Option<(RawLine, usize)>> {
        let mut buf = Vec::new();
        let mut taken = 0usize;
        let mut too_long = false;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                if taken == 0 {
                    return Ok(None);
                }
                break;
            }
            let (piece, end) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..=i], true),
                None => (available, false),
            };
            let n = piece.len();
            taken += n;
            // The end of line ("\n" or "\r\n") does not count.
            if !too_long && buf.len() + n > self.max + 2 {
                too_long = true;
                buf = Vec::new();
            }
            if !too_long {
                buf.extend_from_slice(piece);
            }
            self.reader.consume(n);
            if end {
                break;
            }
        }
        self.number += 1;
        let number = self.number;
        if buf.ends_with(b"\n") {
            buf.pop();
            if buf.ends_with(b"\r") {
                buf.pop();
            }
        }
        let line = if too_long || buf.len() > self.max {
            RawLine::TooLong { number }
        } else {
            match String::from_utf8(buf) {
                Ok(text) => RawLine::Text { number, text },
                Err(_) => RawLine::NotUtf8 { number },
            }
        };
        Ok(Some((line, taken)))
    }
}

/// Turns one line read into a job (`None` for a blank line).
fn to_job(
    raw: RawLine,
    id_pointer: Option<&str>,
    group_pointer: Option<&str>,
    max: usize,
) -> Option<Line> {
    let (number, job) = match raw {
        RawLine::Text { number, text } => {
            if text.trim().is_empty() {
                return None;
            }
            (number, parse_line(text.trim(), id_pointer, group_pointer))
        }
        RawLine::TooLong { number } => (
            number,
            Err(format!(
                "longer than {max} bytes, the largest SQS message; not read"
            )),
        ),
        RawLine::NotUtf8 { number } => (number, Err("not UTF-8 text".to_owned())),
    };
    Some(Line { number, job })
}

/// Parses a whole input held in memory (what [`run`] does line by line as
/// it reads): blank lines are skipped; each other line must be JSON with a
/// string or number at the pointers given.
#[cfg(test)]
pub fn parse(input: &str, id_pointer: Option<&str>, group_pointer: Option<&str>) -> Vec<Line> {
    let mut reader = LineReader::new(input.as_bytes(), MAX_LINE_BYTES);
    let mut lines = Vec::new();
    while let Ok(Some((raw, _))) = reader.next_line() {
        lines.extend(to_job(raw, id_pointer, group_pointer, MAX_LINE_BYTES));
    }
    lines
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

/// `--rate` must be a positive number whose interval (1/rate seconds) is a
/// duration: `Duration::from_secs_f64` panics on what does not fit.
pub fn check_rate(rate: f64) -> Result<Duration, String> {
    if !(rate > 0.0 && rate.is_finite()) {
        return Err(format!("--rate {rate:?} must be a positive number"));
    }
    Duration::try_from_secs_f64(1.0 / rate).map_err(|_| {
        format!(
            "--rate {rate:?} is too small: one job every {:?} seconds is longer than any wait",
            1.0 / rate
        )
    })
}

/// The input, opened: a file, or stdin for none or `-`; and its size when
/// known (for the progress bar).
fn open_input(file: Option<&PathBuf>) -> Result<(Box<dyn BufRead + Send>, Option<u64>), String> {
    match file {
        Some(path) if path.as_os_str() != "-" => {
            let cannot = |e: &dyn std::fmt::Display| format!("cannot read {}: {e}", path.display());
            let f = std::fs::File::open(path).map_err(|e| cannot(&e))?;
            let meta = f.metadata().map_err(|e| cannot(&e))?;
            if meta.is_dir() {
                return Err(cannot(&"is a directory"));
            }
            let len = meta.is_file().then_some(meta.len());
            Ok((Box::new(BufReader::new(f)), len))
        }
        _ => Ok((Box::new(BufReader::new(std::io::stdin())), None)),
    }
}

/// Progress on a terminal: bytes of a file read and sent (with ETA), or a
/// count for stdin; nothing when stderr is not a terminal.
fn progress(total: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (bar, template) = match total {
        Some(len) => (
            ProgressBar::new(len),
            "{bar:40} {bytes}/{total_bytes}  {msg}  {per_sec}  ETA {eta}",
        ),
        None => (ProgressBar::new_spinner(), "{spinner} {bytes} read  {msg}"),
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Where the jobs go: a queue, or an SNS topic that fans them out.
enum Sender {
    Queue(Producer),
    Topic(idemq::topic::TopicProducer),
}

impl Sender {
    async fn send_batch(
        &self,
        jobs: Vec<Job>,
    ) -> Vec<(String, Result<String, idemq::producer::SendError>)> {
        match self {
            Self::Queue(p) => p.send_batch(jobs).await,
            Self::Topic(t) => t.send_batch(jobs).await,
        }
    }
}

/// What the reader thread hands over: a parsed line and the input bytes
/// it took, or a read error.
type Read = Result<(Option<Line>, usize), String>;

pub async fn run(args: SendArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    if let Some(rate) = args.rate
        && let Err(e) = check_rate(rate)
    {
        return crate::usage_error(&e);
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
    let (input, total) = match open_input(args.file.as_ref()) {
        Ok(i) => i,
        Err(e) => return crate::usage_error(&e),
    };
    if args.job_id_pointer.is_none() {
        eprintln!(
            "warning: no --job-id-pointer: job ids are generated, so sending this input again \
             would not be recognised as the same jobs"
        );
    }
    let producer = match (&args.topic_arn, &args.queue_url) {
        (Some(topic), _) => Sender::Topic(idemq::topic::TopicProducer::new(sdk, topic)),
        (None, Some(queue)) => match Producer::new(sdk, queue).await {
            Ok(p) => Sender::Queue(p),
            Err(e) => return crate::usage_error(&e.to_string()),
        },
        (None, None) => return crate::usage_error("--queue-url or --topic-arn is required"),
    };

    // A thread reads and parses ahead (stdin and files block), at most
    // READ_AHEAD lines; this task sends what it has as soon as it has it,
    // so a slow producer (a pipe) is sent line by line, not at EOF.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Read>(READ_AHEAD);
    let (id_pointer, group_pointer) = (args.job_id_pointer.clone(), args.group_pointer.clone());
    std::thread::spawn(move || {
        let mut reader = LineReader::new(input, MAX_LINE_BYTES);
        loop {
            let item = match reader.next_line() {
                Ok(None) => return,
                Ok(Some((raw, bytes))) => Ok((
                    to_job(
                        raw,
                        id_pointer.as_deref(),
                        group_pointer.as_deref(),
                        MAX_LINE_BYTES,
                    ),
                    bytes,
                )),
                Err(e) => Err(e.to_string()),
            };
            let stop = item.is_err();
            if tx.blocking_send(item).is_err() || stop {
                return;
            }
        }
    });

    let bar = progress(total);
    // Each failure on stderr as it happens; kept for the JSON summary.
    let mut failures: Vec<(Option<usize>, String)> = Vec::new();
    let mut fail = |line: usize, e: String| {
        bar.suspend(|| eprintln!("failed: line {line}: {e}"));
        if args.json {
            failures.push((Some(line), e));
        }
    };
    let (mut sent, mut failed, mut done) = (0usize, 0usize, 0usize);
    // Paced in chunks: one SendMessageBatch worth when rate-limited, larger
    // chunks (sent 4 batches at a time) when not.
    let chunk = if args.rate.is_some() { 10 } else { 100 };
    let start = Instant::now();
    let mut read_error = None;
    while let Some(first) = rx.recv().await {
        let mut reads = vec![first];
        while reads.len() < chunk
            && let Ok(more) = rx.try_recv()
        {
            reads.push(more);
        }
        let (mut jobs, mut numbers, mut bytes) = (Vec::new(), Vec::new(), 0u64);
        for read in reads {
            match read {
                Ok((line, taken)) => {
                    bytes += taken as u64;
                    match line {
                        Some(Line {
                            number,
                            job: Ok(job),
                        }) => {
                            jobs.push(job);
                            numbers.push(number);
                        }
                        Some(Line {
                            number,
                            job: Err(e),
                        }) => {
                            failed += 1;
                            fail(number, e);
                        }
                        None => {}
                    }
                }
                Err(e) => read_error = Some(e),
            }
        }
        let n = jobs.len();
        if n > 0 {
            for ((_, result), number) in producer.send_batch(jobs).await.into_iter().zip(numbers) {
                match result {
                    Ok(_) => sent += 1,
                    Err(e) => {
                        failed += 1;
                        fail(number, e.to_string());
                    }
                }
            }
        }
        done += n;
        bar.inc(bytes);
        bar.set_message(format!("{sent} sent, {failed} failed"));
        if let Some(rate) = args.rate {
            // check_rate bounds 1/rate; a total past Duration's range just
            // waits as long as a Duration can.
            let due = Duration::try_from_secs_f64(done as f64 / rate).unwrap_or(Duration::MAX);
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    bar.finish_and_clear();
    if let Some(e) = &read_error {
        failed += 1;
        eprintln!("failed: cannot read the rest of the input: {e}");
        failures.push((None, format!("cannot read the rest of the input: {e}")));
    }
    let seconds = start.elapsed().as_secs_f64();
    if args.json {
        let failures: Vec<serde_json::Value> = failures
            .iter()
            .map(|(line, error)| serde_json::json!({"line": line, "error": error}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "sent": sent,
                "failed": failed,
                "seconds": (seconds * 10.0).round() / 10.0,
                "failures": failures,
            })
        );
    } else {
        println!("sent {sent}, failed {failed} ({seconds:.1} s)");
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
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

    /// Yields its chunks one read at a time, then fails: a reader that
    /// needs the whole input first never returns a line.
    struct Trickle(Vec<&'static [u8]>);

    impl std::io::Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("the pipe broke"));
            }
            let chunk = self.0.remove(0);
            let n = chunk.len().min(out.len());
            out[..n].copy_from_slice(&chunk[..n]);
            if n < chunk.len() {
                self.0.insert(0, &chunk[n..]);
            }
            Ok(n)
        }
    }

    #[test]
    fn lines_are_read_one_at_a_time_and_bounded() {
        let input = Trickle(vec![b"{\"id\":1}\r\n{\"id\"", b":2}\n", b"\xff\xfe\n"]);
        let mut r = LineReader::new(BufReader::with_capacity(4, input), 64);
        let text = |number: usize, t: &str| {
            Some((
                RawLine::Text {
                    number,
                    text: t.to_owned(),
                },
                t.len() + if number == 1 { 2 } else { 1 },
            ))
        };
        assert_eq!(r.next_line().unwrap(), text(1, "{\"id\":1}"));
        assert_eq!(r.next_line().unwrap(), text(2, "{\"id\":2}"));
        assert_eq!(
            r.next_line().unwrap(),
            Some((RawLine::NotUtf8 { number: 3 }, 3))
        );
        assert_eq!(r.next_line().unwrap_err().to_string(), "the pipe broke");

        // A line over the limit is read through, not held, and reported;
        // the next line is read as usual; the last needs no end of line.
        let long = format!("{}\nok\nlast", "x".repeat(1000));
        let mut r = LineReader::new(BufReader::with_capacity(16, long.as_bytes()), 10);
        assert_eq!(
            r.next_line().unwrap(),
            Some((RawLine::TooLong { number: 1 }, 1001))
        );
        assert!(
            matches!(r.next_line().unwrap(), Some((RawLine::Text { number: 2, text }, 3)) if text == "ok")
        );
        assert!(
            matches!(r.next_line().unwrap(), Some((RawLine::Text { number: 3, text }, 4)) if text == "last")
        );
        assert_eq!(r.next_line().unwrap(), None);
        // Exactly the limit is fine.
        let mut r = LineReader::new("0123456789\n".as_bytes(), 10);
        assert!(matches!(
            r.next_line().unwrap(),
            Some((RawLine::Text { .. }, 11))
        ));
        let line = to_job(RawLine::TooLong { number: 4 }, None, None, 10).unwrap();
        assert_eq!(
            line.job.unwrap_err(),
            "longer than 10 bytes, the largest SQS message; not read"
        );
    }

    #[test]
    fn rates_whose_interval_is_no_duration_are_refused() {
        assert_eq!(check_rate(4.0), Ok(Duration::from_millis(250)));
        assert!(check_rate(1e-9).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                check_rate(bad)
                    .unwrap_err()
                    .contains("must be a positive number")
            );
        }
        for tiny in [1e-300, f64::MIN_POSITIVE, 1e-20] {
            let err = check_rate(tiny).unwrap_err();
            assert!(err.contains("is too small"), "{err}");
        }
    }

    #[test]
    fn without_a_pointer_ids_are_generated_and_distinct() {
        let lines = parse("{}\n{}\n", None, None);
        let a = &lines[0].job.as_ref().unwrap().id;
        let b = &lines[1].job.as_ref().unwrap().id;
        assert!(a.starts_with("gen-") && a != b);
    }
}
