//! What both hosts (Lambda and the local worker) build once at cold start:
//! SDK clients, the store, the batch processor, from `IDEMQ_*`.
//!
//! The store comes from the handler's effect type ([`OpenStore`]): one file
//! per store opens it from the environment (`dynamodb.rs`, `postgres.rs`),
//! and nothing else here knows a store.

use std::sync::Arc;

use crate::batch::Processor;
use crate::config::{BatchConfig, IdempotencyConfig};
use crate::handler::Handler;
use crate::job::JobIdResolver;
use crate::queue::QueueInfo;
use crate::store::Store;

mod dynamodb;
#[cfg(feature = "postgres")]
mod postgres;

/// Any error that stops a host from starting or running.
pub type HostError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A handler's effect type whose store a host can open from the
/// environment: `idemq::store::dynamodb::Effect` opens DynamoDB (`IDEMQ_TABLE`, …),
/// `idemq::store::postgres::Effect` PostgreSQL (`IDEMQ_POSTGRES_URL`, …). It is
/// what lets [`run`](crate::run), [`Host::build`] and the Lambda and worker
/// hosts serve a handler of either store.
pub trait OpenStore: Send + Sync + Sized + 'static {
    /// The store for this effect type, from the environment and `sdk`;
    /// `table` is the worker's `--table` (`None` on Lambda), for a store
    /// that has tables.
    fn open_store(
        sdk: &aws_config::SdkConfig,
        table: Option<String>,
        behaviour: &IdempotencyConfig,
        batch: &BatchConfig,
    ) -> Result<Arc<dyn Store<Effect = Self>>, HostError>;
}

/// What a host builds once per process: the SQS client and the batch
/// [`Processor`] (handler, store, settings).
///
/// `lambda::BatchService::from_host` (feature `lambda`) and
/// `worker::serve` (feature `worker`) run batches through it; build one
/// with [`Host::build`] from the environment, or with [`Host::with_store`]
/// for a store built elsewhere.
pub struct Host<H: Handler> {
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) processor: Processor<H>,
}

impl<H: Handler> Host<H>
where
    H::Effect: OpenStore,
{
    /// Reads the configuration; `table` overrides `IDEMQ_TABLE`.
    pub async fn build(
        handler: H,
        table: Option<String>,
        batch: BatchConfig,
    ) -> Result<Self, HostError> {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::from_sdk_config(handler, &sdk, table, batch)
    }

    /// [`Host::build`] with an SDK configuration of the caller's.
    pub fn from_sdk_config(
        handler: H,
        sdk_config: &aws_config::SdkConfig,
        table: Option<String>,
        batch: BatchConfig,
    ) -> Result<Self, HostError> {
        let behaviour = IdempotencyConfig::from_env()?;
        let store = H::Effect::open_store(sdk_config, table, &behaviour, &batch)?;
        let sqs = aws_sdk_sqs::Client::new(sdk_config);
        Ok(Self::with_store(
            handler,
            store,
            sqs,
            behaviour.job_id,
            batch,
        ))
    }
}

impl<H: Handler> Host<H> {
    /// A host for `handler` over `store`, sending with `sqs` and finding
    /// job ids with `resolver`.
    pub fn with_store(
        handler: H,
        store: Arc<dyn Store<Effect = H::Effect>>,
        sqs: aws_sdk_sqs::Client,
        resolver: JobIdResolver,
        batch: BatchConfig,
    ) -> Self {
        let processor = Processor::new(handler, store, sqs.clone(), resolver, batch);
        Self { sqs, processor }
    }

    /// The batch processor: runs one batch to its report.
    pub fn processor(&self) -> &Processor<H> {
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
