//! Two consumers on one table, fed by a fan-out: an SNS topic (or an
//! EventBridge rule with two targets) delivers every job, same id and same
//! payload, to two queues, and each queue's consumer commits into the same
//! idemq table. Each consumer must apply each job exactly once, through
//! lost and throttled requests, killed and crashed invocations, and the
//! producer's own duplicate sends.

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::MessageAttributeValue;
use futures_util::future::join_all;
use idemq::batch::Processor;
use idemq::config::TableLayout;
use idemq::config::{BatchConfig, LegacyMarkers};
use idemq::job::JobIdResolver;
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect};
use idemq::store::dynamodb::{Key, Write};
use idemq::{JobMeta, handler_fn};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::time::Instant;

use super::World;
use super::faults::{Faults, Rates};
use super::lambda::{self, Mapping};
use super::net::{self, Net};
use super::sqs::{self, Queue};

/// The two queues the topic feeds, one consumer each.
pub const QUEUES: [&str; 2] = ["fan-billing", "fan-emails"];
const TABLE: &str = "fan";
const HOUR: Duration = Duration::from_secs(3600);

/// What one fan-out run did, and what the checker found.
#[derive(Debug)]
pub struct FanOutcome {
    pub seed: u64,
    pub jobs: usize,
    /// (consumer, job) pairs applied at least once.
    pub applied: usize,
    pub invocations: u64,
    pub violations: Vec<String>,
}

/// Runs `seed` with `jobs` jobs fanned out to both queues.
pub fn run(seed: u64, jobs: usize) -> FanOutcome {
    super::run_paused(simulate(seed, jobs))
}

async fn simulate(seed: u64, jobs: usize) -> FanOutcome {
    idemq::testing::clock::simulate(UNIX_EPOCH + Duration::from_secs(1_800_000_000), seed);
    fastrand::seed(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0xfa40);
    // Faults of the network and the hosts; the handler itself never fails
    // here, so every job must end applied by both consumers.
    let mut rates = Rates::draw(&mut rng);
    rates.transient = 0.0;
    rates.panic = 0.0;
    rates.hang = 0.0;
    let world = Arc::new(Mutex::new(World::new(Faults::new(seed, rates), false)));
    {
        let mut w = world.lock().expect("world");
        for q in QUEUES {
            let dlq = format!("{q}-dlq");
            let mut source = Queue::new(q, Duration::from_secs(30), 4 * 24 * HOUR);
            source.redrive = Some((dlq.clone(), 50));
            w.sqs.add(source);
            w.sqs
                .add(Queue::new(&dlq, Duration::from_secs(30), 14 * 24 * HOUR));
        }
        w.ddb.add_table(TABLE, "pk", Some("expires_at"));
        w.ddb.seed = seed;
    }
    let net = Net {
        world: Arc::clone(&world),
    };
    let (sqs_client, ddb) = net::clients(&net, seed);

    // The fan-out: every job to both queues (SNS delivers before the
    // faults start), and a third of them once more to one queue, as a
    // producer's retried publish does.
    let send = |q: &str, k: String| {
        sqs_client
            .send_message()
            .queue_url(sqs::url(q))
            .message_body(serde_json::json!({ "k": k }).to_string())
            .message_attributes(
                idemq::job::JOB_ID_ATTRIBUTE,
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(k)
                    .build()
                    .expect("attribute"),
            )
            .send()
    };
    for i in 0..jobs {
        let k = format!("f{i}");
        for q in QUEUES {
            send(q, k.clone()).await.expect("fan-out");
        }
        if rng.random_bool(0.33) {
            let q = QUEUES[rng.random_range(0..QUEUES.len())];
            send(q, k).await.expect("duplicate");
        }
    }
    world.lock().expect("world").faults.enabled = true;

    let layout = TableLayout::new(TABLE);
    let ttl = idemq::config::DEFAULT_MARKER_TTL;
    let handler = || {
        handler_fn(|job: serde_json::Value, meta: JobMeta| async move {
            let k = job["k"].as_str().unwrap_or_default().to_owned();
            Ok(Effect::new().with(
                Write::update(
                    TABLE,
                    Key::string("pk", format!("applied#{}#{k}", meta.queue)),
                    "ADD #n :one",
                )
                .name("#n", "n")
                .value(":one", AttributeValue::N("1".into())),
            ))
        })
    };
    let mut consumers = Vec::new();
    for q in QUEUES {
        let info = QueueInfo::discover(&sqs_client, &sqs::url(q))
            .await
            .expect("queue");
        let processor = Processor::new(
            handler(),
            std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
                Committer::new(ddb.clone(), layout.clone(), ttl)
                    .with_legacy_markers(LegacyMarkers::Read),
                idemq::store::dynamodb::FailureTable::new(ddb.clone(), layout.clone(), ttl),
            )),
            sqs_client.clone(),
            JobIdResolver::new(),
            BatchConfig::default(),
        );
        consumers.push((info, processor));
    }
    let mapping = Mapping {
        batch_size: 10,
        function_timeout: Duration::from_secs(30),
        concurrency: 2,
    };
    let end = Instant::now() + HOUR;
    let drain_until = end + 2 * 24 * HOUR;
    let invocations = Mutex::new(0u64);
    let envs = consumers.iter().flat_map(|(info, processor)| {
        (0..mapping.concurrency).map(|_| {
            lambda::environment(
                &world,
                processor,
                info,
                mapping,
                (end, drain_until),
                &invocations,
            )
        })
    });
    join_all(envs).await;

    let w = world.lock().expect("world");
    let items = &w.ddb.tables[TABLE].items;
    let mut violations = Vec::new();
    let mut applied = 0;
    for q in QUEUES {
        let dead: std::collections::BTreeSet<String> = w.sqs.queues[&format!("{q}-dlq")]
            .messages
            .values()
            .filter_map(|m| super::check::job_of(&m.body))
            .collect();
        for i in 0..jobs {
            let k = format!("f{i}");
            let n: u64 = items
                .get(&format!("applied#{q}#{k}"))
                .and_then(|item| item["n"]["N"].as_str())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            applied += usize::from(n > 0);
            if n > 1 {
                violations.push(format!("{k}: applied {n} times by {q}"));
            } else if n == 0 && !dead.contains(&k) {
                violations.push(format!(
                    "{k}: never applied by {q}, and not in its DLQ (taken for another consumer's duplicate?)"
                ));
            }
        }
    }
    FanOutcome {
        seed,
        jobs,
        applied,
        invocations: *invocations.lock().expect("invocations"),
        violations,
    }
}
