//! A job's fused marker (`Effect::marked_by`) against what can happen to
//! it over time, in the test kit's in-memory DynamoDB and SQS:
//! - replaced by a plain `Put` after the job committed: its redelivery is
//!   dead-lettered with a reason that says so and names the follow-ups the
//!   replaced marker held;
//! - an effect switched between a fused and a separate marker across a
//!   deploy (`Effect::switching_marker_form`): a job committed by one
//!   version and delivered again to the other is applied once.

#[path = "common/event.rs"]
mod event;

use std::collections::HashSet;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::job::{JobId, PayloadHash};
use idemq::store::dynamodb::{Committer, Key};
use idemq::store::dynamodb::{Effect, Item, Write};
use idemq::store::{CommitOutcome, JobRef};
use idemq::testing::TestKit;

#[path = "../examples/ledger.rs"]
mod ledger;

const TABLE: &str = "ledger";
const QUEUE: &str = "ledger-jobs";

fn ledger() -> ledger::Ledger {
    ledger::Ledger {
        table: TABLE.into(),
        fail_accounts: HashSet::new(),
    }
}

/// One record on `QUEUE`, job `job_id`, on its `receives`th receive.
fn event(message_id: &str, body: &str, job_id: &str, receives: u32) -> String {
    event::sqs_event(QUEUE, &[(message_id, body, Some(job_id), receives)])
}

fn n<H: idemq::Handler>(kit: &TestKit<H>, pk: &str, attribute: &str) -> Option<String> {
    kit.item(&Key::string("pk", pk))
        .and_then(|i| i.get(attribute).and_then(|v| v.as_n().ok()).cloned())
}

fn s(item: &Item, name: &str) -> Option<String> {
    item.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// The ledger's transfer t-1 with a follow-up credit, committed; then its
/// entry (the marker) replaced by a plain Put of the same entry without
/// idemq's attributes; then t-1 delivered again. Nothing is applied again,
/// and the dead letter's reason says the marker item was overwritten and
/// that the follow-up t-1/then it held is not sent.
#[tokio::test]
async fn a_fused_marker_replaced_by_a_plain_put_is_reported_as_overwritten_with_what_it_lost() {
    let kit = TestKit::new(ledger(), TABLE);
    let body = r#"{"transfer_id":"t-1","account":"alice","amount":7,"then_credit":"bob"}"#;
    let first = kit.run_json(&event("m-1", body, "t-1", 1)).await.unwrap();
    assert!(first.failed_ids().is_empty());
    let entry = kit.item(&Key::string("pk", "entry#t-1")).expect("entry");
    assert!(entry.contains_key("job_id") && entry.contains_key("idemq_follow_ups"));

    // The user's own code writes the entry again, as a plain Put.
    let replaced: Item = entry
        .into_iter()
        .filter(|(k, _)| {
            !["job_id", "payload_hash", "committed_at", "idemq_follow_ups"].contains(&k.as_str())
        })
        .collect();
    kit.dynamodb().put_item(TABLE, replaced).unwrap();
    let sent_before = kit.sqs().sent_messages().len();

    let again = kit.run_json(&event("m-2", body, "t-1", 2)).await.unwrap();
    assert_eq!(n(&kit, "account#alice", "balance").as_deref(), Some("7"));
    assert_eq!(again.dead_letters.len(), 1, "{again:?}");
    let record = kit.failure_record("t-1").expect("failure record");
    assert_eq!(s(&record, "kind").as_deref(), Some("rejected"));
    let error = s(&record, "error").unwrap();
    for says in [
        "the marker item was overwritten",
        "table ledger, key pk=entry#t-1",
        "its attributes are exactly the ones this job's Put writes",
        "1 follow-up(s), not sent now: t-1/then to ledger-jobs",
        "Not applied again",
    ] {
        assert!(error.contains(says), "{says:?} not in {error}");
    }
    // Only the dead letter was sent: the follow-up was not.
    assert_eq!(kit.sqs().sent_messages().len(), sent_before + 1);
}

// ---------------------------------------------------------------------------
// Switching between a fused and a separate marker.
// ---------------------------------------------------------------------------

const TTL: Duration = Duration::from_secs(21 * 24 * 3600);

fn counter(id: &str) -> Write {
    Write::update(
        TABLE,
        Key::string("pk", format!("count#{id}")),
        "ADD n :one",
    )
    .value(":one", AttributeValue::N("1".into()))
}

fn entry(id: &str) -> Write {
    Write::put(
        TABLE,
        Key::string("pk", format!("entry#{id}")),
        Item::from([("body".to_string(), AttributeValue::S("x".into()))]),
    )
}

/// A handler version: how it marks job `id`'s effect.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// The entry is the marker, with a counter beside it.
    Fused,
    /// The entry alone is the marker: one `PutItem`.
    FusedAlone,
    /// idemq's separate marker; the entry a plain Put.
    Separate,
}

fn effect(form: Form, id: &str, switching: bool) -> Effect {
    let effect = match form {
        Form::Fused => Effect::new().with(counter(id)).marked_by(entry(id)),
        Form::FusedAlone => Effect::new().marked_by(entry(id)),
        Form::Separate => Effect::new().with(counter(id)).with(entry(id)),
    };
    if switching {
        effect.switching_marker_form()
    } else {
        effect
    }
}

async fn commit(c: &Committer, id: &str, body: &str, effect: &Effect) -> CommitOutcome {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue: QUEUE,
    };
    c.commit(job, effect).await.expect("commit")
}

fn committer<H: idemq::Handler>(kit: &TestKit<H>) -> Committer {
    Committer::new(kit.dynamodb_client().clone(), kit.layout().clone(), TTL)
}

/// Job `id` committed by version `from`, then delivered again to `to` (and
/// a third time): applied once, a duplicate after, and the same payload
/// under another hash a conflict.
async fn switch(from: Form, to: Form, switching_from: bool) {
    let kit = TestKit::new(ledger(), TABLE);
    let c = committer(&kit);
    let id = format!("{from:?}-to-{to:?}");
    assert_eq!(
        commit(&c, &id, "p", &effect(from, &id, switching_from)).await,
        CommitOutcome::Committed
    );
    let after = effect(to, &id, true);
    assert_eq!(
        commit(&c, &id, "p", &after).await,
        CommitOutcome::Duplicate,
        "{from:?} then {to:?}"
    );
    assert_eq!(commit(&c, &id, "p", &after).await, CommitOutcome::Duplicate);
    assert!(matches!(
        commit(&c, &id, "other", &after).await,
        CommitOutcome::Conflict { .. }
    ));
    let count = n(&kit, &format!("count#{id}"), "n");
    match (from, to) {
        (Form::FusedAlone, Form::FusedAlone) => unreachable!(),
        (Form::FusedAlone, _) => assert_eq!(count, None, "the counter was never applied"),
        _ => assert_eq!(count.as_deref(), Some("1"), "{from:?} then {to:?}"),
    }
}

#[tokio::test]
async fn fused_then_separate_is_applied_once() {
    switch(Form::Fused, Form::Separate, false).await;
    switch(Form::Fused, Form::Separate, true).await;
    switch(Form::FusedAlone, Form::Separate, true).await;
}

#[tokio::test]
async fn separate_then_fused_is_a_duplicate_not_a_rejection() {
    switch(Form::Separate, Form::Fused, false).await;
    switch(Form::Separate, Form::FusedAlone, true).await;
}

/// The switch checks the other form only: a new job commits, and a
/// separate-marker effect's own conditions still decide (an entry that is
/// another job's is the write's rejection, not a duplicate).
#[tokio::test]
async fn a_switching_effect_still_commits_new_jobs_and_keeps_its_own_conditions() {
    let kit = TestKit::new(ledger(), TABLE);
    let c = committer(&kit);
    for form in [Form::Fused, Form::FusedAlone, Form::Separate] {
        let id = format!("new-{form:?}");
        assert_eq!(
            commit(&c, &id, "p", &effect(form, &id, true)).await,
            CommitOutcome::Committed,
            "{form:?}"
        );
    }
    // Job a's fused entry; job b (separate, switching) puts the same entry
    // on condition that it does not exist.
    let a = effect(Form::FusedAlone, "a", false);
    assert_eq!(commit(&c, "a", "p", &a).await, CommitOutcome::Committed);
    let b = Effect::new()
        .with(counter("b"))
        .with(entry("a").condition("attribute_not_exists(pk)"))
        .switching_marker_form();
    assert!(matches!(
        commit(&c, "b", "p", &b).await,
        CommitOutcome::Rejected { index: 1, .. }
    ));
    assert_eq!(n(&kit, "count#b", "n"), None);
}
