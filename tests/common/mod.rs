//! Shared set-up for tests that run against the local AWS stack
//! (`make stack-up`; `make test` starts it and exports its endpoints).
#![allow(dead_code)]

#[cfg(feature = "testing")]
pub mod event;

use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::config::TableLayout;

/// SDK clients for the local stack. Panics with the fix when the stack's
/// endpoints are not in the environment: these tests must not pass vacuously.
pub async fn sdk() -> aws_config::SdkConfig {
    for var in ["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: run these tests with `make test`, or `make stack-up` \
             and `set -a; . .state/stack.env; set +a` first"
        );
    }
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A name unique to this test process and call, so tests never share a
/// table or queue (and moto's per-transaction cost stays small).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand::random::<u16>()
    )
}

/// Creates a fresh idemq table through `idemq init`'s own code path.
pub async fn fresh_table(sdk: &aws_config::SdkConfig) -> TableLayout {
    let layout = TableLayout::new(unique("idemq-test"));
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    assert!(
        idemq::init::ensure_table(&ddb, &layout)
            .await
            .expect("create table")
    );
    layout
}

/// The numeric attribute `attr` of the item with string key `pk`, if any.
pub async fn number(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
    attr: &str,
) -> Option<i64> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get_item");
    out.item()?.get(attr)?.as_n().ok()?.parse().ok()
}

/// `idemq init` of a fresh queue, DLQ and table named `prefix-…`.
pub async fn init_queue(
    sdk: &aws_config::SdkConfig,
    prefix: &str,
    fifo: bool,
    max_receive_count: u32,
    visibility_secs: u64,
) -> idemq::init::InitReport {
    let spec = idemq::init::InitSpec {
        queue_name: unique(prefix),
        fifo,
        max_receive_count,
        visibility_timeout: std::time::Duration::from_secs(visibility_secs),
        layout: TableLayout::new(unique(prefix)),
        marker_ttl: idemq::config::DEFAULT_MARKER_TTL,
    };
    idemq::init::init(
        &aws_sdk_sqs::Client::new(sdk),
        &aws_sdk_dynamodb::Client::new(sdk),
        &spec,
    )
    .await
    .expect("init")
}

/// Receives and deletes every message of a queue (until two empty long
/// polls), with all attributes, in receive order. Deleting as it goes keeps
/// FIFO groups flowing.
pub async fn drain(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    let mut all = Vec::new();
    let mut empty = 0;
    while empty < 2 {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        if out.messages().is_empty() {
            empty += 1;
            continue;
        }
        // One receive is at most 10 messages: one DeleteMessageBatch.
        let entries: Vec<_> = out
            .messages()
            .iter()
            .filter_map(|m| m.receipt_handle())
            .enumerate()
            .map(|(i, handle)| {
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
                    .expect("id and receipt handle set")
            })
            .collect();
        let deleted = sqs
            .delete_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("delete");
        assert!(
            deleted.failed().is_empty(),
            "delete: {:?}",
            deleted.failed()
        );
        all.extend(out.messages().iter().cloned());
    }
    all
}

/// A string message attribute, or "".
pub fn attribute<'m>(m: &'m aws_sdk_sqs::types::Message, name: &str) -> &'m str {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
        .unwrap_or_default()
}

/// The `idemq` operator binary of this build. It belongs to the CLI's own
/// package (cli/), so Cargo gives the library's tests no
/// `CARGO_BIN_EXE_idemq`: the binary sits beside the test harness's
/// directory in the same target directory. `cargo test --workspace`
/// (scripts/test.sh) builds it with the tests; a test run that did not
/// is told how.
pub fn idemq_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> -> target/<profile>/idemq
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .map(|profile| profile.join(format!("idemq{}", std::env::consts::EXE_SUFFIX)))
        .expect("the test binary sits in target/<profile>/deps");
    assert!(
        bin.is_file(),
        "{} is missing: this test runs the operator CLI; build it with the tests: \
         cargo test --workspace (or cargo build -p idemq-cli first)",
        bin.display()
    );
    bin
}

/// Runs the `idemq` binary.
pub fn idemq(args: &[&str]) -> std::process::Output {
    std::process::Command::new(idemq_bin())
        .args(args)
        .output()
        .expect("run idemq")
}

/// The ledger example (`examples/ledger.rs`), the handler most local-stack
/// tests run.
#[allow(dead_code)]
#[path = "../../examples/ledger.rs"]
pub mod ledger;

/// A backoff of `base` growing to `cap`, so a test's retries take seconds.
pub fn quick_backoff(
    base: std::time::Duration,
    cap: std::time::Duration,
) -> idemq::backoff::Backoff {
    idemq::backoff::Backoff::new().with_base(base).with_cap(cap)
}

/// Runs `handler` as the local worker on `res`'s queue (batches of 10,
/// `concurrency` at once) until the queue has been idle for `idle_secs`.
pub async fn work_until_idle<H: idemq::Handler<Effect = idemq::store::dynamodb::Effect>>(
    handler: H,
    res: &idemq::init::InitReport,
    concurrency: usize,
    idle_secs: u64,
    backoff: idemq::backoff::Backoff,
) -> idemq::metrics::BatchMetrics {
    let mut args = idemq::worker::WorkerArgs::new(res.queue_url.clone());
    args.table = Some(res.table_name.clone());
    args.batch_size = 10;
    args.concurrency = Some(concurrency);
    args.exit_when_idle = Some(idle_secs);
    let batch = idemq::config::BatchConfig::default().with_backoff(backoff);
    idemq::worker::run_with(handler, args, batch)
        .await
        .expect("worker")
}

/// The ledger as the local worker until the queue is idle for `idle_secs`;
/// accounts in `down` fail (transiently) with a downstream outage.
pub async fn work_ledger(
    res: &idemq::init::InitReport,
    down: &[&str],
    idle_secs: u64,
) -> idemq::metrics::BatchMetrics {
    let ledger = ledger::Ledger {
        table: res.table_name.clone(),
        fail_accounts: down.iter().map(|a| a.to_string()).collect(),
    };
    let second = std::time::Duration::from_secs(1);
    work_until_idle(ledger, res, 8, idle_secs, quick_backoff(second, second)).await
}

/// Messages in a DLQ (visible, in flight and delayed), as SQS counts them.
pub async fn dlq_total(sqs: &aws_sdk_sqs::Client, dlq_url: &str) -> u64 {
    idemq::dlq::peek::Peek::new(sqs.clone(), dlq_url, std::time::Duration::from_secs(1))
        .depth()
        .await
        .unwrap()
        .total()
}

/// A `String` message attribute.
pub fn string_attribute(v: &str) -> aws_sdk_sqs::types::MessageAttributeValue {
    aws_sdk_sqs::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .unwrap()
}

/// Runs `idemq dlq redrive --dlq-url <dlq_url> --hold-secs 2 <extra…>`,
/// SIGKILLs it at a random instant up to `kill_within` after its start, and
/// reruns it until the DLQ is empty (at most 240 s). Returns how many runs
/// were killed mid-way; asserts there was at least one.
pub async fn redrive_killed_at_random(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
    extra: &[&str],
    kill_within: std::time::Duration,
) -> u32 {
    use std::time::Duration;
    let mut kills = 0;
    let started = std::time::Instant::now();
    while dlq_total(sqs, dlq_url).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "redrive did not converge"
        );
        let mut child = std::process::Command::new(idemq_bin())
            .args(["dlq", "redrive", "--dlq-url", dlq_url, "--hold-secs", "2"])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let span = kill_within.as_millis().max(1) as u64;
        let after = Duration::from_millis(50 + rand::random::<u64>() % span);
        tokio::time::sleep(after).await;
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        child.wait().unwrap();
        // What a killed run held comes back after its 2 s hold.
        tokio::time::sleep(Duration::from_millis(2100)).await;
    }
    assert!(kills >= 1, "the redrive was never killed mid-way");
    kills
}
