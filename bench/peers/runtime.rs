//! A Lambda Runtime API for one execution environment, and the process it
//! runs: what the benchmark uses in place of the Lambda service.
//!
//! Each [`Instance`] is one function process (the release `bootstrap`, or
//! Python running the Powertools handler) with a Runtime API of its own on
//! a loopback port. The harness hands it one event at a time, as Lambda
//! does, and measures what Lambda reports:
//! - **init**: from `exec` to the runtime's first `GET …/invocation/next`
//!   (Lambda's Init Duration ends there too);
//! - **duration**: from the event leaving `…/next` to the response arriving
//!   on `…/response` (Lambda's billed Duration);
//! - **max RSS**: the process's `VmHWM`.

use std::collections::HashMap;
use std::io;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::http::Message;

/// The function timeout the emulator hands out as each invocation's deadline.
pub const FUNCTION_TIMEOUT: Duration = Duration::from_secs(120);

type Answer = Result<Vec<u8>, String>;
/// Where an invocation's answer and duration go.
type Reply = oneshot::Sender<(Answer, Duration)>;

struct Invocation {
    id: String,
    event: Vec<u8>,
    done: Reply,
}

#[derive(Default)]
struct State {
    first_next: OnceLock<Instant>,
    running: Mutex<HashMap<String, (Instant, Reply)>>,
    init_error: Mutex<Option<String>>,
}

/// One execution environment: a process and its Runtime API.
pub struct Instance {
    pub label: String,
    child: Child,
    spawned_at: Instant,
    queue: mpsc::Sender<Invocation>,
    state: Arc<State>,
    seq: u64,
}

impl Instance {
    /// Starts `cmd` with `AWS_LAMBDA_RUNTIME_API` pointing at a new Runtime
    /// API and the other variables Lambda sets.
    pub async fn spawn(label: &str, mut cmd: Command, log: &std::path::Path) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let api = listener.local_addr()?.to_string();
        let (tx, rx) = mpsc::channel::<Invocation>(1);
        let state = Arc::new(State::default());
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                while let Ok((conn, _)) = listener.accept().await {
                    let (state, rx) = (Arc::clone(&state), Arc::clone(&rx));
                    tokio::spawn(async move {
                        let _ = serve(conn, state, rx).await;
                    });
                }
            });
        }
        cmd.env("AWS_LAMBDA_RUNTIME_API", &api)
            .env("AWS_LAMBDA_FUNCTION_NAME", label)
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{label}"))
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
            .stdin(Stdio::null())
            // EMF lines and logs: what CloudWatch would receive.
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log)?);
        let spawned_at = Instant::now();
        let child = cmd.spawn()?;
        Ok(Self {
            label: label.to_owned(),
            child,
            spawned_at,
            queue: tx,
            state,
            seq: 0,
        })
    }

    /// Waits for the runtime's first `…/next`: the init duration.
    pub async fn ready(&mut self, within: Duration) -> io::Result<Duration> {
        let until = Instant::now() + within;
        loop {
            if let Some(at) = self.state.first_next.get() {
                return Ok(at.duration_since(self.spawned_at));
            }
            if let Some(e) = self.state.init_error.lock().unwrap().clone() {
                return Err(io::Error::other(format!("{}: init error: {e}", self.label)));
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{} exited during init: {status}",
                    self.label
                )));
            }
            if Instant::now() > until {
                return Err(io::Error::other(format!(
                    "{} not ready within {within:?}",
                    self.label
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// One invocation: the function's answer and its duration.
    pub async fn invoke(&mut self, event: Vec<u8>) -> io::Result<(Answer, Duration)> {
        self.seq += 1;
        let (done, answer) = oneshot::channel();
        let inv = Invocation {
            id: format!("{}-{:08}", self.label, self.seq),
            event,
            done,
        };
        self.queue
            .send(inv)
            .await
            .map_err(|_| io::Error::other("runtime API gone"))?;
        match tokio::time::timeout(FUNCTION_TIMEOUT, answer).await {
            Ok(Ok(a)) => Ok(a),
            _ => Err(io::Error::other(format!(
                "{}: no answer (exited: {:?})",
                self.label,
                self.child.try_wait()?
            ))),
        }
    }

    /// Peak resident set (`VmHWM`) so far, in bytes.
    pub fn max_rss(&self) -> Option<u64> {
        peak_rss(self.child.id())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Only the process this instance started, by its pid.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

async fn serve(
    conn: TcpStream,
    state: Arc<State>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Invocation>>>,
) -> io::Result<()> {
    conn.set_nodelay(true)?;
    let (r, mut w) = conn.into_split();
    let mut r = BufReader::new(r);
    while let Some(req) = Message::read(&mut r, false).await? {
        let (method, path) = req.target();
        let path = path.to_owned();
        let answer = if method == "GET" && path.ends_with("/runtime/invocation/next") {
            state.first_next.get_or_init(Instant::now);
            let Some(inv) = rx.lock().await.recv().await else {
                return Ok(());
            };
            let deadline = SystemTime::now() + FUNCTION_TIMEOUT;
            let ms = deadline
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            state
                .running
                .lock()
                .unwrap()
                .insert(inv.id.clone(), (Instant::now(), inv.done));
            Message::response(200, "OK")
                .with_header("content-type", "application/json")
                .with_header("lambda-runtime-aws-request-id", inv.id)
                .with_header("lambda-runtime-deadline-ms", ms.to_string())
                .with_header(
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:000000000000:function:bench",
                )
                .with_header(
                    "lambda-runtime-trace-id",
                    "Root=1-00000000-000000000000000000000000",
                )
                .with_body(inv.event)
        } else if method == "POST" && path.contains("/runtime/invocation/") {
            let mut parts = path.rsplit('/');
            let kind = parts.next().unwrap_or("");
            let id = parts.next().unwrap_or("").to_owned();
            if let Some((started, done)) = state.running.lock().unwrap().remove(&id) {
                let took = started.elapsed();
                let answer = if kind == "response" {
                    Ok(req.body.clone())
                } else {
                    Err(String::from_utf8_lossy(&req.body).into_owned())
                };
                let _ = done.send((answer, took));
            }
            Message::response(202, "Accepted").with_body(&b"{\"status\":\"OK\"}"[..])
        } else if method == "POST" && path.ends_with("/runtime/init/error") {
            *state.init_error.lock().unwrap() =
                Some(String::from_utf8_lossy(&req.body).into_owned());
            Message::response(202, "Accepted").with_body(&b"{\"status\":\"OK\"}"[..])
        } else {
            Message::response(404, "Not Found")
        };
        answer.write(&mut w).await?;
    }
    Ok(())
}
