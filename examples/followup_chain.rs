//! A chain of jobs, each started if and only if the one before commits:
//! charge an order, then send its receipt.
//!
//! The `charge` job records the charge (`order#<id>`, which is also the
//! job's dedup marker) and adds the `receipt` job as a follow-up
//! ([`Effect::then_send`]): idemq stores it in the marker in the same write,
//! sends it after the commit and before the acknowledgement, and re-sends
//! it from the marker if the worker dies in between. A charge that is
//! rejected or fails sends no receipt. The receipt's job id,
//! `<order_id>/receipt`, is stable, so however often it is sent, its
//! consumer (this same handler) records it once.
//!
//! Run it as a local worker: `IDEMQ_TABLE=t cargo run --example
//! followup_chain -- --queue-url URL`, then send
//! `{"step": "charge", "order_id": "o-1", "amount": 25}` with job id `o-1`
//! (`idemq send`). Receipts go to `RECEIPTS_QUEUE_URL`, or to the queue the
//! charge came from.

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::followup::FollowUp;
use idemq::store::dynamodb::Item;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::{Handler, JobError, JobMeta};
use serde::{Deserialize, Serialize};

/// The jobs of the chain.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Charge the order; then send its receipt.
    Charge { order_id: String, amount: i64 },
    /// Record that the receipt was sent (a real one would call an e-mail
    /// API with `meta.downstream_key("email")` as its idempotency key).
    Receipt { order_id: String, amount: i64 },
}

pub struct Orders {
    /// The table the orders and receipts go to (`IDEMQ_TABLE`).
    pub table: String,
}

impl Handler for Orders {
    type Job = Step;
    type Effect = Effect;

    async fn handle(&self, step: Step, meta: JobMeta) -> Result<Effect, JobError> {
        match step {
            Step::Charge { order_id, amount } => {
                let order = Write::put(
                    &self.table,
                    Key::string("pk", format!("order#{order_id}")),
                    Item::from([
                        ("status".to_string(), AttributeValue::S("charged".into())),
                        ("amount".to_string(), AttributeValue::N(amount.to_string())),
                    ]),
                );
                let queue = std::env::var("RECEIPTS_QUEUE_URL").unwrap_or(meta.queue_url);
                let receipt = FollowUp::new(
                    queue,
                    format!("{order_id}/receipt"),
                    &Step::Receipt { order_id, amount },
                )
                .map_err(JobError::permanent)?;
                Ok(Effect::new().marked_by(order).then_send(receipt))
            }
            Step::Receipt { order_id, amount } => Ok(Effect::new().marked_by(Write::put(
                &self.table,
                Key::string("pk", format!("receipt#{order_id}")),
                Item::from([("amount".to_string(), AttributeValue::N(amount.to_string()))]),
            ))),
        }
    }
}

#[allow(dead_code)] // Unused where a test includes this file.
#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    let table = std::env::var("IDEMQ_TABLE").unwrap_or_default();
    idemq::run(Orders { table }).await
}
