//! The chaos suite's harness (tests/chaos.rs holds the scenarios):
//!
//! - [`jobs`]: the probe's jobs and sending them;
//! - [`workers`]: worker processes of the probe, restarted when a fault
//!   kills them;
//! - [`proxy`]: the fault proxy in front of the DynamoDB emulator;
//! - [`check`]: the checker, per job id: lost, duplicated, unexpected,
//!   dead-lettered.

pub mod check;
pub mod jobs;
pub mod proxy;
pub mod workers;
