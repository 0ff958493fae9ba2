//! Hosting a PostgreSQL handler: the same Lambda service and local worker
//! as a DynamoDB handler's, over a [`Postgres`] store opened from
//! `IDEMQ_POSTGRES_*` (docs/stores.md), with `IDEMQ_CONCURRENCY`
//! connections unless `IDEMQ_POSTGRES_POOL` says otherwise. It connects
//! lazily, on the first job.

use std::sync::Arc;

use super::{HostError, OpenStore};
use crate::config::{BatchConfig, IdempotencyConfig};
use crate::store::Store;
use crate::store::postgres::{Effect, Postgres, PostgresConfig};

impl OpenStore for Effect {
    fn open_store(
        sdk: &aws_config::SdkConfig,
        _table: Option<String>,
        _behaviour: &IdempotencyConfig,
        batch: &BatchConfig,
    ) -> Result<Arc<dyn Store<Effect = Self>>, HostError> {
        let store = Postgres::new(PostgresConfig::from_env(sdk, batch.concurrency)?)?;
        Ok(Arc::new(store))
    }
}
