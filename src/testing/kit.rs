//! [`TestKit`]: a handler behind the real Lambda batch service
//! ([`BatchService`]), its SDK clients served by the in-memory DynamoDB
//! and SQS.

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use lambda_runtime::tower::Service;

use super::connector::{Services, lock};
use super::dynamodb::{MemoryDynamoDb, TableKey};
use super::sqs::{MemorySqs, QueueSpec, SentMessage, VisibilityChange};
use crate::config::BatchConfig;
use crate::config::{IdempotencyConfig, TableLayout};
use crate::handler::Handler;
use crate::host::{Host, HostError};
use crate::lambda::BatchService;
use crate::store::Store;
use crate::store::dynamodb::effect::{Item, Key};

/// How a [`TestKit`] sets up its services and runs events. Start from
/// [`KitConfig::new`] and change the fields you need.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KitConfig {
    /// The idemq table (created in the in-memory DynamoDB, keyed by
    /// `layout.partition_key`).
    pub layout: TableLayout,
    /// Marker TTL and job id source.
    pub idempotency: IdempotencyConfig,
    /// Concurrency, deadline margin and backoff.
    pub batch: BatchConfig,
    /// The `maxReceiveCount` of each source queue's `RedrivePolicy`; its
    /// DLQ is named after it (`jobs` → `jobs-dlq`, `jobs.fifo` →
    /// `jobs-dlq.fifo`). Default 6, as `idemq init` sets.
    pub max_receive_count: u32,
    /// The source queues' visibility timeout (default 30 s).
    pub visibility_timeout: Duration,
    /// The source queues' retention (default 4 days).
    pub retention: Duration,
    /// The time each invocation has before its deadline (default 30 s).
    pub invocation_timeout: Duration,
    /// A fixture's `SentTimestamp` is long past by the time a test runs,
    /// and a retry of a message older than the queue's retention is
    /// dead-lettered at once. So by default each record's `SentTimestamp`
    /// (if it has one) is set to now; `false` keeps the event as given
    /// (to test the retention rule itself).
    pub stamp_sent_now: bool,
}

impl KitConfig {
    /// Defaults around the idemq table `table`.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            layout: TableLayout::new(table),
            idempotency: IdempotencyConfig::default(),
            batch: BatchConfig::default(),
            max_receive_count: 6,
            visibility_timeout: Duration::from_secs(30),
            retention: Duration::from_secs(4 * 24 * 3600),
            invocation_timeout: Duration::from_secs(30),
            stamp_sent_now: true,
        }
    }
}

/// What one invocation answered and did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BatchRun {
    /// The partial batch response (`batchItemFailures`), as Lambda gets it.
    pub response: SqsBatchResponse,
    /// Visibility changes made during this run: each retried (or untried)
    /// message, with its backoff.
    pub visibility_changes: Vec<VisibilityChange>,
    /// Messages sent during this run: permanent failures dead-lettered at
    /// once. (A transient failure on its last receive is reported failed
    /// and left to SQS's own redrive, which the kit does not run.)
    pub dead_letters: Vec<SentMessage>,
}

impl BatchRun {
    /// The message ids in `batchItemFailures`, in order.
    pub fn failed_ids(&self) -> Vec<&str> {
        self.response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
    }
}

/// A handler behind the real SQS batch service of a Lambda function,
/// against an in-memory DynamoDB and SQS: no AWS, no emulator, no network.
///
/// Each run goes through the code `idemq::lambda::BatchService` runs on
/// Lambda: job ids, decoding, the handler (panics caught), the dedup
/// transaction and its outcomes, failure records, backoff through
/// `ChangeMessageVisibilityBatch`, permanent failures sent to the DLQ.
/// The SQS queues an event names (its `eventSourceARN`) are created on
/// first use, each with a DLQ; the idemq table exists from the start.
///
/// ```
/// use idemq::{handler_fn, JobError, JobMeta};
/// use idemq::testing::TestKit;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let handler = handler_fn(|job: serde_json::Value, _meta: JobMeta| async move {
///     if job["ok"] == true { Ok(idemq::store::dynamodb::Effect::new()) } else { Err(JobError::permanent("bad job")) }
/// });
/// let kit = TestKit::new(handler, "idemq");
/// let event = r#"{"Records": [
///   {"messageId": "m1", "receiptHandle": "r1", "body": "{\"ok\": true}",
///    "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
///    "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:jobs"},
///   {"messageId": "m2", "receiptHandle": "r2", "body": "{\"ok\": false}",
///    "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
///    "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:jobs"}
/// ]}"#;
/// let run = kit.run_json(event).await.unwrap();
/// assert!(run.failed_ids().is_empty(), "m2 is dead-lettered, not retried");
/// assert_eq!(run.dead_letters.len(), 1);
/// assert!(kit.marker("m1").is_some(), "m1 committed (its id is its MessageId)");
/// # }
/// ```
pub struct TestKit<H: Handler> {
    service: BatchService<H>,
    services: Services,
    sqs_client: aws_sdk_sqs::Client,
    dynamodb_client: aws_sdk_dynamodb::Client,
    config: KitConfig,
}

impl<H: Handler> std::fmt::Debug for TestKit<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestKit")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<H: Handler<Effect = crate::store::dynamodb::Effect>> TestKit<H> {
    /// `handler` with the defaults of [`KitConfig::new`]`(table)`.
    pub fn new(handler: H, table: impl Into<String>) -> Self {
        Self::with_config(handler, KitConfig::new(table))
    }

    /// `handler` with `config`.
    pub fn with_config(handler: H, config: KitConfig) -> Self {
        let services = Services::default();
        // A fresh store cannot hold the table already.
        let _ = lock(&services.dynamodb).create_table(
            config.layout.table_name.clone(),
            TableKey::partition(config.layout.partition_key.clone()),
        );
        let (sqs_client, dynamodb_client) = clients(&services);
        let host = Host::from_clients(
            handler,
            sqs_client.clone(),
            dynamodb_client.clone(),
            config.layout.clone(),
            config.idempotency.clone(),
            config.batch,
        );
        Self {
            service: BatchService::from_host(host),
            services,
            sqs_client,
            dynamodb_client,
            config,
        }
    }
}

impl<H: Handler> TestKit<H> {
    /// `handler` on a store of your own (PostgreSQL, say: a real server,
    /// since the kit serves only SQS and DynamoDB in memory), SQS in
    /// memory, with `config` (its layout is not read).
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn doc(handler: impl idemq::Handler<Effect = idemq::store::postgres::Effect>)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use idemq::store::postgres::{Postgres, PostgresConfig};
    /// use idemq::testing::{KitConfig, TestKit};
    ///
    /// let store = Postgres::new(PostgresConfig::new(std::env::var("IDEMQ_POSTGRES_URL")?))?;
    /// let kit = TestKit::with_store(handler, Arc::new(store), KitConfig::new("unused"));
    /// # Ok(()) }
    /// ```
    pub fn with_store(
        handler: H,
        store: Arc<dyn Store<Effect = H::Effect>>,
        config: KitConfig,
    ) -> Self {
        let services = Services::default();
        let (sqs_client, dynamodb_client) = clients(&services);
        let host = Host::with_store(
            handler,
            store,
            sqs_client.clone(),
            config.idempotency.job_id.clone(),
            config.batch,
        );
        Self {
            service: BatchService::from_host(host),
            services,
            sqs_client,
            dynamodb_client,
            config,
        }
    }

    /// Runs an SQS event (the JSON Lambda sends, as in a fixture file)
    /// through the batch service. `Err` is what the service itself fails
    /// with (a record without `messageId` or `eventSourceARN`: Lambda would
    /// retry the whole batch), or JSON that is not an SQS event.
    pub async fn run_json(&self, event: &str) -> Result<BatchRun, HostError> {
        // The error's position and category only: serde_json's text can
        // quote the payload.
        let event: SqsEvent = serde_json::from_str(event).map_err(|e| {
            format!(
                "not an SQS event: {:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            )
        })?;
        self.run(event).await
    }

    /// Runs an SQS event through the batch service, as one invocation.
    pub async fn run(&self, mut event: SqsEvent) -> Result<BatchRun, HostError> {
        let now_ms = crate::clock::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let (visibility_before, sent_before) = {
            let mut sqs = lock(&self.services.sqs);
            for record in &mut event.records {
                if let Some(arn) = &record.event_source_arn {
                    let name = self.ensure_queue(&mut sqs, arn)?;
                    if let (Some(id), Some(handle)) = (&record.message_id, &record.receipt_handle) {
                        sqs.delivered(&name, id, handle);
                    }
                }
                if self.config.stamp_sent_now
                    && let Some(sent) = record.attributes.get_mut("SentTimestamp")
                {
                    *sent = now_ms.to_string();
                }
            }
            (sqs.visibility_changes().len(), sqs.sent_messages().len())
        };
        let mut context = lambda_runtime::Context::default();
        context.request_id = "idemq-testing".into();
        let timeout_ms =
            u64::try_from(self.config.invocation_timeout.as_millis()).unwrap_or(u64::MAX);
        context.deadline = now_ms.saturating_add(timeout_ms);
        let mut service = self.service.clone();
        let response = service.call(LambdaEvent::new(event, context)).await?;
        let sqs = lock(&self.services.sqs);
        Ok(BatchRun {
            response,
            visibility_changes: sqs.visibility_changes()[visibility_before..].to_vec(),
            dead_letters: sqs.sent_messages()[sent_before..].to_vec(),
        })
    }

    /// The queue an event source ARN names, created (with its DLQ) on
    /// first use. The kit serves one region and account: those of the
    /// first ARN it sees.
    fn ensure_queue(&self, sqs: &mut MemorySqs, arn: &str) -> Result<String, HostError> {
        let parts: Vec<&str> = arn.split(':').collect();
        let [_, _, "sqs", region, account, name] = parts[..] else {
            return Err(format!("{arn:?} is not an SQS queue ARN").into());
        };
        if sqs.arn(name) != arn {
            if !sqs.is_empty() {
                return Err(format!(
                    "idemq::testing serves one region and account; {arn} is in another"
                )
                .into());
            }
            *sqs = MemorySqs::new(region, account);
        }
        if !sqs.has_queue(name) {
            let dlq = match name.strip_suffix(".fifo") {
                Some(base) => format!("{base}-dlq.fifo"),
                None => format!("{name}-dlq"),
            };
            let mut source =
                QueueSpec::new(name).with_dlq(dlq.clone(), self.config.max_receive_count);
            source.visibility_timeout = self.config.visibility_timeout;
            source.retention = self.config.retention;
            let mut dead = QueueSpec::new(dlq);
            dead.retention = Duration::from_secs(14 * 24 * 3600);
            sqs.create_queue(source);
            sqs.create_queue(dead);
        }
        Ok(name.to_owned())
    }
}

impl<H: Handler> TestKit<H> {
    /// The in-memory SQS, with every visibility change and send so far.
    pub fn sqs(&self) -> MutexGuard<'_, MemorySqs> {
        lock(&self.services.sqs)
    }

    /// An SDK client served by the in-memory SQS.
    pub fn sqs_client(&self) -> &aws_sdk_sqs::Client {
        &self.sqs_client
    }
}

impl<H: Handler> TestKit<H> {
    /// The in-memory DynamoDB (locked while the guard lives: drop it
    /// before the next run).
    pub fn dynamodb(&self) -> MutexGuard<'_, MemoryDynamoDb> {
        lock(&self.services.dynamodb)
    }

    /// An SDK client served by the in-memory DynamoDB (to seed or read
    /// items the way production code does).
    pub fn dynamodb_client(&self) -> &aws_sdk_dynamodb::Client {
        &self.dynamodb_client
    }

    /// The idemq table's layout.
    pub fn layout(&self) -> &TableLayout {
        &self.config.layout
    }

    /// Every item of the idemq table (markers, failure records and what
    /// effects wrote there), in key order.
    pub fn items(&self) -> Vec<Item> {
        self.dynamodb()
            .items(&self.config.layout.table_name)
            .unwrap_or_default()
    }

    /// The item at `key` in the idemq table.
    pub fn item(&self, key: &Key) -> Option<Item> {
        self.dynamodb()
            .get_item(&self.config.layout.table_name, key)
            .ok()
            .flatten()
    }

    /// A job's separate dedup marker in the consumer namespace `namespace`
    /// (a source queue's name unless the layout sets one:
    /// [`TableLayout::namespace_for`]).
    pub fn marker_in(&self, namespace: &str, job_id: &str) -> Option<Item> {
        let l = &self.config.layout;
        self.item(&Key::string(
            &l.partition_key,
            l.marker_key(namespace, job_id),
        ))
    }

    /// A job's dedup marker, if committed: idemq's own marker item, or the
    /// job's item in the idemq table that is its marker
    /// ([`Effect::marked_by`](crate::store::dynamodb::Effect::marked_by): it carries
    /// the job id and payload hash).
    ///
    /// idemq's own marker is found in any consumer's namespace (the first
    /// one, when two consumers share the table: see
    /// [`TestKit::marker_in`]), or under the key of an earlier version.
    pub fn marker(&self, job_id: &str) -> Option<Item> {
        let l = &self.config.layout;
        let namespaced = |item: &Item| {
            item.get(&l.partition_key)
                .and_then(|v| v.as_s().ok())
                .and_then(|pk| pk.strip_prefix(&l.key_prefix)?.strip_prefix("ns#"))
                .and_then(|rest| rest.split_once("#job#"))
                .is_some_and(|(_, id)| id == job_id)
        };
        let legacy = Key::string(&l.partition_key, l.legacy_marker_key(job_id));
        self.items()
            .into_iter()
            .find(namespaced)
            .or_else(|| self.item(&legacy))
            .or_else(|| {
                // Not idemq's own items (failure records carry a job id
                // and hash too): a user's item whose attributes mark it.
                self.items().into_iter().find(|item| {
                    let idemqs = item
                        .get(&l.partition_key)
                        .and_then(|v| v.as_s().ok())
                        .is_some_and(|pk| pk.starts_with(&l.key_prefix));
                    !idemqs
                        && item.get(&l.job_id).and_then(|v| v.as_s().ok())
                            == Some(&job_id.to_owned())
                        && item.contains_key(&l.payload_hash)
                })
            })
    }

    /// A job's failure record (its last failed attempt), if any.
    ///
    /// Found in any consumer's namespace, or under the key of an earlier
    /// version.
    pub fn failure_record(&self, job_id: &str) -> Option<Item> {
        let l = &self.config.layout;
        let namespaced = |item: &Item| {
            item.get(&l.partition_key)
                .and_then(|v| v.as_s().ok())
                .and_then(|pk| pk.strip_prefix(&l.key_prefix)?.strip_prefix("ns#"))
                .and_then(|rest| rest.split_once("#failure#"))
                .is_some_and(|(_, id)| id == job_id)
        };
        let legacy = Key::string(&l.partition_key, l.legacy_failure_key(Some(job_id), ""));
        self.items()
            .into_iter()
            .find(namespaced)
            .or_else(|| self.item(&legacy))
    }
}

/// SDK clients as production builds them, over the in-memory services.
/// Retries are off: nothing here throttles, and a refused request must
/// fail at once.
fn clients(services: &Services) -> (aws_sdk_sqs::Client, aws_sdk_dynamodb::Client) {
    use aws_sdk_sqs::config::{
        BehaviorVersion, Credentials, Region, StalledStreamProtectionConfig, retry::RetryConfig,
    };
    let sqs = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            "AKID",
            "secret",
            None,
            None,
            "idemq-testing",
        ))
        .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
        .retry_config(RetryConfig::disabled())
        .http_client(services.http_client())
        .build();
    let ddb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "AKID",
            "secret",
            None,
            None,
            "idemq-testing",
        ))
        .stalled_stream_protection(
            aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
        )
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .http_client(services.http_client())
        .build();
    (
        aws_sdk_sqs::Client::from_conf(sqs),
        aws_sdk_dynamodb::Client::from_conf(ddb),
    )
}
