//! Unit tests of the redrive's pure parts: filters and times, rates, the
//! report, letters held elsewhere and FIFO deduplication ids.

use super::send::redrive_deduplication_id;
use super::*;
use crate::dlq::peek::Context;
use aws_sdk_sqs::types::MessageSystemAttributeName as Sys;
use std::collections::HashSet;

#[test]
fn times_are_absolute_or_ago() {
    use std::time::UNIX_EPOCH;
    let now = UNIX_EPOCH + Duration::from_secs(10_000);
    assert_eq!(
        parse_when("--since", "2h", now),
        Ok(UNIX_EPOCH + Duration::from_secs(2_800))
    );
    assert_eq!(
        parse_when("--since", "1970-01-01T00:00:05Z", now),
        Ok(UNIX_EPOCH + Duration::from_secs(5))
    );
    let err = parse_when("--until", "yesterday", now)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("--until \"yesterday\" is neither"), "{err}");
}

#[test]
fn filters_refuse_an_empty_window() {
    let now = crate::clock::now();
    let err = Filter::from_flags(
        vec![],
        None,
        Some("2026-12-02T00:00:00Z"),
        Some("2026-12-01T00:00:00Z"),
        now,
    )
    .unwrap_err();
    assert!(err.to_string().contains("after --until"));
    let f = Filter::from_flags(
        vec!["a".to_string(), "a".to_string()],
        Some(String::new()),
        None,
        None,
        now,
    )
    .unwrap();
    assert_eq!(f.job_ids.len(), 1);
    assert_eq!(f.error_contains, None);
}

#[test]
fn native_rates_are_whole_and_within_sqs_limits() {
    assert_eq!(
        NativeRate::new(500.0).map(NativeRate::messages_per_second),
        Ok(500)
    );
    assert_eq!(
        NativeRate::new(1.0).map(NativeRate::messages_per_second),
        Ok(1)
    );
    for bad in [0.0, 0.5, 1e-300, 501.0, f64::INFINITY, f64::NAN, 2.5] {
        assert!(NativeRate::new(bad).is_err(), "{bad}");
    }
}

#[test]
fn letters_held_elsewhere_say_when_they_come_back() {
    let held = |t| HeldElsewhere {
        count: 3,
        queue_visibility_timeout: t,
    };
    assert_eq!(
        held(None).to_string(),
        "about 3 dead letters are held by another reader (in flight: a killed run, another \
         idemq dlq command); they come back when that reader's hold ends"
    );
    assert!(held(Some(Duration::from_secs(30))).to_string().ends_with(
        "within the DLQ's visibility timeout (30s) if it set none, up to 12h if it set its own"
    ),);
}

#[test]
fn a_report_is_complete_only_when_nothing_was_left() {
    assert!(RedriveReport::default().is_complete());
    let left = |f: fn(&mut RedriveReport)| {
        let mut r = RedriveReport::default();
        f(&mut r);
        r.is_complete()
    };
    assert!(!left(|r| r.failed.push(("m".into(), "why".into()))));
    assert!(!left(|r| r.unseen = 1));
    assert!(!left(|r| r.held_elsewhere = Some(HeldElsewhere {
        count: 1,
        queue_visibility_timeout: None,
    })));
    assert!(!left(|r| r.past_horizon.push(Refused {
        message_id: "m".into(),
        job_id: None,
        why: "old".into(),
    })));
}
use std::time::UNIX_EPOCH;

#[test]
fn fifo_dedup_id_is_kept_unless_it_would_be_dropped() {
    let sent_ms = 1_000_000_000_000u64;
    let sent = UNIX_EPOCH + Duration::from_millis(sent_ms);
    let m = DeadMessage {
        message_id: "m-1".into(),
        receipt_handle: "rh".into(),
        body: String::new(),
        attributes: HashMap::new(),
        system: HashMap::from([
            (Sys::MessageDeduplicationId, "d-1".to_string()),
            (Sys::SentTimestamp, sent_ms.to_string()),
        ]),
    };
    let long_after = sent + Duration::from_secs(3600);
    assert_eq!(
        redrive_deduplication_id(&m, true, long_after).as_deref(),
        Some("d-1")
    );
    assert_eq!(
        redrive_deduplication_id(&m, false, sent).as_deref(),
        Some("d-1"),
        "--to another queue"
    );
    let soon = redrive_deduplication_id(&m, true, sent + Duration::from_secs(60)).unwrap();
    assert_ne!(soon, "d-1");
    assert!(soon.len() <= 128);
    assert_eq!(
        Some(soon),
        redrive_deduplication_id(&m, true, sent + Duration::from_secs(90)),
        "stable for reruns"
    );
    let standard = DeadMessage {
        system: HashMap::new(),
        ..m
    };
    assert_eq!(redrive_deduplication_id(&standard, true, sent), None);
}

fn ctx(job: &str, error: &str, at_secs: u64) -> Context {
    Context {
        job_id: Some(job.into()),
        message_id: format!("m-{job}"),
        attempts: Some(6),
        last_error: Some(error.into()),
        error_chain: vec!["connection reset".into()],
        failed_at: Some(UNIX_EPOCH + Duration::from_secs(at_secs)),
        source_queue: Some("q".into()),
        deploy: None,
        idemq_version: None,
        backtrace: None,
        payload_bytes: 10,
        failure_record: true,
    }
}

#[test]
fn an_empty_filter_matches_everything() {
    assert!(Filter::default().matches(&ctx("a", "x", 5)));
}

#[test]
fn filters_combine() {
    let f = Filter {
        job_ids: HashSet::from(["a".to_string(), "m-b".to_string()]),
        error_contains: Some("OUTAGE".into()),
        since: Some(UNIX_EPOCH + Duration::from_secs(10)),
        until: Some(UNIX_EPOCH + Duration::from_secs(20)),
    };
    assert!(f.matches(&ctx("a", "downstream outage", 10)));
    assert!(
        f.matches(&ctx("b", "downstream outage", 20)),
        "by message id"
    );
    assert!(!f.matches(&ctx("c", "downstream outage", 15)), "other job");
    assert!(!f.matches(&ctx("a", "amount 0", 15)), "other error");
    assert!(
        !f.matches(&ctx("a", "downstream outage", 9)),
        "before since"
    );
    assert!(
        !f.matches(&ctx("a", "downstream outage", 21)),
        "after until"
    );
    let chain_only = Filter {
        error_contains: Some("connection reset".into()),
        ..Filter::default()
    };
    assert!(
        chain_only.matches(&ctx("a", "outer", 1)),
        "the chain is searched too"
    );
    let mut unknown_time = ctx("a", "downstream outage", 15);
    unknown_time.failed_at = None;
    assert!(
        !f.matches(&unknown_time),
        "a time filter never matches an unknown time"
    );
}
