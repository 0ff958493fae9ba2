//! Opening a DLQ and reading what an operator asks of it: its stats, one
//! row per letter, one letter whole.
//!
//! [`Dlq::connect`] refuses a queue that does not exist or is not a DLQ;
//! [`Dlq::read_letters`] reads every letter without consuming it, each
//! joined with its failure record. What follows is pure: [`Stats::of`],
//! [`Row::of`] and [`find_letter`] turn the letters read into data that
//! the CLI prints (as a table or as JSON) and a console can render.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::copies::{Letter, letters};
use super::peek::{Context, DeadMessage, Depth, Peek, join_records};
use super::records::Records;
use super::redrive::dead_letter_sources;
use crate::config::{ConfigError, DEFAULT_MARKER_TTL, TableLayout};
use crate::dead_letter::{DlqError, FailureRecord};
use crate::job::JobIdResolver;
use crate::queue::{QueueError, QueueInfo};
use crate::store::FailureRecords;
use crate::store::dynamodb::FailureTable;

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

    /// The failure record stored under `id` (a job id or a message id),
    /// for a letter no longer in the DLQ; `None` without a table.
    pub async fn failure_record(&self, id: &str) -> Result<Option<FailureRecord>, DlqError> {
        match &self.records {
            Some(r) => r.read(Some(id), id).await,
            None => Ok(None),
        }
    }
}

/// A DLQ at a glance (`idemq dlq stats`; its `--json` is this, serialized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// The DLQ's name.
    pub dlq: String,
    /// Its depth, as SQS reports it.
    pub depth: Depth,
    /// Age of the oldest message read (by `SentTimestamp`), to the second.
    #[serde(rename = "oldest_age_secs", serialize_with = "whole_seconds")]
    pub oldest_age: Option<Duration>,
    /// Jobs by their last error (`(no context)`: none recorded).
    pub by_error: BTreeMap<String, usize>,
    /// Jobs by source queue (`(unknown)`: none known).
    #[serde(rename = "source_queues")]
    pub by_source: BTreeMap<String, usize>,
    /// Messages read.
    pub read: usize,
    /// Jobs among them: a crash's second copy is not a second failure.
    pub jobs: usize,
    /// Duplicate copies among them (`read - jobs`).
    pub copies: usize,
    /// About how many letters could not be read.
    pub unseen: u64,
}

fn whole_seconds<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&d.as_secs()),
        None => s.serialize_none(),
    }
}

impl Stats {
    /// The stats of the DLQ `dlq` at `depth`, from what was read of it, at
    /// `now`. Counted by job: copies of one job count once.
    pub fn of(dlq: &str, depth: Depth, read: Scanned, now: SystemTime) -> Self {
        let count = read.items.len();
        let oldest = read.items.iter().filter_map(|(m, _)| m.sent_at()).min();
        let letters = letters(read.items);
        let mut by_error: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_source: BTreeMap<String, usize> = BTreeMap::new();
        for Letter { context: c, .. } in &letters {
            let error = c
                .last_error
                .clone()
                .unwrap_or_else(|| "(no context)".into());
            *by_error.entry(error).or_default() += 1;
            *by_source
                .entry(c.source_queue.clone().unwrap_or_else(|| "(unknown)".into()))
                .or_default() += 1;
        }
        let oldest_age = oldest
            .and_then(|t| now.duration_since(t).ok())
            .map(|a| Duration::from_secs(a.as_secs()));
        Self {
            dlq: dlq.to_owned(),
            depth,
            oldest_age,
            by_error,
            by_source,
            read: count,
            jobs: letters.len(),
            copies: count - letters.len(),
            unseen: read.unseen,
        }
    }

    /// [`Self::by_error`], most frequent first (ties by error).
    pub fn errors_by_count(&self) -> Vec<(&str, usize)> {
        let mut errors: Vec<(&str, usize)> = self
            .by_error
            .iter()
            .map(|(e, n)| (e.as_str(), *n))
            .collect();
        errors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        errors
    }
}

/// One dead letter as `idemq dlq list` shows it (`--json`: this,
/// serialized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    /// The job id, when one could be resolved.
    pub job_id: Option<String>,
    /// The DLQ `MessageId` of the copy shown.
    pub message_id: String,
    /// Attempts made.
    pub attempts: Option<u32>,
    /// The last error and its chain, on one line.
    pub last_error: String,
    /// When the last attempt failed (RFC 3339, to the second).
    #[serde(serialize_with = "rfc3339_seconds")]
    pub failed_at: Option<SystemTime>,
    /// The source queue's name.
    pub source_queue: Option<String>,
    /// The body's size in bytes.
    pub payload_bytes: usize,
    /// Messages of this job in the DLQ (1 + its copies).
    pub copies: usize,
    /// The MessageIds of its other copies.
    pub copy_message_ids: Vec<String>,
    /// Another letter has the same job id and a different payload.
    pub conflicting: bool,
    /// Whether the consumer's failure record of it was found.
    pub failure_record: bool,
}

fn rfc3339_seconds<S: serde::Serializer>(t: &Option<SystemTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_some(&humantime::format_rfc3339_seconds(*t).to_string()),
        None => s.serialize_none(),
    }
}

impl Row {
    /// The row of one letter.
    pub fn of(l: &Letter) -> Self {
        let c = &l.context;
        Self {
            job_id: c.job_id.clone(),
            message_id: c.message_id.clone(),
            attempts: c.attempts,
            last_error: one_line(&c.error_line(), usize::MAX),
            failed_at: c.failed_at,
            source_queue: c.source_queue.clone(),
            payload_bytes: c.payload_bytes,
            copies: l.count(),
            copy_message_ids: l.copies.clone(),
            conflicting: l.conflicting,
            failure_record: c.failure_record,
        }
    }
}

/// Where an operator tool looks for a consumer's failure records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "store", rename_all = "lowercase")]
pub enum RecordsPlace {
    /// The idemq table in DynamoDB.
    Dynamodb {
        /// The table.
        table: String,
        /// The consumer's key prefix (`IDEMQ_KEY_PREFIX`).
        key_prefix: String,
        /// `IDEMQ_NAMESPACE`; `None`: each source queue's name.
        namespace: Option<String>,
    },
    /// idemq's schema in PostgreSQL.
    Postgres {
        /// The schema.
        schema: String,
        /// `IDEMQ_NAMESPACE`; `None`: each source queue's name.
        namespace: Option<String>,
    },
    /// None was given: letters show only what their attributes carry.
    None,
}

impl RecordsPlace {
    fn namespace(&self) -> Option<&str> {
        match self {
            Self::Dynamodb { namespace, .. } | Self::Postgres { namespace, .. } => {
                namespace.as_deref()
            }
            Self::None => None,
        }
    }
}

impl std::fmt::Display for RecordsPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dynamodb {
                table, key_prefix, ..
            } => write!(f, "DynamoDB table {table} (key prefix {key_prefix:?})"),
            Self::Postgres { schema, .. } => write!(f, "PostgreSQL schema {schema}"),
            Self::None => f.write_str("no store"),
        }
    }
}

/// Dead letters were read and none of them has a failure record where
/// the tool looked: the table, schema or namespace is not the
/// consumer's (or no store was given), and the letters are shown with
/// only the context their own attributes carry. `idemq dlq` prints it as
/// a warning, and as a `warnings` entry in its JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoFailureRecords {
    /// Always `no_failure_records` (the JSON entry's tag).
    pub kind: &'static str,
    /// Letters read.
    pub letters: usize,
    /// Where records were looked for.
    pub records: RecordsPlace,
    /// The namespaces looked in: `IDEMQ_NAMESPACE`, else the source
    /// queues' names.
    pub namespaces: Vec<String>,
    /// The warning, in words: what was looked for, where, and what to
    /// check.
    pub message: String,
}

impl NoFailureRecords {
    /// The warning for `letters` read from a DLQ whose source queues are
    /// `sources`, their records looked for in `place`; `None` when there
    /// are no letters or at least one has its record.
    pub fn check(
        letters: &[(DeadMessage, Context)],
        place: &RecordsPlace,
        sources: &[String],
    ) -> Option<Self> {
        if letters.is_empty() || letters.iter().any(|(_, c)| c.failure_record) {
            return None;
        }
        let namespaces: Vec<String> = match (place, place.namespace()) {
            (RecordsPlace::None, _) => Vec::new(),
            (_, Some(ns)) => vec![ns.to_owned()],
            (_, None) => sources.to_vec(),
        };
        let n = letters.len();
        let message = match place {
            RecordsPlace::None => format!(
                "none of the {n} dead letters read has a failure record: no table was given                  (--table or IDEMQ_TABLE; --store postgres for PostgreSQL), so each shows only                  what its attributes carry; pass the consumer's store, or --function NAME to read                  it from the Lambda function's configuration"
            ),
            _ => {
                let ns = match place.namespace() {
                    Some(ns) => format!("namespace {ns} (IDEMQ_NAMESPACE)"),
                    None if namespaces.is_empty() => {
                        "the source queues' namespaces (no queue names this DLQ)".to_owned()
                    }
                    None => format!(
                        "namespace {} (the source queue's name: IDEMQ_NAMESPACE is not set)",
                        namespaces.join(", ")
                    ),
                };
                let check = match place {
                    RecordsPlace::Postgres { .. } => {
                        "IDEMQ_POSTGRES_URL, IDEMQ_POSTGRES_SCHEMA and IDEMQ_NAMESPACE"
                    }
                    _ => "the table (--table, IDEMQ_TABLE), IDEMQ_NAMESPACE and IDEMQ_KEY_PREFIX",
                };
                format!(
                    "none of the {n} dead letters read has a failure record in {place} under {ns}:                      check that {check} are the consumer's (--function NAME reads them from its                      Lambda configuration); the letters show only what their attributes carry"
                )
            }
        };
        Some(Self {
            kind: "no_failure_records",
            letters: n,
            records: place.clone(),
            namespaces,
            message,
        })
    }
}

/// The letter `id` names: by the MessageId of the copy shown or of any of
/// its copies, else by job id.
pub fn find_letter<'a>(letters: &'a [Letter], id: &str) -> Option<&'a Letter> {
    letters.iter().find(|l| {
        l.message.message_id == id
            || l.copies.iter().any(|c| c == id)
            || l.context.job_id.as_deref() == Some(id)
    })
}

/// `s` on one line (newlines and tabs as spaces), cut to `max` characters
/// (the last one `…`).
pub fn one_line(s: &str, max: usize) -> String {
    let flat = s.replace(['\n', '\r', '\t'], " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    /// Letters whose every context lacks a record: the warning names the
    /// table, prefix and namespaces looked in; one record found, or no
    /// letter at all, and there is nothing to warn about.
    #[test]
    fn no_failure_records_is_said_with_where_it_looked() {
        let letter = |id: &str, recorded: bool| {
            let m = DeadMessage {
                message_id: id.into(),
                receipt_handle: "rh".into(),
                body: "{}".into(),
                attributes: Default::default(),
                system: Default::default(),
            };
            let mut c = Context::of(&m, Some(id), None);
            c.failure_record = recorded;
            (m, c)
        };
        let table = RecordsPlace::Dynamodb {
            table: "jobs".into(),
            key_prefix: "idemq#".into(),
            namespace: None,
        };
        let sources = vec!["orders".to_owned()];
        let bare = [letter("a", false), letter("b", false)];
        let w = NoFailureRecords::check(&bare, &table, &sources).unwrap();
        assert_eq!((w.kind, w.letters), ("no_failure_records", 2));
        assert_eq!(w.namespaces, ["orders"]);
        assert!(w.message.contains("DynamoDB table jobs"), "{}", w.message);
        assert!(w.message.contains("namespace orders"), "{}", w.message);
        assert!(w.message.contains("IDEMQ_NAMESPACE"), "{}", w.message);
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(json["records"]["store"], "dynamodb");
        assert_eq!(json["records"]["table"], "jobs");

        let named = RecordsPlace::Postgres {
            schema: "idemq".into(),
            namespace: Some("billing".into()),
        };
        let w = NoFailureRecords::check(&bare, &named, &sources).unwrap();
        assert_eq!(w.namespaces, ["billing"]);
        assert!(w.message.contains("PostgreSQL schema idemq"));
        let w = NoFailureRecords::check(&bare, &RecordsPlace::None, &sources).unwrap();
        assert!(w.message.contains("no table was given"), "{}", w.message);

        let one_recorded = [letter("a", false), letter("b", true)];
        assert_eq!(
            NoFailureRecords::check(&one_recorded, &table, &sources),
            None
        );
        assert_eq!(NoFailureRecords::check(&[], &table, &sources), None);
    }

    /// Only a missing queue is the operator's mistake (exit 2); anything
    /// SQS answered with (throttling, an outage, a denial) exits 1.
    #[test]
    fn aws_failures_are_not_usage_errors() {
        let url = "https://sqs.us-east-1.amazonaws.com/1/q";
        let missing = OpenError::of_queue(url, QueueError::NotFound(url.into()));
        assert!(missing.is_usage());
        assert!(missing.to_string().contains("no such queue"));
        let throttled = OpenError::of_queue(
            url,
            QueueError::Sqs("ThrottlingException: Rate exceeded".into()),
        );
        assert!(!throttled.is_usage());
        assert!(throttled.to_string().contains("ThrottlingException"));
    }
}
