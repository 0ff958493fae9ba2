//! The plain consumer of the bootstrap-size comparison (`make bench-size`,
//! bench/size.sh): examples/ledger.rs's work written against the SDK crates
//! alone, the least a Lambda function doing that work links.
//!
//! Per SQS message: the transfer `{"transfer_id", "account", "amount"}` is
//! parsed, an amount ≤ 0 is refused, and the two ledger writes (`ADD
//! balance :amount` on `account#<account>`, the entry `entry#<transfer_id>`)
//! go in one `TransactWriteItems`, with no dedup marker: a redelivered
//! transfer is applied twice. Ten messages at a time (`buffer_unordered`).
//! A failed message is reported in `batchItemFailures` after one
//! `ChangeMessageVisibility` that delays its next receive (2^receives
//! seconds, at most 15 minutes). Logs are JSON lines on stdout.
//!
//! It is built and measured, never run: the size is the point.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use futures_util::{StreamExt, stream};
use lambda_runtime::{LambdaEvent, service_fn};
use serde::Deserialize;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Deserialize)]
struct Transfer {
    transfer_id: String,
    account: String,
    amount: i64,
}

struct Plain {
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
    table: String,
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    tracing_subscriber::fmt().json().without_time().init();
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let plain = Plain {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        sqs: aws_sdk_sqs::Client::new(&sdk),
        table: std::env::var("IDEMQ_TABLE")?,
    };
    let plain = &plain;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<_, Error>(plain.batch(event.payload).await)
    }))
    .await
}

impl Plain {
    async fn batch(&self, event: SqsEvent) -> SqsBatchResponse {
        let failed: Vec<String> = stream::iter(&event.records)
            .map(|m| async move { (m, self.apply(m).await) })
            .buffer_unordered(10)
            .filter_map(|(m, result)| async move {
                let e = result.err()?;
                let id = m.message_id.clone().unwrap_or_default();
                tracing::warn!(message_id = %id, error = %e, "job failed");
                if let Err(e) = self.delay(m).await {
                    tracing::warn!(message_id = %id, error = %e, "visibility not changed");
                }
                Some(id)
            })
            .collect()
            .await;
        let mut response = SqsBatchResponse::default();
        for id in failed {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            response.batch_item_failures.push(failure);
        }
        response
    }

    async fn apply(&self, m: &SqsMessage) -> Result<(), Error> {
        let t: Transfer = serde_json::from_str(m.body.as_deref().unwrap_or_default())?;
        if t.amount <= 0 {
            return Err(format!("amount {} is not positive", t.amount).into());
        }
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
        self.dynamodb
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().put(put).build())
            .send()
            .await?;
        tracing::info!(transfer_id = %t.transfer_id, "applied");
        Ok(())
    }

    /// The failed message's next receive, 2^receives seconds from now.
    async fn delay(&self, m: &SqsMessage) -> Result<(), Error> {
        let receives: u32 = m
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let seconds = 2i32.saturating_pow(receives).min(900);
        self.sqs
            .change_message_visibility()
            .queue_url(queue_url(m.event_source_arn.as_deref().unwrap_or_default())?)
            .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
            .visibility_timeout(seconds)
            .send()
            .await?;
        Ok(())
    }
}

/// `arn:aws:sqs:<region>:<account>:<name>` → the queue's URL.
fn queue_url(arn: &str) -> Result<String, Error> {
    match arn.split(':').collect::<Vec<_>>()[..] {
        ["arn", _, "sqs", region, account, name] => {
            Ok(format!("https://sqs.{region}.amazonaws.com/{account}/{name}"))
        }
        _ => Err(format!("not an SQS queue ARN: {arn}").into()),
    }
}
