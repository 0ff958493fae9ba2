//! The ledger: the example every idemq doc uses.
//!
//! A job is a transfer `{"transfer_id", "account", "amount"}`, sent with
//! `idemq-job-id = transfer_id`. Its effect credits the account
//! (`ADD balance :amount` on `account#<account>`) and records a ledger
//! entry (`entry#<transfer_id>`). The entry belongs to the transfer, so it
//! *is* the dedup marker ([`Effect::marked_by`]): it carries the job id and
//! payload hash, and a redelivered transfer finds it and is a duplicate.
//! Two items a job, committed in one `TransactWriteItems`: no more write
//! units than a consumer without deduplication. Every effect of a transfer
//! is in its `Effect`, so the ledger declares that the read of markers
//! before its handler buys nothing ([`LookUp::NotNeeded`]): one DynamoDB
//! request a job, the plain consumer's.
//!
//! - an amount ≤ 0, or a missing field, is a permanent error (DLQ now);
//! - `"then_credit": "<account>"` in a transfer adds a follow-up job
//!   ([`idemq::followup`]): the transfer `{"transfer_id":
//!   "<transfer_id>/then", "account": "<then_credit>", "amount": <amount>}`,
//!   job id `<transfer_id>/then`, to `LEDGER_THEN_QUEUE_URL` or else the
//!   transfer's own queue, sent if and only if this transfer commits;
//! - accounts listed in `LEDGER_FAIL_ACCOUNTS` (comma-separated) simulate a
//!   downstream outage: their jobs fail transiently, are retried with
//!   backoff, and end in the DLQ after maxReceiveCount receives; an
//!   account listed as `panic:<account>` simulates a bug instead: its
//!   jobs panic in the handler (retried alike, the failure record naming
//!   the panic and where it happened);
//! - with `LEDGER_OCC=1` the credit is a read-modify-write with a version
//!   check instead of `ADD` ([`OccLedger`]): a transfer that loses the race
//!   on its account is run again, not dead-lettered.
//!
//! Run it as a local worker: `IDEMQ_TABLE=t cargo run --example ledger --
//! --queue-url URL`; on Lambda the same binary answers SQS events.

use std::collections::HashSet;

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::followup::FollowUp;
use idemq::store::dynamodb::{Effect, Key, Write};
use idemq::store::dynamodb::{Item, read_version};
use idemq::{Handler, JobError, JobMeta, LookUp};
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

impl Ledger {
    /// Whether `account` is listed as `panic:<account>`: a simulated bug.
    fn panics_for(&self, account: &str) -> bool {
        self.fail_accounts
            .iter()
            .any(|a| a.strip_prefix("panic:") == Some(account))
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
    type Effect = Effect;

    async fn handle(&self, t: Transfer, meta: JobMeta) -> Result<Effect, JobError> {
        if t.amount <= 0 {
            return Err(JobError::permanent(LedgerError::NotPositive(t.amount)));
        }
        if self.fail_accounts.contains(&t.account) {
            return Err(JobError::transient(LedgerError::Outage(t.account)));
        }
        if self.panics_for(&t.account) {
            panic!("no ledger rule for account {}", t.account);
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

    /// Every effect of a transfer is in its `Effect` (the balance and the
    /// entry, which is the marker), so a redelivery's commit is refused
    /// and nothing is repeated: the read before the handler would buy
    /// nothing (and cannot find a fused marker anyway).
    fn look_up(&self) -> LookUp {
        LookUp::NotNeeded
    }
}

// ---- LEDGER_OCC=1: the credit as optimistic concurrency ----

/// The ledger with `LEDGER_OCC=1`: the credit is a consistent read of
/// `account#<account>` (`balance` and `version`, both numbers), then a Put
/// of `balance + amount` and `version + 1` guarded by the version read
/// ([`Write::if_version`]: an account without a version, new or created by
/// the plain ledger, is version 0). The guard is optimistic: a transfer
/// that loses the race to another one on the same account is run again,
/// not dead-lettered. Checks, outage and
/// ledger entry (the marker) are the plain ledger's.
pub struct OccLedger {
    pub ledger: Ledger,
    pub dynamodb: aws_sdk_dynamodb::Client,
}

impl Handler for OccLedger {
    type Job = Transfer;
    type Effect = Effect;

    async fn handle(&self, t: Transfer, meta: JobMeta) -> Result<Effect, JobError> {
        let table = self.ledger.table.clone();
        let key = Key::string("pk", format!("account#{}", t.account));
        let amount = t.amount;
        let plain = self.ledger.handle(t, meta).await?;
        let read = self
            .dynamodb
            .get_item()
            .table_name(&table)
            .set_key(Some(key.as_item().clone()))
            .consistent_read(true)
            .send()
            .await?;
        let stored = read.item();
        let balance = match stored.and_then(|item| item.get("balance")) {
            None => 0,
            Some(v) => v
                .as_n()
                .ok()
                .and_then(|n| n.parse::<i64>().ok())
                .ok_or_else(|| JobError::permanent("balance is not a number"))?,
        };
        // 0 for a new account and for one the plain ledger created (no
        // version yet): `if_version` accepts both.
        let version = read_version(stored, "version").map_err(JobError::permanent)?;
        let account = Item::from([
            (
                "balance".to_string(),
                AttributeValue::N((balance + amount).to_string()),
            ),
            (
                "version".to_string(),
                AttributeValue::N((version + 1).to_string()),
            ),
        ]);
        let credit = Write::put(&table, key.clone(), account).if_version("version", version);
        // The plain effect with its `ADD balance` replaced by the guarded
        // Put, and its follow-ups kept.
        let mut effect = Effect::new().with(credit);
        for write in plain.writes() {
            if write.key() != &key && Some(write) != plain.fused_marker() {
                effect.push(write.clone());
            }
        }
        for follow_up in plain.follow_ups() {
            effect.push_follow_up(follow_up.clone());
        }
        Ok(match plain.fused_marker() {
            Some(entry) => effect.marked_by(entry.clone()),
            None => effect,
        })
    }

    /// As the plain ledger's: every effect is in the `Effect` (the read of
    /// the account is a read, not an effect).
    fn look_up(&self) -> LookUp {
        self.ledger.look_up()
    }
}

#[allow(dead_code)] // Unused where a test includes this file for `Ledger`.
#[tokio::main]
async fn main() -> Result<(), idemq::HostError> {
    if std::env::var("LEDGER_OCC").is_ok_and(|v| v == "1") {
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let ledger = Ledger::from_env();
        return idemq::run(OccLedger { ledger, dynamodb }).await;
    }
    idemq::run(Ledger::from_env()).await
}
