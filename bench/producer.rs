//! Producer benchmark on the local stack: `Producer::send_batch` against
//! one `SendMessage` per job, same jobs, same run. Prints messages/s and
//! SQS requests per message (goal: ≤ 0.11 for `send_batch`).
//!
//! ```sh
//! make bench-producer          # or: cargo run --release --example bench_producer -- 5000
//! ```

use std::time::Instant;

use futures_util::{StreamExt, stream};
use idemq::producer::Job;
use idemq::producer::Producer;

#[allow(dead_code)]
#[path = "common.rs"]
mod common;
use common::{clients, sum};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let n: usize = std::env::args().nth(1).map_or(Ok(5000), |a| a.parse())?;
    let c = clients().await;
    let name = format!("bench-producer-{}", rand::random::<u32>());
    let url = c
        .sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new(
                format!("t-{i}"),
                &serde_json::json!({"transfer_id": format!("t-{i}"), "account": "a", "amount": i}),
            )
        })
        .collect::<Result<_, _>>()?;

    let producer = Producer::with_client(c.sqs.clone(), &url).await?;
    c.counter.take();
    let start = Instant::now();
    let results = producer.send_batch(jobs.clone()).await;
    let batch_secs = start.elapsed().as_secs_f64();
    let batch_requests = sum(&c.counter.take(), "sqs");
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    assert_eq!(failed, 0, "send_batch failed {failed} jobs");

    // Baseline: one SendMessage per job, 4 in flight like send_batch.
    let start = Instant::now();
    let sent: Vec<Result<(), Error>> = stream::iter(jobs)
        .map(|job| {
            let sqs = c.sqs.clone();
            let url = url.clone();
            async move {
                sqs.send_message()
                    .queue_url(url)
                    .message_body(job.body)
                    .send()
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let single_secs = start.elapsed().as_secs_f64();
    let single_requests = sum(&c.counter.take(), "sqs");
    sent.into_iter().collect::<Result<Vec<()>, _>>()?;

    println!("producer benchmark: {n} jobs, local stack (LocalStack SQS)");
    println!("{:<28}{:>14}{:>14}", "", "send_batch", "SendMessage");
    println!(
        "{:<28}{:>14.0}{:>14.0}",
        "messages/s",
        n as f64 / batch_secs,
        n as f64 / single_secs
    );
    println!(
        "{:<28}{:>14.3}{:>14.3}",
        "SQS requests / message",
        batch_requests as f64 / n as f64,
        single_requests as f64 / n as f64
    );
    println!(
        "ratio send_batch / SendMessage messages/s: {:.2}",
        single_secs / batch_secs
    );
    c.sqs.delete_queue().queue_url(&url).send().await?;
    Ok(())
}
