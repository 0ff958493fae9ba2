//! Parents redelivered after their children's markers expired: parent jobs
//! with a follow-up child (src/followup/), their markers fused (a
//! transaction with the counter, or the counter's own `PutItem`) or
//! separate, and children (`<k>/child`) with separate markers; markers live 3 days
//! (source and DLQ retention 1 day each, so the TTL check holds with the
//! 1-day replay window) and DynamoDB's TTL deletes them up to 48 h late.
//!
//! A producer re-sends every parent, same job id and payload:
//! - after 1 day, within the follow-up horizon (TTL less the replay
//!   window): the duplicate re-sends the child, whose marker still exists;
//! - a fused parent after 6.5 to 7 days, when its children's markers are
//!   gone but its own (the user's item) is not: a duplicate that must not
//!   re-send the child;
//! - a separate parent after 4 days and 3 hours, while its marker has
//!   expired but TTL has not deleted it yet (DynamoDB still reads it and
//!   `attribute_not_exists` still fails), some of its children's already
//!   deleted: again a duplicate that must not re-send. (Once TTL deletes
//!   it the parent is a new job, outside what a marker promises: the
//!   producer skips that re-send.)
//!
//! Under lost and throttled requests and killed and crashed invocations,
//! no child may be applied twice, every parent is applied once, and every
//! child is applied (none is lost by a re-send not made).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_dynamodb::types::AttributeValue;
use futures_util::future::join_all;
use idemq::batch::Processor;
use idemq::config::BatchConfig;
use idemq::config::TableLayout;
use idemq::followup::FollowUp;
use idemq::job::JobIdResolver;
use idemq::queue::QueueInfo;
use idemq::store::dynamodb::{Committer, Effect};
use idemq::store::dynamodb::{Key, Write};
use idemq::{JobMeta, handler_fn};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::World;
use super::check::{Event, job_of};
use super::faults::{Faults, Rates};
use super::lambda::{self, Mapping};
use super::net::{self, Net};
use super::sqs::{self, Queue};

const QUEUE: &str = "fu-jobs";
const DLQ: &str = "fu-jobs-dlq";
const TABLE: &str = "fu";
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
/// The consumer's marker TTL: source retention + DLQ retention + the
/// replay window, the least the TTL check accepts.
pub const MARKER_TTL: Duration = Duration::from_secs(3 * 24 * 3600);
/// The parents' shapes, by job index.
const SHAPES: [&str; 3] = ["fused_tx", "fused_single", "separate"];

/// What one run did, and what the checker found.
#[derive(Debug)]
pub struct FollowUpsOutcome {
    pub seed: u64,
    pub parents: usize,
    /// Parents re-sent after their children's markers may have expired
    /// (the late re-sends).
    pub late_resends: usize,
    /// Late re-sends of separate parents made after their child's marker
    /// was deleted (their own still there).
    pub child_marker_gone: usize,
    /// Children sent again within the horizon (a re-send from a marker).
    pub resent_within: usize,
    /// Children sent from the first late re-send on (none may be).
    pub sent_late: usize,
    pub violations: Vec<String>,
}

/// Runs `seed` with `parents` parents.
pub fn run(seed: u64, parents: usize) -> FollowUpsOutcome {
    super::run_paused(simulate(seed, parents))
}

/// One message onto `QUEUE`, as a producer sends it (with `idemq-job-id`).
fn enqueue(world: &Mutex<World>, k: &str, body: &str) {
    let mut w = world.lock().expect("world");
    let w = &mut *w;
    let attributes = BTreeMap::from([(
        idemq::job::JOB_ID_ATTRIBUTE.to_owned(),
        json!({"DataType": "String", "StringValue": k}),
    )]);
    let (id, _) = w.sqs.enqueue_in_group(
        QUEUE,
        body.to_owned(),
        attributes,
        idemq::testing::clock::now(),
        Duration::ZERO,
        None,
    );
    w.history.push(Event::Sent {
        queue: QUEUE.into(),
        message_id: id,
        body: body.to_owned(),
    });
    w.changed.notify_waiters();
}

/// Parent `k`'s child. (The model's TTL lag is a hash of the marker's
/// key: with this suffix, children's markers are deleted from 12 to 39
/// hours after they expire, a separate parent's 29 hours after.)
fn child_of(k: &str) -> String {
    format!("{k}/child")
}

fn counter(k: &str) -> Write {
    Write::update(
        TABLE,
        Key::string("pk", format!("count#{k}")),
        "ADD #n :one",
    )
    .name("#n", "n")
    .value(":one", AttributeValue::N("1".into()))
}

/// A parent's effect in its shape, with its child `<k>c`; a child's, its
/// counter.
fn effect(job: &Value, meta: &JobMeta) -> Effect {
    let k = job["k"].as_str().unwrap_or_default();
    let shape = job["shape"].as_str().unwrap_or_default();
    if job["kind"] == "child" {
        return Effect::new().with(counter(k));
    }
    let child = child_of(k);
    let body = json!({"k": child, "kind": "child", "parent": k}).to_string();
    let next = FollowUp::raw(&meta.queue_url, &child, body);
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let effect = match shape {
        "fused_tx" => Effect::new().with(counter(k)).marked_by(Write::put(
            TABLE,
            Key::string("pk", format!("entry#{k}")),
            [("k".to_owned(), s(k))].into(),
        )),
        "fused_single" => Effect::new().marked_by(Write::put(
            TABLE,
            Key::string("pk", format!("count#{k}")),
            [("n".to_owned(), AttributeValue::N("1".into()))].into(),
        )),
        _ => Effect::new().with(counter(k)),
    };
    effect.then_send(next)
}

async fn simulate(seed: u64, parents: usize) -> FollowUpsOutcome {
    idemq::testing::clock::simulate(UNIX_EPOCH + Duration::from_secs(1_800_000_000), seed);
    fastrand::seed(seed);
    let mut rng = StdRng::seed_from_u64(seed ^ 0xf011);
    // The network's and the hosts' faults (crashes between a commit and
    // its follow-up's send among them); the handler itself never fails, so
    // every job must end applied.
    let mut rates = Rates::draw(&mut rng);
    rates.transient = 0.0;
    rates.panic = 0.0;
    rates.hang = 0.0;
    let world = Arc::new(Mutex::new(World::new(Faults::new(seed, rates), false)));
    {
        let mut w = world.lock().expect("world");
        let mut source = Queue::new(QUEUE, Duration::from_secs(30), DAY);
        source.redrive = Some((DLQ.into(), 50));
        w.sqs.add(source);
        w.sqs.add(Queue::new(DLQ, Duration::from_secs(30), DAY));
        w.ddb.add_table(TABLE, "pk", Some("expires_at"));
        w.ddb.seed = seed;
        w.faults.enabled = true;
    }
    let net = Net {
        world: Arc::clone(&world),
    };
    let (sqs_client, ddb) = net::clients(&net, seed);
    let layout = TableLayout::new(TABLE);
    let info = QueueInfo::discover(&sqs_client, &sqs::url(QUEUE))
        .await
        .expect("queue");
    let processor = Processor::new(
        handler_fn(|job: Value, meta: JobMeta| async move { Ok(effect(&job, &meta)) }),
        std::sync::Arc::new(idemq::store::dynamodb::DynamoDb::new(
            Committer::new(ddb.clone(), layout.clone(), MARKER_TTL),
            idemq::store::dynamodb::FailureTable::new(ddb.clone(), layout.clone(), MARKER_TTL),
        )),
        sqs_client.clone(),
        JobIdResolver::new(),
        BatchConfig::default(),
    );

    // The producer's schedule: (when, parent index, late re-send?).
    let mut sends: Vec<(Duration, usize, bool)> = Vec::new();
    for i in 0..parents {
        let first = Duration::from_secs(rng.random_range(0..3600));
        sends.push((first, i, false));
        sends.push((
            DAY + Duration::from_secs(rng.random_range(0..7200)),
            i,
            false,
        ));
        let late = if SHAPES[i % SHAPES.len()] == "separate" {
            3 * DAY + 27 * HOUR + first
        } else {
            6 * DAY + 12 * HOUR + Duration::from_secs(rng.random_range(0..12 * 3600))
        };
        sends.push((late, i, true));
    }
    sends.sort();
    let start = Instant::now();
    let end = start + 8 * DAY;
    let late_from: Mutex<Option<usize>> = Mutex::new(None);
    let late_resends = Mutex::new(0usize);
    let child_marker_gone = Mutex::new(0usize);
    let produce = async {
        for (at, i, late) in sends {
            tokio::time::sleep_until(start + at).await;
            let k = format!("p{i:03}");
            let shape = SHAPES[i % SHAPES.len()];
            let body = json!({"k": k, "kind": "parent", "shape": shape}).to_string();
            if late {
                let mut w = world.lock().expect("world");
                late_from
                    .lock()
                    .expect("late")
                    .get_or_insert(w.history.events.len());
                // A separate marker once TTL has deleted it marks nothing:
                // the re-send would be a new job. Re-send only while it is
                // there for at least another hour.
                if shape == "separate" {
                    let marker = layout.marker_key(QUEUE, &k);
                    let kept = w
                        .ddb
                        .ttl_deletes_at(TABLE, &marker)
                        .is_some_and(|at| at > idemq::testing::clock::now() + HOUR);
                    let child = layout.marker_key(QUEUE, &child_of(&k));
                    if kept && w.ddb.ttl_deletes_at(TABLE, &child).is_none() {
                        *child_marker_gone.lock().expect("late") += 1;
                    }
                    if !kept {
                        w.trace(format!("producer: {k}'s marker is gone: not re-sent"));
                        continue;
                    }
                }
                *late_resends.lock().expect("late") += 1;
                drop(w);
            }
            enqueue(&world, &k, &body);
        }
    };
    let mapping = Mapping {
        batch_size: 10,
        function_timeout: Duration::from_secs(30),
        concurrency: 2,
    };
    let invocations = Mutex::new(0u64);
    let envs = (0..mapping.concurrency).map(|_| {
        lambda::environment(
            &world,
            &processor,
            &info,
            mapping,
            (end, end + 2 * DAY),
            &invocations,
        )
    });
    let (_, _) = tokio::join!(produce, join_all(envs));

    let w = world.lock().expect("world");
    let late_from = late_from.lock().expect("late").unwrap_or(usize::MAX);
    let mut outcome = check(
        &w,
        seed,
        parents,
        late_from,
        *late_resends.lock().expect("late"),
    );
    outcome.child_marker_gone = *child_marker_gone.lock().expect("late");
    outcome
}

/// The rules over the run's history and final table (see the module doc).
fn check(
    w: &World,
    seed: u64,
    parents: usize,
    late_from: usize,
    late_resends: usize,
) -> FollowUpsOutcome {
    let items = &w.ddb.tables[TABLE].items;
    let applied = |k: &str| -> u64 {
        items
            .get(&format!("count#{k}"))
            .and_then(|item| item["n"]["N"].as_str())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut violations: Vec<String> = w
        .history
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Violation(what) => Some(what.clone()),
            _ => None,
        })
        .collect();
    // Children sent: how often, and from the first late re-send on.
    let mut child_sends: BTreeMap<String, usize> = BTreeMap::new();
    let mut sent_late = 0;
    for (at, e) in w.history.events.iter().enumerate() {
        if let Event::Sent { body, .. } = e
            && super::check::kind_of(body) == "child"
            && let Some(k) = job_of(body)
        {
            *child_sends.entry(k).or_default() += 1;
            sent_late += usize::from(at >= late_from);
        }
    }
    // Applications: a counter written from n to n + 1 is one.
    let mut child_applied_twice = std::collections::BTreeSet::new();
    for e in &w.history.events {
        if let Event::Written { key, item } = e
            && let Some(k) = key.strip_prefix("count#")
            && k.ends_with("/child")
            && item["n"]["N"].as_str().and_then(|n| n.parse::<u64>().ok()) >= Some(2)
            && child_applied_twice.insert(k.to_owned())
        {
            violations.push(format!("{k}: a child applied twice"));
        }
    }
    let dead: std::collections::BTreeSet<String> = w.sqs.queues[DLQ]
        .messages
        .values()
        .filter_map(|m| job_of(&m.body))
        .collect();
    for i in 0..parents {
        let k = format!("p{i:03}");
        let child = child_of(&k);
        match applied(&k) {
            1 => {}
            0 if dead.contains(&k) => {}
            n => violations.push(format!("{k}: parent applied {n} times")),
        }
        if applied(&k) >= 1 && applied(&child) == 0 && !dead.contains(&child) {
            violations.push(format!(
                "{child}: its parent {k} is applied, the child is not"
            ));
        }
    }
    FollowUpsOutcome {
        seed,
        parents,
        late_resends,
        child_marker_gone: 0,
        resent_within: child_sends.values().map(|n| n.saturating_sub(1)).sum(),
        sent_late,
        violations,
    }
}
