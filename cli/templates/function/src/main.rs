//! {{name}}: records orders from an SQS queue, each exactly once.
//!
//! A job is an order, `{"order_id": "o-1", "customer": "alice",
//! "amount_cents": 1250}`, sent with its order id as the job id. Its effect
//! goes to this function's own table (ORDERS_TABLE): the order's item and
//! the customer's running total, committed in one DynamoDB transaction.
//! The order's item is also the job's dedup marker, so a redelivered order
//! changes nothing. An order with a non-positive amount is dead-lettered at
//! once, with the reason; a failure of DynamoDB itself is retried with
//! backoff, and dead-lettered by SQS after maxReceiveCount receives.

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::Item;
use idemq::{Handler, JobError, JobMeta};
use idemq::store::dynamodb::{Effect, Key, Write};
use serde::Deserialize;

/// One job: the body of an SQS message.
#[derive(Debug, Deserialize)]
struct Order {
    order_id: String,
    customer: String,
    amount_cents: i64,
}

struct Orders {
    /// The function's own table (partition key `pk`, a string).
    table: String,
}

impl Handler for Orders {
    type Job = Order;
    type Effect = Effect;

    async fn handle(&self, order: Order, _meta: JobMeta) -> Result<Effect, JobError> {
        if order.amount_cents <= 0 {
            // Permanent: no retry will make it valid; to the DLQ at once.
            return Err(JobError::permanent("the amount is not positive"));
        }
        let amount = AttributeValue::N(order.amount_cents.to_string());
        let total = Write::update(
            &self.table,
            Key::string("pk", format!("customer#{}", order.customer)),
            "ADD total_cents :amount, orders :one",
        )
        .value(":amount", amount.clone())
        .value(":one", AttributeValue::N("1".into()));
        let item = Item::from([
            ("customer".to_string(), AttributeValue::S(order.customer)),
            ("amount_cents".to_string(), amount),
        ]);
        let recorded = Write::put(
            &self.table,
            Key::string("pk", format!("order#{}", order.order_id)),
            item,
        );
        Ok(Effect::new().with(total).marked_by(recorded))
    }
}

#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    let table = std::env::var("ORDERS_TABLE").unwrap_or_else(|_| "orders".into());
    idemq::run(Orders { table }).await
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;
    use idemq::store::dynamodb::Key;
    use idemq::testing::{TableKey, TestKit};
    use serde_json::json;

    use super::Orders;

    /// A customer's item in the function's own table.
    fn customer(kit: &TestKit<Orders>, name: &str) -> idemq::store::dynamodb::Item {
        let key = Key::string("pk", format!("customer#{name}"));
        kit.dynamodb().get_item("orders", &key).unwrap().expect("the customer's item")
    }

    /// An SQS event as Lambda delivers it: one record per (job id, body).
    fn event(jobs: &[(&str, &str)]) -> String {
        let records: Vec<_> = jobs
            .iter()
            .enumerate()
            .map(|(i, (id, body))| {
                json!({
                    "messageId": format!("m-{i}"),
                    "receiptHandle": format!("r-{i}"),
                    "body": body,
                    "attributes": {"ApproximateReceiveCount": "1"},
                    "messageAttributes": {
                        "idemq-job-id": {"stringValue": id, "dataType": "String"}
                    },
                    "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:orders",
                })
            })
            .collect();
        json!({ "Records": records }).to_string()
    }

    #[tokio::test]
    async fn each_order_counts_once_and_a_bad_one_is_dead_lettered() {
        let kit = TestKit::new(Orders { table: "orders".into() }, "idemq");
        kit.dynamodb()
            .create_table("orders", TableKey::partition("pk"))
            .unwrap();
        let o1 = r#"{"order_id":"o-1","customer":"alice","amount_cents":1250}"#;
        let bad = r#"{"order_id":"o-2","customer":"alice","amount_cents":-5}"#;
        // o-1 twice (a redelivery), and an order no retry can fix.
        let run = kit
            .run_json(&event(&[("o-1", o1), ("o-1", o1), ("o-2", bad)]))
            .await
            .unwrap();

        assert!(run.failed_ids().is_empty(), "nothing left to retry");
        assert_eq!(run.dead_letters.len(), 1);
        assert_eq!(run.dead_letters[0].attribute("idemq-job-id"), Some("o-2"));
        let alice = customer(&kit, "alice");
        assert_eq!(alice["total_cents"], AttributeValue::N("1250".into()));
        assert_eq!(alice["orders"], AttributeValue::N("1".into()));

        // The same batch again, as SQS may redeliver it: nothing changes.
        kit.run_json(&event(&[("o-1", o1)])).await.unwrap();
        assert_eq!(customer(&kit, "alice")["total_cents"], AttributeValue::N("1250".into()));
    }
}
