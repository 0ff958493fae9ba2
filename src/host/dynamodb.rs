//! Hosting a DynamoDB handler: its store opened from `IDEMQ_*`
//! (`IDEMQ_TABLE` or the worker's `--table`), and a host from SDK clients
//! of the caller's.

use std::sync::Arc;

use super::{Host, HostError, OpenStore};
use crate::config::{BatchConfig, IdempotencyConfig, TableLayout};
use crate::handler::Handler;
use crate::store::Store;
use crate::store::dynamodb::{DynamoDb, Effect};

impl OpenStore for Effect {
    fn open_store(
        sdk: &aws_config::SdkConfig,
        table: Option<String>,
        behaviour: &IdempotencyConfig,
        _batch: &BatchConfig,
    ) -> Result<Arc<dyn Store<Effect = Self>>, HostError> {
        let layout = TableLayout::from_env_with_table(table)?;
        let ddb = aws_sdk_dynamodb::Client::new(sdk);
        Ok(Arc::new(DynamoDb::from_client(ddb, layout, behaviour)))
    }
}

impl<H: Handler<Effect = Effect>> Host<H> {
    /// A DynamoDB host from clients already built (tests, or a `main`
    /// that configures its own SDK clients).
    pub fn from_clients(
        handler: H,
        sqs: aws_sdk_sqs::Client,
        ddb: aws_sdk_dynamodb::Client,
        layout: TableLayout,
        behaviour: IdempotencyConfig,
        batch: BatchConfig,
    ) -> Self {
        let store = DynamoDb::from_client(ddb, layout, &behaviour);
        Self::with_store(handler, Arc::new(store), sqs, behaviour.job_id, batch)
    }
}
