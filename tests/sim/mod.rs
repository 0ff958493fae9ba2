//! A deterministic simulation of SQS, DynamoDB and Lambda's SQS event source
//! mapping, under the real idemq code and the real SDK clients. See
//! `docs/reliability.md`, "The simulation".
//!
//! - [`sqs`], [`dynamodb`]: the services, as a client observes them;
//! - [`net`]: the SDK's HTTP connector in front of them, where requests are
//!   delayed, lost or throttled;
//! - [`lambda`]: the event source mapping and the function's host;
//! - [`worker`]: idemq's local worker hosts, in Lambda's place;
//! - [`faults`]: every fault, drawn from the seed;
//! - [`check`]: the history and the checker over it;
//! - [`shapes`]: the shapes of the handler's effects (idemq's commit paths);
//! - [`run`]: one run of a seed, from set-up to verdict;
//! - [`fanout`]: two consumers on one table, fed by a fan-out;
//! - [`followups`]: parents redelivered after their children's markers
//!   expired;
//! - [`speed`]: `make bench-sim`, the runs' rate against the SDK's floor.

#![allow(dead_code)]

pub mod check;
pub mod dynamodb;
pub mod fanout;
pub mod faults;
pub mod fifo;
pub mod followups;
pub mod lambda;
pub mod net;
pub mod run;
pub mod shapes;
pub mod speed;
pub mod sqs;
pub mod worker;

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use check::History;
use faults::Faults;
use net::Reply;

/// The runtime a run lives on: one thread, tokio's clock paused (it jumps
/// to the next timer whenever every task waits), so a simulated day takes
/// no wall time waiting.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// Runs one simulation to its end on a paused runtime, then gives idemq's
/// clock back to the wall (the simulation set it).
pub fn run_paused<F: std::future::Future>(simulation: F) -> F::Output {
    let out = paused_runtime().block_on(simulation);
    idemq::testing::clock::real();
    out
}

/// Everything the services hold, behind one lock (one thread runs a seed).
pub struct World {
    pub sqs: sqs::Sqs,
    pub ddb: dynamodb::Ddb,
    pub faults: Faults,
    pub history: History,
    /// Woken on every send and visibility change: pollers wait on it.
    pub changed: Arc<Notify>,
    pub started: Instant,
    pub tracing: bool,
    pub trace: Vec<String>,
    /// Handler attempts per job (its `"k"`).
    pub attempts: std::collections::BTreeMap<String, u32>,
    /// Fixed duration of a successful handler attempt (an edge test's).
    pub handler_time: Option<std::time::Duration>,
}

impl World {
    pub fn new(faults: Faults, tracing: bool) -> Self {
        Self {
            sqs: sqs::Sqs::default(),
            ddb: dynamodb::Ddb::default(),
            faults,
            history: History::default(),
            changed: Arc::new(Notify::new()),
            started: Instant::now(),
            tracing,
            trace: Vec::new(),
            attempts: std::collections::BTreeMap::new(),
            handler_time: None,
        }
    }

    /// One request, applied at this instant.
    pub fn apply(&mut self, service: &str, op: &str, body: &Value) -> Reply {
        let wall = idemq::testing::clock::now();
        let moves = self.sqs.moves;
        let reply = if service == "dynamodb" {
            self.ddb.apply(op, body, wall, &mut self.history)
        } else {
            self.sqs.apply(op, body, wall, &mut self.history)
        };
        if service == "sqs"
            && (op.starts_with("Send")
                || op.starts_with("ChangeMessageVisibility")
                || self.sqs.moves != moves)
        {
            self.changed.notify_waiters();
        }
        if self.tracing {
            let outcome = match &reply {
                Reply::Ok(_) => "ok".to_owned(),
                Reply::Error { kind, .. } => kind.rsplit('#').next().unwrap_or_default().to_owned(),
            };
            let what = summary(op, body);
            self.trace(format!("{service}: {op} {what} -> {outcome}"));
        }
        reply
    }

    pub fn trace(&mut self, line: String) {
        if self.tracing {
            let t = Instant::now() - self.started;
            self.trace
                .push(format!("[{:>9.3}s] {line}", t.as_secs_f64()));
        }
    }
}

/// A short, payload-free description of a request for the trace.
fn summary(op: &str, body: &Value) -> String {
    let jobs = |v: &Value| -> String {
        let mut ks: Vec<String> = Vec::new();
        let mut walk = vec![v];
        while let Some(x) = walk.pop() {
            match x {
                Value::String(s) => {
                    if let Some(k) = check::job_of(s) {
                        ks.push(k);
                    } else if let Some(rest) = s.strip_prefix("count#") {
                        ks.push(rest.to_owned());
                    }
                }
                Value::Array(a) => walk.extend(a.iter().rev()),
                Value::Object(m) => walk.extend(m.values().rev()),
                _ => {}
            }
        }
        ks.dedup();
        ks.join(",")
    };
    match op {
        "ReceiveMessage" | "GetQueueAttributes" | "GetQueueUrl" => String::new(),
        _ => jobs(body),
    }
}
