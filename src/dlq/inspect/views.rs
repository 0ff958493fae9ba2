//! What the letters read become, with no AWS call: a DLQ's [`Stats`], one
//! [`Row`] per letter, the letter an id names, and the warning that no
//! failure record was found. Pure, so it stands apart from opening and
//! reading the queue.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::Scanned;
use crate::dlq::copies::{Letter, letters};
use crate::dlq::peek::{Context, DeadMessage, Depth};

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
    /// Jobs by the deploy that failed them (the function version or the
    /// name `IDEMQ_DEPLOY` gives, and the idemq version, as
    /// `idemq-deploy` writes them; `(unknown)`: neither recorded), each
    /// with its errors and its first failure. One cause across deploys
    /// reads as a downstream's outage; one new deploy across causes, as
    /// a bug it shipped.
    #[serde(rename = "deploys")]
    pub by_deploy: BTreeMap<String, DeployFailures>,
    /// Messages read.
    pub read: usize,
    /// Jobs among them: a crash's second copy is not a second failure.
    pub jobs: usize,
    /// Duplicate copies among them (`read - jobs`).
    pub copies: usize,
    /// About how many letters could not be read.
    pub unseen: u64,
}

/// The dead letters one deploy failed ([`Stats::by_deploy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeployFailures {
    /// Jobs it failed.
    pub jobs: usize,
    /// The earliest of their failures (RFC 3339, to the second): about
    /// when this deploy began to dead-letter.
    #[serde(serialize_with = "rfc3339_seconds")]
    pub first_failed_at: Option<SystemTime>,
    /// Those jobs by their last error.
    pub by_error: BTreeMap<String, usize>,
}

impl DeployFailures {
    /// [`Self::by_error`], most frequent first (ties by error), as
    /// [`Stats::errors_by_count`].
    pub fn errors_by_count(&self) -> Vec<(&str, usize)> {
        most_frequent_first(&self.by_error)
    }
}

/// Counts by error, most frequent first (ties by error).
fn most_frequent_first(by_error: &BTreeMap<String, usize>) -> Vec<(&str, usize)> {
    let mut errors: Vec<(&str, usize)> = by_error.iter().map(|(e, n)| (e.as_str(), *n)).collect();
    errors.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    errors
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
        let mut by_deploy: BTreeMap<String, DeployFailures> = BTreeMap::new();
        for Letter { context: c, .. } in &letters {
            let error = c
                .last_error
                .clone()
                .unwrap_or_else(|| "(no context)".into());
            let deploy = by_deploy.entry(c.deploy_label()).or_default();
            deploy.jobs += 1;
            *deploy.by_error.entry(error.clone()).or_default() += 1;
            deploy.first_failed_at = deploy.first_failed_at.into_iter().chain(c.failed_at).min();
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
            by_deploy,
            read: count,
            jobs: letters.len(),
            copies: count - letters.len(),
            unseen: read.unseen,
        }
    }

    /// [`Self::by_error`], most frequent first (ties by error).
    pub fn errors_by_count(&self) -> Vec<(&str, usize)> {
        most_frequent_first(&self.by_error)
    }

    /// [`Self::by_deploy`] in the order the deploys began to fail (those
    /// with no failure time last, then by name).
    pub fn deploys_by_first_failure(&self) -> Vec<(&str, &DeployFailures)> {
        let mut deploys: Vec<(&str, &DeployFailures)> = self
            .by_deploy
            .iter()
            .map(|(d, f)| (d.as_str(), f))
            .collect();
        deploys.sort_by_key(|(d, f)| (f.first_failed_at.is_none(), f.first_failed_at, *d));
        deploys
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
                "none of the {n} dead letters read has a failure record: no table was given \
                 (--table or IDEMQ_TABLE; --store postgres for PostgreSQL), so each shows only \
                 what its attributes carry; pass the consumer's store, or --function NAME to read \
                 it from the Lambda function's configuration"
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
                    "none of the {n} dead letters read has a failure record in {place} under {ns}: \
                 check that {check} are the consumer's (--function NAME reads them from its \
                 Lambda configuration); the letters show only what their attributes carry"
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
