//! idemq: effectively-once processing of SQS jobs on AWS Lambda.
//!
//! SQS delivers every message at least once. idemq makes the second delivery
//! harmless: a handler returns its result as an [`Effect`] (DynamoDB writes),
//! and idemq commits a dedup marker and that effect in one
//! `TransactWriteItems` ([`commit`]). A redelivered job finds its marker and
//! is acknowledged as a duplicate; a crash leaves either both or neither.
//!
//! Where things live:
//! - [`job`]: the job id (attribute, body pointer or `MessageId`) and the
//!   payload hash;
//! - [`effect`]: the typed builder for a job's writes and its limits;
//! - [`commit`]: the dedup transaction and its outcomes;
//! - [`config`]: `IDEMQ_*` settings and the table layout;
//! - [`init`]: creating or verifying the queue, DLQ and table.

pub mod commit;
pub mod config;
pub mod effect;
pub mod init;
pub mod job;

pub use commit::{CommitError, CommitOutcome, Committer, JobRef};
pub use config::{IdempotencyConfig, TableLayout};
pub use effect::{Effect, EffectError, Key, Write};
pub use job::{
    InvalidJobId, JOB_ID_ATTRIBUTE, JobId, JobIdResolver, JobIdSource, PayloadHash, downstream_key,
};

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
