//! Configuration: behaviour settings ([`IdempotencyConfig`], [`BatchConfig`])
//! and table layout ([`TableLayout`]), kept apart.
//!
//! Behaviour (how long markers live, where a job id is found) changes with
//! the workload; layout (attribute names) changes only with the table. Both
//! come from `IDEMQ_*` environment variables with typed defaults. AWS
//! endpoints are never configured here: the SDK reads `AWS_ENDPOINT_URL*`.

use std::time::{Duration, SystemTime};

use crate::backoff::Backoff;
use crate::job::JobIdResolver;

/// Default marker lifetime: source retention (up to 14 days) is rarely that
/// long, and 21 days covers the default 4 days + 14 days of DLQ + a replay day.
pub const DEFAULT_MARKER_TTL: Duration = Duration::from_secs(21 * 24 * 3600);

/// How long after a dead letter's retention ends a replay may still happen;
/// also the time `idemq dlq redrive` and `import` leave a copy to be
/// processed in before its job's markers may expire
/// ([`ReplayHorizon`](crate::horizon::ReplayHorizon)).
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Attribute names of the idemq table. The table has one string partition
/// key and DynamoDB TTL enabled on `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableLayout {
    /// The table's name (`IDEMQ_TABLE`).
    pub table_name: String,
    /// The string partition key (`IDEMQ_ATTR_PK`, default `pk`).
    pub partition_key: String,
    /// The TTL attribute, epoch seconds (`IDEMQ_ATTR_EXPIRES_AT`, default
    /// `expires_at`).
    pub expires_at: String,
    /// A marker's job id (`job_id`).
    pub job_id: String,
    /// A marker's payload hash (`payload_hash`), compared on a duplicate.
    pub payload_hash: String,
    /// When a marker was committed (`committed_at`).
    pub committed_at: String,
    /// A marker's source queue name (`queue`).
    pub queue: String,
    /// Every key idemq writes starts with this; effects may not use it.
    pub key_prefix: String,
    /// The consumer's namespace (`IDEMQ_NAMESPACE`), part of every marker,
    /// failure-record and downstream key; `None`: the source queue's name.
    /// See [`TableLayout::namespace_for`].
    pub namespace: Option<String>,
}

impl TableLayout {
    /// The default attribute names (`pk`, `expires_at`, `job_id`,
    /// `payload_hash`, `committed_at`, `queue`) and key prefix (`idemq#`)
    /// for the table `table_name`.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            partition_key: "pk".into(),
            expires_at: "expires_at".into(),
            job_id: "job_id".into(),
            payload_hash: "payload_hash".into(),
            committed_at: "committed_at".into(),
            queue: "queue".into(),
            key_prefix: "idemq#".into(),
            namespace: None,
        }
    }

    /// This layout with the namespace `namespace` (see
    /// [`TableLayout::namespace_for`]).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Result<Self, ConfigError> {
        let namespace = namespace.into();
        check_namespace(&namespace)?;
        self.namespace = Some(namespace);
        Ok(self)
    }

    /// The namespace of a consumer reading the queue `queue` (a name, URL
    /// or ARN): `IDEMQ_NAMESPACE` when set, else the queue's name.
    ///
    /// Two consumers that share a table (an SNS topic or an EventBridge
    /// rule fanning out to two queues) must each apply every job, so each
    /// needs its own marker; one consumer must find its own marker on every
    /// copy of a job. The queue's *name* is the default because it names the
    /// consumer and is the same on every copy: a redrive (SQS's or `idemq
    /// dlq redrive`) sends the job back to the queue it came from, and a
    /// redeploy keeps the queue. A `MessageId`, a function version or an
    /// ARN (with its account and region) would not be. Renaming (replacing)
    /// the queue starts a new namespace: jobs committed under the old name
    /// are not recognised on the new queue, so set `IDEMQ_NAMESPACE` to the
    /// old name before renaming. A consumer that reads several queues and
    /// must dedup across them sets one `IDEMQ_NAMESPACE` for all.
    pub fn namespace_for<'a>(&'a self, queue: &'a str) -> &'a str {
        self.namespace
            .as_deref()
            .unwrap_or_else(|| queue_name(queue))
    }

    /// The key of a job's dedup marker in `namespace`. The `ns#` part keeps
    /// these keys apart from every [`TableLayout::legacy_marker_key`].
    pub fn marker_key(&self, namespace: &str, job_id: &str) -> String {
        format!("{}ns#{namespace}#job#{job_id}", self.key_prefix)
    }

    /// The key a marker had before markers were namespaced (still read
    /// while [`LegacyMarkers`] says so, so that a job committed by an
    /// earlier version is not applied again).
    pub fn legacy_marker_key(&self, job_id: &str) -> String {
        format!("{}job#{job_id}", self.key_prefix)
    }

    /// The key of a failure record in `namespace`: by job id, or by
    /// `MessageId` for a message without a valid job id.
    pub fn failure_key(&self, namespace: &str, job_id: Option<&str>, message_id: &str) -> String {
        format!(
            "{}ns#{namespace}#{}",
            self.key_prefix,
            failure_suffix(job_id, message_id)
        )
    }

    /// The key a failure record had before records were namespaced.
    pub fn legacy_failure_key(&self, job_id: Option<&str>, message_id: &str) -> String {
        format!("{}{}", self.key_prefix, failure_suffix(job_id, message_id))
    }

    /// `IDEMQ_TABLE` (required) and the optional `IDEMQ_ATTR_PK`,
    /// `IDEMQ_ATTR_EXPIRES_AT`, `IDEMQ_KEY_PREFIX` overrides.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_env_with_table(None)
    }

    /// The one way every idemq program (consumer, `idemq init`, every
    /// `idemq dlq` command) builds its layout: the table from `table` when
    /// given (a `--table` flag), else `IDEMQ_TABLE`; the attribute names and
    /// key prefix from the same `IDEMQ_ATTR_*` / `IDEMQ_KEY_PREFIX`
    /// variables as the consumer, so all of them read and write the same
    /// keys.
    pub fn from_env_with_table(table: Option<String>) -> Result<Self, ConfigError> {
        Self::from_lookup(|k| match (k, &table) {
            ("IDEMQ_TABLE", Some(t)) => Some(t.clone()),
            _ => std::env::var(k).ok(),
        })
    }

    /// The variables that set the layout, for a program that prints which
    /// layout it used.
    pub const ENV_VARS: [&'static str; 5] = [
        "IDEMQ_TABLE",
        "IDEMQ_ATTR_PK",
        "IDEMQ_ATTR_EXPIRES_AT",
        "IDEMQ_KEY_PREFIX",
        "IDEMQ_NAMESPACE",
    ];

    pub(crate) fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let table = get("IDEMQ_TABLE")
            .filter(|t| !t.is_empty())
            .ok_or(ConfigError::Missing("IDEMQ_TABLE"))?;
        let mut layout = Self::new(table);
        for (var, slot) in [
            ("IDEMQ_ATTR_PK", &mut layout.partition_key),
            ("IDEMQ_ATTR_EXPIRES_AT", &mut layout.expires_at),
            ("IDEMQ_KEY_PREFIX", &mut layout.key_prefix),
        ] {
            if let Some(v) = get(var) {
                if v.is_empty() {
                    return Err(ConfigError::Invalid {
                        var,
                        value: v,
                        why: "must not be empty".into(),
                    });
                }
                *slot = v;
            }
        }
        if let Some(ns) = get("IDEMQ_NAMESPACE").filter(|ns| !ns.is_empty()) {
            layout = layout.with_namespace(ns)?;
        }
        Ok(layout)
    }
}

fn failure_suffix(job_id: Option<&str>, message_id: &str) -> String {
    match job_id {
        Some(id) => format!("failure#{id}"),
        None => format!("failure-message#{message_id}"),
    }
}

/// The name of a queue given by name, URL (`…/<account>/<name>`) or ARN
/// (`arn:aws:sqs:<region>:<account>:<name>`).
pub fn queue_name(queue: &str) -> &str {
    queue.rsplit(['/', ':']).next().unwrap_or(queue)
}

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

/// A namespace is a queue name's alphabet (letters, digits, `-`, `_`, `.`),
/// 1 to 80 characters, so the queue-name default always fits and no
/// namespace can contain the `#` that separates the parts of a key.
pub(crate) fn check_namespace(ns: &str) -> Result<(), ConfigError> {
    let ok = (1..=80).contains(&ns.len())
        && ns
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        var: "IDEMQ_NAMESPACE",
        value: ns.to_owned(),
        why: "1 to 80 letters, digits, '-', '_' or '.' (a queue name's characters)".into(),
    })
}

/// Whether a consumer also looks for markers written before markers were
/// namespaced (`IDEMQ_LEGACY_MARKERS`): one consistent `GetItem` of the
/// legacy key before each commit of a separate marker, so that a job an
/// earlier version committed is still a duplicate after the upgrade.
/// Legacy markers stop mattering once the last of them has expired: a
/// marker TTL after the upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LegacyMarkers {
    /// Never (`off`): a table that no earlier version wrote to, or an
    /// upgrade more than a marker TTL ago.
    Off,
    /// Always (`read`, the default: safe for an upgrade).
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
    /// read (`IDEMQ_LEGACY_MARKERS`, default `read`).
    pub legacy_markers: LegacyMarkers,
    /// Whether a job's marker is read before its handler runs
    /// (`IDEMQ_READ_MARKER_FIRST`, `true` or `false`, default
    /// [`DEFAULT_READ_MARKER_FIRST`]): a duplicate then skips its handler,
    /// so whatever the handler does outside DynamoDB is not done again.
    pub read_marker_first: bool,
}

/// Whether markers are read before the handler unless
/// `IDEMQ_READ_MARKER_FIRST` says otherwise. On: one consistent `GetItem`
/// per job (1 read unit) buys a handler that never runs again for a job
/// already committed, however late the copy (the numbers are in
/// BENCHMARKS.md).
pub const DEFAULT_READ_MARKER_FIRST: bool = true;

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            marker_ttl: DEFAULT_MARKER_TTL,
            job_id: JobIdResolver::new(),
            legacy_markers: LegacyMarkers::Read,
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

/// The log filter for an `IDEMQ_LOG` value (`None`: unset). `IDEMQ_LOG`
/// comes first of the variables that set the levels: see
/// [`log_filter_from`].
///
/// `IDEMQ_LOG` is what an operator raises in an incident, so a plain level
/// raises **idemq's own targets only** (the `idemq` crate and the `idemq`
/// CLI): `IDEMQ_LOG=trace` gives `idemq=trace` while every other crate stays
/// at `default`. Dependencies are never made louder by a plain level: the
/// AWS SDK's and `lambda_runtime`'s trace logs print whole ReceiveMessage
/// responses and invocation events, message bodies included. A plain level
/// quieter than `default` (`IDEMQ_LOG=warn`) quiets everything.
///
/// Any other directive is a `target=level` directive, honoured as written,
/// so a dependency or your handler's own crate is raised by naming it:
/// `IDEMQ_LOG=trace,aws_smithy_runtime=trace` or `IDEMQ_LOG=debug,my_handler=debug`
/// (a handler binary's events have its crate's name as target, not `idemq`).
/// The longest matching target wins; a bare target (`my_handler`) means all
/// its levels. Naming a dependency can put payload bytes in the logs: do it
/// only where that is acceptable. The filter is a
/// [`Targets`](tracing_subscriber::filter::Targets) (no regex engine), so
/// `RUST_LOG`'s span filters (`target[span]=level`) are not supported.
///
/// ```
/// use tracing_subscriber::filter::LevelFilter;
/// let filter = idemq::config::log_filter(Some("trace"), LevelFilter::INFO).unwrap();
/// assert_eq!(filter.to_string(), "idemq=trace,info");
/// ```
pub fn log_filter(
    value: Option<&str>,
    default: tracing_subscriber::filter::LevelFilter,
) -> Result<tracing_subscriber::filter::Targets, ConfigError> {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let invalid = |why: String| ConfigError::Invalid {
        var: "IDEMQ_LOG",
        value: value.unwrap_or_default().to_owned(),
        why,
    };
    let mut idemq: Option<LevelFilter> = None;
    let mut named = Vec::new();
    for directive in value.unwrap_or("").split(',').map(str::trim) {
        if directive.is_empty() {
            continue;
        }
        if directive.contains('[') {
            return Err(invalid(SPAN_FILTERS.into()));
        }
        match directive.parse::<LevelFilter>() {
            Ok(level) => idemq = Some(level),
            Err(_) => named.push(directive),
        }
    }
    let mut directives = vec![idemq.map_or(default, |l| l.min(default)).to_string()];
    if let Some(level) = idemq {
        directives.push(format!("idemq={level}"));
    }
    directives.extend(named.iter().map(|d| d.to_string()));
    directives
        .join(",")
        .parse::<Targets>()
        .map_err(|e| invalid(e.to_string()))
}

/// Crates whose logs a plain `RUST_LOG` or `AWS_LAMBDA_LOG_LEVEL` level
/// never makes louder than the program's default: targets starting with one
/// of these (the AWS SDK and its smithy runtime, the HTTP and TLS stack,
/// `lambda_runtime`, `tokio_postgres`). Their debug and trace output is
/// noise at best, and at worst whole requests, responses and invocation
/// events, bodies included (`lambda_runtime` logs each raw event at
/// `trace`, `tokio_postgres` each statement's parameters at `debug`).
/// Named explicitly (`RUST_LOG=debug,aws_smithy_runtime=trace`), they log
/// as asked.
const QUIET_DEPENDENCIES: &[&str] = &[
    "aws_config",
    "aws_credential_types",
    "aws_runtime",
    "aws_sdk_",
    "aws_sigv4",
    "aws_smithy_",
    "aws_types",
    "h2",
    "hyper",
    "lambda_runtime",
    "mio",
    "rustls",
    "tokio_postgres",
    "tokio_rustls",
    "tower",
    "want",
];

/// The log filter from the environment, each variable read through `get`
/// (`|var| std::env::var(var).ok()` in a program; a map in a test).
///
/// Three variables set the levels; **the first one set decides alone**,
/// the others are then ignored (an empty value counts as unset):
///
/// 1. **`IDEMQ_LOG`**: the operator's knob for an incident, read by
///    [`log_filter`]: a plain level raises idemq's own logs only.
/// 2. **`RUST_LOG`**: the Rust convention. A plain level
///    (`RUST_LOG=debug`) applies to every crate, your handler's included,
///    except the AWS SDK, smithy, HTTP, TLS and `lambda_runtime` crates,
///    which stay at `default` (or at the plain level, when it is quieter)
///    unless named (`RUST_LOG=debug,aws_smithy_runtime=trace`). Other
///    directives are `target=level`, as in `IDEMQ_LOG`; targets no
///    directive matches log at `default`. Span and field filters
///    (`target[span]=level`) are not supported.
/// 3. **`AWS_LAMBDA_LOG_LEVEL`**: the application log level of Lambda's
///    advanced logging controls, which Lambda sets from the function's
///    logging configuration: `TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR` or
///    `FATAL` (any case; `FATAL` is read as `error`, tracing's quietest
///    level). It applies like a plain `RUST_LOG` level.
///
/// None set: every crate at `default`.
///
/// Why `RUST_LOG` before `AWS_LAMBDA_LOG_LEVEL`: it is set by the
/// function's owner and can name crates, while the Lambda level is one
/// level for everything; and Lambda filters on that level itself anyway.
/// With an application log level set (it needs the JSON log format), Lambda
/// drops every line below it before CloudWatch Logs, so on Lambda
/// `IDEMQ_LOG` and `RUST_LOG` can make logs quieter than that level, never
/// louder.
///
/// An invalid value in the variable that decides is an error naming it;
/// [`run`](crate::run) then logs it once and uses `default` for every
/// crate. It never falls back to a variable further down the list.
///
/// The variables: [advanced logging controls](https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-advanced.html),
/// [log-level filtering](https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html),
/// and the values Lambda accepts, in
/// [`LoggingConfig`](https://docs.aws.amazon.com/lambda/latest/api/API_LoggingConfig.html)
/// (`ApplicationLogLevel`, `LogFormat`).
///
/// ```
/// use tracing::Level;
/// use tracing_subscriber::filter::LevelFilter;
/// let get = |var: &str| (var == "RUST_LOG").then(|| "debug".to_owned());
/// let filter = idemq::config::log_filter_from(get, LevelFilter::INFO).unwrap();
/// assert!(filter.would_enable("my_handler", &Level::DEBUG));
/// assert!(!filter.would_enable("aws_smithy_runtime::client", &Level::DEBUG));
/// ```
pub fn log_filter_from(
    get: impl Fn(&str) -> Option<String>,
    default: tracing_subscriber::filter::LevelFilter,
) -> Result<tracing_subscriber::filter::Targets, ConfigError> {
    let set = |var: &str| get(var).filter(|v| !v.trim().is_empty());
    if let Some(value) = set("IDEMQ_LOG") {
        return log_filter(Some(&value), default);
    }
    if let Some(value) = set("RUST_LOG") {
        return rust_log_filter(&value, default);
    }
    if let Some(value) = set("AWS_LAMBDA_LOG_LEVEL") {
        let level = lambda_log_level(&value)?;
        return Ok(everyone_at(level, default, &[])
            .parse()
            .expect("level directives parse"));
    }
    Ok(tracing_subscriber::filter::Targets::new().with_default(default))
}

/// A `RUST_LOG` value: see [`log_filter_from`].
fn rust_log_filter(
    value: &str,
    default: tracing_subscriber::filter::LevelFilter,
) -> Result<tracing_subscriber::filter::Targets, ConfigError> {
    use tracing_subscriber::filter::LevelFilter;
    let mut plain: Option<LevelFilter> = None;
    let mut named = Vec::new();
    let invalid = |why: String| ConfigError::Invalid {
        var: "RUST_LOG",
        value: value.to_owned(),
        why,
    };
    for directive in value.split(',').map(str::trim) {
        if directive.is_empty() {
            continue;
        }
        if directive.contains('[') {
            return Err(invalid(SPAN_FILTERS.into()));
        }
        match directive.parse::<LevelFilter>() {
            Ok(level) => plain = Some(level),
            Err(_) => named.push(directive),
        }
    }
    let directives = match plain {
        Some(level) => everyone_at(level, default, &named),
        None => std::iter::once(default.to_string())
            .chain(named.iter().map(|d| d.to_string()))
            .collect::<Vec<_>>()
            .join(","),
    };
    directives
        .parse::<tracing_subscriber::filter::Targets>()
        .map_err(|e| invalid(e.to_string()))
}

/// Why a directive with `[` is refused: `Targets` would read
/// `target[span]=level` as a target no event has, and ignore it silently.
const SPAN_FILTERS: &str = "span and field filters (`target[span]=level`) are not supported";

/// `level` for every target, the quiet dependencies at the quieter of
/// `level` and `default`, then the `named` directives (which replace a
/// quiet dependency's directive for the same target).
fn everyone_at(
    level: tracing_subscriber::filter::LevelFilter,
    default: tracing_subscriber::filter::LevelFilter,
    named: &[&str],
) -> String {
    let quiet = level.min(default);
    std::iter::once(level.to_string())
        .chain(QUIET_DEPENDENCIES.iter().map(|t| format!("{t}={quiet}")))
        .chain(named.iter().map(|d| d.to_string()))
        .collect::<Vec<_>>()
        .join(",")
}

/// An `AWS_LAMBDA_LOG_LEVEL` value (`TRACE`, `DEBUG`, `INFO`, `WARN`,
/// `ERROR`, `FATAL`, any case) as a level; `FATAL` is `error`.
fn lambda_log_level(value: &str) -> Result<tracing_subscriber::filter::LevelFilter, ConfigError> {
    use tracing_subscriber::filter::LevelFilter;
    Ok(match value.trim().to_ascii_uppercase().as_str() {
        "TRACE" => LevelFilter::TRACE,
        "DEBUG" => LevelFilter::DEBUG,
        "INFO" => LevelFilter::INFO,
        "WARN" => LevelFilter::WARN,
        "ERROR" | "FATAL" => LevelFilter::ERROR,
        _ => {
            return Err(ConfigError::Invalid {
                var: "AWS_LAMBDA_LOG_LEVEL",
                value: value.to_owned(),
                why: "expected TRACE, DEBUG, INFO, WARN, ERROR or FATAL".into(),
            });
        }
    })
}

/// How [`run`](crate::run) writes log events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogFormat {
    /// One JSON object a line (`level`, `target`, `fields`, spans), which
    /// CloudWatch Logs Insights queries by field and Lambda's log-level
    /// filtering reads.
    Json,
    /// Plain text lines.
    Text,
}

impl LogFormat {
    /// The format when `AWS_LAMBDA_LOG_FORMAT` is unset or invalid: JSON on
    /// Lambda, text off it.
    pub fn host_default(on_lambda: bool) -> Self {
        if on_lambda { Self::Json } else { Self::Text }
    }
}

/// The log format from `AWS_LAMBDA_LOG_FORMAT` (read through `get`, as in
/// [`log_filter_from`]): `JSON` or `Text`, any case, which Lambda sets from
/// the function's log format (its
/// [advanced logging controls](https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-advanced.html);
/// values as in
/// [`LoggingConfig`](https://docs.aws.amazon.com/lambda/latest/api/API_LoggingConfig.html)).
/// Unset or empty: [`LogFormat::host_default`], JSON on Lambda and text
/// elsewhere. Set off Lambda, it is honoured too (JSON on stderr for a
/// local worker's log collector). An invalid value is an error naming it;
/// [`run`](crate::run) logs it once and uses the host's default.
///
/// Either way no log line carries payload bytes: the format changes how an
/// event is written, not which events and fields there are.
pub fn log_format_from(
    get: impl Fn(&str) -> Option<String>,
    on_lambda: bool,
) -> Result<LogFormat, ConfigError> {
    let Some(value) = get("AWS_LAMBDA_LOG_FORMAT").filter(|v| !v.trim().is_empty()) else {
        return Ok(LogFormat::host_default(on_lambda));
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "json" => Ok(LogFormat::Json),
        "text" => Ok(LogFormat::Text),
        _ => Err(ConfigError::Invalid {
            var: "AWS_LAMBDA_LOG_FORMAT",
            value,
            why: "expected JSON or Text".into(),
        }),
    }
}

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
    /// [`Write::optimistic`](crate::effect::Write::optimistic) condition
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
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

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
    fn layout_from_env() {
        assert_eq!(
            TableLayout::from_lookup(env(&[])),
            Err(ConfigError::Missing("IDEMQ_TABLE"))
        );
        let l = TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs")])).unwrap();
        assert_eq!(l, TableLayout::new("jobs"));
        assert_eq!(l.marker_key("q", "t-1"), "idemq#ns#q#job#t-1");
        assert_eq!(l.legacy_marker_key("t-1"), "idemq#job#t-1");
        assert_eq!(
            l.namespace_for("https://sqs.x/000000000000/orders"),
            "orders"
        );
        assert_eq!(
            l.namespace_for("arn:aws:sqs:eu-west-1:0:orders.fifo"),
            "orders.fifo"
        );
        let l = TableLayout::from_lookup(env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("IDEMQ_NAMESPACE", "billing"),
        ]))
        .unwrap();
        assert_eq!(l.namespace_for("orders"), "billing");
        assert_eq!(
            l.failure_key("billing", Some("t-1"), "m"),
            "idemq#ns#billing#failure#t-1"
        );
        assert_eq!(l.legacy_failure_key(None, "m"), "idemq#failure-message#m");
        for bad in ["a#b", "a b", &"x".repeat(81)] {
            assert!(
                TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs"), ("IDEMQ_NAMESPACE", bad)]))
                    .is_err(),
                "{bad}"
            );
        }
        let l = TableLayout::from_lookup(env(&[
            ("IDEMQ_TABLE", "jobs"),
            ("IDEMQ_ATTR_PK", "id"),
            ("IDEMQ_ATTR_EXPIRES_AT", "ttl"),
        ]))
        .unwrap();
        assert_eq!(
            (l.partition_key.as_str(), l.expires_at.as_str()),
            ("id", "ttl")
        );
        assert!(matches!(
            TableLayout::from_lookup(env(&[("IDEMQ_TABLE", "jobs"), ("IDEMQ_ATTR_PK", "")])),
            Err(ConfigError::Invalid {
                var: "IDEMQ_ATTR_PK",
                ..
            })
        ));
    }

    /// Which of these (target, level) events a filter lets through.
    fn passes(filter: tracing_subscriber::filter::Targets) -> Vec<&'static str> {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;

        struct Record(Arc<Mutex<Vec<String>>>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Record {
            fn on_event(
                &self,
                event: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                let m = event.metadata();
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("{} {}", m.target(), m.level()));
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(filter)
            .with(Record(seen.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::trace!(target: "idemq::batch", "x");
            tracing::debug!(target: "idemq::batch", "x");
            tracing::info!(target: "idemq::batch", "x");
            tracing::trace!(target: "aws_smithy_runtime::client", "x");
            tracing::info!(target: "aws_smithy_runtime::client", "x");
            tracing::trace!(target: "lambda_runtime", "x");
            tracing::warn!(target: "lambda_runtime", "x");
        });
        let all = [
            "idemq::batch TRACE",
            "idemq::batch DEBUG",
            "idemq::batch INFO",
            "aws_smithy_runtime::client TRACE",
            "aws_smithy_runtime::client INFO",
            "lambda_runtime TRACE",
            "lambda_runtime WARN",
        ];
        let seen = seen.lock().unwrap();
        all.into_iter()
            .filter(|e| seen.iter().any(|s| s == e))
            .collect()
    }

    /// `IDEMQ_LOG=trace` must not turn on the SDK's or
    /// lambda_runtime's trace logs (whole responses and events, bodies
    /// included).
    #[test]
    fn a_plain_level_raises_idemq_only() {
        use tracing_subscriber::filter::LevelFilter;
        let f = log_filter(Some("trace"), LevelFilter::INFO).unwrap();
        assert_eq!(
            passes(f),
            [
                "idemq::batch TRACE",
                "idemq::batch DEBUG",
                "idemq::batch INFO",
                "aws_smithy_runtime::client INFO",
                "lambda_runtime WARN",
            ]
        );
        // A quieter level quiets everything.
        let f = log_filter(Some("warn"), LevelFilter::INFO).unwrap();
        assert_eq!(passes(f), ["lambda_runtime WARN"]);
        // Unset: the program's default for everyone.
        let f = log_filter(None, LevelFilter::INFO).unwrap();
        assert_eq!(
            passes(f),
            [
                "idemq::batch INFO",
                "aws_smithy_runtime::client INFO",
                "lambda_runtime WARN"
            ]
        );
    }

    #[test]
    fn a_dependency_named_explicitly_is_honoured() {
        use tracing_subscriber::filter::LevelFilter;
        let f = log_filter(Some("debug,aws_smithy_runtime=trace"), LevelFilter::INFO).unwrap();
        assert_eq!(
            passes(f),
            [
                "idemq::batch DEBUG",
                "idemq::batch INFO",
                "aws_smithy_runtime::client TRACE",
                "aws_smithy_runtime::client INFO",
                "lambda_runtime WARN",
            ]
        );
        assert!(log_filter(Some("idemq=verbose"), LevelFilter::INFO).is_err());
        // The longest target wins, whatever the order.
        let f = log_filter(
            Some("aws_smithy_runtime::client=warn,aws_smithy_runtime=trace"),
            LevelFilter::INFO,
        )
        .unwrap();
        assert_eq!(passes(f), ["idemq::batch INFO", "lambda_runtime WARN"]);
    }

    /// `(target, level)` pairs the filter lets through, of a fixed sample:
    /// idemq, a handler crate, the SDK, `lambda_runtime`.
    fn enabled(filter: &tracing_subscriber::filter::Targets) -> Vec<String> {
        use tracing::Level;
        let mut out = Vec::new();
        for target in [
            "idemq::batch",
            "my_handler",
            "aws_sdk_sqs::client",
            "lambda_runtime",
        ] {
            for level in [
                Level::TRACE,
                Level::DEBUG,
                Level::INFO,
                Level::WARN,
                Level::ERROR,
            ] {
                if filter.would_enable(target, &level) {
                    out.push(format!("{target} {level}"));
                    break;
                }
            }
        }
        out
    }

    fn filter_from(
        pairs: &[(&str, &str)],
        default: tracing_subscriber::filter::LevelFilter,
    ) -> Result<Vec<String>, ConfigError> {
        log_filter_from(env(pairs), default).map(|f| enabled(&f))
    }

    /// The first of IDEMQ_LOG, RUST_LOG, AWS_LAMBDA_LOG_LEVEL that is set
    /// decides alone.
    #[test]
    fn log_level_precedence() {
        use tracing_subscriber::filter::LevelFilter;
        let info = LevelFilter::INFO;
        let all = [
            ("IDEMQ_LOG", "warn"),
            ("RUST_LOG", "trace"),
            ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
        ];
        // IDEMQ_LOG first, whatever the others say.
        let everyone_warn = [
            "idemq::batch WARN",
            "my_handler WARN",
            "aws_sdk_sqs::client WARN",
            "lambda_runtime WARN",
        ];
        assert_eq!(filter_from(&all, info).unwrap(), everyone_warn);
        // Then RUST_LOG over the Lambda level.
        let trace = [
            "idemq::batch TRACE",
            "my_handler TRACE",
            "aws_sdk_sqs::client INFO",
            "lambda_runtime INFO",
        ];
        assert_eq!(filter_from(&all[1..], info).unwrap(), trace);
        // Then the Lambda level.
        let debug = [
            "idemq::batch DEBUG",
            "my_handler DEBUG",
            "aws_sdk_sqs::client INFO",
            "lambda_runtime INFO",
        ];
        assert_eq!(filter_from(&all[2..], info).unwrap(), debug);
        // Then the default, for everyone.
        let everyone_info = [
            "idemq::batch INFO",
            "my_handler INFO",
            "aws_sdk_sqs::client INFO",
            "lambda_runtime INFO",
        ];
        assert_eq!(filter_from(&[], info).unwrap(), everyone_info);
        // An empty value counts as unset.
        let empty = [
            ("IDEMQ_LOG", " "),
            ("RUST_LOG", ""),
            ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
        ];
        assert_eq!(filter_from(&empty, info).unwrap(), debug);
        // IDEMQ_LOG's plain level is idemq's only, even over RUST_LOG.
        let f = filter_from(&[("IDEMQ_LOG", "debug"), ("RUST_LOG", "trace")], info).unwrap();
        assert_eq!(
            f,
            [
                "idemq::batch DEBUG",
                "my_handler INFO",
                "aws_sdk_sqs::client INFO",
                "lambda_runtime INFO",
            ]
        );
    }

    /// A plain RUST_LOG or Lambda level reaches the handler's crate but
    /// never makes the SDK or lambda_runtime louder than the default (their
    /// trace logs print bodies and events); named, they log as asked.
    #[test]
    fn a_plain_rust_log_level_spares_the_sdk() {
        use tracing_subscriber::filter::LevelFilter;
        // The CLI's default is warn: the SDK stays at warn.
        let f = filter_from(&[("RUST_LOG", "debug")], LevelFilter::WARN).unwrap();
        assert_eq!(
            f,
            [
                "idemq::batch DEBUG",
                "my_handler DEBUG",
                "aws_sdk_sqs::client WARN",
                "lambda_runtime WARN",
            ]
        );
        let f = filter_from(&[("AWS_LAMBDA_LOG_LEVEL", "trace")], LevelFilter::WARN).unwrap();
        assert_eq!(
            f,
            [
                "idemq::batch TRACE",
                "my_handler TRACE",
                "aws_sdk_sqs::client WARN",
                "lambda_runtime WARN",
            ]
        );
        // A quieter plain level quiets the SDK too.
        let f = filter_from(&[("RUST_LOG", "error")], LevelFilter::INFO).unwrap();
        assert_eq!(
            f,
            [
                "idemq::batch ERROR",
                "my_handler ERROR",
                "aws_sdk_sqs::client ERROR",
                "lambda_runtime ERROR",
            ]
        );
        // Named: honoured, over the quiet default, in either order.
        for value in [
            "debug,aws_sdk_sqs=trace,lambda_runtime=debug",
            "lambda_runtime=debug,aws_sdk_sqs=trace,debug",
        ] {
            let f = filter_from(&[("RUST_LOG", value)], LevelFilter::INFO).unwrap();
            assert_eq!(
                f,
                [
                    "idemq::batch DEBUG",
                    "my_handler DEBUG",
                    "aws_sdk_sqs::client TRACE",
                    "lambda_runtime DEBUG",
                ],
                "{value}"
            );
        }
        // Only named targets: the rest at the default.
        let f = filter_from(&[("RUST_LOG", "my_handler=debug")], LevelFilter::INFO).unwrap();
        assert_eq!(
            f,
            [
                "idemq::batch INFO",
                "my_handler DEBUG",
                "aws_sdk_sqs::client INFO",
                "lambda_runtime INFO",
            ]
        );
        // Every quiet dependency's targets stay at the default.
        let f = log_filter_from(env(&[("RUST_LOG", "trace")]), LevelFilter::INFO).unwrap();
        for target in QUIET_DEPENDENCIES {
            let target = format!("{target}x::y");
            assert!(f.would_enable(&target, &tracing::Level::INFO), "{target}");
            assert!(!f.would_enable(&target, &tracing::Level::DEBUG), "{target}");
        }
    }

    #[test]
    fn lambda_log_levels_and_invalid_values() {
        use tracing_subscriber::filter::LevelFilter;
        for (value, level) in [
            ("TRACE", "TRACE"),
            ("DEBUG", "DEBUG"),
            ("info", "INFO"),
            ("Warn", "WARN"),
            ("ERROR", "ERROR"),
            ("FATAL", "ERROR"),
        ] {
            let f = filter_from(&[("AWS_LAMBDA_LOG_LEVEL", value)], LevelFilter::INFO).unwrap();
            assert_eq!(f[1], format!("my_handler {level}"), "{value}");
        }
        // An invalid value in the variable that decides is an error naming
        // it (the caller then uses the default), not a fall-through.
        for (pairs, var) in [
            (
                &[("AWS_LAMBDA_LOG_LEVEL", "VERBOSE")][..],
                "AWS_LAMBDA_LOG_LEVEL",
            ),
            (
                &[("AWS_LAMBDA_LOG_LEVEL", "OFF")][..],
                "AWS_LAMBDA_LOG_LEVEL",
            ),
            (
                &[
                    ("RUST_LOG", "my_handler[span]=debug"),
                    ("AWS_LAMBDA_LOG_LEVEL", "DEBUG"),
                ][..],
                "RUST_LOG",
            ),
            (
                &[("IDEMQ_LOG", "idemq=verbose"), ("RUST_LOG", "debug")][..],
                "IDEMQ_LOG",
            ),
            (&[("IDEMQ_LOG", "idemq[{job}]=debug")][..], "IDEMQ_LOG"),
        ] {
            match filter_from(pairs, LevelFilter::INFO) {
                Err(ConfigError::Invalid { var: v, .. }) => assert_eq!(v, var, "{pairs:?}"),
                other => panic!("{pairs:?}: {other:?}"),
            }
        }
        // A value shadowed by one above it is not read.
        assert!(
            filter_from(
                &[("RUST_LOG", "debug"), ("AWS_LAMBDA_LOG_LEVEL", "VERBOSE")],
                LevelFilter::INFO
            )
            .is_ok()
        );
    }

    #[test]
    fn lambda_log_format() {
        for (value, on_lambda, format) in [
            (None, true, LogFormat::Json),
            (None, false, LogFormat::Text),
            (Some(""), true, LogFormat::Json),
            (Some("Text"), true, LogFormat::Text),
            (Some("TEXT"), true, LogFormat::Text),
            (Some("JSON"), false, LogFormat::Json),
            (Some("json"), true, LogFormat::Json),
        ] {
            let pairs: Vec<_> = value
                .map(|v| ("AWS_LAMBDA_LOG_FORMAT", v))
                .into_iter()
                .collect();
            assert_eq!(
                log_format_from(env(&pairs), on_lambda).unwrap(),
                format,
                "{value:?} on_lambda={on_lambda}"
            );
        }
        match log_format_from(env(&[("AWS_LAMBDA_LOG_FORMAT", "yaml")]), true) {
            Err(ConfigError::Invalid { var, .. }) => assert_eq!(var, "AWS_LAMBDA_LOG_FORMAT"),
            other => panic!("{other:?}"),
        }
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
    fn legacy_markers_are_read_by_default_and_until_a_date() {
        let c = IdempotencyConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c.legacy_markers, LegacyMarkers::Read);
        let c = IdempotencyConfig::from_lookup(env(&[("IDEMQ_LEGACY_MARKERS", "off")])).unwrap();
        assert!(!c.legacy_markers.read_at(SystemTime::now()));
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
