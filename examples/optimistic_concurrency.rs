//! Optimistic concurrency: read a value with its version, compute, write
//! it back only if the version is unchanged — and when another job got
//! there first, run again instead of dead-lettering.
//!
//! A job adjusts the stock of a product: `{"order_id", "sku", "delta"}`
//! (sent with `idemq-job-id = order_id`). The handler reads `stock#<sku>`
//! (`stock` and `version`, both numbers) with a consistent read, and
//! returns a Put of `stock + delta`, `version + 1`, guarded by
//! [`Write::if_version`]: `version = :read`, where a missing version
//! (a new item, or one written before versions) reads as 0 and passes
//! the guard while it is still missing. The guard is optimistic
//! ([`Write::optimistic`]): its failing is a lost race, not a business
//! "no": idemq runs the handler again (re-reading) a few times in
//! the same invocation (`IDEMQ_CONTENTION_RETRIES`, default 3), then backs
//! off through SQS like any transient failure. Lost races are counted in
//! the `JobsContended` metric.
//!
//! The business rule (stock may not go negative) is decided by the handler
//! on the value it read: a permanent error, so the DLQ. Its read is
//! trustworthy because the write only commits if that version is still
//! the current one.
//!
//! The order's own item (`order#<order_id>`) is the job's dedup marker
//! ([`Effect::marked_by`]): a redelivered order finds it and is a
//! duplicate, even if the stock has moved since.
//!
//! Run it as a local worker: `IDEMQ_TABLE=t cargo run --example
//! optimistic_concurrency -- --queue-url URL`; on Lambda the same binary
//! answers SQS events.

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::store::dynamodb::{Item, read_version};
use idemq::{Handler, JobError, JobMeta};
use serde::Deserialize;

/// One stock adjustment: a reservation (`delta < 0`) or a restock.
#[derive(Debug, Deserialize)]
pub struct Adjust {
    pub order_id: String,
    pub sku: String,
    pub delta: i64,
}

/// Stock counters in `table` (keyed by `pk`), read with `dynamodb`.
pub struct Inventory {
    pub table: String,
    pub dynamodb: aws_sdk_dynamodb::Client,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("not enough stock of {sku}: {stock} left, {delta} asked")]
    NotEnough { sku: String, stock: i64, delta: i64 },
    #[error("stock item of {sku} has no numeric {attribute}")]
    Malformed {
        sku: String,
        attribute: &'static str,
    },
}

impl Handler for Inventory {
    type Job = Adjust;
    type Effect = Effect;

    async fn handle(&self, job: Adjust, _meta: JobMeta) -> Result<Effect, JobError> {
        let key = Key::string("pk", format!("stock#{}", job.sku));
        // Consistent: an eventually consistent read could return an old
        // version, which would only lose the race.
        let read = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.as_item().clone()))
            .consistent_read(true)
            .send()
            .await?; // A failed read is transient: retried with backoff.
        let number = |item: &Item, attribute: &'static str| {
            item.get(attribute)
                .and_then(|v| v.as_n().ok())
                .and_then(|n| n.parse::<i64>().ok())
                .ok_or_else(|| {
                    JobError::permanent(InventoryError::Malformed {
                        sku: job.sku.clone(),
                        attribute,
                    })
                })
        };
        // A missing version is 0: the stock item may predate versioning.
        let version = read_version(read.item(), "version").map_err(JobError::permanent)?;
        let stock = match read.item() {
            Some(item) => number(item, "stock")?,
            None => 0,
        };
        let left = stock + job.delta;
        if left < 0 {
            return Err(JobError::permanent(InventoryError::NotEnough {
                sku: job.sku,
                stock,
                delta: job.delta,
            }));
        }
        let counter = Item::from([
            ("stock".to_string(), AttributeValue::N(left.to_string())),
            (
                "version".to_string(),
                AttributeValue::N((version + 1).to_string()),
            ),
        ]);
        // `version = :read`, or for version 0 also "no version yet" (a
        // new item, or one written before versions).
        let write = Write::put(&self.table, key, counter).if_version("version", version);
        let order = Item::from([
            ("sku".to_string(), AttributeValue::S(job.sku)),
            (
                "delta".to_string(),
                AttributeValue::N(job.delta.to_string()),
            ),
        ]);
        Ok(Effect::new().with(write).marked_by(Write::put(
            &self.table,
            Key::string("pk", format!("order#{}", job.order_id)),
            order,
        )))
    }
}

#[allow(dead_code)] // Unused where a test includes this file for `Inventory`.
#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    idemq::run(Inventory {
        table: std::env::var("IDEMQ_TABLE").unwrap_or_default(),
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
    })
    .await
}
