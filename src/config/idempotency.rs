//! What makes a job applied once: how long markers live, whether they are
//! read before the handler, where a job's id is found ([`IdempotencyConfig`]),
//! and the check that a marker outlives every copy of its job.

use std::time::{Duration, SystemTime};

use super::{ConfigError, DEFAULT_MARKER_TTL, REPLAY_WINDOW, parse_bool, parse_duration};
use crate::job::JobIdResolver;

/// Whether a consumer also looks for markers written before markers were
/// namespaced (`IDEMQ_LEGACY_MARKERS`, DynamoDB): the legacy key of each
/// job read in the batch's look-up, so that a job an earlier version
/// committed is still a duplicate after the upgrade. Off by default: only
/// a table written by a build from before namespaced markers holds such
/// keys, and they stop mattering once the last of them has expired, a
/// marker TTL after the upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LegacyMarkers {
    /// Never (`off`, the default): a table that no build from before
    /// namespaced markers wrote to, or an upgrade more than a marker TTL
    /// ago.
    Off,
    /// Always (`read`): a table a build from before namespaced markers
    /// wrote to.
    Read,
    /// Until this time (`until=2027-01-15T00:00:00Z`): set it to the
    /// upgrade's time plus the marker TTL.
    Until(SystemTime),
}

impl LegacyMarkers {
    /// The variable that sets it.
    pub const ENV_VAR: &'static str = "IDEMQ_LEGACY_MARKERS";

    /// Whether legacy markers are read at `now`.
    pub fn read_at(self, now: SystemTime) -> bool {
        match self {
            Self::Off => false,
            Self::Read => true,
            Self::Until(t) => now < t,
        }
    }

    fn parse(value: &str) -> Result<Self, ConfigError> {
        let invalid = |why: String| ConfigError::Invalid {
            var: Self::ENV_VAR,
            value: value.to_owned(),
            why,
        };
        match value {
            "off" => Ok(Self::Off),
            "read" => Ok(Self::Read),
            v => match v.strip_prefix("until=") {
                Some(t) => humantime::parse_rfc3339_weak(t)
                    .map(Self::Until)
                    .map_err(|e| invalid(e.to_string())),
                None => Err(invalid(
                    "off, read, or until=<RFC 3339 time> (the upgrade + the marker TTL)".into(),
                )),
            },
        }
    }
}

/// Behaviour settings of the dedup protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdempotencyConfig {
    /// How long a marker is kept (DynamoDB TTL). Must outlive every copy of
    /// the job (source retention + DLQ retention + a replay day): idemq
    /// checks that against the queues at start-up and in `idemq init`.
    pub marker_ttl: Duration,
    /// Where a job's id is found (`IDEMQ_JOB_ID_POINTER`).
    pub job_id: JobIdResolver,
    /// Whether markers written before markers were namespaced are still
    /// read (`IDEMQ_LEGACY_MARKERS`, default `off`).
    pub legacy_markers: LegacyMarkers,
    /// Whether a job's marker is read before its handler runs
    /// (`IDEMQ_READ_MARKER_FIRST`, `true` or `false`, default
    /// [`DEFAULT_READ_MARKER_FIRST`]): a duplicate then skips its handler,
    /// so whatever the handler does outside DynamoDB is not done again.
    pub read_marker_first: bool,
}

/// Whether markers are read before the handler unless
/// `IDEMQ_READ_MARKER_FIRST` says otherwise. On: one read of the batch's
/// markers (on DynamoDB a consistent `BatchGetItem`, 1 read unit per job)
/// buys a handler that never runs again for a job already committed,
/// however late the copy; a handler whose every effect is in its `Effect`
/// declares that it needs none ([`crate::LookUp`]). The numbers
/// are in BENCHMARKS.md.
pub const DEFAULT_READ_MARKER_FIRST: bool = true;

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            marker_ttl: DEFAULT_MARKER_TTL,
            job_id: JobIdResolver::new(),
            legacy_markers: LegacyMarkers::Off,
            read_marker_first: DEFAULT_READ_MARKER_FIRST,
        }
    }
}

impl IdempotencyConfig {
    /// `IDEMQ_MARKER_TTL` (a duration such as `21d` or `504h`),
    /// `IDEMQ_LEGACY_MARKERS`, `IDEMQ_READ_MARKER_FIRST` (`true` or
    /// `false`), `IDEMQ_JOB_ID_POINTER` (a JSON pointer such as `/transfer_id`) and
    /// `IDEMQ_ENVELOPE` (`none`, `sns` or `eventbridge`: see
    /// [`crate::envelope`]).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        if let Some(v) = get("IDEMQ_MARKER_TTL") {
            config.marker_ttl = parse_duration("IDEMQ_MARKER_TTL", &v)?;
        }
        if let Some(v) = get(LegacyMarkers::ENV_VAR) {
            config.legacy_markers = LegacyMarkers::parse(&v)?;
        }
        if let Some(v) = get("IDEMQ_READ_MARKER_FIRST") {
            config.read_marker_first = parse_bool("IDEMQ_READ_MARKER_FIRST", v)?;
        }
        if let Some(p) = get("IDEMQ_JOB_ID_POINTER").filter(|p| !p.is_empty()) {
            if !p.starts_with('/') {
                return Err(ConfigError::Invalid {
                    var: "IDEMQ_JOB_ID_POINTER",
                    value: p,
                    why: "a JSON pointer starts with '/', e.g. /transfer_id".into(),
                });
            }
            config.job_id = config.job_id.with_body_pointer(p);
        }
        if let Some(v) = get(crate::envelope::Envelope::ENV_VAR) {
            let envelope =
                v.parse()
                    .map_err(|e: crate::envelope::UnknownEnvelope| ConfigError::Invalid {
                        var: crate::envelope::Envelope::ENV_VAR,
                        value: v.clone(),
                        why: e.to_string(),
                    })?;
            config.job_id = config.job_id.with_envelope(envelope);
        }
        Ok(config)
    }
}

/// The marker TTL is shorter than the time a copy of the job can still
/// arrive: after it expires, a late copy would be applied again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "marker TTL {ttl} is shorter than source retention {source_retention} + DLQ retention \
     {dlq_retention} + replay window {replay} = {needed}: a job replayed late would be applied twice; \
     raise IDEMQ_MARKER_TTL to at least {needed}",
    ttl = humantime::format_duration(*ttl),
    source_retention = humantime::format_duration(*source_retention),
    dlq_retention = humantime::format_duration(*dlq_retention),
    replay = humantime::format_duration(REPLAY_WINDOW),
    needed = humantime::format_duration(*source_retention + *dlq_retention + REPLAY_WINDOW),
)]
pub(crate) struct TtlTooShort {
    pub ttl: Duration,
    pub source_retention: Duration,
    pub dlq_retention: Duration,
}

/// Checks that a marker outlives every copy of its job: the source queue's
/// retention, then the DLQ's, then a day to replay it.
pub(crate) fn check_marker_ttl(
    ttl: Duration,
    source_retention: Duration,
    dlq_retention: Duration,
) -> Result<(), TtlTooShort> {
    if ttl < source_retention + dlq_retention + REPLAY_WINDOW {
        return Err(TtlTooShort {
            ttl,
            source_retention,
            dlq_retention,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_env::{DAY, env};

    #[test]
    fn ttl_must_cover_both_retentions_and_a_replay_day() {
        assert_eq!(check_marker_ttl(21 * DAY, 4 * DAY, 14 * DAY), Ok(()));
        assert_eq!(check_marker_ttl(19 * DAY, 4 * DAY, 14 * DAY), Ok(()));
        let err = check_marker_ttl(19 * DAY - Duration::from_secs(1), 4 * DAY, 14 * DAY)
            .unwrap_err()
            .to_string();
        assert!(err.contains("4days"), "{err}");
        assert!(err.contains("14days"), "{err}");
        assert!(err.contains("= 19days"), "{err}");
        assert!(check_marker_ttl(21 * DAY, 14 * DAY, 14 * DAY).is_err());
    }

    #[test]
    fn idempotency_config_from_env() {
        let c = IdempotencyConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.marker_ttl, DEFAULT_MARKER_TTL);
        let c = IdempotencyConfig::from_lookup(env(&[
            ("IDEMQ_MARKER_TTL", "30d"),
            ("IDEMQ_JOB_ID_POINTER", "/transfer_id"),
        ]))
        .unwrap();
        assert_eq!(c.marker_ttl, 30 * DAY);
        assert_eq!(c.job_id.body_pointer.as_deref(), Some("/transfer_id"));
        let err = IdempotencyConfig::from_lookup(env(&[("IDEMQ_MARKER_TTL", "soon")])).unwrap_err();
        assert!(
            err.to_string().contains("IDEMQ_MARKER_TTL=\"soon\""),
            "{err}"
        );
        assert!(IdempotencyConfig::from_lookup(env(&[("IDEMQ_MARKER_TTL", "0s")])).is_err());
        assert!(IdempotencyConfig::from_lookup(env(&[("IDEMQ_JOB_ID_POINTER", "id")])).is_err());
    }

    #[test]
    fn legacy_markers_are_off_by_default_and_read_always_or_until_a_date() {
        let c = IdempotencyConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.legacy_markers, LegacyMarkers::Off);
        assert!(!c.legacy_markers.read_at(SystemTime::now()));
        let c = IdempotencyConfig::from_lookup(env(&[("IDEMQ_LEGACY_MARKERS", "read")])).unwrap();
        assert!(c.legacy_markers.read_at(SystemTime::now()));
        let c = IdempotencyConfig::from_lookup(env(&[(
            "IDEMQ_LEGACY_MARKERS",
            "until=2030-01-01T00:00:00Z",
        )]))
        .unwrap();
        let t = humantime::parse_rfc3339("2030-01-01T00:00:00Z").unwrap();
        assert!(c.legacy_markers.read_at(t - DAY));
        assert!(!c.legacy_markers.read_at(t));
        assert!(IdempotencyConfig::from_lookup(env(&[("IDEMQ_LEGACY_MARKERS", "on")])).is_err());
    }

    #[test]
    fn markers_are_read_first_by_default_and_the_variable_is_a_boolean() {
        let c = IdempotencyConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.read_marker_first, DEFAULT_READ_MARKER_FIRST);
        for (v, want) in [("true", true), ("1", true), ("false", false), ("0", false)] {
            let c = IdempotencyConfig::from_lookup(env(&[("IDEMQ_READ_MARKER_FIRST", v)])).unwrap();
            assert_eq!(c.read_marker_first, want, "{v}");
        }
        let err = IdempotencyConfig::from_lookup(env(&[("IDEMQ_READ_MARKER_FIRST", "yes")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("IDEMQ_READ_MARKER_FIRST"), "{err}");
    }

    #[test]
    fn envelope_from_env() {
        use crate::envelope::Envelope;
        let c = IdempotencyConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.job_id.envelope, Envelope::None);
        let c = IdempotencyConfig::from_lookup(env(&[
            ("IDEMQ_ENVELOPE", "sns"),
            ("IDEMQ_JOB_ID_POINTER", "/transfer_id"),
        ]))
        .unwrap();
        assert_eq!(c.job_id.envelope, Envelope::Sns);
        assert_eq!(c.job_id.body_pointer.as_deref(), Some("/transfer_id"));
        let c = IdempotencyConfig::from_lookup(env(&[("IDEMQ_ENVELOPE", "eventbridge")])).unwrap();
        assert_eq!(c.job_id.envelope, Envelope::EventBridge);
        let err = IdempotencyConfig::from_lookup(env(&[("IDEMQ_ENVELOPE", "kinesis")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("IDEMQ_ENVELOPE=\"kinesis\""), "{err}");
        assert!(err.contains("none, sns, eventbridge"), "{err}");
    }
}
