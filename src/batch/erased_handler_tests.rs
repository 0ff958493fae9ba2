//! Unit tests of the handler behind its trait object (src/batch.rs), run
//! through the test kit.

use crate::handler::{Handler, JobError, JobMeta};
use crate::store::dynamodb::effect::Effect;
use crate::testing::TestKit;
use std::future::Future;

/// Not an `async fn`: its panic comes from `handle` itself, not from
/// polling the future it returns.
struct PanicsEagerly;

impl Handler for PanicsEagerly {
    type Job = serde_json::Value;
    type Effect = Effect;

    fn handle(
        &self,
        job: serde_json::Value,
        _meta: JobMeta,
    ) -> impl Future<Output = Result<Effect, JobError>> + Send {
        assert_ne!(job["account"], "bob", "no futures for bob");
        async { Ok(Effect::new()) }
    }
}

#[tokio::test]
async fn a_panic_before_the_future_fails_that_job_only() {
    let kit = TestKit::new(PanicsEagerly, "ledger");
    let run = kit
        .run_json(include_str!("../../tests/fixtures/sqs_ledger.json"))
        .await
        .expect("the batch is answered");
    let bob = "6a1f0c2e-0002-4b7e-9d41-1c0a5e7d2f02";
    assert!(run.failed_ids().contains(&bob), "{:?}", run.failed_ids());
    let t1 = "6a1f0c2e-0001-4b7e-9d41-1c0a5e7d2f01";
    assert!(!run.failed_ids().contains(&t1), "{:?}", run.failed_ids());
}
