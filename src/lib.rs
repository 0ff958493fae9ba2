//! idemq: effectively-once processing of SQS jobs on AWS Lambda.
//!
//! SQS delivers every message at least once. idemq makes the second delivery
//! harmless: a handler returns its result as an [`Effect`] (DynamoDB writes),
//! and idemq commits a dedup marker and that effect in one
//! `TransactWriteItems` ([`Committer`]). A redelivered job finds its marker
//! and is acknowledged as a duplicate; a crash leaves either both or
//! neither. The system of record is a [`store`]: DynamoDB today, behind a
//! seam that the batch sees it through.
//!
//! Where things live. Writing a handler:
//! - [`handler`]: the [`Handler`](handler::Handler) trait,
//!   [`handler_fn`](handler::handler_fn),
//!   [`JobError`](handler::JobError) (retry intent) and
//!   [`JobMeta`](handler::JobMeta);
//! - [`effect`]: the typed builder for a job's writes and its limits (on
//!   DynamoDB; `src/store/dynamodb/effect.rs`);
//! - [`job`]: the job id (attribute, body pointer or `MessageId`), the
//!   payload hash and downstream idempotency keys;
//! - [`envelope`]: jobs that arrive wrapped in an SNS notification or an
//!   EventBridge event (`IDEMQ_ENVELOPE`);
//! - [`producer`]: sending jobs with a stable id ([`Producer`]); `topic`
//!   (feature `sns`): the same, published to an SNS topic
//!   (`TopicProducer`);
//! - `testing` (feature `testing`): unit-testing a handler: `job_meta`,
//!   read-back views of an `Effect`, and a whole SQS event run through the
//!   Lambda batch service against in-memory DynamoDB and SQS.
//!
//! Running it (the hosts, and what they share):
//! - `lambda` (feature `lambda`): the Lambda host, and
//!   `lambda::BatchService`, the SQS batch handler as a tower service for a
//!   `main` of your own;
//! - `worker` (feature `worker`): the local worker host;
//! - [`host`]: what both hosts build once (clients, the batch processor);
//! - [`config`]: `IDEMQ_*` settings ([`BatchConfig`](config::BatchConfig)
//!   among them) and the table layout;
//! - [`batch`]: the batch contract (FIFO order, deadline budget, partial
//!   batch response);
//! - [`classify`]: how each way a job can end becomes what SQS does;
//! - [`horizon`]: how long after its first enqueue a job can still be
//!   applied once (its markers' lifetime), which the consumer and the
//!   tools that copy dead letters both weigh;
//! - [`store`]: the seam a system of record implements ([`store::Store`]:
//!   commit, look-up, marker read; failure records; schema), and
//!   [`store::dynamodb`]: the dedup transaction ([`Committer`]), failure
//!   records and the table, on DynamoDB; `store::postgres` (feature
//!   `postgres`, also `idemq::postgres`): the same on PostgreSQL, the
//!   marker row and the handler's SQL in one pipelined transaction;
//! - [`commit`]: what a commit can end in, whichever store made it;
//! - [`failure`]: why a job failed, and the record kept of it;
//! - [`backoff`]: retry delays (exponential, full jitter) and the check
//!   that retries fit the queue's retention;
//! - [`queue`]: what idemq reads of a source queue, and the SQS calls
//!   shared by the runtime and the tools;
//! - [`dead_letter`]: what a failed job leaves: failure records and idemq's
//!   own dead letters with their context;
//! - [`metrics`]: per-batch CloudWatch EMF metrics;
//! - [`clock`]: the wall clock and jitter source, which a simulation can
//!   replace.
//!
//! Operating it (the `idemq` CLI is built on these):
//! - [`init`]: creating or verifying the queue, DLQ and table;
//! - [`dlq`]: reading a DLQ ([`dlq::peek`]), what an operator asks of it
//!   (stats, rows, one letter: [`dlq::inspect`]), moving dead letters back
//!   ([`dlq::redrive`]) and keeping them as JSON lines ([`dlq::archive`]);
//!   each returns data, and the `idemq` binary only parses and prints.
//!
//! Features: `lambda` (the Lambda host) is the only default, so a function
//! depending on `idemq = "0.1"` compiles no command-line, progress-bar, SNS
//! or PostgreSQL crate and no regex engine. `worker` adds the local worker
//! host, `postgres` the PostgreSQL store, `sns` publishing to a topic,
//! `testing` the test kit (for dev-dependencies), and `failpoints` the
//! chaos suite's failpoints. The operator CLI is its own package:
//! `cargo install idemq-cli` gives the `idemq` command.

#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` (Cargo.toml): every item a feature
// gates is labelled with that feature in the rendered docs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attribute;
pub mod backoff;
pub mod batch;
pub mod classify;
pub mod clock;
pub mod commit;
pub mod config;
pub mod dead_letter;
pub mod dlq;
#[doc(inline)]
pub use store::dynamodb::effect;
pub mod envelope;
pub mod failure;
pub mod followup;
pub mod handler;
pub mod horizon;
pub mod host;
pub mod init;
pub mod job;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod metrics;
pub mod producer;
pub mod queue;
pub mod store;
#[cfg(feature = "postgres")]
pub use store::postgres;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "sns")]
pub mod topic;
#[cfg(feature = "worker")]
pub mod worker;

pub use commit::{CommitError, CommitOutcome, JobRef};
pub use config::{IdempotencyConfig, TableLayout};
pub use envelope::Envelope;
pub use followup::FollowUp;
pub use job::{
    InvalidJobId, JOB_ID_ATTRIBUTE, JobId, JobIdResolver, JobIdSource, PayloadHash, downstream_key,
};
pub use producer::Producer;
pub use store::dynamodb::{Committer, Effect, EffectError, Key, Write};
#[cfg(feature = "sns")]
pub use topic::TopicProducer;

/// The README's code examples, compiled as doc tests so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Runs `handler` on AWS Lambda when `AWS_LAMBDA_RUNTIME_API` is set, and
/// otherwise as a local worker that long-polls `--queue-url`. (A binary
/// built without the `worker` feature only runs on Lambda; one built
/// without `lambda` only as a worker.) On Lambda this is
/// `lambda_runtime::run(lambda::BatchService::new(handler, &sdk_config))`
/// with the SDK configuration from the environment: to add tower layers of
/// your own, write that line yourself (see `lambda::BatchService`).
///
/// Unless the program installed a global `tracing` subscriber of its own
/// before calling `run` (then idemq installs nothing and logs through it),
/// logs go to stdout on Lambda and to stderr locally, at `info` unless the
/// environment says otherwise. The first of these that is set decides the
/// levels (see [`config::log_filter_from`]):
///
/// - `IDEMQ_LOG`: a plain level (`IDEMQ_LOG=debug`) raises idemq's own
///   logs only; name a crate to raise it too, your handler's own crate
///   included: `IDEMQ_LOG=debug,my_handler=debug`.
/// - `RUST_LOG`: a plain level (`RUST_LOG=debug`) applies to every crate,
///   your handler's included, except the AWS SDK, smithy, HTTP, TLS and
///   `lambda_runtime` crates, which stay at `info` unless named, since
///   their trace logs print whole messages and events.
/// - `AWS_LAMBDA_LOG_LEVEL`, which Lambda sets from the function's
///   application log level (`TRACE` to `FATAL`): as a plain `RUST_LOG`
///   level.
///
/// The format: JSON on Lambda and text locally, unless
/// `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`, which Lambda sets from the
/// function's log format) says otherwise (see
/// [`config::log_format_from`]). An invalid value is reported once in the
/// log and the default used.
///
/// Panics: when idemq installs the subscriber, it also sets the panic hook,
/// so that a panic is one log event (JSON on Lambda) rather than raw text
/// beside the logs. When the program installed its own subscriber, the
/// panic hook is left as the program set it (or as Rust's default): idemq
/// never replaces a hook next to a logging setup it does not own. Either
/// way a handler's panic fails that job only, and the job's failure record
/// carries the panic message.
///
/// Handler error and panic texts are logged and stored as they are (failure
/// records, the `idemq-error` DLQ attribute): they must not carry payload
/// data (a `serde_json::Error` in the chain is stored without the values it
/// quotes).
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
#[cfg(any(feature = "lambda", feature = "worker"))]
pub async fn run<H: handler::Handler>(handler: H) -> Result<(), host::HostError> {
    run_host(handler, |handler, sdk, table, batch| {
        host::Host::from_sdk_config(handler, sdk, table, batch)
    })
    .await
}

/// How a host is built for a store: from the handler, the SDK
/// configuration, the worker's `--table` (`None` on Lambda) and the batch
/// settings.
#[cfg(any(feature = "lambda", feature = "worker"))]
pub(crate) trait BuildHost<H, S>:
    FnOnce(
    H,
    &aws_config::SdkConfig,
    Option<String>,
    config::BatchConfig,
) -> Result<host::Host<H, S>, host::HostError>
{
}

#[cfg(any(feature = "lambda", feature = "worker"))]
impl<H, S, F> BuildHost<H, S> for F where
    F: FnOnce(
        H,
        &aws_config::SdkConfig,
        Option<String>,
        config::BatchConfig,
    ) -> Result<host::Host<H, S>, host::HostError>
{
}

/// What [`run`] does for any store: failpoints in chaos builds, idemq's
/// logging defaults, then the Lambda runtime or the local worker over the
/// host `build` makes.
#[cfg(any(feature = "lambda", feature = "worker"))]
pub(crate) async fn run_host<H: handler::Handler<S>, S: store::Store>(
    handler: H,
    build: impl BuildHost<H, S>,
) -> Result<(), host::HostError> {
    // Chaos builds only: failpoints from the FAILPOINTS variable.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let on_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    init_logging(on_lambda);
    if on_lambda {
        run_lambda(handler, build).await
    } else {
        run_worker(handler, build).await
    }
}

#[cfg(feature = "lambda")]
async fn run_lambda<H: handler::Handler<S>, S: store::Store>(
    handler: H,
    build: impl BuildHost<H, S>,
) -> Result<(), host::HostError> {
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let host = build(handler, &sdk, None, config::BatchConfig::from_env()?)?;
    lambda_runtime::run(lambda::BatchService::from_host(host)).await
}

#[cfg(all(feature = "worker", not(feature = "lambda")))]
async fn run_lambda<H, S>(_: H, _: impl BuildHost<H, S>) -> Result<(), host::HostError> {
    Err(
        "AWS_LAMBDA_RUNTIME_API is set, but this binary was built without idemq's `lambda` feature"
            .into(),
    )
}

#[cfg(feature = "worker")]
async fn run_worker<H: handler::Handler<S>, S: store::Store>(
    handler: H,
    build: impl BuildHost<H, S>,
) -> Result<(), host::HostError> {
    use clap::Parser;
    let args = worker::WorkerArgs::parse();
    let mut batch = config::BatchConfig::from_env()?;
    if let Some(c) = args.concurrency {
        batch.concurrency = c.max(1);
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let host = build(handler, &sdk, args.table.clone(), batch)?;
    worker::serve(&host, &args).await.map(drop)
}

#[cfg(all(feature = "lambda", not(feature = "worker")))]
async fn run_worker<H, S>(_: H, _: impl BuildHost<H, S>) -> Result<(), host::HostError> {
    Err("AWS_LAMBDA_RUNTIME_API is not set (not on Lambda), and this binary was built without idemq's `worker` feature (the local worker)".into())
}

/// The time of a log line: none on Lambda, where CloudWatch Logs stamps
/// each event; the system time elsewhere.
#[cfg(any(feature = "lambda", feature = "worker"))]
#[derive(Clone, Copy)]
struct LogClock {
    stamp: bool,
}

#[cfg(any(feature = "lambda", feature = "worker"))]
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
/// subscriber of its own (see [`run`]).
#[cfg(any(feature = "lambda", feature = "worker"))]
pub(crate) fn init_logging(on_lambda: bool) {
    use config::LogFormat;
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::fmt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let default = LevelFilter::INFO;
    let env = |var: &str| std::env::var(var).ok();
    let mut invalid = Vec::new();
    let filter = config::log_filter_from(env, default).unwrap_or_else(|e| {
        invalid.push(format!("{e}; logging at {default}"));
        Targets::new().with_default(default)
    });
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

/// A handler panic fails its job only (see [`batch`]); it is reported as a
/// log event like any other failure, not as raw text beside JSON logs.
#[cfg(any(feature = "lambda", feature = "worker"))]
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(panic = %info, "panicked");
    }));
}
