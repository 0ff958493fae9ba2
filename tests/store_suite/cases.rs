//! The cases, written once for any [`Subject`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idemq::failure::{Failure, FailureKind, FailureRecord};
use idemq::followup::FollowUp;
use idemq::store::{LookedUp, Settled, Store};
use idemq::{CommitOutcome, JobId, JobRef, PayloadHash};

use crate::subject::{Eff, Subject, TTL};

/// Commits `effect` for job `id` with payload `body` from `queue`.
pub async fn commit<T: Subject>(
    t: &T,
    queue: &str,
    id: &str,
    body: &str,
    effect: &Eff<T>,
) -> Settled {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue,
    };
    t.store().commit(job, effect).await.expect("commit")
}

async fn look_up<T: Subject>(t: &T, id: &str, body: &str) -> LookedUp {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue: "orders",
    };
    t.store().look_up(job).await.expect("look up")
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
    assert!(lives.abs_diff(TTL) < Duration::from_secs(2), "{lives:?}");

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
    assert_eq!(T::S::follow_ups(&effect), std::slice::from_ref(&child));
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
        },
        failed_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_385_600_123),
        source_queue: queue.to_owned(),
        payload_hash: PayloadHash::of(b"{}").as_str().to_owned(),
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
    let anonymous = record("orders", None, "m2", 1);
    records.record_failure(&anonymous).await.unwrap();

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
