//! End to end: the harness as the event source mapping.

use super::*;

/// The harness as the event source mapping: the producer sends the jobs,
/// then receive up to 10, invoke, delete what succeeded, until done.
pub(crate) async fn e2e(b: &Bench, peer: Peer) -> Result<EndToEnd, Error> {
    b.set_delay(0);
    let r = &b.resources[&peer];
    let (mut inst, _) = b.spawn(peer, 10, "e2e").await?;
    b.warm(peer, &mut inst).await?;
    let n = b.args.e2e_jobs;
    let mut jobs = Jobs::new(format!("{}-e2e-{}", b.run, peer.name()));
    let all = jobs.batch(n);
    let sqs0 = b.sqs_proxy.counts();
    for chunk in all.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let attr = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(&j.id)
                    .build()?;
                Ok(SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(j.body())
                    .message_attributes(idemq::job::JOB_ID_ATTRIBUTE, attr)
                    .build()?)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        b.sqs_via_proxy
            .send_message_batch()
            .queue_url(&r.queue_url)
            .set_entries(Some(entries))
            .send()
            .await?;
    }
    let sqs1 = b.sqs_proxy.counts();
    let ddb1 = b.ddb_proxy.counts();
    let start = Instant::now();
    let (mut done, mut empty) = (0usize, 0);
    while done < n && empty < 5 {
        let out = b
            .sqs_via_proxy
            .receive_message()
            .queue_url(&r.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await?;
        let msgs = out.messages();
        if msgs.is_empty() {
            empty += 1;
            continue;
        }
        let records: Vec<Value> = msgs
            .iter()
            .map(|m| {
                let attrs: serde_json::Map<String, Value> = m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), Value::String(v.clone())))
                            .collect()
                    })
                    .unwrap_or_default();
                let mattrs: serde_json::Map<String, Value> = m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| {
                                (
                                    k.clone(),
                                    json!({"stringValue": v.string_value(), "stringListValues": [], "binaryListValues": [], "dataType": v.data_type()}),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attrs,
                    "messageAttributes": mattrs,
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": r.queue_arn,
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        let (answer, _) = inst
            .invoke(serde_json::to_vec(&json!({ "Records": records }))?)
            .await?;
        let failed: Vec<String> = match &answer {
            Ok(body) => serde_json::from_slice::<Value>(body)?["batchItemFailures"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            Err(_) => msgs
                .iter()
                .filter_map(|m| m.message_id().map(str::to_owned))
                .collect(),
        };
        let entries = msgs
            .iter()
            .filter(|m| !failed.iter().any(|f| Some(f.as_str()) == m.message_id()))
            .enumerate()
            .map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        done += entries.len();
        if !entries.is_empty() {
            b.sqs_via_proxy
                .delete_message_batch()
                .queue_url(&r.queue_url)
                .set_entries(Some(entries))
                .send()
                .await?;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let producer = diff(&sqs1, &sqs0);
    let consume = diff(&b.sqs_proxy.counts(), &sqs1);
    let ddb = diff(&b.ddb_proxy.counts(), &ddb1);
    let esm: u64 = consume
        .iter()
        .filter(|(op, _)| matches!(op.as_str(), "ReceiveMessage" | "DeleteMessageBatch"))
        .map(|(_, c)| c.requests)
        .sum();
    let per = |x: u64| x as f64 / done.max(1) as f64;
    let mut sqs_ops = producer.clone();
    for (op, c) in &consume {
        let e = sqs_ops.entry(op.clone()).or_default();
        e.requests += c.requests;
        e.errors += c.errors;
    }
    let e = EndToEnd {
        peer,
        jobs: done as u64,
        jobs_per_s: done as f64 / wall,
        producer_sqs_per_job: per(total(&producer).requests),
        esm_sqs_per_job: per(esm),
        function_sqs_per_job: per(total(&consume).requests - esm),
        ddb_requests_per_job: per(total(&ddb).requests),
        sqs_ops,
    };
    println!(
        "  {:<10} {} of {n} jobs, {:.0} jobs/s; SQS per job: producer {:.3}, event source mapping {:.3}, function {:.3}; DynamoDB {:.3}/job",
        peer.name(),
        e.jobs,
        e.jobs_per_s,
        e.producer_sqs_per_job,
        e.esm_sqs_per_job,
        e.function_sqs_per_job,
        e.ddb_requests_per_job
    );
    if done < n {
        return Err(format!("{}: only {done} of {n} jobs went through", peer.name()).into());
    }
    Ok(e)
}
