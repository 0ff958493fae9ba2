//! Worker benchmark on the local stack: idemq's worker against a plain
//! consumer doing the same writes without idempotency, in the same run.
//!
//! Prints per-job DynamoDB requests, SQS requests per batch, and jobs/s
//! with the ratio to the plain consumer, for idemq with its defaults (the
//! marker read before the handler, legacy markers read: 3 requests per
//! job, the two reads side by side), with the look-up alone (2), and with
//! the commit alone (exactly 1).
//! Requests are counted by an SDK interceptor, one per HTTP attempt, so SDK
//! retries count too.
//!
//! ```sh
//! make bench-worker            # or: cargo run --example bench_worker -- 2000
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, SendMessageBatchRequestEntry,
};
use futures_util::{StreamExt, stream};
use idemq::config::BatchConfig;
use idemq::config::LegacyMarkers;
use idemq::host::Host;
use idemq::init::{InitSpec, init};
use idemq::worker::{WorkerArgs, serve};
use idemq::{IdempotencyConfig, TableLayout};

#[allow(dead_code)]
#[path = "../examples/ledger.rs"]
mod ledger;

#[allow(dead_code)]
#[path = "common.rs"]
mod common;
use common::{Clients, clients, sum};

type Error = Box<dyn std::error::Error + Send + Sync>;

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
                    .message_attributes(idemq::JOB_ID_ATTRIBUTE, attr)
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

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n: usize = std::env::args().nth(1).map_or(Ok(1000), |a| a.parse())?;
    const CONCURRENCY: usize = 8;
    const IDLE: u64 = 2;
    let run = format!("bench-{}", rand::random::<u32>());
    let c = clients().await;

    // idemq's worker, with the marker read before the handler and legacy
    // markers read (the defaults), with the look-up alone, and with
    // neither (the commit alone dedups).
    let mut idemq_runs = Vec::new();
    for (label, read_first, legacy) in [
        ("idemq", true, LegacyMarkers::Read),
        ("look-up only", true, LegacyMarkers::Off),
        ("commit only", false, LegacyMarkers::Off),
    ] {
        let res = fresh(&c, &format!("{run}-{}", idemq_runs.len())).await?;
        send_jobs(&c, &res.queue_url, n).await?;
        c.counter.take();
        let mut behaviour = IdempotencyConfig::default();
        behaviour.read_marker_first = read_first;
        behaviour.legacy_markers = legacy;
        let host = Host::from_clients(
            ledger::Ledger {
                table: res.table_name.clone(),
                fail_accounts: HashSet::new(),
            },
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

    // The plain consumer, same jobs, same emulator, same concurrency.
    let res = fresh(&c, &format!("{run}-plain")).await?;
    send_jobs(&c, &res.queue_url, n).await?;
    c.counter.take();
    let start = Instant::now();
    let plain_batches = plain_consumer(&c, &res.queue_url, &res.table_name, n, CONCURRENCY).await?;
    let plain_secs = start.elapsed().as_secs_f64();
    let plain_counts = c.counter.take();

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
    println!("{:>14.0}", n as f64 / plain_secs);
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
