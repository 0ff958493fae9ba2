//! The dedup transaction on its own: commit 100 transfers, deliver 30 of
//! them again, and reuse 5 ids with a different payload. Every balance must
//! come out exact. Run by `make demo` against the local stack.
//!
//! ```sh
//! IDEMQ_TABLE=demo cargo run --example dedup
//! ```

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::effect::Item;
use idemq::{
    CommitOutcome, Committer, Effect, JobId, JobRef, Key, PayloadHash, TableLayout, Write,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layout = TableLayout::from_env()?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    idemq::init::ensure_table(&ddb, &layout).await?;
    let table = layout.table_name.clone();
    let committer = Committer::new(ddb.clone(), layout, Duration::from_secs(21 * 24 * 3600));
    let run = rand::random::<u32>();

    // 100 transfers of 1..=100 to four accounts; 30 delivered twice; 5 ids
    // reused by a different payload (a producer bug idemq must not hide).
    let transfers: Vec<(String, String, i64)> = (1..=100)
        .map(|i| (format!("t-{run}-{i}"), format!("acct-{run}-{}", i % 4), i))
        .collect();
    let deliveries = transfers
        .iter()
        .cloned()
        .chain(transfers.iter().take(30).cloned())
        .chain(
            transfers
                .iter()
                .skip(50)
                .take(5)
                .map(|(id, a, amt)| (id.clone(), a.clone(), amt + 1000)),
        );

    let (mut committed, mut duplicate, mut conflict) = (0, 0, 0);
    for (id, account, amount) in deliveries {
        let body = format!(r#"{{"transfer_id":"{id}","account":"{account}","amount":{amount}}}"#);
        let job = JobId::new(id.clone())?;
        let hash = PayloadHash::of(body.as_bytes());
        let effect = Effect::new()
            .with(
                Write::update(
                    &table,
                    Key::string("pk", format!("account#{account}")),
                    "ADD balance :a",
                )
                .value(":a", AttributeValue::N(amount.to_string())),
            )
            .with(Write::put(
                &table,
                Key::string("pk", format!("entry#{id}")),
                Item::from([("amount".to_string(), AttributeValue::N(amount.to_string()))]),
            ));
        match committer
            .commit(
                JobRef {
                    id: &job,
                    payload_hash: &hash,
                    queue: "demo",
                },
                &effect,
            )
            .await?
        {
            CommitOutcome::Committed => committed += 1,
            CommitOutcome::Duplicate => duplicate += 1,
            CommitOutcome::Conflict { .. } => conflict += 1,
            other => return Err(format!("{id}: unexpected {other:?}").into()),
        }
    }
    println!(
        "deliveries: 135  committed: {committed}  duplicates skipped: {duplicate}  conflicts refused: {conflict}"
    );

    let mut exact = true;
    for a in 0..4 {
        let account = format!("acct-{run}-{a}");
        let expected: i64 = transfers
            .iter()
            .filter(|t| t.1 == account)
            .map(|t| t.2)
            .sum();
        let got = ddb
            .get_item()
            .table_name(&table)
            .key("pk", AttributeValue::S(format!("account#{account}")))
            .consistent_read(true)
            .send()
            .await?
            .item()
            .and_then(|i| i.get("balance")?.as_n().ok()?.parse::<i64>().ok())
            .unwrap_or(0);
        let mark = if got == expected { "ok" } else { "WRONG" };
        println!("  account {a}: balance {got:>5}  expected {expected:>5}  {mark}");
        exact &= got == expected;
    }
    if !(exact && committed == 100 && duplicate == 30 && conflict == 5) {
        return Err("balances or counts are off".into());
    }
    println!("every balance exact: each transfer applied once.");
    Ok(())
}
