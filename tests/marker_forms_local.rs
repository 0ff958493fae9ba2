//! tests/marker_forms.rs's switch between a fused and a separate marker
//! (`Effect::switching_marker_form`) and the replaced fused marker, on the
//! local AWS stack (moto's DynamoDB): its transactions, condition
//! expressions and cancellation reasons, not the test kit's.

mod common;

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use common::{fresh_table, number, sdk};
use idemq::job::{JobId, PayloadHash};
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};
use idemq::store::{CommitOutcome, JobRef};

const TTL: Duration = Duration::from_secs(21 * 24 * 3600);

fn counter(table: &str, id: &str) -> Write {
    Write::update(
        table,
        Key::string("pk", format!("count#{id}")),
        "ADD n :one",
    )
    .value(":one", AttributeValue::N("1".into()))
}

fn entry(table: &str, id: &str) -> Write {
    Write::put(
        table,
        Key::string("pk", format!("entry#{id}")),
        Item::from([("body".to_string(), AttributeValue::S("x".into()))]),
    )
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

#[tokio::test]
async fn switching_between_fused_and_separate_markers_applies_each_job_once() {
    let sdk = sdk().await;
    let layout = fresh_table(&sdk).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let t = layout.table_name.clone();
    let c = Committer::new(ddb.clone(), layout, TTL);
    let fused = |id: &str| {
        Effect::new()
            .with(counter(&t, id))
            .marked_by(entry(&t, id))
            .switching_marker_form()
    };
    let alone = |id: &str| Effect::new().marked_by(entry(&t, id));
    let separate = |id: &str| {
        Effect::new()
            .with(counter(&t, id))
            .with(entry(&t, id))
            .switching_marker_form()
    };

    // Fused (a transaction, and the single PutItem), then separate.
    assert_eq!(
        commit(&c, "f", "p", &fused("f")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "f", "p", &separate("f")).await,
        CommitOutcome::Duplicate
    );
    assert!(matches!(
        commit(&c, "f", "other", &separate("f")).await,
        CommitOutcome::Conflict { .. }
    ));
    assert_eq!(number(&ddb, &t, "count#f", "n").await, Some(1));
    assert_eq!(
        commit(&c, "a", "p", &alone("a")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "a", "p", &separate("a")).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(number(&ddb, &t, "count#a", "n").await, None);

    // Separate, then fused: a duplicate, not a rejection.
    assert_eq!(
        commit(&c, "s", "p", &separate("s")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "s", "p", &fused("s")).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(
        commit(&c, "s", "p", &alone("s").switching_marker_form()).await,
        CommitOutcome::Duplicate
    );
    assert_eq!(number(&ddb, &t, "count#s", "n").await, Some(1));

    // New jobs commit in either form.
    assert_eq!(
        commit(&c, "n1", "p", &fused("n1")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "n2", "p", &separate("n2")).await,
        CommitOutcome::Committed
    );
    assert_eq!(
        commit(&c, "n3", "p", &alone("n3").switching_marker_form()).await,
        CommitOutcome::Committed
    );
}

#[tokio::test]
async fn a_replaced_fused_marker_is_rejected_as_overwritten() {
    let sdk = sdk().await;
    let layout = fresh_table(&sdk).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let t = layout.table_name.clone();
    let c = Committer::new(ddb.clone(), layout, TTL);
    let effect = Effect::new()
        .with(counter(&t, "r"))
        .marked_by(entry(&t, "r"));
    assert_eq!(
        commit(&c, "r", "p", &effect).await,
        CommitOutcome::Committed
    );
    ddb.put_item()
        .table_name(&t)
        .item("pk", AttributeValue::S("entry#r".into()))
        .item("body", AttributeValue::S("x".into()))
        .send()
        .await
        .unwrap();
    match commit(&c, "r", "p", &effect).await {
        CommitOutcome::Rejected { index: 1, reason } => {
            assert!(
                reason.contains("the marker item was overwritten"),
                "{reason}"
            );
            assert!(
                reason.contains("exactly the ones this job's Put writes"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(number(&ddb, &t, "count#r", "n").await, Some(1));
}
