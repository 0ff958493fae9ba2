//! What CloudWatch knows of a consumer that its queues' attributes do not:
//! how many of its jobs were handed back to retry, hour by hour, and the
//! age of the oldest message waiting in its source queues.
//!
//! - Retries: the consumer's own metrics, which every batch prints as
//!   Embedded Metric Format lines (`idemq::metrics`): `JobsRetried` over
//!   `BatchSize` (every message received, so the rate's denominator), per
//!   hour, dimension `Queue` = the source queue's name.
//! - The oldest message's age: `ApproximateAgeOfOldestMessage` in `AWS/SQS`,
//!   which SQS publishes every minute while a queue is active
//!   (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html>);
//!   `GetQueueAttributes` has no such attribute, and receiving a message
//!   to see its age would spend one of its receives.
//!
//! One `GetMetricData` call reads all of it
//! (<https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html>),
//! at most once a minute per consumer (SQS's metrics have one-minute
//! resolution, and each metric read is billed). A console whose role may
//! not call it, or a stack without CloudWatch, shows why instead of the
//! numbers; nothing else depends on them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat, ScanBy};
use tokio::sync::Mutex;

/// How many hours the charts cover.
pub(crate) const HOURS: usize = 24;

/// How long a read is reused.
const MAX_AGE: Duration = Duration::from_secs(60);

/// A value older than this is not shown as the oldest message's age: SQS
/// stops publishing it when a queue has been inactive for a while.
const AGE_FRESH: Duration = Duration::from_secs(15 * 60);

/// What CloudWatch said about one consumer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Activity {
    /// When it was read.
    pub read_at: SystemTime,
    /// Jobs handed back to retry in each of the last [`HOURS`] hours,
    /// oldest first (`JobsRetried`).
    pub retried: Vec<u64>,
    /// Messages received in each of those hours (`BatchSize`).
    pub received: Vec<u64>,
    /// The age of the oldest message in the source queues (the largest
    /// of them), and when CloudWatch measured it; `None` when it has no
    /// value from the last 15 minutes.
    pub oldest: Option<(Duration, SystemTime)>,
}

impl Activity {
    /// Retried over received in the last hour, when anything was received.
    pub fn retry_rate_last_hour(&self) -> Option<f64> {
        let received = *self.received.last()?;
        let retried = *self.retried.last()?;
        (received > 0).then(|| retried as f64 / received as f64)
    }
}

/// Reads a consumer's [`Activity`], reusing a read younger than a minute.
pub(crate) struct Watch {
    client: aws_sdk_cloudwatch::Client,
    /// The source queues' names.
    queues: Vec<String>,
    last: Mutex<Option<Arc<Result<Activity, String>>>>,
}

impl Watch {
    pub fn new(client: aws_sdk_cloudwatch::Client, queues: Vec<String>) -> Self {
        Self {
            client,
            queues,
            last: Mutex::new(None),
        }
    }

    /// The activity as last read, read again when older than a minute.
    pub async fn activity(&self) -> Arc<Result<Activity, String>> {
        let mut last = self.last.lock().await;
        if let Some(read) = last.as_ref() {
            let at = match read.as_ref() {
                Ok(a) => a.read_at,
                Err(_) => SystemTime::UNIX_EPOCH,
            };
            if SystemTime::now().duration_since(at).unwrap_or_default() < MAX_AGE {
                return read.clone();
            }
        }
        let read = Arc::new(read(&self.client, &self.queues, SystemTime::now()).await);
        *last = Some(read.clone());
        read
    }
}

/// The ids of one source queue's three queries.
fn ids(i: usize) -> [String; 3] {
    [
        format!("retried{i}"),
        format!("received{i}"),
        format!("age{i}"),
    ]
}

fn query(
    id: &str,
    namespace: &str,
    name: &str,
    dimension: (&str, &str),
    period: i32,
    stat: &str,
) -> MetricDataQuery {
    MetricDataQuery::builder()
        .id(id)
        .metric_stat(
            MetricStat::builder()
                .metric(
                    Metric::builder()
                        .namespace(namespace)
                        .metric_name(name)
                        .dimensions(
                            Dimension::builder()
                                .name(dimension.0)
                                .value(dimension.1)
                                .build(),
                        )
                        .build(),
                )
                .period(period)
                .stat(stat)
                .build(),
        )
        .return_data(true)
        .build()
}

/// The queries for `queues`: per queue, the hourly sums of `JobsRetried`
/// and `BatchSize`, and the per-minute maximum of the oldest message's age.
fn queries(queues: &[String]) -> Vec<MetricDataQuery> {
    let mut all = Vec::new();
    for (i, queue) in queues.iter().enumerate() {
        let [retried, received, age] = ids(i);
        let idemq = (idemq::metrics::QUEUE_DIMENSION, queue.as_str());
        all.push(query(
            &retried,
            idemq::metrics::NAMESPACE,
            "JobsRetried",
            idemq,
            3600,
            "Sum",
        ));
        all.push(query(
            &received,
            idemq::metrics::NAMESPACE,
            "BatchSize",
            idemq,
            3600,
            "Sum",
        ));
        all.push(query(
            &age,
            "AWS/SQS",
            "ApproximateAgeOfOldestMessage",
            ("QueueName", queue.as_str()),
            60,
            "Maximum",
        ));
    }
    all
}

async fn read(
    client: &aws_sdk_cloudwatch::Client,
    queues: &[String],
    now: SystemTime,
) -> Result<Activity, String> {
    let mut activity = Activity {
        read_at: now,
        retried: vec![0; HOURS],
        received: vec![0; HOURS],
        oldest: None,
    };
    if queues.is_empty() {
        return Ok(activity);
    }
    let start = now - Duration::from_secs(3600 * HOURS as u64);
    let mut next: Option<String> = None;
    loop {
        let out = client
            .get_metric_data()
            .set_metric_data_queries(Some(queries(queues)))
            .start_time(DateTime::from(start))
            .end_time(DateTime::from(now))
            .scan_by(ScanBy::TimestampDescending)
            .set_next_token(next.take())
            .send()
            .await
            .map_err(|e| {
                format!(
                    "CloudWatch GetMetricData: {}",
                    aws_sdk_cloudwatch::error::DisplayErrorContext(e)
                )
            })?;
        for result in out.metric_data_results() {
            let id = result.id().unwrap_or_default();
            let points = result
                .timestamps()
                .iter()
                .filter_map(|t| SystemTime::try_from(*t).ok())
                .zip(result.values().iter().copied());
            add(&mut activity, id, points, now);
        }
        next = out.next_token().map(str::to_owned);
        if next.is_none() {
            return Ok(activity);
        }
    }
}

/// Adds one query's points (each stamped with its period's start) to
/// `activity`: a sum to the hour it ended in, an age when it is the newest
/// seen and fresh.
fn add(
    activity: &mut Activity,
    id: &str,
    points: impl Iterator<Item = (SystemTime, f64)>,
    now: SystemTime,
) {
    let hourly = if id.starts_with("retried") {
        Some(&mut activity.retried)
    } else if id.starts_with("received") {
        Some(&mut activity.received)
    } else {
        None
    };
    match hourly {
        Some(buckets) => {
            for (at, value) in points {
                let end = at + Duration::from_secs(3600);
                let ago = now.duration_since(end).unwrap_or_default().as_secs();
                let hour = (ago / 3600) as usize;
                if hour < buckets.len() && value.is_finite() && value > 0.0 {
                    let i = buckets.len() - 1 - hour;
                    buckets[i] += value.round() as u64;
                }
            }
        }
        None => {
            // The newest fresh value of this queue; the largest over queues.
            let newest = points
                .filter(|(at, v)| {
                    v.is_finite()
                        && *v >= 0.0
                        && now.duration_since(*at).unwrap_or_default() <= AGE_FRESH
                })
                .max_by_key(|(at, _)| *at);
            if let Some((at, seconds)) = newest {
                let age = Duration::from_secs_f64(seconds);
                if activity.oldest.is_none_or(|(a, _)| age > a) {
                    activity.oldest = Some((age, at));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_cloudwatch::operation::get_metric_data::{GetMetricDataError, GetMetricDataOutput};
    use aws_sdk_cloudwatch::types::MetricDataResult;
    use aws_smithy_mocks::{MockResponseInterceptor, RuleMode, create_mock_http_client, mock};

    use super::*;

    fn client(rules: &[&aws_smithy_mocks::Rule]) -> aws_sdk_cloudwatch::Client {
        use aws_sdk_cloudwatch::config::{BehaviorVersion, Credentials, Region};
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
            |i, r| i.with_rule(r),
        );
        let conf = aws_sdk_cloudwatch::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "mock"))
            .retry_config(aws_sdk_cloudwatch::config::retry::RetryConfig::disabled())
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .build();
        aws_sdk_cloudwatch::Client::from_conf(conf)
    }

    fn result(id: &str, points: &[(SystemTime, f64)]) -> MetricDataResult {
        points
            .iter()
            .fold(MetricDataResult::builder().id(id), |b, (t, v)| {
                b.timestamps(DateTime::from(*t)).values(*v)
            })
            .build()
    }

    fn at(now: SystemTime, secs_ago: u64) -> SystemTime {
        now - Duration::from_secs(secs_ago)
    }

    /// Hourly sums land in the hour their period ended in; two source
    /// queues' retries add up; the age is the largest fresh one; a stale
    /// age (older than 15 minutes) is not shown.
    #[tokio::test]
    async fn sums_per_hour_and_the_freshest_age() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let answer = move || {
            GetMetricDataOutput::builder()
                .metric_data_results(result(
                    "retried0",
                    // Periods that ended 0 s, 30 min and 5 h ago, and one
                    // that ended before the chart's first hour.
                    &[
                        (at(now, 3600), 4.0),
                        (at(now, 5400), 2.0),
                        (at(now, 6 * 3600), 7.0),
                        (at(now, 26 * 3600), 9.0),
                    ],
                ))
                .metric_data_results(result("retried1", &[(at(now, 3600), 1.0)]))
                .metric_data_results(result("received0", &[(at(now, 3600), 50.0)]))
                .metric_data_results(result(
                    "age0",
                    &[(at(now, 60), 42.0), (at(now, 120), 400.0)],
                ))
                .metric_data_results(result(
                    "age1",
                    &[(at(now, 120), 90.0), (at(now, 20 * 60), 9000.0)],
                ))
                .build()
        };
        let get = mock!(aws_sdk_cloudwatch::Client::get_metric_data)
            .match_requests(move |r| {
                let ids: Vec<&str> = r
                    .metric_data_queries()
                    .iter()
                    .filter_map(|q| q.id())
                    .collect();
                let stat = |id: &str| {
                    r.metric_data_queries()
                        .iter()
                        .find(|q| q.id() == Some(id))
                        .and_then(|q| q.metric_stat())
                        .cloned()
                };
                let age = stat("age1").expect("age1 asked for");
                let metric = age.metric().expect("a metric");
                let retried = stat("retried0").expect("retried0 asked for");
                ids == [
                    "retried0",
                    "received0",
                    "age0",
                    "retried1",
                    "received1",
                    "age1",
                ] && metric.namespace() == Some("AWS/SQS")
                    && metric.dimensions()[0].name() == Some("QueueName")
                    && metric.dimensions()[0].value() == Some("billing")
                    && retried.metric().and_then(|m| m.namespace()) == Some("idemq")
                    && retried.period() == Some(3600)
                    && retried.stat() == Some("Sum")
                    && r.start_time() == Some(&DateTime::from(now - Duration::from_secs(24 * 3600)))
            })
            .then_output(answer);
        let cw = client(&[&get]);
        let got = read(&cw, &["orders".into(), "billing".into()], now)
            .await
            .unwrap();
        let mut retried = vec![0; HOURS];
        retried[23] = 4 + 2 + 1;
        retried[18] = 7;
        let mut received = vec![0; HOURS];
        received[23] = 50;
        assert_eq!(got.retried, retried);
        assert_eq!(got.received, received);
        assert_eq!(got.oldest, Some((Duration::from_secs(90), at(now, 120))));
        assert_eq!(got.retry_rate_last_hour(), Some(7.0 / 50.0));
    }

    /// A refusal (no `cloudwatch:GetMetricData` on the role) is told, not
    /// hidden: the overview shows it in place of the charts.
    #[tokio::test]
    async fn a_refusal_is_said() {
        let denied = mock!(aws_sdk_cloudwatch::Client::get_metric_data).then_error(|| {
            GetMetricDataError::generic(
                aws_sdk_cloudwatch::error::ErrorMetadata::builder()
                    .code("AccessDenied")
                    .message("not authorized to perform: cloudwatch:GetMetricData")
                    .build(),
            )
        });
        let cw = client(&[&denied]);
        let err = read(&cw, &["orders".into()], SystemTime::now())
            .await
            .unwrap_err();
        assert!(
            err.contains("GetMetricData") && err.contains("not authorized"),
            "{err}"
        );
    }

    #[test]
    fn no_rate_without_receives() {
        let a = Activity {
            read_at: SystemTime::now(),
            retried: vec![0; HOURS],
            received: vec![0; HOURS],
            oldest: None,
        };
        assert_eq!(a.retry_rate_last_hour(), None);
    }
}
