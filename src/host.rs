//! What both hosts (Lambda and the local worker) build once at cold start:
//! SDK clients, the store, the batch processor, from `IDEMQ_*`.

use crate::batch::Processor;
use crate::config::{BatchConfig, IdempotencyConfig, TableLayout};
use crate::dead_letter::DeadLetters;
use crate::handler::Handler;
use crate::queue::QueueInfo;
use crate::store::Store;
use crate::store::dynamodb::{Committer, DynamoDb};

/// Any error that stops a host from starting or running.
pub type HostError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a host builds once per process: the SQS client and the batch
/// [`Processor`] (handler, store, dead-letter writer, settings).
///
/// `lambda::BatchService::from_host` (feature `lambda`) and
/// `worker::serve` (feature `worker`) run batches through it; build one
/// yourself with [`Host::from_clients`] to bring SDK clients of your own,
/// or with [`Host::with_store`] for a store built elsewhere.
pub struct Host<H, S = DynamoDb> {
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) processor: Processor<H, S>,
}

impl<H: Handler> Host<H> {
    /// Reads the configuration; `table` overrides `IDEMQ_TABLE`.
    pub async fn build(
        handler: H,
        table: Option<String>,
        batch: BatchConfig,
    ) -> Result<Self, HostError> {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::from_sdk_config(handler, &sdk, table, batch)
    }

    /// Clients from `sdk_config`, settings from `IDEMQ_*`; `table`
    /// overrides `IDEMQ_TABLE`.
    pub fn from_sdk_config(
        handler: H,
        sdk_config: &aws_config::SdkConfig,
        table: Option<String>,
        batch: BatchConfig,
    ) -> Result<Self, HostError> {
        let behaviour = IdempotencyConfig::from_env()?;
        let layout = TableLayout::from_env_with_table(table)?;
        let sqs = aws_sdk_sqs::Client::new(sdk_config);
        let ddb = aws_sdk_dynamodb::Client::new(sdk_config);
        Ok(Self::from_clients(
            handler, sqs, ddb, layout, behaviour, batch,
        ))
    }

    /// A host over clients built elsewhere (with interceptors, say).
    pub fn from_clients(
        handler: H,
        sqs: aws_sdk_sqs::Client,
        ddb: aws_sdk_dynamodb::Client,
        layout: TableLayout,
        behaviour: IdempotencyConfig,
        batch: BatchConfig,
    ) -> Self {
        let committer = Committer::new(ddb.clone(), layout.clone(), behaviour.marker_ttl)
            .with_legacy_markers(behaviour.legacy_markers)
            .with_marker_first(behaviour.read_marker_first);
        let dead_letters = DeadLetters::new(ddb, sqs.clone(), layout, behaviour.marker_ttl);
        Self::with_store(
            handler,
            DynamoDb::new(committer),
            dead_letters,
            sqs,
            behaviour.job_id,
            batch,
        )
    }
}

impl<H: Handler<S>, S: Store> Host<H, S> {
    /// A host whose handler's effects `store` commits, with failure
    /// records and dead letters through `dead_letters`, SQS calls through
    /// `sqs`, job ids found by `resolver`. Jobs are weighed against the
    /// store's marker TTL, which must also outlive the queues' copies
    /// ([`Host::discover`]).
    pub fn with_store(
        handler: H,
        store: S,
        dead_letters: DeadLetters,
        sqs: aws_sdk_sqs::Client,
        resolver: crate::job::JobIdResolver,
        batch: BatchConfig,
    ) -> Self {
        let processor =
            Processor::with_store(handler, store, dead_letters, sqs.clone(), resolver, batch);
        Self { sqs, processor }
    }

    /// The batch processor: runs one batch to its report.
    pub fn processor(&self) -> &Processor<H, S> {
        &self.processor
    }

    /// Finds a queue's DLQ and maxReceiveCount. Refuses to start when the
    /// marker TTL (`IDEMQ_MARKER_TTL`) would not outlive the job's copies
    /// (source retention + DLQ retention + a replay day): a consumer
    /// started so would dead-letter, as `expired`, jobs that SQS still
    /// delivers in their first pass.
    pub async fn discover(&self, queue_url: &str) -> Result<QueueInfo, HostError> {
        let info = QueueInfo::discover(&self.sqs, queue_url).await?;
        if info.dlq_url.is_none() {
            tracing::warn!(
                queue = info.name,
                "queue has no RedrivePolicy: failing jobs will be retried until retention ends"
            );
        }
        if let Some(max_receive_count) = info.max_receive_count {
            let backoff = self.processor.config().backoff;
            if let Err(e) = crate::backoff::check_retries_fit_retention(
                &backoff,
                max_receive_count,
                info.visibility_timeout,
                info.retention,
            ) {
                tracing::warn!(
                    queue = info.name,
                    max_receive_count,
                    worst_case_secs = e.worst_case.as_secs(),
                    retention_secs = e.retention.as_secs(),
                    "{e}"
                );
            }
        }
        if let Some(dlq) = &info.dlq_url {
            let dlq_retention = crate::queue::retention(&self.sqs, dlq).await?;
            crate::config::check_marker_ttl(
                self.processor.marker_ttl(),
                info.retention,
                dlq_retention,
            )
            .map_err(|e| format!("queue {}: refusing to start: {e}", info.name))?;
        }
        Ok(info)
    }
}
