//! Unit tests of the batch core (src/batch.rs): scheduling, FIFO groups,
//! the deadline budget, the partial batch response.

use super::*;
use proptest::prelude::*;
use std::sync::Mutex;

fn msg(id: &str, group: Option<&str>) -> Message {
    Message {
        message_id: id.to_owned(),
        receipt_handle: format!("rh-{id}"),
        body: "{}".into(),
        attributes: HashMap::new(),
        receive_count: 1,
        group_id: group.map(str::to_owned),
        received_at: Instant::now(),
        sent_at: Some(SystemTime::now()),
    }
}

fn verdict(code: u8) -> Verdict {
    let failure = Failure {
        kind: FailureKind::Transient,
        error: "x".into(),
        chain: vec![],
        backtrace: None,
    };
    match code % 4 {
        0 => Verdict::Succeeded,
        1 => Verdict::Duplicate,
        2 => Verdict::Retry {
            failure,
            retry_after: None,
        },
        _ => Verdict::DeadLetter { failure },
    }
}

fn run_batch(
    messages: &[Message],
    outcomes: &HashMap<String, u8>,
    concurrency: usize,
    deadline: Instant,
) -> (Vec<(Verdict, Option<Duration>)>, Vec<String>) {
    let ran = Mutex::new(Vec::new());
    let config = BatchConfig {
        concurrency,
        ..BatchConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let verdicts = rt.block_on(schedule(messages, deadline, &config, |_, m| {
        ran.lock().unwrap().push(m.message_id.clone());
        let v = verdict(outcomes[&m.message_id]);
        async move {
            tokio::task::yield_now().await;
            v
        }
    }));
    (verdicts, ran.into_inner().unwrap())
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// The partial batch response names exactly the messages left on the
    /// queue: each once, never an id outside the batch, never empty; a
    /// FIFO group stops at its first failure and reports every later
    /// message; every other message runs exactly once.
    #[test]
    fn batch_response_contract(
        spec in proptest::collection::vec((0u8..4, 0u8..4, any::<u8>()), 1..40),
        concurrency in 1usize..8,
    ) {
        let messages: Vec<Message> = spec
            .iter()
            .enumerate()
            .map(|(i, (g, _, _))| {
                let group = match g { 0 => None, 1 => Some("a"), 2 => Some("b"), _ => Some("c") };
                msg(&format!("m{i}"), group)
            })
            .collect();
        let outcomes: HashMap<String, u8> = spec
            .iter()
            .enumerate()
            .map(|(i, (_, o, _))| (format!("m{i}"), *o))
            .collect();
        let (verdicts, ran) = run_batch(&messages, &outcomes, concurrency, far());
        let failed = failed_ids(messages.iter().zip(verdicts.iter().map(|(v, _)| v)));

        let ids: HashSet<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
        let unique: HashSet<&str> = failed.iter().map(String::as_str).collect();
        prop_assert_eq!(unique.len(), failed.len(), "repeated id");
        prop_assert!(failed.iter().all(|f| !f.is_empty() && ids.contains(f.as_str())));
        let ran_set: HashSet<&str> = ran.iter().map(String::as_str).collect();
        prop_assert_eq!(ran_set.len(), ran.len(), "a job ran twice");

        let mut group_failed: HashMap<&str, bool> = HashMap::new();
        for (m, (v, _)) in messages.iter().zip(&verdicts) {
            let stays = v.stays_on_queue();
            prop_assert_eq!(stays, failed.contains(&m.message_id));
            match m.group_id.as_deref() {
                None => prop_assert!(ran_set.contains(m.message_id.as_str())),
                Some(g) => {
                    let before = group_failed.get(g).copied().unwrap_or(false);
                    if before {
                        prop_assert!(stays, "after a group failure every later message is reported");
                        prop_assert!(!ran_set.contains(m.message_id.as_str()), "not run after its group failed");
                    } else {
                        prop_assert!(ran_set.contains(m.message_id.as_str()));
                    }
                    group_failed.insert(g, before || stays);
                }
            }
        }
    }
}

#[test]
fn near_the_deadline_nothing_starts_and_everything_is_reported() {
    let messages: Vec<Message> = (0..5).map(|i| msg(&format!("m{i}"), None)).collect();
    let outcomes = messages.iter().map(|m| (m.message_id.clone(), 0)).collect();
    // 1 s left, 2 s margin.
    let (verdicts, ran) = run_batch(
        &messages,
        &outcomes,
        4,
        Instant::now() + Duration::from_secs(1),
    );
    assert!(ran.is_empty());
    assert!(
        verdicts
            .iter()
            .all(|(v, _)| matches!(v, Verdict::NotAttempted { .. }))
    );
    let failed = failed_ids(messages.iter().zip(verdicts.iter().map(|(v, _)| v)));
    assert_eq!(failed, vec!["m0", "m1", "m2", "m3", "m4"]);
}

#[test]
fn budget_stages_come_in_order_at_fractions_of_the_margin() {
    let deadline = Instant::now() + Duration::from_secs(60);
    let b = Budget::new(deadline, Duration::from_secs(2));
    let before = |ms: u64| deadline - Duration::from_millis(ms);
    assert_eq!(b.start_by, before(2000));
    assert_eq!(b.abandon_at, before(1000));
    assert_eq!(b.optional_by, before(750));
    assert_eq!(b.required_by, before(500));
    assert_eq!(b.respond_by, before(250));
    // A huge margin never panics, and the stages keep their order.
    let now = Instant::now();
    for margin in [Duration::ZERO, Duration::from_secs(u64::MAX / 4)] {
        let b = Budget::new(now, margin);
        assert!(b.start_by <= b.abandon_at && b.abandon_at <= b.optional_by);
        assert!(b.optional_by <= b.required_by && b.required_by <= b.respond_by);
        assert!(b.respond_by <= now);
    }
}

#[test]
fn sent_timestamp_gives_the_age() {
    let sent = epoch_ms("1796212800000").unwrap();
    assert_eq!(sent, UNIX_EPOCH + Duration::from_secs(1_796_212_800));
    assert_eq!(epoch_ms("soon"), None);
    let mut m = msg("m", None);
    m.sent_at = Some(sent);
    assert_eq!(
        m.age(sent + Duration::from_secs(90)),
        Some(Duration::from_secs(90))
    );
    // A timestamp ahead of this host's clock is age zero, not an error.
    assert_eq!(m.age(sent - Duration::from_secs(3)), Some(Duration::ZERO));
    m.sent_at = None;
    assert_eq!(m.age(sent), None);
}

#[test]
fn a_message_id_seen_twice_is_reported_once() {
    let messages = [msg("same", None), msg("same", None)];
    let retry = verdict(2);
    let failed = failed_ids(messages.iter().zip([&retry, &retry]));
    assert_eq!(failed, vec!["same"]);
}
