//! Hosting a PostgreSQL handler: the same Lambda service and local worker
//! as a DynamoDB handler's, over a [`Postgres`] store built from the
//! environment.

use crate::config::{BatchConfig, IdempotencyConfig};
use crate::dead_letter::DeadLetters;
use crate::handler::Handler;
use crate::host::{Host, HostError};
use crate::store::Store;

use super::{Postgres, PostgresConfig};

/// A host for `handler` over clients from `sdk_config` and a store from
/// `IDEMQ_POSTGRES_*` (module doc), with `batch.concurrency` connections
/// unless `IDEMQ_POSTGRES_POOL` says otherwise. Connects lazily.
pub fn with_clients<H: Handler<Postgres>>(
    handler: H,
    sdk_config: &aws_config::SdkConfig,
    batch: BatchConfig,
) -> Result<Host<H, Postgres>, HostError> {
    let behaviour = IdempotencyConfig::from_env()?;
    let store = Postgres::new(PostgresConfig::from_env(sdk_config, batch.concurrency)?)?;
    let sqs = aws_sdk_sqs::Client::new(sdk_config);
    let dead_letters =
        DeadLetters::with_records(store.failure_records(), sqs.clone(), store.marker_ttl());
    Ok(Host::with_store(
        handler,
        store,
        dead_letters,
        sqs,
        behaviour.job_id,
        batch,
    ))
}

/// Runs `handler` under the Lambda runtime when on Lambda, else as a local
/// worker (flags as [`crate::worker::WorkerArgs`]), with idemq's logging
/// defaults: what [`crate::run`] does for a DynamoDB handler.
#[cfg(any(feature = "lambda", feature = "worker"))]
pub async fn run<H: Handler<Postgres>>(handler: H) -> Result<(), HostError> {
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let on_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    crate::init_logging(on_lambda);
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if on_lambda {
        on_lambda_runtime(handler, &sdk).await
    } else {
        as_worker(handler, &sdk).await
    }
}

#[cfg(feature = "lambda")]
async fn on_lambda_runtime<H: Handler<Postgres>>(
    handler: H,
    sdk: &aws_config::SdkConfig,
) -> Result<(), HostError> {
    let host = with_clients(handler, sdk, BatchConfig::from_env()?)?;
    lambda_runtime::run(crate::lambda::BatchService::from_host(host)).await
}

#[cfg(all(feature = "worker", not(feature = "lambda")))]
async fn on_lambda_runtime<H: Handler<Postgres>>(
    _: H,
    _: &aws_config::SdkConfig,
) -> Result<(), HostError> {
    Err(
        "AWS_LAMBDA_RUNTIME_API is set, but this binary was built without idemq's `lambda` feature"
            .into(),
    )
}

#[cfg(feature = "worker")]
async fn as_worker<H: Handler<Postgres>>(
    handler: H,
    sdk: &aws_config::SdkConfig,
) -> Result<(), HostError> {
    use clap::Parser;
    let args = crate::worker::WorkerArgs::parse();
    let mut batch = BatchConfig::from_env()?;
    if let Some(c) = args.concurrency {
        batch.concurrency = c.max(1);
    }
    let host = with_clients(handler, sdk, batch)?;
    crate::worker::serve(&host, &args).await.map(drop)
}

#[cfg(all(feature = "lambda", not(feature = "worker")))]
async fn as_worker<H: Handler<Postgres>>(_: H, _: &aws_config::SdkConfig) -> Result<(), HostError> {
    Err("AWS_LAMBDA_RUNTIME_API is not set (not on Lambda), and this binary was built without idemq's `worker` feature (the local worker)".into())
}
