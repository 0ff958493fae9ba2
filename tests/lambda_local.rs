//! idemq's Lambda host under a real Lambda Runtime API: `cargo lambda watch`
//! runs `tests/support/lambda_probe.rs` (through `idemq::run`, as on Lambda) and
//! these tests invoke it with the SQS events in `tests/fixtures/`, through
//! `cargo lambda invoke`, then check the partial batch response and what
//! the batch did to DynamoDB and the DLQ on the local stack.
//!
//! The events are what Lambda's SQS event source sends. Their receipt
//! handles are made up, so idemq's ChangeMessageVisibilityBatch calls fail
//! with `ReceiptHandleIsInvalid`: idemq must log that and answer anyway.
//!
//! These tests need the watch server (`scripts/lambda.sh up`, after
//! `scripts/stack.sh up`) and panic without it. They are `#[ignore]`d so the
//! `cargo test --all-targets` run of `make test`, which runs before the server
//! is up, leaves them out; `make test` then runs them on their own:
//! `cargo test --test lambda_local -- --ignored`.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tokio::time::Instant;

use aws_sdk_sqs::types::QueueAttributeName;
use common::{attribute, drain, number, sdk, unique};
use idemq::config::DEFAULT_MARKER_TTL;
use idemq::config::TableLayout;
use idemq::failure::FailureKind;
use idemq::init::{InitSpec, init};
use serde_json::Value;

const MIXED: &str = include_str!("fixtures/sqs_standard_mixed.json");
const FIFO: &str = include_str!("fixtures/sqs_fifo_groups.json");
const PANIC: &str = include_str!("fixtures/sqs_panic.json");
const DEADLINE: &str = include_str!("fixtures/sqs_deadline.json");

/// One watch server, one function instance: invocations queue behind each
/// other, which would spoil the deadline test's timing. One test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The probe function's environment, as `scripts/lambda.sh up` wrote it.
struct Probe {
    env: HashMap<String, String>,
}

impl Probe {
    /// Panics, saying what to run, unless the watch server is up.
    fn up() -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".state/lambda.env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}. These tests need the cargo lambda watch server: run \
                 `scripts/stack.sh up && scripts/lambda.sh up` (or `make test`)",
                path.display()
            )
        });
        let env: HashMap<String, String> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let probe = Self { env };
        let addr = format!(
            "{}:{}",
            probe.var("IDEMQ_LAMBDA_INVOKE_ADDRESS"),
            probe.var("IDEMQ_LAMBDA_INVOKE_PORT")
        );
        assert!(
            TcpStream::connect_timeout(
                &addr.parse().expect("invoke address"),
                Duration::from_secs(2)
            )
            .is_ok(),
            "nothing listens on {addr}: start the watch server with `scripts/lambda.sh up`"
        );
        // The tests and the function must see the same stack.
        for var in ["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB"] {
            assert_eq!(
                std::env::var(var).ok().as_deref(),
                Some(probe.var(var)),
                "{var} differs between this test and the watch server (.state/lambda.env): \
                 `set -a; . .state/stack.env; set +a`, or restart it with `scripts/lambda.sh down && scripts/lambda.sh up`"
            );
        }
        probe
    }

    fn var(&self, name: &str) -> &str {
        self.env.get(name).unwrap_or_else(|| {
            panic!("{name} is missing from .state/lambda.env; rerun `scripts/lambda.sh up`")
        })
    }

    fn table(&self) -> &str {
        self.var("IDEMQ_TABLE")
    }

    /// Sends `event` with `cargo lambda invoke --data-file`: the function's
    /// answer, or its error, and how long the invocation took.
    async fn invoke_raw(&self, event: &Value) -> (Result<Value, String>, Duration) {
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}.json", unique("lambda-event")));
        std::fs::write(&file, serde_json::to_vec(event).unwrap()).unwrap();
        let mut cmd = Command::new(self.var("IDEMQ_LAMBDA_CARGO_LAMBDA"));
        cmd.args(["lambda", "invoke", "--output-format", "json"])
            .arg("--invoke-address")
            .arg(self.var("IDEMQ_LAMBDA_INVOKE_ADDRESS"))
            .arg("--invoke-port")
            .arg(self.var("IDEMQ_LAMBDA_INVOKE_PORT"))
            .arg("--data-file")
            .arg(&file);
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap()
            .expect("run cargo lambda invoke");
        let took = started.elapsed();
        let _ = std::fs::remove_file(&file);
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return (Err(format!("{}: {stdout}{stderr}", out.status)), took);
        }
        let answer = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        (Ok(answer), took)
    }

    /// [`Self::invoke_raw`] that must succeed: the ids in `batchItemFailures`.
    async fn invoke(&self, event: &Value) -> (Vec<String>, Duration) {
        let (answer, took) = self.invoke_raw(event).await;
        let answer = answer.unwrap_or_else(|e| panic!("the invocation failed: {e}"));
        let failures = answer["batchItemFailures"]
            .as_array()
            .unwrap_or_else(|| panic!("not a partial batch response: {answer}"));
        let ids = failures
            .iter()
            .map(|f| {
                f["itemIdentifier"]
                    .as_str()
                    .expect("itemIdentifier")
                    .to_owned()
            })
            .collect();
        (ids, took)
    }

    /// The function's log (watch's output), for what idemq only logs.
    fn log(&self) -> String {
        std::fs::read_to_string(self.var("IDEMQ_LAMBDA_LOG_FILE")).unwrap_or_default()
    }
}

/// A source queue (and its DLQ) on the local stack, and the probe's table.
struct Queue {
    url: String,
    dlq_url: String,
    arn: String,
    name: String,
}

async fn queue(sdk: &aws_config::SdkConfig, probe: &Probe, prefix: &str, fifo: bool) -> Queue {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let spec = InitSpec {
        queue_name: unique(prefix),
        fifo,
        max_receive_count: 6,
        visibility_timeout: Duration::from_secs(30),
        layout: TableLayout::new(probe.table()),
        marker_ttl: DEFAULT_MARKER_TTL,
    };
    // Creates the fixed table on first use, verifies it after.
    let res = init(&sqs, &aws_sdk_dynamodb::Client::new(sdk), &spec)
        .await
        .expect("init");
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&res.queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap();
    let arn = attrs.attributes().unwrap()[&QueueAttributeName::QueueArn].clone();
    Queue {
        url: res.queue_url,
        dlq_url: res.dlq_url,
        name: arn.rsplit(':').next().unwrap().to_owned(),
        arn,
    }
}

/// A secret in every payload, which no log line may contain.
const CANARY: &str = "CANARY-d0c8e2a1f4b7";

/// A fixture as the event for `queue`, with this run's job ids (`<run>-<id>`
/// in the `idemq-job-id` attribute and in the body's `id`), so reruns on the
/// same table do not meet each other's markers, and sent now: idemq
/// dead-letters a retry that would outlive the queue's retention, counted
/// from `SentTimestamp`, and the fixtures' own timestamps only grow older.
/// `md5OfBody` is left as it was: neither the runtime client nor idemq
/// reads it.
fn event(fixture: &str, queue: &Queue, run: &str) -> Value {
    let mut event: Value = serde_json::from_str(fixture).expect("fixture JSON");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    for r in event["Records"].as_array_mut().expect("Records") {
        r["eventSourceARN"] = queue.arn.clone().into();
        r["attributes"]["SentTimestamp"] = now_ms.to_string().into();
        r["attributes"]["ApproximateFirstReceiveTimestamp"] = now_ms.to_string().into();
        let id = &mut r["messageAttributes"]["idemq-job-id"]["stringValue"];
        *id = format!("{run}-{}", id.as_str().expect("job id")).into();
        let body = r["body"].as_str().expect("body").to_owned();
        match serde_json::from_str::<Value>(&body) {
            Ok(mut job) => {
                job["id"] = format!("{run}-{}", job["id"].as_str().expect("body id")).into();
                // Payloads never reach a log line: see the canary checks.
                job["canary"] = CANARY.into();
                r["body"] = job.to_string().into();
            }
            Err(_) => r["body"] = format!("{body} {CANARY}").into(),
        }
    }
    event
}

/// messageId by fixture job id (`mixed-ok`, …); a job id sent twice maps to
/// its first message.
fn message_ids(fixture: &str) -> HashMap<String, String> {
    let event: Value = serde_json::from_str(fixture).unwrap();
    let mut ids = HashMap::new();
    for r in event["Records"].as_array().unwrap() {
        let job = r["messageAttributes"]["idemq-job-id"]["stringValue"]
            .as_str()
            .unwrap();
        ids.entry(job.to_owned())
            .or_insert_with(|| r["messageId"].as_str().unwrap().to_owned());
    }
    ids
}

fn ids_of(ids: &HashMap<String, String>, jobs: &[&str]) -> BTreeSet<String> {
    jobs.iter().map(|j| ids[*j].clone()).collect()
}

async fn counter(
    ddb: &aws_sdk_dynamodb::Client,
    probe: &Probe,
    run: &str,
    job: &str,
) -> Option<i64> {
    number(ddb, probe.table(), &format!("probe#{run}-{job}"), "n").await
}

/// The failure records of jobs from `queue`: in its namespace (the
/// queue's name, the function's default).
fn dead_letters(
    sdk: &aws_config::SdkConfig,
    probe: &Probe,
    queue: &Queue,
) -> idemq::dlq::records::Records {
    idemq::dlq::records::Records::new(std::sync::Arc::new(
        idemq::store::dynamodb::FailureTable::new(
            aws_sdk_dynamodb::Client::new(sdk),
            TableLayout::new(probe.table()),
            DEFAULT_MARKER_TTL,
        ),
    ))
    .with_source_queues(&[&queue.name])
}

/// Waits (briefly: watch relays the function's output as it comes) for a
/// log line that contains every one of `needles`.
async fn logged(probe: &Probe, needles: &[&str]) -> bool {
    for _ in 0..20 {
        if probe
            .log()
            .lines()
            .any(|l| needles.iter().all(|n| l.contains(n)))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The fixtures are SQS events as `aws_lambda_events` reads them, with the
/// fields Lambda sends and no others (a misspelt field would be dropped
/// silently), and idemq's Lambda host reads from them what it needs. Needs
/// no server, so it runs in every `cargo test`.
#[test]
fn fixtures_are_sqs_events_that_idemq_reads() {
    const FIELDS: [&str; 9] = [
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    ];
    const SYSTEM: [&str; 4] = [
        "ApproximateReceiveCount",
        "SentTimestamp",
        "SenderId",
        "ApproximateFirstReceiveTimestamp",
    ];
    const FIFO_SYSTEM: [&str; 3] = ["MessageGroupId", "MessageDeduplicationId", "SequenceNumber"];
    for (name, fixture, fifo) in [
        ("mixed", MIXED, false),
        ("fifo", FIFO, true),
        ("panic", PANIC, false),
        ("deadline", DEADLINE, false),
    ] {
        let raw: Value = serde_json::from_str(fixture).expect(name);
        let raw = raw["Records"].as_array().expect(name);
        let event: aws_lambda_events::event::sqs::SqsEvent =
            serde_json::from_str(fixture).expect(name);
        assert_eq!(event.records.len(), raw.len(), "{name}");
        for (record, raw) in event.records.iter().zip(raw) {
            let keys: BTreeSet<&str> = raw
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, FIELDS.into_iter().collect(), "{name}");
            let system: BTreeSet<&str> = record.attributes.keys().map(String::as_str).collect();
            let want = SYSTEM
                .iter()
                .chain(if fifo { &FIFO_SYSTEM[..] } else { &[] });
            assert_eq!(system, want.copied().collect(), "{name}");
            assert_eq!(record.event_source.as_deref(), Some("aws:sqs"), "{name}");
            assert_eq!(record.aws_region.as_deref(), Some("us-east-1"), "{name}");
            let arn = record.event_source_arn.as_deref().unwrap_or_default();
            assert!(
                arn.starts_with("arn:aws:sqs:us-east-1:000000000000:"),
                "{name}: {arn}"
            );
            assert_eq!(arn.ends_with(".fifo"), fifo, "{name}: {arn}");
            let job_attr = &record.message_attributes["idemq-job-id"];
            assert_eq!(job_attr.data_type.as_deref(), Some("String"), "{name}");

            let msg = idemq::lambda::from_event(record, Instant::now()).expect(name);
            assert_eq!(msg.message_id, raw["messageId"].as_str().unwrap(), "{name}");
            assert_eq!(
                msg.receipt_handle,
                raw["receiptHandle"].as_str().unwrap(),
                "{name}"
            );
            assert_eq!(msg.body, raw["body"].as_str().unwrap(), "{name}");
            assert_eq!(msg.receive_count, 1, "{name}");
            let sent_ms: u64 = record.attributes["SentTimestamp"].parse().expect(name);
            assert_eq!(
                msg.sent_at,
                Some(std::time::UNIX_EPOCH + Duration::from_millis(sent_ms)),
                "{name}: SentTimestamp, from which retention counts"
            );
            assert_eq!(
                msg.group_id,
                record.attributes.get("MessageGroupId").cloned(),
                "{name}"
            );
            assert_eq!(
                msg.attributes[idemq::job::JOB_ID_ATTRIBUTE].string_value(),
                job_attr.string_value.as_deref(),
                "{name}"
            );
        }
    }
}

/// ok, transient, permanent, a job sent twice, an undecodable body: only the
/// transient one is reported; ok and the duplicate took effect once; the
/// permanent and undecodable ones are in the DLQ with their context. The
/// same event again (Lambda retrying the whole batch) changes no counter.
#[tokio::test]
#[ignore = "needs `scripts/lambda.sh up`; `make test` runs it"]
async fn standard_batch_reports_only_the_transient_job() {
    let _serial = SERIAL.lock().await;
    let probe = Probe::up();
    let sdk = sdk().await;
    let (sqs, ddb) = (
        aws_sdk_sqs::Client::new(&sdk),
        aws_sdk_dynamodb::Client::new(&sdk),
    );
    let q = queue(&sdk, &probe, "lambda-mixed", false).await;
    let run = unique("r");
    let ev = event(MIXED, &q, &run);
    let ids = message_ids(MIXED);

    let (failed, _) = probe.invoke(&ev).await;
    assert_eq!(failed.len(), 1, "each failure reported once: {failed:?}");
    assert_eq!(
        failed.into_iter().collect::<BTreeSet<_>>(),
        ids_of(&ids, &["mixed-transient"])
    );

    for job in ["mixed-ok", "mixed-dup"] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, Some(1), "{job}");
    }
    for job in ["mixed-transient", "mixed-permanent"] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, None, "{job}");
    }

    // The fake receipt handle: logged, not fatal.
    assert!(
        logged(
            &probe,
            &[
                &ids["mixed-transient"],
                "visibility not changed",
                "ReceiptHandleIsInvalid"
            ]
        )
        .await,
        "no log of the failed ChangeMessageVisibility for {}",
        ids["mixed-transient"]
    );
    assert!(
        !probe.log().contains(CANARY),
        "a payload reached the function's logs"
    );

    let dl = dead_letters(&sdk, &probe, &q);
    let expect = [
        (
            "mixed-transient",
            FailureKind::Transient,
            "asked for a transient failure",
        ),
        (
            "mixed-permanent",
            FailureKind::Permanent,
            "asked for a permanent failure",
        ),
        (
            "mixed-undecodable",
            FailureKind::Permanent,
            "body does not decode as the job type",
        ),
    ];
    for (job, kind, error) in expect {
        let rec = dl
            .read(Some(&format!("{run}-{job}")), "")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("no failure record for {job}"));
        assert_eq!(rec.failure.kind, kind, "{job}");
        assert!(
            rec.failure.error.contains(error),
            "{job}: {}",
            rec.failure.error
        );
        assert_eq!(
            (rec.attempt, rec.source_queue.as_str()),
            (1, q.name.as_str()),
            "{job}"
        );
        assert_eq!(rec.message_id, ids[job]);
    }

    let dead = drain(&sqs, &q.dlq_url).await;
    let bodies: HashMap<String, String> = ev["Records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let job = r["messageAttributes"]["idemq-job-id"]["stringValue"]
                .as_str()
                .unwrap();
            (job.to_owned(), r["body"].as_str().unwrap().to_owned())
        })
        .collect();
    let dead_jobs: BTreeSet<&str> = dead.iter().map(|m| attribute(m, "idemq-job-id")).collect();
    let want: BTreeSet<String> = ["mixed-permanent", "mixed-undecodable"]
        .iter()
        .map(|j| format!("{run}-{j}"))
        .collect();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert_eq!(dead_jobs, want.iter().map(String::as_str).collect());
    for m in &dead {
        let job = attribute(m, "idemq-job-id");
        assert_eq!(m.body(), Some(bodies[job].as_str()), "{job}: body kept");
        assert_eq!(attribute(m, "idemq-attempts"), "1", "{job}");
        assert_eq!(attribute(m, "idemq-source-queue"), q.name, "{job}");
        // Which deploy: the function's version where Lambda's emulator
        // names one, and always the idemq it was built with.
        let deploy = attribute(m, "idemq-deploy");
        assert!(
            deploy.ends_with(&format!("idemq {}", idemq::failure::IDEMQ_VERSION)),
            "{job}: idemq-deploy {deploy:?}"
        );
        assert!(
            humantime::parse_rfc3339(attribute(m, "idemq-failed-at")).is_ok(),
            "{job}: idemq-failed-at"
        );
        let error = attribute(m, "idemq-error");
        let expected = if job.ends_with("undecodable") {
            "does not decode"
        } else {
            "asked for a permanent failure"
        };
        assert!(error.contains(expected), "{job}: idemq-error = {error:?}");
    }
    assert!(
        drain(&sqs, &q.url).await.is_empty(),
        "nothing was sent to the source queue"
    );

    // Lambda retries a whole batch after a function error: the committed
    // jobs are duplicates now, and the answer is the same.
    let (failed, _) = probe.invoke(&ev).await;
    assert_eq!(failed, vec![ids["mixed-transient"].clone()]);
    for job in ["mixed-ok", "mixed-dup"] {
        assert_eq!(
            counter(&ddb, &probe, &run, job).await,
            Some(1),
            "{job} after the retry"
        );
    }
}

/// FIFO: group A's second message fails, so it and every later A message
/// are reported (the later ones never ran); group B is unaffected.
#[tokio::test]
#[ignore = "needs `scripts/lambda.sh up`; `make test` runs it"]
async fn fifo_group_stops_at_its_first_failure() {
    let _serial = SERIAL.lock().await;
    let probe = Probe::up();
    let sdk = sdk().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let q = queue(&sdk, &probe, "lambda-groups", true).await;
    let run = unique("r");
    let ids = message_ids(FIFO);

    let (failed, _) = probe.invoke(&event(FIFO, &q, &run)).await;
    // In batch order, as Lambda needs for FIFO.
    let want: Vec<String> = ["fifo-a2", "fifo-a3", "fifo-a4"]
        .iter()
        .map(|j| ids[*j].clone())
        .collect();
    assert_eq!(failed, want);

    for job in ["fifo-a1", "fifo-b1", "fifo-b2", "fifo-b3"] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, Some(1), "{job}");
    }
    let dl = dead_letters(&sdk, &probe, &q);
    for job in ["fifo-a3", "fifo-a4"] {
        assert_eq!(
            counter(&ddb, &probe, &run, job).await,
            None,
            "{job} must not run"
        );
        assert!(
            dl.read(Some(&format!("{run}-{job}")), "")
                .await
                .unwrap()
                .is_none(),
            "{job} never ran"
        );
    }
    let rec = dl
        .read(Some(&format!("{run}-fifo-a2")), "")
        .await
        .unwrap()
        .expect("a2's failure record");
    assert_eq!(rec.failure.kind, FailureKind::Transient);
}

/// A panicking handler fails its own job only, and the function lives on.
#[tokio::test]
#[ignore = "needs `scripts/lambda.sh up`; `make test` runs it"]
async fn a_panic_fails_only_its_job() {
    let _serial = SERIAL.lock().await;
    let probe = Probe::up();
    let sdk = sdk().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let q = queue(&sdk, &probe, "lambda-panic", false).await;
    let run = unique("r");
    let ids = message_ids(PANIC);

    let (failed, _) = probe.invoke(&event(PANIC, &q, &run)).await;
    assert_eq!(failed, vec![ids["panic-boom"].clone()]);
    for job in ["panic-ok1", "panic-ok2", "panic-ok3"] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, Some(1), "{job}");
    }
    assert_eq!(counter(&ddb, &probe, &run, "panic-boom").await, None);
    let rec = dead_letters(&sdk, &probe, &q)
        .read(Some(&format!("{run}-panic-boom")), "")
        .await
        .unwrap()
        .expect("failure record");
    assert_eq!(rec.failure.kind, FailureKind::Panic);
    assert!(
        rec.failure.error.contains("asked to panic"),
        "{}",
        rec.failure.error
    );

    // Same process, next invocation: still answering.
    let (failed, _) = probe.invoke(&serde_json::json!({"Records": []})).await;
    assert!(failed.is_empty());
}

/// Three jobs at once, a deadline 12 s after the event, none started in its
/// last 6 s: two 7.5 s jobs finish; a 60 s job is abandoned at the
/// deadline minus half the margin; the three jobs waiting for a slot are
/// never started. All four are reported, and the answer comes before the
/// deadline.
#[tokio::test]
#[ignore = "needs `scripts/lambda.sh up`; `make test` runs it"]
async fn near_the_deadline_unstarted_jobs_are_reported_in_time() {
    let _serial = SERIAL.lock().await;
    let probe = Probe::up();
    // The fixture is timed for these settings (scripts/lambda.sh sets them).
    for (var, value) in [
        ("IDEMQ_CONCURRENCY", "3"),
        ("IDEMQ_DEADLINE_MARGIN", "6s"),
        ("PROBE_FUNCTION_TIMEOUT", "12s"),
    ] {
        assert_eq!(
            probe.var(var),
            value,
            "{var}: sqs_deadline.json is timed for {value}"
        );
    }
    let timeout = Duration::from_secs(12);
    let sdk = sdk().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let q = queue(&sdk, &probe, "lambda-deadline", false).await;
    let run = unique("r");
    let ids = message_ids(DEADLINE);

    let (failed, took) = probe.invoke(&event(DEADLINE, &q, &run)).await;
    assert_eq!(
        failed.into_iter().collect::<BTreeSet<_>>(),
        ids_of(
            &ids,
            &[
                "deadline-hog",
                "deadline-ok1",
                "deadline-ok2",
                "deadline-s3"
            ]
        )
    );
    eprintln!("the deadline batch was answered after {took:?}");
    assert!(
        took < timeout,
        "answered after {took:?}, past the {timeout:?} deadline"
    );
    assert!(
        took >= Duration::from_millis(7500),
        "the 7.5 s jobs ran: {took:?}"
    );

    for job in ["deadline-s1", "deadline-s2"] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, Some(1), "{job}");
    }
    let dl = dead_letters(&sdk, &probe, &q);
    for job in [
        "deadline-hog",
        "deadline-ok1",
        "deadline-ok2",
        "deadline-s3",
    ] {
        assert_eq!(counter(&ddb, &probe, &run, job).await, None, "{job}");
    }
    let hog = dl
        .read(Some(&format!("{run}-deadline-hog")), "")
        .await
        .unwrap()
        .expect("hog's failure record");
    assert_eq!(hog.failure.kind, FailureKind::Timeout);
    for job in ["deadline-ok1", "deadline-ok2", "deadline-s3"] {
        assert!(
            dl.read(Some(&format!("{run}-{job}")), "")
                .await
                .unwrap()
                .is_none(),
            "{job} never started"
        );
    }
}

/// A record without a messageId cannot be named in `batchItemFailures`: the
/// whole invocation fails (Lambda then retries the batch) rather than
/// answering with an empty or unknown item identifier.
#[tokio::test]
#[ignore = "needs `scripts/lambda.sh up`; `make test` runs it"]
async fn a_record_without_message_id_fails_the_invocation() {
    let _serial = SERIAL.lock().await;
    let probe = Probe::up();
    let sdk = sdk().await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let q = queue(&sdk, &probe, "lambda-no-id", false).await;
    let run = unique("r");
    let mut ev = event(PANIC, &q, &run);
    ev["Records"][2]
        .as_object_mut()
        .unwrap()
        .remove("messageId");

    let (answer, _) = probe.invoke_raw(&ev).await;
    let error = answer.expect_err("the invocation must fail");
    assert!(error.contains("has no messageId"), "{error}");
    // Refused before any job ran.
    assert_eq!(counter(&ddb, &probe, &run, "panic-ok1").await, None);
}
