//! The store conformance suite: what every [`Store`] promises, checked
//! against a live instance of it (feature `testing`).
//!
//! A store's tests implement [`Subject`] (a fresh store, and three effects
//! in that store's terms) and call [`exercise`], which runs every case, or
//! one case each from tests of their own. The built-in stores run it on
//! the local stack (DynamoDB on moto, PostgreSQL on a real server), and a
//! store of another system that passes it keeps the promises the batch
//! relies on (docs/stores.md):
//!
//! - [`every_outcome`]: committed, duplicate, conflict, rejected,
//!   contended; the look-up before the handler; the marker read back;
//! - [`batches`]: a batch's look-up answers each job in order, and a
//!   batch's commits are each their own transaction, the same job twice in
//!   one batch applying once;
//! - [`races`]: 8 tasks commit the same 200 jobs at once, each applied
//!   once;
//! - [`follow_ups`]: follow-ups stored with the marker and returned with a
//!   duplicate;
//! - [`failure_records`]: written through the store, read back through
//!   [`FailureRecords`], one per job, under the consumer's namespace;
//! - [`namespaces`]: one consumer per queue, or one namespace over many.
//!
//! The cases panic (they are assertions) and need a Tokio runtime with
//! timers, as `#[tokio::test(flavor = "multi_thread")]` gives.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::commit::{CommitOutcome, JobRef};
use crate::failure::{Failure, FailureKind, FailureRecord};
use crate::followup::FollowUp;
use crate::job::{JobId, PayloadHash};
use crate::store::{FailureRecords, LookedUp, Settled, Store};

/// The effect type of a subject's store.
pub type SubjectEffect<T> = <<T as Subject>::Store as Store>::Effect;

/// A store under test, fresh for one case (its own table, schema or
/// prefix, so that cases can run side by side), and the effects the cases
/// commit, built in that store's terms.
pub trait Subject: Send + Sync + Sized + 'static {
    /// The store.
    type Store: Store;

    /// A second consumer over the same tables, whose layout names
    /// `namespace` (so that markers are keyed by it, not by the queue).
    fn with_namespace(&self, namespace: &str) -> impl Future<Output = Self> + Send;
    /// The store under test.
    fn store(&self) -> &Self::Store;
    /// The same store's failure records, as the operator tools read them.
    fn records(&self) -> Arc<dyn FailureRecords>;
    /// Adds 1 to counter `name`. Not idempotent: only the marker keeps a
    /// second delivery from adding again.
    fn add_one(&self, name: &str) -> SubjectEffect<Self>;
    /// Adds 1 to counter `name` only if it is at 1000 or more: refused by
    /// the effect's own condition (a handler's business outcome,
    /// [`CommitOutcome::Rejected`]).
    fn refused(&self, name: &str) -> SubjectEffect<Self>;
    /// Sets counter `name` only if it is still at version 999, with that
    /// write marked optimistic: a lost race ([`CommitOutcome::Contended`]).
    fn stale(&self, name: &str) -> SubjectEffect<Self>;
    /// `effect`, also sending `job` once it commits.
    fn then_send(&self, effect: SubjectEffect<Self>, job: FollowUp) -> SubjectEffect<Self>;
    /// Counter `name`'s value (0 when absent).
    fn counter(&self, name: &str) -> impl Future<Output = i64> + Send;
}

/// Runs every case, each on a fresh subject from `new`, side by side, and
/// panics naming each case that failed. A store's test calls it from a
/// multi-threaded Tokio test:
/// `#[tokio::test(flavor = "multi_thread")] async fn contract() {
/// store_suite::exercise(MySubject::new).await }`.
pub async fn exercise<T, F, Fut>(new: F)
where
    T: Subject,
    F: Fn() -> Fut,
    Fut: Future<Output = T>,
{
    let mut cases = Vec::new();
    macro_rules! spawn {
        ($($case:ident),*) => {$(
            let subject = new().await;
            cases.push((stringify!($case), tokio::spawn($case(subject))));
        )*};
    }
    spawn!(
        every_outcome,
        batches,
        races,
        follow_ups,
        failure_records,
        namespaces
    );
    let mut failed = Vec::new();
    for (name, case) in cases {
        if let Err(e) = case.await {
            failed.push(format!("{name}: {}", panic_message(e)));
        }
    }
    assert!(
        failed.is_empty(),
        "the store fails {} of the suite's cases:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panicked".to_owned()),
        Err(e) => e.to_string(),
    }
}

fn job_ref<'a>(id: &'a JobId, hash: &'a PayloadHash, queue: &'a str) -> JobRef<'a> {
    JobRef {
        id,
        payload_hash: hash,
        queue,
    }
}

/// Commits `effect` for job `id` with payload `body` from `queue`.
async fn commit<T: Subject>(
    t: &T,
    queue: &str,
    id: &str,
    body: &str,
    effect: &SubjectEffect<T>,
) -> Settled {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    t.store()
        .commit(job_ref(&job, &hash, queue), effect)
        .await
        .expect("commit")
}

async fn look_up<T: Subject>(t: &T, id: &str, body: &str) -> LookedUp {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    t.store()
        .look_up(&[job_ref(&job, &hash, "orders")])
        .await
        .remove(0)
        .expect("look up")
}

/// Committed, duplicate, conflict, rejected and contended; the look-up
/// before the handler and the marker as read back.
pub async fn every_outcome<T: Subject>(t: T) {
    assert!(t.store().looks_up());
    assert_eq!(look_up(&t, "a", "{}").await, LookedUp::Absent);

    let first = commit(&t, "orders", "a", "{}", &t.add_one("a")).await;
    assert_eq!(first.outcome, CommitOutcome::Committed);
    assert_eq!(t.counter("a").await, 1);

    let again = commit(&t, "orders", "a", "{}", &t.add_one("a")).await;
    assert_eq!(again.outcome, CommitOutcome::Duplicate);
    assert!(
        again.stored.is_some(),
        "a duplicate carries the stored marker"
    );
    assert_eq!(t.counter("a").await, 1, "a duplicate applies nothing");

    let other = commit(&t, "orders", "a", "{\"other\":1}", &t.add_one("a")).await;
    assert_eq!(
        other.outcome,
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"{}")
        }
    );
    assert_eq!(t.counter("a").await, 1, "a conflict applies nothing");

    match look_up(&t, "a", "{}").await {
        LookedUp::Settled(s) => assert_eq!(s.outcome, CommitOutcome::Duplicate),
        other => panic!("a committed job is settled before its handler: {other:?}"),
    }
    match look_up(&t, "a", "{\"other\":1}").await {
        LookedUp::Settled(s) => assert!(matches!(s.outcome, CommitOutcome::Conflict { .. })),
        other => panic!("another payload is a conflict before its handler: {other:?}"),
    }

    let marker = t
        .store()
        .read_marker("orders", &JobId::new("a").unwrap())
        .await
        .unwrap()
        .expect("the marker is there");
    assert_eq!(marker.payload_hash, PayloadHash::of(b"{}"));
    assert_eq!(marker.job_id, "a");
    let committed_at = marker.committed_at.expect("the commit time is stored");
    let age = SystemTime::now()
        .duration_since(committed_at)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(120), "committed {age:?} ago");
    let lives = marker.expires_at.duration_since(committed_at).unwrap();
    let ttl = t.store().marker_ttl();
    assert!(
        lives.abs_diff(ttl) < Duration::from_secs(2),
        "{lives:?} against {ttl:?}"
    );

    let refused = commit(&t, "orders", "b", "{}", &t.refused("b")).await;
    assert!(
        matches!(refused.outcome, CommitOutcome::Rejected { index: 0, .. }),
        "{refused:?}"
    );
    let stale = commit(&t, "orders", "c", "{}", &t.stale("c")).await;
    assert!(
        matches!(stale.outcome, CommitOutcome::Contended { index: 0, .. }),
        "{stale:?}"
    );
    for id in ["b", "c"] {
        let marker = t
            .store()
            .read_marker("orders", &JobId::new(id).unwrap())
            .await
            .unwrap();
        assert_eq!(marker, None, "job {id}: a refused commit leaves no marker");
        assert_eq!(t.counter(id).await, 0);
    }
    // Refused once, the job may commit later (the marker was not taken).
    let later = commit(&t, "orders", "b", "{}", &t.add_one("b")).await;
    assert_eq!(later.outcome, CommitOutcome::Committed);
    assert_eq!(t.counter("b").await, 1);
}

/// A batch's look-up answers each job, in order; a batch's commits are
/// each their own transaction, and the same job twice in one batch (SQS
/// may deliver a message twice in one batch) applies once.
pub async fn batches<T: Subject>(t: T) {
    let first = commit(&t, "orders", "k1", "{}", &t.add_one("k1")).await;
    assert_eq!(first.outcome, CommitOutcome::Committed);

    let ids: Vec<JobId> = ["k1", "k1", "k2", "k3"]
        .into_iter()
        .map(|id| JobId::new(id).unwrap())
        .collect();
    let hashes = [
        PayloadHash::of(b"{}"),
        PayloadHash::of(b"{\"other\":1}"),
        PayloadHash::of(b"{}"),
        PayloadHash::of(b"{}"),
    ];
    let jobs: Vec<JobRef<'_>> = ids
        .iter()
        .zip(&hashes)
        .map(|(id, hash)| job_ref(id, hash, "orders"))
        .collect();
    let found = t.store().look_up(&jobs).await;
    assert_eq!(found.len(), jobs.len(), "one answer per job: {found:?}");
    let found: Vec<LookedUp> = found.into_iter().map(|r| r.expect("look up")).collect();
    assert!(
        matches!(&found[0], LookedUp::Settled(s) if s.outcome == CommitOutcome::Duplicate),
        "{:?}",
        found[0]
    );
    assert!(
        matches!(&found[1], LookedUp::Settled(s) if matches!(s.outcome, CommitOutcome::Conflict { .. })),
        "{:?}",
        found[1]
    );
    assert_eq!(found[2..], [LookedUp::Absent, LookedUp::Absent]);
    assert!(t.store().look_up(&[]).await.is_empty());

    // k2 and k3 new, k1 a duplicate, k4 twice and k5 refused: each job
    // settles on its own, in order.
    let ids: Vec<JobId> = ["k2", "k1", "k3", "k4", "k4", "k5"]
        .into_iter()
        .map(|id| JobId::new(id).unwrap())
        .collect();
    let hash = PayloadHash::of(b"{}");
    let effects: Vec<SubjectEffect<T>> = ids
        .iter()
        .map(|id| {
            if id.as_str() == "k5" {
                t.refused("k5")
            } else {
                t.add_one(id.as_str())
            }
        })
        .collect();
    let jobs: Vec<(JobRef<'_>, &SubjectEffect<T>)> = ids
        .iter()
        .zip(&effects)
        .map(|(id, effect)| (job_ref(id, &hash, "orders"), effect))
        .collect();
    let settled: Vec<Settled> = t
        .store()
        .commit_batch(&jobs)
        .await
        .into_iter()
        .map(|r| r.expect("commit"))
        .collect();
    assert_eq!(settled.len(), jobs.len(), "one result per job: {settled:?}");
    assert_eq!(settled[0].outcome, CommitOutcome::Committed);
    assert_eq!(settled[1].outcome, CommitOutcome::Duplicate);
    assert_eq!(settled[2].outcome, CommitOutcome::Committed);
    let twice = [&settled[3].outcome, &settled[4].outcome];
    let committed = twice
        .iter()
        .filter(|o| ***o == CommitOutcome::Committed)
        .count();
    assert!(committed <= 1, "one job committed twice: {twice:?}");
    assert!(
        twice.iter().all(|o| matches!(
            o,
            CommitOutcome::Committed
                | CommitOutcome::Duplicate
                | CommitOutcome::Collided { .. }
                | CommitOutcome::Contended { .. }
                | CommitOutcome::Transient { .. }
        )),
        "the same job twice in a batch: {twice:?}"
    );
    assert!(
        matches!(settled[5].outcome, CommitOutcome::Rejected { index: 0, .. }),
        "{:?}",
        settled[5]
    );
    for (id, n) in [
        ("k1", 1),
        ("k2", 1),
        ("k3", 1),
        ("k4", committed as i64),
        ("k5", 0),
    ] {
        assert_eq!(t.counter(id).await, n, "job {id}");
    }
    // A lost race of k4 is run again, as the batch does, and applies once.
    if committed == 0 {
        let again = commit(&t, "orders", "k4", "{}", &t.add_one("k4")).await;
        assert_eq!(again.outcome, CommitOutcome::Committed);
    }
    assert_eq!(t.counter("k4").await, 1);
    assert!(t.store().commit_batch(&[]).await.is_empty());
}

/// 8 tasks commit the same 200 jobs at once, each adding 1 to the job's
/// own counter and to a shared one: every job applies once, whatever the
/// interleaving (lost races are run again, as the batch does).
pub async fn races<T: Subject>(t: T) {
    const JOBS: usize = 200;
    const TASKS: usize = 8;
    let t = Arc::new(t);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let t = Arc::clone(&t);
        tasks.push(tokio::spawn(async move {
            let mut committed = 0;
            for i in 0..JOBS {
                // Each task walks the ids from a different start.
                let id = format!("r{}", (i + task * JOBS / TASKS) % JOBS);
                loop {
                    let settled = commit(&*t, "orders", &id, "{}", &t.add_one(&id)).await;
                    match settled.outcome {
                        CommitOutcome::Committed => {
                            committed += 1;
                            break;
                        }
                        CommitOutcome::Duplicate => break,
                        CommitOutcome::Collided { .. }
                        | CommitOutcome::Contended { .. }
                        | CommitOutcome::Transient { .. } => {
                            tokio::time::sleep(Duration::from_millis(5)).await
                        }
                        other => panic!("job {id}: {other:?}"),
                    }
                }
            }
            committed
        }));
    }
    let mut committed = 0;
    for task in tasks {
        committed += task.await.unwrap();
    }
    assert_eq!(committed, JOBS, "each job committed by exactly one task");
    for i in 0..JOBS {
        let id = format!("r{i}");
        assert_eq!(t.counter(&id).await, 1, "job {id} applied once");
    }
}

/// An effect's follow-ups are stored with its marker, and a duplicate
/// gets them back as stored.
pub async fn follow_ups<T: Subject>(t: T) {
    let url = "https://sqs.us-east-1.amazonaws.com/000000000000/next";
    let child = FollowUp::new(url, "child-1", &serde_json::json!({"n": 1})).unwrap();
    let effect = t.then_send(t.add_one("p"), child.clone());
    assert_eq!(t.store().follow_ups(&effect), std::slice::from_ref(&child));
    let first = commit(&t, "orders", "p", "{}", &effect).await;
    assert_eq!(first.outcome, CommitOutcome::Committed);
    let again = commit(&t, "orders", "p", "{}", &t.add_one("p")).await;
    assert_eq!(again.outcome, CommitOutcome::Duplicate);
    let stored = again.stored.expect("the stored marker");
    assert_eq!(stored.follow_ups().unwrap(), [child]);
    assert!(stored.committed_at().is_some());

    let plain = commit(&t, "orders", "q", "{}", &t.add_one("q")).await;
    assert_eq!(plain.outcome, CommitOutcome::Committed);
    let again = commit(&t, "orders", "q", "{}", &t.add_one("q")).await;
    assert_eq!(again.stored.unwrap().follow_ups().unwrap(), []);
}

fn record(queue: &str, job_id: Option<&str>, message_id: &str, attempt: u32) -> FailureRecord {
    FailureRecord {
        job_id: job_id.map(str::to_owned),
        message_id: message_id.to_owned(),
        attempt,
        failure: Failure {
            kind: FailureKind::Transient,
            error: format!("attempt {attempt} failed"),
            chain: vec!["timed out".into(), "connection reset".into()],
            backtrace: (attempt % 2 == 1).then(|| {
                format!("orders::charge\n    at ./src/main.rs:{attempt}:5\n… 31 frames folded")
            }),
        },
        failed_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_385_600_123),
        source_queue: queue.to_owned(),
        payload_hash: PayloadHash::of(b"{}").as_str().to_owned(),
        deploy: format!("deploy {attempt}"),
        idemq_version: crate::failure::IDEMQ_VERSION.to_owned(),
    }
}

/// A failure record per job (the latest attempt replaces the one before),
/// one per message without a job id, read back one by one and many at once,
/// under the source queue's namespace.
pub async fn failure_records<T: Subject>(t: T) {
    let records = t.records();
    let sources = vec!["orders".to_owned()];
    records
        .record_failure(&record("orders", Some("f1"), "m1", 1))
        .await
        .unwrap();
    let latest = record("orders", Some("f1"), "m1b", 2);
    records.record_failure(&latest).await.unwrap();
    // The batch writes records through the store, the tools read them
    // through `FailureRecords`: both are the same records.
    let anonymous = record("orders", None, "m2", 1);
    t.store().record_failure(&anonymous).await.unwrap();

    let got = records
        .read_failure(&sources, Some("f1"), "m1b")
        .await
        .unwrap();
    assert_eq!(got.as_ref(), Some(&latest), "the latest attempt's record");
    let got = records.read_failure(&sources, None, "m2").await.unwrap();
    assert_eq!(got.as_ref(), Some(&anonymous));
    let elsewhere = records
        .read_failure(&["billing".to_owned()], Some("f1"), "m1b")
        .await
        .unwrap();
    assert_eq!(
        elsewhere, None,
        "another consumer's records are not this one's"
    );

    let wanted = vec![
        (Some("f1".to_owned()), "m1b".to_owned()),
        (None, "m2".to_owned()),
        (Some("absent".to_owned()), "m3".to_owned()),
    ];
    let many = records.read_failures(&sources, &wanted).await.unwrap();
    assert_eq!(many.len(), 2, "{many:?}");
    assert_eq!(many.get(&wanted[0]), Some(&latest));
    assert_eq!(many.get(&wanted[1]), Some(&anonymous));

    // Two dead letters of one job (the producer sent it twice): each gets
    // the job's record.
    let copies = vec![
        (Some("f1".to_owned()), "m1".to_owned()),
        (Some("f1".to_owned()), "m1b".to_owned()),
    ];
    let both = records.read_failures(&sources, &copies).await.unwrap();
    assert_eq!(both.len(), 2, "each copy of the job: {both:?}");
    assert!(copies.iter().all(|c| both.get(c) == Some(&latest)));
}

/// Two consumers of one event (each its own queue, so its own namespace)
/// each apply it once; one consumer reading two queues under one
/// namespace applies it once in all.
pub async fn namespaces<T: Subject>(t: T) {
    let by_queue = [("billing", "n1"), ("shipping", "n2")];
    for (queue, counter) in by_queue {
        let first = commit(&t, queue, "evt", "{}", &t.add_one(counter)).await;
        assert_eq!(first.outcome, CommitOutcome::Committed, "{queue}");
        let again = commit(&t, queue, "evt", "{}", &t.add_one(counter)).await;
        assert_eq!(again.outcome, CommitOutcome::Duplicate, "{queue}");
        assert_eq!(t.counter(counter).await, 1, "{queue}");
    }
    assert_eq!(t.store().namespace_for("https://x/0/billing"), "billing");

    let shared = t.with_namespace("ledger").await;
    assert_eq!(shared.store().namespace_for("queue-a"), "ledger");
    let a = commit(&shared, "queue-a", "evt", "{}", &shared.add_one("n3")).await;
    assert_eq!(a.outcome, CommitOutcome::Committed);
    let b = commit(&shared, "queue-b", "evt", "{}", &shared.add_one("n3")).await;
    assert_eq!(
        b.outcome,
        CommitOutcome::Duplicate,
        "one namespace across queues"
    );
    assert_eq!(shared.counter("n3").await, 1);
}
