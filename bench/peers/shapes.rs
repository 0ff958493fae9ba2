//! What a job costs in DynamoDB, by job shape: idemq with its
//! fused marker (the job's own item is the marker), idemq with a separate
//! marker item, the plain consumer and Powertools, each doing
//! - the **ledger** job: credit the account and record the entry (two items);
//! - the **one-item** job: record the entry alone.
//!
//! Each variant and shape runs in its own execution environment, on batches
//! of 10 run at once, at the given round-trip delay; the proxy counts every
//! DynamoDB request and its write units. Then one batch is delivered again
//! (a redelivery): what a duplicate costs. USD per million jobs comes from
//! the counted write units, the mean batch duration (Lambda at 128 MB) and
//! SQS's 0.3 requests per job counted end to end for every peer (producer
//! 0.1, event source mapping 0.2, function 0).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::proxy::{Counts, diff, total};
use crate::report::{
    DDB_USD_PER_WRU, LAMBDA_USD_PER_GB_S, LAMBDA_USD_PER_REQUEST, PRICES_AS_OF, SQS_USD_PER_REQUEST,
};
use crate::{Bench, Error, Jobs, Peer, event, failures};

/// Batch size of this phase (the cost model's).
const BATCH: usize = 10;
/// SQS requests per job end to end, the same for every peer (the e2e block).
const SQS_PER_JOB: f64 = 0.3;
/// Lambda memory for the cost: every peer's max RSS fits.
const MEMORY_MB: f64 = 128.0;

/// How a job is deduplicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// idemq, the job's own item is the marker.
    Idemq,
    /// idemq with its own marker item.
    IdemqSeparate,
    Plain,
    Powertools,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::Idemq,
        Variant::IdemqSeparate,
        Variant::Plain,
        Variant::Powertools,
    ];

    fn peer(self) -> Peer {
        match self {
            Variant::Idemq | Variant::IdemqSeparate => Peer::Idemq,
            Variant::Plain => Peer::Plain,
            Variant::Powertools => Peer::Powertools,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Variant::Idemq => "idemq (fused marker)",
            Variant::IdemqSeparate => "idemq (separate marker)",
            Variant::Plain => "plain (no dedup)",
            Variant::Powertools => "Powertools",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    Ledger,
    Item,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Ledger => "ledger",
            Shape::Item => "item",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Shape::Ledger => "ledger (2 items)",
            Shape::Item => "one item",
        }
    }
}

/// One variant doing one shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShapeCost {
    pub variant: Variant,
    pub shape: Shape,
    pub delay_ms: u64,
    pub jobs: u64,
    pub failed_jobs: u64,
    pub mean_batch_ms: f64,
    pub ddb_requests_per_job: f64,
    pub wru_per_job: f64,
    pub ddb_ops: Counts,
    /// The same batch delivered again.
    pub duplicate_requests_per_job: f64,
    pub duplicate_wru_per_job: f64,
}

impl ShapeCost {
    /// USD per million jobs: (Lambda, DynamoDB, SQS).
    pub fn usd_per_million(&self) -> (f64, f64, f64) {
        let invocations = 1e6 / BATCH as f64;
        let lambda = invocations * LAMBDA_USD_PER_REQUEST
            + invocations
                * (self.mean_batch_ms / 1000.0)
                * (MEMORY_MB / 1024.0)
                * LAMBDA_USD_PER_GB_S;
        (
            lambda,
            self.wru_per_job * 1e6 * DDB_USD_PER_WRU,
            SQS_PER_JOB * 1e6 * SQS_USD_PER_REQUEST,
        )
    }

    pub fn usd_total(&self) -> f64 {
        let (l, d, s) = self.usd_per_million();
        l + d + s
    }
}

/// Runs every variant on every shape: `jobs` new jobs each (rounded up to
/// batches of 10), then one redelivered batch.
pub async fn run(b: &Bench, jobs: usize, delay_ms: u64) -> Result<Vec<ShapeCost>, Error> {
    println!(
        "write cost by job shape: {jobs} jobs per variant and shape, batch {BATCH}, delay {delay_ms} ms"
    );
    let mut out = Vec::new();
    for shape in [Shape::Ledger, Shape::Item] {
        for variant in Variant::ALL {
            let peer = variant.peer();
            let mut env = vec![("BENCH_SHAPE", shape.name())];
            if variant == Variant::IdemqSeparate {
                env.push(("BENCH_PEER", "idemq-separate"));
            }
            let tag = format!("shape-{}-{:?}", shape.name(), variant).to_lowercase();
            let (mut inst, _) = b.spawn_env(peer, BATCH, &tag, &env).await?;
            b.set_delay(0);
            b.warm(peer, &mut inst).await?;
            b.set_delay(delay_ms);
            let arn = b.resources[&peer].queue_arn.clone();
            let mut batches = Jobs::new(format!("{}-{tag}", b.run));
            let before = b.ddb_proxy.counts();
            let (mut n, mut failed, mut ms) = (0u64, 0u64, Vec::new());
            let mut last = Vec::new();
            while (n as usize) < jobs {
                last = event(&arn, &batches.batch(BATCH));
                let (answer, took) = inst.invoke(last.clone()).await?;
                failed += failures(&answer, BATCH);
                n += BATCH as u64;
                ms.push(took.as_secs_f64() * 1000.0);
            }
            let ops = diff(&b.ddb_proxy.counts(), &before);
            let again = b.ddb_proxy.counts();
            let (answer, _) = inst.invoke(last).await?;
            failed += failures(&answer, BATCH);
            let dup = diff(&b.ddb_proxy.counts(), &again);
            b.set_delay(0);
            let per = |x: u64| x as f64 / n as f64;
            let per_dup = |x: u64| x as f64 / BATCH as f64;
            let c = ShapeCost {
                variant,
                shape,
                delay_ms,
                jobs: n,
                failed_jobs: failed,
                mean_batch_ms: ms.iter().sum::<f64>() / ms.len().max(1) as f64,
                ddb_requests_per_job: per(total(&ops).requests),
                wru_per_job: per(total(&ops).wru),
                ddb_ops: ops,
                duplicate_requests_per_job: per_dup(total(&dup).requests),
                duplicate_wru_per_job: per_dup(total(&dup).wru),
            };
            println!(
                "  {:<24} {:<8}: ddb {:.3}/job  wru {:.2}/job  duplicate: ddb {:.2}, wru {:.2}  ${:.3}/M{}",
                variant.label(),
                shape.name(),
                c.ddb_requests_per_job,
                c.wru_per_job,
                c.duplicate_requests_per_job,
                c.duplicate_wru_per_job,
                c.usd_total(),
                if failed > 0 {
                    format!("  FAILED {failed}")
                } else {
                    String::new()
                }
            );
            out.push(c);
        }
    }
    Ok(out)
}

/// Operations per job, `PutItem 1.000 + UpdateItem 1.000`.
fn ops(c: &Counts, jobs: f64) -> String {
    c.iter()
        .filter(|(_, o)| o.requests > 0)
        .map(|(op, o)| format!("{op} {:.3}", o.requests as f64 / jobs))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The `bench:shapes` block of BENCHMARKS.md; `run` says which run.
pub fn block(shapes: &[ShapeCost], run: &str) -> String {
    let mut s = String::new();
    let Some(first) = shapes.first() else {
        return s;
    };
    let _ = writeln!(
        s,
        "{run}. Batches of 10 run at once, {} ms round trips, {} new jobs per row, then the last batch delivered again. USD per million jobs at us-east-1 list prices as of {PRICES_AS_OF} (DynamoDB on-demand ${:.3} per million write units; Lambda at 128 MB and the row's mean batch duration; SQS {SQS_PER_JOB} requests per job, as counted end to end for every peer).\n",
        first.delay_ms,
        first.jobs,
        DDB_USD_PER_WRU * 1e6
    );
    let _ = writeln!(
        s,
        "| job | peer | DynamoDB requests per new job | write units per new job | per duplicate: requests / write units | USD per million jobs (Lambda + DynamoDB + SQS) |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for c in shapes {
        let (l, d, q) = c.usd_per_million();
        let _ = writeln!(
            s,
            "| {} | {} | **{:.3}** ({}) | **{:.2}** | {:.1} / {:.1} | **${:.3}** ({:.3} + {:.3} + {:.3}){} |",
            c.shape.label(),
            c.variant.label(),
            c.ddb_requests_per_job,
            ops(&c.ddb_ops, c.jobs as f64),
            c.wru_per_job,
            c.duplicate_requests_per_job,
            c.duplicate_wru_per_job,
            c.usd_total(),
            l,
            d,
            q,
            if c.failed_jobs > 0 {
                format!(" ({} jobs failed)", c.failed_jobs)
            } else {
                String::new()
            }
        );
    }
    s
}
