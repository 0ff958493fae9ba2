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
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn hours() -> f64 {
    std::env::var("SIM_HOURS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24.0)
}

fn describe_failure(o: &Outcome) -> String {
    let seed = o.config.seed;
    let hours = o.config.hours;
    let mut s = format!(
        "seed {seed} failed ({} violations):\n  {}\n  replay: SIM_SEED={seed} SIM_HOURS={hours} SIM_TRACE=1 cargo test --test simulation -- replay --nocapture\n  config: {:?}",
        o.verdicts.violations.len(),
        o.verdicts
            .violations
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  "),
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
    // The shard's runs in one number: equal for equal runs (a change meant
    // only to make the simulation faster must leave it as it was).
    let mut digest = 0u64;
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
        digest = digest.rotate_left(7) ^ o.digest;
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
         {invocations} invocations, {requests} requests, {faults} injected faults, in {took:.1} s ({:.0} jobs/s), digest {digest:016x}",
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
    for line in &o.trace {
        eprintln!("{line}");
    }
    if let Ok(path) = std::env::var("SIM_DUMP") {
        std::fs::write(path, o.history.join("\n")).expect("dump");
    }
    if let Ok(job) = std::env::var("SIM_JOB") {
        let needle = format!("\\\"{job}\\\"");
        for line in o
            .history
            .iter()
            .filter(|l| l.contains(&needle) || l.contains(&format!("#{job}")))
        {
            eprintln!("{}", &line[..line.len().min(300)]);
        }
    }
    eprintln!(
        "seed {seed}: {:?}\n  {:?}, {} invocations, {} redrives ({} overran)",
        o.verdicts, o.counts, o.invocations, o.redrives, o.redrives_overran
    );
    assert!(o.verdicts.violations.is_empty(), "{}", describe_failure(&o));
}

/// A run is a function of its seed: the same seed, the same history.
#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 11] {
        let mut config = Config::of_seed(seed, 6.0);
        config.tracing = true;
        let a = run(&config);
        let b = run(&config);
        if a.trace != b.trace {
            let i = a
                .trace
                .iter()
                .zip(&b.trace)
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            let show = |h: &[String]| h[i.saturating_sub(6)..(i + 3).min(h.len())].join("\n");
            eprintln!(
                "traces differ at line {i}:\n{}\n---\n{}",
                show(&a.trace),
                show(&b.trace)
            );
        }
        if a.digest != b.digest {
            let at = a.history.iter().zip(&b.history).position(|(x, y)| x != y);
            let show =
                |h: &[String], i: usize| h[i.saturating_sub(2)..(i + 2).min(h.len())].join("\n");
            let i = at.unwrap_or(a.history.len().min(b.history.len()));
            panic!(
                "seed {seed} ran two ways from event {i}:\n{}\n---\n{}",
                show(&a.history, i),
                show(&b.history, i)
            );
        }
        assert!(
            a.counts.requests > 100,
            "seed {seed} did little: {:?}",
            a.counts
        );
    }
}

/// Runs `config` and fails with its replay line if the checker objects.
fn must_pass(config: &Config) -> Outcome {
    let o = run(config);
    assert!(o.verdicts.violations.is_empty(), "{}", describe_failure(&o));
    o
}

/// Edge 1 (retention): every third job asks to be retried in up to 12 h,
/// three times, on a queue that keeps messages 1 day. SQS deletes a message
/// when its retention runs out, in flight or not, and never dead-letters it
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_DeleteMessage.html>):
/// none may expire; those whose next attempt would come too late are in the
/// DLQ with their context (the checker), and some are.
#[test]
fn edge_1_retries_never_outlive_retention() {
    for seed in [101, 102, 103] {
        let mut c = Config::of_seed(seed, 24.0);
        c.retention = std::time::Duration::from_secs(24 * 3600);
        c.later = 0.33;
        c.max_receive_count = 8;
        c.redrive_every = None;
        let o = must_pass(&c);
        assert_eq!(o.verdicts.expired, 0);
        assert!(
            o.verdicts.dead_lettered > 0,
            "seed {seed}: nothing reached the DLQ: {:?}",
            o.verdicts
        );
    }
}

/// Edge 2 (new MessageIds on redrive): every job is known by its MessageId
/// only; hosts are killed and crash after committing, so committed jobs
/// reach the DLQ through SQS's redrive (maxReceiveCount 2), and the
/// operator's redrive (the real `Redrive`) sends them back, where SQS gives
/// them new MessageIds
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
/// None may be applied twice.
#[test]
fn edge_2_message_id_jobs_survive_redrive() {
    let mut redriven = 0;
    for seed in [201, 202, 203] {
        let mut c = Config::of_seed(seed, 24.0);
        c.message_id_jobs = 1.0;
        c.max_receive_count = 2;
        c.rates.kill = 0.15;
        c.rates.crash = 0.15;
        c.redrive_every = Some(std::time::Duration::from_secs(3 * 3600));
        let o = must_pass(&c);
        redriven += o.redrives;
        assert!(
            o.verdicts.dead_lettered > 0 || o.redrives > 0,
            "seed {seed}: {:?}",
            o.verdicts
        );
    }
    assert!(redriven > 0, "no redrive ran");
}

/// Edge 3 (Lambda fails the whole batch past its timeout,
/// <https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html>):
/// slow answers (5-40 s) from SQS and DynamoDB on one request in five and
/// handlers that hang; short function timeouts. The mapping records a
/// violation for any invocation that outlives its timeout.
#[test]
fn edge_3_slow_services_never_make_the_function_overrun() {
    for seed in [301, 302, 303] {
        let mut c = Config::of_seed(seed, 24.0);
        c.mapping.function_timeout = std::time::Duration::from_secs(10);
        c.visibility = std::time::Duration::from_secs(60);
        c.mapping.batch_size = 10;
        c.rates.slow = 0.2;
        c.rates.hang = 0.05;
        let o = must_pass(&c);
        assert!(
            o.counts.slow > 50,
            "seed {seed}: few slow answers: {:?}",
            o.counts
        );
    }
}
