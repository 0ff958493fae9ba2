//! The ledger jobs the peers run, the SQS events that carry them, and the
//! statistics over what they measured.

use super::*;

/// The job the ledger does: credit `account`, record the entry.
#[derive(Clone)]
pub(crate) struct Job {
    pub(crate) id: String,
    pub(crate) account: String,
    pub(crate) amount: i64,
}

impl Job {
    pub(crate) fn body(&self) -> String {
        json!({"transfer_id": self.id, "account": self.account, "amount": self.amount}).to_string()
    }
}

/// Unique job ids for one stream of batches; 50 accounts per stream.
pub(crate) struct Jobs {
    pub(crate) prefix: String,
    pub(crate) n: u64,
}

impl Jobs {
    pub(crate) fn new(prefix: String) -> Self {
        Self { prefix, n: 0 }
    }

    pub(crate) fn batch(&mut self, size: usize) -> Vec<Job> {
        (0..size)
            .map(|_| {
                self.n += 1;
                Job {
                    id: format!("{}-{}", self.prefix, self.n),
                    account: format!("{}-acct-{}", self.prefix, self.n % 50),
                    amount: (self.n % 90 + 1) as i64,
                }
            })
            .collect()
    }
}

/// A Lambda SQS event for `jobs`, as the event source mapping builds it.
pub(crate) fn event(arn: &str, jobs: &[Job]) -> Vec<u8> {
    let records: Vec<Value> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
                .to_string();
            json!({
                "messageId": format!("m-{}-{i}", j.id),
                "receiptHandle": format!("rh-{}", j.id),
                "body": j.body(),
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now,
                    "SenderId": "000000000000",
                    "ApproximateFirstReceiveTimestamp": now,
                },
                "messageAttributes": {
                    idemq::job::JOB_ID_ATTRIBUTE: {
                        "stringValue": j.id,
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": "String",
                    }
                },
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::to_vec(&json!({ "Records": records })).expect("JSON")
}

/// The number of `batchItemFailures` in an answer, or the whole batch when
/// the invocation failed.
pub(crate) fn failures(answer: &Result<Vec<u8>, String>, batch: usize) -> u64 {
    match answer {
        Ok(body) => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["batchItemFailures"].as_array().map(|a| a.len() as u64))
            .unwrap_or(batch as u64),
        Err(_) => batch as u64,
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

pub(crate) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, 50.0)
}
