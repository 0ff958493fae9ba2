//! What only the PostgreSQL store has: each SQLSTATE class onto its
//! outcome, a connection cut after `COMMIT` was sent, invalid effects, the
//! schema's version.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idemq::job::{JobId, PayloadHash};
use idemq::store::postgres::{Effect, Postgres, PostgresConfig, Sql};
use idemq::store::{CommitError, CommitOutcome, JobRef};
use idemq::store::{Provision, Store};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::subject::{Pg, Subject, TTL, commit, commit_on, conninfo_via, postgres_url, upstream};

/// An effect that raises `sqlstate` from the server.
fn raising(sqlstate: &str) -> Effect {
    Effect::new().execute(Sql::new(format!(
        "DO $$ BEGIN RAISE EXCEPTION 'raised for the test' USING ERRCODE = '{sqlstate}'; END $$"
    )))
}

async fn try_commit(t: &Pg, id: &str, effect: &Effect) -> Result<CommitOutcome, CommitError> {
    commit_on(t.store(), id, effect).await
}

#[tokio::test]
async fn each_sqlstate_class_is_its_outcome() {
    let t = Pg::new().await;
    let collided =
        |o: &Result<CommitOutcome, CommitError>| matches!(o, Ok(CommitOutcome::Collided { .. }));
    // Serialization failure (Aurora DSQL's optimistic-concurrency error
    // is this code too), deadlock, lock not available: lost races.
    for code in ["40001", "40P01", "55P03"] {
        let got = try_commit(&t, &format!("race-{code}"), &raising(code)).await;
        assert!(collided(&got), "{code}: {got:?}");
    }
    // The user's SQL breaks a constraint: the handler's business outcome,
    // at the statement's index.
    let not_null = Effect::new()
        .execute(Sql::new(format!(
            "INSERT INTO \"{}\".counters (name, n) VALUES ('x', 1)",
            t.schema()
        )))
        .execute(Sql::new(format!(
            "INSERT INTO \"{}\".counters (name, n) VALUES ('y', NULL)",
            t.schema()
        )));
    let got = try_commit(&t, "nn", &not_null).await;
    assert!(
        matches!(&got, Ok(CommitOutcome::Rejected { index: 1, reason }) if reason.contains("23502")),
        "{got:?}"
    );
    assert_eq!(
        t.counter("x").await,
        0,
        "the first statement is rolled back too"
    );
    let got = try_commit(&t, "div", &raising("22012")).await;
    assert!(
        matches!(got, Ok(CommitOutcome::Rejected { index: 0, .. })),
        "{got:?}"
    );
    // Server trouble: transient.
    for code in ["53300", "57014", "XX000"] {
        let got = try_commit(&t, &format!("t-{code}"), &raising(code)).await;
        assert!(
            matches!(got, Ok(CommitOutcome::Transient { .. })),
            "{code}: {got:?}"
        );
    }
    // Wrong SQL and missing tables: no retry mends them.
    let syntax = Effect::new().execute(Sql::new("INSERTT INTO nowhere VALUES (1)"));
    assert!(matches!(
        try_commit(&t, "syntax", &syntax).await,
        Err(CommitError::Invalid(_))
    ));
    let missing = Effect::new().execute(Sql::new("INSERT INTO no_such_table VALUES (1)"));
    assert!(matches!(
        try_commit(&t, "missing", &missing).await,
        Err(CommitError::TableNotFound(m)) if m.contains("no_such_table")
    ));
    let denied = raising("42501");
    assert!(matches!(
        try_commit(&t, "denied", &denied).await,
        Err(CommitError::AccessDenied { .. })
    ));
    // Refused before any I/O.
    let control = Effect::new().execute(Sql::new("COMMIT"));
    assert!(matches!(
        try_commit(&t, "control", &control).await,
        Err(CommitError::Effect(_))
    ));
    // None of these left a marker: each job may still commit.
    for id in ["race-40001", "nn", "t-53300", "syntax", "control"] {
        let job = JobId::new(id).unwrap();
        assert_eq!(
            t.store().read_marker("orders", &job).await.unwrap(),
            None,
            "{id}"
        );
    }
}

/// A TCP proxy to the server that, once armed, forwards a client's
/// `COMMIT` and then cuts the connection before the server's answer
/// reaches the client.
async fn cutting_proxy(upstream: String, armed: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(&upstream).await.unwrap();
            let armed = Arc::clone(&armed);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let cut = Arc::new(AtomicBool::new(false));
                let cut_up = Arc::clone(&cut);
                let up = tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let sent_commit = buf[..n].windows(7).any(|w| w == b"COMMIT\0");
                        let cutting = sent_commit && armed.swap(false, Ordering::SeqCst);
                        if cutting {
                            // No answer reaches the client from here on.
                            cut_up.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        if cutting {
                            // Let the server commit, then close both ways.
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            return;
                        }
                    }
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if cut.load(Ordering::SeqCst) {
                        break;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                // The upstream half ends on its own: after a cut, only
                // once the server had time to commit.
                drop(up);
            });
        }
    });
    port
}

/// The connection is cut after `COMMIT` reached the server and before its
/// answer came back: whether the job committed is unknown to the store,
/// which tries again on a new connection, where the marker settles it as
/// a duplicate. The effect is applied once.
#[tokio::test]
async fn a_connection_cut_after_commit_is_settled_by_the_marker() {
    let t = Pg::new().await;
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = cutting_proxy(upstream(), Arc::clone(&armed)).await;
    let store = Postgres::new(
        PostgresConfig::new(conninfo_via("127.0.0.1", proxy, "disable"))
            .with_schema(t.schema())
            .unwrap()
            .with_marker_ttl(TTL),
    )
    .unwrap();

    // A first job opens the connection the cut will hit.
    let warm = cut_commit(&store, "warm", &t).await;
    assert_eq!(warm, CommitOutcome::Committed);
    armed.store(true, Ordering::SeqCst);
    let cut = cut_commit(&store, "cut", &t).await;
    assert!(!armed.load(Ordering::SeqCst), "the proxy cut a connection");
    assert_eq!(
        cut,
        CommitOutcome::Duplicate,
        "the second try finds the marker the first one committed"
    );
    assert_eq!(t.counter("cut").await, 1, "applied once");
    // Delivered again later: still a duplicate, still once.
    assert_eq!(
        cut_commit(&store, "cut", &t).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(t.counter("cut").await, 1);
}

async fn cut_commit(store: &Postgres, id: &str, t: &Pg) -> CommitOutcome {
    commit_on(store, id, &t.add_one(id)).await.unwrap()
}

/// One connection is enough: a duplicate reads its marker on the
/// connection its commit used, not on a second one it would wait for.
#[tokio::test]
async fn a_pool_of_one_settles_duplicates() {
    let t = Pg::new().await;
    let store = Postgres::new(
        PostgresConfig::new(postgres_url())
            .with_schema(t.schema())
            .unwrap()
            .with_pool_size(1),
    )
    .unwrap();
    for expected in [CommitOutcome::Committed, CommitOutcome::Duplicate] {
        let got = tokio::time::timeout(Duration::from_secs(20), cut_commit(&store, "one", &t))
            .await
            .expect("no wait on itself");
        assert_eq!(got, expected);
    }
    let checked = Effect::new().execute(
        Sql::new(format!(
            "UPDATE \"{}\".counters SET n = n + 1 WHERE name = 'one'",
            t.schema()
        ))
        .expect_rows(1),
    );
    let job = JobId::new("checked").unwrap();
    let hash = PayloadHash::of(b"{}");
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue: "orders",
    };
    for expected in [CommitOutcome::Committed, CommitOutcome::Duplicate] {
        let got = store.commit(job, &checked).await.unwrap().outcome;
        assert_eq!(got, expected, "a checked effect commits in two round trips");
    }
    assert_eq!(t.counter("one").await, 2);
}

/// A schema newer than this idemq is refused, not touched.
#[tokio::test]
async fn a_newer_schema_is_refused() {
    let t = Pg::new().await;
    t.client()
        .batch_execute(&format!(
            "INSERT INTO \"{}\".schema_version (version) VALUES (99)",
            t.schema()
        ))
        .await
        .unwrap();
    let err = t
        .store()
        .schema()
        .provision(&mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("99"), "{err}");
}

/// A schema of version 1 (failure records without the deploy or the
/// backtrace) is brought to this version by `idemq init` in place: its
/// records are kept and read back as naming neither, and new records keep
/// both.
#[tokio::test]
async fn init_upgrades_a_version_1_schema_and_keeps_its_records() {
    let t = Pg::new().await;
    let schema = t.schema();
    t.client()
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".failures DROP COLUMN deploy, DROP COLUMN idemq_version,
                 DROP COLUMN backtrace;
             DELETE FROM \"{schema}\".schema_version WHERE version > 1;
             INSERT INTO \"{schema}\".failures (namespace, key, job_id, message_id, attempt,
                 kind, error, chain, failed_at, source_queue, payload_hash, expires_at)
             VALUES ('orders', 'job#old', 'old', 'm1', 3, 'transient', 'e', '[]', now(),
                 'orders', 'h', now() + interval '1 day');"
        ))
        .await
        .unwrap();
    let provisioned = t.store().schema().provision(&mut Vec::new()).await.unwrap();
    assert!(
        provisioned.created,
        "the upgrade is a change: {}",
        provisioned.name
    );
    let records = t.store().failure_records();
    let sources = ["orders".to_owned()];
    let old = records
        .read_failure(&sources, Some("old"), "m1")
        .await
        .unwrap()
        .expect("the version 1 record is kept");
    assert_eq!(
        (
            old.attempt,
            old.deploy.as_str(),
            old.idemq_version.as_str(),
            old.failure.backtrace.as_deref()
        ),
        (3, "", "", None)
    );
    let mut new = old.clone();
    new.job_id = Some("new".into());
    new.deploy = "7".into();
    new.idemq_version = idemq::failure::IDEMQ_VERSION.into();
    new.failure.backtrace = Some("orders::charge\n    at ./src/main.rs:9:5".into());
    records.record_failure(&new).await.unwrap();
    let back = records
        .read_failure(&sources, Some("new"), "m1")
        .await
        .unwrap()
        .expect("written");
    assert_eq!(
        (back.deploy.as_str(), back.idemq_version.as_str()),
        ("7", idemq::failure::IDEMQ_VERSION)
    );
    assert_eq!(back.failure.backtrace, new.failure.backtrace);
    // A second init finds nothing to do.
    let again = t.store().schema().provision(&mut Vec::new()).await.unwrap();
    assert!(!again.created);
}

/// Expired markers and failure records are deleted; live ones stay.
#[tokio::test]
async fn expired_rows_are_deleted() {
    let t = Pg::new().await;
    for id in ["old", "new"] {
        let s = commit(&t, "orders", id, "{}", &t.add_one(id)).await;
        assert_eq!(s.outcome, CommitOutcome::Committed);
    }
    t.client()
        .batch_execute(&format!(
            "UPDATE \"{}\".markers SET expires_at = now() - interval '1 second' WHERE job_id = 'old'",
            t.schema()
        ))
        .await
        .unwrap();
    assert_eq!(t.store().delete_expired(100).await.unwrap(), 1);
    for (id, kept) in [("old", false), ("new", true)] {
        let marker = t
            .store()
            .read_marker("orders", &JobId::new(id).unwrap())
            .await
            .unwrap();
        assert_eq!(marker.is_some(), kept, "{id}");
    }
}

/// A TCP proxy to the server that keeps every byte its clients sent.
async fn recording_proxy(upstream: String) -> (u16, Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let streams: Arc<std::sync::Mutex<Vec<Vec<u8>>>> = Arc::default();
    let kept = Arc::clone(&streams);
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(&upstream).await.unwrap();
            let index = {
                let mut s = kept.lock().unwrap();
                s.push(Vec::new());
                s.len() - 1
            };
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    kept.lock().unwrap()[index].extend_from_slice(&buf[..n]);
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, streams)
}

/// The frontend messages of one connection after its startup message:
/// (type, body).
fn frontend_messages(stream: &[u8]) -> Vec<(u8, &[u8])> {
    let len = |at: usize| u32::from_be_bytes(stream[at..at + 4].try_into().unwrap()) as usize;
    let mut at = len(0); // the startup message has no type byte
    let mut messages = Vec::new();
    while at + 5 <= stream.len() {
        let kind = stream[at];
        let body = &stream[at + 5..at + 1 + len(at + 1)];
        messages.push((kind, body));
        at += 1 + len(at + 1);
    }
    messages
}

/// Behind RDS Proxy a session that keeps state is pinned to one database
/// connection
/// (<https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/rds-proxy-pinning.html>).
/// Every message the store sends, on the wire: each extended-protocol
/// statement is unnamed (no prepared statement outlives its message
/// group), and the only simple queries are the transaction's own `BEGIN`,
/// `COMMIT` and `ROLLBACK`, never a `SET`.
#[tokio::test]
async fn nothing_the_store_sends_pins_a_session() {
    let t = Pg::new().await;
    let (proxy, streams) = recording_proxy(upstream()).await;
    let store = Postgres::new(
        PostgresConfig::new(conninfo_via("127.0.0.1", proxy, "disable"))
            .with_schema(t.schema())
            .unwrap()
            .with_marker_ttl(TTL),
    )
    .unwrap();
    // Every kind of request: a new job with its look-up, a duplicate, a
    // checked effect that is refused (rolled back) and one that commits, a
    // failure record written and read, expired rows deleted.
    let job = JobId::new("pin").unwrap();
    let hash = PayloadHash::of(b"{}");
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue: "orders",
    };
    assert!(matches!(
        store
            .look_up(std::slice::from_ref(&job))
            .await
            .remove(0)
            .unwrap(),
        idemq::store::LookedUp::Absent
    ));
    assert_eq!(
        store.commit(job, &t.add_one("pin")).await.unwrap().outcome,
        CommitOutcome::Committed
    );
    assert_eq!(
        store.commit(job, &t.add_one("pin")).await.unwrap().outcome,
        CommitOutcome::Duplicate
    );
    assert!(matches!(
        cut_commit_effect(&store, "refused", &t.refused("refused")).await,
        CommitOutcome::Rejected { .. }
    ));
    let checked = Effect::new().execute(
        Sql::new(format!(
            "UPDATE \"{}\".counters SET n = n + 1 WHERE name = 'pin'",
            t.schema()
        ))
        .expect_rows(1),
    );
    assert_eq!(
        cut_commit_effect(&store, "checked", &checked).await,
        CommitOutcome::Committed
    );
    let records = store.failure_records();
    let record = idemq::failure::FailureRecord {
        job_id: Some("pin".into()),
        message_id: "m".into(),
        attempt: 1,
        failure: idemq::failure::Failure {
            kind: idemq::failure::FailureKind::Transient,
            error: "e".into(),
            chain: vec![],
            backtrace: None,
        },
        failed_at: std::time::SystemTime::now(),
        source_queue: "orders".into(),
        payload_hash: hash.as_str().to_owned(),
        deploy: "7".into(),
        idemq_version: idemq::failure::IDEMQ_VERSION.into(),
    };
    records.record_failure(&record).await.unwrap();
    assert!(
        records
            .read_failure(&["orders".into()], Some("pin"), "m")
            .await
            .unwrap()
            .is_some()
    );
    store.delete_expired(10).await.unwrap();

    let streams = streams.lock().unwrap().clone();
    assert!(!streams.is_empty());
    let (mut parses, mut queries) = (0, Vec::new());
    for stream in &streams {
        for (kind, body) in frontend_messages(stream) {
            match kind {
                b'P' => {
                    parses += 1;
                    assert_eq!(
                        body[0],
                        0,
                        "a named statement: {:?}",
                        String::from_utf8_lossy(body)
                    );
                }
                b'Q' => queries.push(String::from_utf8_lossy(&body[..body.len() - 1]).into_owned()),
                b'C' => panic!("a Close: something named was left to close"),
                _ => {}
            }
        }
    }
    assert!(parses >= 10, "{parses} statements seen");
    for q in &queries {
        assert!(
            ["BEGIN", "COMMIT", "ROLLBACK"].contains(&q.as_str()),
            "a simple query other than the transaction's own: {q}"
        );
    }
    assert!(queries.iter().any(|q| q == "ROLLBACK"), "{queries:?}");
}

async fn cut_commit_effect(store: &Postgres, id: &str, effect: &Effect) -> CommitOutcome {
    commit_on(store, id, effect).await.unwrap()
}

/// A TCP proxy to the server that, once armed, drops the next request a
/// client sends and closes that connection, as a server restart or a
/// failover does to a pooled connection.
async fn dropping_proxy(upstream: String, armed: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(&upstream).await.unwrap();
            let armed = Arc::clone(&armed);
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let down = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if armed.swap(false, Ordering::SeqCst) {
                        break;
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                // Both directions closed: the client sees its connection
                // end with its request unanswered.
                down.abort();
            });
        }
    });
    port
}

/// A failure record whose pooled connection broke is written on a new
/// one (it is often the context of that very outage), and a write the
/// server refuses says why in the server's words (SQLSTATE and message).
#[tokio::test]
async fn a_failure_record_outlives_a_broken_connection() {
    use idemq::failure::{Failure, FailureKind, FailureRecord};
    let t = Pg::new().await;
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = dropping_proxy(upstream(), Arc::clone(&armed)).await;
    let store = Postgres::new(
        PostgresConfig::new(conninfo_via("127.0.0.1", proxy, "disable"))
            .with_schema(t.schema())
            .unwrap()
            .with_marker_ttl(TTL)
            .with_pool_size(1),
    )
    .unwrap();
    let record = |attempt: u32| FailureRecord {
        job_id: Some("rec-1".into()),
        message_id: format!("m{attempt}"),
        attempt,
        failure: Failure {
            kind: FailureKind::Transient,
            error: format!("attempt {attempt}"),
            chain: vec![],
            backtrace: None,
        },
        // Whole milliseconds: the stores keep no finer time than that.
        failed_at: std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_385_600_123),
        source_queue: "orders".into(),
        payload_hash: PayloadHash::of(b"{}").as_str().to_owned(),
        deploy: "7".into(),
        idemq_version: idemq::failure::IDEMQ_VERSION.into(),
    };
    // The first record opens the connection the proxy will break.
    store.record_failure(&record(1)).await.unwrap();
    armed.store(true, Ordering::SeqCst);
    let second = record(2);
    store
        .record_failure(&second)
        .await
        .expect("written on a new connection");
    assert!(
        !armed.load(Ordering::SeqCst),
        "the proxy broke a connection"
    );
    let read = t
        .records()
        .read_failure(&["orders".to_owned()], Some("rec-1"), "m2")
        .await
        .unwrap();
    assert_eq!(read.as_ref(), Some(&second));

    // A schema without idemq's tables: the server's own words.
    let missing = Postgres::new(
        PostgresConfig::new(postgres_url())
            .with_schema("idemq_never_provisioned")
            .unwrap()
            .with_marker_ttl(TTL),
    )
    .unwrap();
    let err = missing
        .record_failure(&record(3))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("SQLSTATE 42P01"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
}

/// A batch's commits pipelined on two connections, one of which one job's
/// statement ends in the middle (`pg_terminate_backend` of its own
/// session): the jobs before it committed, the jobs after it never ran on
/// that connection and are settled again on a fresh one, the other
/// pipeline's jobs committed, and the job itself, whose second try breaks
/// the same way, is a transient failure that applied nothing. Delivered
/// again, every job applies once.
#[tokio::test]
async fn a_batch_pipeline_cut_midway_settles_every_job() {
    let t = Pg::new().await;
    // Seven jobs: two pipelines, of four (the cut among them) and three.
    let names = ["p1", "p2", "cut", "p3", "p4", "p5", "p6"];
    // Ends its own session, then would count itself.
    let killing = || {
        Effect::new()
            .execute(Sql::new("SELECT pg_terminate_backend(pg_backend_pid())"))
            .execute(Sql::new(format!(
                "INSERT INTO \"{}\".counters (name, n) VALUES ('cut', 1)",
                t.schema()
            )))
    };
    let effects: Vec<Effect> = names
        .iter()
        .map(|n| if *n == "cut" { killing() } else { t.add_one(n) })
        .collect();
    let outcomes = commit_batch(t.store(), &names, &effects).await;
    assert_eq!(outcomes[0], CommitOutcome::Committed, "{outcomes:?}");
    assert_eq!(outcomes[1], CommitOutcome::Committed, "{outcomes:?}");
    assert!(
        matches!(&outcomes[2], CommitOutcome::Transient { reason } if reason.contains("broke twice")),
        "{outcomes:?}"
    );
    for after in &outcomes[3..] {
        assert_eq!(after, &CommitOutcome::Committed, "{outcomes:?}");
    }
    let applied = [
        ("p1", 1),
        ("p2", 1),
        ("cut", 0),
        ("p3", 1),
        ("p4", 1),
        ("p5", 1),
        ("p6", 1),
    ];
    for (name, n) in applied {
        assert_eq!(t.counter(name).await, n, "job {name} after the cut");
    }

    // The same batch delivered again, the cut job's bug fixed.
    let effects: Vec<Effect> = names.iter().map(|n| t.add_one(n)).collect();
    let outcomes = commit_batch(t.store(), &names, &effects).await;
    let expected: Vec<CommitOutcome> = names
        .iter()
        .map(|n| {
            if *n == "cut" {
                CommitOutcome::Committed
            } else {
                CommitOutcome::Duplicate
            }
        })
        .collect();
    assert_eq!(outcomes, expected);
    for name in names {
        assert_eq!(t.counter(name).await, 1, "job {name} applied once");
    }
}

/// A pool of one connection serves a batch whose jobs take every path at
/// once: pipelined new jobs, one already committed (read back after the
/// pipeline), and one with a row-count check (committed on its own).
#[tokio::test]
async fn a_pool_of_one_serves_a_mixed_batch() {
    let t = Pg::new().await;
    let store = Postgres::new(
        PostgresConfig::new(postgres_url())
            .with_schema(t.schema())
            .unwrap()
            .with_pool_size(1),
    )
    .unwrap();
    assert_eq!(
        cut_commit(&store, "old", &t).await,
        CommitOutcome::Committed
    );
    let checked = Effect::new().execute(
        Sql::new(format!(
            "UPDATE \"{}\".counters SET n = n + 1 WHERE name = 'old'",
            t.schema()
        ))
        .expect_rows(1),
    );
    let names = ["m1", "old", "checked", "m2"];
    let effects = [t.add_one("m1"), t.add_one("old"), checked, t.add_one("m2")];
    let outcomes = tokio::time::timeout(
        Duration::from_secs(20),
        commit_batch(&store, &names, &effects),
    )
    .await
    .expect("no wait on itself");
    assert_eq!(
        outcomes,
        [
            CommitOutcome::Committed,
            CommitOutcome::Duplicate,
            CommitOutcome::Committed,
            CommitOutcome::Committed
        ]
    );
    assert_eq!(
        t.counter("old").await,
        2,
        "committed once, then checked once"
    );
    assert_eq!(t.counter("m1").await + t.counter("m2").await, 2);
}

/// `commit_batch` of `names` with `effects` on `store`: each outcome.
async fn commit_batch(store: &Postgres, names: &[&str], effects: &[Effect]) -> Vec<CommitOutcome> {
    let ids: Vec<JobId> = names.iter().map(|n| JobId::new(*n).unwrap()).collect();
    let hash = PayloadHash::of(b"{}");
    let jobs: Vec<(JobRef<'_>, &Effect)> = ids
        .iter()
        .zip(effects)
        .map(|(id, e)| {
            let job = JobRef {
                id,
                payload_hash: &hash,
                queue: "orders",
            };
            (job, e)
        })
        .collect();
    store
        .commit_batch(&jobs)
        .await
        .into_iter()
        .map(|r| r.unwrap().outcome)
        .collect()
}
