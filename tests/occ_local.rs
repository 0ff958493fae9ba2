//! Optimistic concurrency against the local stack: the
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

/// The tests of this file run one at a time: each sets its own contention
/// (workers x concurrency on a few accounts), and the emulator serves every
/// DynamoDB request of both one at a time, so one test's load would add to
/// the other's and push its jobs past `maxReceiveCount` (measured: a
/// transfer dead-lettered after 6 receives while both ran).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// 600 transfers over 3 accounts, 4 workers x concurrency 8 (32 jobs in
/// flight, about 10 per account): every balance exact, every version the
/// number of transfers to the account (one commit each), no transfer
/// dead-lettered, and the lost races (`JobsContended`) reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_contended_transfers_on_three_accounts_are_exact() {
    let _serial = ONE_AT_A_TIME.lock().await;
    const TRANSFERS: usize = 600;
    // 32 jobs in flight on 3 accounts: in clean-clone CI runs a transfer
    // lost its races on 6 receives in a row (599 of 600 committed, with
    // 267 and 383 retries), so the queue allows 10; what is checked is that
    // every transfer commits exactly once, not how few receives it takes.
    const MAX_RECEIVES: u32 = 10;
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

/// Sends `(job id, body)` pairs, 10 a call.
async fn send_transfers(sqs: &aws_sdk_sqs::Client, url: &str, bodies: &[(String, String)]) {
    for chunk in bodies.chunks(10) {
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
        let out = sqs
            .send_message_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(out.failed().is_empty());
    }
}

/// Accounts the plain ledger created (a balance, no `version`), then 60
/// contended transfers on them with `LEDGER_OCC=1` (2 workers x 8): every
/// one commits, nothing is dead-lettered, and each account ends at version
/// = its optimistic transfers. With `version = :0` on such an account
/// every transfer lost every race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_occ_ledger_takes_over_accounts_the_plain_ledger_created() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let sdk = sdk().await;
    let res = init_queue(&sdk, "occplain", false, 3, 10).await;
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let ddb = aws_sdk_dynamodb::Client::new(&sdk);
    let transfer = |id: &str, account: &str, amount: i64| {
        (
            id.to_owned(),
            format!(r#"{{"transfer_id":"{id}","account":"{account}","amount":{amount}}}"#),
        )
    };
    let plain: Vec<_> = (0..2)
        .map(|i| transfer(&format!("p-{i}"), &format!("acct-{i}"), 100))
        .collect();
    send_transfers(&sqs, &res.queue_url, &plain).await;
    let m = common::work_ledger(&res, &[], 2).await;
    assert_eq!(m.succeeded, 2, "{}", m.summary());
    assert_eq!(
        number(&ddb, &res.table_name, "account#acct-0", "version").await,
        None
    );

    let occ: Vec<_> = (0..60)
        .map(|i| transfer(&format!("o-{i}"), &format!("acct-{}", i % 2), 1))
        .collect();
    send_transfers(&sqs, &res.queue_url, &occ).await;
    let second = Duration::from_secs(1);
    let workers = (0..2).map(|_| {
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
    assert_eq!(totals.succeeded, 60, "{}", totals.summary());
    assert_eq!(totals.dead_lettered, 0, "{}", totals.summary());
    for account in ["acct-0", "acct-1"] {
        let pk = format!("account#{account}");
        assert_eq!(
            number(&ddb, &res.table_name, &pk, "balance").await,
            Some(130),
            "{account}: {}",
            totals.summary()
        );
        assert_eq!(
            number(&ddb, &res.table_name, &pk, "version").await,
            Some(30)
        );
    }
    assert_eq!(dlq_total(&sqs, &res.dlq_url).await, 0);
}
