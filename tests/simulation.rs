//! The deterministic simulation (tests/sim/): seeded runs of the real batch
//! code and DLQ tools, under the real SDK clients, against models of SQS,
//! DynamoDB and Lambda's event source mapping on tokio's paused clock.
//!
//! - `SIM_SEEDS` (default below), `SIM_FIRST_SEED` (1), `SIM_HOURS` (24):
//!   the campaign `make test` runs; `make sim SEEDS=N HOURS=H` a longer one.
//! - `SIM_SEED=N SIM_TRACE=1 cargo test --test simulation -- replay
//!   --nocapture` replays one seed with its trace.

mod sim;

use std::time::Instant as WallInstant;

use sim::run::{Config, Outcome, run};

/// Seeds `make test` runs, split over [`SHARDS`] test threads.
const DEFAULT_SEEDS: u64 = 64;
const SHARDS: u64 = 4;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn hours() -> f64 {
    std::env::var("SIM_HOURS").ok().and_then(|v| v.parse().ok()).unwrap_or(24.0)
}

fn describe_failure(o: &Outcome) -> String {
    let seed = o.config.seed;
    let hours = o.config.hours;
    let mut s = format!(
        "seed {seed} failed ({} violations):\n  {}\n  replay: SIM_SEED={seed} SIM_HOURS={hours} SIM_TRACE=1 cargo test --test simulation -- replay --nocapture\n  config: {:?}",
        o.verdicts.violations.len(),
        o.verdicts.violations.iter().take(10).cloned().collect::<Vec<_>>().join("\n  "),
        o.config
    );
    s.push('\n');
    s
}

fn campaign(shard: u64) {
    let first = env_u64("SIM_FIRST_SEED", 1);
    let seeds = env_u64("SIM_SEEDS", DEFAULT_SEEDS);
    let hours = hours();
    let started = WallInstant::now();
    let (mut runs, mut jobs, mut applied, mut dead, mut pending, mut invocations, mut requests) =
        (0u64, 0usize, 0usize, 0usize, 0usize, 0u64, 0u64);
    let mut faults = 0u64;
    let mut failures = Vec::new();
    for seed in (first..first + seeds).filter(|s| s % SHARDS == shard) {
        let o = run(&Config::of_seed(seed, hours));
        runs += 1;
        jobs += o.verdicts.jobs;
        applied += o.verdicts.applied;
        dead += o.verdicts.dead_lettered;
        pending += o.verdicts.pending;
        invocations += o.invocations;
        requests += o.counts.requests;
        let c = o.counts;
        faults += c.lost_before + c.lost_after + c.throttled + c.slow + c.killed + c.crashed;
        if !o.verdicts.violations.is_empty() {
            eprintln!(
                "{} (after {:.1} s of this shard)",
                describe_failure(&o),
                started.elapsed().as_secs_f64()
            );
            failures.push(seed);
        }
    }
    let took = started.elapsed().as_secs_f64();
    eprintln!(
        "simulation shard {shard}: {runs} seeds x {hours} h: {jobs} jobs ({applied} applied, {dead} dead-lettered, {pending} pending), \
         {invocations} invocations, {requests} requests, {faults} injected faults, in {took:.1} s ({:.0} jobs/s)",
        jobs as f64 / took
    );
    assert!(failures.is_empty(), "failing seeds: {failures:?}");
}

#[test]
fn campaign_shard_0() {
    campaign(0);
}

#[test]
fn campaign_shard_1() {
    campaign(1);
}

#[test]
fn campaign_shard_2() {
    campaign(2);
}

#[test]
fn campaign_shard_3() {
    campaign(3);
}

/// `SIM_SEED=N`: that seed, traced when `SIM_TRACE=1`. Without it, seed 1.
#[test]
fn replay() {
    let seed = env_u64("SIM_SEED", 1);
    let mut config = Config::of_seed(seed, hours());
    config.tracing = std::env::var("SIM_TRACE").is_ok_and(|v| v == "1");
    let o = run(&config);
    if let Ok(path) = std::env::var("SIM_DUMP") {
        std::fs::write(path, o.history.join("\n")).expect("dump");
    }
    if let Ok(job) = std::env::var("SIM_JOB") {
        let needle = format!("\\\"{job}\\\"");
        for line in o.history.iter().filter(|l| l.contains(&needle) || l.contains(&format!("#{job}"))) {
            eprintln!("{}", &line[..line.len().min(300)]);
        }
    }
    eprintln!("seed {seed}: {:?}\n  {:?}, {} invocations, {} redrives ({} overran)", o.verdicts, o.counts, o.invocations, o.redrives, o.redrives_overran);
    assert!(o.verdicts.violations.is_empty(), "{}", describe_failure(&o));
}

/// A run is a function of its seed: the same seed, the same history.
#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 11] {
        let config = Config::of_seed(seed, 6.0);
        let a = run(&config);
        let b = run(&config);
        if a.digest != b.digest {
            let at = a.history.iter().zip(&b.history).position(|(x, y)| x != y);
            let show = |h: &[String], i: usize| h[i.saturating_sub(2)..(i + 2).min(h.len())].join("\n");
            let i = at.unwrap_or(a.history.len().min(b.history.len()));
            panic!(
                "seed {seed} ran two ways from event {i}:\n{}\n---\n{}",
                show(&a.history, i),
                show(&b.history, i)
            );
        }
        assert!(a.counts.requests > 100, "seed {seed} did little: {:?}", a.counts);
    }
}
