//! What both hosts (Lambda and the local worker) build once at cold start:
//! SDK clients, the committer, the batch processor, from `IDEMQ_*`.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::batch::{BatchConfig, Processor};
use crate::commit::Committer;
use crate::config::{ConfigError, IdempotencyConfig, TableLayout, parse_duration};
use crate::dlq::DeadLetters;
use crate::handler::Handler;
use crate::init::retention;
use crate::queue::QueueInfo;

/// Any error that stops a host from starting or running.
pub type HostError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl BatchConfig {
    /// `IDEMQ_CONCURRENCY` (default 10), `IDEMQ_DEADLINE_MARGIN` (default
    /// `2s`), `IDEMQ_BACKOFF_BASE` (default `2s`), `IDEMQ_BACKOFF_CAP`
    /// (default `15m`).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        if let Some(v) = get("IDEMQ_CONCURRENCY") {
            c.concurrency = v
                .parse()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| ConfigError::Invalid {
                    var: "IDEMQ_CONCURRENCY",
                    value: v.clone(),
                    why: "a whole number from 1 to 1000".into(),
                })?;
        }
        if let Some(v) = get("IDEMQ_DEADLINE_MARGIN") {
            c.deadline_margin = parse_duration("IDEMQ_DEADLINE_MARGIN", &v)?;
        }
        let mut backoff = Backoff::DEFAULT;
        if let Some(v) = get("IDEMQ_BACKOFF_BASE") {
            backoff = backoff.with_base(parse_duration("IDEMQ_BACKOFF_BASE", &v)?);
        }
        if let Some(v) = get("IDEMQ_BACKOFF_CAP") {
            backoff = backoff.with_cap(parse_duration("IDEMQ_BACKOFF_CAP", &v)?);
        }
        c.backoff = backoff.validate().map_err(|e| ConfigError::Invalid {
            var: "IDEMQ_BACKOFF_BASE/IDEMQ_BACKOFF_CAP",
            value: format!("{:?}/{:?}", backoff.base(), backoff.cap()),
            why: e.to_string(),
        })?;
        Ok(c)
    }
}

/// What a host builds once per process: the SQS client and the batch
/// [`Processor`] (handler, committer, dead-letter writer, settings).
///
/// `lambda::BatchService::from_host` (feature `lambda`) and
/// `worker::serve` (feature `worker`) run batches through it; build one
/// yourself with [`Host::from_clients`] to bring SDK clients of your own.
pub struct Host<H> {
    pub(crate) sqs: aws_sdk_sqs::Client,
    pub(crate) processor: Processor<H>,
    marker_ttl: Duration,
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
        let committer = Committer::new(ddb.clone(), layout.clone(), behaviour.marker_ttl);
        let dead_letters = DeadLetters::new(ddb, sqs.clone(), layout, behaviour.marker_ttl);
        let processor = Processor::new(
            handler,
            committer,
            dead_letters,
            sqs.clone(),
            behaviour.job_id,
            batch,
        );
        Self {
            sqs,
            processor,
            marker_ttl: behaviour.marker_ttl,
        }
    }

    /// The batch processor: runs one batch to its report.
    pub fn processor(&self) -> &Processor<H> {
        &self.processor
    }

    /// Finds a queue's DLQ and maxReceiveCount, and says so when the marker
    /// TTL would not outlive the job's copies.
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
            let (source, dlq) = (
                retention(&self.sqs, queue_url).await?,
                retention(&self.sqs, dlq).await?,
            );
            if let Err(e) = crate::config::check_marker_ttl(self.marker_ttl, source, dlq) {
                tracing::warn!("{e}");
            }
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_config_from_env() {
        let none = |_: &str| None;
        assert_eq!(
            BatchConfig::from_lookup(none).unwrap(),
            BatchConfig::default()
        );
        let c = BatchConfig::from_lookup(|k| match k {
            "IDEMQ_CONCURRENCY" => Some("4".into()),
            "IDEMQ_BACKOFF_BASE" => Some("1s".into()),
            "IDEMQ_BACKOFF_CAP" => Some("2s".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.concurrency, 4);
        assert_eq!(c.backoff.ceiling(5), Duration::from_secs(2));
        let bad = BatchConfig::from_lookup(|k| (k == "IDEMQ_CONCURRENCY").then(|| "0".into()));
        assert!(bad.unwrap_err().to_string().contains("IDEMQ_CONCURRENCY"));
        let bad = BatchConfig::from_lookup(|k| (k == "IDEMQ_BACKOFF_CAP").then(|| "13h".into()));
        assert!(bad.is_err());
    }
}
