//! What `Effect::switching_marker_form` costs per job, read off the
//! requests a commit sends (`aws-smithy-mocks` standing in for DynamoDB):
//! round trips, transaction items, and write units for items up to 1 KB. A
//! standard write costs 1 write unit; a transaction 2 per item, condition
//! checks included ("DynamoDB performs two underlying reads or writes of
//! every item in the transaction",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling>).
//! Without the switch, every path sends exactly what it sent before.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsOutput;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_mocks::{RuleMode, mock, mock_client};
use idemq::config::TableLayout;
use idemq::job::{JobId, PayloadHash};
use idemq::store::JobRef;
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Committer, Effect, Key, Write};

/// One committed job's requests.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    round_trips: usize,
    transaction_items: usize,
    write_units: usize,
    /// Whether any request carries the switch's checks.
    checks_other_form: bool,
}

async fn cost(effect: Effect) -> Cost {
    let items = Arc::new(AtomicUsize::new(0));
    let checks = Arc::new(AtomicUsize::new(0));
    let (seen_items, seen_checks) = (items.clone(), checks.clone());
    let transaction = mock!(Client::transact_write_items)
        .match_requests(move |req| {
            seen_items.fetch_add(req.transact_items().len(), Ordering::SeqCst);
            let switching = req.transact_items().iter().any(|i| {
                i.condition_check().is_some()
                    || [i.put().and_then(|p| p.expression_attribute_names())]
                        .into_iter()
                        .chain([i.update().and_then(|u| u.expression_attribute_names())])
                        .flatten()
                        .any(|names| names.contains_key("#idemq_switch_job"))
            });
            seen_checks.fetch_add(usize::from(switching), Ordering::SeqCst);
            true
        })
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let put = mock!(Client::put_item).then_output(|| PutItemOutput::builder().build());
    let client = mock_client!(
        aws_sdk_dynamodb,
        RuleMode::MatchAny,
        [&transaction, &put],
        |c| c.retry_config(RetryConfig::disabled())
    );
    let c = Committer::new(client, TableLayout::new("idemq"), Duration::from_secs(3600));
    let id = JobId::new("j-1").unwrap();
    let hash = PayloadHash::of(b"p");
    let job = JobRef {
        id: &id,
        payload_hash: &hash,
        queue: "q",
    };
    c.commit(job, &effect).await.expect("commit");
    let transaction_items = items.load(Ordering::SeqCst);
    Cost {
        round_trips: transaction.num_calls() + put.num_calls(),
        transaction_items,
        write_units: put.num_calls() + 2 * transaction_items,
        checks_other_form: checks.load(Ordering::SeqCst) > 0,
    }
}

fn counter() -> Write {
    Write::update("bank", Key::string("pk", "count#j-1"), "ADD n :one")
        .value(":one", AttributeValue::N("1".into()))
}

fn entry() -> Write {
    Write::put("bank", Key::string("pk", "entry#j-1"), Item::new())
}

fn shapes(switching: bool) -> Vec<(&'static str, Effect)> {
    let on = |e: Effect| {
        if switching {
            e.switching_marker_form()
        } else {
            e
        }
    };
    vec![
        ("fused alone", on(Effect::new().marked_by(entry()))),
        (
            "fused + 1 write",
            on(Effect::new().with(counter()).marked_by(entry())),
        ),
        (
            "separate + 2 writes",
            on(Effect::new().with(counter()).with(entry())),
        ),
    ]
}

fn c(round_trips: usize, transaction_items: usize, write_units: usize, checks: bool) -> Cost {
    Cost {
        round_trips,
        transaction_items,
        write_units,
        checks_other_form: checks,
    }
}

#[tokio::test]
async fn without_the_switch_every_path_costs_what_it_did() {
    let expected = [c(1, 0, 1, false), c(1, 2, 4, false), c(1, 3, 6, false)];
    for ((shape, effect), expected) in shapes(false).into_iter().zip(expected) {
        assert_eq!(cost(effect).await, expected, "{shape}");
    }
}

/// Fused: one more transaction item (the alone case becomes a transaction);
/// separate: conditions only, no item and no round trip.
#[tokio::test]
async fn the_switch_costs_one_check_item_on_the_fused_path_and_nothing_on_the_separate() {
    let expected = [c(1, 2, 4, true), c(1, 3, 6, true), c(1, 3, 6, true)];
    for ((shape, effect), expected) in shapes(true).into_iter().zip(expected) {
        let got = cost(effect).await;
        println!("{shape}: {got:?}");
        assert_eq!(got, expected, "{shape}");
    }
}
