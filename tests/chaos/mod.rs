//! The chaos suite's harness (tests/chaos.rs holds the scenarios):
//!
//! - [`jobs`]: the probe's jobs and sending them;
//! - [`workers`]: worker processes of the probe, restarted when a fault
//!   kills them;
//! - [`proxy`]: the fault proxy in front of the DynamoDB emulator;
//! - [`check`]: the checker, per job id: lost, duplicated, unexpected,
//!   dead-lettered;
//! - `postgres`, `pg_proxy` (feature `postgres`): the PostgreSQL probe's
//!   schema and checker, and a fault proxy for the PostgreSQL wire
//!   protocol that cuts connections.

pub mod check;
pub mod jobs;
#[cfg(feature = "postgres")]
pub mod pg_proxy;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod proxy;
pub mod workers;
