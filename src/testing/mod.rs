//! Unit-testing a handler (feature `testing`): no AWS, no emulator.
//!
//! Three tiers, smallest first:
//! - [`job_meta`] builds the [`JobMeta`] a handler receives, so a test can
//!   call `handler.handle(job, job_meta("t-1"))` directly;
//! - [`WriteView`] (and [`writes`], [`write_to`]) read back the writes of
//!   the [`Effect`](crate::store::dynamodb::Effect) it returned: table, key, kind, condition
//!   and update expressions, names and values;
//! - [`TestKit`] runs a whole SQS event (the JSON Lambda sends, as in a
//!   fixture file) through the real batch service of
//!   [`lambda::BatchService`](crate::lambda::BatchService) — job ids,
//!   decoding, the dedup transaction and its outcomes, failure records,
//!   retries through `ChangeMessageVisibilityBatch`, dead-lettering — with
//!   the SDK clients served in-process by an in-memory DynamoDB
//!   ([`MemoryDynamoDb`]) and SQS ([`MemorySqs`]). It returns the partial
//!   batch response and what was retried and dead-lettered; the store's
//!   items are there to assert on.
//!
//! The in-memory DynamoDB models what idemq and common effects use
//! (transactions, single-item writes and reads, condition and update
//! expressions; see [`MemoryDynamoDb`] for the list and the AWS pages it
//! follows) and refuses anything else with a `ValidationException` that
//! names it, so a test cannot pass on a call the kit only pretended to
//! understand. What it cannot tell you: DynamoDB's reserved words, item
//! size limits, throttling, TTL deletion; the local-stack and chaos tiers
//! cover those. Its expression engine is public as [`Expressions`], for a
//! model of DynamoDB of a test's own (the simulation's, `tests/sim/`).
//!
//! ```
//! use aws_sdk_dynamodb::types::AttributeValue;
//! use idemq::store::dynamodb::{Effect, Key, Write};
//! use idemq::{handler_fn, Handler, JobError, JobMeta};
//! use idemq::testing::{job_meta, write_to};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let handler = handler_fn(|n: i64, meta: JobMeta| async move {
//!     Ok::<_, JobError>(Effect::new().with(
//!         Write::update("t", Key::string("pk", meta.job_id.as_str()), "ADD total :n")
//!             .value(":n", AttributeValue::N(n.to_string())),
//!     ))
//! });
//! let effect = handler.handle(5, job_meta("job-1")).await.unwrap();
//! let write = write_to(&effect, "t", &Key::string("pk", "job-1")).unwrap();
//! assert_eq!(write.update_expression(), Some("ADD total :n"));
//! assert_eq!(write.value(":n"), Some(&AttributeValue::N("5".into())));
//! # }
//! ```

mod attr;
mod connector;
mod dynamodb;
mod error;
mod expr;
mod expressions;
mod kit;
mod number;
mod sqs;
pub mod store_suite;

/// The clock idemq reads (`SystemTime` and the jitter source), which a
/// deterministic simulation replaces on its thread: [`simulate`](clock::simulate)
/// fixes the epoch and the seed, [`real`](clock::real) hands the thread back
/// to the wall clock, [`now`](clock::now) is the time idemq sees.
pub mod clock {
    pub use crate::clock::{now, real, simulate};
}
mod view;

use std::time::Duration;

use tokio::time::Instant;

pub use dynamodb::{MemoryDynamoDb, TableKey};
pub use error::ServiceError;
pub use expressions::Expressions;
pub use kit::{BatchRun, KitConfig, TestKit};
pub use sqs::{MemorySqs, QueueSpec, SentAttribute, SentMessage, VisibilityChange};
pub use view::{WriteView, write_to, writes};

use crate::handler::JobMeta;
use crate::job::JobId;

/// The [`JobMeta`] of a job's first attempt: `job_id`, attempt 1, queue
/// `test-queue`, message id `test-message-<job_id>`, a deadline 15 minutes
/// away (Lambda's longest timeout). Its fields are public: change what a
/// test needs (`meta.attempt = 3`).
///
/// # Panics
/// If `job_id` is not a valid job id (empty, longer than 512 bytes, or
/// with control characters): a mistake in the test itself.
///
/// ```
/// let mut meta = idemq::testing::job_meta("transfer-1");
/// meta.attempt = 2;
/// assert_eq!(meta.job_id.as_str(), "transfer-1");
/// ```
pub fn job_meta(job_id: &str) -> JobMeta {
    let id = match JobId::new(job_id) {
        Ok(id) => id,
        Err(e) => panic!("idemq::testing::job_meta: {e}"),
    };
    JobMeta {
        job_id: id,
        attempt: 1,
        queue: "test-queue".into(),
        namespace: "test-queue".into(),
        queue_url: "https://sqs.us-east-1.amazonaws.com/000000000000/test-queue".into(),
        message_id: format!("test-message-{job_id}"),
        deadline: Instant::now() + Duration::from_secs(15 * 60),
    }
}
