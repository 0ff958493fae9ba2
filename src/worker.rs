//! The local worker: long-polls a queue and applies the same batch contract
//! as Lambda (delete what is done, leave the failures with their new
//! visibility), so a handler runs unchanged against the local stack.
//!
//! SIGINT / SIGTERM stop it gracefully: the batch in hand is finished, no
//! new one is received. It prints a one-line summary when it exits.

use std::time::Duration;

// Instants and sleeps come from tokio's clock, the one clock a test (or a
// simulation) can pause and advance.
use tokio::time::Instant;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use clap::Parser;

use crate::batch::Message;
use crate::config::BatchConfig;
use crate::handler::Handler;
use crate::host::{Host, HostError, OpenStore};
use crate::metrics::BatchMetrics;

/// Command-line options of a handler binary run as a local worker.
#[derive(Debug, Clone, Parser)]
#[command(about = "Run an idemq handler as a local worker that long-polls an SQS queue")]
#[non_exhaustive]
pub struct WorkerArgs {
    /// The source queue's URL.
    #[arg(long, env = "IDEMQ_QUEUE_URL")]
    pub queue_url: String,
    /// The idemq table (default: IDEMQ_TABLE).
    #[arg(long)]
    pub table: Option<String>,
    /// Messages per receive (1-10).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=10))]
    pub batch_size: i32,
    /// Jobs run at once (default: IDEMQ_CONCURRENCY or 10).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Exit after this many seconds without a message.
    #[arg(long)]
    pub exit_when_idle: Option<u64>,
    /// Print CloudWatch EMF metric lines on stdout, as on Lambda.
    #[arg(long)]
    pub emf: bool,
}

impl WorkerArgs {
    /// The flags' defaults for `queue_url`: the table from `IDEMQ_TABLE`,
    /// 10 messages per receive, `IDEMQ_CONCURRENCY`, no idle exit, no EMF.
    /// Set the public fields to change them.
    pub fn new(queue_url: impl Into<String>) -> Self {
        Self {
            queue_url: queue_url.into(),
            table: None,
            batch_size: 10,
            concurrency: None,
            exit_when_idle: None,
            emf: false,
        }
    }
}

/// Runs the worker with the batch configuration from `IDEMQ_*`.
pub async fn run<H: Handler>(handler: H, args: WorkerArgs) -> Result<BatchMetrics, HostError>
where
    H::Effect: OpenStore,
{
    run_with(handler, args, BatchConfig::from_env()?).await
}

/// Runs the worker until SIGINT / SIGTERM or `--exit-when-idle`, and
/// returns the totals it printed.
pub async fn run_with<H: Handler>(
    handler: H,
    args: WorkerArgs,
    mut batch: BatchConfig,
) -> Result<BatchMetrics, HostError>
where
    H::Effect: OpenStore,
{
    if let Some(c) = args.concurrency {
        batch.concurrency = c.max(1);
    }
    let host = Host::build(handler, args.table.clone(), batch).await?;
    serve(&host, &args).await
}

/// The worker loop over a built host: receive, process, delete, until
/// SIGINT / SIGTERM or `--exit-when-idle`.
pub async fn serve<H: Handler>(
    host: &Host<H>,
    args: &WorkerArgs,
) -> Result<BatchMetrics, HostError> {
    serve_until(host, args, signals()).await
}

/// [`serve`], stopping when `stop` completes instead of on a signal: a
/// receive in progress is abandoned (after up to a second for an answer
/// already on its way), messages received but not started are made visible
/// again at once, and a batch in hand is finished and acknowledged first. For a worker embedded in a larger program, with a
/// shutdown of its own (and for tests: the simulation runs it this way,
/// killing it by dropping the future).
pub async fn serve_until<H: Handler>(
    host: &Host<H>,
    args: &WorkerArgs,
    stop: impl Future<Output = ()>,
) -> Result<BatchMetrics, HostError> {
    let queue = host.discover(&args.queue_url).await?;
    let mut stop = std::pin::pin!(stop);

    let mut totals = BatchMetrics::default();
    let mut idle_since = Instant::now();
    let idle_limit = args.exit_when_idle.map(Duration::from_secs);
    tracing::info!(queue = queue.name, "worker started");
    loop {
        if idle_limit.is_some_and(|limit| idle_since.elapsed() >= limit) {
            break;
        }
        // Short polls near the idle limit, so --exit-when-idle is prompt.
        let wait = idle_limit.map_or(20, |l| {
            l.saturating_sub(idle_since.elapsed())
                .as_secs()
                .clamp(1, 20)
        });
        let receive = host
            .sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(args.batch_size)
            .wait_time_seconds(i32::try_from(wait).unwrap_or(20))
            // All: ApproximateReceiveCount for the backoff, SentTimestamp
            // for the retention check, MessageGroupId for FIFO order.
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send();
        let mut receive = std::pin::pin!(receive);
        let received = tokio::select! {
            r = receive.as_mut() => r,
            () = stop.as_mut() => {
                tracing::info!("stop requested");
                // SQS may already have answered, the messages taken off
                // the queue and on their way: dropped here, they would
                // stay invisible for a whole visibility timeout. Take the
                // answer if it comes at once, and hand them back.
                if let Ok(Ok(out)) = tokio::time::timeout(ANSWER_GRACE, receive).await {
                    hand_back(host, &queue.url, out.messages()).await;
                }
                break;
            }
        };
        let out = match received {
            Ok(out) => out,
            Err(e) => {
                tracing::warn!("ReceiveMessage failed: {}", DisplayErrorContext(e));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let received_at = Instant::now();
        let messages: Vec<Message> = out
            .messages()
            .iter()
            .filter_map(|m| Message::from_sdk(m, received_at))
            .collect();
        if messages.is_empty() {
            continue;
        }
        // Stopped while the receive was answered: nothing started yet.
        if futures_util::FutureExt::now_or_never(stop.as_mut()).is_some() {
            tracing::info!("stop requested: the batch received was handed back");
            hand_back(host, &queue.url, out.messages()).await;
            break;
        }
        idle_since = Instant::now();
        // A job still running when its visibility ends would be delivered
        // again alongside itself: that is this batch's deadline.
        let deadline = received_at + queue.visibility_timeout;
        let report = host.processor.process(&queue, &messages, deadline).await;
        // The chaos suite dies here: committed, not yet acknowledged.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("worker::before-delete", |_| -> Result<
            BatchMetrics,
            HostError,
        > { std::process::abort() });
        // A failed delete only means a duplicate delivery later, which the
        // marker absorbs (and which delete_messages logs).
        let done: Vec<&str> = report.done.iter().map(String::as_str).collect();
        crate::queue::delete_messages(&host.sqs, &queue.url, &done).await;
        if args.emf {
            for line in report
                .metrics
                .to_emf_lines(&queue.name, std::time::SystemTime::now())
            {
                println!("{line}");
            }
        }
        totals.absorb(&report.metrics);
        // A stop requested during the batch: it is finished, leave now.
        if futures_util::FutureExt::now_or_never(stop.as_mut()).is_some() {
            tracing::info!("stop requested: the batch in hand was finished");
            break;
        }
    }
    println!("idemq worker: {}", totals.summary());
    Ok(totals)
}

/// How long a stopping worker waits for the answer of a receive in
/// progress: an answer already sent arrives well within it, and a long
/// poll still waiting for messages is abandoned after it.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Makes messages received but not started visible again at once
/// (`VisibilityTimeout` 0: "the message is immediately visible",
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html>),
/// instead of a whole visibility timeout later. Their receive still
/// counts toward `maxReceiveCount`: SQS counted it when it answered.
async fn hand_back<H: Handler>(
    host: &Host<H>,
    url: &str,
    messages: &[aws_sdk_sqs::types::Message],
) {
    let entries: Vec<(&str, &str, Duration)> = messages
        .iter()
        .filter_map(|m| Some((m.message_id()?, m.receipt_handle()?, Duration::ZERO)))
        .collect();
    if entries.is_empty() {
        return;
    }
    tracing::info!(
        messages = entries.len(),
        "handing back messages not started"
    );
    crate::queue::change_visibility(&host.sqs, url, &entries).await;
}

/// Completes on SIGINT or SIGTERM; never, if SIGTERM cannot be watched.
async fn signals() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGTERM: {e}");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
