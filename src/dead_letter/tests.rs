//! Unit tests of idemq's own dead letters (src/dead_letter.rs): their
//! context attributes and caps.

use super::*;
use crate::failure::{Failure, MAX_RECORD_CHAIN, MAX_RECORD_ERROR, capped_chain};
use std::time::{Duration, UNIX_EPOCH};

use crate::failure::FailureKind;
use proptest::prelude::*;

fn attr(v: &str) -> MessageAttributeValue {
    string_attribute(v).unwrap()
}

fn record(job_id: Option<&str>, error: &str) -> FailureRecord {
    FailureRecord {
        job_id: job_id.map(str::to_owned),
        message_id: "m-1".into(),
        attempt: 3,
        failure: Failure {
            kind: FailureKind::Permanent,
            error: error.into(),
            chain: vec![],
            backtrace: Some("orders::charge\n    at ./src/main.rs:9:5".into()),
        },
        failed_at: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        source_queue: "orders".into(),
        payload_hash: "h".into(),
        deploy: "7".into(),
        idemq_version: "0.1.0".into(),
    }
}

fn producer_attributes(n: usize) -> HashMap<String, MessageAttributeValue> {
    (0..n).map(|i| (format!("p{i}"), attr("v"))).collect()
}

#[test]
fn context_values_are_sqs_text_and_capped() {
    assert!(sqs_char('\t') && sqs_char('\n') && sqs_char('\r') && sqs_char(' '));
    assert!(sqs_char('\u{7f}') && sqs_char('\u{D7FF}') && sqs_char('\u{E000}'));
    assert!(sqs_char('\u{FFFD}') && sqs_char('\u{10000}') && sqs_char('\u{10FFFF}'));
    for bad in [
        '\0', '\u{1}', '\u{8}', '\u{b}', '\u{c}', '\u{1f}', '\u{FFFE}', '\u{FFFF}',
    ] {
        assert!(!sqs_char(bad), "{bad:?}");
    }
    assert_eq!(sqs_text("a\u{0}b\u{FFFF}c\td"), "a\u{FFFD}b\u{FFFD}c\td");

    let rec = record(Some("j"), &format!("bad\u{1}{}", "é".repeat(2000)));
    let ctx: HashMap<String, MessageAttributeValue> =
        context_attributes(&rec, 4).into_iter().collect();
    let err = ctx[ATTR_ERROR].string_value().unwrap();
    assert!(err.starts_with("bad\u{FFFD}é"), "{err}");
    assert!(
        err.len() <= MAX_CONTEXT_VALUE + 32 && err.contains("[cut:"),
        "{err}"
    );
    assert!(is_sqs_text(err));
    assert_eq!(ctx[ATTR_ATTEMPTS].data_type(), "Number");
    assert_eq!(ctx[ATTR_ATTEMPTS].string_value(), Some("3"));
    assert_eq!(ctx[ATTR_SOURCE_QUEUE].string_value(), Some("orders"));
}

#[test]
fn context_takes_only_the_spare_slots_error_first_and_never_empty_values() {
    let rec = record(Some("j"), "boom");
    let names = |slots| {
        context_attributes(&rec, slots)
            .into_iter()
            .map(|(n, _)| n)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(0), Vec::<String>::new());
    assert_eq!(names(1), vec![ATTR_ERROR]);
    assert_eq!(names(2), vec![ATTR_ERROR, ATTR_ATTEMPTS]);
    assert_eq!(names(9), CONTEXT_ATTRIBUTES.to_vec());
    // SQS refuses an empty value: an empty error or queue is left out.
    let mut empty = record(Some("j"), "");
    empty.source_queue.clear();
    let got: Vec<String> = context_attributes(&empty, 4)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        got,
        vec![ATTR_ATTEMPTS, ATTR_FAILED_AT, ATTR_DEPLOY, ATTR_BACKTRACE]
    );
}

#[test]
fn the_backtrace_attribute_keeps_whole_frames_within_its_cap() {
    let mut rec = record(Some("j"), "boom");
    assert_eq!(
        backtrace_attribute(&rec),
        "orders::charge\n    at ./src/main.rs:9:5"
    );
    let frames: Vec<String> = (0..100)
        .map(|i| format!("orders::step_{i}\n    at ./src/main.rs:{i}:5"))
        .collect();
    rec.failure.backtrace = Some(frames.join("\n"));
    let value = backtrace_attribute(&rec);
    assert!(value.len() <= MAX_CONTEXT_VALUE, "{}", value.len());
    assert!(value.starts_with(&frames[..3].join("\n")), "{value}");
    let kept = value.lines().filter(|l| l.starts_with("orders::")).count();
    let located = value.lines().filter(|l| l.starts_with("    at ")).count();
    assert!(kept > 10 && kept == located, "{value}");
    assert!(value.ends_with("the failure record has the whole backtrace)"));
    rec.failure.backtrace = None;
    assert_eq!(backtrace_attribute(&rec), "");
}

#[test]
fn the_deploy_attribute_names_the_deploy_and_idemq_and_reads_back() {
    let mut rec = record(Some("j"), "boom");
    for (deploy, version, value) in [
        ("7", "0.1.0", "7, idemq 0.1.0"),
        ("", "0.1.0", "idemq 0.1.0"),
        (
            "git 3f2a, idemq fork",
            "0.2.0",
            "git 3f2a, idemq fork, idemq 0.2.0",
        ),
        ("$LATEST", "", "$LATEST"),
    ] {
        rec.deploy = deploy.into();
        rec.idemq_version = version.into();
        assert_eq!(deploy_attribute(&rec), value);
        assert_eq!(parse_deploy(value), (deploy.to_owned(), version.to_owned()));
    }
    rec.deploy.clear();
    rec.idemq_version.clear();
    let names: Vec<String> = context_attributes(&rec, 9)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        !names.iter().any(|n| n == ATTR_DEPLOY),
        "an empty value is left out"
    );
}

#[test]
fn bare_letter_drops_idemq_attributes_and_stamps_the_resolved_id() {
    let mut received = producer_attributes(2);
    received.insert(JOB_ID_ATTRIBUTE.into(), attr("stale"));
    received.insert(ATTR_ERROR.into(), attr("an earlier death"));
    received.insert("idemq-other".into(), attr("x"));
    let bare = bare_attributes(&received, &record(Some("msg-id-7"), "e"), None);
    let mut names: Vec<&str> = bare.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, vec![JOB_ID_ATTRIBUTE, "p0", "p1"]);
    assert_eq!(bare[JOB_ID_ATTRIBUTE].string_value(), Some("msg-id-7"));

    // No resolved id: the producer's (invalid) attribute is kept as sent.
    let bare = bare_attributes(&received, &record(None, "e"), None);
    assert_eq!(bare[JOB_ID_ATTRIBUTE].string_value(), Some("stale"));
    let bare = bare_attributes(&producer_attributes(1), &record(None, "e"), None);
    assert!(!bare.contains_key(JOB_ID_ATTRIBUTE));

    // Ten attributes of its own: no room for the stamp; sent as received.
    let ten = producer_attributes(10);
    assert_eq!(
        bare_attributes(&ten, &record(Some("j"), "e"), Some(UNIX_EPOCH)),
        ten
    );
}

proptest! {
    /// Whatever a message carries, idemq's dead letter has at most 10
    /// attributes, the error gets a slot whenever one is spare, and the
    /// copy a redrive makes of it (idemq-* dropped, idemq-job-id set)
    /// passes the producer's attribute check.
    #[test]
    fn every_dead_letter_fits_and_can_be_sent_again(
        producer in 0usize..=9,
        stale in proptest::collection::vec(0usize..4, 0..4),
        resolved in any::<bool>(),
        carried in any::<bool>(),
    ) {
        let mut received = producer_attributes(producer);
        for i in stale {
            received.insert(CONTEXT_ATTRIBUTES[i].to_owned(), attr("old"));
        }
        if received.len() < MAX_ATTRIBUTES {
            received.insert(JOB_ID_ATTRIBUTE.into(), attr("j"));
        }
        let first = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        if carried {
            // A copy of a copy: its own first-enqueued is replaced.
            received.insert(FIRST_ENQUEUED_ATTRIBUTE.into(), attr("1"));
        }
        let rec = record(resolved.then_some("j"), "boom");
        let bare = bare_attributes(&received, &rec, Some(first));
        let mut full = bare.clone();
        full.extend(context_attributes(&rec, spare_attribute_slots(bare.keys())));
        prop_assert!(full.len() <= MAX_ATTRIBUTES);
        // First-enqueued first, then the error, while slots are left.
        let stamped = full.get(FIRST_ENQUEUED_ATTRIBUTE).and_then(|v| v.string_value());
        prop_assert_eq!(stamped.is_some(), producer + 1 < MAX_ATTRIBUTES);
        if let Some(ms) = stamped {
            prop_assert_eq!(ms, "1700000000000");
        }
        prop_assert_eq!(full.contains_key(ATTR_ERROR), producer + 2 < MAX_ATTRIBUTES);
        let redriven = crate::producer::Job::as_received("j", "{}", full, None, None);
        prop_assert_eq!(redriven.first_enqueued_fits(), producer + 1 < MAX_ATTRIBUTES);
        let redriven = if redriven.first_enqueued_fits() {
            redriven.first_enqueued(first)
        } else {
            redriven
        };
        prop_assert!(
            crate::producer::attributes_with_job_id(redriven.attributes.keys()) <= MAX_ATTRIBUTES
        );
    }
}

#[test]
fn chains_are_capped_with_a_marker_and_keep_the_root_cause() {
    let short = vec!["a".to_string(), "b".to_string()];
    assert_eq!(capped_chain(&short), short);

    let huge = vec!["x".repeat(500 * 1024)];
    let capped = capped_chain(&huge);
    assert_eq!(capped.len(), 1);
    assert!(capped[0].len() <= MAX_RECORD_ERROR + 32);
    assert!(capped[0].ends_with(&format!("[cut: {} bytes]", 500 * 1024)));

    let mut many: Vec<String> = (0..1000)
        .map(|i| format!("{i}:{}", "y".repeat(1000)))
        .collect();
    many.push("root cause".into());
    let capped = capped_chain(&many);
    let total: usize = capped.iter().map(|e| e.len() + 1).sum();
    assert!(total <= MAX_RECORD_CHAIN, "{total}");
    assert!(capped[0].starts_with("0:"));
    assert_eq!(capped.last().unwrap(), "root cause");
    let marker = &capped[capped.len() - 2];
    let kept = capped.len() - 2;
    assert_eq!(
        marker,
        &format!("… {} more causes left out (chain capped)", 1000 - kept)
    );

    // Many tiny entries: the per-element overhead counts too.
    let tiny: Vec<String> = (0..200_000).map(|_| "z".to_string()).collect();
    let total: usize = capped_chain(&tiny).iter().map(|e| e.len() + 1).sum();
    assert!(total <= MAX_RECORD_CHAIN, "{total}");
}

#[test]
fn error_codes_are_compared_without_namespace_or_suffix() {
    for code in [
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "AWS.SimpleQueueService.InvalidMessageContents",
        "com.amazonaws.sqs#InvalidMessageContents",
        "MessageTooLong",
    ] {
        assert!(INVALID_MESSAGE_CODES.contains(&bare_code(code)), "{code}");
    }
    assert_eq!(bare_code("RequestThrottled"), "RequestThrottled");
}

#[test]
fn truncate_respects_char_boundaries() {
    assert_eq!(truncate("abc", 5), "abc");
    assert_eq!(truncate("abcdef", 3), "abc… [cut: 6 bytes]");
    assert_eq!(truncate("ééé", 3), "é… [cut: 6 bytes]");
}
