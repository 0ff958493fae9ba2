//! Which dead letters a redrive moves: the [`Filter`] and the times its
//! `--since` and `--until` flags are read as. Pure, and the CLI's console
//! uses it on its own, so it stands apart from the run.

use std::collections::HashSet;
use std::time::SystemTime;

use crate::dlq::peek::Context;

/// Which dead letters to move. Empty: all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these job ids (or message ids).
    pub job_ids: HashSet<String>,
    /// Only those whose last error contains this, case-insensitively.
    pub error_contains: Option<String>,
    /// Only those that failed at or after this.
    pub since: Option<SystemTime>,
    /// Only those that failed at or before this.
    pub until: Option<SystemTime>,
}

impl Filter {
    /// Whether a dead letter with this context is to move.
    pub fn matches(&self, c: &Context) -> bool {
        let id_ok = self.job_ids.is_empty()
            || self.job_ids.contains(&c.message_id)
            || c.job_id.as_ref().is_some_and(|j| self.job_ids.contains(j));
        let error_ok = self.error_contains.as_ref().is_none_or(|needle| {
            c.error_line()
                .to_lowercase()
                .contains(&needle.to_lowercase())
        });
        let since_ok = self
            .since
            .is_none_or(|s| c.failed_at.is_some_and(|t| t >= s));
        let until_ok = self
            .until
            .is_none_or(|u| c.failed_at.is_some_and(|t| t <= u));
        id_ok && error_ok && since_ok && until_ok
    }

    /// Whether `--error-contains` can judge this letter at all: a letter
    /// with no recorded error (no failure record, no `idemq-error`) never
    /// matches, and the operator is told how many there were.
    pub fn can_judge(&self, c: &Context) -> bool {
        self.error_contains.is_none() || !c.error_line().is_empty()
    }

    /// The filter an operator's flags describe: `job_ids` (duplicates
    /// count once), `error_contains` (empty: no filter), `since` and
    /// `until` as [`parse_when`] reads them at `now`. A window that ends
    /// before it starts is refused: nothing could match.
    pub fn from_flags(
        job_ids: impl IntoIterator<Item = String>,
        error_contains: Option<String>,
        since: Option<&str>,
        until: Option<&str>,
        now: SystemTime,
    ) -> Result<Self, InvalidFilter> {
        let filter = Self {
            job_ids: job_ids.into_iter().collect(),
            error_contains: error_contains.filter(|s| !s.is_empty()),
            since: since.map(|s| parse_when("--since", s, now)).transpose()?,
            until: until.map(|s| parse_when("--until", s, now)).transpose()?,
        };
        if let (Some(s), Some(u)) = (filter.since, filter.until)
            && s > u
        {
            return Err(InvalidFilter::EmptyWindow);
        }
        Ok(filter)
    }
}

/// Why an operator's filter flags describe no usable [`Filter`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidFilter {
    /// The value of this flag is neither a time nor a duration.
    #[error("{flag} {value:?} is neither a time (2026-12-01T10:00:00Z) nor a duration ago (2h)")]
    NotATime {
        /// The flag (`--since`, `--until`).
        flag: String,
        /// What was given.
        value: String,
    },
    /// This duration ago is before the Unix epoch.
    #[error("{flag} {value:?} reaches before 1970")]
    BeforeEpoch {
        /// The flag (`--since`, `--until`).
        flag: String,
        /// What was given.
        value: String,
    },
    /// `since` is after `until`.
    #[error("--since is after --until: nothing could match")]
    EmptyWindow,
}

/// A time (RFC 3339, `2026-12-01T10:00:00Z`) or a duration before `now`
/// (`2h`, `30m`), as the value of `flag`.
pub fn parse_when(flag: &str, value: &str, now: SystemTime) -> Result<SystemTime, InvalidFilter> {
    if let Ok(t) = humantime::parse_rfc3339_weak(value) {
        return Ok(t);
    }
    if let Ok(d) = humantime::parse_duration(value) {
        return now
            .checked_sub(d)
            .ok_or_else(|| InvalidFilter::BeforeEpoch {
                flag: flag.to_owned(),
                value: value.to_owned(),
            });
    }
    Err(InvalidFilter::NotATime {
        flag: flag.to_owned(),
        value: value.to_owned(),
    })
}
