//! A PostgreSQL consumer end to end on the local stack: `idemq init --store
//! postgres` makes the queues and the schema, the local worker runs jobs
//! through the real batch (duplicates, a poison job), and `idemq dlq
//! --store postgres` shows the dead letter with the failure record the
//! batch wrote to PostgreSQL.

use std::time::Duration;

use idemq::Host;
use idemq::config::BatchConfig;
use idemq::job::JobIdResolver;
use idemq::store::postgres::{Effect, Postgres, PostgresConfig, Sql};
use idemq::{Handler, JobError, JobMeta};

use crate::common::{sdk, unique};
use crate::subject::{Pg, Subject, TTL, postgres_url};

#[derive(serde::Deserialize)]
struct Count {
    name: String,
}

struct Counter {
    schema: String,
}

impl Handler for Counter {
    type Job = Count;
    type Effect = Effect;

    async fn handle(&self, job: Count, _meta: JobMeta) -> Result<Effect, JobError> {
        if job.name == "poison" {
            return Err(JobError::permanent("poison: no such counter"));
        }
        Ok(Effect::new().execute(
            Sql::new(format!(
                "INSERT INTO \"{}\".counters (name, n) VALUES ($1, 1) \
                 ON CONFLICT (name) DO UPDATE SET n = counters.n + 1",
                self.schema
            ))
            .bind(job.name),
        ))
    }
}

fn cli(args: &[&str], schema: &str) -> std::process::Output {
    std::process::Command::new(crate::common::idemq_bin())
        .args(args)
        .env("IDEMQ_POSTGRES_URL", postgres_url())
        .env("IDEMQ_POSTGRES_SCHEMA", schema)
        .output()
        .expect("run idemq")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_worker_and_dlq_on_postgres() {
    let t = Pg::new().await;
    let sdk = sdk().await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);

    // init on the existing schema: the queues are made, the schema is
    // verified (already at its version, so not created again).
    let queue = unique("pg-orders");
    let out = cli(
        &["init", "--store", "postgres", "--queue-name", &queue],
        t.schema(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let queue_url = report["queue_url"].as_str().unwrap().to_owned();
    let dlq_url = report["dlq_url"].as_str().unwrap().to_owned();
    assert!(
        report["table_name"].as_str().unwrap().contains(t.schema()),
        "{report}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("created schema"),
        "the schema existed"
    );

    let producer = idemq::producer::Producer::with_client(sqs.clone(), &queue_url)
        .await
        .unwrap();
    for (id, name) in [("j1", "a"), ("j1", "a"), ("j2", "b"), ("j3", "poison")] {
        producer
            .send(id, &serde_json::json!({ "name": name }))
            .await
            .unwrap();
    }

    let store = Postgres::new(
        PostgresConfig::new(postgres_url())
            .with_schema(t.schema())
            .unwrap()
            .with_marker_ttl(TTL)
            .with_pool_size(4),
    )
    .unwrap();
    let host = Host::with_store(
        Counter {
            schema: t.schema().to_owned(),
        },
        std::sync::Arc::new(store),
        sqs.clone(),
        JobIdResolver::new(),
        BatchConfig::default().with_concurrency(4),
    );
    let mut args = idemq::worker::WorkerArgs::new(queue_url.clone());
    args.exit_when_idle = Some(3);
    let totals = tokio::time::timeout(
        Duration::from_secs(120),
        idemq::worker::serve_until(&host, &args, std::future::pending()),
    )
    .await
    .expect("the worker goes idle")
    .expect("worker");
    assert_eq!(t.counter("a").await, 1, "j1 twice, applied once");
    assert_eq!(t.counter("b").await, 1);
    assert_eq!(t.counter("poison").await, 0);
    assert!(totals.duplicate >= 1, "{totals:?}");

    let out = cli(
        &[
            "dlq",
            "list",
            "--store",
            "postgres",
            "--json",
            "--dlq-url",
            &dlq_url,
        ],
        t.schema(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows[0].to_string();
    assert!(row.contains("j3"), "{row}");
    assert!(
        row.contains("poison: no such counter"),
        "the failure record from PostgreSQL: {row}"
    );
}

/// The test kit runs a PostgreSQL handler through the real batch service:
/// SQS in memory, the store on the stack's server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_kit_runs_a_postgres_handler() {
    use crate::common::event::sqs_event;
    use idemq::testing::{KitConfig, TestKit};

    let t = Pg::new().await;
    let store = t.store().clone();
    let kit = TestKit::with_store(
        Counter {
            schema: t.schema().to_owned(),
        },
        std::sync::Arc::new(store),
        KitConfig::new("unused"),
    );
    let event = sqs_event(
        "kit-orders",
        &[
            ("m1", r#"{"name":"a"}"#, Some("k1"), 1),
            ("m2", r#"{"name":"a"}"#, Some("k1"), 1),
            ("m3", r#"{"name":"poison"}"#, Some("k2"), 1),
        ],
    );
    let run = kit.run_json(&event).await.unwrap();
    assert!(run.failed_ids().is_empty(), "{run:?}");
    assert_eq!(run.dead_letters.len(), 1, "the poison job is dead-lettered");
    assert_eq!(
        t.counter("a").await,
        1,
        "k1 twice in one batch, applied once"
    );
    let record = t
        .records()
        .read_failure(&["kit-orders".to_owned()], Some("k2"), "m3")
        .await
        .unwrap()
        .expect("the failure record is in PostgreSQL");
    assert!(record.failure.error.contains("poison"), "{record:?}");
    // Delivered again: a duplicate, nothing applied.
    let again = kit
        .run_json(&sqs_event(
            "kit-orders",
            &[("m4", r#"{"name":"a"}"#, Some("k1"), 1)],
        ))
        .await
        .unwrap();
    assert!(again.failed_ids().is_empty());
    assert_eq!(t.counter("a").await, 1);
}
