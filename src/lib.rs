//! idemq: effectively-once processing of SQS jobs on AWS Lambda.
//!
//! SQS delivers every message at least once. idemq makes the second delivery
//! harmless: a [`Handler`] returns its result as an effect (the writes that
//! are the job's result), and idemq commits a dedup marker and that effect
//! in one transaction of the system of record, a [`store`]: DynamoDB
//! (`TransactWriteItems`) or PostgreSQL. A redelivered job finds its marker
//! and is acknowledged as a duplicate; a crash leaves either both or
//! neither.
//!
//! This page is the crate's table of contents: the root holds what a
//! function's `main.rs` names, and each public module is one concept. The
//! modules behind them (the batch's classification, the dead-letter sender,
//! the clock, the hosts' shared set-up) are private; docs/architecture.md
//! walks through them.
//!
//! Writing a function:
//! - [`run`] (feature `lambda` or `worker`): the one entry point, on Lambda
//!   or as a local worker, for a handler of either store;
//! - [`Handler`], [`handler_fn`], [`JobError`] (retry intent as a type),
//!   [`JobMeta`], [`LookUp`]: what a handler is and returns;
//! - [`store::dynamodb`]: the DynamoDB effect ([`store::dynamodb::Effect`],
//!   [`Write`](store::dynamodb::Write), [`Key`](store::dynamodb::Key)) and
//!   its dedup transaction ([`Committer`](store::dynamodb::Committer));
//!   `store::postgres` (feature `postgres`): the PostgreSQL effect (SQL
//!   statements) and its pipelined transaction;
//! - [`job`]: the job id (attribute, body pointer or `MessageId`), the
//!   payload hash and downstream idempotency keys;
//! - [`followup`]: jobs a handler sends when its effect commits;
//! - [`envelope`]: jobs that arrive wrapped in an SNS notification or an
//!   EventBridge event (`IDEMQ_ENVELOPE`);
//! - [`producer`]: sending jobs with a stable id; `topic` (feature `sns`):
//!   the same, published to an SNS topic;
//! - `testing` (feature `testing`): unit-testing a handler against
//!   in-memory DynamoDB and SQS, and the store conformance suite.
//!
//! Tuning and hosting it:
//! - [`config`]: the `IDEMQ_*` settings, a file per concern;
//! - [`backoff`]: retry delays (exponential, full jitter) and the check
//!   that retries fit the queue's retention;
//! - [`batch`]: the batch contract ([`batch::Processor`]: FIFO order,
//!   deadline budget, partial batch response, each job's
//!   [`Verdict`](batch::Verdict));
//! - [`Host`] and [`OpenStore`]: what a host builds once at cold start, and
//!   how a handler's effect type opens its store; `lambda` (feature
//!   `lambda`, the SQS event as a tower service) and `worker` (feature
//!   `worker`, long-polling a queue from a laptop) are the two hosts;
//! - [`queue`]: what idemq reads of a source queue;
//! - [`horizon`]: how long after its first enqueue a job can still be
//!   applied once (its markers' lifetime);
//! - [`metrics`]: per-batch CloudWatch EMF metrics, their names and
//!   dimensions.
//!
//! When a job fails:
//! - [`failure`]: why a job failed and where (a folded, capped backtrace),
//!   which deploy, and the record each store keeps of it;
//! - [`dead_letter`]: idemq's own dead letters (a permanent failure sent
//!   to the DLQ at once) and the context attributes they carry.
//!
//! Writing a store: [`store`] is the seam a system of record implements
//! ([`store::Store`], object-safe, whole-batch look-ups and commits), its
//! outcomes and errors, and the operator tools' side ([`store::FailureRecords`],
//! [`store::Provision`]); docs/stores.md has the contract and
//! `testing::store_suite` the suite a store passes.
//!
//! Operating it (feature `ops`; the `idemq` CLI is built on these, and a
//! function's build compiles none of it):
//! - `init`: creating or verifying the queue, DLQ and table or schema;
//! - `dlq`: reading a DLQ, what an operator asks of it, moving dead letters
//!   back and keeping them as JSON lines; each returns data, and the
//!   `idemq` binary only parses and prints.
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

// The concepts a user reads, one module each.
pub mod backoff;
pub mod batch;
pub mod config;
pub mod dead_letter;
pub mod envelope;
pub mod failure;
pub mod followup;
pub mod horizon;
pub mod job;
pub mod metrics;
pub mod producer;
pub mod queue;
pub mod store;
#[cfg(feature = "sns")]
pub mod topic;

// The hosts.
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "worker")]
pub mod worker;

// The test kit and the operator library.
#[cfg(feature = "ops")]
pub mod dlq;
#[cfg(feature = "ops")]
pub mod init;
#[cfg(feature = "testing")]
pub mod testing;

// Internals: reached through the re-exports below and the modules above.
mod attribute;
mod backtrace;
mod classify;
mod clock;
mod commit;
mod group_commit;
mod handler;
mod host;
#[cfg(any(feature = "lambda", feature = "worker"))]
mod run;

pub use handler::{BoxError, Handler, HandlerFn, JobError, JobMeta, LookUp, handler_fn};
pub use host::{Host, HostError, OpenStore};
#[cfg(any(feature = "lambda", feature = "worker"))]
pub use run::run;

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
