//! `idemq dlq` on the local stack, for jobs without `idemq-job-id`, FIFO
//! DLQs, forged attributes and the CLI's bounds and exit codes.
//!
//! Every test here runs with `IDEMQ_JOB_ID_POINTER=/ref` and
//! `IDEMQ_KEY_PREFIX=custom#`, for the worker (in this process) and the CLI
//! (a child) alike: the environment is set once, before any test builds a
//! runtime (each calls [`setup`] first).

mod common;

use std::collections::{HashMap, HashSet};
use std::process::{Command, Output};
use std::sync::Once;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;
use common::{attribute, dlq_total, idemq, init_queue, sdk, string_attribute, unique, work_ledger};
use idemq::init::InitReport;

const POINTER: &str = "/ref";
const PREFIX: &str = "custom#";

fn setup() -> tokio::runtime::Runtime {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // SAFETY: every test calls `setup` before anything else, so no other
        // thread of this process reads the environment while it is set.
        unsafe {
            std::env::set_var("IDEMQ_JOB_ID_POINTER", POINTER);
            std::env::set_var("IDEMQ_KEY_PREFIX", PREFIX);
        }
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn out(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Sends one message as a plain SQS client would (no idemq producer);
/// returns its MessageId.
async fn send_raw(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    body: &str,
    attrs: &[(&str, &str)],
    group: Option<&str>,
) -> String {
    let mut send = sqs.send_message().queue_url(url).message_body(body);
    for (k, v) in attrs {
        send = send.message_attributes(*k, string_attribute(v));
    }
    if let Some(g) = group {
        send = send
            .message_group_id(g)
            .message_deduplication_id(unique("d"));
    }
    send.send().await.unwrap().message_id().unwrap().to_owned()
}

/// Receives without deleting until SQS's own redrive (maxReceiveCount 1)
/// has moved `n` messages to the DLQ.
async fn dead_letter_natively(sqs: &aws_sdk_sqs::Client, res: &InitReport, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while dlq_total(sqs, &res.dlq_url).await < n {
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
}

fn rows(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A pointer job, a MessageId job and an `idemq-job-id` job die in an
/// outage (the consumer records their failures under `custom#failure#<the
/// id it resolved>`): `list --json` shows each one's last error, and a
/// redrive filtered by error moves all three, says how many letters it
/// could not judge, and stamps each copy with the id the consumer used.
///
/// Before: the CLI looked records up under `idemq#` (ignoring
/// IDEMQ_KEY_PREFIX) and under the DLQ MessageId (ignoring the pointer),
/// so all three showed no context and `--error-contains` skipped them
/// silently.
#[test]
fn context_is_found_for_pointer_and_message_id_jobs_under_the_configured_prefix() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", false, 2, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let down = r#""account":"acct-down","amount":1"#;
        send_raw(
            &sqs,
            &res.queue_url,
            &format!(r#"{{"ref":"p-1","transfer_id":"t-p",{down}}}"#),
            &[],
            None,
        )
        .await;
        let by_message_id = send_raw(
            &sqs,
            &res.queue_url,
            &format!(r#"{{"transfer_id":"t-m",{down}}}"#),
            &[],
            None,
        )
        .await;
        send_raw(
            &sqs,
            &res.queue_url,
            &format!(r#"{{"transfer_id":"t-a",{down}}}"#),
            &[("idemq-job-id", "a-1")],
            None,
        )
        .await;
        work_ledger(&res, &["acct-down"], 3).await;
        assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 3);
        // A letter no consumer ever saw: no record, no idemq-error.
        send_raw(
            &sqs,
            &res.dlq_url,
            r#"{"transfer_id":"t-x","account":"a","amount":1}"#,
            &[("idemq-job-id", "x-1")],
            None,
        )
        .await;

        let list = idemq(&[
            "dlq",
            "list",
            "--json",
            "--dlq-url",
            &res.dlq_url,
            "--table",
            &res.table_name,
        ]);
        assert!(list.status.success(), "{}", out(&list));
        let by_job: HashMap<String, serde_json::Value> = rows(&list)
            .into_iter()
            .map(|r| (r["job_id"].as_str().unwrap().to_owned(), r))
            .collect();
        assert_eq!(by_job.len(), 4, "{}", out(&list));
        for job in ["p-1", by_message_id.as_str(), "a-1"] {
            let r = by_job
                .get(job)
                .unwrap_or_else(|| panic!("{job} listed: {}", out(&list)));
            assert_eq!(
                r["last_error"], "downstream outage for account acct-down",
                "{job}: {r}"
            );
            assert_eq!(r["attempts"], 2, "{job}: {r}");
        }
        assert_eq!(by_job["x-1"]["last_error"], "");

        let redrive = idemq(&[
            "dlq",
            "redrive",
            "--dlq-url",
            &res.dlq_url,
            "--table",
            &res.table_name,
            "--error-contains",
            "OUTAGE",
        ]);
        assert!(redrive.status.success(), "{}", out(&redrive));
        let stdout = String::from_utf8_lossy(&redrive.stdout);
        assert!(
            stdout.contains("moved 3, skipped 1, failed 0"),
            "{}",
            out(&redrive)
        );
        assert!(
            String::from_utf8_lossy(&redrive.stderr)
                .contains("1 dead letters have no recorded error"),
            "{}",
            out(&redrive)
        );
        let back: HashSet<String> = common::drain(&sqs, &res.queue_url)
            .await
            .iter()
            .map(|m| attribute(m, "idemq-job-id").to_owned())
            .collect();
        assert_eq!(
            back,
            HashSet::from(["p-1".to_string(), by_message_id.clone(), "a-1".to_string()]),
            "each copy carries the id the consumer resolved"
        );
    });
}

/// Jobs without `idemq-job-id` (and without the pointer) dead-lettered by
/// SQS's own redrive: `--native` refuses (exit 2, naming how many), and
/// idemq's redrive stamps each copy with its original MessageId, which
/// SQS keeps on the way to the DLQ and replaces on the way back
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>:
/// redriven messages "are assigned a new messageID").
#[test]
fn native_redrive_refuses_message_id_jobs_and_ours_stamps_them() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", false, 1, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let mut originals = HashSet::new();
        for i in 0..3 {
            originals.insert(
                send_raw(
                    &sqs,
                    &res.queue_url,
                    &format!(r#"{{"transfer_id":"n-{i}","account":"a","amount":1}}"#),
                    &[],
                    None,
                )
                .await,
            );
        }
        send_raw(
            &sqs,
            &res.queue_url,
            r#"{"transfer_id":"n-s","account":"a","amount":1}"#,
            &[("idemq-job-id", "stable-1")],
            None,
        )
        .await;
        dead_letter_natively(&sqs, &res, 4).await;

        let native = idemq(&[
            "dlq",
            "redrive",
            "--native",
            "--dlq-url",
            &res.dlq_url,
            "--hold-secs",
            "5",
        ]);
        assert_eq!(native.status.code(), Some(2), "{}", out(&native));
        assert!(
            String::from_utf8_lossy(&native.stderr)
                .contains("3 of 4 dead letters carry no idemq-job-id"),
            "{}",
            out(&native)
        );
        assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 4, "nothing moved");

        let ours = idemq(&["dlq", "redrive", "--dlq-url", &res.dlq_url]);
        assert!(ours.status.success(), "{}", out(&ours));
        assert!(
            String::from_utf8_lossy(&ours.stdout).contains("moved 4, skipped 0, failed 0"),
            "{}",
            out(&ours)
        );
        let back = common::drain(&sqs, &res.queue_url).await;
        assert_eq!(back.len(), 4);
        let stamped: HashSet<String> = back
            .iter()
            .map(|m| attribute(m, "idemq-job-id").to_owned())
            .collect();
        let mut want = originals.clone();
        want.insert("stable-1".into());
        assert_eq!(
            stamped, want,
            "the original MessageIds, not the DLQ's nor the new ones"
        );
        for m in &back {
            assert!(
                !originals.contains(m.message_id().unwrap()),
                "SQS minted new MessageIds"
            );
        }
    });
}

/// A sender forges `idemq-source-queue` naming another queue: the redrive
/// sends the letter to the DLQ's real source queue, never to the forged
/// one.
#[test]
fn a_forged_source_queue_attribute_is_not_followed() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", false, 1, 5).await;
        let other = init_queue(&sdk, "dlqcli", false, 1, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let other_name = other.queue_url.rsplit('/').next().unwrap();
        send_raw(
            &sqs,
            &res.dlq_url,
            r#"{"transfer_id":"f-1","account":"a","amount":1}"#,
            &[("idemq-job-id", "f-1"), ("idemq-source-queue", other_name)],
            None,
        )
        .await;
        let o = idemq(&["dlq", "redrive", "--dlq-url", &res.dlq_url]);
        assert!(o.status.success(), "{}", out(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("moved 1, skipped 0, failed 0"),
            "{}",
            out(&o)
        );
        assert!(
            common::drain(&sqs, &other.queue_url).await.is_empty(),
            "the forged queue got nothing"
        );
        let back = common::drain(&sqs, &res.queue_url).await;
        assert_eq!(back.len(), 1);
        assert_eq!(attribute(&back[0], "idemq-job-id"), "f-1");
    });
}

/// LocalStack blocks FIFO groups as SQS does (a probe measured it: with A1
/// in flight, a receive returns B1 and not A2), and returns at most 10
/// messages a receive. So a FIFO DLQ with two groups of 6 gave the old scan
/// 10 messages (A1–A6, B1–B4), B5 and B6 blocked behind the held B4
/// (<https://repost.aws/knowledge-center/sqs-fifo-messages-not-returned>:
/// "Inflight messages block delivery of available messages within the same
/// message group"). Now: `list` shows all 12, and a redrive finds a match
/// behind non-matching letters of its group.
#[test]
fn fifo_reads_see_past_held_group_heads() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", true, 1, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        for g in ["A", "B"] {
            for i in 1..=6 {
                let id = format!("{g}{i}");
                send_raw(
                    &sqs,
                    &res.dlq_url,
                    &format!(r#"{{"transfer_id":"{id}","account":"a","amount":1}}"#),
                    &[("idemq-job-id", &id)],
                    Some(g),
                )
                .await;
            }
        }
        let list = idemq(&[
            "dlq",
            "list",
            "--json",
            "--dlq-url",
            &res.dlq_url,
            "--hold-secs",
            "30",
        ]);
        assert!(list.status.success(), "{}", out(&list));
        let ids: HashSet<String> = rows(&list)
            .iter()
            .map(|r| r["job_id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), 12, "{}", out(&list));

        // Wait out nothing: list released what it held.
        let pick = idemq(&[
            "dlq",
            "redrive",
            "--dlq-url",
            &res.dlq_url,
            "--job-id",
            "B6",
            "--hold-secs",
            "30",
        ]);
        assert!(pick.status.success(), "{}", out(&pick));
        assert!(
            String::from_utf8_lossy(&pick.stdout).contains("moved 1, skipped 11, failed 0"),
            "{}",
            out(&pick)
        );
        let back = common::drain(&sqs, &res.queue_url).await;
        assert_eq!(back.len(), 1);
        assert_eq!(attribute(&back[0], "idemq-job-id"), "B6");
        assert_eq!(back[0].attributes().unwrap()[&Sys::MessageGroupId], "B");
    });
}

/// A FIFO group longer than one receive (10) cannot be read past its
/// first 10 without deleting them: `list` says so and exits 1 (before: it
/// listed 10 and exited 0), and `export --delete` never reports the DLQ
/// emptied while letters remain: it exits 1, and a second export takes
/// the rest. An export never overwrites a file without --force.
#[test]
fn fifo_letters_that_cannot_be_read_are_counted_and_fail_the_command() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", true, 1, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        for i in 1..=12 {
            let id = format!("C{i}");
            send_raw(
                &sqs,
                &res.dlq_url,
                &format!(r#"{{"transfer_id":"{id}","account":"a","amount":1}}"#),
                &[("idemq-job-id", &id)],
                Some("C"),
            )
            .await;
        }
        let list = idemq(&[
            "dlq",
            "list",
            "--json",
            "--dlq-url",
            &res.dlq_url,
            "--hold-secs",
            "30",
        ]);
        assert_eq!(list.status.code(), Some(1), "{}", out(&list));
        assert_eq!(rows(&list).len(), 10);
        assert!(
            String::from_utf8_lossy(&list.stderr)
                .contains("about 2 dead letters could not be read"),
            "{}",
            out(&list)
        );

        let dir = std::env::temp_dir();
        let first = dir.join(format!("{}.jsonl", unique("export")));
        let second = dir.join(format!("{}.jsonl", unique("export")));
        let export = |file: &std::path::Path| {
            idemq(&[
                "dlq",
                "export",
                file.to_str().unwrap(),
                "--delete",
                "--dlq-url",
                &res.dlq_url,
                "--hold-secs",
                "30",
            ])
        };
        let o = export(&first);
        assert_eq!(o.status.code(), Some(1), "{}", out(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("about 2 remain in the DLQ"),
            "{}",
            out(&o)
        );
        assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 2);
        assert_eq!(std::fs::read_to_string(&first).unwrap().lines().count(), 10);

        let again = export(&first);
        assert_eq!(again.status.code(), Some(2), "{}", out(&again));
        assert!(
            String::from_utf8_lossy(&again.stderr).contains("exists: pass --force"),
            "{}",
            out(&again)
        );
        assert_eq!(
            std::fs::read_to_string(&first).unwrap().lines().count(),
            10,
            "untouched"
        );

        let o = export(&second);
        assert!(o.status.success(), "{}", out(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("exported 2"),
            "{}",
            out(&o)
        );
        assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&second).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let _ = std::fs::remove_file(&first);
        let _ = std::fs::remove_file(&second);
    });
}

/// `--rate 1e-300` panicked in the middle of a redrive; now it is refused
/// before any request, exit 2. An AWS failure while opening the DLQ (here:
/// nothing listens) is not a usage error: exit 1 with one clear line.
#[test]
fn bad_rates_are_usage_errors_and_aws_failures_are_not() {
    setup().block_on(async {
        let sdk = sdk().await;
        let res = init_queue(&sdk, "dlqcli", false, 1, 5).await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        send_raw(
            &sqs,
            &res.dlq_url,
            r#"{"transfer_id":"r-1","account":"a","amount":1}"#,
            &[("idemq-job-id", "r-1")],
            None,
        )
        .await;
        let o = idemq(&[
            "dlq",
            "redrive",
            "--dlq-url",
            &res.dlq_url,
            "--rate",
            "1e-300",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", out(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--rate 1e-300"),
            "{}",
            out(&o)
        );
        assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 1, "nothing moved");
        let o = idemq(&[
            "dlq",
            "redrive",
            "--native",
            "--dlq-url",
            &res.dlq_url,
            "--rate",
            "0.5",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", out(&o));

        let o = Command::new(common::idemq_bin())
            .args([
                "dlq",
                "list",
                "--dlq-url",
                "http://127.0.0.1:9/000000000000/gone",
            ])
            .env("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9")
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_MAX_ATTEMPTS", "1")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", out(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            stderr.contains("cannot read queue http://127.0.0.1:9/000000000000/gone"),
            "{}",
            out(&o)
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    });
}
