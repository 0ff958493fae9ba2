//! A loopback HTTP/1.1 proxy in front of an emulator (or of a Lambda
//! Runtime API) that counts every request by operation, estimates the
//! DynamoDB write units a request is billed, and adds a round-trip delay.
//!
//! Every peer, Rust or Python, reaches DynamoDB and SQS through one of
//! these, so all of them are counted by the same code: one count per HTTP
//! request the emulator receives, SDK retries included.
//!
//! The delay is slept before a request is forwarded, outside the emulator:
//! requests in flight at once wait in parallel, as they would on a network,
//! while moto still serves DynamoDB one request at a time.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};

use crate::http::Message;

/// What one operation cost, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OpCount {
    pub requests: u64,
    /// Answers with a status of 400 or more (a failed condition, a
    /// cancelled transaction, a throttle).
    pub errors: u64,
    /// DynamoDB write request units, from the request's shape (see [`wru`]).
    pub wru: u64,
    /// Time the requests were held back as network delay, in µs, so the
    /// effective round trip is measured rather than assumed.
    pub delayed_us: u64,
}

pub type Counts = BTreeMap<String, OpCount>;

/// `after - before`, per operation.
pub fn diff(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(op, a)| {
            let b = before.get(op).copied().unwrap_or_default();
            let d = OpCount {
                requests: a.requests - b.requests,
                errors: a.errors - b.errors,
                wru: a.wru - b.wru,
                delayed_us: a.delayed_us - b.delayed_us,
            };
            (op.clone(), d)
        })
        .filter(|(_, d)| d.requests > 0)
        .collect()
}

pub fn total(counts: &Counts) -> OpCount {
    counts.values().fold(OpCount::default(), |acc, c| OpCount {
        requests: acc.requests + c.requests,
        errors: acc.errors + c.errors,
        wru: acc.wru + c.wru,
        delayed_us: acc.delayed_us + c.delayed_us,
    })
}

pub struct Proxy {
    addr: SocketAddr,
    upstream: String,
    delay_us: AtomicU64,
    counts: Mutex<Counts>,
    first_request: OnceLock<Instant>,
    /// When on, each request's (arrival, answer) times, for the round trips
    /// on a batch's critical path (see [`depth`]).
    timeline: Mutex<Option<Vec<(Instant, Instant)>>>,
    /// For a Lambda Runtime API: replace `Lambda-Runtime-Deadline-Ms` with
    /// now + this (`cargo lambda watch` sends a constant in 1970).
    deadline: Option<Duration>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: &str, deadline: Option<Duration>) -> io::Result<Arc<Self>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy = Arc::new(Self {
            addr: listener.local_addr()?,
            upstream: upstream.to_owned(),
            delay_us: AtomicU64::new(0),
            counts: Mutex::default(),
            first_request: OnceLock::new(),
            timeline: Mutex::new(None),
            deadline,
        });
        let p = Arc::clone(&proxy);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let p = Arc::clone(&p);
                tokio::spawn(async move {
                    // A client going away mid-request is not our concern.
                    let _ = p.serve(client).await;
                });
            }
        });
        Ok(proxy)
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn set_delay(&self, d: Duration) {
        self.delay_us.store(d.as_micros() as u64, Ordering::Relaxed);
    }

    pub fn counts(&self) -> Counts {
        self.counts.lock().unwrap().clone()
    }

    pub fn first_request(&self) -> Option<Instant> {
        self.first_request.get().copied()
    }

    /// Starts noting every request's arrival and answer times.
    pub fn record(&self) {
        *self.timeline.lock().unwrap() = Some(Vec::new());
    }

    /// Stops noting and returns what was noted.
    pub fn take_timeline(&self) -> Vec<(Instant, Instant)> {
        self.timeline.lock().unwrap().take().unwrap_or_default()
    }

    async fn serve(&self, client: TcpStream) -> io::Result<()> {
        client.set_nodelay(true)?;
        let (cr, mut cw) = client.into_split();
        let mut cr = BufReader::new(cr);
        let mut upstream: Option<(
            BufReader<tokio::net::tcp::OwnedReadHalf>,
            tokio::net::tcp::OwnedWriteHalf,
        )> = None;
        while let Some(req) = Message::read(&mut cr, false).await? {
            let arrived = Instant::now();
            self.first_request.get_or_init(|| arrived);
            let op = operation(&req);
            let wru = wru(&op, &req.body);
            let delay = Duration::from_micros(self.delay_us.load(Ordering::Relaxed));
            let held = Instant::now();
            if !delay.is_zero() {
                // A thread's sleep, not tokio's: tokio's timer wakes on a
                // millisecond tick (a 5 ms sleep took ~6.2), a thread
                // within ~0.1 ms.
                let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
            }
            let held = held.elapsed();
            // An idle upstream connection may have been closed: one retry on
            // a fresh one (the emulators never saw the first attempt then).
            let mut resp = None;
            for _ in 0..2 {
                if upstream.is_none() {
                    let s = TcpStream::connect(&self.upstream).await?;
                    s.set_nodelay(true)?;
                    let (r, w) = s.into_split();
                    upstream = Some((BufReader::new(r), w));
                }
                let (ur, uw) = upstream.as_mut().expect("connected above");
                if req.write(uw).await.is_ok()
                    && let Ok(Some(r)) = Message::read(ur, true).await
                {
                    resp = Some(r);
                    break;
                }
                upstream = None;
            }
            let Some(mut resp) = resp else {
                return Err(io::Error::other(format!(
                    "{} did not answer",
                    self.upstream
                )));
            };
            {
                let mut counts = self.counts.lock().unwrap();
                let c = counts.entry(op).or_default();
                c.requests += 1;
                c.wru += wru;
                c.delayed_us += held.as_micros() as u64;
                if resp.status() >= 400 {
                    c.errors += 1;
                }
            }
            if let Some(timeout) = self.deadline
                && resp.header("lambda-runtime-deadline-ms").is_some()
            {
                let at = SystemTime::now() + timeout;
                let ms = at
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_millis();
                resp.set_header("lambda-runtime-deadline-ms", ms.to_string());
            }
            if let Some(t) = self.timeline.lock().unwrap().as_mut() {
                t.push((arrived, Instant::now()));
            }
            let closes = resp.closes();
            if closes {
                upstream = None;
                resp.set_header("connection", "close");
            }
            resp.write(&mut cw).await?;
            if closes || req.closes() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The round trips on the critical path of the requests made within
/// `window`: the longest chain of requests each sent after the previous one
/// was answered. Jobs run one after another give the batch size (three per
/// job for Powertools); jobs run all at once give 1, however long the
/// emulator kept each of them waiting.
pub fn depth(timeline: &[(Instant, Instant)], window: (Instant, Instant)) -> u64 {
    let mut reqs: Vec<(Instant, Instant)> = timeline
        .iter()
        .copied()
        .filter(|(a, b)| *a >= window.0 && *b <= window.1)
        .collect();
    reqs.sort_by_key(|r| r.1);
    let mut depth: Vec<u64> = Vec::with_capacity(reqs.len());
    for (i, r) in reqs.iter().enumerate() {
        let before = (0..i)
            .filter(|&j| reqs[j].1 <= r.0)
            .map(|j| depth[j])
            .max()
            .unwrap_or(0);
        depth.push(before + 1);
    }
    depth.into_iter().max().unwrap_or(0)
}

/// How long within `window` at least one request was out (sent and not yet
/// answered): the batch's time in DynamoDB, network delay included. The
/// rest of the batch's duration is the function's own work and the Runtime
/// API.
pub fn busy(timeline: &[(Instant, Instant)], window: (Instant, Instant)) -> Duration {
    let mut reqs: Vec<(Instant, Instant)> = timeline
        .iter()
        .copied()
        .filter(|(a, b)| *a >= window.0 && *b <= window.1)
        .collect();
    reqs.sort_by_key(|r| r.0);
    let mut total = Duration::ZERO;
    let mut current: Option<(Instant, Instant)> = None;
    for (a, b) in reqs {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e - s;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = current {
        total += e - s;
    }
    total
}

/// `PutItem`, `ReceiveMessage`, …: from the AWS JSON protocol's
/// `X-Amz-Target`, else from a query-protocol `Action=`, else the method
/// and the path's last segment (the Lambda Runtime API).
fn operation(req: &Message) -> String {
    if let Some(t) = req.header("x-amz-target") {
        return t.rsplit('.').next().unwrap_or(t).to_owned();
    }
    let body = String::from_utf8_lossy(&req.body);
    if let Some(a) = body.split('&').find_map(|kv| kv.strip_prefix("Action=")) {
        return a.to_owned();
    }
    let (method, path) = req.target();
    format!("{method} {}", path.rsplit('/').next().unwrap_or(path))
}

/// Write request units a DynamoDB request is billed, from its shape: one
/// per started KB of each item written by a standard write, two in a
/// transaction (DynamoDB prepares and commits every item). A write is
/// billed whether or not its condition holds, and a cancelled transaction
/// is billed too. An update's size is estimated from its key and values
/// (DynamoDB bills the larger of the item before and after); every item in
/// this benchmark is well under 1 KB, so each write is one unit.
pub fn wru(op: &str, body: &[u8]) -> u64 {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return 0;
    };
    match op {
        "PutItem" => units(item_size(&v["Item"])),
        "UpdateItem" => units(item_size(&v["Key"]) + item_size(&v["ExpressionAttributeValues"])),
        "DeleteItem" => 1,
        "BatchWriteItem" => v["RequestItems"]
            .as_object()
            .map(|tables| {
                tables
                    .values()
                    .flat_map(|reqs| reqs.as_array().cloned().unwrap_or_default())
                    .map(|r| match r.get("PutRequest") {
                        Some(p) => units(item_size(&p["Item"])),
                        None => 1,
                    })
                    .sum()
            })
            .unwrap_or(0),
        "TransactWriteItems" => v["TransactItems"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| {
                        let size = if let Some(p) = i.get("Put") {
                            item_size(&p["Item"])
                        } else if let Some(u) = i.get("Update") {
                            item_size(&u["Key"]) + item_size(&u["ExpressionAttributeValues"])
                        } else {
                            0
                        };
                        2 * units(size)
                    })
                    .sum()
            })
            .unwrap_or(0),
        _ => 0,
    }
}

fn units(bytes: usize) -> u64 {
    bytes.div_ceil(1024).max(1) as u64
}

/// DynamoDB's item size: attribute names plus values (numbers about one
/// byte per two digits, binary as decoded).
fn item_size(attrs: &Value) -> usize {
    attrs
        .as_object()
        .map(|m| m.iter().map(|(k, v)| k.len() + value_size(v)).sum())
        .unwrap_or(0)
}

fn value_size(v: &Value) -> usize {
    let Some((ty, inner)) = v.as_object().and_then(|m| m.iter().next()) else {
        return 0;
    };
    let s = inner.as_str().unwrap_or("");
    match ty.as_str() {
        "S" => s.len(),
        "N" => s.len().div_ceil(2) + 1,
        "B" => s.len() * 3 / 4,
        "BOOL" | "NULL" => 1,
        "M" => 3 + item_size(inner),
        "L" => {
            3 + inner
                .as_array()
                .map(|l| l.iter().map(|e| 1 + value_size(e)).sum::<usize>())
                .unwrap_or(0)
        }
        _ => inner
            .as_array()
            .map(|l| l.iter().map(|e| e.as_str().unwrap_or("").len()).sum())
            .unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_units_follow_the_request_shape() {
        let put = br#"{"Item":{"pk":{"S":"a"}}}"#;
        assert_eq!(wru("PutItem", put), 1);
        let tx = br#"{"TransactItems":[{"Put":{"Item":{"pk":{"S":"a"}}}},{"Update":{"Key":{"pk":{"S":"b"}}}}]}"#;
        assert_eq!(wru("TransactWriteItems", tx), 4);
        let big = format!(r#"{{"Item":{{"pk":{{"S":"{}"}}}}}}"#, "x".repeat(1500));
        assert_eq!(wru("PutItem", big.as_bytes()), 2);
        assert_eq!(wru("GetItem", put), 0);
    }

    #[test]
    fn depth_counts_round_trips_waited_in_turn() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let window = (at(0), at(100));
        // Three requests at once, each answered after a different wait: 1.
        let parallel = [(at(1), at(10)), (at(1), at(20)), (at(2), at(30))];
        assert_eq!(depth(&parallel, window), 1);
        // One after another: 3; outside the window: not counted.
        let serial = [
            (at(1), at(10)),
            (at(11), at(20)),
            (at(21), at(30)),
            (at(90), at(120)),
        ];
        assert_eq!(depth(&serial, window), 3);
        assert_eq!(busy(&parallel, window), Duration::from_millis(29));
        assert_eq!(busy(&serial, window), Duration::from_millis(27));
    }
}
