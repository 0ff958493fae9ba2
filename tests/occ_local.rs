//! Optimistic concurrency against the local stack (issue 14 part 2): the
//! ledger with `LEDGER_OCC=1` (`OccLedger`: consistent read, version-
//! guarded Put marked `Write::optimistic`) under heavy contention — four
//! workers of concurrency 8 on three accounts.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use common::ledger::{Ledger, OccLedger};
use common::{
    dlq_total, init_queue, number, quick_backoff, sdk, string_attribute, work_until_idle,
};
use futures_util::future::join_all;

/// 600 transfers over 3 accounts, 4 workers x concurrency 8 (32 jobs in
/// flight, about 10 per account): every balance exact, every version the
/// number of transfers to the account (one commit each), no transfer
/// dead-lettered, and the lost races (`JobsContended`) reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_contended_transfers_on_three_accounts_are_exact() {
    const TRANSFERS: usize = 600;
    const MAX_RECEIVES: u32 = 6;
    let sdk = sdk().await;
    let res = init_queue(&sdk, "occ", false, MAX_RECEIVES, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);

    let mut expected: HashMap<String, (i64, i64)> = HashMap::new();
    let mut bodies = Vec::new();
    for i in 0..TRANSFERS {
        let account = format!("acct-{}", i % 3);
        let amount = (i % 13 + 1) as i64;
        let e = expected.entry(account.clone()).or_default();
        e.0 += amount;
        e.1 += 1;
        let id = format!("t-{i}");
        bodies.push((
            id.clone(),
            format!(r#"{{"transfer_id":"{id}","account":"{account}","amount":{amount}}}"#),
        ));
    }
    let sends = bodies.chunks(10).map(|chunk| {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, (id, body))| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .message_attributes("idemq-job-id", string_attribute(id))
                    .build()
                    .unwrap()
            })
            .collect::<Vec<_>>();
        sqs.send_message_batch()
            .queue_url(&res.queue_url)
            .set_entries(Some(entries))
            .send()
    });
    for out in join_all(sends).await {
        assert!(out.unwrap().failed().is_empty());
    }

    let started = Instant::now();
    let second = Duration::from_secs(1);
    let workers = (0..4).map(|_| {
        let handler = OccLedger {
            ledger: Ledger {
                table: res.table_name.clone(),
                fail_accounts: Default::default(),
            },
            dynamodb: ddb.clone(),
        };
        work_until_idle(handler, &res, 8, 3, quick_backoff(second, second))
    });
    let mut totals = idemq::metrics::BatchMetrics::default();
    for m in join_all(workers).await {
        totals.absorb(&m);
    }
    println!(
        "4 workers x 8 took {:?}: {}; lost races (JobsContended): {}",
        started.elapsed(),
        totals.summary(),
        totals.contended
    );

    for (account, (sum, count)) in &expected {
        let pk = format!("account#{account}");
        assert_eq!(
            number(&ddb, &res.table_name, &pk, "balance").await,
            Some(*sum),
            "{account}: {}",
            totals.summary()
        );
        assert_eq!(
            number(&ddb, &res.table_name, &pk, "version").await,
            Some(*count),
            "{account}: one version per transfer"
        );
    }
    assert_eq!(totals.succeeded, TRANSFERS as u64, "{}", totals.summary());
    assert_eq!(totals.dead_lettered, 0, "{}", totals.summary());
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
    assert!(
        totals.contended > 0,
        "32 jobs in flight on 3 accounts must lose races: {}",
        totals.summary()
    );
}
