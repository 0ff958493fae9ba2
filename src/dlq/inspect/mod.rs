//! Opening a DLQ and reading what an operator asks of it: its stats, one
//! row per letter, one letter whole.
//!
//! [`Dlq::connect`] refuses a queue that does not exist or is not a DLQ;
//! [`Dlq::read_letters`] reads every letter without consuming it, each
//! joined with its failure record. What follows is pure: [`Stats::of`],
//! [`Row::of`] and [`find_letter`] turn the letters read into data that
//! the CLI prints (as a table or as JSON) and a console can render.

use std::sync::Arc;
use std::time::Duration;

use super::peek::{Context, DeadMessage, Peek, join_records};
use super::records::Records;
use super::redrive::dead_letter_sources;
use crate::config::{ConfigError, DEFAULT_MARKER_TTL, TableLayout};
use crate::failure::{DlqError, FailureRecord};
use crate::job::JobIdResolver;
use crate::queue::{QueueError, QueueInfo};
use crate::store::FailureRecords;
use crate::store::dynamodb::FailureTable;

#[cfg(test)]
mod tests;
mod views;

pub use views::{
    DeployFailures, NoFailureRecords, RecordsPlace, Row, Stats, find_letter, one_line,
};

/// Why a DLQ could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The DLQ URL given is not a URL.
    #[error(
        "--dlq-url {0:?} is not a queue URL (https://sqs.<region>.amazonaws.com/<account>/<name>)"
    )]
    NotAUrl(String),
    /// The table layout (`IDEMQ_ATTR_*`, `IDEMQ_KEY_PREFIX`) is malformed.
    #[error(transparent)]
    Layout(#[from] ConfigError),
    /// No queue has this URL.
    #[error("{0}: no such queue")]
    NoSuchQueue(String),
    /// No queue's `RedrivePolicy` names this one, and no destination was
    /// given.
    #[error(
        "{0} is not a dead-letter queue: no queue's RedrivePolicy names it (to move its messages anyway, pass --to)"
    )]
    NotADlq(String),
    /// SQS would not describe the queue (throttling, an outage, a denial).
    #[error("cannot read queue {url}: {source}")]
    Queue {
        /// The queue URL.
        url: String,
        /// SQS's answer.
        source: QueueError,
    },
    /// SQS would not list the queues that name it as their DLQ.
    #[error("cannot list the source queues of {url}: {source}")]
    Sources {
        /// The DLQ URL.
        url: String,
        /// SQS's answer.
        source: DlqError,
    },
}

impl OpenError {
    /// `url` could not be described: a missing queue is the operator's
    /// mistake, anything else SQS's.
    pub fn of_queue(url: &str, e: QueueError) -> Self {
        match e {
            QueueError::NotFound(_) => Self::NoSuchQueue(url.to_owned()),
            other => Self::Queue {
                url: url.to_owned(),
                source: other,
            },
        }
    }

    /// Whether the operator's input is at fault (the CLI exits 2), rather
    /// than AWS (throttling, an outage or a denied request: exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::Queue { .. } | Self::Sources { .. })
    }
}

/// Which DLQ to open, and how to read it.
#[derive(Debug, Clone)]
pub struct DlqOptions {
    /// The DLQ's URL.
    pub dlq_url: String,
    /// The idemq table, for failure records; key names and prefix come
    /// from the environment, as for the consumer
    /// ([`TableLayout::from_env_with_table`]). `None` or empty: no records.
    pub table: Option<String>,
    /// How long each message stays invisible while it is read.
    pub hold: Duration,
    /// The consumer's job-id resolver: records are stored under the id it
    /// resolves.
    pub resolver: JobIdResolver,
    /// A destination was given (a redrive `--to`): a queue that no queue
    /// names as its DLQ may then be opened too.
    pub explicit_destination: bool,
}

/// An open DLQ: checked to exist and to be a DLQ, with its failure records.
#[derive(Debug)]
pub struct Dlq {
    peek: Peek,
    records: Option<Records>,
    info: QueueInfo,
    resolver: JobIdResolver,
    /// The names of the queues whose `RedrivePolicy` names this one.
    sources: Vec<String>,
    /// Their URLs, in the same order.
    source_urls: Vec<String>,
}

/// Every letter read from a DLQ, each with its context, held invisible
/// until [`Dlq::release`].
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    /// The messages read, in first-receive order, each with its context.
    pub items: Vec<(DeadMessage, Context)>,
    /// About how many letters could not be read (see
    /// [`Scan::unseen`](super::peek::Scan::unseen)).
    pub unseen: u64,
}

impl Dlq {
    /// Opens the DLQ of `options` (not named `open`: the IAM checks follow
    /// calls by name, and the consumer opens envelopes), refusing a URL that is not one, a queue
    /// that does not exist, and a queue no `RedrivePolicy` names (unless
    /// [`DlqOptions::explicit_destination`]).
    pub async fn connect(
        sqs: aws_sdk_sqs::Client,
        ddb: aws_sdk_dynamodb::Client,
        options: DlqOptions,
    ) -> Result<Self, OpenError> {
        // The same layout as the consumer's (IDEMQ_ATTR_*, IDEMQ_KEY_PREFIX),
        // or records would be looked up under keys it never wrote.
        let layout = match options.table.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => Some(TableLayout::from_env_with_table(Some(t.to_owned()))?),
            None => None,
        };
        Self::connect_with_layout(sqs, ddb, layout, options).await
    }

    /// Opens the DLQ of `options` as [`Dlq::connect`] does, with the
    /// failure records of the DynamoDB table `layout` describes (`None`:
    /// no records); `options.table` is not read. For a layout read from
    /// somewhere else than this process's environment (a function's
    /// configuration: [`super::settings::ConsumerEnv::layout`]).
    pub async fn connect_with_layout(
        sqs: aws_sdk_sqs::Client,
        ddb: aws_sdk_dynamodb::Client,
        layout: Option<TableLayout>,
        options: DlqOptions,
    ) -> Result<Self, OpenError> {
        let records = layout.map(|l| {
            let table = FailureTable::new(ddb, l, DEFAULT_MARKER_TTL);
            Records::new(Arc::new(table))
        });
        Self::connect_to(sqs, records, options).await
    }

    /// Opens the DLQ of `options` as [`Dlq::connect`] does, with the
    /// failure records of any store (`None`: no records); `options.table`
    /// is not read.
    pub async fn connect_with_records(
        sqs: aws_sdk_sqs::Client,
        records: Option<Arc<dyn FailureRecords>>,
        options: DlqOptions,
    ) -> Result<Self, OpenError> {
        let records = records.map(Records::new);
        Self::connect_to(sqs, records, options).await
    }

    async fn connect_to(
        sqs: aws_sdk_sqs::Client,
        records: Option<Records>,
        options: DlqOptions,
    ) -> Result<Self, OpenError> {
        let url = options.dlq_url;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(OpenError::NotAUrl(url));
        }
        let info = QueueInfo::discover(&sqs, &url)
            .await
            .map_err(|e| OpenError::of_queue(&url, e))?;
        let sources =
            dead_letter_sources(&sqs, &url)
                .await
                .map_err(|source| OpenError::Sources {
                    url: url.clone(),
                    source,
                })?;
        if sources.is_empty() && !options.explicit_destination {
            return Err(OpenError::NotADlq(url));
        }
        let records = records.map(|r| r.with_source_queues(&sources));
        Ok(Self {
            peek: Peek::new(sqs, url, options.hold),
            records,
            info,
            resolver: options.resolver,
            sources: sources
                .iter()
                .map(|q| crate::config::queue_name(q).to_owned())
                .collect(),
            source_urls: sources,
        })
    }

    /// The reader of its messages.
    pub fn peek(&self) -> &Peek {
        &self.peek
    }

    /// Its failure records, when a table was given.
    pub fn records(&self) -> Option<&Records> {
        self.records.as_ref()
    }

    /// The queue, as SQS describes it.
    pub fn info(&self) -> &QueueInfo {
        &self.info
    }

    /// The consumer's job-id resolver.
    pub fn resolver(&self) -> &JobIdResolver {
        &self.resolver
    }

    /// The names of its source queues (the queues whose `RedrivePolicy`
    /// names it): without `IDEMQ_NAMESPACE`, each one's name is the
    /// namespace its consumer's records are kept under.
    pub fn source_queues(&self) -> &[String] {
        &self.sources
    }

    /// The URLs of its source queues, in [`Self::source_queues`]' order
    /// (`ListDeadLetterSourceQueues`).
    pub fn source_queue_urls(&self) -> &[String] {
        &self.source_urls
    }

    /// Every letter, each with its context (its failure record joined with
    /// its own attributes), left invisible until [`Self::release`];
    /// `progress` sees how many were read so far.
    pub async fn read_letters(&self, progress: impl FnMut(usize)) -> Result<Scanned, DlqError> {
        let scan = self.peek.scan(None, progress).await?;
        let joined = join_records(self.records(), &self.resolver, &scan.messages).await?;
        let items = scan
            .messages
            .into_iter()
            .zip(joined)
            .map(|(m, (_, c))| (m, c))
            .collect();
        Ok(Scanned {
            items,
            unseen: scan.unseen,
        })
    }

    /// Makes the letters read visible again at once.
    pub async fn release(&self, items: &[(DeadMessage, Context)]) {
        let messages: Vec<DeadMessage> = items.iter().map(|(m, _)| m.clone()).collect();
        self.peek.release(&messages).await;
    }

    /// Deletes letters it holds, by receipt handle (`DeleteMessageBatch`,
    /// 10 a call): once they are kept elsewhere, such as an archive file
    /// that reads back whole. Returns the indexes (into `receipt_handles`)
    /// whose delete failed, each logged, a whole failed call counting for
    /// all its entries: those letters are still in the DLQ.
    pub async fn delete(&self, receipt_handles: &[&str]) -> Vec<usize> {
        crate::queue::delete_messages(self.peek.sqs(), self.peek.dlq_url(), receipt_handles).await
    }

    /// The failure record stored under `id` (a job id or a message id),
    /// for a letter no longer in the DLQ; `None` without a table.
    pub async fn failure_record(&self, id: &str) -> Result<Option<FailureRecord>, DlqError> {
        match &self.records {
            Some(r) => r.read(Some(id), id).await,
            None => Ok(None),
        }
    }
}
