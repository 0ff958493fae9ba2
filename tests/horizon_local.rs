//! Copies of old jobs on the local stack: idemq's own dead letter carries
//! its job's first-enqueued time; `idemq dlq redrive` and `import` leave
//! letters past the replay horizon (marker TTL less a day) where they are,
//! each with why, and send them only when the operator forces it, stamped
//! as enqueued now.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{attribute, dlq_total, idemq, init_queue, sdk, unique, work_ledger};
use idemq::producer::{Job, Producer};

const DAY: Duration = Duration::from_secs(86_400);

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn first_enqueued(m: &aws_sdk_sqs::types::Message) -> Option<u64> {
    attribute(m, "idemq-first-enqueued").parse().ok()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A permanent failure's dead letter, sent by idemq itself, carries the
/// job's first enqueue (the original's SentTimestamp): its own
/// SentTimestamp is the dead-lettering, later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idemq_s_own_dead_letter_carries_the_first_enqueue() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "horizon", false, 3, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let producer = Producer::new(&sdk, &res.queue_url).await.unwrap();
    let before = ms(SystemTime::now()) - 1000;
    let job = Job::new(
        "neg-1",
        &serde_json::json!({"transfer_id": "neg-1", "account": "a", "amount": -5}),
    )
    .unwrap();
    for (_, r) in producer.send_batch(vec![job]).await {
        r.unwrap();
    }
    let after = ms(SystemTime::now()) + 1000;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    work_ledger(&res, &[], 3).await;
    let letters = common::drain(&sqs, &res.dlq_url).await;
    assert_eq!(letters.len(), 1);
    let first = first_enqueued(&letters[0]).expect("idemq-first-enqueued");
    assert!(
        (before..=after).contains(&first),
        "{before} <= {first} <= {after}"
    );
    let sent: u64 = letters[0]
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp))
        .unwrap()
        .parse()
        .unwrap();
    assert!(sent > first, "the letter's own SentTimestamp is its death");
}

/// A letter of a job first enqueued 21 days ago is past the default
/// horizon (21 days less 1): the redrive leaves it in the DLQ, says why,
/// exits 1, and moves the 1-day-old letter beside it with its
/// first-enqueued time. Forced, the old one is sent stamped as now.
#[tokio::test]
async fn redrive_leaves_letters_past_the_horizon_unless_forced() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "horizon", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dlq = Producer::new(&sdk, &res.dlq_url).await.unwrap();
    let now = SystemTime::now();
    let old = now - 21 * DAY;
    let recent = now - DAY;
    let letters = vec![
        Job::raw(
            "old-1",
            r#"{"transfer_id":"old-1","account":"a","amount":1}"#,
        )
        .first_enqueued(old),
        Job::raw(
            "new-1",
            r#"{"transfer_id":"new-1","account":"a","amount":2}"#,
        )
        .first_enqueued(recent),
    ];
    for (id, r) in dlq.send_batch(letters).await {
        r.unwrap_or_else(|e| panic!("{id}: {e}"));
    }

    let args = [
        "dlq",
        "redrive",
        "--dlq-url",
        &res.dlq_url,
        "--hold-secs",
        "2",
    ];
    let out = idemq(&args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("moved 1, skipped 0, failed 0, left 1 past the replay horizon"),
        "{stdout}"
    );
    assert!(
        stderr.contains("past horizon: ") && stderr.contains("(job old-1)"),
        "{stderr}"
    );
    for needle in [
        "past the replay horizon of 20days",
        "marker TTL 21days",
        "--allow-expired-markers",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    let copies = common::drain(&sqs, &res.queue_url).await;
    assert_eq!(copies.len(), 1);
    assert_eq!(attribute(&copies[0], "idemq-job-id"), "new-1");
    assert_eq!(
        first_enqueued(&copies[0]),
        Some(ms(recent)),
        "the job's age travels"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        dlq_total(&sqs, &res.dlq_url).await,
        1,
        "the old letter stays"
    );

    let started = ms(SystemTime::now()) - 1000;
    let out = idemq(&[&args[..], &["--allow-expired-markers"]].concat());
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("moved 1") && stdout.contains("of which 1 past the replay horizon"),
        "{stdout}"
    );
    assert!(stderr.contains("may be applied twice"), "{stderr}");
    let copies = common::drain(&sqs, &res.queue_url).await;
    assert_eq!(copies.len(), 1);
    assert_eq!(attribute(&copies[0], "idemq-job-id"), "old-1");
    let stamped = first_enqueued(&copies[0]).unwrap();
    assert!(
        stamped >= started,
        "stamped as enqueued now: {stamped} < {started}"
    );
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
}

/// An export line keeps the job's first enqueue; an import sends only the
/// lines within the horizon, each stamped with it. A line from before
/// exports recorded it is judged by its context's `failed_at`.
#[tokio::test]
async fn import_sends_only_lines_within_the_horizon_unless_forced() {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "horizon", false, 1, 5).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let now = SystemTime::now();
    let rfc = |t: SystemTime| humantime::format_rfc3339_millis(t).to_string();
    let line = |id: &str, first: Option<SystemTime>, failed_at: Option<SystemTime>| {
        let mut l = serde_json::json!({
            "message_id": format!("m-{id}"),
            "body": format!(r#"{{"transfer_id":"{id}","account":"a","amount":1}}"#),
            "attributes": {"idemq-job-id": {"data_type": "String", "string_value": id}},
        });
        if let Some(t) = first {
            l["first_enqueued"] = rfc(t).into();
        }
        if let Some(t) = failed_at {
            l["context"] = serde_json::json!({"failed_at": rfc(t)});
        }
        l.to_string()
    };
    let recent = now - 2 * DAY;
    let lines = [
        line("fresh", Some(recent), None),
        line("stale", Some(now - 30 * DAY), None),
        line("old-format", None, Some(now - 25 * DAY)),
    ];
    let file = std::env::temp_dir().join(format!("{}.jsonl", unique("import")));
    std::fs::write(&file, lines.join("\n")).unwrap();
    let path = file.to_str().unwrap();

    let out = idemq(&["dlq", "import", path, "--to", &res.queue_url]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("imported 1, failed 0, not sent 2 past the replay horizon"),
        "{stdout}"
    );
    assert!(
        stderr.contains("line 2: first enqueued at") && stderr.contains("line 3: "),
        "{stderr}"
    );
    let copies = common::drain(&sqs, &res.queue_url).await;
    assert_eq!(copies.len(), 1);
    assert_eq!(attribute(&copies[0], "idemq-job-id"), "fresh");
    assert_eq!(first_enqueued(&copies[0]), Some(ms(recent)));

    let out = idemq(&[
        "dlq",
        "import",
        path,
        "--to",
        &res.queue_url,
        "--allow-expired-markers",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("imported 3, failed 0"));
    let mut ids: Vec<String> = common::drain(&sqs, &res.queue_url)
        .await
        .iter()
        .map(|m| attribute(m, "idemq-job-id").to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["fresh", "old-format", "stale"]);
    std::fs::remove_file(&file).unwrap();
}
