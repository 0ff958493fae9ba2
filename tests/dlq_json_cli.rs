//! The operator CLI's machine-readable output and its warning for failure
//! records looked for in the wrong place, on the local stack.
//!
//! Letters are put in the DLQ directly and their failure records written
//! through the library's own `DeadLetters::record` (the consumer's code
//! path), under the namespace a consumer of the source queue uses: no
//! worker run is needed to have letters with and without context.
//! `--function` needs Lambda, which the local stack does not serve: its
//! resolution is tested against mocked answers (cli/src/dlq/function.rs).

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{idemq_bin, init_queue, sdk, string_attribute, unique};
use idemq::config::TableLayout;
use idemq::failure::FailureRecord;
use idemq::failure::{Failure, FailureKind};
use serde_json::Value;

/// The CLI with the consumer settings `env` and none of this process's
/// `IDEMQ_*` (the local stack's endpoints and credentials stay).
fn idemq_with(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(idemq_bin());
    for (k, _) in std::env::vars() {
        if k.starts_with("IDEMQ_") || k == "DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied())
        .args(args)
        .output()
        .expect("run idemq")
}

fn out(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The one JSON object a command printed.
fn object(o: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line of JSON: {}", out(o));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out(o)))
}

fn lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {}", out(o))))
        .collect()
}

/// A source queue, its DLQ and table, with two letters in the DLQ (job
/// ids `j-1`, `j-2`), each with the failure record its consumer wrote.
struct Setup {
    queue_url: String,
    dlq_url: String,
    table: String,
    queue_name: String,
}

async fn letters_with_records() -> Setup {
    let sdk = sdk().await;
    let res = init_queue(&sdk, "dlqjson", false, 5, 30).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let queue_name = res.queue_url.rsplit('/').next().unwrap().to_owned();
    let layout = TableLayout::new(res.table_name.clone());
    let records = idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            layout,
            idemq::config::DEFAULT_MARKER_TTL,
        ),
    ));
    for job in ["j-1", "j-2"] {
        let sent = sqs
            .send_message()
            .queue_url(&res.dlq_url)
            .message_body(format!(r#"{{"job":"{job}"}}"#))
            .message_attributes("idemq-job-id", string_attribute(job))
            .send()
            .await
            .unwrap();
        records
            .record(&FailureRecord {
                job_id: Some(job.into()),
                message_id: sent.message_id().unwrap().into(),
                attempt: 6,
                failure: Failure {
                    kind: FailureKind::Transient,
                    error: "ledger unavailable".into(),
                    chain: vec!["connection refused".into()],
                    backtrace: Some(BACKTRACE.into()),
                },
                failed_at: idemq::testing::clock::now(),
                source_queue: queue_name.clone(),
                payload_hash: "h".into(),
                deploy: "7".into(),
                idemq_version: idemq::failure::IDEMQ_VERSION.into(),
            })
            .await
            .unwrap();
    }
    Setup {
        queue_url: res.queue_url,
        dlq_url: res.dlq_url,
        table: res.table_name,
        queue_name,
    }
}

/// A failure record's backtrace, as the consumer renders it.
const BACKTRACE: &str = "ledger::charge\n    at ./src/main.rs:9:5\n… 31 frames of idemq, the runtime, dependencies and std folded";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// With the consumer's table and namespace every letter has its record
/// and nothing is warned. With another namespace (a consumer that sets
/// IDEMQ_NAMESPACE, an operator who does not, or the reverse), no letter
/// has one: stats, list, show and export say so on stderr naming the
/// table and namespace, and stats, show and export carry it in their
/// JSON's `warnings`; list's rows each say `failure_record: false`.
///
/// Before: the letters were shown with "(no context)" and nothing said
/// that the records were looked for under keys the consumer never wrote.
#[test]
fn failure_records_looked_for_in_the_wrong_namespace_are_warned_about() {
    let s = runtime().block_on(letters_with_records());
    let dlq = ["--dlq-url", s.dlq_url.as_str()];
    let right = [("IDEMQ_TABLE", s.table.as_str())];
    let wrong = [
        ("IDEMQ_TABLE", s.table.as_str()),
        ("IDEMQ_NAMESPACE", "elsewhere"),
    ];
    let stats = |env: &[(&str, &str)]| {
        let o = idemq_with(env, &[&["dlq", "stats", "--json"][..], &dlq].concat());
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        o
    };

    let o = stats(&right);
    let v = object(&o);
    assert_eq!(v["warnings"], serde_json::json!([]), "{}", out(&o));
    assert_eq!(v["by_error"]["ledger unavailable"], 2, "{}", out(&o));
    // One consumer failed both: one deploy, with both jobs and their error.
    let deploys = v["deploys"].as_object().expect("deploys");
    assert_eq!(deploys.len(), 1, "{}", out(&o));
    let (_, deploy) = deploys.iter().next().unwrap();
    assert_eq!(deploy["jobs"], 2, "{}", out(&o));
    assert_eq!(deploy["by_error"]["ledger unavailable"], 2, "{}", out(&o));
    assert!(deploy["first_failed_at"].is_string(), "{}", out(&o));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("warning"));

    let o = stats(&wrong);
    let v = object(&o);
    let w = &v["warnings"][0];
    assert_eq!(w["kind"], "no_failure_records", "{}", out(&o));
    assert_eq!(w["letters"], 2);
    assert_eq!(w["namespaces"], serde_json::json!(["elsewhere"]));
    assert_eq!(w["records"]["store"], "dynamodb");
    assert_eq!(w["records"]["table"], s.table.as_str());
    assert_eq!(v["by_error"]["(no context)"], 2, "{}", out(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("warning: none of the 2 dead letters")
            && stderr.contains(&s.table)
            && stderr.contains("namespace elsewhere")
            && stderr.contains("IDEMQ_NAMESPACE"),
        "{}",
        out(&o)
    );

    // The namespace default is the source queue's name: a table without
    // the records (another consumer's) is named the same way.
    let list = |env: &[(&str, &str)]| {
        let o = idemq_with(env, &[&["dlq", "list", "--json"][..], &dlq].concat());
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        o
    };
    let o = list(&right);
    let rows = lines(&o);
    assert_eq!(rows.len(), 2, "{}", out(&o));
    assert!(
        rows.iter().all(|r| r["failure_record"] == true),
        "{}",
        out(&o)
    );
    let o = list(&wrong);
    let rows = lines(&o);
    assert_eq!(rows.len(), 2, "only letters on stdout: {}", out(&o));
    assert!(
        rows.iter().all(|r| r["failure_record"] == false),
        "{}",
        out(&o)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("namespace elsewhere"));

    let o = idemq_with(
        &right,
        &[&["dlq", "show", "j-1", "--json"][..], &dlq].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(v["found"], true);
    assert_eq!(v["letter"]["job_id"], "j-1");
    assert_eq!(v["letter"]["failure_record"], true);
    assert_eq!(
        v["letter"]["attributes"]["idemq-job-id"]["string_value"],
        "j-1"
    );
    assert!(
        v["letter"].get("payload").is_none(),
        "payload only with --payload"
    );
    assert_eq!(v["failure_record"]["error"], "ledger unavailable");
    assert_eq!(
        v["failure_record"]["error_chain"],
        serde_json::json!(["connection refused"])
    );
    assert_eq!(v["failure_record"]["source_queue"], s.queue_name.as_str());
    assert_eq!(v["failure_record"]["backtrace"], BACKTRACE);
    assert_eq!(v["letter"]["backtrace"], BACKTRACE);
    // The text form prints it under `where:`, indented.
    let o = idemq_with(&right, &[&["dlq", "show", "j-1"][..], &dlq].concat());
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("where:\n  ledger::charge\n      at ./src/main.rs:9:5\n  … 31 frames"),
        "{text}"
    );
    let o = idemq_with(
        &wrong,
        &[&["dlq", "show", "j-1", "--json"][..], &dlq].concat(),
    );
    let v = object(&o);
    assert_eq!(v["failure_record"], Value::Null, "{}", out(&o));
    assert_eq!(v["warnings"][0]["kind"], "no_failure_records");
    let o = idemq_with(
        &right,
        &[&["dlq", "show", "nope", "--json"][..], &dlq].concat(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", out(&o));
    assert_eq!(object(&o)["found"], false);

    // No table at all: the letters are shown, and that is said too.
    let o = stats(&[]);
    let w = &object(&o)["warnings"][0];
    assert_eq!(w["records"]["store"], "none", "{}", out(&o));
    assert!(
        w["message"]
            .as_str()
            .unwrap()
            .contains("no table was given")
    );

    let dir = std::env::temp_dir().join(unique("dlqjson"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dlq.jsonl");
    let file = file.to_str().unwrap();
    let o = idemq_with(
        &wrong,
        &[&["dlq", "export", file, "--json"][..], &dlq].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(
        (v["exported"].as_u64(), v["deleted"].as_u64()),
        (Some(2), None)
    );
    assert_eq!(v["warnings"][0]["kind"], "no_failure_records");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--env-file`: the consumer's settings (its DLQ and table) from a file,
/// and none from this shell: a stray IDEMQ_NAMESPACE there changes
/// nothing, and is named as not read. A malformed file is a usage error
/// naming its line.
#[test]
fn an_env_file_holds_the_consumer_s_settings() {
    let s = runtime().block_on(letters_with_records());
    let dir = std::env::temp_dir().join(unique("envfile"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("consumer.env");
    std::fs::write(
        &file,
        format!(
            "# the consumer of {}\nIDEMQ_DLQ_URL={}\nexport IDEMQ_TABLE=\"{}\"\n",
            s.queue_name, s.dlq_url, s.table
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let o = idemq_with(
        &[("IDEMQ_NAMESPACE", "elsewhere")],
        &["dlq", "stats", "--json", "--env-file", file],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(v["warnings"], serde_json::json!([]), "{}", out(&o));
    assert_eq!(v["by_error"]["ledger unavailable"], 2, "{}", out(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("IDEMQ_TABLE={}", s.table))
            && stderr.contains("not read from this shell with --env-file: IDEMQ_NAMESPACE"),
        "{}",
        out(&o)
    );

    let bad = dir.join("bad.env");
    std::fs::write(&bad, format!("IDEMQ_TABLE={}\nIDEMQ DLQ\n", s.table)).unwrap();
    let o = idemq_with(&[], &["dlq", "stats", "--env-file", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad.env: line 2: not KEY=VALUE"),
        "{}",
        out(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// send, init, redrive (dry run and real), export and import each print
/// one JSON object with `--json`, with the fields the docs list, and
/// keep their exit codes.
#[test]
fn every_command_prints_one_json_object() {
    let s = runtime().block_on(letters_with_records());
    let env = [("IDEMQ_TABLE", s.table.as_str())];
    let dlq = ["--dlq-url", s.dlq_url.as_str()];

    // send: one good line, one that is not JSON.
    let dir = std::env::temp_dir().join(unique("dlqjson"));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("jobs.jsonl");
    std::fs::write(&input, "{\"id\":\"s-1\"}\nnot json\n").unwrap();
    let o = idemq_with(
        &env,
        &[
            "send",
            "--queue-url",
            &s.queue_url,
            "--job-id-pointer",
            "/id",
            "--json",
            input.to_str().unwrap(),
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "a failed line fails the run: {}",
        out(&o)
    );
    let v = object(&o);
    assert_eq!(
        (v["sent"].as_u64(), v["failed"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["failures"][0]["line"], 2, "{}", out(&o));
    assert!(
        v["failures"][0]["error"]
            .as_str()
            .unwrap()
            .starts_with("not JSON")
    );
    assert!(v["seconds"].is_number());

    // init of what exists: the three names, and what it created (nothing).
    let queue_name = s.queue_name.as_str();
    let o = idemq_with(
        &env,
        &[
            "init",
            "--queue-name",
            queue_name,
            "--max-receive-count",
            "5",
            "--no-deletion-protection",
            "--json",
        ],
    );
    let v = object(&o);
    assert_eq!(v["queue_url"], s.queue_url.as_str(), "{}", out(&o));
    assert_eq!(v["table_name"], s.table.as_str());
    for field in ["created", "warnings", "violations"] {
        assert!(v[field].is_array(), "{field}: {}", out(&o));
    }

    let o = idemq_with(
        &env,
        &[&["dlq", "redrive", "--dry-run", "--json"][..], &dlq].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["moved"].as_array().unwrap().len(), 2, "{}", out(&o));
    assert_eq!(
        v["moved"][0]["last_error"],
        "ledger unavailable: connection refused"
    );
    assert_eq!(v["complete"], true);

    let export = dir.join("dlq.jsonl");
    let export = export.to_str().unwrap();
    let o = idemq_with(
        &env,
        &[&["dlq", "export", export, "--delete", "--json"][..], &dlq].concat(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(
        (v["exported"].as_u64(), v["deleted"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(v["not_deleted"], serde_json::json!([]));
    assert_eq!(v["warnings"], serde_json::json!([]));

    let o = idemq_with(
        &env,
        &["dlq", "import", export, "--to", &s.dlq_url, "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(v["sent"], 2, "{}", out(&o));
    assert_eq!(v["complete"], true);
    assert_eq!(v["failures"], serde_json::json!([]));

    // The letters are back in the DLQ: a real redrive moves them.
    std::thread::sleep(Duration::from_millis(200));
    let o = idemq_with(&env, &[&["dlq", "redrive", "--json"][..], &dlq].concat());
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let v = object(&o);
    assert_eq!(
        (v["dry_run"].as_bool(), v["moved"].as_array().map(Vec::len)),
        (Some(false), Some(2)),
        "{}",
        out(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
