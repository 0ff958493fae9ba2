//! The follow-ups' unit tests: the checks made before any I/O, and the
//! re-send rule of a duplicate against the horizon.

use super::sender::{Resend, resend};
use super::*;
use crate::store::dynamodb::Effect;

const URL: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/next";

#[test]
fn follow_ups_are_checked_before_any_io() {
    let check = |f: FollowUp| check_all(&[f], true);
    assert!(check(FollowUp::raw(URL, "ok", "{}")).is_ok());
    assert!(matches!(
        check(FollowUp::raw(URL, "", "{}")),
        Err(FollowUpError::InvalidJobId { index: 0, .. })
    ));
    assert!(matches!(
        check(FollowUp::raw(URL, "a", "")),
        Err(FollowUpError::Empty { what: "body", .. })
    ));
    assert!(matches!(
        check(FollowUp::raw(URL, "a", "x".repeat(MAX_FOLLOW_UP_BYTES))),
        Err(FollowUpError::TooLarge { .. })
    ));
    // A re-send from the marker carries idemq-first-enqueued too: it
    // is counted always, since a follow-up SQS refused on its re-send
    // could never be sent.
    let mut many = FollowUp::raw(URL, "a", "{}");
    for i in 0..8 {
        many = many.string_attribute(format!("a{i}"), "v");
    }
    assert!(
        check(many.clone()).is_ok(),
        "8 + idemq-job-id + idemq-first-enqueued = 10"
    );
    assert!(matches!(
        check(many.string_attribute("a8", "v")),
        Err(FollowUpError::TooManyAttributes { count: 11, .. })
    ));
    // And its bytes: a follow-up that fits only without the attribute
    // is refused.
    let name_type_value = "idemq-first-enqueued".len() + "String".len() + 13;
    let id_attribute = "idemq-job-id".len() + "String".len() + "a".len();
    let fits_bare = MAX_FOLLOW_UP_BYTES - id_attribute;
    assert!(matches!(
        check(FollowUp::raw(URL, "a", "x".repeat(fits_bare))),
        Err(FollowUpError::TooLarge { bytes, .. }) if bytes == MAX_FOLLOW_UP_BYTES + name_type_value
    ));
    assert!(
        check(FollowUp::raw(
            URL,
            "a",
            "x".repeat(fits_bare - name_type_value)
        ))
        .is_ok()
    );
    assert!(matches!(
        check(FollowUp::raw(URL, "a", "{}").string_attribute("idemq-job-id", "b")),
        Err(FollowUpError::ReservedAttribute { .. })
    ));
    let fifo = format!("{URL}.fifo");
    assert_eq!(
        check(FollowUp::raw(&fifo, "a", "{}")),
        Err(FollowUpError::MissingGroup { index: 0 })
    );
    assert!(check(FollowUp::raw(&fifo, "a", "{}").in_group("g")).is_ok());
    let twice = Effect::new()
        .then_send(FollowUp::raw(URL, "a", "{}"))
        .then_send(FollowUp::raw(URL, "b", "{}"))
        .then_send(FollowUp::raw(URL, "a", "{}"));
    assert_eq!(
        check_all(twice.follow_ups(), twice.uses_marker()),
        Err(FollowUpError::SameJobIdTwice {
            first: 0,
            second: 2
        })
    );
    let unmarked = Effect::new()
        .then_send(FollowUp::raw(URL, "a", "{}"))
        .without_marker();
    assert_eq!(
        check_all(unmarked.follow_ups(), unmarked.uses_marker()),
        Err(FollowUpError::NoMarker)
    );
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// The re-send rule, by the marker's age against the horizon (the
/// marker TTL less the replay window).
#[test]
fn a_duplicate_resends_only_within_the_horizon() {
    let horizon = ReplayHorizon::new;
    assert_eq!(horizon(crate::config::DEFAULT_MARKER_TTL).limit(), 20 * DAY);
    assert_eq!(horizon(DAY / 2).limit(), Duration::ZERO, "never past zero");
    let now = UNIX_EPOCH + 10_000 * DAY;
    let h = horizon(21 * DAY);
    let limit = h.limit();
    let ago = |d: Duration| Some(now - d);
    let table = [
        (ago(Duration::ZERO), Resend::Send { committed_at: now }),
        (
            ago(DAY),
            Resend::Send {
                committed_at: now - DAY,
            },
        ),
        (
            ago(limit - Duration::from_millis(1)),
            Resend::Send {
                committed_at: now - limit + Duration::from_millis(1),
            },
        ),
        (
            ago(limit),
            Resend::PastHorizon {
                committed_at: now - limit,
            },
        ),
        (
            ago(30 * DAY),
            Resend::PastHorizon {
                committed_at: now - 30 * DAY,
            },
        ),
        // Another host's clock ahead of this one: age zero.
        (
            Some(now + DAY),
            Resend::Send {
                committed_at: now + DAY,
            },
        ),
        // A fused marker of an earlier version: no commit time.
        (None, Resend::Undated),
    ];
    for (committed_at, want) in table {
        assert_eq!(resend(committed_at, now, h), want, "{committed_at:?}");
    }
}

/// Past the horizon, or undated, the duplicate is acknowledged as it
/// was, nothing is sent (no SQS call: the client here has no
/// endpoint), and each follow-up not sent is counted once.
#[tokio::test]
async fn a_duplicate_past_the_horizon_sends_nothing_and_counts_it() {
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .region(aws_sdk_sqs::config::Region::new("us-east-1"))
            .build(),
    );
    let sender = FollowUpSender::new(sqs);
    let list = [
        FollowUp::raw(URL, "p/a", "{}"),
        FollowUp::raw(URL, "p/b", "{}"),
    ];
    let now = crate::clock::now();
    for committed_at in [Some(now - 30 * DAY), Some(now - 20 * DAY), None] {
        let marker = StoredMarker {
            follow_ups: Ok(list.to_vec()),
            job_id: "p".into(),
            committed_at,
            horizon: ReplayHorizon::new(21 * DAY),
        };
        let sent = sender.after_commit(AfterCommit::Duplicate(marker)).await;
        assert_eq!(sent, Ok(()), "{committed_at:?}");
    }
    assert_eq!(sender.take_not_resent(), 6);
    assert_eq!(sender.take_not_resent(), 0, "taken once");
}
