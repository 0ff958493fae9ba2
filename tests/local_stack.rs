//! The dedup transaction and `idemq init` on the local AWS stack (LocalStack
//! SQS + moto DynamoDB, or the LocalStack container). Effects are counters
//! (`ADD n :one`), so a job applied twice shows as 2.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{fresh_table, number, sdk, unique};
use idemq::effect::Item;
use idemq::{
    CommitOutcome, Committer, Effect, JobId, JobRef, Key, PayloadHash, TableLayout, Write,
};

const HOUR: Duration = Duration::from_secs(3600);

/// Effect of job `id`: add 1 to `counter#id`, and record an entry with the
/// body so a conflicting payload would show if it were applied.
fn effect(layout: &TableLayout, id: &str, body: &str) -> Effect {
    Effect::new()
        .with(
            Write::update(
                &layout.table_name,
                Key::string("pk", format!("counter#{id}")),
                "ADD n :one",
            )
            .value(":one", AttributeValue::N("1".into())),
        )
        .with(Write::put(
            &layout.table_name,
            Key::string("pk", format!("entry#{id}")),
            Item::from([("body".to_string(), AttributeValue::S(body.into()))]),
        ))
}

async fn commit(c: &Committer, id: &str, body: &str) -> CommitOutcome {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    c.commit(
        JobRef {
            id: &job,
            payload_hash: &hash,
            queue: "local",
        },
        &effect(c.layout(), id, body),
    )
    .await
    .expect("commit")
}

async fn setup() -> (aws_sdk_dynamodb::Client, Committer) {
    let sdk = sdk().await;
    let layout = fresh_table(&sdk).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    (ddb.clone(), Committer::new(ddb, layout, 21 * 24 * HOUR))
}

#[tokio::test]
async fn commit_then_duplicate_applies_once() {
    let (ddb, c) = setup().await;
    let t = c.layout().table_name.clone();
    assert_eq!(
        commit(&c, "job-1", "{\"a\":1}").await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "job-1", "{\"a\":1}").await,
        CommitOutcome::Duplicate
    );
    assert_eq!(
        commit(&c, "job-1", "{\"a\":1}").await,
        CommitOutcome::Duplicate
    );
    assert_eq!(number(&ddb, &t, "counter#job-1", "n").await, Some(1));

    let marker = c
        .read_marker(&JobId::new("job-1").unwrap())
        .await
        .unwrap()
        .expect("marker");
    assert_eq!(marker.payload_hash, PayloadHash::of(b"{\"a\":1}"));
    assert_eq!(marker.queue, "local");
    assert!(
        marker.committed_at.ends_with('Z'),
        "{}",
        marker.committed_at
    );
    let ttl = marker
        .expires_at
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(ttl > 20 * 24 * HOUR && ttl <= 21 * 24 * HOUR, "{ttl:?}");
}

#[tokio::test]
async fn same_id_different_payload_is_a_conflict_and_writes_nothing() {
    let (ddb, c) = setup().await;
    let t = c.layout().table_name.clone();
    assert_eq!(commit(&c, "job-2", "first").await, CommitOutcome::Committed);
    assert_eq!(
        commit(&c, "job-2", "second").await,
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"first")
        }
    );
    assert_eq!(number(&ddb, &t, "counter#job-2", "n").await, Some(1));
    let entry = ddb
        .get_item()
        .table_name(&t)
        .key("pk", AttributeValue::S("entry#job-2".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(
        entry.item().unwrap()["body"],
        AttributeValue::S("first".into())
    );
}

#[tokio::test]
async fn failing_effect_condition_is_rejected_and_leaves_no_marker() {
    let (ddb, c) = setup().await;
    let t = c.layout().table_name.clone();
    let id = JobId::new("job-3").unwrap();
    let hash = PayloadHash::of(b"x");
    // Debit 50 from an account that does not hold 50: the business rule fails.
    let debit = Effect::new()
        .with(
            Write::update(&t, Key::string("pk", "counter#job-3"), "ADD n :one")
                .value(":one", AttributeValue::N("1".into())),
        )
        .with(
            Write::update(&t, Key::string("pk", "account#poor"), "ADD balance :neg")
                .condition("balance >= :amount")
                .value(":neg", AttributeValue::N("-50".into()))
                .value(":amount", AttributeValue::N("50".into())),
        );
    let outcome = c
        .commit(
            JobRef {
                id: &id,
                payload_hash: &hash,
                queue: "local",
            },
            &debit,
        )
        .await
        .unwrap();
    assert!(
        matches!(outcome, CommitOutcome::Rejected { index: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(c.read_marker(&id).await.unwrap(), None);
    assert_eq!(
        number(&ddb, &t, "counter#job-3", "n").await,
        None,
        "rolled back"
    );

    // Once the rule holds, the same job commits: the rejection left nothing behind.
    ddb.put_item()
        .table_name(&t)
        .item("pk", AttributeValue::S("account#poor".into()))
        .item("balance", AttributeValue::N("80".into()))
        .send()
        .await
        .unwrap();
    let outcome = c
        .commit(
            JobRef {
                id: &id,
                payload_hash: &hash,
                queue: "local",
            },
            &debit,
        )
        .await
        .unwrap();
    assert_eq!(outcome, CommitOutcome::Committed);
    assert_eq!(number(&ddb, &t, "account#poor", "balance").await, Some(30));
}

#[tokio::test]
async fn effect_without_marker_is_applied_every_time() {
    let (ddb, c) = setup().await;
    let t = c.layout().table_name.clone();
    let id = JobId::new("job-4").unwrap();
    let hash = PayloadHash::of(b"x");
    let upsert = effect(c.layout(), "job-4", "x").without_marker();
    for _ in 0..2 {
        let job = JobRef {
            id: &id,
            payload_hash: &hash,
            queue: "local",
        };
        assert_eq!(
            c.commit(job, &upsert).await.unwrap(),
            CommitOutcome::Committed
        );
    }
    // The opt-out is for naturally idempotent effects; a counter is not one,
    // which is exactly what this shows.
    assert_eq!(number(&ddb, &t, "counter#job-4", "n").await, Some(2));
    assert_eq!(c.read_marker(&id).await.unwrap(), None);
}

/// 8 concurrent tasks each commit the same 200 job ids: every counter ends
/// at exactly 1 and exactly 200 commits succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_eight_tasks_same_200_jobs_every_counter_exactly_one() {
    const TASKS: usize = 8;
    const JOBS: usize = 200;
    let (ddb, c) = setup().await;
    let c = Arc::new(c);
    let mut handles = Vec::new();
    for task in 0..TASKS {
        let c = Arc::clone(&c);
        handles.push(tokio::spawn(async move {
            let mut committed = 0;
            let mut duplicate = 0;
            // Each task walks the ids from a different offset, so tasks
            // collide on the same job at the same time throughout the run.
            for k in 0..JOBS {
                let id = format!("race-{}", (k + task * JOBS / TASKS) % JOBS);
                loop {
                    match commit(&c, &id, "same body").await {
                        CommitOutcome::Committed => committed += 1,
                        CommitOutcome::Duplicate => duplicate += 1,
                        CommitOutcome::Transient { .. } => continue,
                        other => panic!("{id}: {other:?}"),
                    }
                    break;
                }
            }
            (committed, duplicate)
        }));
    }
    let (mut committed, mut duplicate) = (0, 0);
    for h in handles {
        let (c, d) = h.await.unwrap();
        committed += c;
        duplicate += d;
    }
    assert_eq!(committed, JOBS, "exactly one commit per job");
    assert_eq!(duplicate, JOBS * (TASKS - 1));
    let t = c.layout().table_name.clone();
    let mut wrong = Vec::new();
    for k in 0..JOBS {
        let n = number(&ddb, &t, &format!("counter#race-{k}"), "n").await;
        if n != Some(1) {
            wrong.push((k, n));
        }
    }
    assert!(wrong.is_empty(), "counters not exactly 1: {wrong:?}");
}

fn idemq_cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_idemq"))
        .args(args)
        .output()
        .expect("run idemq")
}

#[tokio::test]
async fn init_twice_is_harmless_and_a_changed_setting_is_named() {
    let sdk = sdk().await;
    let queue = unique("orders");
    let table = unique("idemq-init");
    let args = ["init", "--queue-name", &queue, "--table-name", &table];
    let first = idemq_cli(&args);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let second = idemq_cli(&args);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&second.stdout).unwrap(),
        report
    );
    assert!(String::from_utf8_lossy(&first.stderr).contains("created table"));
    assert!(!String::from_utf8_lossy(&second.stderr).contains("created"));

    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue_url = report["queue_url"].as_str().unwrap();
    let dlq_url = report["dlq_url"].as_str().unwrap();
    assert_eq!(report["table_name"], table.as_str());
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attrs = |url: &str| {
        let sqs = sqs.clone();
        let url = url.to_owned();
        async move {
            sqs.get_queue_attributes()
                .queue_url(url)
                .attribute_names(A::All)
                .send()
                .await
                .unwrap()
                .attributes()
                .cloned()
                .unwrap()
        }
    };
    let q = attrs(queue_url).await;
    let dlq = attrs(dlq_url).await;
    let redrive: serde_json::Value = serde_json::from_str(&q[&A::RedrivePolicy]).unwrap();
    assert_eq!(redrive["deadLetterTargetArn"], dlq[&A::QueueArn].as_str());
    assert_eq!(
        redrive["maxReceiveCount"].to_string().trim_matches('"'),
        "6"
    );
    assert_eq!(dlq[&A::MessageRetentionPeriod], "1209600");
    assert_eq!(q[&A::VisibilityTimeout], "30");
    let allow: serde_json::Value = serde_json::from_str(&dlq[&A::RedriveAllowPolicy]).unwrap();
    assert_eq!(allow["sourceQueueArns"][0], q[&A::QueueArn].as_str());

    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let ttl = ddb
        .describe_time_to_live()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let ttl = ttl.time_to_live_description().unwrap();
    assert_eq!(ttl.attribute_name(), Some("expires_at"));

    // Asking for another maxReceiveCount on the existing queue is refused, by name.
    let changed = idemq_cli(&[&args[..], &["--max-receive-count", "3"]].concat());
    assert_eq!(changed.status.code(), Some(1));
    let err = String::from_utf8_lossy(&changed.stderr);
    assert!(
        err.contains("RedrivePolicy") && err.contains("maxReceiveCount"),
        "{err}"
    );

    // A bad name is a usage error, one line, exit 2.
    let bad = idemq_cli(&["init", "--queue-name", "no spaces", "--table-name", &table]);
    assert_eq!(bad.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&bad.stderr).trim().lines().count(),
        1
    );
}

#[tokio::test]
async fn init_fifo_names_both_queues_fifo() {
    let queue = unique("ledger");
    let table = unique("idemq-init");
    let out = idemq_cli(&[
        "init",
        "--queue-name",
        &queue,
        "--table-name",
        &table,
        "--fifo",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["queue_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{queue}.fifo"))
    );
    assert!(
        report["dlq_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{queue}-dlq.fifo"))
    );
}
