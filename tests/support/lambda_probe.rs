//! The contract probe: a handler whose jobs say how they end, for testing
//! idemq's Lambda host against a real Runtime API (`cargo lambda watch`,
//! started by `scripts/lambda.sh`; the tests are `tests/lambda_local.rs`).
//!
//! A job is `{"id": "...", "action": "ok" | "transient" | "permanent" |
//! "panic" | "sleep", "ms": 1500}`:
//! - `ok` adds 1 to `n` on the item `probe#<id>` of the idemq table
//!   (`IDEMQ_TABLE`), committed with the dedup marker, so a test can check
//!   that a job took effect exactly once. A stable third of the ids each
//!   commit with idemq's marker item, with a fused marker in a transaction
//!   (`Effect::marked_by` on a `probe-entry#<id>` item), or as one
//!   conditional `PutItem` of `probe#<id>` itself as the marker, so every
//!   commit path runs wherever the probe does;
//! - `transient` / `permanent` fail with that retry intent;
//! - `panic` panics inside the handler;
//! - `sleep` sleeps `ms` milliseconds (default 0), then does what `ok` does;
//! - `big` returns an effect whose item is over DynamoDB's 400 KB limit
//!   (the chaos suite checks it is refused before any write).
//!
//! It is also the worker of the chaos suite (`tests/chaos.rs`), run as
//! local worker processes.
//!
//! It runs through [`idemq::run`] like any idemq function, so under a Lambda
//! Runtime API it is the same code path as a deployed function.
//!
//! ## `PROBE_FUNCTION_TIMEOUT`: a real deadline under `cargo lambda watch`
//! Lambda hands every invocation its deadline (`Lambda-Runtime-Deadline-Ms`,
//! epoch milliseconds: start + the function timeout). `cargo lambda watch`
//! 1.9.2 has no function timeout: it sends the constant `600000`, a time in
//! 1970, which idemq reads as ten minutes from now (src/lambda.rs): too long
//! for the contract tests of a function's timeout. When
//! `PROBE_FUNCTION_TIMEOUT` is set (e.g. `12s`) on a
//! Lambda runtime, the probe puts a loopback relay between the runtime
//! client and the Runtime API that passes everything through unchanged but
//! that header, which it sets to "now + timeout" as each event is handed
//! out: the deadline a function with that timeout would get on Lambda.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::HostError;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::{Handler, JobError, JobMeta};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Ok,
    Transient,
    Permanent,
    Panic,
    Sleep,
    Big,
}

#[derive(Debug, Deserialize)]
pub struct ProbeJob {
    pub id: String,
    pub action: Action,
    #[serde(default)]
    pub ms: Option<u64>,
}

pub struct Probe {
    pub table: String,
}

impl Handler for Probe {
    type Job = ProbeJob;
    type Effect = Effect;

    async fn handle(&self, job: ProbeJob, _meta: JobMeta) -> Result<Effect, JobError> {
        match job.action {
            Action::Ok => {}
            Action::Transient => {
                return Err(JobError::transient(format!(
                    "probe job {} asked for a transient failure",
                    job.id
                )));
            }
            Action::Permanent => {
                return Err(JobError::permanent(format!(
                    "probe job {} asked for a permanent failure",
                    job.id
                )));
            }
            Action::Panic => panic!("probe job {} asked to panic", job.id),
            Action::Sleep => {
                tokio::time::sleep(Duration::from_millis(job.ms.unwrap_or(0))).await;
            }
            Action::Big => {
                let blob = AttributeValue::S("x".repeat(500 * 1024));
                return Ok(Effect::new().with(Write::put(
                    &self.table,
                    Key::string("pk", format!("big#{}", job.id)),
                    [("blob".to_string(), blob)].into(),
                )));
            }
        }
        let key = |prefix: &str| Key::string("pk", format!("{prefix}#{}", job.id));
        // A third of the jobs each (by their id) commit with idemq's marker
        // item, with a fused marker (the job's own `probe-entry#<id>` item,
        // `Effect::marked_by`) in a transaction, or with the count item
        // itself as the fused marker, one conditional PutItem: every
        // scenario runs all three commit paths.
        let count = Write::update(&self.table, key("probe"), "ADD n :one")
            .value(":one", AttributeValue::N("1".into()));
        Ok(match commit_path(&job.id) {
            0 => Effect::new().with(count),
            1 => Effect::new().with(count).marked_by(Write::put(
                &self.table,
                key("probe-entry"),
                Default::default(),
            )),
            _ => Effect::new().marked_by(Write::put(
                &self.table,
                key("probe"),
                [("n".to_string(), AttributeValue::N("1".into()))].into(),
            )),
        })
    }
}

/// How a job commits (0: marker item, 1: fused in a transaction, 2: fused
/// single write): a stable third of the ids each.
fn commit_path(id: &str) -> u32 {
    id.bytes().map(u32::from).sum::<u32>() % 3
}

fn main() -> Result<(), HostError> {
    let timeout = std::env::var("PROBE_FUNCTION_TIMEOUT").ok();
    let runtime_api = std::env::var("AWS_LAMBDA_RUNTIME_API").ok();
    if let (Some(timeout), Some(api)) = (timeout, runtime_api) {
        let timeout = idemq::config::parse_duration("PROBE_FUNCTION_TIMEOUT", &timeout)?;
        let relay = deadline_relay::DeadlineRelay::bind(&api, timeout)?;
        // SAFETY: nothing else runs yet (the relay's thread and the Tokio
        // runtime start below), so no other thread can read the environment
        // while it changes.
        unsafe { std::env::set_var("AWS_LAMBDA_RUNTIME_API", relay.runtime_api()) };
        relay.spawn();
    }
    let probe = Probe {
        table: std::env::var("IDEMQ_TABLE").unwrap_or_default(),
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(idemq::run(probe))
}

/// The loopback relay described in the module docs. Requests go upstream
/// byte for byte; responses are read as HTTP/1.1 messages only so that the
/// deadline header can be found and replaced.
mod deadline_relay {
    use std::io::{self, BufRead, BufReader, Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    const DEADLINE_HEADER: &str = "lambda-runtime-deadline-ms";

    pub struct DeadlineRelay {
        listener: TcpListener,
        /// `host:port` of the real Runtime API.
        upstream: String,
        /// The `AWS_LAMBDA_RUNTIME_API` value that points at the relay.
        runtime_api: String,
        timeout: Duration,
    }

    impl DeadlineRelay {
        /// `runtime_api` is `host:port` (Lambda) or `http://host:port/path`
        /// (`cargo lambda watch`); the relay's address replaces `host:port`.
        pub fn bind(runtime_api: &str, timeout: Duration) -> io::Result<Self> {
            let (scheme, rest) = match runtime_api.split_once("://") {
                Some((scheme, rest)) => (format!("{scheme}://"), rest),
                None => (String::new(), runtime_api),
            };
            let (upstream, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let runtime_api = format!("{scheme}{}{path}", listener.local_addr()?);
            Ok(Self {
                listener,
                upstream: upstream.to_owned(),
                runtime_api,
                timeout,
            })
        }

        pub fn runtime_api(&self) -> &str {
            &self.runtime_api
        }

        /// Serves every connection on its own threads, for the life of the
        /// process (the runtime client keeps one or two connections).
        pub fn spawn(self) {
            std::thread::spawn(move || {
                for client in self.listener.incoming().flatten() {
                    let (upstream, timeout) = (self.upstream.clone(), self.timeout);
                    std::thread::spawn(move || {
                        if let Err(e) = relay(client, &upstream, timeout) {
                            eprintln!("lambda_probe: Runtime API relay: {e}");
                        }
                    });
                }
            });
        }
    }

    fn relay(client: TcpStream, upstream: &str, timeout: Duration) -> io::Result<()> {
        let upstream = TcpStream::connect(upstream)?;
        let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
        std::thread::spawn(move || {
            let _ = io::copy(&mut client_in, &mut upstream_out);
            let _ = upstream_out.shutdown(Shutdown::Write);
        });
        let mut client_out = client;
        let result = responses(&mut BufReader::new(upstream), &mut client_out, timeout);
        let _ = client_out.shutdown(Shutdown::Both);
        result
    }

    /// Copies HTTP/1.1 responses until upstream closes, replacing the
    /// deadline header's value with now + `timeout`.
    fn responses(
        up: &mut BufReader<TcpStream>,
        client: &mut TcpStream,
        timeout: Duration,
    ) -> io::Result<()> {
        loop {
            let mut head = Vec::new();
            let (mut status, mut length, mut chunked) = (0u16, None, false);
            loop {
                let mut line = Vec::new();
                if up.read_until(b'\n', &mut line)? == 0 {
                    return Ok(());
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                if head.is_empty() {
                    status = text
                        .split(' ')
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                } else if text.trim().is_empty() {
                    head.extend_from_slice(&line);
                    break;
                } else if let Some((name, value)) = text.split_once(':') {
                    let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                    match name.as_str() {
                        DEADLINE_HEADER => {
                            let at = SystemTime::now() + timeout;
                            let ms = at
                                .duration_since(UNIX_EPOCH)
                                .unwrap_or_default()
                                .as_millis();
                            head.extend_from_slice(
                                format!("{DEADLINE_HEADER}: {ms}\r\n").as_bytes(),
                            );
                            continue;
                        }
                        "content-length" => length = value.parse::<u64>().ok(),
                        "transfer-encoding" => {
                            chunked = value.to_ascii_lowercase().contains("chunked")
                        }
                        _ => {}
                    }
                }
                head.extend_from_slice(&line);
            }
            client.write_all(&head)?;
            if status / 100 == 1 || status == 204 || status == 304 {
                continue;
            }
            if chunked {
                chunks(up, client)?;
            } else if let Some(n) = length {
                io::copy(&mut up.by_ref().take(n), client)?;
            } else {
                // Neither length nor chunks: the body ends when the connection does.
                io::copy(up, client)?;
                return Ok(());
            }
        }
    }

    fn chunks(up: &mut BufReader<TcpStream>, client: &mut TcpStream) -> io::Result<()> {
        loop {
            let mut line = Vec::new();
            if up.read_until(b'\n', &mut line)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            client.write_all(&line)?;
            let text = String::from_utf8_lossy(&line);
            let size = text.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut trailer = Vec::new();
                    let n = up.read_until(b'\n', &mut trailer)?;
                    client.write_all(&trailer)?;
                    if n == 0 || trailer.trim_ascii().is_empty() {
                        return Ok(());
                    }
                }
            }
            // The chunk and its CRLF.
            io::copy(&mut up.by_ref().take(size + 2), client)?;
        }
    }
}
