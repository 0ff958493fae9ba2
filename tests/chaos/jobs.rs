//! The probe's jobs (`{"id", "action", "canary"}`) and sending them.

use std::collections::HashSet;

use idemq::init::InitReport;
use idemq::producer::{Job, Producer};

pub const CANARY: &str = "CANARY-5eb63bbbe01eeed0";

/// A probe job: `{"id", "action", "canary"}`, with its id as job id.
pub fn probe_job(id: &str, action: &str) -> Job {
    let body = serde_json::json!({"id": id, "action": action, "canary": CANARY});
    Job::new(id, &body).unwrap()
}

pub async fn send(sdk: &aws_config::SdkConfig, url: &str, jobs: Vec<Job>) {
    let producer = Producer::new(sdk, url).await.unwrap();
    for chunk in jobs.chunks(500) {
        for (id, r) in producer.send_batch(chunk.to_vec()).await {
            r.unwrap_or_else(|e| panic!("{id}: {e}"));
        }
    }
}

pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Sends `n` ok jobs `prefix-0…`; returns their ids.
pub async fn send_ok(
    sdk: &aws_config::SdkConfig,
    res: &InitReport,
    prefix: &str,
    n: usize,
) -> HashSet<String> {
    let sent = ids(prefix, n);
    send(
        sdk,
        &res.queue_url,
        sent.iter().map(|id| probe_job(id, "ok")).collect(),
    )
    .await;
    sent.into_iter().collect()
}
