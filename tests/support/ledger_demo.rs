//! Drives `make demo`: sends a few hundred ledger transfers with the
//! troubles of real life, then checks what the ledger worker made of them.
//!
//! ```sh
//! ledger_demo send  QUEUE_URL STATE_FILE   # send, and write the expected sums
//! ledger_demo check TABLE DLQ_URL STATE_FILE
//! ```
//!
//! The transfers: 300 to six accounts, 60 of them sent twice (a producer
//! that retried), one account (`acct-outage`) whose downstream is down, and
//! 6 malformed jobs (amount 0, or no account).

use std::collections::{BTreeMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::producer::Job;
use idemq::producer::Producer;

type Error = Box<dyn std::error::Error>;

const OUTAGE: &str = "acct-outage";

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["send", queue_url, state] => send(&sdk, queue_url, state).await,
        ["check", table, dlq_url, state] => check(&sdk, table, dlq_url, state).await,
        _ => Err(
            "usage: ledger_demo send QUEUE_URL STATE_FILE | check TABLE DLQ_URL STATE_FILE".into(),
        ),
    }
}

async fn send(sdk: &aws_config::SdkConfig, queue_url: &str, state: &str) -> Result<(), Error> {
    let run: u32 = rand::random();
    let accounts = ["acct-a", "acct-b", "acct-c", "acct-d", "acct-e", OUTAGE];
    let mut messages = Vec::new();
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..300 {
        let account = accounts[i % accounts.len()];
        let id = format!("tr-{run}-{i}");
        let amount = (i as i64 * 7) % 90 + 10;
        let body = serde_json::json!({"transfer_id": id, "account": account, "amount": amount})
            .to_string();
        if account != OUTAGE {
            *expected.entry(account.to_owned()).or_default() += amount;
        }
        messages.push((id.clone(), body.clone()));
        if i % 5 == 0 {
            messages.push((id, body));
        }
    }
    for i in 0..3 {
        let id = format!("bad-{run}-{i}");
        messages.push((
            id.clone(),
            serde_json::json!({"transfer_id": id, "account": "acct-a", "amount": 0}).to_string(),
        ));
        let id = format!("noacct-{run}-{i}");
        messages.push((
            id.clone(),
            serde_json::json!({"transfer_id": id, "amount": 5}).to_string(),
        ));
    }
    // The Producer sets idemq-job-id, so a re-sent transfer keeps its id.
    let producer = Producer::new(sdk, queue_url).await?;
    let jobs = messages
        .iter()
        .map(|(id, body)| Job::raw(id, body))
        .collect();
    for (id, result) in producer.send_batch(jobs).await {
        result.map_err(|e| format!("{id}: {e}"))?;
    }
    std::fs::write(state, serde_json::to_string_pretty(&expected)?)?;
    println!(
        "sent {} messages: 300 transfers (50 to {OUTAGE}, which is down), 60 sent twice, 6 malformed",
        messages.len()
    );
    Ok(())
}

async fn check(
    sdk: &aws_config::SdkConfig,
    table: &str,
    dlq_url: &str,
    state: &str,
) -> Result<(), Error> {
    let expected: BTreeMap<String, i64> = serde_json::from_str(&std::fs::read_to_string(state)?)?;
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let mut exact = true;
    println!("balances:");
    for (account, want) in expected
        .iter()
        .map(|(a, w)| (a.as_str(), *w))
        .chain([(OUTAGE, 0)])
    {
        let got = ddb
            .get_item()
            .table_name(table)
            .key("pk", AttributeValue::S(format!("account#{account}")))
            .consistent_read(true)
            .send()
            .await?
            .item()
            .and_then(|i| i.get("balance")?.as_n().ok()?.parse::<i64>().ok())
            .unwrap_or(0);
        let ok = got == want;
        exact &= ok;
        println!(
            "  {account:<12} {got:>6}  expected {want:>6}  {}",
            if ok { "ok" } else { "WRONG" }
        );
    }
    // Peek at the DLQ without consuming: hold each message invisible while
    // scanning, so none is counted twice, then make them all visible again.
    let mut seen = HashSet::new();
    let mut handles = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..50 {
        let out = sqs
            .receive_message()
            .queue_url(dlq_url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .message_attribute_names("All")
            .send()
            .await?;
        if out.messages().is_empty() {
            break;
        }
        for m in out.messages() {
            if !seen.insert(m.message_id().unwrap_or_default().to_owned()) {
                continue;
            }
            let attrs = m.message_attributes();
            let reason = attrs
                .and_then(|a| a.get(idemq::dead_letter::ATTR_ERROR))
                .and_then(|v| v.string_value())
                .map_or(
                    "retries exhausted (SQS redrive; see its failure record)".to_owned(),
                    |e| format!("dead-lettered at once: {e}"),
                );
            *reasons.entry(reason).or_default() += 1;
            handles.extend(m.receipt_handle().map(str::to_owned));
        }
    }
    for h in handles {
        sqs.change_message_visibility()
            .queue_url(dlq_url)
            .receipt_handle(h)
            .visibility_timeout(0)
            .send()
            .await?;
    }
    println!("dead-letter queue ({} messages):", seen.len());
    for (reason, n) in &reasons {
        println!("  {n:>3}  {reason}");
    }
    if !exact {
        return Err("a balance is wrong".into());
    }
    if seen.len() != 66 {
        return Err(format!(
            "expected 66 dead letters (50 outage + 10 resent + 6 malformed), found {}",
            seen.len()
        )
        .into());
    }
    println!(
        "every balance exact: each transfer applied once, duplicates skipped, failures kept with their context."
    );
    Ok(())
}
