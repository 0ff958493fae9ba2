//! Systems of record: where a job's marker is committed with its effect.
//!
//! - [`dynamodb`]: DynamoDB, one `TransactWriteItems` per job.

pub mod dynamodb;
