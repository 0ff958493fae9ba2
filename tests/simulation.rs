//! The deterministic simulation (tests/sim/): seeded runs of the real batch
//! code and DLQ tools, under the real SDK clients, against models of SQS,
//! DynamoDB and Lambda's event source mapping on tokio's paused clock.
//!
//! - `SIM_SEEDS` (default below), `SIM_FIRST_SEED` (1), `SIM_HOURS` (24):
//!   the campaign `make test` runs; `make sim SEEDS=N HOURS=H` a longer one.
//! - `SIM_SEED=N SIM_TRACE=1 cargo test --test simulation -- replay
//!   --nocapture` replays one seed with its trace (`SIM_FIFO=1`: its FIFO
//!   run; `SIM_WORKERS=N`: on N local workers); `SIM_FIFO_SEEDS` (default
//!   below) sizes the FIFO campaign.

mod sim;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant as WallInstant;

use sim::run::{Config, Outcome, run};

/// Seeds `make test` runs, split over [`SHARDS`] test threads.
const DEFAULT_SEEDS: u64 = 448;
const SHARDS: u64 = 4;
/// Seeds of the FIFO campaign (`SIM_FIFO_SEEDS`), over [`FIFO_SHARDS`]
/// threads: [`Config::fifo_of_seed`], the same seeds' runs on FIFO queues.
const DEFAULT_FIFO_SEEDS: u64 = 64;
const FIFO_SHARDS: u64 = 2;

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
    let mut fifo = if o.config.fifo.is_some() {
        "SIM_FIFO=1 ".to_owned()
    } else {
        String::new()
    };
    if o.config.edges.workers > 0 {
        fifo.push_str(&format!("SIM_WORKERS={} ", o.config.edges.workers));
    }
    let mut s = format!(
        "seed {seed} failed ({} violations):\n  {}\n  replay: {fifo}SIM_SEED={seed} SIM_HOURS={hours} SIM_TRACE=1 cargo test --test simulation -- replay --nocapture\n  config: {:?}",
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
    let seeds = env_u64("SIM_SEEDS", DEFAULT_SEEDS);
    run_campaign("simulation", shard, SHARDS, seeds, Config::of_seed);
}

/// The FIFO campaign: seeds of their own, on FIFO queues.
fn fifo_campaign(shard: u64) {
    let seeds = env_u64("SIM_FIFO_SEEDS", DEFAULT_FIFO_SEEDS);
    run_campaign(
        "FIFO simulation",
        shard,
        FIFO_SHARDS,
        seeds,
        Config::fifo_of_seed,
    );
}

fn run_campaign(
    what: &str,
    shard: u64,
    shards: u64,
    seeds: u64,
    config_of: fn(u64, f64) -> Config,
) {
    let first = env_u64("SIM_FIRST_SEED", 1);
    let hours = hours();
    let started = WallInstant::now();
    let (mut runs, mut jobs, mut applied, mut dead, mut pending, mut invocations, mut requests) =
        (0u64, 0usize, 0usize, 0usize, 0usize, 0u64, 0u64);
    let (mut faults, mut conflicts, mut reruns, mut stale) = (0u64, 0u64, 0u64, 0u64);
    // The shard's runs in one number: equal for equal runs (a change meant
    // only to make the simulation faster must leave it as it was).
    let mut digest = 0u64;
    let mut failures = Vec::new();
    for seed in (first..first + seeds).filter(|s| s % shards == shard) {
        let o = run(&config_of(seed, hours));
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
        conflicts += o.conflicts;
        reruns += o.reruns;
        stale += o.stale_reads;
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
        "{what} shard {shard}: {runs} seeds x {hours} h: {jobs} jobs ({applied} applied, {dead} dead-lettered, {pending} pending), \
         {invocations} invocations, {requests} requests, {faults} injected faults, {conflicts} transaction conflicts, {reruns} re-runs after lost races, {stale} stale reads, in {took:.1} s ({:.0} jobs/s), digest {digest:016x}",
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

#[test]
fn fifo_campaign_shard_0() {
    fifo_campaign(0);
}

#[test]
fn fifo_campaign_shard_1() {
    fifo_campaign(1);
}

/// `SIM_SEED=N`: that seed, traced when `SIM_TRACE=1`. Without it, seed 1.
/// `SIM_FIFO=1`: the FIFO campaign's run of that seed. `SIM_WORKERS=N`:
/// with N local worker processes in Lambda's place.
#[test]
fn replay() {
    let seed = env_u64("SIM_SEED", 1);
    let mut config = if std::env::var("SIM_FIFO").is_ok_and(|v| v == "1") {
        Config::fifo_of_seed(seed, hours())
    } else {
        Config::of_seed(seed, hours())
    };
    config.tracing = std::env::var("SIM_TRACE").is_ok_and(|v| v == "1");
    config.edges.workers = env_u64("SIM_WORKERS", 0);
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
    // Seed 59 (24 h): a producer's retry after a throttled batch drifted
    // by milliseconds between runs while its jitter came from an unseeded
    // generator (src/producer/).
    // And a FIFO run (its receive, deduplication and groups).
    let fifo = |seed, hours| Config::fifo_of_seed(seed, hours);
    let of_seed = |seed, hours| Config::of_seed(seed, hours);
    for (seed, hours, config_of) in [
        (3, 6.0, &of_seed as &dyn Fn(u64, f64) -> Config),
        (11, 6.0, &of_seed),
        (59, 24.0, &of_seed),
        (4, 12.0, &fifo),
    ] {
        let mut config = config_of(seed, hours);
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

/// Edge 4 (a `Put`'s attributes are merged over its key, and DynamoDB
/// takes a table ARN wherever it takes a name,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html>):
/// one job in eight returns an effect aimed at another job's items, three
/// ways (its attributes' `pk` naming the other job's counter, or its
/// marker; its key naming the marker through the table's ARN). idemq must
/// refuse each before any I/O: the checker fails a run where such a write
/// lands, a marker is overwritten, or a counter jumps.
#[test]
fn edge_4_effects_never_write_another_jobs_items() {
    for seed in [401, 402, 403] {
        let mut c = Config::of_seed(seed, 24.0);
        c.edges.evil = 0.12;
        let o = must_pass(&c);
        let evil: Vec<&String> = o
            .verdicts
            .kinds
            .iter()
            .filter(|(_, kind)| *kind == "evil")
            .map(|(k, _)| k)
            .collect();
        assert!(
            evil.iter().any(|k| o.attempts.contains_key(*k)),
            "seed {seed}: no evil job ran"
        );
        assert!(!o.items.iter().any(|k| k.starts_with("evil#")));
    }
}

/// Edge 5 (failure records are keyed by the id the consumer resolved):
/// jobs known by a body pointer (`/pid`) and by their MessageId, a key
/// prefix that is not the default, and transient failures that send them
/// to the DLQ through SQS's own redrive, which carries no `idemq-error`
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-dead-letter-queues.html>).
/// Every dead letter, read back as `idemq dlq list` reads it, shows why
/// it died.
#[test]
fn edge_5_dead_letter_context_is_found_for_every_identity() {
    for seed in [501, 502, 503] {
        let mut c = Config::of_seed(seed, 24.0);
        c.message_id_jobs = 0.7;
        c.edges.pointer_jobs = 0.5;
        c.edges.key_prefix = Some("app#".into());
        c.edges.audit_dlq = true;
        c.max_receive_count = 2;
        c.rates.transient = 0.5;
        c.redrive_every = None;
        let o = must_pass(&c);
        let native = o.audit.iter().filter(|(_, native, _)| *native).count();
        assert!(native > 5, "seed {seed}: {native} natively dead-lettered");
        // A letter of a job that is applied needs no context: one whose
        // invocations crashed after its commit until SQS's redrive moved
        // it (seed 502: j0174, crashed after the commit on receives 1 and
        // 2) never failed, so no record says why. Redriven, it is a
        // duplicate.
        let blind: Vec<&String> = o
            .audit
            .iter()
            .filter(|(k, _, found)| !found && !o.items.contains(&format!("count#{k}")))
            .map(|(k, _, _)| k)
            .collect();
        assert!(
            blind.is_empty(),
            "seed {seed}: dead letters shown without context: {blind:?}"
        );
    }
}

/// Edge 6 (a FIFO queue returns no further messages of a group while one
/// of them is in flight,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-queues-understanding-logic.html>,
/// and a DLQ read holds every letter it reads): a FIFO source with a FIFO
/// DLQ, a share of poison jobs over few groups, so the DLQ ends with many
/// letters of each group; then the operator reads it as `idemq dlq list`
/// does (`Peek::scan`) and as a dry-run `idemq dlq redrive`. Every letter
/// must be read or counted as unreadable, none read twice; a group's
/// letters are read up to its first 10 (behind them SQS gives nothing
/// without a delete), so a group of 10 or fewer is read whole.
#[test]
fn edge_6_fifo_dead_letters_are_read_or_counted() {
    let mut unreadable = 0;
    for (seed, groups, poison) in [(601, 3, 0.35), (602, 12, 0.2), (603, 6, 0.25)] {
        let mut c = Config::fifo_of_seed(seed, 24.0);
        if let Some(f) = c.fifo.as_mut() {
            f.groups = groups;
        }
        c.poison = poison;
        c.redrive_every = None;
        c.edges.fifo_audit = true;
        let o = must_pass(&c);
        let a = o.fifo_audit.expect("audit");
        let total: usize = a.letters.values().sum();
        let read: usize = a.read.values().sum();
        assert!(total > 30, "seed {seed}: only {total} letters: {a:?}");
        assert_eq!(a.strays, 0, "seed {seed}: letters read twice: {a:?}");
        assert_eq!(
            read as u64 + a.unseen,
            total as u64,
            "seed {seed}: letters neither read nor counted: {a:?}"
        );
        for (g, n) in &a.letters {
            let got = a.read.get(g).copied().unwrap_or(0);
            assert_eq!(got, (*n).min(10), "seed {seed}: group {g}: {a:?}");
        }
        eprintln!(
            "edge 6, seed {seed}: {total} letters in {} groups, {read} read, {} counted unreadable; dry-run redrive {:?}",
            a.letters.len(),
            a.unseen,
            a.redrive
        );
        let (moved, skipped, unseen) = a.redrive;
        assert_eq!(
            (moved + skipped) as u64 + unseen,
            total as u64,
            "seed {seed}: the dry-run redrive lost count: {a:?}"
        );
        unreadable += a.unseen;
    }
    assert!(unreadable > 0, "no group held more than 10 letters");
}

/// Edge 7 (SQS refuses attribute values outside its character set, and a
/// body + attributes over the queue's `MaximumMessageSize`,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>):
/// permanent failures whose error carries U+0001 and U+FFFE, with bodies
/// that fit the DLQ's 1 KiB only without idemq's context. Without faults
/// each must be dead-lettered on its first attempt, not rerun on every
/// receive.
#[test]
fn edge_7_refused_dead_letter_sends_do_not_loop() {
    for seed in [701, 702, 703] {
        let mut c = Config::of_seed(seed, 24.0);
        c.rates = sim::faults::Rates::NONE;
        c.bursts = 0;
        c.duplicates = 0.0;
        c.edges.ugly = 0.1;
        c.edges.dlq_max_message_size = Some(1024);
        c.max_receive_count = 5;
        c.redrive_every = None;
        let o = must_pass(&c);
        let ugly: Vec<(&String, u32)> = o
            .verdicts
            .kinds
            .iter()
            .filter(|(_, kind)| *kind == "ugly")
            .map(|(k, _)| (k, o.attempts.get(k).copied().unwrap_or(0)))
            .collect();
        assert!(ugly.len() > 5, "seed {seed}: {} ugly jobs", ugly.len());
        let looped: Vec<_> = ugly.iter().filter(|(_, n)| *n != 1).collect();
        assert!(
            looped.is_empty(),
            "seed {seed}: attempts of permanent failures: {looped:?}"
        );
    }
}

/// Edge 8 (at most 10 message attributes,
/// <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html>):
/// every job carries 9 producer attributes; poison ones die, the operator
/// redrives them every 2 h, they die again and are redriven again. No
/// redrive may leave a letter behind as unsendable.
#[test]
fn edge_8_ten_attribute_dead_letters_can_be_redriven_again() {
    for seed in [801, 802, 803] {
        let mut c = Config::of_seed(seed, 24.0);
        c.message_id_jobs = 0.0;
        c.poison = 0.1;
        c.edges.many_attributes = 1.0;
        c.redrive_every = Some(std::time::Duration::from_secs(2 * 3600));
        let o = must_pass(&c);
        assert_eq!(
            o.redrive_failed, 0,
            "seed {seed}: letters redrive could not send"
        );
        let most = o.dlq_moves.values().max().copied().unwrap_or(0);
        assert!(most >= 2, "seed {seed}: no letter redriven twice ({most})");
    }
}

/// Edge 9 (a key-schema mismatch is a `ValidationException` that a deploy
/// fixes, <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>):
/// for the first hour the table's key is `id` while idemq writes `pk`;
/// then the table is fixed. No job may be dead-lettered for it: each is
/// retried until the fix, then applied once.
#[test]
fn edge_9_key_schema_mismatch_is_retried_until_the_deploy_is_fixed() {
    for seed in [901, 902, 903] {
        let mut c = Config::of_seed(seed, 24.0);
        c.rates = sim::faults::Rates::NONE;
        c.bursts = 0;
        c.poison = 0.0;
        c.garbage = 0.0;
        c.later = 0.0;
        c.max_receive_count = 20;
        c.retention = std::time::Duration::from_secs(4 * 24 * 3600);
        c.redrive_every = None;
        c.edges.schema_fixed_after = Some(std::time::Duration::from_secs(3600));
        let o = must_pass(&c);
        assert_eq!(o.verdicts.dead_lettered, 0, "seed {seed}: {:?}", o.verdicts);
        assert_eq!(o.verdicts.applied, o.verdicts.jobs);
        let retried = o.attempts.values().filter(|n| **n > 1).count();
        assert!(retried > 0, "seed {seed}: no job met the outage");
    }
}

/// Edge 10 (DynamoDB refuses an item over 400 KB,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html#limits-items>):
/// permanent failures with a 600 KB error. Each dead letter's failure
/// record must still be written (capped).
#[test]
fn edge_10_huge_errors_leave_capped_failure_records() {
    for seed in [1001, 1002, 1003] {
        let mut c = Config::of_seed(seed, 24.0);
        c.message_id_jobs = 0.0;
        c.edges.huge = 0.05;
        let o = must_pass(&c);
        let huge: Vec<&String> = o
            .verdicts
            .kinds
            .iter()
            .filter(|(_, kind)| *kind == "huge")
            .map(|(k, _)| k)
            .collect();
        assert!(huge.len() > 3, "seed {seed}: {} huge jobs", huge.len());
        let unrecorded: Vec<&&String> = huge
            .iter()
            .filter(|k| o.attempts.contains_key(**k))
            .filter(|k| {
                !o.items
                    .contains(&format!("idemq#ns#{}#failure#{k}", sim::run::SOURCE))
            })
            .collect();
        assert!(
            unrecorded.is_empty(),
            "seed {seed}: dead letters without a failure record: {unrecorded:?}"
        );
    }
}

/// DynamoDB cancels a transaction that touches an item another
/// transaction is still working on, with `TransactionConflict` at that
/// index (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html>,
/// "Transaction conflict handling"). Every job is sent twice at once and
/// every handler takes the same 100 ms, so the two copies' commits race on
/// the marker. The loser must be retried (then seen as the duplicate it
/// is), never dead-lettered and never applied twice: without faults and
/// without failing jobs, the DLQ ends empty. The cancelled transaction
/// applied nothing, so the loser is run again in its invocation (a re-run)
/// and spends no receive: the checker refuses a failure record that files
/// a `TransactionConflict` as transient.
#[test]
fn racing_copies_conflict_and_apply_once() {
    let (mut conflicts, mut reruns) = (0, 0);
    for seed in [1101, 1102, 1103] {
        let mut c = Config::of_seed(seed, 24.0);
        c.rates = sim::faults::Rates::NONE;
        c.bursts = 0;
        c.poison = 0.0;
        c.garbage = 0.0;
        c.later = 0.0;
        c.message_id_jobs = 0.0;
        c.duplicates = 1.0;
        c.mapping.batch_size = 1;
        c.mapping.concurrency = 4;
        c.redrive_every = None;
        c.edges.duplicate_gap = Some(std::time::Duration::ZERO);
        c.edges.handler_time = Some(std::time::Duration::from_millis(100));
        let o = must_pass(&c);
        conflicts += o.conflicts;
        reruns += o.reruns;
        assert_eq!(o.dlq_left, 0, "seed {seed}: {:?}", o.verdicts);
        assert_eq!(o.verdicts.applied, o.verdicts.jobs);
    }
    assert!(conflicts > 10, "only {conflicts} conflicts");
    assert!(
        reruns > 10,
        "only {reruns} re-runs after {conflicts} conflicts"
    );
}

/// SQS's move task (`idemq dlq redrive --native`) gives every message it
/// moves a new MessageId
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>).
/// Hosts killed and crashing after commits, maxReceiveCount 2, an operator
/// every 3 h who starts a move task when the CLI allows it (every letter
/// with a stable id) and idemq's redrive otherwise: nothing applied twice,
/// and the move tasks did move letters.
#[test]
fn native_move_tasks_apply_once() {
    let mut moved = 0;
    for (seed, message_id_jobs) in [(1201, 0.0), (1202, 0.0), (1203, 0.3)] {
        let mut c = Config::of_seed(seed, 24.0);
        c.message_id_jobs = message_id_jobs;
        c.max_receive_count = 2;
        c.rates.kill = 0.15;
        c.rates.crash = 0.15;
        c.redrive_every = Some(std::time::Duration::from_secs(3 * 3600));
        c.edges.native_redrive = true;
        let o = must_pass(&c);
        moved += o.native_moved;
    }
    assert!(moved > 0, "no move task moved a letter");
}

/// Optimistic concurrency under contention (docs/reliability.md,
/// "Read-modify-write"): every job reads one of two shared counters and
/// writes it back guarded by the version it read (`Write::optimistic`),
/// one in four of them with an eventually consistent read; all are sent
/// within 10 minutes in batches of 10, with the seed's faults. Lost races
/// (`CommitOutcome::Contended`) are run again in the invocation, and the
/// checker finds every counter exact: one count and one version per
/// write, and as many counts as applied jobs.
#[test]
fn optimistic_races_count_exactly() {
    let (mut reruns, mut stale) = (0, 0);
    for seed in [1301, 1302] {
        let mut c = Config::of_seed(seed, 6.0);
        c.mapping.batch_size = 10;
        c.edges.only_shape = Some(sim::shapes::Only::Optimistic);
        c.edges.send_window = Some(std::time::Duration::from_secs(600));
        let o = must_pass(&c);
        eprintln!(
            "seed {seed}: {} jobs, {} re-runs after lost races, {} stale reads, {} transaction conflicts",
            o.verdicts.jobs, o.reruns, o.stale_reads, o.conflicts
        );
        reruns += o.reruns;
        stale += o.stale_reads;
    }
    assert!(reruns > 20, "only {reruns} re-runs after lost races");
    assert!(stale > 0, "no eventually consistent read was stale");
}

/// Follow-up jobs (`Effect::then_send`, src/followup/) under kills and
/// lost or throttled sends: every job but the children sends a child after
/// its commit, hosts are killed at random instants (between a commit and
/// its send too), one request in ten is lost or throttled, and three
/// bursts throttle DynamoDB while SQS refuses everything, so sends fail
/// after their commit and the retry, a duplicate, must send them again
/// from the marker. The checker: no child
/// before its parent is applied, every applied parent's child sent, each
/// applied once.
#[test]
fn follow_ups_are_sent_once_their_parent_commits() {
    let mut resent = 0;
    for seed in [1501, 1502, 1503] {
        let mut c = Config::of_seed(seed, 12.0);
        c.edges.only_shape = Some(sim::shapes::Only::FollowUp);
        c.rates.kill = 0.2;
        c.rates.lost_before = 0.04;
        c.rates.lost_after = 0.03;
        c.rates.throttle = 0.03;
        c.bursts = 3;
        c.edges.sqs_outages = true;
        let o = must_pass(&c);
        // Children sent more than once: a send retried after its answer
        // was lost, or sent again from the marker.
        let mut sends: std::collections::BTreeMap<&str, u32> = Default::default();
        for line in o.history.iter().filter(|l| l.starts_with("Sent {")) {
            if line.contains(r#"\"kind\":\"child\""#) {
                *sends
                    .entry(line.split("body: ").nth(1).unwrap_or(line))
                    .or_default() += 1;
            }
        }
        let again: u32 = sends.values().map(|n| n - 1).sum();
        eprintln!(
            "seed {seed}: {} jobs ({} applied, {} dead-lettered), {} children sent, {again} sent again, {} hosts killed",
            o.verdicts.jobs,
            o.verdicts.applied,
            o.verdicts.dead_lettered,
            sends.len(),
            o.counts.killed
        );
        resent += again;
    }
    assert!(
        resent > 0,
        "no child was ever sent twice: the re-send path did not run"
    );
}

/// The DynamoDB model: an update that fails on the stored item's data
/// cancels its transaction with a `ValidationError` reason at its index,
/// whatever the data error (tests/sim/dynamodb.rs, `transact`); a
/// malformed expression is a plain `ValidationException`.
#[test]
fn transaction_data_errors_are_validation_error_reasons() {
    use serde_json::json;
    use sim::net::Reply;
    let rt = sim::paused_runtime();
    rt.block_on(async {
        let mut ddb = sim::dynamodb::Ddb::default();
        ddb.add_table("t", "pk", None);
        let mut history = sim::check::History::default();
        let wall = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        let put = json!({"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}, "s": {"S": "text"}}}});
        let update = |expression: &str| {
            json!({"TransactItems": [
                {"Update": {"TableName": "t", "Key": {"pk": {"S": "a"}}, "UpdateExpression": expression,
                            "ExpressionAttributeValues": {":one": {"N": "1"}}}},
                {"Put": {"TableName": "t", "Item": {"pk": {"S": "b"}}}}
            ]})
        };
        let reply = ddb.apply("TransactWriteItems", &json!({"TransactItems": [put]}), wall, &mut history);
        assert!(matches!(reply, Reply::Ok(_)), "{reply:?}");
        // Past the hold the model keeps on a committed transaction's items.
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        for (expression, message) in [
            ("SET n = missing + :one", "does not exist in the item"),
            ("ADD s :one", "incorrect data type"),
        ] {
            match ddb.apply("TransactWriteItems", &update(expression), wall, &mut history) {
                Reply::Error { kind, extra, .. } => {
                    assert!(kind.ends_with("#TransactionCanceledException"), "{expression}: {kind}");
                    let reasons = &extra["CancellationReasons"];
                    assert_eq!(reasons[0]["Code"], "ValidationError", "{expression}: {reasons}");
                    assert!(reasons[0]["Message"].as_str().unwrap_or_default().contains(message), "{expression}: {reasons}");
                    assert_eq!(reasons[1]["Code"], "None", "{expression}: {reasons}");
                }
                other => panic!("{expression}: {other:?}"),
            }
        }
        match ddb.apply("TransactWriteItems", &update("SET n = = :one"), wall, &mut history) {
            Reply::Error { kind, .. } => assert!(kind.ends_with("#ValidationException"), "{kind}"),
            other => panic!("{other:?}"),
        }
    });
}

/// idemq's local worker (`idemq::worker::serve`, src/worker.rs) as the
/// host instead of Lambda: 2 or 3 worker processes long-poll the source
/// queue, half of their lives end in a kill at an await point (batches in
/// hand left in flight, deletes unsent) and a restart, the others in an
/// idle exit and a new start, under the seed's network, service and
/// handler faults and an operator's redrives. Every job applied once or in
/// the DLQ with its context; a seed replays to the same history.
#[test]
fn local_workers_apply_once() {
    let (mut lives, mut killed) = (0, 0);
    for (seed, workers) in [(1401, 2), (1402, 3), (1403, 2)] {
        let mut c = Config::of_seed(seed, 12.0);
        c.edges.workers = workers;
        let o = must_pass(&c);
        eprintln!(
            "seed {seed}: {} jobs ({} applied, {} dead-lettered) through {} worker processes ({} killed), {} requests",
            o.verdicts.jobs,
            o.verdicts.applied,
            o.verdicts.dead_lettered,
            o.worker_lives,
            o.counts.killed,
            o.counts.requests
        );
        assert_eq!(o.invocations, 0, "seed {seed}: Lambda ran");
        lives += o.worker_lives;
        killed += o.counts.killed;
        if seed == 1401 {
            assert_eq!(run(&c).digest, o.digest, "seed {seed} ran two ways");
        }
    }
    assert!(killed > 5, "only {killed} worker kills");
    assert!(lives > killed, "no worker exited idle and started again");
}

/// `make bench-sim`: simulated jobs per wall second on every core, against
/// the floor of the real SDK clients (tests/sim/speed.rs). `SIM_SEEDS`
/// (default 64) seeds from `SIM_FIRST_SEED`; prints, asserts nothing.
#[test]
#[ignore]
fn speed() {
    let seeds = env_u64("SIM_SEEDS", 64);
    let first = env_u64("SIM_FIRST_SEED", 1);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let floor = sim::speed::floor(5_000);
    let rate = sim::speed::campaign_rate(first, seeds, hours(), threads);
    let per_job = rate.micros_per_job_per_thread();
    let sdk_per_job = floor.mean() * rate.requests_per_job();
    println!(
        "campaign: {} seeds on {} threads: {} jobs, {} requests ({:.2} per job) in {:.1} s: {:.0} jobs/s ({:.0} per thread, {:.0} us per job)",
        rate.seeds,
        rate.threads,
        rate.jobs,
        rate.requests,
        rate.requests_per_job(),
        rate.wall_secs,
        rate.jobs_per_sec(),
        rate.jobs_per_sec() / rate.threads as f64,
        per_job,
    );
    println!(
        "SDK floor (real clients, instant connector, one thread): {:.1} us per request (transaction commit {:.1}, single-write commit {:.1}, producer send {:.1})",
        floor.mean(),
        floor.transaction,
        floor.single_write,
        floor.send,
    );
    let models = rate.model_micros_per_job();
    let rest = per_job - sdk_per_job - models;
    println!(
        "a simulated job, {per_job:.0} us of one thread: SDK floor {sdk_per_job:.0} us ({:.0} %), models {models:.0} us ({:.0} %), the rest {rest:.0} us ({:.0} %: idemq's batch code, the Lambda model, the SDK's cost past the floor, tokio, the checker)",
        100.0 * sdk_per_job / per_job,
        100.0 * models / per_job,
        100.0 * rest / per_job,
    );
    println!(
        "bounds on {} threads: {:.0} jobs/s with the models free, {:.0} jobs/s with everything but the SDK floor free (goal 20,000)",
        rate.threads,
        1e6 / (per_job - models) * rate.threads as f64,
        1e6 / sdk_per_job * rate.threads as f64,
    );
}

/// Two consumers on one table, fed by a fan-out (tests/sim/fanout.rs):
/// every job reaches both queues with one id and one payload, a third of
/// them twice; under the network's and the hosts' faults each consumer
/// applies each job exactly once. `FANOUT_SEED=<n>` runs one seed.
#[test]
fn fan_out_consumers_each_apply_every_job_once() {
    let seeds: Vec<u64> = match std::env::var("FANOUT_SEED") {
        Ok(s) => vec![s.parse().expect("FANOUT_SEED")],
        Err(_) => vec![1301, 1302, 1303],
    };
    for seed in seeds {
        let started = std::time::Instant::now();
        let o = sim::fanout::run(seed, 40);
        assert!(
            o.violations.is_empty(),
            "seed {seed} (FANOUT_SEED={seed}), failed after {:?}: {} violations, first: {:?}",
            started.elapsed(),
            o.violations.len(),
            &o.violations[..o.violations.len().min(3)]
        );
        assert!(
            o.applied == 2 * o.jobs || o.applied > o.jobs,
            "seed {seed}: only {} of {} applied: {o:?}",
            o.applied,
            2 * o.jobs
        );
        assert!(o.invocations > 0);
    }
}

/// Parents redelivered after their children's markers expired
/// (tests/sim/followups.rs): parents with follow-ups, markers fused and
/// separate, re-sent by a producer within the follow-up horizon and after
/// their children's markers are gone. No child is applied twice, none is
/// lost. `FOLLOWUPS_SEED=<n>` runs one seed.
#[test]
fn parents_redelivered_after_their_childrens_markers_expired() {
    let seeds: Vec<u64> = match std::env::var("FOLLOWUPS_SEED") {
        Ok(s) => vec![s.parse().expect("FOLLOWUPS_SEED")],
        Err(_) => vec![1401, 1402, 1403],
    };
    for seed in seeds {
        let started = std::time::Instant::now();
        let o = sim::followups::run(seed, 30);
        eprintln!("{o:?} in {:?}", started.elapsed());
        assert!(
            o.violations.is_empty(),
            "seed {seed} (FOLLOWUPS_SEED={seed}), failed after {:?}: {} violations, first: {:?}",
            started.elapsed(),
            o.violations.len(),
            &o.violations[..o.violations.len().min(3)]
        );
        assert!(o.late_resends > o.parents / 3, "seed {seed}: {o:?}");
        assert!(o.child_marker_gone > 0, "seed {seed}: {o:?}");
        assert!(o.resent_within >= o.parents / 2, "seed {seed}: {o:?}");
        assert_eq!(o.sent_late, 0, "seed {seed}: {o:?}");
    }
}

/// A run whose markers live 4 hours (failure records the default 21 days,
/// the DLQ 14 days): jobs sent in the first 2 hours, hosts killed and
/// crashing after commits (maxReceiveCount 2) so committed jobs reach the
/// DLQ by SQS's redrive, poison jobs by idemq's own send, producers sending
/// jobs twice a second apart, and an operator redriving (idemq's
/// `Redrive`, horizon = TTL less 1 hour) every 2 hours for 20 hours, long
/// after the markers expired and DynamoDB's TTL deleted them (within 48 h,
/// drawn per key).
fn old_copies(seed: u64) -> Config {
    use std::time::Duration;
    let hour = Duration::from_secs(3600);
    let mut c = Config::of_seed(seed, 24.0);
    c.jobs = 120;
    c.later = 0.0;
    c.max_receive_count = 2;
    c.duplicates = 0.5;
    c.poison = 0.1;
    c.rates.kill = 0.15;
    c.rates.crash = 0.15;
    c.redrive_every = Some(2 * hour);
    c.edges.duplicate_gap = Some(Duration::from_secs(1));
    c.edges.send_window = Some(2 * hour);
    c.edges.marker_ttl = Some(4 * hour);
    c.edges.replay_margin = Some(hour);
    c
}

/// Redrives of old copies (docs/reliability.md, "Replays after the
/// markers expire"): every copy SQS or idemq makes of a job restarts its
/// retention, so a job can outlive its marker in the DLQ. Copies carry
/// the job's first-enqueued time; the redrive leaves letters past the
/// horizon where they are, and the consumer refuses any copy a marker TTL
/// old. The checker finds no job applied twice, and every letter a
/// redrive left stays in the DLQ.
#[test]
fn redrives_of_old_copies_apply_once() {
    let started = WallInstant::now();
    let mut refused = 0;
    for seed in env_u64("SIM_OLD_COPIES_FIRST", 1501)..env_u64("SIM_OLD_COPIES_END", 1505) {
        let o = must_pass(&old_copies(seed));
        assert!(
            o.refused_gone.is_empty(),
            "seed {seed}: letters left past the horizon are gone from the DLQ: {:?}",
            o.refused_gone
        );
        refused += o.refused;
    }
    assert!(refused > 0, "no redrive met a letter past the horizon");
    eprintln!(
        "redrives of old copies: {refused} letters left past the horizon, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
