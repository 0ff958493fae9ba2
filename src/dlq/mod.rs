//! The operator's dead-letter tooling (`idemq dlq`).
//!
//! The runtime side, what a consumer does when a job fails (failure
//! records, idemq's own dead letters with their context), is
//! [`crate::dead_letter`]. Here: [`peek`] reads the DLQ without consuming
//! it, [`inspect`] opens a DLQ and answers what an operator asks of it
//! (stats, rows, one letter), [`redrive`] moves dead letters back (sending
//! before deleting, so a kill at any instant loses nothing), and all take a
//! job's copies as one letter ([`copies`]); [`archive`] keeps them as JSON
//! lines (`idemq dlq export` / `import`). Each returns data: the `idemq`
//! binary only parses flags and prints. [`settings`] reads a consumer's
//! settings from its environment (this process's or a deployed
//! function's), with the consumer's own parsers.

pub mod archive;
pub mod copies;
pub mod inspect;
pub mod peek;
pub mod records;
pub mod redrive;
pub mod settings;
