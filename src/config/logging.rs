//! Which logs are on and how they look: `IDEMQ_LOG`, `RUST_LOG` and
//! Lambda's log level and format, in that order.

use super::ConfigError;

/// The log filter for an `IDEMQ_LOG` value (`None`: unset). `IDEMQ_LOG`
/// comes first of the variables that set the levels: see
/// [`log_filter_from_env`].
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

/// The log filter this process's environment asks for, with `default` for
/// what it leaves unset: the filter [`run`](crate::run) installs, and the
/// `idemq` CLI (at `warn`).
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
/// An invalid value in the variable that decides gives every crate at
/// `default`, with the error naming that variable, for the caller to log
/// once its subscriber is installed ([`run`](crate::run) logs it as a
/// warning). It never falls back to a variable further down the list.
///
/// The variables: [advanced logging controls](https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-advanced.html),
/// [log-level filtering](https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs-log-level.html),
/// and the values Lambda accepts, in
/// [`LoggingConfig`](https://docs.aws.amazon.com/lambda/latest/api/API_LoggingConfig.html)
/// (`ApplicationLogLevel`, `LogFormat`).
///
/// ```
/// use tracing_subscriber::filter::LevelFilter;
/// use tracing_subscriber::layer::SubscriberExt;
/// use tracing_subscriber::util::SubscriberInitExt;
/// let (filter, invalid) = idemq::config::log_filter_from_env(LevelFilter::WARN);
/// tracing_subscriber::registry()
///     .with(filter)
///     .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
///     .init();
/// if let Some(e) = invalid {
///     tracing::warn!("{e}; logging at warn");
/// }
/// ```
pub fn log_filter_from_env(
    default: tracing_subscriber::filter::LevelFilter,
) -> (tracing_subscriber::filter::Targets, Option<ConfigError>) {
    match log_filter_from(|var| std::env::var(var).ok(), default) {
        Ok(filter) => (filter, None),
        Err(e) => (
            tracing_subscriber::filter::Targets::new().with_default(default),
            Some(e),
        ),
    }
}

/// [`log_filter_from_env`]'s filter, each variable read through `get` (a
/// map in a test), and an invalid value an error rather than `default`.
pub(crate) fn log_filter_from(
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

/// A `RUST_LOG` value: see [`log_filter_from_env`].
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

/// The log format from `AWS_LAMBDA_LOG_FORMAT`, read through `get`
/// (`|var| std::env::var(var).ok()` in a program, a map in a test): `JSON`
/// or `Text`, any case, which Lambda sets from the function's log format
/// (its
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

#[cfg(test)]
mod tests;
