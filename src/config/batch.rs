//! How a batch runs: concurrency, the deadline margin, backoff and lost
//! races run again ([`BatchConfig`]).

use std::time::Duration;

use super::{ConfigError, parse_duration};
use crate::backoff::Backoff;

/// Batch behaviour: from `IDEMQ_*` ([`BatchConfig::from_env`]) or built
/// from the defaults.
///
/// ```
/// use std::time::Duration;
/// use idemq::backoff::Backoff;
/// use idemq::config::BatchConfig;
///
/// let config = BatchConfig::default()
///     .with_concurrency(4)
///     .with_backoff(Backoff::new().with_base(Duration::from_secs(1)));
/// assert_eq!(config.concurrency, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchConfig {
    /// Jobs (or FIFO groups) run at once.
    pub concurrency: usize,
    /// No job starts when less than this is left before the deadline, a
    /// running job is abandoned (reported failed) at half of it, and the
    /// work after the handlers is over at an eighth of it: see
    /// [`Budget`](crate::batch::Budget).
    pub deadline_margin: Duration,
    /// Retry delays for transient failures.
    pub backoff: Backoff,
    /// How many times one invocation runs a job again after it lost an
    /// optimistic-concurrency race (a
    /// [`Write::optimistic`](crate::store::dynamodb::Write::optimistic) condition
    /// failed) before handing it back to SQS with backoff. Default 3; 0
    /// backs off at the first lost race.
    pub contention_retries: u32,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            concurrency: 10,
            deadline_margin: Duration::from_secs(2),
            backoff: Backoff::DEFAULT,
            contention_retries: DEFAULT_CONTENTION_RETRIES,
        }
    }
}

/// [`BatchConfig::contention_retries`] by default.
pub const DEFAULT_CONTENTION_RETRIES: u32 = 3;

impl BatchConfig {
    /// Jobs (or FIFO groups) run at once.
    pub const fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// See [`BatchConfig::deadline_margin`].
    pub const fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// The retry delays of transient failures.
    pub const fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// See [`BatchConfig::contention_retries`].
    pub const fn with_contention_retries(mut self, retries: u32) -> Self {
        self.contention_retries = retries;
        self
    }

    /// `IDEMQ_CONCURRENCY` (default 10), `IDEMQ_DEADLINE_MARGIN` (default
    /// `2s`), `IDEMQ_BACKOFF_BASE` (default `2s`), `IDEMQ_BACKOFF_CAP`
    /// (default `15m`), `IDEMQ_CONTENTION_RETRIES` (default 3, at most
    /// 100).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut c = Self::default();
        if let Some(v) = get("IDEMQ_CONCURRENCY") {
            c.concurrency = v
                .parse()
                .ok()
                .filter(|n| (1..=1000).contains(n))
                .ok_or_else(|| ConfigError::Invalid {
                    var: "IDEMQ_CONCURRENCY",
                    value: v.clone(),
                    why: "a whole number from 1 to 1000".into(),
                })?;
        }
        if let Some(v) = get("IDEMQ_CONTENTION_RETRIES") {
            c.contention_retries =
                v.parse()
                    .ok()
                    .filter(|n| *n <= 100)
                    .ok_or_else(|| ConfigError::Invalid {
                        var: "IDEMQ_CONTENTION_RETRIES",
                        value: v.clone(),
                        why: "a whole number from 0 to 100".into(),
                    })?;
        }
        if let Some(v) = get("IDEMQ_DEADLINE_MARGIN") {
            c.deadline_margin = parse_duration("IDEMQ_DEADLINE_MARGIN", &v)?;
        }
        let mut backoff = Backoff::DEFAULT;
        if let Some(v) = get("IDEMQ_BACKOFF_BASE") {
            backoff = backoff.with_base(parse_duration("IDEMQ_BACKOFF_BASE", &v)?);
        }
        if let Some(v) = get("IDEMQ_BACKOFF_CAP") {
            backoff = backoff.with_cap(parse_duration("IDEMQ_BACKOFF_CAP", &v)?);
        }
        c.backoff = backoff.validate().map_err(|e| ConfigError::Invalid {
            var: "IDEMQ_BACKOFF_BASE/IDEMQ_BACKOFF_CAP",
            value: format!("{:?}/{:?}", backoff.base(), backoff.cap()),
            why: e.to_string(),
        })?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_config_from_env() {
        let none = |_: &str| None;
        assert_eq!(
            BatchConfig::from_lookup(none).unwrap(),
            BatchConfig::default()
        );
        let c = BatchConfig::from_lookup(|k| match k {
            "IDEMQ_CONCURRENCY" => Some("4".into()),
            "IDEMQ_BACKOFF_BASE" => Some("1s".into()),
            "IDEMQ_BACKOFF_CAP" => Some("2s".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.concurrency, 4);
        assert_eq!(c.backoff.ceiling(5), Duration::from_secs(2));
        let bad = BatchConfig::from_lookup(|k| (k == "IDEMQ_CONCURRENCY").then(|| "0".into()));
        assert!(bad.unwrap_err().to_string().contains("IDEMQ_CONCURRENCY"));
        let bad = BatchConfig::from_lookup(|k| (k == "IDEMQ_BACKOFF_CAP").then(|| "13h".into()));
        assert!(bad.is_err());
        assert_eq!(BatchConfig::default().contention_retries, 3);
        let c = BatchConfig::from_lookup(|k| (k == "IDEMQ_CONTENTION_RETRIES").then(|| "0".into()))
            .unwrap();
        assert_eq!(c.contention_retries, 0);
        for bad in ["-1", "101", "many"] {
            let err =
                BatchConfig::from_lookup(|k| (k == "IDEMQ_CONTENTION_RETRIES").then(|| bad.into()))
                    .unwrap_err();
            assert!(
                err.to_string().contains("IDEMQ_CONTENTION_RETRIES"),
                "{err}"
            );
        }
    }
}
