//! idemq: effectively-once processing of SQS jobs on AWS Lambda.
//!
//! SQS delivers every message at least once. idemq makes the second delivery
//! harmless: a handler returns its result as an [`Effect`] (DynamoDB writes),
//! and idemq commits a dedup marker and that effect in one
//! `TransactWriteItems` ([`Committer`]). A redelivered job finds its marker
//! and is acknowledged as a duplicate; a crash leaves either both or
//! neither. The system of record is a [`store`]: DynamoDB today, behind a
//! seam that the batch sees it through.
//!
//! Where things live. Writing a handler:
//! - [`handler`]: the [`Handler`](handler::Handler) trait,
//!   [`handler_fn`](handler::handler_fn),
//!   [`JobError`](handler::JobError) (retry intent) and
//!   [`JobMeta`](handler::JobMeta);
//! - [`effect`]: the typed builder for a job's writes and its limits (on
//!   DynamoDB; `src/store/dynamodb/effect.rs`);
//! - [`job`]: the job id (attribute, body pointer or `MessageId`), the
//!   payload hash and downstream idempotency keys;
//! - [`envelope`]: jobs that arrive wrapped in an SNS notification or an
//!   EventBridge event (`IDEMQ_ENVELOPE`);
//! - [`producer`]: sending jobs with a stable id ([`Producer`]); `topic`
//!   (feature `sns`): the same, published to an SNS topic
//!   (`TopicProducer`);
//! - `testing` (feature `testing`): unit-testing a handler: `job_meta`,
//!   read-back views of an `Effect`, and a whole SQS event run through the
//!   Lambda batch service against in-memory DynamoDB and SQS.
//!
//! Running it (the hosts, and what they share):
//! - `lambda` (feature `lambda`): the Lambda host, and
//!   `lambda::BatchService`, the SQS batch handler as a tower service for a
//!   `main` of your own;
//! - `worker` (feature `worker`): the local worker host;
//! - `run` (feature `lambda` or `worker`): the one entry point, on Lambda
//!   or as a local worker, for a handler of either store;
//! - [`host`]: what both hosts build once (clients, the store, the batch
//!   processor), and [`OpenStore`], how a handler's effect type opens its
//!   store (one file per store in `src/host/`);
//! - [`config`]: `IDEMQ_*` settings ([`BatchConfig`](config::BatchConfig)
//!   among them) and the table layout;
//! - [`batch`]: the batch contract (FIFO order, deadline budget, partial
//!   batch response);
//! - [`classify`]: how each way a job can end becomes what SQS does;
//! - [`horizon`]: how long after its first enqueue a job can still be
//!   applied once (its markers' lifetime), which the consumer and the
//!   tools that copy dead letters both weigh;
//! - [`store`]: the seam a system of record implements ([`store::Store`],
//!   object-safe: commit one job or a batch, look up a batch's markers,
//!   read a marker, record a failure; failure records read back; schema),
//!   the only way the batch reaches a store (docs/architecture.md), and
//!   [`store::dynamodb`]: the dedup transaction ([`Committer`]), failure
//!   records and the table, on DynamoDB; `store::postgres` (feature
//!   `postgres`, also `idemq::postgres`): the same on PostgreSQL, the
//!   marker row and the handler's SQL in one pipelined transaction;
//! - [`commit`]: what a commit can end in, whichever store made it;
//! - [`failure`]: why a job failed, and the record kept of it;
//!   where it failed is a backtrace (`src/backtrace.rs`: captured,
//!   folded, capped; [`failure::BacktraceMode`]);
//! - [`backoff`]: retry delays (exponential, full jitter) and the check
//!   that retries fit the queue's retention;
//! - [`queue`]: what idemq reads of a source queue, and the SQS calls
//!   shared by the runtime and the tools;
//! - [`dead_letter`]: idemq's own dead letters with their context (the
//!   failure records go through the store);
//! - [`metrics`]: per-batch CloudWatch EMF metrics;
//! - [`clock`]: the wall clock and jitter source, which a simulation can
//!   replace.
//!
//! Operating it (feature `ops`; the `idemq` CLI is built on these, and a
//! function's build compiles none of it):
//! - [`init`]: creating or verifying the queue, DLQ and table;
//! - [`dlq`]: reading a DLQ ([`dlq::peek`]), what an operator asks of it
//!   (stats, rows, one letter: [`dlq::inspect`]), moving dead letters back
//!   ([`dlq::redrive`]) and keeping them as JSON lines ([`dlq::archive`]);
//!   each returns data, and the `idemq` binary only parses and prints.
//!
//! Features: `lambda` (the Lambda host) is the only default, so a function
//! depending on `idemq = "0.1"` compiles no command-line, progress-bar, SNS
//! or PostgreSQL crate and no regex engine. `worker` adds the local worker
//! host, `postgres` the PostgreSQL store, `sns` publishing to a topic,
//! `testing` the test kit (for dev-dependencies), `ops` the operator
//! library (for the CLI), and `failpoints` the chaos suite's failpoints. The operator CLI is its own package:
//! `cargo install idemq-cli` gives the `idemq` command.

#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml): every item a feature
// gates is labelled with that feature in the rendered docs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attribute;
pub mod backoff;
mod backtrace;
pub mod batch;
pub mod classify;
pub mod clock;
pub mod commit;
pub mod config;
pub mod dead_letter;
#[cfg(feature = "ops")]
pub mod dlq;
#[doc(inline)]
pub use store::dynamodb::effect;
pub mod envelope;
pub mod failure;
pub mod followup;
pub mod handler;
pub mod horizon;
pub mod host;
#[cfg(feature = "ops")]
pub mod init;
pub mod job;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod metrics;
pub mod producer;
pub mod queue;
#[cfg(any(feature = "lambda", feature = "worker"))]
mod run;
pub mod store;
#[cfg(feature = "postgres")]
pub use store::postgres;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "sns")]
pub mod topic;
#[cfg(feature = "worker")]
pub mod worker;

pub use host::{HostError, OpenStore};
#[cfg(any(feature = "lambda", feature = "worker"))]
pub use run::run;

pub use commit::{CommitError, CommitOutcome, JobRef};
pub use config::{IdempotencyConfig, TableLayout};
pub use envelope::Envelope;
pub use followup::FollowUp;
pub use job::{
    InvalidJobId, JOB_ID_ATTRIBUTE, JobId, JobIdResolver, JobIdSource, PayloadHash, downstream_key,
};
pub use producer::Producer;
pub use store::dynamodb::{Committer, Effect, EffectError, Key, Write};
#[cfg(feature = "sns")]
pub use topic::TopicProducer;

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
