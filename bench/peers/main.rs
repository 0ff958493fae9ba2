//! The peer benchmark: idemq, a plain Rust consumer (the ceiling) and
//! Powertools for AWS Lambda (Python) doing the same ledger job, fed the same
//! batches, on the same local stack, in the same run (`make bench`).
//!
//! The harness plays the Lambda service. Every peer runs as a real function
//! process under a Lambda Runtime API of the harness's own ([`runtime`]):
//! idemq and the plain consumer from the release `bootstrap`
//! (`bench/lambda.rs`), Powertools from `bench/powertools/` under Python.
//! Their DynamoDB and SQS requests go through loopback proxies ([`proxy`])
//! that count them by operation, estimate their write units and add a
//! round-trip delay. What it measures, in order:
//!
//! 1. the grid: jobs/s and p50/p99 batch duration for each batch size,
//!    concurrency (jobs in flight inside one invocation) and delay, one
//!    execution environment per peer, invoked back to back; requests and
//!    write units per job;
//! 2. scale-out: several execution environments at once (how Powertools,
//!    which runs a batch's records one after another, gets concurrency);
//! 3. a redelivered batch: requests per duplicate, and whether the effect
//!    was applied once;
//! 4. end to end through SQS: the harness as the event source mapping
//!    (receive, invoke, delete), so SQS requests per job are counted too;
//! 5. cold starts (init, first invocation, max RSS) on the harness's Runtime
//!    API, then once more under `cargo lambda watch --only-lambda-apis`;
//! 6. write cost by job shape ([`shapes`]): idemq with its fused marker and
//!    with a separate one, plain and Powertools, on the two-item ledger and a
//!    one-item job: requests, write units and USD per million jobs;
//! 7. the cost model, and the goals of issue 7.
//!
//! Results go to `bench/out/peers.json` (read by `bench/chart.py`) and, with
//! `--markdown BENCHMARKS.md`, into the generated blocks of that file.
//! `scripts/bench.sh` runs it all.

mod http;
mod proxy;
mod report;
mod runtime;
mod shapes;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use clap::Parser;
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::net::TcpStream;

use idemq::TableLayout;
use idemq::init::{InitSpec, init};
use proxy::{Counts, Proxy, diff, total};
use runtime::Instance;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser, Debug, Clone)]
#[command(about = "idemq vs a plain consumer vs Powertools, same jobs, same stack, same run")]
struct Args {
    /// Round-trip delays added to every DynamoDB and SQS request, in ms.
    #[arg(long, value_delimiter = ',', default_value = "0,5,20")]
    delays: Vec<u64>,
    /// Batch sizes (records per invocation).
    #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
    batches: Vec<usize>,
    /// Jobs in flight inside one invocation (IDEMQ_CONCURRENCY) for the
    /// Rust peers; Powertools runs a batch's records one after another.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    concurrency: Vec<usize>,
    /// Execution environments at once, for the scale-out runs.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    instances: Vec<usize>,
    /// Delay for the scale-out runs, in ms.
    #[arg(long, default_value_t = 5)]
    scaleout_delay: u64,
    /// Each cell runs at least this long (and 5 batches), at most 3x.
    #[arg(long, default_value_t = 1.0)]
    cell_secs: f64,
    /// Rounds per cell, the peers in alternating order; the round with the
    /// most jobs/s is kept, which filters out bursts of other work on a
    /// shared machine.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Cold starts per peer on the harness's Runtime API.
    #[arg(long, default_value_t = 5)]
    cold_starts: usize,
    /// Jobs in the end-to-end run through SQS, per peer.
    #[arg(long, default_value_t = 300)]
    e2e_jobs: usize,
    #[arg(
        long,
        env = "BENCH_BOOTSTRAP",
        default_value = "target/release/examples/bench_lambda"
    )]
    bootstrap: PathBuf,
    #[arg(
        long,
        env = "BENCH_PYTHON",
        default_value = ".state/venv-bench/bin/python"
    )]
    python: PathBuf,
    /// cargo-lambda, for the run under `cargo lambda watch` (skipped if absent).
    #[arg(
        long,
        env = "BENCH_CARGO_LAMBDA",
        default_value = ".state/venv-tools/bin/cargo-lambda"
    )]
    cargo_lambda: PathBuf,
    #[arg(long, default_value = "bench/out")]
    out: PathBuf,
    /// Rewrite the generated blocks of this Markdown file (BENCHMARKS.md).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write the report of an earlier run (its peers.json) instead of running.
    #[arg(long)]
    report_only: Option<PathBuf>,
    /// How the run was started, for the report.
    #[arg(long, env = "BENCH_COMMAND", default_value = "make bench")]
    command: String,
    /// New jobs per variant and shape in the write-cost phase.
    #[arg(long, default_value_t = 200)]
    shape_jobs: usize,
    /// Round-trip delay of the write-cost phase, in ms.
    #[arg(long, default_value_t = 5)]
    shape_delay: u64,
    /// Run the write-cost phase alone (bench/out/shapes.json; with
    /// --markdown, only its block). Counts do not depend on the build
    /// profile, so a debug bootstrap (--bootstrap) serves.
    #[arg(long)]
    only_shapes: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Peer {
    Idemq,
    Plain,
    Powertools,
}

impl Peer {
    pub const ALL: [Peer; 3] = [Peer::Idemq, Peer::Plain, Peer::Powertools];

    pub fn name(self) -> &'static str {
        match self {
            Peer::Idemq => "idemq",
            Peer::Plain => "plain",
            Peer::Powertools => "powertools",
        }
    }

    fn rust(self) -> bool {
        self != Peer::Powertools
    }
}

/// A peer's queue and tables on the local stack.
struct Resources {
    queue_url: String,
    queue_arn: String,
    table: String,
    idempotency_table: String,
}

/// One measurement: a peer at a batch size, concurrency, instance count
/// and delay.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub peer: Peer,
    pub delay_ms: u64,
    pub batch: usize,
    /// Jobs in flight per invocation as configured (Powertools: 1).
    pub concurrency: usize,
    pub instances: usize,
    pub jobs: u64,
    pub batches: u64,
    pub failed_jobs: u64,
    pub wall_s: f64,
    pub jobs_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub ddb_requests_per_job: f64,
    pub wru_per_job: f64,
    pub sqs_requests_per_job: f64,
    /// The delay each DynamoDB request was actually held for, mean.
    #[serde(default)]
    pub rtt_ms: f64,
    /// DynamoDB round trips on a batch's critical path (one environment
    /// only): median and max over the cell's batches.
    #[serde(default)]
    pub rt_p50: Option<f64>,
    #[serde(default)]
    pub rt_max: Option<u64>,
    /// Of the median batch's duration, the time with a DynamoDB request out
    /// (one environment only), ms: median over the cell's batches.
    #[serde(default)]
    pub ddb_busy_ms: Option<f64>,
    pub ddb_ops: Counts,
    pub sqs_ops: Counts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Duplicate {
    pub peer: Peer,
    pub ddb_requests_per_job: f64,
    pub wru_per_job: f64,
    pub ddb_ops: Counts,
    pub balance_expected: i64,
    pub balance_after_redelivery: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndToEnd {
    pub peer: Peer,
    pub jobs: u64,
    pub jobs_per_s: f64,
    pub producer_sqs_per_job: f64,
    pub esm_sqs_per_job: f64,
    pub function_sqs_per_job: f64,
    pub ddb_requests_per_job: f64,
    pub sqs_ops: Counts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ColdStart {
    pub peer: Peer,
    /// `emulator` (the harness's Runtime API) or `cargo lambda watch`.
    pub host: String,
    pub samples: usize,
    pub init_ms: f64,
    pub init_ms_all: Vec<f64>,
    pub first_invoke_ms: f64,
    pub warm_invoke_ms: f64,
    pub max_rss_mb: f64,
    /// Python only: the handler's imports, timed inside Python.
    pub imports_ms: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub started: String,
    pub command: String,
    pub machine: String,
    pub versions: BTreeMap<String, String>,
    pub args: BTreeMap<String, String>,
    pub grid: Vec<Cell>,
    pub scaleout: Vec<Cell>,
    pub duplicates: Vec<Duplicate>,
    pub end_to_end: Vec<EndToEnd>,
    pub cold_starts: Vec<ColdStart>,
    pub bootstrap_bytes: u64,
    pub peak_rss_mb: BTreeMap<String, f64>,
    pub release_build: Option<String>,
    /// Write cost by job shape (absent from runs before issue 15).
    #[serde(default)]
    pub shapes: Vec<shapes::ShapeCost>,
}

/// The job the ledger does: credit `account`, record the entry.
#[derive(Clone)]
struct Job {
    id: String,
    account: String,
    amount: i64,
}

impl Job {
    fn body(&self) -> String {
        json!({"transfer_id": self.id, "account": self.account, "amount": self.amount}).to_string()
    }
}

/// Unique job ids for one stream of batches; 50 accounts per stream.
struct Jobs {
    prefix: String,
    n: u64,
}

impl Jobs {
    fn new(prefix: String) -> Self {
        Self { prefix, n: 0 }
    }

    fn batch(&mut self, size: usize) -> Vec<Job> {
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
fn event(arn: &str, jobs: &[Job]) -> Vec<u8> {
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
                    idemq::JOB_ID_ATTRIBUTE: {
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
fn failures(answer: &Result<Vec<u8>, String>, batch: usize) -> u64 {
    match answer {
        Ok(body) => serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v["batchItemFailures"].as_array().map(|a| a.len() as u64))
            .unwrap_or(batch as u64),
        Err(_) => batch as u64,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    percentile(&s, 50.0)
}

struct Bench {
    args: Args,
    run: String,
    root: PathBuf,
    ddb_proxy: Arc<Proxy>,
    sqs_proxy: Arc<Proxy>,
    ddb: aws_sdk_dynamodb::Client,
    /// An SQS client whose requests go through the proxy (the ESM's).
    sqs_via_proxy: aws_sdk_sqs::Client,
    resources: BTreeMap<Peer, Resources>,
    logs: PathBuf,
}

impl Bench {
    /// The command that starts `peer` as a function process (Runtime API
    /// variables are added by [`Instance::spawn`]).
    fn command(&self, peer: Peer, concurrency: usize) -> Command {
        let r = &self.resources[&peer];
        let mut cmd = if peer.rust() {
            let mut c = Command::new(&self.args.bootstrap);
            c.env("BENCH_PEER", peer.name())
                .env("IDEMQ_CONCURRENCY", concurrency.to_string());
            c
        } else {
            let mut c = Command::new(&self.args.python);
            c.arg(self.root.join("bench/powertools/runtime.py"))
                .env("_HANDLER", "handler.lambda_handler")
                .env("POWERTOOLS_IDEMPOTENCY_TABLE", &r.idempotency_table)
                .env("PYTHONDONTWRITEBYTECODE", "1");
            c
        };
        for v in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "http_proxy",
            "https_proxy",
            "ALL_PROXY",
        ] {
            cmd.env_remove(v);
        }
        cmd.env("IDEMQ_TABLE", &r.table)
            .env("AWS_ENDPOINT_URL", self.sqs_proxy.url())
            .env("AWS_ENDPOINT_URL_SQS", self.sqs_proxy.url())
            .env("AWS_ENDPOINT_URL_DYNAMODB", self.ddb_proxy.url())
            .env("AWS_REGION", "us-east-1")
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("NO_PROXY", "127.0.0.1,localhost");
        cmd
    }

    async fn spawn(
        &self,
        peer: Peer,
        concurrency: usize,
        tag: &str,
    ) -> Result<(Instance, Duration), Error> {
        self.spawn_env(peer, concurrency, tag, &[]).await
    }

    /// [`Bench::spawn`] with more environment variables (set last, so they
    /// override the peer's own).
    async fn spawn_env(
        &self,
        peer: Peer,
        concurrency: usize,
        tag: &str,
        env: &[(&str, &str)],
    ) -> Result<(Instance, Duration), Error> {
        let label = format!("{}-c{concurrency}-{tag}", peer.name());
        let log = self.logs.join(format!("{label}.log"));
        let mut cmd = self.command(peer, concurrency);
        cmd.envs(env.iter().copied());
        let mut inst = Instance::spawn(&label, cmd, &log).await?;
        let init = inst.ready(Duration::from_secs(60)).await.map_err(|e| {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            format!(
                "{e}\n{}",
                tail.lines().rev().take(20).collect::<Vec<_>>().join("\n")
            )
        })?;
        Ok((inst, init))
    }

    /// A one-job batch so that the instance is warm: clients built,
    /// connections open, idemq's queue discovery done.
    async fn warm(&self, peer: Peer, inst: &mut Instance) -> Result<Duration, Error> {
        let mut jobs = Jobs::new(format!("{}-warm-{}", self.run, inst.label));
        let ev = event(&self.resources[&peer].queue_arn, &jobs.batch(1));
        let (answer, took) = inst.invoke(ev).await?;
        if failures(&answer, 1) != 0 {
            return Err(format!("{}: warm-up batch failed: {answer:?}", inst.label).into());
        }
        Ok(took)
    }

    fn set_delay(&self, ms: u64) {
        self.ddb_proxy.set_delay(Duration::from_millis(ms));
        self.sqs_proxy.set_delay(Duration::from_millis(ms));
    }

    /// Back-to-back batches on each instance (all at once) until the cell's
    /// time is up.
    async fn cell(
        &self,
        peer: Peer,
        instances: &mut [Instance],
        batch: usize,
        concurrency: usize,
        delay_ms: u64,
        tag: &str,
    ) -> Result<Cell, Error> {
        self.set_delay(delay_ms);
        let (min, max) = (
            Duration::from_secs_f64(self.args.cell_secs),
            Duration::from_secs_f64(self.args.cell_secs * 3.0),
        );
        let arn = self.resources[&peer].queue_arn.clone();
        let (ddb0, sqs0) = (self.ddb_proxy.counts(), self.sqs_proxy.counts());
        let single = instances.len() == 1;
        if single {
            self.ddb_proxy.record();
        }
        let start = Instant::now();
        let loops = instances.iter_mut().enumerate().map(|(i, inst)| {
            let arn = arn.clone();
            let mut jobs = Jobs::new(format!("{}-{tag}-{i}", self.run));
            async move {
                let (mut durations, mut n, mut failed) = (Vec::new(), 0u64, 0u64);
                let mut windows = Vec::new();
                loop {
                    let elapsed = start.elapsed();
                    let enough = elapsed >= min && durations.len() >= 5;
                    if !durations.is_empty() && (enough || elapsed >= max) {
                        break;
                    }
                    let ev = event(&arn, &jobs.batch(batch));
                    let t = Instant::now();
                    let (answer, took) = inst.invoke(ev).await?;
                    windows.push((t, Instant::now()));
                    failed += failures(&answer, batch);
                    n += batch as u64;
                    durations.push(took.as_secs_f64() * 1000.0);
                }
                Ok::<_, Error>((durations, n, failed, windows))
            }
        });
        let mut durations = Vec::new();
        let (mut jobs, mut failed, mut windows) = (0, 0, Vec::new());
        for r in join_all(loops).await {
            let (d, n, f, w) = r?;
            durations.extend(d);
            jobs += n;
            failed += f;
            windows.extend(w);
        }
        let (rt_p50, rt_max, ddb_busy_ms) = if single {
            let timeline = self.ddb_proxy.take_timeline();
            let depths: Vec<u64> = windows
                .iter()
                .map(|w| proxy::depth(&timeline, *w))
                .collect();
            let as_f: Vec<f64> = depths.iter().map(|d| *d as f64).collect();
            let busy: Vec<f64> = windows
                .iter()
                .map(|w| proxy::busy(&timeline, *w).as_secs_f64() * 1000.0)
                .collect();
            (
                Some(median(&as_f)),
                depths.iter().copied().max(),
                Some(median(&busy)),
            )
        } else {
            (None, None, None)
        };
        let wall = start.elapsed().as_secs_f64();
        let ddb = diff(&self.ddb_proxy.counts(), &ddb0);
        let sqs = diff(&self.sqs_proxy.counts(), &sqs0);
        durations.sort_by(f64::total_cmp);
        let per = |x: u64| x as f64 / jobs as f64;
        let cell = Cell {
            peer,
            delay_ms,
            batch,
            concurrency,
            instances: instances.len(),
            jobs,
            batches: durations.len() as u64,
            failed_jobs: failed,
            wall_s: wall,
            jobs_per_s: jobs as f64 / wall,
            p50_ms: percentile(&durations, 50.0),
            p99_ms: percentile(&durations, 99.0),
            mean_ms: durations.iter().sum::<f64>() / durations.len() as f64,
            ddb_requests_per_job: per(total(&ddb).requests),
            wru_per_job: per(total(&ddb).wru),
            sqs_requests_per_job: per(total(&sqs).requests),
            rtt_ms: total(&ddb).delayed_us as f64 / 1000.0 / total(&ddb).requests.max(1) as f64,
            rt_p50,
            rt_max,
            ddb_busy_ms,
            ddb_ops: ddb,
            sqs_ops: sqs,
        };
        println!(
            "  {:<10} delay {:>2} ms  batch {:>3}  conc {:>2}  inst {:>2}: {:>7.1} jobs/s  p50 {:>7.1} ms  p99 {:>7.1} ms  RT {:>5}  ddb {:.3}/job  wru {:.2}/job  sqs {:.3}/job{}",
            peer.name(),
            delay_ms,
            batch,
            concurrency,
            cell.instances,
            cell.jobs_per_s,
            cell.p50_ms,
            cell.p99_ms,
            cell.rt_p50.map_or("–".into(), |r| format!("{r:.0}")),
            cell.ddb_requests_per_job,
            cell.wru_per_job,
            cell.sqs_requests_per_job,
            if failed > 0 {
                format!("  FAILED {failed}")
            } else {
                String::new()
            }
        );
        Ok(cell)
    }
}

async fn setup(
    c: &(aws_sdk_sqs::Client, aws_sdk_dynamodb::Client),
    run: &str,
    peer: Peer,
) -> Result<Resources, Error> {
    let name = format!("{run}-{}", peer.name());
    let spec = InitSpec {
        queue_name: name.clone(),
        fifo: false,
        max_receive_count: 6,
        visibility_timeout: Duration::from_secs(120),
        layout: TableLayout::new(&name),
        marker_ttl: idemq::config::DEFAULT_MARKER_TTL,
    };
    let res = init(&c.0, &c.1, &spec).await?;
    let attrs =
        c.0.get_queue_attributes()
            .queue_url(&res.queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?;
    let queue_arn = attrs
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or("queue without an ARN")?;
    let idempotency_table = format!("{name}-idempotency");
    if peer == Peer::Powertools {
        // Powertools' own layout: partition key `id`.
        c.1.create_table()
            .table_name(&idempotency_table)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("id")
                    .key_type(KeyType::Hash)
                    .build()?,
            )
            .billing_mode(BillingMode::PayPerRequest)
            .send()
            .await?;
    }
    Ok(Resources {
        queue_url: res.queue_url,
        queue_arn,
        table: res.table_name,
        idempotency_table,
    })
}

async fn balance(ddb: &aws_sdk_dynamodb::Client, table: &str, account: &str) -> Result<i64, Error> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(format!("account#{account}")))
        .consistent_read(true)
        .send()
        .await?;
    Ok(out
        .item()
        .and_then(|i| i.get("balance"))
        .and_then(|b| b.as_n().ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    if let Some(json) = &args.report_only {
        let results: Results = serde_json::from_slice(&std::fs::read(json)?)?;
        let blocks = report::blocks(&results);
        for (name, text) in &blocks {
            println!("== {name} ==\n{text}");
        }
        if let Some(md) = &args.markdown {
            report::rewrite(md, &blocks)?;
        }
        return Ok(());
    }
    let root = std::env::current_dir()?;
    if !args.bootstrap.exists() {
        return Err(format!(
            "{} is missing: build it with `cargo build --release --locked --example bench_lambda` (scripts/bench.sh does)",
            args.bootstrap.display()
        )
        .into());
    }
    let endpoint = |var: &str| -> Result<String, Error> {
        let url = std::env::var(var).map_err(|_| {
            format!("{var} is not set: load the local stack's endpoints (set -a; . .state/stack.env; set +a)")
        })?;
        Ok(url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned())
    };
    let ddb_proxy = Proxy::start(&endpoint("AWS_ENDPOINT_URL_DYNAMODB")?, None).await?;
    let sqs_proxy = Proxy::start(&endpoint("AWS_ENDPOINT_URL_SQS")?, None).await?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs_via_proxy = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .endpoint_url(sqs_proxy.url())
            .build(),
    );
    let run = format!("peers-{:08x}", rand::random::<u32>());
    let logs = args.out.join("logs");
    std::fs::create_dir_all(&logs)?;
    println!("peer benchmark {run}: setting up queues and tables…");
    let mut resources = BTreeMap::new();
    for peer in Peer::ALL {
        resources.insert(peer, setup(&(sqs.clone(), ddb.clone()), &run, peer).await?);
    }
    let b = Bench {
        args: args.clone(),
        run: run.clone(),
        root: root.clone(),
        ddb_proxy,
        sqs_proxy,
        ddb,
        sqs_via_proxy,
        resources,
        logs,
    };
    let started = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let t0 = Instant::now();
    if args.only_shapes {
        let shapes = shapes::run(&b, args.shape_jobs, args.shape_delay).await?;
        std::fs::write(
            args.out.join("shapes.json"),
            serde_json::to_vec_pretty(&shapes)?,
        )?;
        let run = format!(
            "Run of {started} (`{}`), Rust peers from `{}`",
            args.command,
            args.bootstrap.display()
        );
        let block = shapes::block(&shapes, &run);
        println!("\n== shapes ==\n{block}");
        if let Some(md) = &args.markdown {
            report::rewrite(md, &[("shapes".to_owned(), block)])?;
            println!("wrote the shapes block of {}", md.display());
        }
        return Ok(());
    }

    // 1. The grid: one execution environment per peer and concurrency.
    println!("grid: one execution environment per peer, back-to-back invocations");
    let mut grid_instances: Vec<(Peer, usize, Instance)> = Vec::new();
    for peer in Peer::ALL {
        let concs: Vec<usize> = if peer.rust() {
            args.concurrency.clone()
        } else {
            vec![1]
        };
        for c in concs {
            let (mut inst, _) = b.spawn(peer, c, "grid").await?;
            b.set_delay(0);
            b.warm(peer, &mut inst).await?;
            grid_instances.push((peer, c, inst));
        }
    }
    let min_conc = args.concurrency.iter().copied().min().unwrap_or(1);
    let mut grid = Vec::new();
    for &delay in &args.delays {
        for &batch in &args.batches {
            let mut kept: BTreeMap<(Peer, usize), Cell> = BTreeMap::new();
            for round in 0..args.rounds.max(1) {
                let mut order: Vec<usize> = (0..grid_instances.len()).collect();
                if round % 2 == 1 {
                    order.reverse();
                }
                for i in order {
                    let (peer, c, inst) = &mut grid_instances[i];
                    // One job leaves nothing to run at once inside an invocation.
                    if batch == 1 && *c != min_conc && peer.rust() {
                        continue;
                    }
                    let tag = format!("g{delay}-{batch}-{}-{c}-r{round}", peer.name());
                    let cell = b
                        .cell(*peer, std::slice::from_mut(inst), batch, *c, delay, &tag)
                        .await?;
                    keep(&mut kept, (*peer, *c), cell);
                }
            }
            grid.extend(kept.into_values());
        }
    }
    let mut peak_rss_mb = BTreeMap::new();
    for (peer, c, inst) in &grid_instances {
        if let Some(rss) = inst.max_rss() {
            peak_rss_mb.insert(format!("{}-c{c}", peer.name()), rss as f64 / 1048576.0);
        }
    }
    drop(grid_instances);

    // 2. Scale-out: N execution environments at once, batch 10.
    println!(
        "scale-out: several execution environments at once, batch 10, delay {} ms",
        args.scaleout_delay
    );
    let mut scaleout = Vec::new();
    let max_n = args.instances.iter().copied().max().unwrap_or(1);
    let mut pools = Vec::new();
    for peer in Peer::ALL {
        let c = if peer.rust() { 10 } else { 1 };
        let mut pool = Vec::new();
        for i in 0..max_n {
            let (mut inst, _) = b.spawn(peer, c, &format!("scale{i}")).await?;
            b.set_delay(0);
            b.warm(peer, &mut inst).await?;
            pool.push(inst);
        }
        pools.push((peer, c, pool));
    }
    for &n in &args.instances {
        let mut kept: BTreeMap<(Peer, usize), Cell> = BTreeMap::new();
        for round in 0..args.rounds.max(1) {
            let mut order: Vec<usize> = (0..pools.len()).collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let (peer, c, pool) = &mut pools[i];
                let tag = format!("s{n}-{}-r{round}", peer.name());
                let cell = b
                    .cell(*peer, &mut pool[..n], 10, *c, args.scaleout_delay, &tag)
                    .await?;
                keep(&mut kept, (*peer, n), cell);
            }
        }
        scaleout.extend(kept.into_values());
    }
    drop(pools);

    // 3. A redelivered batch.
    println!("redelivery: the same batch of 10 twice");
    b.set_delay(0);
    let mut duplicates = Vec::new();
    for peer in Peer::ALL {
        let (mut inst, _) = b.spawn(peer, 10, "dup").await?;
        b.warm(peer, &mut inst).await?;
        let jobs: Vec<Job> = (1..=10)
            .map(|i| Job {
                id: format!("{run}-dup-{}-{i}", peer.name()),
                account: format!("{run}-dup-{}", peer.name()),
                amount: i,
            })
            .collect();
        let ev = event(&b.resources[&peer].queue_arn, &jobs);
        let (first, _) = inst.invoke(ev.clone()).await?;
        if failures(&first, 10) != 0 {
            return Err(format!("{}: first delivery failed: {first:?}", peer.name()).into());
        }
        let before = b.ddb_proxy.counts();
        let (again, _) = inst.invoke(ev).await?;
        let ops = diff(&b.ddb_proxy.counts(), &before);
        let failed = failures(&again, 10);
        let after = balance(&b.ddb, &b.resources[&peer].table, &jobs[0].account).await?;
        let d = Duplicate {
            peer,
            ddb_requests_per_job: total(&ops).requests as f64 / 10.0,
            wru_per_job: total(&ops).wru as f64 / 10.0,
            ddb_ops: ops,
            balance_expected: jobs.iter().map(|j| j.amount).sum(),
            balance_after_redelivery: after,
        };
        println!(
            "  {:<10} redelivered: ddb {:.1}/job, wru {:.1}/job, balance {} (expected {}), {failed} reported failed",
            peer.name(),
            d.ddb_requests_per_job,
            d.wru_per_job,
            d.balance_after_redelivery,
            d.balance_expected
        );
        duplicates.push(d);
    }

    // 4. End to end through SQS.
    println!(
        "end to end: the harness as the event source mapping, {} jobs per peer, batch 10",
        args.e2e_jobs
    );
    let mut end_to_end = Vec::new();
    for peer in Peer::ALL {
        end_to_end.push(e2e(&b, peer).await?);
    }

    // 5. Write cost by job shape.
    let shapes = shapes::run(&b, args.shape_jobs, args.shape_delay).await?;

    // 6. Cold starts.
    println!(
        "cold starts: {} per peer on the harness's Runtime API",
        args.cold_starts
    );
    let mut cold_starts = Vec::new();
    for peer in Peer::ALL {
        cold_starts.push(cold(&b, peer).await?);
    }
    if args.cargo_lambda.exists() {
        println!("cold starts under cargo lambda watch --only-lambda-apis");
        for peer in Peer::ALL {
            match watch_cold(&b, peer).await {
                Ok(c) => cold_starts.push(c),
                Err(e) => println!("  {}: under cargo lambda watch: {e}", peer.name()),
            }
        }
    }
    let bootstrap_bytes = std::fs::metadata(&args.bootstrap)?.len();

    let mut versions = BTreeMap::new();
    versions.insert("idemq".into(), env!("CARGO_PKG_VERSION").into());
    if let Ok(out) = Command::new(&args.python)
        .args([
            "-c",
            "import sys, boto3, aws_lambda_powertools as p; print(sys.version.split()[0], p.__version__ if hasattr(p, '__version__') else '', boto3.__version__)",
        ])
        .output()
    {
        let s = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let mut it = s.split(' ');
        for k in ["python", "aws-lambda-powertools", "boto3"] {
            versions.insert(k.into(), it.next().unwrap_or("").into());
        }
    }
    if let Ok(out) = Command::new("rustc").arg("--version").output() {
        versions.insert(
            "rustc".into(),
            String::from_utf8_lossy(&out.stdout).trim().into(),
        );
    }
    let mut argmap = BTreeMap::new();
    argmap.insert("delays_ms".into(), format!("{:?}", args.delays));
    argmap.insert("batches".into(), format!("{:?}", args.batches));
    argmap.insert("concurrency".into(), format!("{:?}", args.concurrency));
    argmap.insert("instances".into(), format!("{:?}", args.instances));
    argmap.insert("cell_secs".into(), args.cell_secs.to_string());
    argmap.insert("rounds".into(), args.rounds.to_string());
    argmap.insert(
        "elapsed_s".into(),
        format!("{:.0}", t0.elapsed().as_secs_f64()),
    );
    let release_build = std::fs::read_to_string(args.out.join("release-build.txt"))
        .ok()
        .map(|s| s.trim().to_owned());
    let results = Results {
        started,
        command: args.command.clone(),
        machine: machine(),
        versions,
        args: argmap,
        grid,
        scaleout,
        duplicates,
        end_to_end,
        cold_starts,
        bootstrap_bytes,
        peak_rss_mb,
        release_build,
        shapes,
    };
    std::fs::write(
        args.out.join("peers.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    let blocks = report::blocks(&results);
    println!();
    for (name, text) in &blocks {
        println!("== {name} ==\n{text}");
    }
    if let Some(md) = &args.markdown {
        report::rewrite(md, &blocks)?;
        println!("wrote the generated blocks of {}", md.display());
    }
    println!(
        "peer benchmark done in {:.0} s; results in {}",
        t0.elapsed().as_secs_f64(),
        args.out.join("peers.json").display()
    );
    Ok(())
}

/// Keeps the round with the most jobs/s.
fn keep(kept: &mut BTreeMap<(Peer, usize), Cell>, key: (Peer, usize), cell: Cell) {
    match kept.get(&key) {
        Some(old) if old.jobs_per_s >= cell.jobs_per_s => {}
        _ => {
            kept.insert(key, cell);
        }
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}

/// The harness as the event source mapping: the producer sends the jobs,
/// then receive up to 10, invoke, delete what succeeded, until done.
async fn e2e(b: &Bench, peer: Peer) -> Result<EndToEnd, Error> {
    b.set_delay(0);
    let r = &b.resources[&peer];
    let (mut inst, _) = b.spawn(peer, 10, "e2e").await?;
    b.warm(peer, &mut inst).await?;
    let n = b.args.e2e_jobs;
    let mut jobs = Jobs::new(format!("{}-e2e-{}", b.run, peer.name()));
    let all = jobs.batch(n);
    let sqs0 = b.sqs_proxy.counts();
    for chunk in all.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let attr = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(&j.id)
                    .build()?;
                Ok(SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(j.body())
                    .message_attributes(idemq::JOB_ID_ATTRIBUTE, attr)
                    .build()?)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        b.sqs_via_proxy
            .send_message_batch()
            .queue_url(&r.queue_url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }
    let sqs1 = b.sqs_proxy.counts();
    let ddb1 = b.ddb_proxy.counts();
    let start = Instant::now();
    let (mut done, mut empty) = (0usize, 0);
    while done < n && empty < 5 {
        let out = b
            .sqs_via_proxy
            .receive_message()
            .queue_url(&r.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await?;
        let msgs = out.messages();
        if msgs.is_empty() {
            empty += 1;
            continue;
        }
        let records: Vec<Value> = msgs
            .iter()
            .map(|m| {
                let attrs: serde_json::Map<String, Value> = m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
                            .collect()
                    })
                    .unwrap_or_default();
                let mattrs: serde_json::Map<String, Value> = m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| {
                                (
                                    k.clone(),
                                    json!({"stringValue": v.string_value(), "stringListValues": [], "binaryListValues": [], "dataType": v.data_type()}),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attrs,
                    "messageAttributes": mattrs,
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": r.queue_arn,
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        let (answer, _) = inst
            .invoke(serde_json::to_vec(&json!({ "Records": records }))?)
            .await?;
        let failed: Vec<String> = match &answer {
            Ok(body) => serde_json::from_slice::<Value>(body)?["batchItemFailures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => msgs
                .iter()
                .filter_map(|m| m.message_id().map(str::to_owned))
                .collect(),
        };
        let entries = msgs
            .iter()
            .filter(|m| !failed.iter().any(|f| Some(f.as_str()) == m.message_id()))
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        done += entries.len();
        if !entries.is_empty() {
            b.sqs_via_proxy
                .delete_message_batch()
                .queue_url(&r.queue_url)
                .set_entries(Some(entries))
                .send()
                .await?;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let producer = diff(&sqs1, &sqs0);
    let consume = diff(&b.sqs_proxy.counts(), &sqs1);
    let ddb = diff(&b.ddb_proxy.counts(), &ddb1);
    let esm: u64 = consume
        .iter()
        .filter(|(op, _)| matches!(op.as_str(), "ReceiveMessage" | "DeleteMessageBatch"))
        .map(|(_, c)| c.requests)
        .sum();
    let per = |x: u64| x as f64 / done.max(1) as f64;
    let mut sqs_ops = producer.clone();
    for (op, c) in &consume {
        let e = sqs_ops.entry(op.clone()).or_default();
        e.requests += c.requests;
        e.errors += c.errors;
    }
    let e = EndToEnd {
        peer,
        jobs: done as u64,
        jobs_per_s: done as f64 / wall,
        producer_sqs_per_job: per(total(&producer).requests),
        esm_sqs_per_job: per(esm),
        function_sqs_per_job: per(total(&consume).requests - esm),
        ddb_requests_per_job: per(total(&ddb).requests),
        sqs_ops,
    };
    println!(
        "  {:<10} {} of {n} jobs, {:.0} jobs/s; SQS per job: producer {:.3}, event source mapping {:.3}, function {:.3}; DynamoDB {:.3}/job",
        peer.name(),
        e.jobs,
        e.jobs_per_s,
        e.producer_sqs_per_job,
        e.esm_sqs_per_job,
        e.function_sqs_per_job,
        e.ddb_requests_per_job
    );
    if done < n {
        return Err(format!("{}: only {done} of {n} jobs went through", peer.name()).into());
    }
    Ok(e)
}

/// Python's own account of its imports (`init: imports N ms` on stderr).
fn imports_ms(log: &std::path::Path) -> Option<f64> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("init: imports "))
        .and_then(|s| s.trim_end_matches(" ms").parse().ok())
}

/// Cold starts: start, first invocation (batch 10), 20 warm ones, max RSS.
async fn cold(b: &Bench, peer: Peer) -> Result<ColdStart, Error> {
    b.set_delay(0);
    let (mut inits, mut firsts, mut warms, mut rss, mut imports) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..b.args.cold_starts {
        let tag = format!("cold{i}");
        let (mut inst, init) = b.spawn(peer, 10, &tag).await?;
        let mut jobs = Jobs::new(format!("{}-{tag}-{}", b.run, peer.name()));
        let arn = &b.resources[&peer].queue_arn;
        let (answer, first) = inst.invoke(event(arn, &jobs.batch(10))).await?;
        if failures(&answer, 10) != 0 {
            return Err(format!("{}: cold batch failed: {answer:?}", peer.name()).into());
        }
        let mut w = Vec::new();
        for _ in 0..20 {
            let (_, took) = inst.invoke(event(arn, &jobs.batch(10))).await?;
            w.push(took.as_secs_f64() * 1000.0);
        }
        inits.push(init.as_secs_f64() * 1000.0);
        firsts.push(first.as_secs_f64() * 1000.0);
        warms.push(median(&w));
        rss.push(inst.max_rss().unwrap_or(0) as f64 / 1048576.0);
        let label = inst.label.clone();
        drop(inst);
        if let Some(ms) = imports_ms(&b.logs.join(format!("{label}.log"))) {
            imports.push(ms);
        }
    }
    let c = ColdStart {
        peer,
        host: "emulator".into(),
        samples: inits.len(),
        init_ms: median(&inits),
        init_ms_all: inits,
        first_invoke_ms: median(&firsts),
        warm_invoke_ms: median(&warms),
        max_rss_mb: rss.iter().copied().fold(0.0, f64::max),
        imports_ms: (!imports.is_empty()).then(|| median(&imports)),
    };
    println!(
        "  {:<10} init {:>6.1} ms (median of {}; all {:?}), first batch {:.1} ms, warm batch {:.1} ms, max RSS {:.1} MB",
        peer.name(),
        c.init_ms,
        c.samples,
        c.init_ms_all.iter().map(|x| x.round()).collect::<Vec<_>>(),
        c.first_invoke_ms,
        c.warm_invoke_ms,
        c.max_rss_mb
    );
    Ok(c)
}

/// POSTs `body` to `addr` (`host:port`) and returns the answer.
async fn post(addr: &str, path: &str, body: Vec<u8>) -> Result<http::Message, Error> {
    let s = TcpStream::connect(addr).await?;
    let (r, mut w) = s.into_split();
    http::Message::request("POST", path)
        .with_header("host", addr)
        .with_header("content-type", "application/json")
        .with_header("connection", "close")
        .with_body(body)
        .write(&mut w)
        .await?;
    Ok(http::Message::read(&mut BufReader::new(r), true)
        .await?
        .ok_or("no answer")?)
}

/// One cold start under `cargo lambda watch --only-lambda-apis`: watch
/// serves the Runtime API and the invoke API; the function is started by
/// hand, through a proxy that notes its first request (the end of init)
/// and puts a real deadline in place of watch's constant one.
async fn watch_cold(b: &Bench, peer: Peer) -> Result<ColdStart, Error> {
    b.set_delay(0);
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let addr = format!("127.0.0.1:{port}");
    let log = b.logs.join(format!("watch-{}.log", peer.name()));
    let mut watch = Command::new(&b.args.cargo_lambda)
        .args([
            "lambda",
            "watch",
            "--only-lambda-apis",
            "-A",
            "127.0.0.1",
            "-P",
        ])
        .arg(port.to_string())
        .current_dir(&b.root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    let result = async {
        let until = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).await.is_err() {
            if Instant::now() > until {
                return Err::<ColdStart, Error>("cargo lambda watch did not listen".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let relay = Proxy::start(&addr, Some(runtime::FUNCTION_TIMEOUT)).await?;
        let mut cmd = b.command(peer, 10);
        let fn_log = b.logs.join(format!("watch-fn-{}.log", peer.name()));
        cmd.env("AWS_LAMBDA_RUNTIME_API", format!("{}/.rt", relay.url()))
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&fn_log)?);
        let spawned = Instant::now();
        let mut child = cmd.spawn()?;
        let pid = child.id();
        let outcome = async {
            let until = Instant::now() + Duration::from_secs(60);
            let init = loop {
                if let Some(at) = relay.first_request() {
                    break at.duration_since(spawned);
                }
                if Instant::now() > until {
                    return Err::<ColdStart, Error>("the function never asked for an event".into());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let arn = &b.resources[&peer].queue_arn;
            let mut jobs = Jobs::new(format!("{}-watch-{}", b.run, peer.name()));
            let path = "/2015-03-31/functions/_/invocations";
            let t = Instant::now();
            let answer = post(&addr, path, event(arn, &jobs.batch(10))).await?;
            let first = t.elapsed();
            if failures(&Ok(answer.body.clone()), 10) != 0 {
                return Err(format!("cold batch failed: {}", String::from_utf8_lossy(&answer.body)).into());
            }
            let mut w = Vec::new();
            for _ in 0..20 {
                let t = Instant::now();
                post(&addr, path, event(arn, &jobs.batch(10))).await?;
                w.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let rss = runtime::peak_rss(pid).unwrap_or(0) as f64 / 1048576.0;
            Ok(ColdStart {
                peer,
                host: "cargo lambda watch".into(),
                samples: 1,
                init_ms: init.as_secs_f64() * 1000.0,
                init_ms_all: vec![init.as_secs_f64() * 1000.0],
                first_invoke_ms: first.as_secs_f64() * 1000.0,
                warm_invoke_ms: median(&w),
                max_rss_mb: rss,
                imports_ms: None,
            })
        }
        .await;
        let _ = child.kill();
        let _ = child.wait();
        let mut c = outcome?;
        c.imports_ms = imports_ms(&fn_log);
        println!(
            "  {:<10} init {:>6.1} ms, first batch {:.1} ms, warm batch {:.1} ms (through watch's invoke API), max RSS {:.1} MB",
            peer.name(),
            c.init_ms,
            c.first_invoke_ms,
            c.warm_invoke_ms,
            c.max_rss_mb
        );
        Ok(c)
    }
    .await;
    // Only the watch process this function started, by its pid.
    let _ = watch.kill();
    let _ = watch.wait();
    result
}
