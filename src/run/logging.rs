//! idemq's logging defaults for a host: its subscriber and panic hook,
//! installed only when the program set none of its own.

/// The time of a log line: none on Lambda, where CloudWatch Logs stamps
/// each event; the system time elsewhere.
#[derive(Clone, Copy)]
struct LogClock {
    stamp: bool,
}

impl tracing_subscriber::fmt::time::FormatTime for LogClock {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        if self.stamp {
            tracing_subscriber::fmt::time::SystemTime.format_time(w)
        } else {
            Ok(())
        }
    }
}

/// idemq's subscriber and panic hook, only when the program set no
/// subscriber of its own (see [`crate::run`]).
pub(super) fn init_logging(on_lambda: bool) {
    use crate::config::{self, LogFormat};
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::fmt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let default = LevelFilter::INFO;
    let env = |var: &str| std::env::var(var).ok();
    let mut invalid = Vec::new();
    let (filter, invalid_filter) = config::log_filter_from_env(default);
    if let Some(e) = invalid_filter {
        invalid.push(format!("{e}; logging at {default}"));
    }
    let format = config::log_format_from(env, on_lambda).unwrap_or_else(|e| {
        let format = LogFormat::host_default(on_lambda);
        let name = if format == LogFormat::Json {
            "JSON"
        } else {
            "text"
        };
        invalid.push(format!("{e}; writing {name}"));
        format
    });
    let registry = tracing_subscriber::registry().with(filter);
    // On Lambda: stdout, no time (CloudWatch Logs stamps each event); JSON
    // unless the function's log format is Text, so CloudWatch Logs
    // Insights can query job ids. Locally: stderr, with the time. The
    // writer and the clock are chosen at run time, so there is one
    // subscriber type per format, not one per host and format (each is a
    // whole formatting stack in the binary).
    let writer = if on_lambda {
        fmt::writer::BoxMakeWriter::new(std::io::stdout)
    } else {
        fmt::writer::BoxMakeWriter::new(std::io::stderr)
    };
    let clock = LogClock { stamp: !on_lambda };
    // An error can also mean that the `log` crate's logger was taken: the
    // subscriber is idemq's all the same.
    let _ = match format {
        LogFormat::Json => registry
            .with(fmt::layer().json().with_timer(clock).with_writer(writer))
            .try_init(),
        LogFormat::Text => {
            // Colours as the build and NO_COLOR say, but never on Lambda.
            let text = fmt::layer();
            let text = if on_lambda {
                text.with_ansi(false)
            } else {
                text
            };
            registry
                .with(text.with_timer(clock).with_writer(writer))
                .try_init()
        }
    };
    log_panics();
    for e in invalid {
        tracing::warn!("{e}");
    }
}

/// A handler panic fails its job only (see [`crate::batch`]); it is reported as a
/// log event like any other failure, not as raw text beside JSON logs.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "panicked");
    }));
}
