//! The ledger: the example every idemq doc uses.
//!
//! A job is a transfer `{"transfer_id", "account", "amount"}`, sent with
//! `idemq-job-id = transfer_id`. Its effect credits the account
//! (`ADD balance :amount` on `account#<account>`) and records a ledger
//! entry (`entry#<transfer_id>`). The entry belongs to the transfer, so it
//! *is* the dedup marker ([`Effect::marked_by`]): it carries the job id and
//! payload hash, and a redelivered transfer finds it and is a duplicate.
//! Two items a job, committed in one `TransactWriteItems`: no more write
//! units than a consumer without deduplication.
//!
//! - an amount ≤ 0, or a missing field, is a permanent error (DLQ now);
//! - `"then_credit": "<account>"` in a transfer adds a follow-up job
//!   ([`idemq::followup`]): the transfer `{"transfer_id":
//!   "<transfer_id>/then", "account": "<then_credit>", "amount": <amount>}`,
//!   job id `<transfer_id>/then`, to `LEDGER_THEN_QUEUE_URL` or else the
//!   transfer's own queue, sent if and only if this transfer commits;
//! - accounts listed in `LEDGER_FAIL_ACCOUNTS` (comma-separated) simulate a
//!   downstream outage: their jobs fail transiently, are retried with
//!   backoff, and end in the DLQ after maxReceiveCount receives.
//!
//! Run it as a local worker: `IDEMQ_TABLE=t cargo run --example ledger --
//! --queue-url URL`; on Lambda the same binary answers SQS events.

use std::collections::HashSet;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::effect::Item;
use idemq::followup::FollowUp;
use idemq::handler::{Handler, JobError, JobMeta};
use idemq::{Effect, Key, Write};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Transfer {
    pub transfer_id: String,
    pub account: String,
    pub amount: i64,
    /// An account to credit next, by a follow-up transfer
    /// `<transfer_id>/then` sent if and only if this one commits.
    #[serde(default)]
    pub then_credit: Option<String>,
}

pub struct Ledger {
    pub table: String,
    pub fail_accounts: HashSet<String>,
}

impl Ledger {
    /// The ledger writes into the idemq table (`IDEMQ_TABLE`), and fails
    /// the accounts in `LEDGER_FAIL_ACCOUNTS`.
    pub fn from_env() -> Self {
        Self {
            table: std::env::var("IDEMQ_TABLE").unwrap_or_default(),
            fail_accounts: std::env::var("LEDGER_FAIL_ACCOUNTS")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("amount {0} is not positive")]
    NotPositive(i64),
    #[error("downstream outage for account {0}")]
    Outage(String),
}

impl Handler for Ledger {
    type Job = Transfer;

    async fn handle(&self, t: Transfer, meta: JobMeta) -> Result<Effect, JobError> {
        if t.amount <= 0 {
            return Err(JobError::permanent(LedgerError::NotPositive(t.amount)));
        }
        if self.fail_accounts.contains(&t.account) {
            return Err(JobError::transient(LedgerError::Outage(t.account)));
        }
        let amount = AttributeValue::N(t.amount.to_string());
        let entry = Item::from([
            ("account".to_string(), AttributeValue::S(t.account.clone())),
            ("amount".to_string(), amount.clone()),
        ]);
        let effect = Effect::new()
            .with(
                Write::update(
                    &self.table,
                    Key::string("pk", format!("account#{}", t.account)),
                    "ADD balance :amount",
                )
                .value(":amount", amount),
            )
            .marked_by(Write::put(
                &self.table,
                Key::string("pk", format!("entry#{}", t.transfer_id)),
                entry,
            ));
        Ok(match &t.then_credit {
            Some(account) => {
                let queue = std::env::var("LEDGER_THEN_QUEUE_URL").unwrap_or(meta.queue_url);
                let id = format!("{}/then", t.transfer_id);
                let next =
                    serde_json::json!({"transfer_id": id, "account": account, "amount": t.amount});
                effect.then_send(FollowUp::new(queue, id, &next).map_err(JobError::permanent)?)
            }
            None => effect,
        })
    }
}

#[allow(dead_code)] // Unused where a test includes this file for `Ledger`.
#[tokio::main]
async fn main() -> Result<(), idemq::host::HostError> {
    idemq::run(Ledger::from_env()).await
}
