//! Unit tests of the EMF metrics (src/metrics.rs).

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
