//! `idemq dlq` on the local stack: the operator's tool after an outage.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Sys};
use common::{
    attribute, dlq_total, idemq, init_queue, number, redrive_killed_at_random, sdk, unique,
    work_ledger,
};
use idemq::producer::{Job, Producer};

/// Sends `n` transfers to `account`, amounts 1..=n; returns their sum.
async fn send_transfers(producer: &Producer, prefix: &str, account: &str, n: usize) -> i64 {
    let jobs: Vec<Job> = (1..=n)
        .map(|i| {
            let id = format!("{prefix}-{i}");
            Job::new(
                id.clone(),
                &serde_json::json!({"transfer_id": id, "account": account, "amount": i}),
            )
            .unwrap()
        })
        .collect();
    for (id, r) in producer.send_batch(jobs).await {
        r.unwrap_or_else(|e| panic!("{id}: {e}"));
    }
    (1..=n as i64).sum()
}

/// 300 dead letters from an outage: `list --json` shows each with its last
/// error and attempts; once the outage is over, `redrive` brings every
/// balance to its exact value and empties the DLQ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_then_list_then_redrive_makes_every_balance_exact() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 2, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let down_sum = send_transfers(&producer, "d", "acct-down", 300).await;
    let up_sum = send_transfers(&producer, "u", "acct-up", 50).await;

    let first = work_ledger(&res, &["acct-down"], 4).await;
    assert_eq!(first.succeeded, 50, "{}", first.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 300);

    let out = idemq(&[
        "dlq",
        "list",
        "--json",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 300);
    let ids: HashSet<&str> = rows.iter().map(|r| r["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 300);
    for r in &rows {
        assert_eq!(
            r["last_error"], "downstream outage for account acct-down",
            "{r}"
        );
        assert_eq!(r["attempts"], 2, "{r}");
        assert!(
            r["source_queue"].as_str().unwrap().starts_with("dlq-"),
            "{r}"
        );
        assert!(r["failed_at"].as_str().unwrap().ends_with('Z'));
        assert!(r["payload_bytes"].as_u64().unwrap() > 40);
        assert!(!r["message_id"].as_str().unwrap().is_empty());
    }
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        300,
        "listing consumed nothing"
    );

    let out = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("moved 300, skipped 0, failed 0"),
        "{stdout}"
    );

    let second = work_ledger(&res, &[], 4).await;
    assert_eq!(second.succeeded, 300, "{}", second.summary());
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-down", "balance").await,
        Some(down_sum)
    );
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-up", "balance").await,
        Some(up_sum)
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
}

/// kill -9 the CLI at random instants during a 500-message redrive, rerun
/// until the DLQ is empty: nothing lost, nothing applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrive_killed_at_random_instants_loses_nothing() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let mut expected = HashMap::new();
    for a in 0..5 {
        let account = format!("acct-{a}");
        expected.insert(
            account.clone(),
            send_transfers(&producer, &format!("k{a}"), &account, 100).await,
        );
    }
    let accounts: Vec<&str> = expected.keys().map(String::as_str).collect();
    work_ledger(&res, &accounts, 4).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 500);

    let kills = redrive_killed_at_random(
        &sqs,
        &res.dlq_url,
        &["--rate", "400"],
        Duration::from_millis(1200),
    )
    .await;

    let totals = work_ledger(&res, &[], 4).await;
    assert_eq!(
        totals.succeeded,
        500,
        "every transfer applied exactly once: {}",
        totals.summary()
    );
    for (account, sum) in &expected {
        assert_eq!(
            number(
                &ddb,
                &res.table_name,
                &format!("account#{account}"),
                "balance"
            )
            .await,
            Some(*sum)
        );
    }
    eprintln!(
        "killed {kills} times; duplicates absorbed: {}",
        totals.duplicate
    );
}

fn attr_s(t: &str, v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(t)
        .string_value(v)
        .build()
        .unwrap()
}

type Seen = (
    String,
    String,
    HashMap<String, MessageAttributeValue>,
    Option<String>,
    Option<String>,
);

/// Everything on the queue: (job id, body, attributes, group, dedup id).
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<Seen> {
    common::drain(sqs, url)
        .await
        .iter()
        .map(|m| {
            let sys = m.attributes().cloned().unwrap_or_default();
            (
                attribute(m, "idemq-job-id").to_owned(),
                m.body().unwrap_or_default().to_owned(),
                m.message_attributes().cloned().unwrap_or_default(),
                sys.get(&Sys::MessageGroupId).cloned(),
                sys.get(&Sys::MessageDeduplicationId).cloned(),
            )
        })
        .collect()
}

/// FIFO dead letters with String, Number and Binary attributes: a dry run
/// moves nothing; a selective redrive moves exactly the chosen ones with
/// body, attributes and group intact; a move to another queue keeps even
/// the deduplication id.
#[tokio::test]
async fn selective_redrive_and_dry_run_keep_attributes_and_fifo_fields() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", true, 1, 5).await;
    let other = init_queue(&sdk, "dlq", true, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let mut sent = HashMap::new();
    let jobs: Vec<Job> = (1..=6)
        .map(|i| {
            let mut job = Job::raw(format!("j{i}"), format!("{{\"n\":{i},\"text\":\"ü\\n\"}}"))
                .in_group(format!("g{}", i % 2));
            job.attributes
                .insert("note".into(), attr_s("String", &format!("note {i} ✓")));
            job.attributes
                .insert("n".into(), attr_s("Number.int", &format!("{}", i * 7)));
            job.attributes.insert(
                "blob".into(),
                MessageAttributeValue::builder()
                    .data_type("Binary")
                    .binary_value(Blob::new(vec![0, i as u8, 255]))
                    .build()
                    .unwrap(),
            );
            sent.insert(job.id.clone(), job.clone());
            job
        })
        .collect();
    for (_, r) in producer.send_batch(jobs).await {
        r.unwrap();
    }
    // One receive each (maxReceiveCount 1), never deleted: SQS's redrive
    // moves them to the DLQ on the next receive.
    let deadline = Instant::now() + Duration::from_secs(60);
    while dlq_total(&sqs, &res.dlq_url).await < 6 {
        assert!(Instant::now() < deadline, "messages never reached the DLQ");
        sqs.receive_message()
            .queue_url(&res.queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(1)
            .send()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }

    let pick = [
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--job-id",
        "j1",
        "--job-id",
        "j4",
    ];
    let dry = idemq(&[&pick[..], &["--dry-run"]].concat());
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{stdout}");
    assert!(stdout.contains("would move 2, skipped 4"), "{stdout}");
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        6,
        "dry run moved nothing"
    );

    let out = idemq(&pick);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 2, skipped 4, failed 0"), "{stdout}");
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 4);

    let back = drain(&sqs, &res.queue_url).await;
    let ids: HashSet<&str> = back.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(ids, HashSet::from(["j1", "j4"]), "exactly the chosen ones");
    // A FIFO DLQ resets SentTimestamp, so a letter SQS moved there is
    // dated its SentTimestamp less the source's retention (4 days): never
    // later than the job's first enqueue
    // (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/setting-up-dead-letter-queue-retention.html>).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let four_days_ms = 4 * 86_400_000;
    for (id, body, attrs, group, dedup) in &back {
        let orig = &sent[id];
        assert_eq!(body, &orig.body, "body byte for byte");
        let mut attrs = attrs.clone();
        let first: u64 = attrs
            .remove("idemq-first-enqueued")
            .and_then(|v| v.string_value().map(str::to_owned))
            .expect("idemq-first-enqueued")
            .parse()
            .unwrap();
        let dated = now_ms - four_days_ms;
        assert!(
            (dated - 600_000..=dated + 60_000).contains(&first),
            "{first} vs {dated}"
        );
        let mut want = orig.attributes.clone();
        want.insert("idemq-job-id".into(), attr_s("String", id));
        assert_eq!(attrs, want, "every attribute byte for byte");
        assert_eq!(group, &orig.group_id);
        // Back to the queue it came from within SQS's 5-minute dedup
        // interval: a new id, or SQS would drop the copy.
        assert!(dedup.as_deref().unwrap().starts_with("redrive-"));
    }

    // The rest to another FIFO queue: even the deduplication id survives.
    let moved = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--to",
        &other.queue_url,
    ]);
    assert!(String::from_utf8_lossy(&moved.stdout).contains("moved 4, skipped 0, failed 0"));
    let there = drain(&sqs, &other.queue_url).await;
    assert_eq!(there.len(), 4);
    for (id, body, _, group, dedup) in &there {
        assert_eq!(body, &sent[id].body);
        assert_eq!(group, &sent[id].group_id);
        assert_eq!(
            dedup.as_deref(),
            Some(id.as_str()),
            "the producer's dedup id, kept"
        );
    }
}

/// `redrive --native` (StartMessageMoveTask) moves everything back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_redrive_moves_everything_back() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    send_transfers(&producer, "n", "acct-down", 40).await;
    work_ledger(&res, &["acct-down"], 4).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 40);

    let out = idemq(&["dlq", "redrive", "--native", "--dlq-url", &res.dlq_url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("native move task completed: moved 40"),
        "{stdout}"
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    let totals = work_ledger(&res, &[], 4).await;
    assert_eq!(totals.succeeded, 40, "{}", totals.summary());
}

/// Export then import: every message survives the round trip, and
/// `export --delete` empties the DLQ only after the file reads back whole.
#[tokio::test]
async fn export_delete_then_import_round_trips() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    send_transfers(&producer, "e", "acct-down", 25).await;
    work_ledger(&res, &["acct-down"], 4).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 25);

    let file = std::env::temp_dir().join(format!("{}.jsonl", unique("export")));
    let path = file.to_str().unwrap();
    let out = idemq(&[
        "dlq",
        "export",
        path,
        "--delete",
        "--dlq-url",
        &res.dlq_url,
        "--table",
        &res.table_name,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("exported 25"));
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    let lines = std::fs::read_to_string(&file).unwrap();
    assert_eq!(lines.lines().count(), 25);
    assert!(
        lines.lines().all(|l| l.contains("downstream outage")),
        "context exported"
    );

    let out = idemq(&["dlq", "import", path, "--to", &res.queue_url]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("imported 25, failed 0"));
    let totals = work_ledger(&res, &[], 4).await;
    assert_eq!(totals.succeeded, 25, "{}", totals.summary());
}

/// Sends `(job id, body)` letters straight to a DLQ, each stamped with
/// its `idemq-job-id`, as idemq's own dead-lettering leaves them.
async fn put_letters(sdk: &aws_config::SdkConfig, dlq_url: &str, letters: &[(&str, &str)]) {
    let dlq = Producer::new(sdk, dlq_url).await.unwrap();
    for (id, body) in letters {
        // One at a time: two copies of one job in one batch would share
        // the batch entry id.
        for (id, r) in dlq.send_batch(vec![Job::raw(*id, *body)]).await {
            r.unwrap_or_else(|e| panic!("{id}: {e}"));
        }
    }
}

/// After a crash a job can sit in the DLQ twice: idemq's own dead-letter
/// send landed, then SQS's redrive moved the original too. The tools count
/// it once, and one redrive sends it back once and empties the DLQ.
#[tokio::test]
async fn two_copies_of_one_job_are_one_letter_and_one_redrive_empties_the_dlq() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    put_letters(
        &sdk,
        &res.dlq_url,
        &[
            ("twice", r#"{"n":1}"#),
            ("twice", r#"{"n":1}"#),
            ("once", r#"{"n":2}"#),
        ],
    )
    .await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 3);

    let out = idemq(&["dlq", "stats", "--json", "--dlq-url", &res.dlq_url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["jobs"], 2, "{stats}");
    assert_eq!(stats["read"], 3, "{stats}");

    let out = idemq(&["dlq", "list", "--json", "--dlq-url", &res.dlq_url]);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let twice = rows.iter().find(|r| r["job_id"] == "twice").unwrap();
    assert_eq!(twice["copies"], 2, "{twice}");

    let out = idemq(&["dlq", "redrive", "--dlq-url", &res.dlq_url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 2, skipped 0, failed 0"), "{stdout}");
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        0,
        "no copy left behind: {stdout}"
    );
    let mut back: Vec<String> = drain(&sqs, &res.queue_url)
        .await
        .into_iter()
        .map(|m| m.0)
        .collect();
    back.sort();
    assert_eq!(back, ["once", "twice"], "each job once on its source queue");
}

/// Letters another reader holds are invisible to a redrive: it says how
/// many, fails, and with `--wait` moves them once they come back.
#[tokio::test]
async fn a_redrive_reports_letters_held_elsewhere_and_can_wait_for_them() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    put_letters(
        &sdk,
        &res.dlq_url,
        &[
            ("h1", r#"{"n":1}"#),
            ("h2", r#"{"n":2}"#),
            ("h3", r#"{"n":3}"#),
        ],
    )
    .await;
    // Another reader takes all three and holds them 8 s.
    let mut taken = 0;
    while taken < 3 {
        let out = sqs
            .receive_message()
            .queue_url(&res.dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(8)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        taken += out.messages().len();
    }
    let held_at = Instant::now();

    let out = idemq(&["dlq", "redrive", "--dlq-url", &res.dlq_url]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(held_at.elapsed() < Duration::from_secs(8), "took too long");
    assert!(
        !out.status.success(),
        "nothing moved is not a success: {stdout}{stderr}"
    );
    assert!(stdout.contains("moved 0"), "{stdout}");
    assert!(
        stderr.contains("3 dead letters are held by another reader"),
        "{stderr}"
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 3);

    let out = idemq(&["dlq", "redrive", "--dlq-url", &res.dlq_url, "--wait", "30s"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 3, skipped 0, failed 0"), "{stdout}");
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    assert_eq!(drain(&sqs, &res.queue_url).await.len(), 3);
}

/// Many jobs with two copies each, the second copies behind all the first
/// ones: one receive loop reads most copies after their job's chosen copy
/// was sent. Being stamped before SQS's own first-receive times
/// of the run, they are still known as older than that send, and removed.
#[tokio::test]
async fn copies_read_after_their_job_was_sent_are_removed_too() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let jobs: Vec<(String, String)> = (0..30)
        .map(|i| (format!("j{i}"), format!("{{\"n\":{i}}}")))
        .collect();
    let letters: Vec<(&str, &str)> = jobs
        .iter()
        .chain(&jobs)
        .map(|(id, body)| (id.as_str(), body.as_str()))
        .collect();
    put_letters(&sdk, &res.dlq_url, &letters).await;
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 60);

    let out = idemq(&[
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--concurrency",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("moved 30, skipped 0, failed 0"), "{stdout}");
    assert!(stdout.contains("removed 30 duplicate copies"), "{stdout}");
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0, "{stdout}");
    let back = drain(&sqs, &res.queue_url).await;
    let ids: HashSet<&str> = back.iter().map(|m| m.0.as_str()).collect();
    assert_eq!((back.len(), ids.len()), (30, 30), "each job once");
}

/// A redrive of jobs with two copies each, SIGKILLed at random instants and
/// rerun until the DLQ is empty: a copy is deleted only after its job's
/// chosen copy was sent, so every job reaches the source queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redrive_of_copies_loses_no_job() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlq", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let jobs: Vec<(String, String)> = (0..40)
        .map(|i| (format!("k{i}"), format!("{{\"n\":{i}}}")))
        .collect();
    let letters: Vec<(&str, &str)> = jobs
        .iter()
        .flat_map(|(id, body)| [(id.as_str(), body.as_str()); 2])
        .collect();
    put_letters(&sdk, &res.dlq_url, &letters).await;

    let kills = redrive_killed_at_random(
        &sqs,
        &res.dlq_url,
        &["--rate", "40"],
        Duration::from_millis(900),
    )
    .await;

    let back = drain(&sqs, &res.queue_url).await;
    let ids: HashSet<&str> = back.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(ids.len(), 40, "every job sent back at least once");
    eprintln!(
        "killed {kills} times; {} copies on the source queue for 40 jobs",
        back.len()
    );
}
