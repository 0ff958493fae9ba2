//! Redrive benchmark on the local stack: idemq's redrive (receive 10,
//! SendMessageBatch, DeleteMessageBatch, sends before it deletes) against
//! SQS's own StartMessageMoveTask, same messages, same run. Prints
//! messages/s and SQS requests per moved message (goal: ≤ 0.35).
//!
//! ```sh
//! make bench-redrive           # or: cargo run --release --example bench_redrive -- 2000
//! ```

use std::time::{Duration, Instant};

use idemq::dlq::peek::Peek;
use idemq::dlq::redrive::{Redrive, RedriveOptions, native_status, start_native};
use idemq::producer::{Job, Producer};

#[allow(dead_code)]
#[path = "common.rs"]
mod common;
use common::{clients, sum};

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn queue(sqs: &aws_sdk_sqs::Client, name: &str) -> Result<String, Error> {
    Ok(sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await?
        .queue_url()
        .unwrap_or_default()
        .to_owned())
}

/// Fills `dlq` with `n` dead letters (as a producer would have sent them).
async fn fill(sqs: &aws_sdk_sqs::Client, dlq: &str, n: usize) -> Result<(), Error> {
    let producer = Producer::with_client(sqs.clone(), dlq).await?;
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new(
                format!("t-{i}"),
                &serde_json::json!({"transfer_id": format!("t-{i}"), "amount": i}),
            )
        })
        .collect::<Result<_, _>>()?;
    for (id, r) in producer.send_batch(jobs).await {
        r.map_err(|e| format!("{id}: {e}"))?;
    }
    Ok(())
}

async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> Result<u64, Error> {
    Ok(Peek::new(sqs.clone(), url, Duration::from_secs(1))
        .depth()
        .await?
        .total())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n: usize = std::env::args().nth(1).map_or(Ok(2000), |a| a.parse())?;
    let c = clients().await;
    let run = rand::random::<u32>();
    let dlq = queue(&c.sqs, &format!("bench-dlq-{run}")).await?;
    let target = queue(&c.sqs, &format!("bench-target-{run}")).await?;
    let peek = Peek::new(c.sqs.clone(), &dlq, Duration::from_secs(60));
    let dlq_arn = peek.arn().await?;
    let target_arn = peek.destination_arn(&target).await?;
    // SQS moves only out of a queue that some RedrivePolicy names.
    let policy = serde_json::json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5});
    c.sqs
        .set_queue_attributes()
        .queue_url(&target)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            policy.to_string(),
        )
        .send()
        .await?;

    // idemq's redrive, to an explicit destination.
    fill(&c.sqs, &dlq, n).await?;
    c.counter.take();
    let options = RedriveOptions {
        to: Some(target.clone()),
        ..RedriveOptions::default()
    };
    let start = Instant::now();
    let report = Redrive::new(&peek, None, options)
        .await?
        .run(&|_, _| {})
        .await?;
    let ours_secs = start.elapsed().as_secs_f64();
    let ours_requests = sum(&c.counter.take(), "sqs");
    assert_eq!(report.moved.len(), n, "failed: {:?}", report.failed.first());
    assert_eq!(depth(&c.sqs, &dlq).await?, 0);

    // SQS's own move task, same messages.
    fill(&c.sqs, &dlq, n).await?;
    c.counter.take();
    let start = Instant::now();
    start_native(&c.sqs, &dlq_arn, Some(&target_arn), Some(500)).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if native_status(&c.sqs, &dlq_arn)
            .await?
            .is_some_and(|t| t.status != "RUNNING")
        {
            break;
        }
    }
    let native_secs = start.elapsed().as_secs_f64();
    let native_requests = sum(&c.counter.take(), "sqs");
    assert_eq!(depth(&c.sqs, &dlq).await?, 0);

    println!("redrive benchmark: {n} dead letters, local stack (LocalStack SQS)");
    println!("{:<30}{:>14}{:>14}", "", "idemq", "native");
    println!(
        "{:<30}{:>14.0}{:>14.0}",
        "messages/s",
        n as f64 / ours_secs,
        n as f64 / native_secs
    );
    println!(
        "{:<30}{:>14.3}{:>14.3}",
        "SQS requests / moved message",
        ours_requests as f64 / n as f64,
        native_requests as f64 / n as f64
    );
    println!(
        "(native: client requests only — starting and polling the task; SQS's own moves are not visible to a client)"
    );
    for url in [&dlq, &target] {
        c.sqs.delete_queue().queue_url(url).send().await?;
    }
    Ok(())
}
