//! SQS scenarios: each step is what a client observes, normalised (bodies,
//! receive counts, attribute names, error codes; ids and timestamps only
//! as facts such as "the id it was sent with").

use std::time::{Duration, UNIX_EPOCH};

use aws_sdk_sqs::types::{
    Message, MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use serde_json::{Value, json};

use super::{Backend, Obs, QueueSpec, code};

fn system_keys(m: &Message) -> Vec<String> {
    let mut keys: Vec<String> = m
        .attributes()
        .map(|a| a.keys().map(|k| k.as_str().to_owned()).collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

fn system(m: &Message, name: MessageSystemAttributeName) -> Option<String> {
    m.attributes().and_then(|a| a.get(&name)).cloned()
}

/// Bodies and receive counts (when asked for) of a receive.
fn seen(ms: &[Message]) -> Value {
    ms.iter()
        .map(|m| {
            json!({
                "body": m.body(),
                "count": system(m, MessageSystemAttributeName::ApproximateReceiveCount),
            })
        })
        .collect()
}

async fn receive(b: &Backend, url: &str, visibility: Option<i32>) -> Vec<Message> {
    b.sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .set_visibility_timeout(visibility)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default()
}

/// A receive expected to find a message: LocalStack ends a visibility
/// timeout up to about a second late (measured: a 1 s timeout ended after
/// 1.3–1.7 s) and moves a message to its DLQ when the timeout after its
/// last receive ends, so on the stack this polls every 250 ms for up to 5 s;
/// on the model the first receive answers.
async fn receive_soon(b: &Backend, url: &str) -> Vec<Message> {
    for _ in 0..20 {
        let r = receive(b, url, None).await;
        if !r.is_empty() {
            return r;
        }
        b.wait(Duration::from_millis(250)).await;
    }
    Vec::new()
}

async fn send(b: &Backend, url: &str, body: &str) -> String {
    b.sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("send")
        .message_id
        .expect("id")
}

async fn change(b: &Backend, url: &str, handle: &str, secs: i32) -> Value {
    match b
        .sqs
        .change_message_visibility()
        .queue_url(url)
        .receipt_handle(handle)
        .visibility_timeout(secs)
        .send()
        .await
    {
        Ok(_) => json!("ok"),
        Err(e) => code(&e),
    }
}

async fn delete(b: &Backend, url: &str, handle: &str) -> Value {
    match b
        .sqs
        .delete_message()
        .queue_url(url)
        .receipt_handle(handle)
        .send()
        .await
    {
        Ok(_) => json!("ok"),
        Err(e) => code(&e),
    }
}

fn handle(ms: &[Message]) -> String {
    ms.first()
        .and_then(|m| m.receipt_handle())
        .expect("a received message")
        .to_owned()
}

/// Visibility timeout, `ChangeMessageVisibility`, receipt handles.
pub async fn visibility(b: Backend) -> Obs {
    let mut o = Obs::default();
    let q = b
        .queue(QueueSpec {
            visibility: 2,
            ..Default::default()
        })
        .await;
    send(&b, &q, "a").await;
    let r1 = receive(&b, &q, None).await;
    o.see("first receive", seen(&r1));
    o.see(
        "receive while in flight",
        seen(&receive(&b, &q, None).await),
    );
    b.wait(Duration::from_secs(2)).await;
    let r2 = receive_soon(&b, &q).await;
    o.see("receive after the timeout", seen(&r2));
    o.see(
        "change to 0 with the newest handle",
        change(&b, &q, &handle(&r2), 0).await,
    );
    let r3 = receive(&b, &q, None).await;
    o.see("receive after change to 0", seen(&r3));
    o.see(
        "delete with the newest handle",
        delete(&b, &q, &handle(&r3)).await,
    );
    o.see(
        "change on a deleted message",
        change(&b, &q, &handle(&r3), 10).await,
    );
    o.see("receive after delete", seen(&receive(&b, &q, None).await));

    // Older receipt handles: `c` received twice, then its first handle
    // used to change its visibility and to delete it.
    send(&b, &q, "c").await;
    let c1 = receive(&b, &q, Some(1)).await;
    b.wait(Duration::from_secs(1)).await;
    let c2 = receive_soon(&b, &q).await;
    o.see("c received twice", seen(&c2));
    o.see(
        "change with an older handle",
        change(&b, &q, &handle(&c1), 0).await,
    );
    o.see(
        "delete with an older handle",
        delete(&b, &q, &handle(&c1)).await,
    );
    o.see(
        "change to 0 with the newest handle after the older handle's delete",
        change(&b, &q, &handle(&c2), 0).await,
    );
    let c3 = receive(&b, &q, None).await;
    o.see("receive after the older handle's delete", seen(&c3));
    for m in &c3 {
        delete(&b, &q, m.receipt_handle().unwrap_or_default()).await;
    }

    // A handle whose visibility timeout has run out (nobody received the
    // message since).
    send(&b, &q, "b").await;
    let r = receive(&b, &q, Some(1)).await;
    o.see("receive b for 1 s", seen(&r));
    // 2 s past the timeout: LocalStack ends one up to ~0.7 s late, and a
    // change while still in flight would hide the message for 30 s.
    b.wait(Duration::from_secs(3)).await;
    o.see(
        "change after the timeout ran out",
        change(&b, &q, &handle(&r), 30).await,
    );
    o.see(
        "receive after the late change",
        seen(&receive(&b, &q, None).await),
    );
    o
}

/// System and message attributes only when asked for; queue attributes.
pub async fn attributes(b: Backend) -> Obs {
    let mut o = Obs::default();
    let q = b
        .queue(QueueSpec {
            visibility: 30,
            ..Default::default()
        })
        .await;
    b.sqs
        .send_message()
        .queue_url(&q)
        .message_body("a")
        .message_attributes(
            "idemq-job-id",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("j1")
                .build()
                .expect("attribute"),
        )
        .message_attributes(
            "other",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("x")
                .build()
                .expect("attribute"),
        )
        .send()
        .await
        .expect("send");
    let shape = |ms: &[Message]| -> Value {
        ms.iter()
            .map(|m| {
                let mut names: Vec<&String> = m
                    .message_attributes()
                    .map(|a| a.keys().collect())
                    .unwrap_or_default();
                names.sort();
                json!({"system": system_keys(m), "message": names})
            })
            .collect()
    };
    let bare = b
        .sqs
        .receive_message()
        .queue_url(&q)
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    o.see("receive asking for nothing", shape(&bare));
    o.see("queue counts while in flight", counts(&b, &q).await);
    change(&b, &q, &handle(&bare), 0).await;
    let sent = b
        .sqs
        .receive_message()
        .queue_url(&q)
        .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
        .message_attribute_names("idemq-job-id")
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    o.see(
        "receive asking for SentTimestamp and one attribute",
        shape(&sent),
    );
    let ts: u128 = system(&sent[0], MessageSystemAttributeName::SentTimestamp)
        .and_then(|t| t.parse().ok())
        .unwrap_or_default();
    let now = idemq::testing::clock::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    o.see(
        "SentTimestamp is epoch milliseconds of the send",
        json!(ts <= now && now - ts < 60_000),
    );
    change(&b, &q, &handle(&sent), 0).await;
    let all = b
        .sqs
        .receive_message()
        .queue_url(&q)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive")
        .messages
        .unwrap_or_default();
    o.see("receive asking for All", shape(&all));
    o.see(
        "receive count on the third receive",
        json!(system(
            &all[0],
            MessageSystemAttributeName::ApproximateReceiveCount
        )),
    );
    change(&b, &q, &handle(&all), 0).await;
    o.see("queue counts when visible", counts(&b, &q).await);
    let attrs = b
        .sqs
        .get_queue_attributes()
        .queue_url(&q)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .attribute_names(QueueAttributeName::MessageRetentionPeriod)
        .attribute_names(QueueAttributeName::MaximumMessageSize)
        .send()
        .await
        .expect("attributes");
    o.see(
        "three queue attributes asked for (MaximumMessageSize by default)",
        json!(attrs.attributes().map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect::<std::collections::BTreeMap<_, _>>()
        })),
    );
    o
}

async fn counts(b: &Backend, q: &str) -> Value {
    let a = b
        .sqs
        .get_queue_attributes()
        .queue_url(q)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("attributes");
    let get = |n: QueueAttributeName| a.attributes().and_then(|a| a.get(&n)).cloned();
    json!([
        get(QueueAttributeName::ApproximateNumberOfMessages),
        get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
    ])
}

/// `RedrivePolicy` on the receive past `maxReceiveCount`, the DLQ's
/// attributes, `ListDeadLetterSourceQueues`, and a move task back.
pub async fn redrive(b: Backend) -> Obs {
    let mut o = Obs::default();
    let dlq = b
        .queue(QueueSpec {
            visibility: 30,
            ..Default::default()
        })
        .await;
    let src = b
        .queue(QueueSpec {
            visibility: 1,
            redrive: Some((dlq.clone(), 2)),
            ..Default::default()
        })
        .await;
    let (src_arn, dlq_arn) = (b.arn(&src).await, b.arn(&dlq).await);
    let policy = b
        .sqs
        .get_queue_attributes()
        .queue_url(&src)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .expect("attributes");
    let policy: Value = policy
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default();
    o.see(
        "RedrivePolicy read back",
        json!({
            "maxReceiveCount": policy["maxReceiveCount"],
            "target is the DLQ": policy["deadLetterTargetArn"] == dlq_arn.as_str(),
        }),
    );
    let id = send(&b, &src, "a").await;
    let r1 = receive(&b, &src, None).await;
    o.see("receive 1", seen(&r1));
    b.wait(Duration::from_secs(1)).await;
    o.see("receive 2", seen(&receive_soon(&b, &src).await));
    b.wait(Duration::from_millis(2500)).await;
    o.see(
        "receive 3 (past maxReceiveCount)",
        seen(&receive(&b, &src, None).await),
    );
    let sources = b
        .sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .expect("list sources");
    o.see(
        "ListDeadLetterSourceQueues",
        json!(
            sources
                .queue_urls()
                .iter()
                .map(|u| u == &src)
                .collect::<Vec<_>>()
        ),
    );
    let letters = receive_soon(&b, &dlq).await;
    let sent_at = |ms: &[Message]| system(&ms[0], MessageSystemAttributeName::SentTimestamp);
    o.see(
        "the dead letter",
        letters
            .iter()
            .map(|m| {
                json!({
                    "body": m.body(),
                    "count": system(m, MessageSystemAttributeName::ApproximateReceiveCount),
                    "same MessageId": m.message_id() == Some(id.as_str()),
                    "same SentTimestamp": sent_at(&letters) == sent_at(&r1),
                    "DeadLetterQueueSourceArn is the source":
                        system(m, MessageSystemAttributeName::DeadLetterQueueSourceArn).as_deref() == Some(src_arn.as_str()),
                })
            })
            .collect(),
    );
    if letters.is_empty() {
        return o;
    }
    change(&b, &dlq, &handle(&letters), 0).await;
    let start = b
        .sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&src_arn)
        .send()
        .await;
    o.see(
        "StartMessageMoveTask",
        match &start {
            Ok(s) => json!({"handle": s.task_handle().is_some()}),
            Err(e) => code(e),
        },
    );
    if start.is_err() {
        return o;
    }
    let mut last = Value::Null;
    for _ in 0..40 {
        let tasks = b
            .sqs
            .list_message_move_tasks()
            .source_arn(&dlq_arn)
            .send()
            .await
            .expect("list tasks");
        let t = &tasks.results()[0];
        last = json!({
            "Status": t.status(),
            "moved": t.approximate_number_of_messages_moved(),
            "DestinationArn is the source": t.destination_arn() == Some(src_arn.as_str()),
        });
        if t.status() != Some("RUNNING") {
            break;
        }
        b.wait(Duration::from_millis(250)).await;
    }
    o.see("ListMessageMoveTasks once done", last);
    let moved = receive_soon(&b, &src).await;
    o.see(
        "the moved message",
        moved
            .iter()
            .map(|m| {
                json!({
                    "body": m.body(),
                    "new MessageId": m.message_id() != Some(id.as_str()),
                    "count": system(m, MessageSystemAttributeName::ApproximateReceiveCount),
                })
            })
            .collect(),
    );
    o
}

fn attr(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .expect("attribute")
}

/// `SendMessageBatch`'s per-entry failures and `SendMessage`'s errors.
pub async fn send_limits(b: Backend) -> Obs {
    let mut o = Obs::default();
    let q = b
        .queue(QueueSpec {
            visibility: 30,
            max_message_size: Some(1024),
            ..Default::default()
        })
        .await;
    let entry = |id: &str, body: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(body)
    };
    let mut eleven = entry("eleven-attributes", "x");
    for i in 0..11 {
        eleven = eleven.message_attributes(format!("a{i}"), attr("v"));
    }
    let entries = vec![
        entry("fine", "fine").build().expect("entry"),
        entry("bad-body", "a\u{1}b").build().expect("entry"),
        entry("bad-body-fffe", "a\u{fffe}b").build().expect("entry"),
        entry("bad-attribute", "x")
            .message_attributes("e", attr("a\u{1}b"))
            .build()
            .expect("entry"),
        eleven.build().expect("entry"),
        entry("ten-attributes", "x")
            .set_message_attributes(Some(
                (0..10).map(|i| (format!("a{i}"), attr("v"))).collect(),
            ))
            .build()
            .expect("entry"),
        entry("body-too-big", &"x".repeat(1025))
            .build()
            .expect("entry"),
        entry("body-and-attribute-too-big", &"x".repeat(1000))
            .message_attributes("big", attr(&"y".repeat(100)))
            .build()
            .expect("entry"),
    ];
    let out = b
        .sqs
        .send_message_batch()
        .queue_url(&q)
        .set_entries(Some(entries))
        .send()
        .await;
    match out {
        Ok(out) => {
            let mut ok: Vec<&str> = out.successful().iter().map(|s| s.id()).collect();
            ok.sort();
            o.see("batch successful", json!(ok));
            let mut failed: Vec<Value> = out
                .failed()
                .iter()
                .map(|f| json!({"Id": f.id(), "Code": f.code(), "SenderFault": f.sender_fault()}))
                .collect();
            failed.sort_by_key(|f| f["Id"].as_str().unwrap_or_default().to_owned());
            for f in failed {
                o.see(
                    &format!("batch failed {}", f["Id"].as_str().unwrap_or_default()),
                    f,
                );
            }
        }
        Err(e) => o.see("batch", code(&e)),
    }
    for (step, body) in [
        ("send with a bad character", "a\u{1}b".to_owned()),
        ("send of a body too big", "x".repeat(1025)),
    ] {
        let r = b
            .sqs
            .send_message()
            .queue_url(&q)
            .message_body(body)
            .send()
            .await;
        o.see(step, r.map(|_| json!("ok")).unwrap_or_else(|e| code(&e)));
    }
    o
}
