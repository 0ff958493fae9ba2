//! idemq: effectively-once processing of SQS jobs on AWS Lambda.
//!
//! SQS delivers every message at least once. idemq makes the second delivery
//! harmless: a handler returns its result as an [`Effect`] (DynamoDB writes),
//! and idemq commits a dedup marker and that effect in one
//! `TransactWriteItems` ([`commit`]). A redelivered job finds its marker and
//! is acknowledged as a duplicate; a crash leaves either both or neither.
//!
//! Where things live:
//! - [`job`]: the job id (attribute, body pointer or `MessageId`) and the
//!   payload hash;
//! - [`effect`]: the typed builder for a job's writes and its limits;
//! - [`commit`]: the dedup transaction and its outcomes;
//! - [`config`]: `IDEMQ_*` settings and the table layout;
//! - [`init`]: creating or verifying the queue, DLQ and table.

pub mod backoff;
pub mod batch;
pub mod classify;
pub mod clock;
pub mod commit;
pub mod config;
pub mod dlq;
pub mod effect;
pub mod handler;
pub mod host;
pub mod init;
pub mod job;
pub mod lambda;
pub mod metrics;
pub mod producer;
pub mod queue;
pub mod worker;

pub use commit::{CommitError, CommitOutcome, Committer, JobRef};
pub use config::{IdempotencyConfig, TableLayout};
pub use effect::{Effect, EffectError, Key, Write};
pub use job::{
    InvalidJobId, JOB_ID_ATTRIBUTE, JobId, JobIdResolver, JobIdSource, PayloadHash, downstream_key,
};
pub use producer::Producer;

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Runs `handler` on AWS Lambda when `AWS_LAMBDA_RUNTIME_API` is set, and
/// otherwise as a local worker that long-polls `--queue-url`.
///
/// Logs go to stdout as JSON on Lambda and as text on stderr locally, at
/// `info` unless `IDEMQ_LOG` says otherwise. A plain level there
/// (`IDEMQ_LOG=debug`) raises idemq's own logs only: the AWS SDK and
/// `lambda_runtime` stay at `info`, since their trace logs print whole
/// messages and events. Name a crate to raise it too, your handler's own
/// crate included: `IDEMQ_LOG=debug,my_handler=debug`. See
/// [`config::log_filter`]. An invalid `IDEMQ_LOG` is reported in the log and
/// the default used.
///
/// Handler error and panic texts are logged and stored as they are (failure
/// records, the `idemq-error` DLQ attribute): they must not carry payload
/// data.
///
/// ```no_run
/// use idemq::handler::{handler_fn, JobMeta};
///
/// #[tokio::main]
/// async fn main() -> Result<(), idemq::host::HostError> {
///     idemq::run(handler_fn(|_job: serde_json::Value, _meta: JobMeta| async {
///         Ok(idemq::Effect::new())
///     }))
///     .await
/// }
/// ```
pub async fn run<H: handler::Handler>(handler: H) -> Result<(), host::HostError> {
    // Chaos builds only: failpoints from the FAILPOINTS variable.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let on_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    let default = tracing_subscriber::filter::LevelFilter::INFO;
    let requested = std::env::var("IDEMQ_LOG").ok();
    let (filter, invalid) = match config::log_filter(requested.as_deref(), default) {
        Ok(filter) => (filter, None),
        Err(e) => (
            tracing_subscriber::EnvFilter::new(default.to_string()),
            Some(e),
        ),
    };
    if on_lambda {
        // JSON logs, so CloudWatch Logs Insights can query job ids.
        let _ = tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .without_time()
            .try_init();
        log_panics();
        warn_invalid(invalid);
        lambda::run(handler).await
    } else {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
        log_panics();
        warn_invalid(invalid);
        worker::run_from_args(handler).await
    }
}

fn warn_invalid(invalid: Option<config::ConfigError>) {
    if let Some(e) = invalid {
        tracing::warn!("{e}; logging at info");
    }
}

/// A handler panic fails its job only (see [`batch`]); it is reported as a
/// log event like any other failure, not as raw text beside JSON logs.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "panicked");
    }));
}
