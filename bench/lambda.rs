//! The two Rust peers of the peer benchmark (`bench/peers/`), as one Lambda
//! function: the `bootstrap` that `make bench` builds in release, starts
//! under a Lambda Runtime API and measures.
//!
//! - `BENCH_PEER=idemq`: the ledger of `examples/ledger.rs` through
//!   [`idemq::run`], exactly what a user deploys (the Lambda host, since
//!   `AWS_LAMBDA_RUNTIME_API` is set): its entry is its marker
//!   ([`idemq::store::dynamodb::Effect::marked_by`]). Concurrency: `IDEMQ_CONCURRENCY`.
//! - `BENCH_PEER=idemq-separate`: the same effect with idemq's own marker
//!   item instead (what every idemq job cost before the fused marker).
//! - `BENCH_PEER=plain`: the ceiling. The same two writes (credit the
//!   account, record the entry) in one `TransactWriteItems` with no marker,
//!   so a redelivered job is applied twice; a failed job is reported in
//!   `batchItemFailures`, nothing else (no backoff, no failure record).
//!   Same concurrency knob, same SDK clients built once.
//!
//! `BENCH_SHAPE=item` (default `ledger`) makes every peer do a one-item job
//! instead: record the entry only (idemq: the entry is the marker, one
//! conditional `PutItem`; plain: one `PutItem`).
//!
//! One binary for all, so the release build (LTO) is done once; the plain
//! peer adds a few kilobytes to what is measured as the bootstrap's size.

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use futures_util::{StreamExt, stream};
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::{Handler, JobError, JobMeta};
use lambda_runtime::{LambdaEvent, service_fn};

#[allow(dead_code)] // Only `Ledger` and `Transfer` are used here.
#[path = "../examples/ledger.rs"]
mod ledger;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let item = match std::env::var("BENCH_SHAPE").as_deref() {
        Ok("item") => true,
        Ok("ledger") | Err(_) => false,
        other => return Err(format!("BENCH_SHAPE must be ledger or item, not {other:?}").into()),
    };
    let shaped = |separate| Shaped {
        ledger: ledger::Ledger::from_env(),
        item,
        separate,
    };
    match std::env::var("BENCH_PEER").as_deref() {
        Ok("idemq") if !item => rt.block_on(idemq::run(ledger::Ledger::from_env())),
        Ok("idemq") => rt.block_on(idemq::run(shaped(false))),
        Ok("idemq-separate") => rt.block_on(idemq::run(shaped(true))),
        Ok("plain") => rt.block_on(plain(item)),
        other => {
            Err(format!("BENCH_PEER must be idemq, idemq-separate or plain, not {other:?}").into())
        }
    }
}

/// The ledger's job in another shape: the one-item job (`item`), and/or
/// with idemq's separate marker item instead of the fused one (`separate`).
struct Shaped {
    ledger: ledger::Ledger,
    item: bool,
    separate: bool,
}

impl Handler for Shaped {
    type Job = ledger::Transfer;
    type Effect = Effect;

    async fn handle(&self, t: ledger::Transfer, meta: JobMeta) -> Result<Effect, JobError> {
        let effect = if self.item {
            Effect::new().marked_by(entry(&self.ledger.table, &t))
        } else {
            self.ledger.handle(t, meta).await?
        };
        if !self.separate {
            return Ok(effect);
        }
        // The same writes, the fused Put a plain one, with idemq's marker.
        Ok(effect.writes().iter().cloned().collect())
    }

    /// The ledger's declaration: every effect is in the `Effect`.
    fn look_up(&self) -> idemq::LookUp {
        self.ledger.look_up()
    }
}

/// The ledger's entry for transfer `t`, as `examples/ledger.rs` writes it.
fn entry(table: &str, t: &ledger::Transfer) -> Write {
    Write::put(
        table,
        Key::string("pk", format!("entry#{}", t.transfer_id)),
        Item::from([
            ("account".to_string(), AttributeValue::S(t.account.clone())),
            (
                "amount".to_string(),
                AttributeValue::N(t.amount.to_string()),
            ),
        ]),
    )
}

struct Plain {
    ddb: aws_sdk_dynamodb::Client,
    table: String,
    concurrency: usize,
    /// The one-item job: the entry alone, one `PutItem`.
    item: bool,
}

async fn plain(item: bool) -> Result<(), Error> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let plain = Arc::new(Plain {
        ddb: aws_sdk_dynamodb::Client::new(&sdk),
        table: std::env::var("IDEMQ_TABLE")?,
        concurrency: std::env::var("IDEMQ_CONCURRENCY")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(10),
        item,
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let plain = Arc::clone(&plain);
        async move { Ok::<_, Error>(plain.batch(event.payload).await) }
    }))
    .await
}

impl Plain {
    async fn batch(&self, event: SqsEvent) -> SqsBatchResponse {
        let failed: Vec<String> = stream::iter(&event.records)
            .map(|m| async move { (m, self.apply(m).await) })
            .buffer_unordered(self.concurrency)
            .filter_map(|(m, r)| async move {
                r.err().map(|_| m.message_id.clone().unwrap_or_default())
            })
            .collect()
            .await;
        let mut response = SqsBatchResponse::default();
        for id in failed {
            let mut f = BatchItemFailure::default();
            f.item_identifier = id;
            response.batch_item_failures.push(f);
        }
        response
    }

    async fn apply(&self, m: &SqsMessage) -> Result<(), Error> {
        let t: ledger::Transfer = serde_json::from_str(m.body.as_deref().unwrap_or_default())?;
        let amount = AttributeValue::N(t.amount.to_string());
        let update = Update::builder()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(format!("account#{}", t.account)))
            .update_expression("ADD balance :amount")
            .expression_attribute_values(":amount", amount.clone())
            .build()?;
        let put = Put::builder()
            .table_name(&self.table)
            .item("pk", AttributeValue::S(format!("entry#{}", t.transfer_id)))
            .item("account", AttributeValue::S(t.account))
            .item("amount", amount)
            .build()?;
        if self.item {
            self.ddb
                .put_item()
                .table_name(put.table_name())
                .set_item(Some(put.item().clone()))
                .send()
                .await?;
            return Ok(());
        }
        self.ddb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .send()
            .await?;
        Ok(())
    }
}
