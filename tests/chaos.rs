//! The chaos suite: effects applied exactly once whatever the faults.
//!
//! Jobs are counters (`ADD n :1` on `probe#<id>`, the contract probe's
//! `ok` job), so a double apply shows as 2. Worker processes of
//! `tests/support/lambda_probe.rs` built with `--features failpoints` run on the
//! local stack while faults are injected: failpoints that abort the process
//! (like SIGKILL) at chosen places, SIGKILL and SIGSTOP from outside, and a
//! loopback proxy (`scripts/chaos_proxy.py`) that throttles, cuts off,
//! fakes transaction conflicts and drops responses after they were applied.
//! A checker then counts, per job id: lost (sent, never applied, not in the
//! DLQ), duplicated (applied twice or more), unexpected (applied, never
//! sent) and dead-lettered.
//!
//! Run by `make test-chaos` (full size) and, smaller, by `make test`:
//! `scripts/chaos.sh` builds the probe with failpoints and sets
//! `CHAOS_PROBE` and `CHAOS_JOBS`. The tests are `#[ignore]`d so the plain
//! `cargo test` run, which has no failpoint build, skips them.

//!
//! The harness is in tests/chaos/: jobs, workers, the fault proxy and the
//! checker.

mod common;
#[path = "chaos/mod.rs"]
mod harness;

use std::collections::HashSet;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{attribute, drain, idemq, init_queue, sdk};
use harness::check::{Report, check};
use harness::jobs::{CANARY, ids, probe_job, send, send_ok};
#[cfg(feature = "postgres")]
use harness::postgres::{PgSchema, check_pg, pg_probe};
use harness::proxy::Proxy;
use harness::workers::{Workers, jobs, scratch};
use idemq::dlq::peek::Peek;
use idemq::producer::Job;

/// 1. Killed after commit, before the delete (a failpoint aborts each worker
/// process once, on one of its batches at 50%, and the harness restarts
/// it): every job applied once, none lost, none dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s1_kill_after_commit_before_delete() {
    let sdk = sdk().await;
    // Every abort costs its whole batch one receive, and half the batches
    // of a fresh worker abort: with maxReceiveCount 6 a batch unlucky six
    // times in a row would be redriven (seen at 1,000 jobs: 10 messages,
    // each applied exactly once). 20 receives keep SQS's redrive out of a
    // test about the marker.
    let res = init_queue(&sdk, "chaos", false, 20, 4).await;
    let sent = send_ok(&sdk, &res, "s1", jobs(1000)).await;
    let mut w = Workers::start(
        &res,
        &[("FAILPOINTS", "worker::before-delete=50%1*return")],
        &[],
        3,
    );
    w.run_until_empty(&sdk, Duration::from_secs(600), |_| {})
        .await;
    let report = check(&sdk, &res, &sent).await;
    eprintln!(
        "s1: {report:?}, workers killed by the failpoint: {}",
        w.restarts
    );
    assert!(w.restarts > 0, "the failpoint never fired");
    assert_eq!(report, Report::default());
    let (_, duplicates) = w.totals();
    assert!(
        duplicates > 0,
        "redelivered committed jobs are acknowledged as duplicates"
    );
}

/// 2. Killed mid-batch, by a failpoint before a job starts and by SIGKILL
/// from outside at random instants: unfinished jobs come back and are
/// applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s2_kill_mid_batch() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 6, 4).await;
    let sent = send_ok(&sdk, &res, "s2", jobs(1000)).await;
    let mut w = Workers::start(
        &res,
        &[("FAILPOINTS", "batch::before-job=1%return")],
        &[],
        3,
    );
    let mut next_kill = Instant::now() + Duration::from_millis(700);
    let mut kills = 0;
    w.run_until_empty(&sdk, Duration::from_secs(600), |children| {
        if Instant::now() >= next_kill && !children.is_empty() && kills < 10 {
            let i = rand::random::<u32>() as usize % children.len();
            let _ = children[i].kill(); // SIGKILL
            kills += 1;
            next_kill = Instant::now()
                + Duration::from_millis(300 + u64::from(rand::random::<u16>() % 900));
        }
    })
    .await;
    let report = check(&sdk, &res, &sent).await;
    eprintln!("s2: {report:?}, SIGKILLs {kills}, deaths {}", w.restarts);
    assert!(w.restarts > 0);
    assert_eq!(report, Report::default());
}

/// 3. A zombie: a worker stopped (SIGSTOP) with a batch in hand for longer
/// than the visibility timeout, while another worker takes the redelivered
/// jobs; then it resumes (SIGCONT). One effect per job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s3_zombie_worker() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 6, 3).await;
    let sent = ids("s3", 10);
    let jobs: Vec<Job> = sent
        .iter()
        .map(|id| {
            let body = serde_json::json!({"id": id, "action": "sleep", "ms": 700});
            Job::new(id, &body).unwrap()
        })
        .collect();
    send(&sdk, &res.queue_url, jobs).await;
    let mut zombie = Workers::start(&res, &[("IDEMQ_DEADLINE_MARGIN", "1ms")], &[], 1);
    // Stop it once it holds the batch.
    let peek = Peek::new(
        aws_sdk_sqs::Client::new(&sdk),
        &res.queue_url,
        Duration::from_secs(1),
    );
    let until = Instant::now() + Duration::from_secs(30);
    while peek.depth().await.unwrap().in_flight == 0 {
        assert!(Instant::now() < until, "the zombie never received");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = zombie.children[0].id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut other = Workers::start(&res, &[], &[], 1);
    other.run(Duration::from_secs(120), |_| {}).await;
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    zombie.run(Duration::from_secs(120), |_| {}).await;
    let report = check(&sdk, &res, &sent.iter().cloned().collect()).await;
    let (zs, zd) = zombie.totals();
    let (os, od) = other.totals();
    eprintln!(
        "s3: {report:?}; zombie succeeded {zs} duplicate {zd}; other succeeded {os} duplicate {od}"
    );
    assert_eq!(report, Report::default());
    // The zombie resumes past its deadline: idemq abandons what it was
    // doing (reported failed, its stale visibility change refused), or, if
    // its commit still reaches DynamoDB, finds the marker and acknowledges a
    // duplicate. Either way exactly one commit per job in all.
    assert_eq!(zs + os, 10, "each job committed exactly once");
}

/// 4. 300 job ids each sent 8 times, 4 workers: every count 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s4_each_job_sent_eight_times_four_workers() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 6, 10).await;
    let sent = ids("s4", jobs(300));
    let copies: Vec<Job> = (0..8)
        .flat_map(|_| sent.iter().map(|id| probe_job(id, "ok")))
        .collect();
    send(&sdk, &res.queue_url, copies).await;
    let mut w = Workers::start(&res, &[], &[], 4);
    w.run(Duration::from_secs(600), |_| {}).await;
    let report = check(&sdk, &res, &sent.iter().cloned().collect()).await;
    let (succeeded, duplicates) = w.totals();
    eprintln!("s4: {report:?}, succeeded {succeeded}, duplicates {duplicates}");
    assert_eq!(report, Report::default());
    assert_eq!(succeeded as usize, sent.len());
    assert_eq!(duplicates as usize, 7 * sent.len());
}

/// 5–7. Through the fault proxy: 30% throttling, 10% fake
/// `TransactionConflict` cancellations (`TransactionConflictException` for a
/// single `PutItem`: the probe's fused single writes) and 10% responses
/// dropped after the commit was applied, with a 10 s total outage in the
/// middle. No
/// worker dies of it, nothing is lost or doubled, nothing reaches the DLQ,
/// and the dropped responses come back as duplicates.
///
/// maxReceiveCount 16 bounds the attempts: the outage spends about five
/// receives of every job in flight (retries wait at least 1 s, their
/// ceilings 1, 2, then 4 s), and each later attempt fails with p ≈ 0.22
/// (conflict 0.1, dropped 0.1, throttling that outlives the SDK's three
/// tries 0.3³), so eleven failures in a row are ~6e-8 per job. With 10, the
/// run failed in CI: one job of 150 was redriven after 11 receives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s5_6_7_throttling_conflicts_outage_and_lost_responses() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 16, 4).await;
    let sent = send_ok(&sdk, &res, "s5", jobs(600)).await;
    let proxy = Proxy::start(&scratch());
    let faults = serde_json::json!({"throttle": 0.3, "conflict": 0.1, "drop_after_apply": 0.1});
    proxy.set(faults.clone());
    let url = proxy.url();
    let mut w = Workers::start(
        &res,
        &[
            ("AWS_ENDPOINT_URL_DYNAMODB", &url),
            ("IDEMQ_BACKOFF_CAP", "4s"),
        ],
        &[],
        3,
    );
    let start = Instant::now();
    let (outage_at, outage_end) = (Duration::from_secs(3), Duration::from_secs(13));
    let mut phase = 0;
    w.run(Duration::from_secs(900), |_| {
        let t = start.elapsed();
        if phase == 0 && t >= outage_at {
            proxy.set(serde_json::json!({"outage": true}));
            phase = 1;
        } else if phase == 1 && t >= outage_end {
            proxy.set(faults.clone());
            phase = 2;
        }
    })
    .await;
    let stats = proxy.stats();
    let report = check(&sdk, &res, &sent).await;
    let (succeeded, duplicates) = w.totals();
    eprintln!(
        "s5-7: {report:?}; proxy {stats}; succeeded {succeeded}, duplicates {duplicates}; worker deaths {}",
        w.restarts
    );
    assert_eq!(w.restarts, 0, "no worker died of a fault");
    assert_eq!(report, Report::default());
    for key in ["throttled", "conflict", "dropped_after_apply", "outage"] {
        assert!(
            stats[key].as_u64().unwrap_or(0) > 0,
            "{key} was never injected: {stats}"
        );
    }
}

/// 8. The same job id with a different payload: not applied, reported as a
/// conflict, in the DLQ with its context, `JobsConflict` emitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s8_same_id_different_payload_is_a_conflict() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 6, 4).await;
    send(&sdk, &res.queue_url, vec![probe_job("c-1", "ok")]).await;
    let mut first = Workers::start(&res, &[], &["--emf"], 1);
    first.run(Duration::from_secs(120), |_| {}).await;
    let other = Job::new(
        "c-1",
        &serde_json::json!({"id": "c-1", "action": "ok", "note": "another payload"}),
    )
    .unwrap();
    send(&sdk, &res.queue_url, vec![other]).await;
    let mut second = Workers::start(&res, &[], &["--emf"], 1);
    second.run(Duration::from_secs(120), |_| {}).await;

    let logs = second.logs();
    assert!(
        logs.contains("\"JobsConflict\":1"),
        "no JobsConflict metric in:\n{logs}"
    );
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dead = drain(&sqs, &res.dlq_url).await;
    assert_eq!(dead.len(), 1);
    assert!(
        attribute(&dead[0], "idemq-error").contains("another payload (stored hash"),
        "{:?}",
        dead[0]
    );
    let report = check(&sdk, &res, &HashSet::from(["c-1".to_string()])).await;
    assert_eq!(
        report,
        Report::default(),
        "applied once, the conflicting copy never"
    );
}

/// 10 and 13. Bad input among good jobs — invalid JSON, the wrong schema,
/// oversized and control-character job ids, a ~1 MiB body, an effect over
/// DynamoDB's 400 KB item limit: no panic, the good jobs succeed, each bad
/// one reaches the DLQ with a clear error and writes nothing. And a canary
/// secret inside every payload never appears in a log line of the worker
/// (at debug level) or of the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s10_13_bad_input_corpus_and_no_payload_in_logs() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "chaos", false, 6, 10).await;
    let good = ids("good", 20);
    let jobs: Vec<Job> = good.iter().map(|id| probe_job(id, "ok")).collect();
    let bad: Vec<(&str, Job)> = vec![
        (
            "does not decode",
            Job::raw("bad-json", format!("{{not json {CANARY}")),
        ),
        (
            "does not decode",
            Job::raw(
                "bad-schema",
                format!("{{\"id\":5,\"canary\":\"{CANARY}\"}}"),
            ),
        ),
        (
            "job id is 600 bytes",
            Job::raw(
                "x",
                format!("{{\"id\":\"l\",\"action\":\"ok\",\"c\":\"{CANARY}\"}}"),
            ),
        ),
        (
            "control character",
            Job::raw(
                "x",
                format!("{{\"id\":\"t\",\"action\":\"ok\",\"c\":\"{CANARY}\"}}"),
            ),
        ),
        (
            "does not decode",
            Job::raw("huge", format!("{CANARY}{}", "z".repeat(1_000_000))),
        ),
        ("DynamoDB limit", probe_job("too-big", "big")),
        // The secret *is* the offending value: serde's own error text would
        // quote it ("unknown variant `…`", "invalid type: string \"…\"").
        (
            "does not decode",
            Job::raw(
                "bad-variant",
                format!("{{\"id\":\"v\",\"action\":\"{CANARY}\"}}"),
            ),
        ),
        (
            "does not decode",
            Job::raw(
                "bad-nested-value",
                format!("{{\"id\":\"n\",\"action\":\"ok\",\"ms\":\"{CANARY}\"}}"),
            ),
        ),
    ];
    // The id attribute is set by hand where it must be invalid (the
    // Producer refuses invalid ids, as it should).
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for (i, (_, job)) in bad.iter().enumerate() {
        let id = match i {
            2 => "l".repeat(600),
            3 => "tab\there".to_string(),
            _ => job.id.clone(),
        };
        let attr = aws_sdk_sqs::types::MessageAttributeValue::builder()
            .data_type("String")
            .string_value(id)
            .build()
            .unwrap();
        sqs.send_message()
            .queue_url(&res.queue_url)
            .message_body(&job.body)
            .message_attributes("idemq-job-id", attr)
            .send()
            .await
            .unwrap();
    }
    send(&sdk, &res.queue_url, jobs).await;
    let mut w = Workers::start(&res, &[], &[], 1);
    w.run(Duration::from_secs(300), |_| {}).await;
    assert_eq!(w.restarts, 0, "no panic, no crash");

    let table = res.table_name.clone();
    let out = idemq(&["dlq", "list", "--dlq-url", &res.dlq_url, "--table", &table]);
    let listing =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let show = idemq(&[
        "dlq",
        "show",
        "huge",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &table,
    ]);
    let shown =
        String::from_utf8_lossy(&show.stdout).to_string() + &String::from_utf8_lossy(&show.stderr);
    assert!(shown.contains("--payload to print it"), "{shown}");
    let dry = idemq(&[
        "dlq",
        "redrive",
        "--dry-run",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &table,
    ]);
    let dry_run =
        String::from_utf8_lossy(&dry.stdout).to_string() + &String::from_utf8_lossy(&dry.stderr);

    let dead = drain(&sqs, &res.dlq_url).await;
    assert_eq!(dead.len(), bad.len(), "every bad job in the DLQ");
    for (why, _) in &bad {
        assert!(
            dead.iter()
                .any(|m| attribute(m, "idemq-error").contains(why)),
            "no dead letter says {why:?}: {:?}",
            dead.iter()
                .map(|m| attribute(m, "idemq-error"))
                .collect::<Vec<_>>()
        );
    }
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    assert_eq!(common::number(&ddb, &table, "big#too-big", "n").await, None);
    let big = ddb
        .get_item()
        .table_name(&table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("big#too-big".into()),
        )
        .send()
        .await
        .unwrap();
    assert!(big.item().is_none(), "the oversized effect wrote nothing");
    let report = check(&sdk, &res, &good.iter().cloned().collect()).await;
    assert_eq!(report, Report::default());

    let logs = w.logs();
    assert!(logs.contains("job failed"), "debug logs were captured");
    for (name, text) in [
        ("worker", &logs),
        ("dlq list", &listing),
        ("dlq show", &shown),
        ("dlq redrive --dry-run", &dry_run),
    ] {
        assert!(
            !text.contains(CANARY),
            "the canary leaked into the {name} output"
        );
    }
}

/// 15. Follow-up jobs exactly once (src/followup/): ledger workers
/// (examples/ledger.rs) take transfers with `then_credit`, 10% of them sent
/// twice, while they die at a failpoint between the commit and the
/// follow-up send and by SIGKILL at random instants. Every account, first
/// and follow-up, is credited exactly once, nothing is dead-lettered; then
/// a rejected and a conflicting transfer each send no follow-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s15_follow_ups_exactly_once_through_kills() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use std::collections::HashMap;

    let sdk = sdk().await;
    // 20 receives: a message unlucky with aborts many times in a row is
    // not redriven (the test is about follow-ups, not redrive).
    let res = init_queue(&sdk, "chaos-then", false, 20, 4).await;
    let n = jobs(500);
    let amount = |i: usize| (i % 7 + 1) as i64;
    let transfer = |i: usize| {
        let body = serde_json::json!({
            "transfer_id": format!("f-{i}"),
            "account": format!("a-{i}"),
            "amount": amount(i),
            "then_credit": format!("b-{i}"),
        });
        Job::new(format!("f-{i}"), &body).unwrap()
    };
    let mut batch: Vec<Job> = (0..n).map(transfer).collect();
    // 10% duplicate sends: the same job (id and body) twice.
    batch.extend((0..n).filter(|i| i % 10 == 0).map(transfer));
    send(&sdk, &res.queue_url, batch).await;

    let mut w = Workers::start_bin(
        harness::workers::ledger(),
        &res,
        &[("FAILPOINTS", "followup::before-send=5%1*return")],
        &[],
        3,
    );
    let mut next_kill = Instant::now() + Duration::from_millis(700);
    let mut kills = 0;
    w.run_until_empty(&sdk, Duration::from_secs(600), |children| {
        if Instant::now() >= next_kill && !children.is_empty() && kills < 10 {
            let i = rand::random::<u32>() as usize % children.len();
            let _ = children[i].kill(); // SIGKILL
            kills += 1;
            next_kill = Instant::now()
                + Duration::from_millis(300 + u64::from(rand::random::<u16>() % 900));
        }
    })
    .await;
    eprintln!(
        "s15: {n} transfers, SIGKILLs {kills}, deaths {}",
        w.restarts
    );
    // More deaths than SIGKILLs: the failpoint fired too.
    assert!(
        w.restarts > kills,
        "the failpoint between commit and send never fired ({} deaths, {kills} SIGKILLs)",
        w.restarts
    );

    let balances = |sdk: aws_config::SdkConfig, table: String| async move {
        let ddb = aws_sdk_dynamodb::Client::new(&sdk);
        let mut out: HashMap<String, i64> = HashMap::new();
        let mut start = None;
        loop {
            let page = ddb
                .scan()
                .table_name(&table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .unwrap();
            for item in page.items() {
                if let (Some(AttributeValue::S(pk)), Some(AttributeValue::N(b))) =
                    (item.get("pk"), item.get("balance"))
                    && let Some(account) = pk.strip_prefix("account#")
                {
                    out.insert(account.to_owned(), b.parse().unwrap());
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return out;
            }
        }
    };
    let got = balances(sdk.clone(), res.table_name.clone()).await;
    let mut wrong = Vec::new();
    for i in 0..n {
        for account in [format!("a-{i}"), format!("b-{i}")] {
            if got.get(&account) != Some(&amount(i)) {
                let found = got.get(&account).copied();
                wrong.push((account, found));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} accounts not credited exactly once: {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    assert_eq!(got.len(), 2 * n, "no account credited that was not sent");
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    assert!(
        drain(&sqs, &res.dlq_url).await.is_empty(),
        "nothing dead-lettered"
    );

    // A rejection (job r-0 writes f-0's entry, f-0's marker) and a
    // conflict (f-1 again with another amount): dead-lettered, and neither
    // sends its follow-up.
    let rejected = serde_json::json!({"transfer_id": "f-0", "account": "r-acct", "amount": 1, "then_credit": "r-then"});
    let conflict = serde_json::json!({"transfer_id": "f-1", "account": "a-1", "amount": 99, "then_credit": "c-then"});
    send(
        &sdk,
        &res.queue_url,
        vec![
            Job::new("r-0", &rejected).unwrap(),
            Job::new("f-1", &conflict).unwrap(),
        ],
    )
    .await;
    let mut w = Workers::start_bin(harness::workers::ledger(), &res, &[], &[], 1);
    w.run_until_empty(&sdk, Duration::from_secs(120), |_| {})
        .await;
    let after = balances(sdk.clone(), res.table_name.clone()).await;
    for account in ["r-acct", "r-then", "c-then"] {
        assert_eq!(after.get(account), None, "{account} was credited");
    }
    assert_eq!(after.get("a-1"), Some(&amount(1)));
    let dead = drain(&sqs, &res.dlq_url).await;
    let mut ids: Vec<&str> = dead.iter().map(|m| attribute(m, "idemq-job-id")).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec!["f-1", "r-0"]);
}

/// The PostgreSQL probe's workers (tests/support/pg_probe.rs) on the
/// schema of `pg`, reaching the server at `url`, with these extra
/// variables.
#[cfg(feature = "postgres")]
fn pg_workers(
    res: &idemq::init::InitReport,
    pg: &PgSchema,
    url: &str,
    env: &[(&str, &str)],
    n: usize,
) -> Workers {
    let pg_env = pg.worker_env(url);
    let mut all: Vec<(&str, &str)> = pg_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    all.extend_from_slice(env);
    Workers::start_bin(pg_probe(), res, &all, &[], n)
}

/// 16. On PostgreSQL, killed after commit, before the delete (as 1: a
/// failpoint aborts each worker process once, on one of its batches at
/// 50%, and the harness restarts it): the marker row committed with the
/// counter makes every redelivered job a duplicate. Every job applied
/// once, none lost, none dead-lettered.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s16_postgres_kill_after_commit_before_delete() {
    let sdk = sdk().await;
    let pg = PgSchema::fresh().await;
    // 20 receives, as in 1: the redrive stays out of a test about the
    // marker.
    let res = init_queue(&sdk, "chaos-pg", false, 20, 4).await;
    let sent = send_ok(&sdk, &res, "s16", jobs(1000)).await;
    let mut w = pg_workers(
        &res,
        &pg,
        &pg.url,
        &[("FAILPOINTS", "worker::before-delete=50%1*return")],
        3,
    );
    w.run_until_empty(&sdk, Duration::from_secs(600), |_| {})
        .await;
    let report = check_pg(&sdk, &res, &pg, &sent).await;
    eprintln!(
        "s16: {report:?}, workers killed by the failpoint: {}",
        w.restarts
    );
    assert!(w.restarts > 0, "the failpoint never fired");
    assert_eq!(report, Report::default());
    assert_eq!(pg.markers().await as usize, sent.len(), "one marker a job");
    let (_, duplicates) = w.totals();
    assert!(
        duplicates > 0,
        "redelivered committed jobs are acknowledged as duplicates"
    );
}

/// 17. On PostgreSQL, killed mid-batch (as 2: a failpoint before a job
/// starts, and SIGKILL from outside at random instants, some of them with
/// a transaction open on the server): the server rolls back what a dead
/// worker left uncommitted, and the unfinished jobs come back and are
/// applied once.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s17_postgres_kill_mid_batch() {
    let sdk = sdk().await;
    let pg = PgSchema::fresh().await;
    let res = init_queue(&sdk, "chaos-pg", false, 6, 4).await;
    let sent = send_ok(&sdk, &res, "s17", jobs(1000)).await;
    let mut w = pg_workers(
        &res,
        &pg,
        &pg.url,
        &[("FAILPOINTS", "batch::before-job=1%return")],
        3,
    );
    let mut next_kill = Instant::now() + Duration::from_millis(700);
    let mut kills = 0;
    w.run_until_empty(&sdk, Duration::from_secs(600), |children| {
        if Instant::now() >= next_kill && !children.is_empty() && kills < 10 {
            let i = rand::random::<u32>() as usize % children.len();
            let _ = children[i].kill(); // SIGKILL
            kills += 1;
            next_kill = Instant::now()
                + Duration::from_millis(300 + u64::from(rand::random::<u16>() % 900));
        }
    })
    .await;
    let report = check_pg(&sdk, &res, &pg, &sent).await;
    eprintln!("s17: {report:?}, SIGKILLs {kills}, deaths {}", w.restarts);
    assert!(w.restarts > 0);
    assert_eq!(report, Report::default());
}

/// 18. On PostgreSQL, through the wire-protocol fault proxy
/// (tests/chaos/pg_proxy.rs): connections cut at random, 3% of the
/// client's chunks dropped and 3% of the server's, and 20% of the chunks
/// holding `COMMIT` forwarded and then cut before the answer comes back
/// (the transaction took effect, the worker cannot know); with a 10 s
/// total outage from the workers' first connection on (every connection
/// cut, new ones closed on arrival). No worker dies of it, nothing is lost or doubled, nothing
/// reaches the DLQ: the store's retry on a new connection, or the next
/// delivery, finds the marker of a commit whose answer was lost.
///
/// maxReceiveCount 30 bounds the attempts: the outage spends at most 11
/// receives of a job (a connection refused fails a job at once, and every
/// retry waits at least 1 s: the batch rounds its delay up to whole
/// seconds; about five with ceilings of 1, 2, then 4 s), and outside it an
/// attempt fails with p ≈ 0.15 (a look-up fails only if its two tries both
/// break, ~0.01; a commit if both tries break, the first with ~0.25, the
/// second, on a new connection whose handshake may be cut too, with ~0.4;
/// a new connection's own handshake, ~0.15), so 19 failures in a row are
/// ~2e-16 per job.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: make test-chaos"]
async fn s18_postgres_connections_cut_commits_unanswered_and_outage() {
    use harness::pg_proxy::{Faults, PgProxy};
    use std::sync::atomic::Ordering;

    let sdk = sdk().await;
    let pg = PgSchema::fresh().await;
    let res = init_queue(&sdk, "chaos-pg", false, 30, 4).await;
    let sent = send_ok(&sdk, &res, "s18", jobs(600)).await;
    let proxy = PgProxy::start(&pg.url).await;
    let faults = Faults {
        request: 0.03,
        answer: 0.03,
        after_commit: 0.2,
    };
    proxy.set_faults(faults);
    let mut w = pg_workers(&res, &pg, &proxy.url(), &[("IDEMQ_BACKOFF_CAP", "4s")], 3);
    // The outage begins as soon as the workers have reached the server
    // (their first connection), not at a fixed time: a small run can drain
    // its queue within seconds, before a fixed start. It lasts 10 s.
    let outage_for = Duration::from_secs(10);
    let mut began: Option<Instant> = None;
    let mut phase = 0;
    w.run_until_empty(&sdk, Duration::from_secs(900), |_| {
        if phase == 0 && proxy.stats.connections.load(Ordering::Relaxed) > 0 {
            proxy.set_outage(true);
            began = Some(Instant::now());
            phase = 1;
        } else if phase == 1 && began.is_some_and(|b| b.elapsed() >= outage_for) {
            proxy.set_outage(false);
            phase = 2;
        }
    })
    .await;
    let report = check_pg(&sdk, &res, &pg, &sent).await;
    let (succeeded, duplicates) = w.totals();
    let stats = &proxy.stats;
    eprintln!(
        "s18: {report:?}; proxy: {stats}; succeeded {succeeded}, duplicates {duplicates}; worker deaths {}",
        w.restarts
    );
    assert_eq!(phase, 2, "the outage began and ended while workers ran");
    assert_eq!(w.restarts, 0, "no worker died of a fault");
    assert_eq!(report, Report::default());
    assert_eq!(pg.markers().await as usize, sent.len(), "one marker a job");
    for (what, n) in [
        ("a request cut", &stats.cut_request),
        ("an answer cut", &stats.cut_answer),
        ("a cut after COMMIT", &stats.cut_after_commit),
        (
            "a dropped answer to a COMMIT that took effect",
            &stats.commit_answer_dropped,
        ),
        ("a connection refused in the outage", &stats.outage_refused),
    ] {
        assert!(n.load(Ordering::Relaxed) > 0, "never {what}: {stats}");
    }
}
