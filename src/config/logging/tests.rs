//! Unit tests of the log settings (src/config/logging.rs).

use super::*;
use crate::config::test_env::env;

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
