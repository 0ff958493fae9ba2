//! Lambda's SQS event source mapping and the function's host: receive a
//! batch, invoke the real batch code with the invocation's deadline, read
//! the partial batch response and delete the rest, as Lambda does
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>):
//! - a function that fails, crashes or outlives its timeout fails the
//!   *whole* batch: nothing is deleted, every message comes back when its
//!   visibility timeout ends, its receive count up;
//! - with `ReportBatchItemFailures`, a response naming an empty or unknown
//!   `itemIdentifier` fails the whole batch too;
//! - otherwise every message not named is deleted.
//!
//! From a FIFO queue, "each batch may contain messages from more than one
//! message group, but the order of the messages is maintained. If your
//! function returns an error, the function attempts all retries on the
//! affected messages before Lambda receives additional messages from the
//! same group"
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html>):
//! the mapping receives as any consumer does, and the queue's FIFO receive
//! (tests/sim/fifo.rs) holds back every group with a message in flight, so
//! one batch at a time holds a group. Lambda does nothing more with a
//! partial batch response on FIFO: "your function should stop processing
//! messages after the first failure and return all failed and unprocessed
//! messages in batchItemFailures"
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>),
//! so it still deletes every message the response does not name, whichever
//! group it is in: keeping a group's order is the function's job (idemq's
//! FIFO rule, src/batch.rs), and the checker's order rule watches it.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsMessage};
use idemq::Handler;
use idemq::batch::{Message, Processor};
use idemq::queue::QueueInfo;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::World;
use super::check::Event;
use super::faults::Invocation;
use super::sqs::{self, Msg};

/// Lambda's longest batching window for SQS, which lambda.rs counts as time
/// already in flight.
const MAX_BATCHING_WINDOW: Duration = Duration::from_secs(300);

/// The event source mapping's settings.
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub batch_size: usize,
    pub function_timeout: Duration,
    /// Execution environments that may run at once.
    pub concurrency: usize,
}

/// A record of an SQS event as Lambda sends it: every system attribute,
/// and the message attributes with lower-case field names
/// (<https://docs.aws.amazon.com/lambda/latest/dg/with-sqs.html>, "Example
/// standard queue message event").
pub fn event_record(m: &Msg, queue: &str) -> SqsMessage {
    let wire = sqs::to_wire(m, &["All".to_owned()], &["All".to_owned()]);
    let attributes: serde_json::Map<String, Value> = m
        .attributes
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!({
                    "stringValue": v["StringValue"], "dataType": v["DataType"],
                    "stringListValues": [], "binaryListValues": []
                }),
            )
        })
        .collect();
    let first = m
        .sent_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
        .to_string();
    let mut system = wire["Attributes"].clone();
    system["ApproximateFirstReceiveTimestamp"] = Value::String(first);
    serde_json::from_value(json!({
        "messageId": m.id,
        "receiptHandle": m.handle,
        "body": m.body,
        "attributes": system,
        "messageAttributes": attributes,
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": sqs::arn(queue),
        "awsRegion": sqs::REGION,
    }))
    .expect("an SQS event record")
}

/// One execution environment: polls (as the mapping does for it) and
/// invokes until `end`; then, nothing new being sent, drains the queue
/// until it is empty or `drain_until` (so that what the load left behind is
/// seen through to its end: applied, dead-lettered, or expired).
pub async fn environment<H: Handler>(
    world: &Arc<Mutex<World>>,
    processor: &Processor<H>,
    queue: &QueueInfo,
    mapping: Mapping,
    (end, drain_until): (Instant, Instant),
    invocations: &Mutex<u64>,
) {
    let name = queue.name.clone();
    loop {
        let now = Instant::now();
        let empty = world.lock().expect("world").sqs.queues[&name]
            .messages
            .is_empty();
        if now >= drain_until || (now >= end && empty) {
            return;
        }
        let changed = Arc::clone(&world.lock().expect("world").changed);
        let notified = changed.notified();
        let (batch, next) = {
            let mut w = world.lock().expect("world");
            let w = &mut *w;
            let batch = w.sqs.take_visible(
                &name,
                mapping.batch_size,
                queue.visibility_timeout,
                idemq::testing::clock::now(),
                &mut w.history,
            );
            let next = w.sqs.queues[&name]
                .messages
                .values()
                .map(|m| m.visible_at)
                .filter(|t| *t > Instant::now())
                .min();
            (batch, next)
        };
        if batch.is_empty() {
            // Long polling: back when a message is sent or becomes visible.
            let stop = if Instant::now() < end {
                end
            } else {
                drain_until
            };
            let until = next
                .unwrap_or(stop)
                .min(stop)
                .min(Instant::now() + Duration::from_secs(3600));
            let _ = tokio::time::timeout_at(until, notified).await;
            continue;
        }
        let n = {
            let mut i = invocations.lock().expect("invocations");
            *i += 1;
            *i
        };
        invoke(world, processor, queue, mapping, &batch, n).await;
    }
}

/// One invocation with `batch`, and what Lambda then does with the answer.
async fn invoke<H: Handler>(
    world: &Arc<Mutex<World>>,
    processor: &Processor<H>,
    queue: &QueueInfo,
    mapping: Mapping,
    batch: &[Msg],
    n: u64,
) {
    let started = Instant::now();
    let deadline = started + mapping.function_timeout;
    let fate = world
        .lock()
        .expect("world")
        .faults
        .invocation(n, mapping.function_timeout);
    let ids: Vec<&str> = batch.iter().map(|m| m.id.as_str()).collect();
    world.lock().expect("world").trace(format!(
        "lambda: invocation {n} with {} messages ({fate:?})",
        ids.len()
    ));
    // The host's own conversion, as src/lambda.rs does it.
    let received_at = Instant::now()
        .checked_sub(MAX_BATCHING_WINDOW)
        .unwrap_or_else(Instant::now);
    let messages: Vec<Message> = batch
        .iter()
        .map(|m| {
            idemq::lambda::from_event(&event_record(m, &queue.name), received_at).expect("record")
        })
        .collect();
    let work = processor.process(queue, &messages, deadline);
    let report = match fate {
        Invocation::KilledAfter(after) => {
            // The future is dropped at its next await point past `after`.
            let _ = tokio::time::timeout(after, work).await;
            world
                .lock()
                .expect("world")
                .trace(format!("lambda: invocation {n} killed"));
            return;
        }
        _ => match tokio::time::timeout_at(deadline, work).await {
            Ok(report) => report,
            Err(_) => {
                let mut w = world.lock().expect("world");
                w.history.push(Event::Violation(format!(
                    "invocation {n}: the function outlived its timeout: the whole batch fails"
                )));
                w.trace(format!("lambda: invocation {n} timed out"));
                return;
            }
        },
    };
    if fate == Invocation::CrashesAfter {
        world
            .lock()
            .expect("world")
            .trace(format!("lambda: invocation {n} crashed before answering"));
        return;
    }
    // The response exactly as src/lambda.rs builds it, read back as Lambda
    // reads its JSON.
    let mut response = SqsBatchResponse::default();
    for id in report.failed {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
    }
    let json = serde_json::to_value(&response).expect("response JSON");
    let named: Vec<String> = json["batchItemFailures"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| f["itemIdentifier"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut w = world.lock().expect("world");
    if let Some(bad) = named.iter().find(|id| !ids.contains(&id.as_str())) {
        w.history.push(Event::Violation(format!(
            "invocation {n}: batch response names {bad:?}, not a message of the batch: the whole batch fails"
        )));
        return;
    }
    let failed: BTreeSet<&str> = named.iter().map(String::as_str).collect();
    w.trace(format!(
        "lambda: invocation {n} answered after {:?}: {} failed, deleting {}",
        Instant::now() - started,
        failed.len(),
        batch.len() - failed.len()
    ));
    let w = &mut *w;
    for m in batch {
        if !failed.contains(m.id.as_str()) {
            let handle = m.handle.clone().unwrap_or_default();
            let _ = w.sqs.delete(&queue.name, &handle, &mut w.history, "lambda");
        }
    }
}
