//! One suite every store passes, run against each: DynamoDB on the local
//! stack (moto) and PostgreSQL on the local stack's real server
//! (`make test` starts both).
//!
//! - `cases.rs`: the cases, written once: every commit outcome, the
//!   look-up, 8 tasks racing over the same 200 jobs, follow-ups, failure
//!   records, namespaces;
//! - `subject.rs`: each store behind the same few effects;
//! - `postgres.rs`: what only PostgreSQL has (SQLSTATE mapping, a
//!   connection cut after `COMMIT` was sent, nothing on the wire that pins
//!   a session behind RDS Proxy, the schema's versions, expired rows);
//! - `tls.rs`: TLS through a proxy with a test CA (trusted, untrusted,
//!   another host's name);
//! - `worker.rs`: a PostgreSQL consumer end to end: `idemq init` and
//!   `idemq dlq` with `--store postgres`, the local worker, the test kit.

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod postgres;
mod subject;
mod tls;
mod worker;

/// The suite's cases for one store.
macro_rules! suite {
    ($store:ident, $subject:expr) => {
        mod $store {
            use super::cases;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_outcome() {
                cases::every_outcome($subject.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn races() {
                cases::races($subject.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn follow_ups() {
                cases::follow_ups($subject.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn failure_records() {
                cases::failure_records($subject.await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn namespaces() {
                cases::namespaces($subject.await).await;
            }
        }
    };
}

suite!(dynamodb, crate::subject::Dynamo::new());
suite!(postgresql, crate::subject::Pg::new());
// The same store with each statement prepared once per connection.
suite!(postgresql_prepared, crate::subject::Pg::prepared());
