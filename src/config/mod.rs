//! Configuration: behaviour settings ([`IdempotencyConfig`], [`BatchConfig`])
//! and table layout ([`TableLayout`]), kept apart.
//!
//! Behaviour (how long markers live, where a job id is found) changes with
//! the workload; layout (attribute names) changes only with the table. Both
//! come from `IDEMQ_*` environment variables with typed defaults. AWS
//! endpoints are never configured here: the SDK reads `AWS_ENDPOINT_URL*`.

//!
//! - `layout.rs`: [`TableLayout`], the table's name, attribute names and
//!   namespace;
//! - `idempotency.rs`: [`IdempotencyConfig`] (marker TTL, look-up, job id
//!   pointer, envelope) and the check that markers outlive every copy;
//! - `batch.rs`: [`BatchConfig`] (concurrency, deadline margin, backoff,
//!   contention retries);
//! - `logging.rs`: which logs are on ([`log_filter_from_env`]) and their
//!   format.

use std::time::Duration;

mod batch;
mod idempotency;
mod layout;
mod logging;

pub use batch::{BatchConfig, DEFAULT_CONTENTION_RETRIES};
pub(crate) use idempotency::check_marker_ttl;
pub use idempotency::{DEFAULT_READ_MARKER_FIRST, IdempotencyConfig, LegacyMarkers};
#[cfg(feature = "postgres")]
pub(crate) use layout::check_namespace;
pub use layout::{TableLayout, queue_name};
pub use logging::{LogFormat, log_filter, log_filter_from_env, log_format_from};

/// Default marker lifetime: source retention (up to 14 days) is rarely that
/// long, and 21 days covers the default 4 days + 14 days of DLQ + a replay day.
pub const DEFAULT_MARKER_TTL: Duration = Duration::from_secs(21 * 24 * 3600);

/// How long after a dead letter's retention ends a replay may still happen;
/// also the time `idemq dlq redrive` and `import` leave a copy to be
/// processed in before its job's markers may expire
/// ([`ReplayHorizon`](crate::horizon::ReplayHorizon)).
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// A switch variable's value: `true` or `1`, `false` or `0`.
pub(crate) fn parse_bool(var: &'static str, value: String) -> Result<bool, ConfigError> {
    match value.as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ConfigError::Invalid {
            var,
            value,
            why: "true or false".into(),
        }),
    }
}

/// Parses a human duration (`90s`, `15m`, `21d`) for the variable `var`.
pub fn parse_duration(var: &'static str, value: &str) -> Result<Duration, ConfigError> {
    let d = humantime::parse_duration(value).map_err(|e| ConfigError::Invalid {
        var,
        value: value.to_owned(),
        why: e.to_string(),
    })?;
    if d.is_zero() {
        return Err(ConfigError::Invalid {
            var,
            value: value.to_owned(),
            why: "must be longer than zero".into(),
        });
    }
    Ok(d)
}

/// A configuration value that is missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set (its name).
    #[error("{0} is not set")]
    Missing(&'static str),
    /// A variable's value cannot be used.
    #[error("{var}={value:?} is invalid: {why}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it was refused.
        why: String,
    },
}

/// What the tests of each settings file share.
#[cfg(test)]
pub(crate) mod test_env {
    use std::collections::HashMap;
    use std::time::Duration;

    pub const DAY: Duration = Duration::from_secs(24 * 3600);

    /// An environment of `pairs` only.
    pub fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }
}
