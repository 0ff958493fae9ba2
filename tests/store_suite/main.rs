//! One suite every store passes, run against each: DynamoDB on the local
//! stack (moto) and PostgreSQL on the local stack's real server
//! (`make test` starts both).
//!
//! - the cases are the crate's public conformance suite
//!   (`idemq::testing::store_suite`), which any store's tests call: every
//!   commit outcome, the look-up, a batch's look-ups and commits, 8 tasks
//!   racing over the same 200 jobs, follow-ups, failure records,
//!   namespaces;
//! - `subject.rs`: each store behind the suite's `Subject`, the same few
//!   effects;
//! - `postgres.rs`: what only PostgreSQL has (SQLSTATE mapping, a
//!   connection cut after `COMMIT` was sent, nothing on the wire that pins
//!   a session behind RDS Proxy, the schema's versions, expired rows, a
//!   failure record written across a broken connection);
//! - `tls.rs`: TLS through a proxy with a test CA (trusted, untrusted,
//!   another host's name);
//! - `worker.rs`: a PostgreSQL consumer end to end: `idemq init` and
//!   `idemq dlq` with `--store postgres`, the local worker, the test kit.

#[path = "../common/mod.rs"]
mod common;

mod postgres;
mod subject;
mod tls;
mod worker;

use idemq::testing::store_suite;

// Each runs the public conformance suite, its cases side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb() {
    store_suite::exercise(subject::Dynamo::new).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql() {
    store_suite::exercise(subject::Pg::new).await;
}

/// The same store with each statement prepared once per connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_prepared() {
    store_suite::exercise(subject::Pg::prepared).await;
}
