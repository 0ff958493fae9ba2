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
/// worker (flags as `idemq::worker::WorkerArgs`, feature `worker`; `--table` is not read),
/// with idemq's logging defaults: what [`crate::run`] does for a DynamoDB
/// handler.
#[cfg(any(feature = "lambda", feature = "worker"))]
pub async fn run<H: Handler<Postgres>>(handler: H) -> Result<(), HostError> {
    crate::run_host(handler, |handler, sdk, _table, batch| {
        with_clients(handler, sdk, batch)
    })
    .await
}
