//! Drives `make demo STORE=postgres`: sends a few hundred order payments
//! with the troubles of real life, then checks what the orders worker
//! (examples/orders_postgres.rs) made of them, in PostgreSQL and in the
//! DLQ (the queues come from `idemq init --store postgres
//! --max-receive-count 5`).
//!
//! ```sh
//! orders_demo send  QUEUE_URL STATE_FILE        # send, and write what to expect
//! orders_demo check QUEUE_URL DLQ_URL STATE_FILE
//! ```
//!
//! The payments: 300 orders of six customers, 60 of them sent twice (a
//! producer that retried), one customer (`cust-outage`) whose downstream
//! is down, and 6 malformed jobs (0 cents, or no customer). Reads
//! `IDEMQ_POSTGRES_URL` (and `IDEMQ_POSTGRES_SCHEMA`, as the worker does).

use std::collections::{BTreeMap, HashSet};

use idemq::dead_letter::ATTR_ERROR;
use idemq::failure::{FailureKind, FailureRecord};
use idemq::producer::Job;
use idemq::producer::Producer;
use idemq::store::postgres::{Postgres, PostgresConfig};
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error>;

const OUTAGE: &str = "cust-outage";
/// Receives before SQS dead-letters a message (`idemq init
/// --max-receive-count` in scripts/demo.sh): the templates' least.
const MAX_RECEIVE_COUNT: u32 = 5;

/// What `send` sent, for `check`.
#[derive(Serialize, Deserialize)]
struct Sent {
    /// Every order id of this run starts with it.
    run: String,
    /// The orders that must be paid: order id -> (customer, cents).
    paid: BTreeMap<String, (String, i64)>,
    /// Messages that must end in the DLQ: outage ones (resends included)
    /// and malformed ones.
    outage_letters: usize,
    malformed_letters: usize,
}

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
        ["check", queue_url, dlq_url, state] => check(&sdk, queue_url, dlq_url, state).await,
        _ => Err(
            "usage: orders_demo init QUEUE_NAME | send QUEUE_URL STATE_FILE \
                  | check QUEUE_URL DLQ_URL STATE_FILE"
                .into(),
        ),
    }
}

fn store(sdk: &aws_config::SdkConfig) -> Result<(Postgres, String), Error> {
    let config = PostgresConfig::from_env(sdk, 1)?.with_sweep_every(None);
    let schema = config.schema().to_owned();
    Ok((Postgres::new(config)?, schema))
}

async fn send(sdk: &aws_config::SdkConfig, queue_url: &str, state: &str) -> Result<(), Error> {
    let run = format!("{:08x}", rand::random::<u32>());
    let customers = ["cust-a", "cust-b", "cust-c", "cust-d", "cust-e", OUTAGE];
    let mut messages = Vec::new();
    let mut sent = Sent {
        run: run.clone(),
        paid: BTreeMap::new(),
        outage_letters: 0,
        malformed_letters: 0,
    };
    for i in 0..300 {
        let customer = customers[i % customers.len()];
        let id = format!("{run}-ord-{i}");
        let cents = (i as i64 * 731) % 9000 + 100;
        let body =
            serde_json::json!({"order_id": id, "customer": customer, "cents": cents}).to_string();
        let copies = if i % 5 == 0 { 2 } else { 1 };
        if customer == OUTAGE {
            sent.outage_letters += copies;
        } else {
            sent.paid.insert(id.clone(), (customer.to_owned(), cents));
        }
        for _ in 0..copies {
            messages.push((id.clone(), body.clone()));
        }
    }
    for i in 0..3 {
        let id = format!("{run}-zero-{i}");
        messages.push((
            id.clone(),
            serde_json::json!({"order_id": id, "customer": "cust-a", "cents": 0}).to_string(),
        ));
        let id = format!("{run}-nocust-{i}");
        messages.push((
            id.clone(),
            serde_json::json!({"order_id": id, "cents": 500}).to_string(),
        ));
        sent.malformed_letters += 2;
    }
    // The Producer sets idemq-job-id, so a re-sent order keeps its id.
    let producer = Producer::new(sdk, queue_url).await?;
    let jobs = messages
        .iter()
        .map(|(id, body)| Job::raw(id, body))
        .collect();
    for (id, result) in producer.send_batch(jobs).await {
        result.map_err(|e| format!("{id}: {e}"))?;
    }
    std::fs::write(state, serde_json::to_string_pretty(&sent)?)?;
    println!(
        "sent {} messages: 300 order payments (50 for {OUTAGE}, whose downstream is down), \
         60 sent twice, 6 malformed",
        messages.len()
    );
    Ok(())
}

/// Every message on the DLQ, peeked at without consuming: each is held
/// invisible while scanning, so none is counted twice, then all are made
/// visible again. `(job id, message id, dead-lettered by idemq at once)`.
async fn peek_dlq(
    sqs: &aws_sdk_sqs::Client,
    dlq_url: &str,
) -> Result<Vec<(Option<String>, String, bool)>, Error> {
    let mut seen = HashSet::new();
    let mut letters = Vec::new();
    let mut handles = Vec::new();
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
            let message_id = m.message_id().unwrap_or_default().to_owned();
            if !seen.insert(message_id.clone()) {
                continue;
            }
            let attr = |name: &str| {
                m.message_attributes()
                    .and_then(|a| a.get(name))
                    .and_then(|v| v.string_value())
                    .map(str::to_owned)
            };
            letters.push((
                attr(idemq::job::JOB_ID_ATTRIBUTE),
                message_id,
                attr(ATTR_ERROR).is_some(),
            ));
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
    Ok(letters)
}

async fn check(
    sdk: &aws_config::SdkConfig,
    queue_url: &str,
    dlq_url: &str,
    state: &str,
) -> Result<(), Error> {
    let sent: Sent = serde_json::from_str(&std::fs::read_to_string(state)?)?;
    let mut wrong: Vec<String> = Vec::new();

    // ---- PostgreSQL: the order tables and the markers ----
    let (store, schema) = store(sdk)?;
    let url = std::env::var("IDEMQ_POSTGRES_URL")?;
    let (pg, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let like = format!("{}-%", sent.run);
    let mut booked: BTreeMap<String, Vec<(String, i64)>> = BTreeMap::new();
    for row in pg
        .query(
            "SELECT order_id, customer, cents FROM order_ledger WHERE order_id LIKE $1",
            &[&like],
        )
        .await?
    {
        booked
            .entry(row.get(0))
            .or_default()
            .push((row.get(1), row.get(2)));
    }
    let mut statuses: BTreeMap<String, (String, String, i64)> = BTreeMap::new();
    for row in pg
        .query(
            "SELECT order_id, customer, status, cents FROM order_status WHERE order_id LIKE $1",
            &[&like],
        )
        .await?
    {
        statuses.insert(row.get(0), (row.get(1), row.get(2), row.get(3)));
    }
    let namespace = idemq::config::queue_name(queue_url);
    let markers: i64 = pg
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".markers WHERE namespace = $1"),
            &[&namespace],
        )
        .await?
        .get(0);

    // Per customer: what the ledger holds against what was paid.
    let mut want: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    want.insert(OUTAGE, (0, 0));
    for (customer, cents) in sent.paid.values() {
        let w = want.entry(customer).or_default();
        w.0 += 1;
        w.1 += cents;
    }
    let mut got: BTreeMap<&str, (usize, i64)> = BTreeMap::new();
    for (customer, cents) in booked.values().flatten() {
        let g = got.entry(customer).or_default();
        g.0 += 1;
        g.1 += cents;
    }
    println!("order_ledger, by customer (PostgreSQL):");
    for (customer, w) in &want {
        let g = got.get(customer).copied().unwrap_or_default();
        let ok = g == *w;
        if !ok {
            wrong.push(format!("{customer}'s ledger: {g:?}, expected {w:?}"));
        }
        println!(
            "  {customer:<12} {:>3} bookings {:>8} cents  expected {:>3} {:>8}  {}",
            g.0,
            g.1,
            w.0,
            w.1,
            if ok { "ok" } else { "WRONG" }
        );
    }
    // Per order: booked exactly once, with its amount, and marked paid.
    let twice = booked.values().filter(|b| b.len() > 1).count();
    let unpaid_booked = booked
        .keys()
        .filter(|o| !sent.paid.contains_key(*o))
        .count();
    let mut bad_orders = 0;
    for (order, (customer, cents)) in &sent.paid {
        let booking_ok =
            booked.get(order).map(Vec::as_slice) == Some(&[(customer.clone(), *cents)]);
        let status_ok = statuses.get(order) == Some(&(customer.clone(), "paid".to_owned(), *cents));
        if !(booking_ok && status_ok) {
            bad_orders += 1;
            if bad_orders <= 5 {
                wrong.push(format!(
                    "order {order}: bookings {:?}, status {:?}",
                    booked.get(order),
                    statuses.get(order)
                ));
            }
        }
    }
    let stray_statuses = statuses
        .keys()
        .filter(|o| !sent.paid.contains_key(*o))
        .count();
    if twice > 0 || unpaid_booked > 0 || stray_statuses > 0 || bad_orders > 0 {
        wrong.push(format!(
            "{twice} orders booked more than once, {unpaid_booked} booked that must not be, \
             {stray_statuses} statuses for orders that must have none, {bad_orders} orders wrong"
        ));
    }
    let all_ok = twice + unpaid_booked + stray_statuses + bad_orders == 0;
    println!(
        "orders: {} to pay; {} bookings ({twice} orders booked more than once), \
         {} statuses ({stray_statuses} for orders that must have none), {bad_orders} orders wrong  {}",
        sent.paid.len(),
        booked.values().map(Vec::len).sum::<usize>(),
        statuses.len(),
        if all_ok { "ok" } else { "WRONG" }
    );
    let markers_ok = markers == sent.paid.len() as i64;
    if !markers_ok {
        wrong.push(format!(
            "{markers} markers, expected {} (one per paid order)",
            sent.paid.len()
        ));
    }
    println!(
        "markers in {schema}.markers for this queue: {markers}, one per paid order  {}",
        if markers_ok { "ok" } else { "WRONG" }
    );

    // ---- The DLQ, and each letter's failure record in PostgreSQL ----
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let letters = peek_dlq(&sqs, dlq_url).await?;
    let dead_letters =
        idemq::dlq::records::Records::new(store.failure_records()).with_source_queues(&[queue_url]);
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let (mut outage, mut malformed, mut unrecorded) = (0, 0, 0);
    for (job, message, at_once) in &letters {
        let how = if *at_once {
            "dead-lettered at once"
        } else {
            "retries exhausted (SQS redrive)"
        };
        // One read a letter: two letters of one job (a resent order) share
        // its record.
        let Some(rec) = dead_letters.read(job.as_deref(), message).await? else {
            unrecorded += 1;
            wrong.push(format!(
                "no failure record for dead letter {message} (job {job:?})"
            ));
            *reasons
                .entry(format!("{how}; NO failure record"))
                .or_default() += 1;
            continue;
        };
        let is_outage = outage_record(&rec);
        if is_outage && !at_once {
            outage += 1;
        } else if rec.failure.kind == FailureKind::Permanent && *at_once {
            malformed += 1;
        } else {
            wrong.push(format!("unexpected dead letter {message}: {rec:?}"));
        }
        // The error without the job's own id, so that letters group.
        let error = rec
            .failure
            .full()
            .replace(job.as_deref().unwrap_or("-"), "…");
        *reasons
            .entry(format!(
                "{how}; record: {:?}, attempt {}: {error}",
                rec.failure.kind, rec.attempt
            ))
            .or_default() += 1;
    }
    println!(
        "dead-letter queue ({} messages), with their failure records in {schema}.failures:",
        letters.len()
    );
    for (reason, n) in &reasons {
        println!("  {n:>3}  {reason}");
    }
    if outage != sent.outage_letters || malformed != sent.malformed_letters || unrecorded > 0 {
        wrong.push(format!(
            "dead letters: {outage} from the outage (expected {}), {malformed} malformed \
             (expected {}), {unrecorded} without a failure record",
            sent.outage_letters, sent.malformed_letters
        ));
    }

    if !wrong.is_empty() {
        for w in &wrong {
            eprintln!("WRONG: {w}");
        }
        return Err(format!("{} differences", wrong.len()).into());
    }
    println!(
        "every sum exact: each payment booked once in the same transaction as its marker, \
         duplicates skipped, failures dead-lettered with their records."
    );
    Ok(())
}

/// A record of the outage: transient, after every receive SQS allows.
fn outage_record(rec: &FailureRecord) -> bool {
    rec.failure.kind == FailureKind::Transient
        && rec.failure.full().contains("downstream outage")
        && rec.attempt == MAX_RECEIVE_COUNT
}
