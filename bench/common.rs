//! What the benchmarks share: SDK clients whose every request is counted.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

/// Counts requests per `service.operation`.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<Mutex<BTreeMap<String, u64>>>);

impl Intercept for Counter {
    fn name(&self) -> &'static str {
        "bench-request-counter"
    }

    fn read_before_transmit(
        &self,
        _ctx: &BeforeTransmitInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg
            .load::<Metadata>()
            .map_or("?".to_owned(), |m| format!("{}.{}", m.service(), m.name()));
        *self.0.lock().unwrap().entry(op).or_default() += 1;
        Ok(())
    }
}

impl Counter {
    pub fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

pub fn sum(counts: &BTreeMap<String, u64>, service: &str) -> u64 {
    counts
        .iter()
        .filter(|(k, _)| k.to_lowercase().starts_with(service))
        .map(|(_, v)| v)
        .sum()
}

pub struct Clients {
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    pub counter: Counter,
}

pub async fn clients() -> Clients {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let counter = Counter::default();
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    let ddb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .interceptor(counter.clone())
            .build(),
    );
    Clients { sqs, ddb, counter }
}
