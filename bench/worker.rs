//! Worker benchmark on the local stack: idemq's worker against a plain
//! consumer doing the same writes without idempotency, in the same run.
//!
//! Prints per-job DynamoDB requests, SQS requests per batch, and jobs/s
//! with the ratio to the plain consumer, for idemq with its defaults (the
//! ledger declares that the read before its handler buys nothing: the
//! commit alone, exactly 1 request per job), for a handler that keeps the
//! look-up (one `BatchGetItem` per batch: 1.1 at batch 10), and for the
//! look-up that also reads legacy markers (the same requests, twice the
//! keys).
//! Requests are counted by an SDK interceptor, one per HTTP attempt, so SDK
//! retries count too.
//!
//! ```sh
//! make bench-worker            # or: cargo run --release --example bench_worker -- 2000
//! ```

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use futures_util::{StreamExt, stream};
use idemq::Host;
use idemq::config::BatchConfig;
use idemq::config::LegacyMarkers;
use idemq::config::{IdempotencyConfig, TableLayout};
use idemq::init::{InitSpec, init};
use idemq::worker::{WorkerArgs, serve};
use idemq::{Handler, JobError, JobMeta, LookUp};

#[allow(dead_code)]
#[path = "../examples/ledger.rs"]
mod ledger;

#[allow(dead_code)]
#[path = "common.rs"]
mod common;
use common::{Clients, clients, sum};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The ledger, declaring what the look-up before it buys as the run says.
struct Declared {
    ledger: ledger::Ledger,
    look_up: LookUp,
}

impl Handler for Declared {
    type Job = ledger::Transfer;
    type Effect = idemq::store::dynamodb::Effect;

    fn handle(
        &self,
        job: ledger::Transfer,
        meta: JobMeta,
    ) -> impl Future<Output = Result<idemq::store::dynamodb::Effect, JobError>> + Send {
        self.ledger.handle(job, meta)
    }

    fn look_up(&self) -> LookUp {
        self.look_up
    }
}

async fn fresh(c: &Clients, name: &str) -> Result<idemq::init::InitReport, Error> {
    let spec = InitSpec {
        queue_name: name.to_owned(),
        fifo: false,
        max_receive_count: 6,
        visibility_timeout: Duration::from_secs(60),
        layout: TableLayout::new(name),
        marker_ttl: idemq::config::DEFAULT_MARKER_TTL,
    };
    Ok(init(&c.sqs, &c.ddb, &spec).await?)
}

async fn send_jobs(c: &Clients, url: &str, n: usize) -> Result<(), Error> {
    let bodies: Vec<(String, String)> = (0..n)
        .map(|i| {
            let id = format!("t-{i}");
            let body = format!(
                r#"{{"transfer_id":"{id}","account":"acct-{}","amount":{}}}"#,
                i % 50,
                i % 90 + 1
            );
            (id, body)
        })
        .collect();
    for chunk in bodies.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, (id, body))| {
                let attr = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(id)
                    .build()?;
                Ok(SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_attributes(idemq::job::JOB_ID_ATTRIBUTE, attr)
                    .build()?)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        c.sqs
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }
    Ok(())
}

/// The ceiling: receive, apply the same two writes in one transaction
/// with no marker, delete. No dedup, no failure handling.
async fn plain_consumer(
    c: &Clients,
    url: &str,
    table: &str,
    n: usize,
    concurrency: usize,
) -> Result<u64, Error> {
    let mut done = 0usize;
    let mut batches = 0;
    while done < n {
        let out = c
            .sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await?;
        if out.messages().is_empty() {
            continue;
        }
        batches += 1;
        let results: Vec<Result<String, Error>> = stream::iter(out.messages().to_vec())
            .map(|m| async move {
                let t: ledger::Transfer = serde_json::from_str(m.body().unwrap_or_default())?;
                let amount = AttributeValue::N(t.amount.to_string());
                let update = Update::builder()
                    .table_name(table)
                    .key("pk", AttributeValue::S(format!("account#{}", t.account)))
                    .update_expression("ADD balance :amount")
                    .expression_attribute_values(":amount", amount.clone())
                    .build()?;
                let put = Put::builder()
                    .table_name(table)
                    .item("pk", AttributeValue::S(format!("entry#{}", t.transfer_id)))
                    .item("account", AttributeValue::S(t.account))
                    .item("amount", amount)
                    .build()?;
                c.ddb
                    .transact_write_items()
                    .transact_items(TransactWriteItem::builder().update(update).build())
                    .transact_items(TransactWriteItem::builder().put(put).build())
                    .send()
                    .await?;
                Ok(m.receipt_handle().unwrap_or_default().to_owned())
            })
            .buffer_unordered(concurrency)
            .collect()
            .await;
        let handles: Vec<String> = results.into_iter().collect::<Result<_, _>>()?;
        let entries = handles
            .iter()
            .enumerate()
            .map(|(i, h)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(h)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        c.sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await?;
        done += handles.len();
    }
    Ok(batches)
}

/// Jobs in flight at once, in idemq's worker and in the plain consumer.
const CONCURRENCY: usize = 8;

/// One run of the plain consumer on fresh resources: its seconds, its
/// batches and the requests it made.
async fn plain_run(
    c: &Clients,
    name: &str,
    n: usize,
) -> Result<(f64, u64, BTreeMap<String, u64>), Error> {
    let res = fresh(c, name).await?;
    send_jobs(c, &res.queue_url, n).await?;
    c.counter.take();
    let start = Instant::now();
    let batches = plain_consumer(c, &res.queue_url, &res.table_name, n, CONCURRENCY).await?;
    Ok((start.elapsed().as_secs_f64(), batches, c.counter.take()))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n: usize = std::env::args().nth(1).map_or(Ok(1000), |a| a.parse())?;
    const IDLE: u64 = 2;
    let run = format!("bench-{}", rand::random::<u32>());
    let c = clients().await;

    // The plain consumer first, same jobs, same emulator, same concurrency.
    let (before_secs, ..) = plain_run(&c, &format!("{run}-plain-before"), n).await?;

    // idemq's worker with its defaults (the ledger needs no look-up), with
    // a handler that keeps the look-up, and with the look-up also reading
    // legacy markers.
    let mut idemq_runs = Vec::new();
    for (label, look_up, legacy) in [
        ("idemq", LookUp::NotNeeded, LegacyMarkers::Off),
        ("with look-up", LookUp::BeforeHandler, LegacyMarkers::Off),
        ("+ legacy read", LookUp::BeforeHandler, LegacyMarkers::Read),
    ] {
        let res = fresh(&c, &format!("{run}-{}", idemq_runs.len())).await?;
        send_jobs(&c, &res.queue_url, n).await?;
        c.counter.take();
        let mut behaviour = IdempotencyConfig::default();
        behaviour.legacy_markers = legacy;
        let handler = Declared {
            ledger: ledger::Ledger {
                table: res.table_name.clone(),
                fail_accounts: HashSet::new(),
            },
            look_up,
        };
        let host = Host::from_clients(
            handler,
            c.sqs.clone(),
            c.ddb.clone(),
            TableLayout::new(&res.table_name),
            behaviour,
            BatchConfig::default().with_concurrency(CONCURRENCY),
        );
        let mut args = WorkerArgs::new(res.queue_url.clone());
        args.exit_when_idle = Some(IDLE);
        let start = Instant::now();
        let totals = serve(&host, &args).await?;
        // The worker only notices it is idle after IDLE seconds without a message.
        let secs = start
            .elapsed()
            .saturating_sub(Duration::from_secs(IDLE))
            .as_secs_f64();
        assert_eq!(totals.succeeded as usize, n, "{}", totals.summary());
        idemq_runs.push((label, secs, c.counter.take()));
    }

    // The plain consumer again, after idemq's runs: the emulator slows as
    // it holds more tables and items, so a baseline measured only first
    // (or only last) would favour one side. Its rate is that of both runs.
    let (after_secs, plain_batches, plain_counts) =
        plain_run(&c, &format!("{run}-plain-after"), n).await?;
    let plain_secs = (before_secs + after_secs) / 2.0;

    let per = |x: u64, d: f64| x as f64 / d;
    println!(
        "worker benchmark: {n} ledger jobs, batch 10, concurrency {CONCURRENCY}, local stack (moto serialises DynamoDB)"
    );
    print!("{:<28}", "");
    for (label, ..) in &idemq_runs {
        print!("{label:>14}");
    }
    println!("{:>14}", "plain");
    print!("{:<28}", "jobs/s");
    for (_, secs, _) in &idemq_runs {
        print!("{:>14.0}", n as f64 / secs);
    }
    println!(
        "{:>14.0}   (plain first {:.0}, last {:.0})",
        n as f64 / plain_secs,
        n as f64 / before_secs,
        n as f64 / after_secs
    );
    print!("{:<28}", "DynamoDB requests / job");
    for (_, _, counts) in &idemq_runs {
        print!("{:>14.3}", per(sum(counts, "dynamodb"), n as f64));
    }
    println!("{:>14.3}", per(sum(&plain_counts, "dynamodb"), n as f64));
    print!("{:<28}", "SQS requests / batch");
    for (_, _, counts) in &idemq_runs {
        // GetQueueAttributes at start-up and the idle polls are not per batch.
        let batches = counts.get("SQS.ReceiveMessage").copied().unwrap_or(0);
        print!("{:>14.2}", per(sum(counts, "sqs"), batches as f64));
    }
    println!(
        "{:>14.2}",
        per(sum(&plain_counts, "sqs"), plain_batches as f64)
    );
    for (label, secs, counts) in &idemq_runs {
        println!("ratio {label} / plain jobs/s: {:.2}", plain_secs / secs);
        println!("{label} requests: {counts:?}");
    }
    println!("plain requests: {plain_counts:?}");
    Ok(())
}
