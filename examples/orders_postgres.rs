//! Orders on PostgreSQL: a payment marks its order paid and books it in a
//! ledger, in one transaction with the job's dedup marker.
//!
//! A job is a payment `{"order_id", "customer", "cents"}`, sent with
//! `idemq-job-id = order_id`. Its effect ([`idemq::store::postgres::Effect`]) is
//! two statements, run by idemq after the marker row and before `COMMIT`:
//!
//! - `INSERT INTO order_status … ON CONFLICT (order_id) DO UPDATE`: the
//!   order's status, idempotent on its own;
//! - `INSERT INTO order_ledger (order_id, customer, cents)`: one booking.
//!   The ledger has no unique key (an order may be booked more than once
//!   by design: a refund, a correction), so running this twice would book
//!   the payment twice. Only the marker keeps a redelivered payment from
//!   doing so: it commits in the same transaction, and a second commit of
//!   the same job id finds it and is a duplicate.
//!
//! Failures:
//! - `cents` ≤ 0, or a missing field, is a permanent error (DLQ now, with
//!   its failure record);
//! - customers listed in `ORDERS_FAIL_CUSTOMERS` (comma-separated) simulate
//!   a downstream outage: their payments fail transiently, back off through
//!   the queue's visibility, and SQS moves them to the DLQ after
//!   maxReceiveCount receives; each keeps a failure record in PostgreSQL
//!   (`idemq.failures`) with the error and the attempt.
//!
//! Settings: `IDEMQ_POSTGRES_URL` (see [`idemq::store::postgres`]) and the usual
//! `IDEMQ_*`. Run it as a local worker:
//!
//! ```sh
//! IDEMQ_POSTGRES_URL=postgres://user:pw@localhost/db \
//!     cargo run --features postgres --example orders_postgres -- --queue-url URL
//! ```
//!
//! As a local worker it first creates its tables and idemq's schema (both
//! idempotent, so every start may do it) over a plain connection, as a
//! local server takes: a production consumer creates `order_status` and
//! `order_ledger` in its own migrations, and idemq's schema with
//! `Postgres::schema()` ([`idemq::store::Provision`]) from a deploy step.
//! On Lambda the same binary answers SQS events and creates nothing.

use std::collections::HashSet;

use idemq::store::Provision;
use idemq::store::postgres::{Effect, Postgres, PostgresConfig, Sql};
use idemq::{Handler, JobError, JobMeta};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Payment {
    pub order_id: String,
    pub customer: String,
    pub cents: i64,
}

pub struct Orders {
    /// Customers whose downstream is down (`ORDERS_FAIL_CUSTOMERS`).
    pub fail_customers: HashSet<String>,
}

impl Orders {
    pub fn from_env() -> Self {
        Self {
            fail_customers: std::env::var("ORDERS_FAIL_CUSTOMERS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("amount {0} cents is not positive")]
    NotPositive(i64),
    #[error("downstream outage for customer {0}")]
    Outage(String),
}

impl Handler for Orders {
    type Job = Payment;
    type Effect = Effect;

    async fn handle(&self, p: Payment, _meta: JobMeta) -> Result<Effect, JobError> {
        if p.cents <= 0 {
            return Err(JobError::permanent(OrderError::NotPositive(p.cents)));
        }
        if self.fail_customers.contains(&p.customer) {
            return Err(JobError::transient(OrderError::Outage(p.customer)));
        }
        Ok(Effect::new()
            .execute(
                Sql::new(
                    "INSERT INTO order_status (order_id, customer, status, cents, updated_at) \
                     VALUES ($1, $2, 'paid', $3, now()) \
                     ON CONFLICT (order_id) DO UPDATE \
                     SET status = EXCLUDED.status, cents = EXCLUDED.cents, \
                         updated_at = EXCLUDED.updated_at",
                )
                .bind(p.order_id.clone())
                .bind(p.customer.clone())
                .bind(p.cents),
            )
            .execute(
                // Not idempotent: only the marker keeps it to once a job.
                Sql::new(
                    "INSERT INTO order_ledger (order_id, customer, cents) VALUES ($1, $2, $3)",
                )
                .bind(p.order_id)
                .bind(p.customer)
                .bind(p.cents),
            ))
    }
}

/// The example's own tables, created if missing. Under an advisory lock:
/// `CREATE TABLE IF NOT EXISTS` run by two workers at once can still
/// collide in the catalogue.
const TABLES: &str = "BEGIN;
SELECT pg_advisory_xact_lock(hashtext('orders_postgres tables'));
CREATE TABLE IF NOT EXISTS order_status (
    order_id text PRIMARY KEY,
    customer text NOT NULL,
    status text NOT NULL,
    cents bigint NOT NULL,
    updated_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS order_ledger (
    order_id text NOT NULL,
    customer text NOT NULL,
    cents bigint NOT NULL CHECK (cents > 0),
    booked_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS order_ledger_order_id ON order_ledger (order_id);
COMMIT;";

/// Creates the example's tables and idemq's schema (`IDEMQ_POSTGRES_SCHEMA`,
/// default `idemq`), each only if missing.
async fn create_tables() -> Result<(), idemq::HostError> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let config = PostgresConfig::from_env(&sdk, 1)?;
    Postgres::new(config)?
        .schema()
        .provision(&mut Vec::new())
        .await?;
    let url = std::env::var("IDEMQ_POSTGRES_URL").or_else(|_| std::env::var("DATABASE_URL"))?;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    client.batch_execute(TABLES).await?;
    drop(client);
    connection.await??;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_none() {
        create_tables().await?;
    }
    idemq::run(Orders::from_env()).await
}
