//! The producer half on the local stack: `Producer::send_batch` and
//! `idemq send`.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write as _;

use common::{attribute, idemq, init_queue, number, sdk, unique};
use idemq::producer::Producer;
use idemq::producer::{Job, SendError};

/// Everything on the queue, in receive order: (job id, group, body).
async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<(String, Option<String>, String)> {
    use aws_sdk_sqs::types::MessageSystemAttributeName as S;
    common::drain(sqs, url)
        .await
        .iter()
        .map(|m| {
            let group = m
                .attributes()
                .and_then(|a| a.get(&S::MessageGroupId))
                .cloned();
            (
                attribute(m, "idemq-job-id").to_owned(),
                group,
                m.body().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// 1,000 jobs, every 50th with a body SQS refuses (a control character
/// outside the allowed XML range): every good job arrives exactly once with
/// its id, every bad one is reported by id, and no good one is lost to its
/// neighbour's failure.
#[tokio::test]
async fn thousand_jobs_with_rejected_entries() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "prod", false, 6, 30).await;
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let jobs: Vec<Job> = (0..1000)
        .map(|i| {
            let body = if i % 50 == 7 {
                format!("{{\"n\":{i},\"bad\":\"\u{1}\"}}")
            } else {
                format!("{{\"n\":{i}}}")
            };
            Job::raw(format!("job-{i}"), body)
        })
        .collect();
    let results = producer.send_batch(jobs).await;
    assert_eq!(results.len(), 1000);
    let mut rejected = HashSet::new();
    for (i, (id, r)) in results.iter().enumerate() {
        assert_eq!(id, &format!("job-{i}"), "results in input order");
        match r {
            Ok(message_id) => assert!(!message_id.is_empty()),
            Err(SendError::Rejected { job_id, .. }) => {
                assert_eq!(job_id, id);
                rejected.insert(i);
            }
            Err(e) => panic!("{e}"),
        }
    }
    let expected_bad: HashSet<usize> = (0..1000).filter(|i| i % 50 == 7).collect();
    assert_eq!(rejected, expected_bad);

    let arrived = drain(&aws_sdk_sqs::Client::new(&sdk), &res.queue_url).await;
    let mut counts: HashMap<String, usize> = HashMap::new();
    for (id, _, body) in &arrived {
        *counts.entry(id.clone()).or_default() += 1;
        let n: usize = id.trim_start_matches("job-").parse().unwrap();
        assert_eq!(body, &format!("{{\"n\":{n}}}"));
    }
    assert_eq!(counts.len(), 980);
    assert!(
        counts.values().all(|&c| c == 1),
        "each good job exactly once"
    );
}

/// FIFO: groups keep their order, ids double as deduplication ids, and a
/// job without a group is refused before any request.
#[tokio::test]
async fn fifo_order_within_groups_is_preserved() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "prod", true, 6, 30).await;
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    assert!(producer.is_fifo());
    let jobs: Vec<Job> = (0..90)
        .map(|i| {
            Job::new(format!("f-{i}"), &serde_json::json!({"seq": i}))
                .unwrap()
                .in_group(format!("g{}", i % 3))
        })
        .chain([Job::raw("no-group", "{}")])
        .collect();
    let results = producer.send_batch(jobs).await;
    assert!(results[..90].iter().all(|(_, r)| r.is_ok()));
    assert!(
        matches!(&results[90].1, Err(SendError::MissingGroup { job_id }) if job_id == "no-group")
    );
    // Re-sending a job within SQS's 5-minute window is dropped by FIFO dedup.
    let again = producer
        .send_job(
            Job::new("f-0", &serde_json::json!({"seq": 0}))
                .unwrap()
                .in_group("g0"),
        )
        .await;
    assert!(again.is_ok());

    let arrived = drain(&aws_sdk_sqs::Client::new(&sdk), &res.queue_url).await;
    assert_eq!(arrived.len(), 90, "the re-send was deduplicated");
    for g in 0..3 {
        let seqs: Vec<usize> = arrived
            .iter()
            .filter(|(_, group, _)| group.as_deref() == Some(&format!("g{g}")))
            .map(|(_, _, body)| {
                serde_json::from_str::<serde_json::Value>(body).unwrap()["seq"]
                    .as_u64()
                    .unwrap() as usize
            })
            .collect();
        let expected: Vec<usize> = (0..90).filter(|i| i % 3 == g).collect();
        assert_eq!(seqs, expected, "group g{g} in order");
    }
}

/// `idemq send` of a JSON-lines file with a duplicated line and a broken
/// one: the broken line is named and the exit code is 1; after the ledger
/// worker runs, the duplicated transfer is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idemq_send_with_a_duplicated_line_gives_one_effect() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "prod", false, 6, 30).await;
    let dir = std::env::temp_dir().join(unique("send"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("transfers.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(
        f,
        r#"{{"transfer_id":"s-1","account":"alice","amount":30}}"#
    )
    .unwrap();
    writeln!(
        f,
        r#"{{"transfer_id":"s-2","account":"alice","amount":12}}"#
    )
    .unwrap();
    writeln!(
        f,
        r#"{{"transfer_id":"s-1","account":"alice","amount":30}}"#
    )
    .unwrap();
    writeln!(f, "this is not json").unwrap();
    drop(f);

    let out = idemq(&[
        "send",
        "--queue-url",
        &res.queue_url,
        "--job-id-pointer",
        "/transfer_id",
        path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("sent 3, failed 1"), "{stdout}");
    assert!(stderr.contains("failed: line 4: not JSON"), "{stderr}");

    let ledger = common::ledger::Ledger {
        table: res.table_name.clone(),
        fail_accounts: HashSet::new(),
    };
    let mut args = idemq::worker::WorkerArgs::new(res.queue_url.clone());
    args.table = Some(res.table_name.clone());
    args.concurrency = Some(1);
    args.exit_when_idle = Some(3);
    let totals = idemq::worker::run_with(ledger, args, idemq::config::BatchConfig::default())
        .await
        .unwrap();
    assert_eq!(
        (totals.succeeded, totals.duplicate),
        (2, 1),
        "{}",
        totals.summary()
    );
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    assert_eq!(
        number(&ddb, &res.table_name, "account#alice", "balance").await,
        Some(42)
    );

    // Usage errors are one line and exit 2.
    let out = idemq(&[
        "send",
        "--queue-url",
        &res.queue_url,
        "--job-id-pointer",
        "transfer_id",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a JSON pointer"));
    let out = idemq(&["send", "--queue-url", &res.queue_url, "/no/such/file"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /no/such/file"));
}

/// `idemq send` streams its input: jobs written to its stdin are on the
/// queue while stdin is still open (a tool that reads its input whole
/// sends nothing before EOF), and the rest follows at EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idemq_send_streams_stdin_line_by_line() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let sdk = sdk().await;
    let res = init_queue(&sdk, "prod", false, 6, 30).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let mut child = Command::new(common::idemq_bin())
        .args([
            "send",
            "--queue-url",
            &res.queue_url,
            "--job-id-pointer",
            "/id",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for i in 0..5 {
        writeln!(stdin, r#"{{"id":"early-{i}"}}"#).unwrap();
    }
    stdin.flush().unwrap();

    let mut early = HashSet::new();
    let started = Instant::now();
    while early.len() < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "only {early:?} arrived while stdin was open"
        );
        for (id, _, _) in drain(&sqs, &res.queue_url).await {
            early.insert(id);
        }
    }
    assert!(child.try_wait().unwrap().is_none(), "still reading stdin");

    writeln!(stdin, "not json").unwrap();
    for i in 0..5 {
        writeln!(stdin, r#"{{"id":"late-{i}"}}"#).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.contains("sent 10, failed 1"), "{stdout}");
    assert!(stderr.contains("failed: line 6: not JSON"), "{stderr}");
    let late: HashSet<String> = drain(&sqs, &res.queue_url)
        .await
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    let expected: HashSet<String> = (0..5).map(|i| format!("late-{i}")).collect();
    assert_eq!(late, expected);
}

/// A `--rate` whose interval does not fit a duration (1e-300 jobs per
/// second: one every 1e300 s) is a usage error, exit 2, before anything is
/// sent; it used to panic after the first chunk (`Duration::from_secs_f64`).
#[tokio::test]
async fn idemq_send_refuses_a_rate_whose_interval_overflows() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "prod", false, 6, 30).await;
    let dir = std::env::temp_dir().join(unique("rate"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("one.jsonl");
    std::fs::write(&path, "{\"id\":\"r-1\"}\n").unwrap();
    for (rate, says) in [
        ("1e-300", "--rate 1e-300 is too small"),
        ("0", "must be a positive number"),
    ] {
        let out = idemq(&[
            "send",
            "--queue-url",
            &res.queue_url,
            "--job-id-pointer",
            "/id",
            "--rate",
            rate,
            path.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rate}: {stderr}");
        assert!(stderr.contains(says), "{rate}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    assert!(drain(&sqs, &res.queue_url).await.is_empty(), "nothing sent");
}
