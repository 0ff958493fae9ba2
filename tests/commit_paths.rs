//! The fused marker ([`Effect::marked_by`]) and the single-write path on the
//! local AWS stack (moto's DynamoDB), next to tests/local_stack.rs's
//! transaction with a separate marker: every outcome (committed, duplicate,
//! conflict, rejected, transient) and the race, for
//! - the *fused transaction*: a counter and a job-owned entry that is the
//!   marker, one `TransactWriteItems` of two items;
//! - the *single write*: the entry alone, one conditional `PutItem` with
//!   `ReturnValuesOnConditionCheckFailure=ALL_OLD` (moto 5.2.5 returns the
//!   item with the `ConditionalCheckFailedException`; the read-back when an
//!   emulator does not is tested in tests/commit_mocks.rs).

mod common;
mod race;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use common::{fresh_table, number, sdk, unique};
use idemq::job::{JobId, PayloadHash};
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::store::{CommitOutcome, JobRef};

const TTL: Duration = Duration::from_secs(21 * 24 * 3600);

/// The entry of job `id`, which is its marker; `body` is stored so that a
/// conflicting payload would show if it were applied.
fn entry(table: &str, id: &str, body: &str) -> Write {
    Write::put(
        table,
        Key::string("pk", format!("entry#{id}")),
        Item::from([("body".to_string(), AttributeValue::S(body.into()))]),
    )
}

fn counter(table: &str, id: &str) -> Write {
    Write::update(
        table,
        Key::string("pk", format!("counter#{id}")),
        "ADD n :one",
    )
    .value(":one", AttributeValue::N("1".into()))
}

/// The fused transaction: count the job and write its entry, the marker.
fn fused(table: &str, id: &str, body: &str) -> Effect {
    Effect::new()
        .with(counter(table, id))
        .marked_by(entry(table, id, body))
}

/// The single write: the entry alone.
fn single(table: &str, id: &str, body: &str) -> Effect {
    Effect::new().marked_by(entry(table, id, body))
}

async fn commit(c: &Committer, id: &str, body: &str, effect: &Effect) -> CommitOutcome {
    let job = JobId::new(id).unwrap();
    let hash = PayloadHash::of(body.as_bytes());
    let job = JobRef {
        id: &job,
        payload_hash: &hash,
        queue: "local",
    };
    c.commit(job, effect).await.expect("commit")
}

async fn setup() -> (aws_sdk_dynamodb::Client, Committer, String) {
    let sdk = sdk().await;
    let layout = fresh_table(&sdk).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let table = layout.table_name.clone();
    (ddb.clone(), Committer::new(ddb, layout, TTL), table)
}

async fn item(ddb: &aws_sdk_dynamodb::Client, table: &str, pk: &str) -> Option<Item> {
    ddb.get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get_item")
        .item()
        .cloned()
}

fn s<'i>(item: &'i Item, name: &str) -> Option<&'i str> {
    item.get(name)?.as_s().ok().map(String::as_str)
}

/// The entry is the marker: it carries the job id and the first payload's
/// hash, no TTL, and there is no separate marker item.
async fn assert_entry_is_the_marker(
    ddb: &aws_sdk_dynamodb::Client,
    c: &Committer,
    table: &str,
    id: &str,
    body: &str,
) {
    let e = item(ddb, table, &format!("entry#{id}"))
        .await
        .expect("entry");
    assert_eq!(s(&e, "job_id"), Some(id));
    let hash = PayloadHash::of(body.as_bytes()).to_string();
    assert_eq!(s(&e, "payload_hash"), Some(hash.as_str()));
    assert_eq!(s(&e, "body"), Some(body), "the first payload's entry");
    assert!(!e.contains_key("expires_at"), "the user's item gets no TTL");
    let job = JobId::new(id).unwrap();
    assert_eq!(
        c.read_marker("local", &job).await.unwrap(),
        None,
        "no marker item"
    );
}

#[tokio::test]
async fn fused_transaction_committed_then_duplicate_then_conflict_applies_once() {
    let (ddb, c, t) = setup().await;
    let effect = |body| fused(&t, "job-1", body);
    assert_eq!(
        commit(&c, "job-1", "first", &effect("first")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "job-1", "first", &effect("first")).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(
        commit(&c, "job-1", "second", &effect("second")).await,
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"first")
        }
    );
    assert_eq!(number(&ddb, &t, "counter#job-1", "n").await, Some(1));
    assert_entry_is_the_marker(&ddb, &c, &t, "job-1", "first").await;
}

#[tokio::test]
async fn single_write_committed_then_duplicate_then_conflict() {
    let (ddb, c, t) = setup().await;
    let effect = |body| single(&t, "job-1", body);
    assert_eq!(
        commit(&c, "job-1", "first", &effect("first")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "job-1", "first", &effect("first")).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(
        commit(&c, "job-1", "second", &effect("second")).await,
        CommitOutcome::Conflict {
            stored_hash: PayloadHash::of(b"first")
        }
    );
    assert_entry_is_the_marker(&ddb, &c, &t, "job-1", "first").await;
}

/// Rejected, fused transaction: the counter's business condition fails
/// (index 0), or the entry's key holds an item that is no job's (index 1);
/// either way nothing is applied, and the job commits once the rule holds.
#[tokio::test]
async fn fused_transaction_rejected_by_a_business_condition_or_a_foreign_item() {
    let (ddb, c, t) = setup().await;
    let guarded = Effect::new()
        .with(counter(&t, "job-2").condition("attribute_exists(pk)"))
        .marked_by(entry(&t, "job-2", "x"));
    assert!(matches!(
        commit(&c, "job-2", "x", &guarded).await,
        CommitOutcome::Rejected { index: 0, .. }
    ));
    assert_eq!(item(&ddb, &t, "entry#job-2").await, None, "rolled back");

    ddb.put_item()
        .table_name(&t)
        .item("pk", AttributeValue::S("entry#job-3".into()))
        .item("note", AttributeValue::S("written by someone else".into()))
        .send()
        .await
        .unwrap();
    match commit(&c, "job-3", "x", &fused(&t, "job-3", "x")).await {
        CommitOutcome::Rejected { index: 1, reason } => {
            assert!(reason.contains("not a job's marker"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(number(&ddb, &t, "counter#job-3", "n").await, None);

    // The rule holds now: the rejection left nothing behind.
    ddb.put_item()
        .table_name(&t)
        .item("pk", AttributeValue::S("counter#job-2".into()))
        .item("n", AttributeValue::N("10".into()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        commit(&c, "job-2", "x", &guarded).await,
        CommitOutcome::Committed
    );
    assert_eq!(number(&ddb, &t, "counter#job-2", "n").await, Some(11));
}

/// Rejected, single write: the entry's key is taken by another job's entry
/// (two jobs deriving one key) or by an item that is no job's.
#[tokio::test]
async fn single_write_rejected_when_the_entry_is_another_jobs_or_no_jobs() {
    let (ddb, c, t) = setup().await;
    // Job "b" writes the entry keyed by "a": a handler deriving one key for two jobs.
    assert_eq!(
        commit(&c, "a", "x", &single(&t, "a", "x")).await,
        CommitOutcome::Committed
    );
    match commit(&c, "b", "x", &single(&t, "a", "x")).await {
        CommitOutcome::Rejected { index: 0, reason } => {
            assert!(reason.contains("another job"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let e = item(&ddb, &t, "entry#a").await.unwrap();
    assert_eq!(s(&e, "job_id"), Some("a"), "left as job a wrote it");

    ddb.put_item()
        .table_name(&t)
        .item("pk", AttributeValue::S("entry#c".into()))
        .send()
        .await
        .unwrap();
    assert!(matches!(
        commit(&c, "c", "x", &single(&t, "c", "x")).await,
        CommitOutcome::Rejected { index: 0, .. }
    ));
}

/// Transient, both paths: the entry's table is keyed `id`, not `pk` (a
/// deploy problem: the table or IDEMQ_ATTR_PK is fixed by a deploy, not by
/// the job), so DynamoDB refuses the key and the job is retried, not
/// dead-lettered; nothing is applied.
#[tokio::test]
async fn wrong_key_schema_is_transient_on_both_paths_and_applies_nothing() {
    let (ddb, c, t) = setup().await;
    let other = unique("idemq-keyed-id");
    ddb.create_table()
        .table_name(&other)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let fused_tx = Effect::new()
        .with(counter(&t, "job-5"))
        .marked_by(entry(&other, "job-5", "x"));
    // moto cancels the transaction with a reason code "KeyError" (AWS: a
    // ValidationError naming the key schema, tested in
    // tests/commit_mocks.rs): transient either way.
    assert!(matches!(
        commit(&c, "job-5", "x", &fused_tx).await,
        CommitOutcome::Transient { .. }
    ));
    // A PutItem's ValidationException names the key: the job waits for the
    // deploy that fixes the table, and the reason says which table.
    match commit(&c, "job-5", "x", &single(&other, "job-5", "x")).await {
        CommitOutcome::Transient { reason } => {
            assert!(
                reason.contains(&other) && reason.contains("\"id\""),
                "{reason}"
            )
        }
        outcome => panic!("{outcome:?}"),
    }
    assert_eq!(number(&ddb, &t, "counter#job-5", "n").await, None);
}

/// Without a marker, one unconditional write is a plain upsert: applied on
/// every delivery, nothing deduplicated, nothing left but the item.
#[tokio::test]
async fn single_upsert_without_marker_is_applied_every_time() {
    let (ddb, c, t) = setup().await;
    let upsert = Effect::new().with(counter(&t, "job-6")).without_marker();
    for _ in 0..2 {
        assert_eq!(
            commit(&c, "job-6", "x", &upsert).await,
            CommitOutcome::Committed
        );
    }
    assert_eq!(number(&ddb, &t, "counter#job-6", "n").await, Some(2));
    let job = JobId::new("job-6").unwrap();
    assert_eq!(c.read_marker("local", &job).await.unwrap(), None);
}

/// 8 tasks x the same 200 jobs through the fused transaction: every counter
/// exactly 1, every entry the marker of its own job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_fused_transaction_each_effect_once() {
    let (ddb, c, t) = setup().await;
    let c = Arc::new(c);
    let (committer, table) = (Arc::clone(&c), t.clone());
    race::race(move |id| {
        let (c, t) = (Arc::clone(&committer), table.clone());
        async move { commit(&c, &id, "same body", &fused(&t, &id, "same body")).await }
    })
    .await;
    let mut wrong = Vec::new();
    for k in 0..race::JOBS {
        let id = race::job_id(k);
        let n = number(&ddb, &t, &format!("counter#{id}"), "n").await;
        let e = item(&ddb, &t, &format!("entry#{id}")).await;
        let owner = e.as_ref().and_then(|e| s(e, "job_id")).map(str::to_owned);
        if n != Some(1) || owner.as_deref() != Some(id.as_str()) {
            wrong.push((k, n, owner));
        }
    }
    assert!(wrong.is_empty(), "not exactly once: {wrong:?}");
}

/// 8 tasks x the same 200 jobs through the single write: exactly one
/// PutItem per job succeeds (the race asserts 200 commits and 1,400
/// duplicates), and every entry is its own job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_single_write_each_effect_once() {
    let (ddb, c, t) = setup().await;
    let c = Arc::new(c);
    let (committer, table) = (Arc::clone(&c), t.clone());
    race::race(move |id| {
        let (c, t) = (Arc::clone(&committer), table.clone());
        async move { commit(&c, &id, "same body", &single(&t, &id, "same body")).await }
    })
    .await;
    for k in 0..race::JOBS {
        let id = race::job_id(k);
        let e = item(&ddb, &t, &format!("entry#{id}")).await.expect("entry");
        assert_eq!(s(&e, "job_id"), Some(id.as_str()));
    }
}
