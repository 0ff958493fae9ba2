//! Shared set-up for tests that run against the local AWS stack
//! (`make stack-up`; `make test` starts it and exports its endpoints).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::TableLayout;

/// SDK clients for the local stack. Panics with the fix when the stack's
/// endpoints are not in the environment: these tests must not pass vacuously.
pub async fn sdk() -> aws_config::SdkConfig {
    for var in ["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB"] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: run these tests with `make test`, or `make stack-up` \
             and `set -a; . .state/stack.env; set +a` first"
        );
    }
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}

/// A name unique to this test process and call, so tests never share a
/// table or queue (and moto's per-transaction cost stays small).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        rand::random::<u16>()
    )
}

/// Creates a fresh idemq table through `idemq init`'s own code path.
pub async fn fresh_table(sdk: &aws_config::SdkConfig) -> TableLayout {
    let layout = TableLayout::new(unique("idemq-test"));
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    assert!(
        idemq::init::ensure_table(&ddb, &layout)
            .await
            .expect("create table")
    );
    layout
}

/// The numeric attribute `attr` of the item with string key `pk`, if any.
pub async fn number(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
    pk: &str,
    attr: &str,
) -> Option<i64> {
    let out = ddb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .consistent_read(true)
        .send()
        .await
        .expect("get_item");
    out.item()?.get(attr)?.as_n().ok()?.parse().ok()
}
