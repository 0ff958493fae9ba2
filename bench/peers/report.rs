//! The results as Markdown: the blocks of `BENCHMARKS.md` between
//! `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, which a run rewrites
//! (the prose around them is written by hand), plus the cost model and the
//! goals against its peers.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::proxy::Counts;
use crate::{Cell, Peer, Results};

/// Public list prices, us-east-1, as published on the AWS pricing pages
/// (consulted 2026-12-02). Lambda x86_64 duration, first 6 billion GB-s a
/// month; requests.
pub const LAMBDA_USD_PER_GB_S: f64 = 0.000_016_666_7;
pub const LAMBDA_USD_PER_REQUEST: f64 = 0.20 / 1e6;
/// DynamoDB on-demand write request unit (halved on 2024-11-01).
pub const DDB_USD_PER_WRU: f64 = 0.625 / 1e6;
/// SQS standard queue request (per 64 KB chunk), first 100 billion a month.
pub const SQS_USD_PER_REQUEST: f64 = 0.40 / 1e6;
pub const PRICES_AS_OF: &str = "2026-12-02";

/// The batch size and delays the cost model and the goals read.
const HEADLINE_BATCH: usize = 10;

const MB: f64 = 1e6;

fn cells(grid: &[Cell], peer: Peer, batch: usize, delay: u64) -> impl Iterator<Item = &Cell> {
    grid.iter()
        .filter(move |c| c.peer == peer && c.batch == batch && c.delay_ms == delay)
}

/// The cell of `peer` at its highest concurrency for this batch and delay.
fn best(grid: &[Cell], peer: Peer, batch: usize, delay: u64) -> Option<&Cell> {
    cells(grid, peer, batch, delay).max_by_key(|c| c.concurrency)
}

fn delays(r: &Results) -> Vec<u64> {
    let mut d: Vec<u64> = r.grid.iter().map(|c| c.delay_ms).collect();
    d.sort_unstable();
    d.dedup();
    d
}

fn batches(r: &Results) -> Vec<usize> {
    let mut b: Vec<usize> = r.grid.iter().map(|c| c.batch).collect();
    b.sort_unstable();
    b.dedup();
    b
}

/// Operations summed over every cell of a peer, per job: "PutItem 1.000 + …".
fn ops_per_job(cells: &[&Cell], pick: impl Fn(&Cell) -> &Counts) -> (String, f64, f64) {
    let jobs: u64 = cells.iter().map(|c| c.jobs).sum();
    let mut sum: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for c in cells {
        for (op, n) in pick(c) {
            let e = sum.entry(op.clone()).or_default();
            e.0 += n.requests;
            e.1 += n.wru;
        }
    }
    let jobs = jobs.max(1) as f64;
    let text = if sum.is_empty() {
        "none".to_owned()
    } else {
        sum.iter()
            .map(|(op, (n, _))| format!("{op} {:.3}", *n as f64 / jobs))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    let requests = sum.values().map(|v| v.0).sum::<u64>() as f64 / jobs;
    let wru = sum.values().map(|v| v.1).sum::<u64>() as f64 / jobs;
    (text, requests, wru)
}

fn lat(c: &Cell) -> String {
    let rt = c
        .rt_p50
        .map_or(String::new(), |n| format!(" (**{n:.0} RT**)"));
    format!("{:.1} / {:.1}{rt}", c.p50_ms, c.p99_ms)
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "–".into()
    }
}

pub struct Cost {
    pub peer: Peer,
    pub delay_ms: u64,
    pub batch_ms: f64,
    pub memory_mb: u64,
    pub lambda: f64,
    pub dynamodb: f64,
    pub sqs: f64,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.lambda + self.dynamodb + self.sqs
    }
}

/// USD per million jobs for each peer at batch 10 and each delay > 0:
/// Lambda requests and GB-s at the measured mean batch duration, at the
/// smallest memory size that holds the peer's max RSS with 20 % headroom
/// (128 MB at least); DynamoDB write units counted in the grid; SQS
/// requests counted end to end (producer, event source mapping, function).
pub fn costs(r: &Results) -> Vec<Cost> {
    let mut out = Vec::new();
    for delay in delays(r).into_iter().filter(|d| *d > 0) {
        for peer in Peer::ALL {
            let Some(c) = best(&r.grid, peer, HEADLINE_BATCH, delay) else {
                continue;
            };
            let rss = r
                .cold_starts
                .iter()
                .filter(|x| x.peer == peer)
                .map(|x| x.max_rss_mb)
                .fold(0.0, f64::max);
            let memory_mb = ((rss * 1.2 / 64.0).ceil() as u64 * 64).max(128);
            let invocations = 1e6 / c.batch as f64;
            let lambda = invocations * LAMBDA_USD_PER_REQUEST
                + invocations
                    * (c.mean_ms / 1000.0)
                    * (memory_mb as f64 / 1024.0)
                    * LAMBDA_USD_PER_GB_S;
            let wru: f64 = {
                let all: Vec<&Cell> = r.grid.iter().filter(|x| x.peer == peer).collect();
                ops_per_job(&all, |x| &x.ddb_ops).2
            };
            let sqs_per_job = r
                .end_to_end
                .iter()
                .find(|e| e.peer == peer)
                .map_or(0.0, |e| {
                    e.producer_sqs_per_job + e.esm_sqs_per_job + e.function_sqs_per_job
                });
            out.push(Cost {
                peer,
                delay_ms: delay,
                batch_ms: c.mean_ms,
                memory_mb,
                lambda,
                dynamodb: wru * 1e6 * DDB_USD_PER_WRU,
                sqs: sqs_per_job * 1e6 * SQS_USD_PER_REQUEST,
            });
        }
    }
    out
}

pub struct Goal {
    pub goal: &'static str,
    pub target: String,
    pub measured: String,
    pub met: bool,
    pub by: String,
}

pub fn goals(r: &Results) -> Vec<Goal> {
    let mut g = Vec::new();
    let ds = delays(r);
    // Throughput against the plain consumer: one execution environment,
    // batch 10, highest concurrency, every delay.
    let vs = |other: Peer| -> Vec<(u64, f64)> {
        ds.iter()
            .filter_map(|&d| {
                let i = best(&r.grid, Peer::Idemq, HEADLINE_BATCH, d)?;
                let o = best(&r.grid, other, HEADLINE_BATCH, d)?;
                Some((d, i.jobs_per_s / o.jobs_per_s))
            })
            .collect()
    };
    let show = |v: &[(u64, f64)]| {
        v.iter()
            .map(|(d, x)| format!("{x:.3}× at {d} ms"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let worst = |v: &[(u64, f64)]| v.iter().map(|x| x.1).fold(f64::INFINITY, f64::min);
    let plain = vs(Peer::Plain);
    let w = worst(&plain);
    g.push(Goal {
        goal: "throughput vs the plain consumer (batch 10, one environment)",
        target: "≥ 0.9×".into(),
        measured: show(&plain),
        met: w >= 0.9,
        by: if w >= 0.9 {
            String::new()
        } else {
            format!("{:.1} % short at worst", (0.9 - w) / 0.9 * 100.0)
        },
    });
    // At the grid's longest delay, the one closest to a network between
    // the function and its store, the bar is higher: there idemq's work
    // per job is the plain consumer's, one request.
    if let Some(&(d, x)) = plain.iter().max_by_key(|(d, _)| *d) {
        g.push(Goal {
            goal: "throughput vs the plain consumer (batch 10, one environment, longest delay)",
            target: "≥ 0.95×".into(),
            measured: format!("{x:.3}× at {d} ms"),
            met: x >= 0.95,
            by: if x >= 0.95 {
                String::new()
            } else {
                format!("{:.1} % short", (0.95 - x) / 0.95 * 100.0)
            },
        });
    }
    let pt = vs(Peer::Powertools);
    let w = worst(&pt);
    g.push(Goal {
        goal: "throughput vs Powertools (batch 10, one environment)",
        target: "≥ 3×".into(),
        measured: show(&pt),
        met: w >= 3.0,
        by: if w >= 3.0 {
            String::new()
        } else {
            format!("{:.1} % short at worst", (3.0 - w) / 3.0 * 100.0)
        },
    });
    if let Some(n) = r.scaleout.iter().map(|c| c.instances).max() {
        let get = |p: Peer| r.scaleout.iter().find(|c| c.peer == p && c.instances == n);
        if let (Some(i), Some(p)) = (get(Peer::Idemq), get(Peer::Powertools)) {
            let x = i.jobs_per_s / p.jobs_per_s;
            g.push(Goal {
                goal: "throughput vs Powertools (batch 10, environments at once)",
                target: "≥ 3×".into(),
                measured: format!("{x:.2}× with {n} environments each at {} ms", i.delay_ms),
                met: x >= 3.0,
                by: if x >= 3.0 {
                    String::new()
                } else {
                    format!("{:.0} % short", (3.0 - x) / 3.0 * 100.0)
                },
            });
        }
    }
    let idemq: Vec<&Cell> = r.grid.iter().filter(|c| c.peer == Peer::Idemq).collect();
    let (ops, req, _) = ops_per_job(&idemq, |c| &c.ddb_ops);
    let failed: u64 = idemq.iter().map(|c| c.failed_jobs).sum();
    g.push(Goal {
        goal: "DynamoDB requests per successful job (idemq)",
        target: "1".into(),
        measured: format!("{req:.3} ({ops}; {failed} jobs failed)"),
        met: (req - 1.0).abs() < 1e-9 && failed == 0,
        by: if (req - 1.0).abs() < 1e-9 {
            String::new()
        } else {
            format!("{:+.3}", req - 1.0)
        },
    });
    for host in ["emulator", "cargo lambda watch"] {
        if let Some(c) = r
            .cold_starts
            .iter()
            .find(|c| c.peer == Peer::Idemq && c.host == host)
        {
            g.push(Goal {
                goal: if host == "emulator" {
                    "init duration (idemq bootstrap, median)"
                } else {
                    "init duration (idemq bootstrap, under cargo lambda watch)"
                },
                target: "≤ 30 ms".into(),
                measured: format!("{:.1} ms", c.init_ms),
                met: c.init_ms <= 30.0,
                by: if c.init_ms <= 30.0 {
                    String::new()
                } else {
                    format!("{:.1} ms over", c.init_ms - 30.0)
                },
            });
        }
    }
    let rss = r
        .cold_starts
        .iter()
        .filter(|c| c.peer == Peer::Idemq)
        .map(|c| c.max_rss_mb)
        .chain(
            r.peak_rss_mb
                .iter()
                .filter(|(k, _)| k.starts_with("idemq"))
                .map(|(_, v)| *v),
        )
        .fold(0.0, f64::max);
    let rss_mb = rss * 1048576.0 / MB;
    g.push(Goal {
        goal: "max RSS (idemq bootstrap, whole run)",
        target: "≤ 40 MB".into(),
        measured: format!("{rss_mb:.1} MB"),
        met: rss_mb <= 40.0,
        by: if rss_mb <= 40.0 {
            String::new()
        } else {
            format!("{:.1} MB over", rss_mb - 40.0)
        },
    });
    let size = r.bootstrap_bytes as f64 / MB;
    g.push(Goal {
        goal: "stripped bootstrap size",
        target: "≤ 12 MB".into(),
        measured: format!("{size:.2} MB ({} bytes)", r.bootstrap_bytes),
        met: size <= 12.0,
        by: if size <= 12.0 {
            String::new()
        } else {
            format!(
                "{:.2} MB ({:.1} %) over",
                size - 12.0,
                (size - 12.0) / 12.0 * 100.0
            )
        },
    });
    g
}

/// The few numbers a reader wants first.
fn headline(r: &Results) -> String {
    let mut s = String::new();
    let per_job = |p: Peer| {
        let all: Vec<&Cell> = r.grid.iter().filter(|c| c.peer == p).collect();
        let (_, req, wru) = ops_per_job(&all, |c| &c.ddb_ops);
        (req, wru)
    };
    let (iq, iw) = per_job(Peer::Idemq);
    let (pq, pw) = per_job(Peer::Powertools);
    let (lq, lw) = per_job(Peer::Plain);
    let _ = writeln!(
        s,
        "- **DynamoDB per successful job**: idemq {iq:.3} requests ({iw:.1} write units), Powertools {pq:.3} ({pw:.1}), plain {lq:.3} ({lw:.1}, and it applies a redelivered job twice)."
    );
    if let Some(d) = delays(r).into_iter().max() {
        let get = |p: Peer| best(&r.grid, p, HEADLINE_BATCH, d);
        if let (Some(i), Some(l), Some(p)) =
            (get(Peer::Idemq), get(Peer::Plain), get(Peer::Powertools))
        {
            let _ = writeln!(
                s,
                "- **Batch of {HEADLINE_BATCH}, {d} ms round trips, one execution environment**: idemq {:.0} jobs/s, p50 {:.0} ms ({} round trip{}); plain {:.0} jobs/s ({:.2}×); Powertools {:.0} jobs/s, p50 {:.0} ms ({} round trips): idemq is {:.1}× faster.",
                i.jobs_per_s,
                i.p50_ms,
                i.rt_p50.map_or("?".into(), |x| format!("{x:.0}")),
                if i.rt_p50 == Some(1.0) { "" } else { "s" },
                l.jobs_per_s,
                i.jobs_per_s / l.jobs_per_s,
                p.jobs_per_s,
                p.p50_ms,
                p.rt_p50.map_or("?".into(), |x| format!("{x:.0}")),
                i.jobs_per_s / p.jobs_per_s
            );
        }
    }
    let cold = |p: Peer| {
        r.cold_starts
            .iter()
            .find(|c| c.peer == p && c.host == "emulator")
    };
    if let (Some(i), Some(p)) = (cold(Peer::Idemq), cold(Peer::Powertools)) {
        let _ = writeln!(
            s,
            "- **Cold start**: init {:.0} ms and max RSS {:.0} MB for the idemq bootstrap, against {:.0} ms and {:.0} MB for the Powertools handler; the stripped bootstrap is {:.1} MB.",
            i.init_ms,
            i.max_rss_mb * 1048576.0 / MB,
            p.init_ms,
            p.max_rss_mb * 1048576.0 / MB,
            r.bootstrap_bytes as f64 / MB
        );
    }
    let costs = costs(r);
    if let Some(d) = costs.iter().map(|c| c.delay_ms).max() {
        let row = |p: Peer| costs.iter().find(|c| c.peer == p && c.delay_ms == d);
        if let (Some(i), Some(l), Some(p)) =
            (row(Peer::Idemq), row(Peer::Plain), row(Peer::Powertools))
        {
            let _ = writeln!(
                s,
                "- **Cost per million jobs** (batch {HEADLINE_BATCH}, {d} ms): idemq ${:.2}, Powertools ${:.2}, plain ${:.2}; DynamoDB write units are most of it.",
                i.total(),
                p.total(),
                l.total()
            );
        }
    }
    s
}

/// Every generated block, by name.
pub fn blocks(r: &Results) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut s = String::new();

    // The run.
    let _ = writeln!(
        s,
        "Run of {} (`{}`), {} s in all.",
        r.started,
        r.command,
        r.args.get("elapsed_s").map_or("?", |v| v)
    );
    let _ = writeln!(
        s,
        "Machine: {} (shared with other work); local stack: LocalStack SQS + moto DynamoDB (one request at a time).",
        r.machine
    );
    let v = |k: &str| r.versions.get(k).map_or("?", |v| v.as_str());
    let _ = writeln!(
        s,
        "Peers: idemq {} (release bootstrap, {}), Powertools for AWS Lambda (Python) {} with boto3 {} on Python {}.",
        v("idemq"),
        v("rustc"),
        v("aws-lambda-powertools"),
        v("boto3"),
        v("python")
    );
    let _ = writeln!(
        s,
        "Grid: round-trip delays {} ms, batch sizes {}, concurrency {}; each cell ≥ {} s and ≥ 5 batches (≤ 3× that), best of {} rounds with the peers in alternating order.",
        r.args.get("delays_ms").map_or("?", |v| v.as_str()),
        r.args.get("batches").map_or("?", |v| v.as_str()),
        r.args.get("concurrency").map_or("?", |v| v.as_str()),
        r.args.get("cell_secs").map_or("?", |v| v.as_str()),
        r.args.get("rounds").map_or("?", |v| v.as_str()),
    );
    if let Some(b) = &r.release_build {
        let _ = writeln!(s, "Release build: {b}.");
    }
    out.push(("run".to_owned(), s));

    out.push(("headline".to_owned(), headline(r)));

    // Where a batch's time goes.
    let mut s = String::new();
    let low = r.grid.iter().map(|c| c.concurrency).min().unwrap_or(1);
    let _ = writeln!(
        s,
        "| 0 ms, jobs one at a time | batch | p50 ms | with a DynamoDB request out | elsewhere (the function, the Runtime API) | per job: DynamoDB | per job: elsewhere |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for b in batches(r).into_iter().filter(|b| *b > 1) {
        for peer in Peer::ALL {
            let Some(c) = cells(&r.grid, peer, b, 0).find(|c| c.concurrency == low) else {
                continue;
            };
            let Some(busy) = c.ddb_busy_ms else { continue };
            let rest = (c.p50_ms - busy).max(0.0);
            let _ = writeln!(
                s,
                "| {} | {b} | {:.1} | {busy:.1} | {rest:.1} | {:.2} ms | {:.2} ms |",
                peer.name(),
                c.p50_ms,
                busy / b as f64,
                rest / b as f64
            );
        }
    }
    out.push(("timesplit".to_owned(), s));

    // Requests per job.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| per job, on success | DynamoDB requests | DynamoDB write units | SQS requests by the function | jobs counted |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- |");
    for peer in Peer::ALL {
        let all: Vec<&Cell> = r
            .grid
            .iter()
            .chain(&r.scaleout)
            .filter(|c| c.peer == peer)
            .collect();
        let (ops, req, wru) = ops_per_job(&all, |c| &c.ddb_ops);
        let (_, sqs, _) = ops_per_job(&all, |c| &c.sqs_ops);
        let jobs: u64 = all.iter().map(|c| c.jobs).sum();
        let failed: u64 = all.iter().map(|c| c.failed_jobs).sum();
        let _ = writeln!(
            s,
            "| {} | **{req:.3}** ({ops}) | {wru:.2} | {sqs:.3} | {jobs}{} |",
            peer.name(),
            if failed > 0 {
                format!(" ({failed} failed)")
            } else {
                String::new()
            }
        );
    }
    out.push(("requests".to_owned(), s));

    // A redelivered batch.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| a redelivered job | DynamoDB requests | write units | balance after the batch came twice |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- |");
    for d in &r.duplicates {
        let ops = d
            .ddb_ops
            .iter()
            .map(|(op, c)| format!("{op} {:.1}", c.requests as f64 / 10.0))
            .collect::<Vec<_>>()
            .join(" + ");
        let verdict = if d.balance_after_redelivery == d.balance_expected {
            "applied once".to_owned()
        } else {
            format!(
                "**applied twice** ({} instead of {})",
                d.balance_after_redelivery, d.balance_expected
            )
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} ({ops}) | {:.1} | {} = {verdict} |",
            d.peer.name(),
            d.ddb_requests_per_job,
            d.wru_per_job,
            d.balance_after_redelivery
        );
    }
    out.push(("redelivery".to_owned(), s));

    // End to end.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| end to end, batch 10 | jobs/s | SQS requests per job: producer | event source mapping | function | total |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for e in &r.end_to_end {
        let _ = writeln!(
            s,
            "| {} ({} jobs) | {:.0} | {:.3} | {:.3} | {:.3} | **{:.3}** |",
            e.peer.name(),
            e.jobs,
            e.jobs_per_s,
            e.producer_sqs_per_job,
            e.esm_sqs_per_job,
            e.function_sqs_per_job,
            e.producer_sqs_per_job + e.esm_sqs_per_job + e.function_sqs_per_job
        );
    }
    out.push(("e2e".to_owned(), s));

    // The grid, one table per delay.
    let mut s = String::new();
    for d in delays(r) {
        let rtt: Vec<f64> = r
            .grid
            .iter()
            .filter(|c| c.delay_ms == d)
            .map(|c| c.rtt_ms)
            .collect();
        let eff = rtt.iter().sum::<f64>() / rtt.len().max(1) as f64;
        let _ = writeln!(
            s,
            "\n**Round-trip delay {d} ms**{}\n",
            if d == 0 {
                " (the emulators' own speed)".to_owned()
            } else {
                format!(" ({eff:.1} ms as slept)")
            }
        );
        let _ = writeln!(
            s,
            "| batch | concurrency | idemq jobs/s | plain jobs/s | Powertools jobs/s | idemq ÷ plain | idemq ÷ Powertools | idemq p50 / p99 ms | plain p50 / p99 ms | Powertools p50 / p99 ms |"
        );
        let _ = writeln!(
            s,
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        );
        for b in batches(r) {
            let pt = cells(&r.grid, Peer::Powertools, b, d).next();
            let mut concs: Vec<usize> = cells(&r.grid, Peer::Idemq, b, d)
                .map(|c| c.concurrency)
                .collect();
            concs.sort_unstable();
            for (i, c) in concs.iter().enumerate() {
                let find = |p: Peer| cells(&r.grid, p, b, d).find(|x| x.concurrency == *c);
                let (Some(id), Some(pl)) = (find(Peer::Idemq), find(Peer::Plain)) else {
                    continue;
                };
                let in_flight = (*c).min(b);
                let conc = if in_flight < *c {
                    format!("{c} ({in_flight} in flight)")
                } else {
                    c.to_string()
                };
                let (pt_rate, pt_lat) = match (pt, i) {
                    (Some(p), 0) => (format!("{:.1}", p.jobs_per_s), lat(p)),
                    (Some(_), _) => ("″".into(), "″".into()),
                    _ => ("–".into(), "–".into()),
                };
                let _ = writeln!(
                    s,
                    "| {b} | {conc} | {:.1} | {:.1} | {pt_rate} | {} | {} | {} | {} | {pt_lat} |",
                    id.jobs_per_s,
                    pl.jobs_per_s,
                    ratio(id.jobs_per_s, pl.jobs_per_s),
                    pt.map_or("–".into(), |p| ratio(id.jobs_per_s, p.jobs_per_s)),
                    lat(id),
                    lat(pl),
                );
            }
        }
    }
    out.push(("grid".to_owned(), s));

    // Scale-out.
    let mut s = String::new();
    if let Some(c) = r.scaleout.first() {
        let _ = writeln!(
            s,
            "Batch 10, round-trip delay {} ms; idemq and plain run 10 jobs at once in each environment, Powertools one.\n",
            c.delay_ms
        );
    }
    let _ = writeln!(
        s,
        "| environments | idemq jobs/s | plain jobs/s | Powertools jobs/s | idemq ÷ plain | idemq ÷ Powertools | idemq p50 ms | Powertools p50 ms |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut ns: Vec<usize> = r.scaleout.iter().map(|c| c.instances).collect();
    ns.sort_unstable();
    ns.dedup();
    for n in ns {
        let get = |p: Peer| r.scaleout.iter().find(|c| c.peer == p && c.instances == n);
        if let (Some(i), Some(pl), Some(pt)) =
            (get(Peer::Idemq), get(Peer::Plain), get(Peer::Powertools))
        {
            let _ = writeln!(
                s,
                "| {n} | {:.1} | {:.1} | {:.1} | {} | {} | {:.1} | {:.1} |",
                i.jobs_per_s,
                pl.jobs_per_s,
                pt.jobs_per_s,
                ratio(i.jobs_per_s, pl.jobs_per_s),
                ratio(i.jobs_per_s, pt.jobs_per_s),
                i.p50_ms,
                pt.p50_ms
            );
        }
    }
    out.push(("scaleout".to_owned(), s));

    // Cold starts.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| cold start | host | init ms (median; samples) | first batch of 10, ms | warm batch of 10, ms | max RSS MB |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- |");
    for c in &r.cold_starts {
        let imports = c
            .imports_ms
            .map_or(String::new(), |m| format!(", of which imports {m:.0} ms"));
        let all = c
            .init_ms_all
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "| {} | {} | **{:.1}** ({all}{imports}) | {:.1} | {:.1} | {:.1} |",
            c.peer.name(),
            c.host,
            c.init_ms,
            c.first_invoke_ms,
            c.warm_invoke_ms,
            c.max_rss_mb * 1048576.0 / MB
        );
    }
    let _ = writeln!(
        s,
        "\nStripped `bootstrap` (idemq and plain in one binary, `--release`, the profile in Cargo.toml): **{:.2} MB** ({} bytes).",
        r.bootstrap_bytes as f64 / MB,
        r.bootstrap_bytes
    );
    if !r.peak_rss_mb.is_empty() {
        let peaks = r
            .peak_rss_mb
            .iter()
            .map(|(k, v)| format!("{k} {:.1}", v * 1048576.0 / MB))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "Max RSS of the grid's environments after every cell (MB): {peaks}."
        );
    }
    out.push(("coldstart".to_owned(), s));

    // Cost.
    let mut s = String::new();
    let _ = writeln!(
        s,
        "USD per million jobs, batch 10; prices us-east-1 as of {PRICES_AS_OF}: Lambda x86 ${LAMBDA_USD_PER_GB_S} per GB-s and ${:.2} per million requests, DynamoDB on-demand ${:.3} per million write units, SQS standard ${:.2} per million requests.\n",
        LAMBDA_USD_PER_REQUEST * 1e6,
        DDB_USD_PER_WRU * 1e6,
        SQS_USD_PER_REQUEST * 1e6
    );
    let _ = writeln!(
        s,
        "| peer | delay | mean batch ms | memory | Lambda | DynamoDB | SQS | **total** |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for c in costs(r) {
        let _ = writeln!(
            s,
            "| {} | {} ms | {:.1} | {} MB | ${:.3} | ${:.3} | ${:.3} | **${:.3}** |",
            c.peer.name(),
            c.delay_ms,
            c.batch_ms,
            c.memory_mb,
            c.lambda,
            c.dynamodb,
            c.sqs,
            c.total()
        );
    }
    out.push(("cost".to_owned(), s));
    if !r.shapes.is_empty() {
        out.push((
            "shapes".to_owned(),
            crate::shapes::block(
                &r.shapes,
                &format!("Run of {} (`{}`)", r.started, r.command),
            ),
        ));
    }

    // Goals.
    let mut s = String::new();
    let _ = writeln!(s, "| goal | target | measured | |");
    let _ = writeln!(s, "| --- | --- | --- | --- |");
    for g in goals(r) {
        let verdict = if g.met {
            "met".to_owned()
        } else {
            format!("**missed**: {}", g.by)
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {verdict} |",
            g.goal, g.target, g.measured
        );
    }
    out.push(("goals".to_owned(), s));
    out
}

/// Replaces each `<!-- bench:NAME -->…<!-- /bench:NAME -->` block of `path`
/// with the generated text; blocks the file lacks are left out.
pub fn rewrite(path: &Path, blocks: &[(String, String)]) -> std::io::Result<()> {
    let mut text = std::fs::read_to_string(path)?;
    for (name, body) in blocks {
        let (open, close) = (
            format!("<!-- bench:{name} -->"),
            format!("<!-- /bench:{name} -->"),
        );
        if let (Some(a), Some(b)) = (text.find(&open), text.find(&close))
            && a < b
        {
            let start = a + open.len();
            text.replace_range(start..b, &format!("\n{}\n", body.trim_matches('\n')));
        }
    }
    std::fs::write(path, text)
}
