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
//! 7. the cost model, and idemq's goals against its peers.
//!
//! Where each part is: [`harness`] (resources, function processes,
//! proxies), [`jobs`] (the ledger jobs, their SQS events, statistics),
//! [`e2e`] (4), [`cold`] (5), [`shapes`] (6), [`report`] (the tables and
//! the cost model); this file holds the arguments, the result types and
//! the run in order.
//!
//! Results go to `bench/out/peers.json` (read by `bench/chart.py`) and, with
//! `--markdown BENCHMARKS.md`, into the generated blocks of that file.
//! `scripts/bench.sh` runs it all.

mod cold;
mod e2e;
mod harness;
mod http;
mod jobs;
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

use cold::{cold, watch_cold};
use e2e::e2e;
use harness::{Bench, balance, setup};
use idemq::config::TableLayout;
use idemq::init::{InitSpec, init};
use jobs::{Job, Jobs, event, failures, median, percentile};
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
    /// Write cost by job shape (absent from runs before the fused marker).
    #[serde(default)]
    pub shapes: Vec<shapes::ShapeCost>,
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
