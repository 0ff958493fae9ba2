//! Unit tests of the classification (src/classify.rs): every ending onto
//! what SQS does with the message.

use super::*;
use crate::job::PayloadHash;

#[derive(Debug, thiserror::Error)]
#[error("payment API unavailable")]
struct Outer(#[source] std::io::Error);

#[test]
fn transient_handler_errors_retry_with_their_chain() {
    let e = JobError::transient(Outer(std::io::Error::other("connection reset")));
    match classify(Attempt::Handler(e)) {
        Verdict::Retry {
            failure,
            retry_after: None,
        } => {
            assert_eq!(failure.kind, FailureKind::Transient);
            assert_eq!(failure.error, "payment API unavailable");
            assert_eq!(failure.chain, vec!["connection reset".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    let e = JobError::retry_after("rate limited", Duration::from_secs(42));
    assert!(matches!(
        classify(Attempt::Handler(e)),
        Verdict::Retry { retry_after: Some(d), .. } if d == Duration::from_secs(42)
    ));
}

/// `?` in a handler makes any error a transient `JobError`
/// that keeps its cause chain, and a serde_json error's quoted values
/// stay out of the failure.
#[test]
fn question_mark_is_transient_and_keeps_the_chain() {
    fn io_step() -> Result<(), JobError> {
        Err(Outer(std::io::Error::other("connection reset")))?;
        Ok(())
    }
    fn decode_step() -> Result<u32, JobError> {
        Ok(serde_json::from_str::<u32>("\"card 4111-1111\"")?)
    }
    let e = io_step().unwrap_err();
    assert!(!e.is_permanent());
    assert_eq!(e.source_error().to_string(), "payment API unavailable");
    match classify(Attempt::Handler(e)) {
        Verdict::Retry {
            failure,
            retry_after: None,
        } => {
            assert_eq!(failure.kind, FailureKind::Transient);
            assert_eq!(failure.full(), "payment API unavailable: connection reset");
        }
        other => panic!("{other:?}"),
    }
    let e = decode_step().unwrap_err();
    assert!(e.into_source().is::<serde_json::Error>());
    match classify(Attempt::Handler(decode_step().unwrap_err())) {
        Verdict::Retry { failure, .. } => {
            assert!(
                failure.error.starts_with("data error at line 1"),
                "{failure:?}"
            );
            assert!(!failure.full().contains("4111"), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
    // Wrapped one level down, it is redacted all the same.
    #[derive(Debug, thiserror::Error)]
    #[error("reading the rate table")]
    struct Rates(#[source] serde_json::Error);
    let inner = serde_json::from_str::<u32>("\"secret-rate\"").unwrap_err();
    match classify(Attempt::Handler(JobError::permanent(Rates(inner)))) {
        Verdict::DeadLetter { failure } => {
            assert_eq!(failure.error, "reading the rate table");
            assert_eq!(failure.chain.len(), 1);
            assert!(!failure.full().contains("secret-rate"), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn permanent_things_are_dead_lettered_now() {
    let undecodable = serde_json::from_str::<u32>("\"x\"").unwrap_err();
    for attempt in [
        Attempt::Handler(JobError::permanent("amount must be positive")),
        Attempt::Undecodable(undecodable),
        Attempt::InvalidJobId(InvalidJobId::Empty),
        Attempt::Commit(Err(CommitError::Invalid("bad expression".into()))),
    ] {
        let v = classify(attempt);
        assert!(
            matches!(&v, Verdict::DeadLetter { failure } if failure.kind == FailureKind::Permanent),
            "{v:?}"
        );
        assert!(!v.stays_on_queue());
    }
}

fn undecodable<T: serde::de::DeserializeOwned + std::fmt::Debug>(body: &str) -> Failure {
    let e = serde_json::from_str::<T>(body).unwrap_err();
    match classify(Attempt::Undecodable(e)) {
        Verdict::DeadLetter { failure } => failure,
        other => panic!("{other:?}"),
    }
}

#[test]
fn undecodable_body_keeps_class_and_position() {
    let failure = undecodable::<u32>("{}");
    assert_eq!(failure.error, "body does not decode as the job type");
    assert_eq!(
        failure.full(),
        "body does not decode as the job type: data error at line 1 column 0: \
             invalid type (got map, expected u32)"
    );
    let syntax = undecodable::<serde_json::Value>("{\"a\" 1}");
    assert_eq!(
        syntax.chain,
        vec!["syntax error at line 1 column 6".to_string()]
    );
    let eof = undecodable::<Vec<u32>>("[1,");
    assert_eq!(
        eof.chain,
        vec!["unexpected end of input at line 1 column 3".to_string()]
    );
}

/// serde quotes the offending value; the failure record,
/// `idemq-error` and `idemq dlq` must never carry it.
#[test]
fn undecodable_body_never_carries_the_offending_value() {
    const SECRET: &str = "4111-1111-1111-1111";
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Kind {
        Card,
        Transfer,
    }
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        amount: u64,
        kind: Kind,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Job {
        id: String,
        inner: Inner,
    }
    let cases = [
        // The secret is the bad value: a string where a number goes.
        format!(r#"{{"id":"j","inner":{{"amount":"{SECRET}","kind":"Card"}}}}"#),
        // An unknown enum variant.
        format!(r#"{{"id":"j","inner":{{"amount":1,"kind":"{SECRET}"}}}}"#),
        // An unknown key (deny_unknown_fields).
        format!(r#"{{"id":"j","{SECRET}":1,"inner":{{"amount":1,"kind":"Card"}}}}"#),
        // A number where a string goes.
        r#"{"id":4111111111111111,"inner":{"amount":1,"kind":"Card"}}"#.to_string(),
        // A value crafted to look like serde's own wording.
        format!(r#"{{"id":"j","inner":{{"amount":"x, expected {SECRET}","kind":"Card"}}}}"#),
        format!(r#"{{"id":"j","inner":{{"amount":1,"kind":"{SECRET}`, expected `x"}}}}"#),
    ];
    for body in &cases {
        let failure = undecodable::<Job>(body);
        let text = failure.full();
        for needle in [SECRET, "4111"] {
            assert!(!text.contains(needle), "{body} -> {text}");
        }
        assert!(text.contains("at line 1 column"), "{text}");
    }
    // What is kept says what went wrong, in the type's words only.
    let unknown = undecodable::<Job>(&cases[2]).full();
    assert!(
        unknown.ends_with("unknown field (expected `id` or `inner`)"),
        "{unknown}"
    );
    let variant = undecodable::<Job>(&cases[1]).full();
    assert!(
        variant.ends_with("unknown variant (expected `Card` or `Transfer`)"),
        "{variant}"
    );
    let missing = undecodable::<Job>(r#"{"id":"j"}"#).full();
    assert!(missing.ends_with("missing field `inner`"), "{missing}");
}

#[test]
fn commit_outcomes() {
    assert_eq!(
        classify(Attempt::Commit(Ok(CommitOutcome::Committed))),
        Verdict::Succeeded
    );
    assert_eq!(
        classify(Attempt::Commit(Ok(CommitOutcome::Duplicate))),
        Verdict::Duplicate
    );
    let conflict = classify(Attempt::Commit(Ok(CommitOutcome::Conflict {
        stored_hash: PayloadHash::of(b"a"),
    })));
    assert!(
        matches!(conflict, Verdict::DeadLetter { failure } if failure.kind == FailureKind::Conflict)
    );
    let rejected = classify(Attempt::Commit(Ok(CommitOutcome::Rejected {
        index: 2,
        reason: "no funds".into(),
    })));
    assert!(matches!(&rejected, Verdict::DeadLetter { failure }
            if failure.kind == FailureKind::Rejected && failure.error.contains("write 2")));
    let transient = classify(Attempt::Commit(Ok(CommitOutcome::Transient {
        reason: "TransactionConflict".into(),
    })));
    assert!(transient.stays_on_queue());
    let missing = classify(Attempt::Commit(Err(CommitError::TableNotFound("t".into()))));
    assert!(missing.stays_on_queue());
}

/// A lost race left over after the in-invocation
/// re-runs backs off like a transient failure, never the DLQ; a
/// rejection stays a dead letter.
#[test]
fn a_contended_commit_is_retried_with_backoff_not_dead_lettered() {
    let v = classify(Attempt::Commit(Ok(CommitOutcome::Contended {
        index: 0,
        reason: "The conditional request failed".into(),
    })));
    match &v {
        Verdict::Retry {
            failure,
            retry_after: None,
        } => {
            assert_eq!(failure.kind, FailureKind::Contended);
            assert_eq!(failure.kind.as_str(), "contended");
            assert!(failure.error.contains("effect write 0"), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(v.stays_on_queue());
}

fn contended() -> Result<Result<CommitOutcome, CommitError>, Attempt> {
    Ok(Ok(CommitOutcome::Contended {
        index: 0,
        reason: "The conditional request failed".into(),
    }))
}

/// Runs `rerun_lost_races` over scripted outcomes; returns the final
/// outcome, how many runs and how many lost races were counted.
fn rerun(
    retries: u32,
    start_in: Duration,
    script: Vec<Result<Result<CommitOutcome, CommitError>, Attempt>>,
) -> (
    Result<Result<CommitOutcome, CommitError>, Attempt>,
    usize,
    u64,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let lost = std::sync::atomic::AtomicU64::new(0);
        let mut script = script.into_iter();
        let mut runs = 0;
        let start_by = tokio::time::Instant::now() + start_in;
        let out = rerun_lost_races(retries, start_by, &lost, || {
            runs += 1;
            let next = script.next().expect("ran more often than scripted");
            async move { next }
        })
        .await;
        (out, runs, lost.into_inner())
    })
}

#[test]
fn lost_races_are_run_again_until_one_commits() {
    let (out, runs, lost) = rerun(
        3,
        Duration::from_secs(60),
        vec![contended(), contended(), Ok(Ok(CommitOutcome::Committed))],
    );
    assert!(matches!(out, Ok(Ok(CommitOutcome::Committed))));
    assert_eq!((runs, lost), (3, 2));
}

#[test]
fn past_the_retry_bound_the_lost_race_is_left_to_backoff() {
    let script = (0..4).map(|_| contended()).collect();
    let (out, runs, lost) = rerun(3, Duration::from_secs(60), script);
    assert!(matches!(out, Ok(Ok(CommitOutcome::Contended { .. }))));
    assert_eq!((runs, lost), (4, 4), "1 run + 3 re-runs, all lost");
    // 0 re-runs: the first lost race backs off.
    let (_, runs, lost) = rerun(0, Duration::from_secs(60), vec![contended()]);
    assert_eq!((runs, lost), (1, 1));
    // No time left to start another run: backs off at once.
    let (_, runs, _) = rerun(3, Duration::ZERO, vec![contended()]);
    assert_eq!(runs, 1);
}

fn collided() -> Result<Result<CommitOutcome, CommitError>, Attempt> {
    Ok(Ok(CommitOutcome::Collided {
        reason: "transaction cancelled: TransactionConflict on the marker".into(),
    }))
}

/// A transaction cancelled by a concurrent one on its items applied
/// nothing: run again in the invocation like an optimistic race, with
/// the same bound; what outlasts it backs off as `contended`.
#[test]
fn transaction_conflicts_are_run_again_with_the_same_bound() {
    let (out, runs, lost) = rerun(
        3,
        Duration::from_secs(60),
        vec![collided(), contended(), Ok(Ok(CommitOutcome::Duplicate))],
    );
    assert!(matches!(out, Ok(Ok(CommitOutcome::Duplicate))));
    assert_eq!((runs, lost), (3, 2));
    let script = (0..4).map(|_| collided()).collect();
    let (out, runs, _) = rerun(3, Duration::from_secs(60), script);
    assert_eq!(runs, 4);
    let Ok(Ok(outcome)) = out else {
        panic!("{out:?}")
    };
    match classify(Attempt::Commit(Ok(outcome))) {
        Verdict::Retry {
            failure,
            retry_after: None,
        } => {
            assert_eq!(failure.kind, FailureKind::Contended);
            assert!(failure.error.contains("TransactionConflict"), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// A denied permission or a missing table is the deployment's fault:
/// retried (a deploy fixes it and nothing is lost), but as `deployment`,
/// never as a transient failure.
#[test]
fn deployment_errors_are_retried_as_deployment_errors() {
    for e in [
        CommitError::AccessDenied {
            needs: "dynamodb:UpdateItem on table accounts".into(),
            message: "not authorized to perform: dynamodb:UpdateItem".into(),
        },
        CommitError::TableNotFound("accounts".into()),
    ] {
        match classify(Attempt::Commit(Err(e))) {
            Verdict::Retry {
                failure,
                retry_after: None,
            } => {
                assert_eq!(failure.kind, FailureKind::Deployment);
                assert_eq!(failure.kind.as_str(), "deployment");
                assert!(failure.error.contains("accounts"), "{failure:?}");
            }
            other => panic!("{other:?}"),
        }
    }
    let other = classify(Attempt::Commit(Err(CommitError::Service("x".into()))));
    assert!(
        matches!(&other, Verdict::Retry { failure, .. } if failure.kind == FailureKind::Transient)
    );
}

#[test]
fn other_outcomes_and_errors_end_the_loop_at_once() {
    let (out, runs, lost) = rerun(
        3,
        Duration::from_secs(60),
        vec![Ok(Ok(CommitOutcome::Rejected {
            index: 0,
            reason: "no".into(),
        }))],
    );
    assert!(matches!(out, Ok(Ok(CommitOutcome::Rejected { .. }))));
    assert_eq!((runs, lost), (1, 0));
    let (out, runs, _) = rerun(
        3,
        Duration::from_secs(60),
        vec![
            contended(),
            Err(Attempt::Handler(JobError::transient("down"))),
        ],
    );
    assert!(matches!(out, Err(Attempt::Handler(_))));
    assert_eq!(runs, 2);
}

#[test]
fn contention_pauses_are_jittered_short_and_capped() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for lost in [0, 1, 2, 3, 5, 40, u32::MAX] {
        let ceiling = CONTENTION_PAUSE_BASE
            .saturating_mul(1 << lost.saturating_sub(1).min(16))
            .min(CONTENTION_PAUSE_CAP);
        let draws: Vec<Duration> = (0..200).map(|_| contention_pause(lost, &mut rng)).collect();
        assert!(draws.iter().all(|d| *d <= ceiling), "{lost}");
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(distinct.len() > 50, "jittered: {lost}");
    }
}

#[test]
fn an_expired_job_is_dead_lettered_as_expired_and_kinds_read_back() {
    let day = Duration::from_secs(86_400);
    let first = std::time::UNIX_EPOCH + 1000 * day;
    let expired = crate::horizon::check_markers_remember(Some(first), first + 30 * day, 21 * day)
        .unwrap_err();
    match classify(Attempt::Expired(expired)) {
        Verdict::DeadLetter { failure } => {
            assert_eq!(failure.kind, FailureKind::Expired);
            assert_eq!(failure.kind.as_str(), "expired");
            assert!(failure.error.contains("IDEMQ_MARKER_TTL"), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
    for kind in FailureKind::ALL {
        assert_eq!(FailureKind::parse(kind.as_str()), Some(kind));
    }
    assert_eq!(FailureKind::parse("other"), None);
}

#[test]
fn panics_and_timeouts_are_retried() {
    let v = classify(Attempt::Panicked {
        message: "index out of bounds".into(),
        backtrace: None,
    });
    assert!(matches!(&v, Verdict::Retry { failure, .. }
            if failure.kind == FailureKind::Panic && failure.error.contains("index out of bounds")));
    assert!(classify(Attempt::TimedOut).stays_on_queue());
}
