//! How fast the simulation runs, and what bounds it: `make bench-sim`
//! (tests/simulation.rs, `speed`).
//!
//! Two numbers from one run, on this machine:
//! - the campaign's rate: seeds run on every core at once, simulated jobs
//!   per wall second, and the requests each job costs;
//! - the baseline: the same SDK clients (the simulation's configuration)
//!   over a connector that answers at once with a canned reply, driven by
//!   idemq's own calls for the three commonest requests of a run (a
//!   transaction commit, a single-write commit, a producer send). Its time
//!   per request is what the real SDK pipeline and idemq's client code cost
//!   before any model runs: the floor of every simulated request.
//!
//! Their ratio says how much of a simulated request is the SDK itself, and
//! the floor times the requests per job bounds the rate any model could
//! reach under the real clients.

use std::time::Instant;

use aws_smithy_runtime_api::client::http::{
    HttpConnector, HttpConnectorFuture, SharedHttpConnector, http_client_fn,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::http::StatusCode;
use idemq::config::TableLayout;
use idemq::producer::{Job, Producer};
use idemq::store::JobRef;
use idemq::store::dynamodb::Committer;
use serde_json::{Value, json};

use super::run::{Config, TABLE, run};
use super::shapes::{Shape, effect};

/// The body of every job the floor sends or commits.
const BODY: &str = r#"{"k":"j0001","kind":"plain","n":417}"#;

/// What the campaign part measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct Rate {
    pub seeds: u64,
    pub threads: u64,
    pub jobs: u64,
    pub requests: u64,
    pub wall_secs: f64,
    /// Summed over the threads: wall time inside the models of SQS and
    /// DynamoDB (the connector's work: parsing, faults, applying, answering).
    pub model_secs: f64,
}

impl Rate {
    pub fn jobs_per_sec(&self) -> f64 {
        self.jobs as f64 / self.wall_secs
    }

    pub fn requests_per_job(&self) -> f64 {
        self.requests as f64 / self.jobs as f64
    }

    /// Wall microseconds per job on one thread.
    pub fn micros_per_job_per_thread(&self) -> f64 {
        self.wall_secs * 1e6 * self.threads as f64 / self.jobs as f64
    }

    /// Of those, microseconds in the models.
    pub fn model_micros_per_job(&self) -> f64 {
        self.model_secs * 1e6 / self.jobs as f64
    }
}

/// Seeds `first..first + seeds` of the standard campaign over `threads`
/// threads at once.
pub fn campaign_rate(first: u64, seeds: u64, hours: f64, threads: u64) -> Rate {
    let started = Instant::now();
    let shares: Vec<(u64, u64, f64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let (mut jobs, mut requests) = (0u64, 0u64);
                    let before = super::net::time_in_models();
                    for seed in (first..first + seeds).filter(|s| s % threads == t) {
                        let o = run(&Config::of_seed(seed, hours));
                        jobs += o.verdicts.jobs as u64;
                        requests += o.counts.requests;
                    }
                    let models = super::net::time_in_models() - before;
                    (jobs, requests, models.as_secs_f64())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a campaign thread"))
            .collect()
    });
    Rate {
        seeds,
        threads,
        jobs: shares.iter().map(|s| s.0).sum(),
        requests: shares.iter().map(|s| s.1).sum(),
        wall_secs: started.elapsed().as_secs_f64(),
        model_secs: shares.iter().map(|s| s.2).sum(),
    }
}

/// Answers every request at once: `{}`, or for `SendMessageBatch` every
/// entry sent (what idemq's producer reads).
#[derive(Debug, Clone)]
struct AnswersAtOnce;

impl HttpConnector for AnswersAtOnce {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let body = if target.ends_with(".SendMessageBatch") {
            let sent: Value = request
                .body()
                .bytes()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            let entries: Vec<Value> = sent["Entries"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| json!({"Id": e["Id"], "MessageId": "m-1", "MD5OfMessageBody": ""}))
                        .collect()
                })
                .unwrap_or_default();
            json!({"Successful": entries, "Failed": []}).to_string()
        } else {
            "{}".to_owned()
        };
        let mut response = HttpResponse::new(StatusCode::try_from(200).expect("200"), body.into());
        response
            .headers_mut()
            .insert("content-type", "application/x-amz-json-1.0");
        HttpConnectorFuture::ready(Ok(response))
    }
}

/// Wall microseconds per request of the floor, by request.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    pub transaction: f64,
    pub single_write: f64,
    pub send: f64,
}

impl Floor {
    pub fn mean(&self) -> f64 {
        (self.transaction + self.single_write + self.send) / 3.0
    }
}

/// The floor: `n` requests of each kind through the simulation's SDK
/// configuration over [`AnswersAtOnce`], on one thread, on a paused clock
/// as the runs have.
pub fn floor(n: u32) -> Floor {
    let rt = super::paused_runtime();
    rt.block_on(async {
        let http = http_client_fn(|_, _| SharedHttpConnector::new(AnswersAtOnce));
        let (sqs, ddb) = super::net::clients_over(http, 0);
        let committer = Committer::new(
            ddb.clone(),
            TableLayout::new(TABLE),
            std::time::Duration::from_secs(86_400),
        );
        let transaction = commits(&committer, &ddb, Shape::Separate, n).await;
        let single_write = commits(&committer, &ddb, Shape::FusedSingle, n).await;
        let producer = Producer::with_client(sqs, super::sqs::url("sim-jobs"))
            .await
            .expect("producer");
        let started = Instant::now();
        for i in 0..n {
            producer
                .send_job(Job::raw(format!("j{i:04}"), BODY))
                .await
                .expect("sent");
        }
        let send = started.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        Floor {
            transaction,
            single_write,
            send,
        }
    })
}

/// Wall microseconds per commit of `n` jobs of `shape`, one after another.
async fn commits(
    committer: &Committer,
    ddb: &aws_sdk_dynamodb::Client,
    shape: Shape,
    n: u32,
) -> f64 {
    let hash = idemq::job::PayloadHash::of(BODY.as_bytes());
    let started = Instant::now();
    for i in 0..n {
        let k = format!("j{i:04}");
        let id = idemq::job::JobId::new(k.clone()).expect("job id");
        let meta = idemq::testing::job_meta(&k);
        let effect = effect(shape, &k, 417, &meta, ddb).await.expect("an effect");
        let job = JobRef {
            id: &id,
            payload_hash: &hash,
            queue: "sim-jobs",
        };
        committer.commit(job, &effect).await.expect("committed");
    }
    started.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}
