//! `idemq init`: create, or verify if they exist, the source queue, its DLQ
//! and the table, on whatever endpoint the environment names.
//!
//! Running it twice is harmless: existing resources are checked against
//! what was asked for, and a difference is an error that names it rather
//! than a silent change to a queue that may be in use.
//!
//! What it creates is what the templates (`infra/sam/idemq.yaml`,
//! `infra/terraform/modules/idemq`) create: both queues encrypted
//! (SSE-SQS), the DLQ keeping messages 14 days and open to redrive from the
//! source queue only; the table on-demand, encrypted with KMS (the AWS
//! managed key), with point-in-time recovery, deletion protection and TTL
//! on the markers' expiry. An existing resource that falls short of that is
//! left as it is and reported in [`InitReport::violations`], with the
//! numbers.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName as Attr;
use serde::Serialize;
use serde_json::json;

use crate::config::{TableLayout, check_marker_ttl};
pub use crate::store::dynamodb::TableProtection;
use crate::store::dynamodb::TableProvisioner;
use crate::store::{Provision, ProvisionError};

/// SQS's longest retention, used for the DLQ so a dead letter outlives the
/// message it came from.
pub const DLQ_RETENTION: Duration = Duration::from_secs(14 * 24 * 3600);
/// SQS's default retention, used for the source queue.
pub const SOURCE_RETENTION: Duration = crate::queue::DEFAULT_RETENTION;
/// The templates' least `maxReceiveCount` (SAM's `MaxReceiveCount`
/// `MinValue`, Terraform's `max_receive_count` validation): fewer receives
/// leave too little room for backoff to ride out an outage.
pub(crate) const MIN_MAX_RECEIVE_COUNT: u32 = 5;
/// The source retentions the templates allow: 1 to 13 days, below the
/// DLQ's 14 so a dead letter outlives the message it came from.
pub(crate) const SOURCE_RETENTION_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_secs(24 * 3600)..=Duration::from_secs(13 * 24 * 3600);

/// What to create.
#[derive(Debug, Clone)]
pub struct InitSpec {
    /// Source queue name; `.fifo` is added for a FIFO queue if missing.
    pub queue_name: String,
    /// A FIFO queue (and a FIFO DLQ).
    pub fifo: bool,
    /// Receives before SQS moves a message to the DLQ.
    pub max_receive_count: u32,
    /// The source queue's visibility timeout.
    pub visibility_timeout: Duration,
    /// The table and its attribute names.
    pub layout: TableLayout,
    /// The marker TTL the consumers will use, checked against retention.
    pub marker_ttl: Duration,
}

/// The resources, as printed by `idemq init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InitReport {
    /// The source queue's URL.
    pub queue_url: String,
    /// The DLQ's URL.
    pub dlq_url: String,
    /// The table's name (on PostgreSQL: the schema, as
    /// [`init_store`] names it).
    pub table_name: String,
    /// What init created this time (empty on a second run).
    #[serde(skip)]
    pub created: Vec<String>,
    /// Problems that do not stop init, such as a marker TTL that is too short.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Existing resources that break the templates' rules (unencrypted, no
    /// point-in-time recovery, …), with the numbers. Left as they are:
    /// `idemq init` prints them and exits 1.
    #[serde(skip)]
    pub violations: Vec<String>,
}

/// Why `idemq init` could not create or verify the resources.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The spec itself is invalid (a queue name, a count out of range).
    #[error("{0}")]
    InvalidSpec(String),
    /// A resource exists with a different setting than asked for.
    #[error(
        "{resource} exists with {attribute} = {found}, but {expected} was asked for; change it by hand or pick another name"
    )]
    Mismatch {
        /// The queue or table.
        resource: String,
        /// The setting.
        attribute: &'static str,
        /// What was asked for.
        expected: String,
        /// What it has.
        found: String,
    },
    /// An SQS call failed.
    #[error("SQS: {0}")]
    Sqs(String),
    /// A DynamoDB call failed.
    #[error("DynamoDB: {0}")]
    DynamoDb(String),
    /// A store's call failed (its message names the store).
    #[error("{0}")]
    Store(String),
    /// The table (name) did not become `ACTIVE` within the wait (duration).
    #[error("table {0} did not become ACTIVE within {1:?}")]
    TableNotActive(String, Duration),
}

impl From<ProvisionError> for InitError {
    fn from(e: ProvisionError) -> Self {
        match e {
            ProvisionError::Mismatch {
                resource,
                attribute,
                expected,
                found,
            } => Self::Mismatch {
                resource,
                attribute,
                expected,
                found,
            },
            ProvisionError::Store(s) => Self::Store(s),
            ProvisionError::NotReady(name, wait) => Self::TableNotActive(name, wait),
        }
    }
}

impl From<crate::queue::QueueError> for InitError {
    fn from(e: crate::queue::QueueError) -> Self {
        match e {
            crate::queue::QueueError::Sqs(s) => Self::Sqs(s),
            other => Self::Sqs(other.to_string()),
        }
    }
}

impl InitSpec {
    /// The queue names, after validation: (source, DLQ).
    pub fn queue_names(&self) -> Result<(String, String), InitError> {
        let base = self
            .queue_name
            .strip_suffix(".fifo")
            .unwrap_or(&self.queue_name);
        if self.queue_name.ends_with(".fifo") && !self.fifo {
            return Err(InitError::InvalidSpec(format!(
                "queue name {:?} ends in .fifo; pass --fifo for a FIFO queue",
                self.queue_name
            )));
        }
        let suffix = if self.fifo { ".fifo" } else { "" };
        let names = (format!("{base}{suffix}"), format!("{base}-dlq{suffix}"));
        for name in [&names.0, &names.1] {
            let stem = name.strip_suffix(".fifo").unwrap_or(name);
            let ok_chars = stem
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if stem.is_empty() || !ok_chars || name.len() > 80 {
                return Err(invalid_queue_name(name));
            }
        }
        if !(1..=1000).contains(&self.max_receive_count) {
            return Err(InitError::InvalidSpec(format!(
                "--max-receive-count {} is out of range 1..=1000",
                self.max_receive_count
            )));
        }
        if self.visibility_timeout > crate::backoff::MAX_IN_FLIGHT {
            return Err(InitError::InvalidSpec(format!(
                "--visibility-timeout-secs {} is over SQS's 43200 (12 h)",
                self.visibility_timeout.as_secs()
            )));
        }
        Ok(names)
    }

    /// What the templates' parameters refuse and [`init`] itself accepts
    /// (tests dead-letter after 1 receive to be quick): `idemq init` checks
    /// this first and stops with a usage error.
    pub fn check_template_rules(&self) -> Result<(), InitError> {
        if self.max_receive_count < MIN_MAX_RECEIVE_COUNT {
            return Err(InitError::InvalidSpec(format!(
                "--max-receive-count {} is below {MIN_MAX_RECEIVE_COUNT}, the templates' minimum: \
                 fewer receives leave too little room for backoff to ride out an outage",
                self.max_receive_count
            )));
        }
        Ok(())
    }
}

fn sqs_err(e: impl std::error::Error) -> InitError {
    InitError::Sqs(DisplayErrorContext(e).to_string())
}

fn invalid_queue_name(name: &str) -> InitError {
    InitError::InvalidSpec(format!(
        "queue name {name:?} is invalid: 1-80 characters of A-Z a-z 0-9 - _ (plus .fifo)"
    ))
}

/// Creates or verifies the DLQ, the source queue (redriving to the DLQ) and
/// the table, in that order.
pub async fn init(
    sqs: &aws_sdk_sqs::Client,
    ddb: &aws_sdk_dynamodb::Client,
    spec: &InitSpec,
) -> Result<InitReport, InitError> {
    init_with(sqs, ddb, spec, TableProtection::TEMPLATES).await
}

/// [`init`] with the table's protection chosen.
pub async fn init_with(
    sqs: &aws_sdk_sqs::Client,
    ddb: &aws_sdk_dynamodb::Client,
    spec: &InitSpec,
    protection: TableProtection,
) -> Result<InitReport, InitError> {
    let table = TableProvisioner::new(ddb.clone(), spec.layout.clone(), protection);
    let mut report = init_store(sqs, &table, spec).await.map_err(|e| match e {
        InitError::Store(s) => InitError::DynamoDb(s),
        other => other,
    })?;
    report.table_name = spec.layout.table_name.clone();
    Ok(report)
}

/// [`init_with`] for any store: the queues as the templates make them, and
/// `store`'s schema ([`Provision`]); the report's `table_name` is the
/// schema's resource as the store names it (`schema idemq (version 1)` on
/// PostgreSQL). `spec.layout` is not read.
pub async fn init_store(
    sqs: &aws_sdk_sqs::Client,
    store: &dyn Provision,
    spec: &InitSpec,
) -> Result<InitReport, InitError> {
    let (queue_name, dlq_name) = spec.queue_names()?;
    let mut created = Vec::new();
    let mut violations = Vec::new();
    let fifo = spec.fifo.then(|| (Attr::FifoQueue, "true".to_owned()));

    let dlq_attrs: Vec<(Attr, String)> = [
        Some((
            Attr::MessageRetentionPeriod,
            DLQ_RETENTION.as_secs().to_string(),
        )),
        Some((Attr::SqsManagedSseEnabled, "true".to_owned())),
        fifo.clone(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let dlq_url = ensure_queue(sqs, &dlq_name, &dlq_attrs, &mut created, &mut violations).await?;
    let dlq_arn = crate::queue::arn(sqs, &dlq_url).await?;

    let redrive =
        json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": spec.max_receive_count});
    let queue_attrs: Vec<(Attr, String)> = [
        Some((
            Attr::VisibilityTimeout,
            spec.visibility_timeout.as_secs().to_string(),
        )),
        Some((Attr::RedrivePolicy, redrive.to_string())),
        Some((Attr::SqsManagedSseEnabled, "true".to_owned())),
        fifo,
    ]
    .into_iter()
    .flatten()
    .collect();
    let queue_url = ensure_queue(
        sqs,
        &queue_name,
        &queue_attrs,
        &mut created,
        &mut violations,
    )
    .await?;
    let queue_arn = crate::queue::arn(sqs, &queue_url).await?;

    // Only this queue may redrive into the DLQ, so a replay can always find
    // where a dead letter came from.
    let allow = json!({"redrivePermission": "byQueue", "sourceQueueArns": [queue_arn]});
    sqs.set_queue_attributes()
        .queue_url(&dlq_url)
        .attributes(Attr::RedriveAllowPolicy, allow.to_string())
        .send()
        .await
        .map_err(sqs_err)?;

    let provisioned = store.provision(&mut violations).await?;
    if provisioned.created {
        created.push(provisioned.name.clone());
    }

    let source_retention = crate::queue::retention(sqs, &queue_url).await?;
    if !SOURCE_RETENTION_RANGE.contains(&source_retention) {
        violations.push(format!(
            "queue {queue_name} keeps messages {} s; the templates allow {} to {} s \
             (1 to 13 days, below the DLQ's {} s, so a dead letter outlives its original)",
            source_retention.as_secs(),
            SOURCE_RETENTION_RANGE.start().as_secs(),
            SOURCE_RETENTION_RANGE.end().as_secs(),
            DLQ_RETENTION.as_secs(),
        ));
    }
    let warnings = check_marker_ttl(spec.marker_ttl, source_retention, DLQ_RETENTION)
        .err()
        .map(|e| e.to_string())
        .into_iter()
        .chain(retry_budget_warning(spec, source_retention))
        .collect();
    Ok(InitReport {
        queue_url,
        dlq_url,
        table_name: provisioned.name,
        created,
        warnings,
        violations,
    })
}

/// The start-up check of [`crate::backoff::check_retries_fit_retention`]
/// for the queue init made: its maxReceiveCount and visibility timeout, the
/// consumers' backoff (`IDEMQ_BACKOFF_BASE` / `IDEMQ_BACKOFF_CAP`, or the
/// default when unset or invalid) and `retention`.
pub(crate) fn retry_budget_warning(spec: &InitSpec, retention: Duration) -> Option<String> {
    let backoff = crate::config::BatchConfig::from_env()
        .map(|c| c.backoff)
        .unwrap_or_default();
    crate::backoff::check_retries_fit_retention(
        &backoff,
        spec.max_receive_count,
        spec.visibility_timeout,
        retention,
    )
    .err()
    .map(|e| e.to_string())
}

async fn ensure_queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    wanted: &[(Attr, String)],
    created: &mut Vec<String>,
    violations: &mut Vec<String>,
) -> Result<String, InitError> {
    match sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => {
            let url = out.queue_url().unwrap_or_default().to_owned();
            let found = crate::queue::attributes(sqs, &url, &[Attr::All]).await?;
            for (attr, expected) in wanted {
                verify_attribute(name, attr, expected, found.get(attr))?;
            }
            violations.extend(unencrypted_queue(name, &found));
            Ok(url)
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_queue_does_not_exist()) =>
        {
            let attrs: HashMap<Attr, String> = wanted.iter().cloned().collect();
            let out = sqs
                .create_queue()
                .queue_name(name)
                .set_attributes(Some(attrs))
                .send()
                .await
                .map_err(sqs_err)?;
            created.push(format!("queue {name}"));
            Ok(out.queue_url().unwrap_or_default().to_owned())
        }
        Err(e) => Err(sqs_err(e)),
    }
}

/// Compares one attribute of an existing queue; a redrive policy is compared
/// by meaning (SQS may return the count as a string or a number).
fn verify_attribute(
    queue: &str,
    attr: &Attr,
    expected: &str,
    found: Option<&String>,
) -> Result<(), InitError> {
    let found_str = found.map(String::as_str).unwrap_or("(unset)");
    let same = match attr {
        Attr::RedrivePolicy => {
            let norm = |s: &str| -> Option<(String, String)> {
                let v: serde_json::Value = serde_json::from_str(s).ok()?;
                let count = match &v["maxReceiveCount"] {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some((v["deadLetterTargetArn"].as_str()?.to_owned(), count))
            };
            found.and_then(|f| norm(f)) == norm(expected)
        }
        // Older queues and some emulators omit SSE; it is not worth failing over.
        Attr::SqsManagedSseEnabled => true,
        _ => found_str == expected,
    };
    if same {
        return Ok(());
    }
    Err(InitError::Mismatch {
        resource: format!("queue {queue}"),
        attribute: attr_name(attr),
        expected: expected.to_owned(),
        found: found_str.to_owned(),
    })
}

/// An existing queue without encryption at rest: neither SSE-SQS nor a KMS
/// key. The templates encrypt both queues (`SqsManagedSseEnabled: true`).
fn unencrypted_queue(name: &str, found: &HashMap<Attr, String>) -> Option<String> {
    let sse = found.get(&Attr::SqsManagedSseEnabled).map(String::as_str);
    let kms = found.get(&Attr::KmsMasterKeyId).filter(|k| !k.is_empty());
    (sse != Some("true") && kms.is_none()).then(|| {
        format!(
            "queue {name} is not encrypted at rest (SqsManagedSseEnabled={}, no KmsMasterKeyId); \
             the templates set SqsManagedSseEnabled=true",
            sse.unwrap_or("unset")
        )
    })
}

fn attr_name(attr: &Attr) -> &'static str {
    match attr {
        Attr::RedrivePolicy => "RedrivePolicy",
        Attr::VisibilityTimeout => "VisibilityTimeout",
        Attr::MessageRetentionPeriod => "MessageRetentionPeriod",
        Attr::FifoQueue => "FifoQueue",
        _ => "an attribute",
    }
}

/// Creates the table as the templates do, or verifies the existing one's
/// key and TTL. True when it was created. [`init`] also reports an existing
/// table's shortfalls against the templates (encryption, point-in-time
/// recovery, deletion protection, on-demand billing).
pub async fn ensure_table(
    ddb: &aws_sdk_dynamodb::Client,
    layout: &TableLayout,
) -> Result<bool, InitError> {
    let table = TableProvisioner::new(ddb.clone(), layout.clone(), TableProtection::TEMPLATES);
    Ok(table.provision(&mut Vec::new()).await?.created)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, fifo: bool) -> InitSpec {
        InitSpec {
            queue_name: name.into(),
            fifo,
            max_receive_count: 6,
            visibility_timeout: Duration::from_secs(30),
            layout: TableLayout::new("t"),
            marker_ttl: crate::config::DEFAULT_MARKER_TTL,
        }
    }

    #[test]
    fn queue_names() {
        assert_eq!(
            spec("jobs", false).queue_names().unwrap(),
            ("jobs".into(), "jobs-dlq".into())
        );
        assert_eq!(
            spec("jobs", true).queue_names().unwrap(),
            ("jobs.fifo".into(), "jobs-dlq.fifo".into())
        );
        assert_eq!(
            spec("jobs.fifo", true).queue_names().unwrap(),
            ("jobs.fifo".into(), "jobs-dlq.fifo".into())
        );
        let err = spec("jobs.fifo", false)
            .queue_names()
            .unwrap_err()
            .to_string();
        assert!(err.contains("--fifo"), "{err}");
        for bad in ["", "a b", "x".repeat(77).as_str(), "ü"] {
            let err = spec(bad, false).queue_names().unwrap_err().to_string();
            assert!(err.contains("is invalid"), "{bad}: {err}");
        }
        let mut s = spec("jobs", false);
        s.max_receive_count = 0;
        assert!(s.queue_names().is_err());
        s.max_receive_count = 6;
        s.visibility_timeout = Duration::from_secs(43_201);
        assert!(s.queue_names().unwrap_err().to_string().contains("43200"));
    }

    #[test]
    fn redrive_policy_is_compared_by_meaning() {
        let want = r#"{"deadLetterTargetArn":"arn:q","maxReceiveCount":6}"#;
        let as_string = r#"{"maxReceiveCount":"6","deadLetterTargetArn":"arn:q"}"#.to_string();
        assert!(verify_attribute("q", &Attr::RedrivePolicy, want, Some(&as_string)).is_ok());
        let other = r#"{"deadLetterTargetArn":"arn:q","maxReceiveCount":3}"#.to_string();
        let err = verify_attribute("q", &Attr::RedrivePolicy, want, Some(&other)).unwrap_err();
        assert!(err.to_string().contains("RedrivePolicy"), "{err}");
        assert!(verify_attribute("q", &Attr::RedrivePolicy, want, None).is_err());
        let vt = "60".to_string();
        assert!(verify_attribute("q", &Attr::VisibilityTimeout, "30", Some(&vt)).is_err());
    }
}
