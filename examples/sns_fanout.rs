//! SNS fan-out, each job applied once per subscribed queue.
//!
//! An order is published once to a topic; every queue subscribed to it
//! (raw message delivery off) receives it wrapped in an SNS notification.
//! This consumer credits loyalty points for it. A producer that publishes
//! the same order again (a retry after a timeout) makes SNS mint a new
//! `MessageId`, `Timestamp` and `Signature`, but with `IDEMQ_ENVELOPE=sns`
//! idemq hashes the inner message only and takes the job id from the
//! `idemq-job-id` message attribute that `TopicProducer` sets: the second
//! copy is a duplicate, not a conflict and not a second credit.
//!
//! Consumer (a local worker; on Lambda the same binary answers SQS events):
//! `IDEMQ_ENVELOPE=sns IDEMQ_TABLE=t cargo run --example sns_fanout -- --queue-url URL`.
//! Publisher: [`publish`]. Wiring a queue to a topic: [`subscribe`].

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::topic::TopicProducer;
use idemq::{Handler, JobError, JobMeta};
use serde::{Deserialize, Serialize};

/// The job: what the producer publishes, and what the handler receives
/// (the SNS `Message`, not the notification around it).
#[derive(Debug, Serialize, Deserialize)]
pub struct OrderPlaced {
    pub order_id: String,
    pub customer: String,
    pub points: i64,
}

/// Credits `points` to `customer#<customer>` in `table`.
pub struct LoyaltyPoints {
    pub table: String,
}

impl Handler for LoyaltyPoints {
    type Job = OrderPlaced;
    type Effect = Effect;

    async fn handle(&self, order: OrderPlaced, _meta: JobMeta) -> Result<Effect, JobError> {
        Ok(Effect::new().with(
            Write::update(
                &self.table,
                Key::string("pk", format!("customer#{}", order.customer)),
                "ADD points :p",
            )
            .value(":p", AttributeValue::N(order.points.to_string())),
        ))
    }
}

/// Publishes an order with `idemq-job-id` = its order id: however often it
/// is published, each subscribed consumer applies it once.
pub async fn publish(
    topic: &TopicProducer,
    order: &OrderPlaced,
) -> Result<String, idemq::producer::SendError> {
    topic.send(&order.order_id, order).await
}

/// Subscribes the queue to the topic with raw message delivery off (the
/// default: what `IDEMQ_ENVELOPE=sns` expects), after letting the topic
/// send to the queue (SNS needs `sqs:SendMessage` on the queue's policy:
/// <https://docs.aws.amazon.com/sns/latest/dg/subscribe-sqs-queue-to-sns-topic.html>).
/// Returns the subscription ARN. (Infrastructure code would do this in its
/// template; it is here so the example runs end to end.)
pub async fn subscribe(
    sns: &aws_sdk_sns::Client,
    sqs: &aws_sdk_sqs::Client,
    topic_arn: &str,
    queue_url: &str,
) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn))
        .cloned()
        .ok_or("the queue has no QueueArn")?;
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}}
        }]
    });
    sqs.set_queue_attributes()
        .queue_url(queue_url)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::Policy,
            policy.to_string(),
        )
        .send()
        .await?;
    let out = sns
        .subscribe()
        .topic_arn(topic_arn)
        .protocol("sqs")
        .endpoint(queue_arn)
        .return_subscription_arn(true)
        .send()
        .await?;
    Ok(out.subscription_arn().unwrap_or_default().to_owned())
}

#[allow(dead_code)] // Unused where a test includes this file.
#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    // IDEMQ_ENVELOPE=sns in the environment (the function's configuration
    // on Lambda): the job is the SNS Message inside each notification.
    idemq::run(LoyaltyPoints {
        table: std::env::var("IDEMQ_TABLE").unwrap_or_default(),
    })
    .await
}
