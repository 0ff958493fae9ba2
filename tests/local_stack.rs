//! The dedup transaction and `idemq init` on the local AWS stack (LocalStack
//! SQS + moto DynamoDB, or the LocalStack container). Effects are counters
//! (`ADD n :one`), so a job applied twice shows as 2.

mod common;
mod race;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{fresh_table, number, sdk, unique};
use idemq::config::TableLayout;
use idemq::job::{JobId, PayloadHash};
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::store::{CommitOutcome, JobRef};

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
        .read_marker("local", &JobId::new("job-1").unwrap())
        .await
        .unwrap()
        .expect("marker");
    assert_eq!(marker.payload_hash, PayloadHash::of(b"{\"a\":1}"));
    assert_eq!(marker.queue, "local");
    let committed_at = marker.committed_at.expect("committed_at");
    let age = std::time::SystemTime::now()
        .duration_since(committed_at)
        .unwrap_or_default();
    assert!(age < HOUR, "{committed_at:?}");
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
    assert_eq!(c.read_marker("local", &id).await.unwrap(), None);
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
    assert_eq!(c.read_marker("local", &id).await.unwrap(), None);
}

/// 8 concurrent tasks each commit the same 200 job ids: every counter ends
/// at exactly 1 and exactly 200 commits succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_eight_tasks_same_200_jobs_every_counter_exactly_one() {
    let (ddb, c) = setup().await;
    let c = Arc::new(c);
    let committer = Arc::clone(&c);
    race::race(move |id| {
        let c = Arc::clone(&committer);
        async move { commit(&c, &id, "same body").await }
    })
    .await;
    let t = c.layout().table_name.clone();
    let mut wrong = Vec::new();
    for k in 0..race::JOBS {
        let n = number(&ddb, &t, &format!("counter#{}", race::job_id(k)), "n").await;
        if n != Some(1) {
            wrong.push((k, n));
        }
    }
    assert!(wrong.is_empty(), "counters not exactly 1: {wrong:?}");
}

fn idemq_cli(args: &[&str]) -> std::process::Output {
    idemq_cli_env(args, &[])
}

/// `idemq` with these layout variables set and every other `IDEMQ_*` layout
/// variable unset.
fn idemq_cli_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(common::idemq_bin());
    for var in TableLayout::ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run idemq")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `idemq init` reads the consumer's layout variables, so
/// a consumer run with IDEMQ_ATTR_PK=id finds a table keyed `id`, and init
/// says which layout it used. And what it creates is what the
/// templates create (both queues SSE-SQS; the table on-demand with KMS
/// encryption, point-in-time recovery and deletion protection).
#[tokio::test]
async fn init_uses_the_consumers_layout_prints_it_and_creates_what_the_templates_create() {
    let sdk = sdk().await;
    let queue = unique("layout");
    let table = unique("idemq-init");
    let out = idemq_cli_env(
        &["init", "--queue-name", &queue, "--table-name", &table],
        &[("IDEMQ_ATTR_PK", "id"), ("IDEMQ_KEY_PREFIX", "app#")],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "table layout: table {table}, partition key \"id\", expires_at attribute \"expires_at\", key prefix \"app#\""
        )),
        "{err}"
    );

    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let described = ddb
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let t = described.table().unwrap();
    let keys: Vec<&str> = t.key_schema().iter().map(|k| k.attribute_name()).collect();
    assert_eq!(keys, ["id"]);
    assert_eq!(t.deletion_protection_enabled(), Some(true));
    assert_eq!(
        t.sse_description().and_then(|d| d.status()),
        Some(&aws_sdk_dynamodb::types::SseStatus::Enabled)
    );
    let backups = ddb
        .describe_continuous_backups()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        backups
            .continuous_backups_description()
            .and_then(|d| d.point_in_time_recovery_description())
            .and_then(|p| p.point_in_time_recovery_status()),
        Some(&aws_sdk_dynamodb::types::PointInTimeRecoveryStatus::Enabled)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    for url in [&report["queue_url"], &report["dlq_url"]] {
        let attrs = sqs
            .get_queue_attributes()
            .queue_url(url.as_str().unwrap())
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::SqsManagedSseEnabled)
            .send()
            .await
            .unwrap();
        assert_eq!(
            attrs.attributes().unwrap()
                [&aws_sdk_sqs::types::QueueAttributeName::SqsManagedSseEnabled],
            "true"
        );
    }

    // An empty layout variable is a usage error, before anything is made.
    let bad = idemq_cli_env(
        &["init", "--queue-name", &queue, "--table-name", &table],
        &[("IDEMQ_ATTR_PK", "")],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("IDEMQ_ATTR_PK"));
}

/// The templates refuse maxReceiveCount below 5; so does `idemq init`, as a
/// usage error, before it creates anything.
#[tokio::test]
async fn init_refuses_max_receive_count_below_the_templates_minimum() {
    let sdk = sdk().await;
    let queue = unique("mrc");
    let table = unique("idemq-init");
    for count in ["1", "4"] {
        let out = idemq_cli(&[
            "init",
            "--queue-name",
            &queue,
            "--table-name",
            &table,
            "--max-receive-count",
            count,
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.contains(&format!("--max-receive-count {count} is below 5")),
            "{err}"
        );
    }
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    assert!(sqs.get_queue_url().queue_name(&queue).send().await.is_err());
}

/// Existing resources weaker than the templates' are named with their
/// settings, left as they are, and `idemq init` exits 1.
#[tokio::test]
async fn init_names_existing_resources_that_break_the_templates_rules() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let sdk = sdk().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let queue = unique("weak");
    let table = unique("idemq-weak");
    // A table made by hand: right key, none of the protection.
    ddb.create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let args = ["init", "--queue-name", &queue, "--table-name", &table];
    let out = idemq_cli(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for expected in [
        format!("table {table} has no KMS encryption (SSEDescription status unset)"),
        format!("table {table} has DeletionProtectionEnabled=false"),
        format!("table {table} has point-in-time recovery DISABLED"),
        "3 existing resource setting(s) break the templates' rules".to_string(),
    ] {
        assert!(err.contains(&expected), "{expected}\n{err}");
    }
    // The queues are still made, and said where they are.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Deletion protection is the one that may be declined.
    let declined = idemq_cli(&[&args[..], &["--no-deletion-protection"]].concat());
    assert!(!stderr(&declined).contains("DeletionProtectionEnabled"));
    assert_eq!(declined.status.code(), Some(1));

    // Source queue: encryption off and DLQ-long retention.
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    sqs.set_queue_attributes()
        .queue_url(report["queue_url"].as_str().unwrap())
        .attributes(A::SqsManagedSseEnabled, "false")
        .attributes(A::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .unwrap();
    let out = idemq_cli(&args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for expected in [
        format!(
            "queue {queue} is not encrypted at rest (SqsManagedSseEnabled=false, no KmsMasterKeyId)"
        ),
        format!("queue {queue} keeps messages 1209600 s; the templates allow 86400 to 1123200 s"),
    ] {
        assert!(err.contains(&expected), "{expected}\n{err}");
    }
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
    let changed = idemq_cli(&[&args[..], &["--max-receive-count", "7"]].concat());
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
