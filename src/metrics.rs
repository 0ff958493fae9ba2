//! Per-batch metrics as CloudWatch Embedded Metric Format (EMF) log lines.
//!
//! On Lambda, a JSON line printed to stdout with an `_aws` member becomes
//! CloudWatch metrics without a `PutMetricData` call (no extra latency, no
//! extra IAM permission, no lost metrics when the function times out after
//! printing). Namespace [`NAMESPACE`], one dimension [`QUEUE_DIMENSION`],
//! and the deploy as properties ([`DEPLOY_PROPERTY`],
//! [`IDEMQ_VERSION_PROPERTY`]) for Logs Insights to group by:
//!
//! | metric             | unit         | value                               |
//! |--------------------|--------------|-------------------------------------|
//! | `JobsSucceeded`    | Count        | jobs committed by this batch        |
//! | `JobsDuplicate`    | Count        | jobs whose marker already existed   |
//! | `JobsRetried`      | Count        | jobs handed back to SQS to retry    |
//! | `JobsDeadLettered` | Count        | jobs given up on                    |
//! | `JobsConflict`     | Count        | same job id, different payload      |
//! | `JobsContended`    | Count        | races lost: optimistic conditions and `TransactionConflict` cancellations (each one, also those re-run at once) |
//! | `JobsMisconfigured`| Count        | jobs failed by the deployment (a permission the role lacks, a missing table) |
//! | `FollowUpsNotResent`| Count       | follow-ups a duplicate found in its marker and did not re-send: the marker was committed longer ago than the follow-up horizon, or has no commit time ([`crate::followup`]) |
//! | `JobsExpired`      | Count        | jobs not run because they were first enqueued a marker TTL ago or more (dead-lettered, kind `expired`) |
//! | `JobDuration`      | Milliseconds | one value per job                   |
//! | `BatchSize`        | Count        | messages in the batch               |
//!
//! The dead-letter rate alarm is built on `JobsDeadLettered`, because SQS's
//! own `NumberOfMessagesSent` does not count native redrives; counters are
//! therefore emitted even when zero, so the rate has a denominator. The
//! deployment alarm fires on the first `JobsMisconfigured`: one such job
//! means every job fails alike until a deploy.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The CloudWatch namespace of every idemq metric.
pub const NAMESPACE: &str = "idemq";

/// The one dimension: the source queue's name.
pub const QUEUE_DIMENSION: &str = "Queue";

/// The EMF specification allows at most 100 values in one metric's array;
/// CloudWatch drops a line that carries more.
pub const MAX_VALUES_PER_METRIC: usize = 100;

const COUNT: &str = "Count";
const MILLISECONDS: &str = "Milliseconds";
const JOB_DURATION: &str = "JobDuration";

/// What one batch did. The batch handler fills the fields; the local worker
/// [`absorb`](Self::absorb)s every batch into a total for its exit summary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchMetrics {
    /// Jobs committed (`JobsSucceeded`).
    pub succeeded: u64,
    /// Jobs whose marker already existed (`JobsDuplicate`).
    pub duplicate: u64,
    /// Jobs handed back to SQS to retry (`JobsRetried`).
    pub retried: u64,
    /// Jobs given up on: sent to the DLQ by idemq (`JobsDeadLettered`).
    pub dead_lettered: u64,
    /// Jobs whose id was committed with another payload (`JobsConflict`).
    pub conflict: u64,
    /// Optimistic-concurrency races lost (`JobsContended`): every commit
    /// that failed only on a [`Write::optimistic`](crate::store::dynamodb::Write::optimistic)
    /// condition, whether the job was then re-run at once or backed off. A
    /// job can lose several, so this can exceed the batch size. Commits
    /// cancelled by a concurrent transaction on one of their items
    /// (`TransactionConflict`) are lost races too, counted here.
    pub contended: u64,
    /// Jobs that failed because of the deployment, not the job
    /// (`JobsMisconfigured`): the role lacks a permission on a table the
    /// commit writes, or the table does not exist.
    pub misconfigured: u64,
    /// Follow-ups stored in a duplicate's marker that were not re-sent
    /// (`FollowUpsNotResent`): its commit was at least the follow-up
    /// horizon ago, or the marker has no commit time
    /// ([`crate::followup`]). Expected after a producer re-sends a job
    /// long after it ran; after an upgrade, check the log's job ids.
    pub follow_ups_not_resent: u64,
    /// Jobs not run because their first enqueue is a marker TTL ago or
    /// more (`JobsExpired`; counted in `dead_lettered` too): their markers
    /// may be gone, so only an operator may apply them
    /// ([`crate::horizon`]).
    pub expired: u64,
    /// Messages received in the batch (after `absorb`: in all batches).
    pub batch_size: u64,
    /// One entry per job that ran, in the order they finished.
    pub job_durations: Vec<Duration>,
}

impl BatchMetrics {
    /// The EMF lines for this batch at `timestamp`, without trailing newlines.
    ///
    /// Usually one line. A Lambda batch can hold up to 10,000 messages, but
    /// an EMF array at most [`MAX_VALUES_PER_METRIC`] values, so job
    /// durations past the first 100 go on further lines of 100. Every line
    /// declares only the metrics it carries: the counters are on the first
    /// line only (once per batch, so sums stay right), the later lines carry
    /// `JobDuration` alone. Dropping or averaging the extra durations would
    /// bias percentiles; this is also how AWS's own EMF libraries split.
    ///
    /// `queue` is the queue *name* (not its URL): the dimension value.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use idemq::metrics::BatchMetrics;
    ///
    /// let batch = BatchMetrics {
    ///     succeeded: 2,
    ///     batch_size: 2,
    ///     job_durations: vec![Duration::from_millis(3), Duration::from_micros(1500)],
    ///     ..Default::default()
    /// };
    /// let lines = batch.to_emf_lines("orders", UNIX_EPOCH + Duration::from_secs(1));
    /// assert_eq!(lines.len(), 1);
    /// let line: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    /// assert_eq!(line["_aws"]["Timestamp"], 1000);
    /// assert_eq!(line["Queue"], "orders");
    /// assert_eq!(line["JobsSucceeded"], 2);
    /// assert_eq!(line["JobDuration"], serde_json::json!([3.0, 1.5]));
    /// ```
    pub fn to_emf_lines(&self, queue: &str, timestamp: SystemTime) -> Vec<String> {
        let timestamp_ms = timestamp
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut chunks = self.job_durations.chunks(MAX_VALUES_PER_METRIC);
        let mut lines = vec![emf_line(
            queue,
            timestamp_ms,
            &self.counters(),
            chunks.next().unwrap_or_default(),
        )];
        lines.extend(chunks.map(|chunk| emf_line(queue, timestamp_ms, &[], chunk)));
        lines
    }

    /// Adds another batch's counts and durations to these.
    pub fn absorb(&mut self, other: &BatchMetrics) {
        self.succeeded = self.succeeded.saturating_add(other.succeeded);
        self.duplicate = self.duplicate.saturating_add(other.duplicate);
        self.retried = self.retried.saturating_add(other.retried);
        self.dead_lettered = self.dead_lettered.saturating_add(other.dead_lettered);
        self.conflict = self.conflict.saturating_add(other.conflict);
        self.contended = self.contended.saturating_add(other.contended);
        self.misconfigured = self.misconfigured.saturating_add(other.misconfigured);
        self.follow_ups_not_resent = self
            .follow_ups_not_resent
            .saturating_add(other.follow_ups_not_resent);
        self.expired = self.expired.saturating_add(other.expired);
        self.batch_size = self.batch_size.saturating_add(other.batch_size);
        self.job_durations.extend_from_slice(&other.job_durations);
    }

    /// One human line for the local worker's exit summary.
    ///
    /// `jobs` is [`batch_size`](Self::batch_size), the messages received;
    /// percentiles are nearest-rank over [`job_durations`](Self::job_durations).
    /// Lost races ([`contended`](Self::contended)) and jobs failed by the
    /// deployment ([`misconfigured`](Self::misconfigured)), stored
    /// follow-ups a duplicate did not re-send
    /// ([`follow_ups_not_resent`](Self::follow_ups_not_resent)) and jobs
    /// refused as [`expired`](Self::expired) are shown when there were any
    /// (`…, conflict 0, contended 12, misconfigured 3; …`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use idemq::metrics::BatchMetrics;
    ///
    /// let total = BatchMetrics {
    ///     succeeded: 3,
    ///     retried: 1,
    ///     batch_size: 4,
    ///     job_durations: [4, 5, 21].map(Duration::from_millis).to_vec(),
    ///     ..Default::default()
    /// };
    /// assert_eq!(
    ///     total.summary(),
    ///     "jobs 4: succeeded 3, duplicate 0, retried 1, dead-lettered 0, conflict 0; \
    ///      p50 5.0 ms, p99 21 ms"
    /// );
    /// ```
    pub fn summary(&self) -> String {
        let mut sorted = self.job_durations.clone();
        sorted.sort_unstable();
        let latency = match (percentile(&sorted, 50), percentile(&sorted, 99)) {
            (Some(p50), Some(p99)) => {
                format!("p50 {}, p99 {}", format_ms(p50), format_ms(p99))
            }
            _ => "no job durations".to_owned(),
        };
        let mut contended = match self.contended {
            0 => String::new(),
            n => format!(", contended {n}"),
        };
        if self.misconfigured > 0 {
            contended.push_str(&format!(", misconfigured {}", self.misconfigured));
        }
        if self.follow_ups_not_resent > 0 {
            contended.push_str(&format!(
                ", follow-ups not re-sent {}",
                self.follow_ups_not_resent
            ));
        }
        if self.expired > 0 {
            contended.push_str(&format!(", expired {}", self.expired));
        }
        format!(
            "jobs {}: succeeded {}, duplicate {}, retried {}, dead-lettered {}, conflict {}{contended}; {latency}",
            self.batch_size,
            self.succeeded,
            self.duplicate,
            self.retried,
            self.dead_lettered,
            self.conflict,
        )
    }

    fn counters(&self) -> [(&'static str, u64); 10] {
        [
            ("JobsSucceeded", self.succeeded),
            ("JobsDuplicate", self.duplicate),
            ("JobsRetried", self.retried),
            ("JobsDeadLettered", self.dead_lettered),
            ("JobsConflict", self.conflict),
            ("JobsContended", self.contended),
            ("JobsMisconfigured", self.misconfigured),
            ("FollowUpsNotResent", self.follow_ups_not_resent),
            ("JobsExpired", self.expired),
            ("BatchSize", self.batch_size),
        ]
    }
}

/// EMF property: which deploy emitted the line
/// ([`crate::failure::deploy`]), left out where it is not known.
pub const DEPLOY_PROPERTY: &str = "Deploy";
/// EMF property: the idemq version that emitted the line.
pub const IDEMQ_VERSION_PROPERTY: &str = "IdemqVersion";

/// One EMF document declaring exactly the metrics it carries: the spec
/// requires a root member for every declared metric.
fn emf_line(
    queue: &str,
    timestamp_ms: u64,
    counters: &[(&str, u64)],
    durations: &[Duration],
) -> String {
    let mut root = Map::new();
    let mut declared = Vec::new();
    for &(name, value) in counters {
        declared.push(json!({ "Name": name, "Unit": COUNT }));
        root.insert(name.to_owned(), json!(value));
    }
    // An empty array would declare a metric with no value; leave it out.
    if !durations.is_empty() {
        declared.push(json!({ "Name": JOB_DURATION, "Unit": MILLISECONDS }));
        let values = durations.iter().map(|&d| json!(millis(d))).collect();
        root.insert(JOB_DURATION.to_owned(), Value::Array(values));
    }
    root.insert(QUEUE_DIMENSION.to_owned(), json!(queue));
    // Which deploy emitted the line, as properties: searchable and
    // groupable in CloudWatch Logs Insights, and no metrics of their own
    // (a version dimension would add every metric again for each deploy,
    // each a custom metric billed by the month).
    let deploy = crate::failure::deploy();
    if !deploy.is_empty() {
        root.insert(DEPLOY_PROPERTY.to_owned(), json!(deploy));
    }
    root.insert(
        IDEMQ_VERSION_PROPERTY.to_owned(),
        json!(crate::failure::IDEMQ_VERSION),
    );
    root.insert(
        "_aws".to_owned(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [[QUEUE_DIMENSION]],
                "Metrics": declared,
            }],
        }),
    );
    Value::Object(root).to_string()
}

/// Milliseconds with 3 decimals (whole microseconds): finer is noise.
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// Nearest-rank percentile of an ascending slice.
fn percentile(sorted: &[Duration], pct: usize) -> Option<Duration> {
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

/// Sub-10 ms values keep a decimal, so a 0.4 ms job does not read "0 ms".
fn format_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests;
