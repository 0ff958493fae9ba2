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
mod tests {
    use super::*;

    const COUNTERS: [&str; 10] = [
        "JobsSucceeded",
        "JobsDuplicate",
        "JobsRetried",
        "JobsDeadLettered",
        "JobsConflict",
        "JobsContended",
        "JobsMisconfigured",
        "FollowUpsNotResent",
        "JobsExpired",
        "BatchSize",
    ];

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn parse(line: &str) -> Value {
        assert!(!line.contains('\n'), "EMF must be one line: {line}");
        serde_json::from_str(line).expect("EMF line is JSON")
    }

    /// The `(Name, Unit)` pairs a line declares.
    fn declared(line: &Value) -> Vec<(String, String)> {
        let directives = line["_aws"]["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 1);
        directives[0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["Name"].as_str().unwrap().to_owned(),
                    m["Unit"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// What the spec demands of every line, whatever it carries.
    fn assert_valid_emf(line: &Value, queue: &str, timestamp_ms: u64) {
        let aws = &line["_aws"];
        assert_eq!(aws["Timestamp"], json!(timestamp_ms));
        let directive = &aws["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "idemq");
        assert_eq!(directive["Dimensions"], json!([["Queue"]]));
        assert_eq!(line["Queue"], queue);
        for (name, _) in declared(line) {
            let value = &line[&name];
            assert!(!value.is_null(), "declared {name} has no value");
            if let Some(values) = value.as_array() {
                assert!(!values.is_empty(), "{name} is an empty array");
                assert!(values.len() <= 100, "{name} has {} values", values.len());
            }
        }
    }

    fn sample() -> BatchMetrics {
        BatchMetrics {
            succeeded: 7,
            duplicate: 2,
            retried: 3,
            dead_lettered: 1,
            conflict: 4,
            contended: 9,
            misconfigured: 5,
            follow_ups_not_resent: 6,
            expired: 7,
            batch_size: 17,
            job_durations: vec![
                ms(12),
                Duration::from_micros(1_500),
                Duration::from_nanos(1_234_567),
                Duration::ZERO,
                Duration::from_secs(2),
            ],
        }
    }

    #[test]
    fn emf_line_has_the_contracted_shape() {
        let at = UNIX_EPOCH + Duration::from_millis(1_733_140_800_123);
        let lines = sample().to_emf_lines("orders-queue", at);
        assert_eq!(lines.len(), 1);
        let line = parse(&lines[0]);
        assert_valid_emf(&line, "orders-queue", 1_733_140_800_123);

        let mut want: Vec<(String, String)> = COUNTERS
            .iter()
            .map(|n| (n.to_string(), "Count".to_owned()))
            .collect();
        want.push(("JobDuration".into(), "Milliseconds".into()));
        let mut got = declared(&line);
        got.sort();
        want.sort();
        assert_eq!(got, want);

        assert_eq!(line["JobsSucceeded"], 7);
        assert_eq!(line["JobsDuplicate"], 2);
        assert_eq!(line["JobsRetried"], 3);
        assert_eq!(line["JobsDeadLettered"], 1);
        assert_eq!(line["JobsConflict"], 4);
        assert_eq!(line["JobsContended"], 9);
        assert_eq!(line["JobsMisconfigured"], 5);
        assert_eq!(line["FollowUpsNotResent"], 6);
        assert_eq!(line["JobsExpired"], 7);
        assert_eq!(line["BatchSize"], 17);
        assert_eq!(
            line["JobDuration"],
            json!([12.0, 1.5, 1.234, 0.0, 2000.0]),
            "milliseconds with 3 decimals, in order"
        );
        assert_eq!(line[IDEMQ_VERSION_PROPERTY], crate::failure::IDEMQ_VERSION);
        let deploy = usize::from(!crate::failure::deploy().is_empty());
        // Nothing beyond the metrics, the dimension, the deploy's
        // properties and `_aws`.
        assert_eq!(
            line.as_object().unwrap().len(),
            COUNTERS.len() + 1 + 1 + 1 + 1 + deploy
        );
    }

    #[test]
    fn zero_counters_are_still_emitted_and_no_durations_means_no_duration_metric() {
        let lines = BatchMetrics::default().to_emf_lines("q", UNIX_EPOCH);
        assert_eq!(lines.len(), 1);
        let line = parse(&lines[0]);
        assert_valid_emf(&line, "q", 0);
        for name in COUNTERS {
            assert_eq!(line[name], 0, "{name}");
        }
        assert!(line.get("JobDuration").is_none());
        assert!(declared(&line).iter().all(|(n, _)| n != "JobDuration"));
    }

    #[test]
    fn durations_are_split_into_lines_of_at_most_100() {
        let batch = BatchMetrics {
            succeeded: 250,
            batch_size: 250,
            job_durations: (0..250).map(ms).collect(),
            ..Default::default()
        };
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let lines: Vec<Value> = batch
            .to_emf_lines("big", at)
            .iter()
            .map(|l| parse(l))
            .collect();
        assert_eq!(lines.len(), 3);

        let sizes: Vec<usize> = lines
            .iter()
            .map(|l| l["JobDuration"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        let all: Vec<f64> = lines
            .iter()
            .flat_map(|l| l["JobDuration"].as_array().unwrap().clone())
            .map(|v| v.as_f64().unwrap())
            .collect();
        let want: Vec<f64> = (0..250).map(|n| n as f64).collect();
        assert_eq!(all, want, "every duration once, in order");

        for line in &lines {
            assert_valid_emf(line, "big", 1_700_000_000_000);
        }
        // Counters once per batch, or CloudWatch sums would be tripled.
        assert_eq!(lines[0]["JobsSucceeded"], 250);
        assert_eq!(lines[0]["BatchSize"], 250);
        for line in &lines[1..] {
            assert_eq!(
                declared(line),
                [("JobDuration".to_owned(), "Milliseconds".to_owned())]
            );
            for name in COUNTERS {
                assert!(line.get(name).is_none(), "{name} repeated");
            }
        }
    }

    #[test]
    fn split_boundaries() {
        let with = |n: u64| BatchMetrics {
            job_durations: (0..n).map(ms).collect(),
            ..Default::default()
        };
        assert_eq!(with(100).to_emf_lines("q", UNIX_EPOCH).len(), 1);
        assert_eq!(with(101).to_emf_lines("q", UNIX_EPOCH).len(), 2);
        assert_eq!(with(200).to_emf_lines("q", UNIX_EPOCH).len(), 2);
        // A full Lambda batch (10,000 messages).
        let lines = with(10_000).to_emf_lines("q", UNIX_EPOCH);
        assert_eq!(lines.len(), 100);
        assert!(lines.iter().all(|l| l.len() < 256 * 1024));
    }

    #[test]
    fn queue_names_and_odd_timestamps_stay_valid_json() {
        let before_epoch = UNIX_EPOCH - Duration::from_secs(1);
        let line = parse(&sample().to_emf_lines("a\"b\\c.fifo", before_epoch)[0]);
        assert_valid_emf(&line, "a\"b\\c.fifo", 0);
    }

    #[test]
    fn absorb_adds_counts_and_keeps_every_duration() {
        let mut total = BatchMetrics::default();
        total.absorb(&sample());
        assert_eq!(total, sample(), "absorbing into empty is a copy");
        total.absorb(&sample());
        assert_eq!(total.succeeded, 14);
        assert_eq!(total.duplicate, 4);
        assert_eq!(total.retried, 6);
        assert_eq!(total.dead_lettered, 2);
        assert_eq!(total.conflict, 8);
        assert_eq!(total.contended, 18);
        assert_eq!(total.misconfigured, 10);
        assert_eq!(total.follow_ups_not_resent, 12);
        assert_eq!(total.expired, 14);
        assert_eq!(total.batch_size, 34);
        assert_eq!(total.job_durations.len(), 10);
        assert_eq!(total.job_durations[5..], sample().job_durations[..]);

        let mut full = BatchMetrics {
            succeeded: u64::MAX,
            ..Default::default()
        };
        full.absorb(&sample());
        assert_eq!(full.succeeded, u64::MAX, "saturates");
    }

    #[test]
    fn summary_reports_counts_and_nearest_rank_percentiles() {
        // 1..=100 ms, shuffled: p50 is the 50th value, p99 the 99th.
        let mut durations: Vec<Duration> = (1..=100).map(ms).collect();
        durations.reverse();
        durations.swap(3, 70);
        let total = BatchMetrics {
            succeeded: 400,
            duplicate: 100,
            retried: 30,
            dead_lettered: 12,
            conflict: 0,
            contended: 0,
            misconfigured: 0,
            follow_ups_not_resent: 0,
            expired: 0,
            batch_size: 542,
            job_durations: durations,
        };
        assert_eq!(
            total.summary(),
            "jobs 542: succeeded 400, duplicate 100, retried 30, dead-lettered 12, \
             conflict 0; p50 50 ms, p99 99 ms"
        );
        let raced = BatchMetrics {
            contended: 12,
            ..total
        };
        assert!(
            raced.summary().contains("conflict 0, contended 12; p50"),
            "{}",
            raced.summary()
        );
        let misdeployed = BatchMetrics {
            misconfigured: 3,
            ..raced
        };
        assert!(
            misdeployed
                .summary()
                .contains("contended 12, misconfigured 3; p50"),
            "{}",
            misdeployed.summary()
        );
        let aged = BatchMetrics {
            follow_ups_not_resent: 2,
            ..misdeployed
        };
        assert!(
            aged.summary()
                .contains("misconfigured 3, follow-ups not re-sent 2; p50"),
            "{}",
            aged.summary()
        );
        let expired = BatchMetrics { expired: 2, ..aged };
        assert!(
            expired
                .summary()
                .contains("follow-ups not re-sent 2, expired 2; p50"),
            "{}",
            expired.summary()
        );
    }

    #[test]
    fn percentiles_on_small_and_skewed_lists() {
        let sorted = |v: &[u64]| {
            let mut v: Vec<Duration> = v.iter().copied().map(ms).collect();
            v.sort();
            v
        };
        assert_eq!(percentile(&[], 50), None);
        assert_eq!(percentile(&sorted(&[7]), 50), Some(ms(7)));
        assert_eq!(percentile(&sorted(&[7]), 99), Some(ms(7)));
        assert_eq!(percentile(&sorted(&[30, 10, 20]), 50), Some(ms(20)));
        assert_eq!(percentile(&sorted(&[30, 10, 20]), 99), Some(ms(30)));
        // One slow job in 200: p99 stays fast, the tail is not averaged in.
        let mut skewed = vec![4; 199];
        skewed.push(5_000);
        assert_eq!(percentile(&sorted(&skewed), 99), Some(ms(4)));
        assert_eq!(percentile(&sorted(&skewed), 100), Some(ms(5_000)));
    }

    #[test]
    fn summary_formats_small_and_missing_durations() {
        let fast = BatchMetrics {
            batch_size: 1,
            succeeded: 1,
            job_durations: vec![Duration::from_micros(400)],
            ..Default::default()
        };
        assert!(
            fast.summary().ends_with("; p50 0.4 ms, p99 0.4 ms"),
            "{}",
            fast.summary()
        );
        let none = BatchMetrics::default();
        assert_eq!(
            none.summary(),
            "jobs 0: succeeded 0, duplicate 0, retried 0, dead-lettered 0, conflict 0; \
             no job durations"
        );
    }
}
