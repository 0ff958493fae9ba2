//! [`run`]: the one entry point of a function, on Lambda or as a local
//! worker, for a handler of any store.

use crate::config::BatchConfig;
use crate::handler::Handler;
use crate::host::{HostError, OpenStore};

mod logging;

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
/// levels (see `IDEMQ_LOG` in docs/configuration.md):
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
/// `AWS_LAMBDA_LOG_FORMAT` in docs/configuration.md). An invalid value is reported once in the
/// log and the default used.
///
/// Panics: when idemq installs the subscriber, it also sets the panic hook,
/// so that a panic is one log event (JSON on Lambda) rather than raw text
/// beside the logs. When the program installed its own subscriber, the
/// panic hook is left as the program set it (or as Rust's default): idemq
/// never replaces a hook next to a logging setup it does not own. Either
/// way a handler's panic fails that job only, and the job's failure record
/// carries the panic message and where it happened (the batch processor
/// notes that in front of whichever hook is set: `IDEMQ_BACKTRACE`).
///
/// Handler error and panic texts are logged and stored as they are (failure
/// records, the `idemq-error` DLQ attribute): they must not carry payload
/// data (a `serde_json::Error` in the chain is stored without the values it
/// quotes).
///
/// The store is the handler's: a handler returning `idemq::store::dynamodb::Effect`
/// commits to DynamoDB, one returning `idemq::store::postgres::Effect` (feature
/// `postgres`) to PostgreSQL ([`OpenStore`]).
///
/// ```no_run
/// use idemq::{handler_fn, JobMeta};
///
/// #[tokio::main]
/// async fn main() -> Result<(), idemq::HostError> {
///     idemq::run(handler_fn(|_job: serde_json::Value, _meta: JobMeta| async {
///         Ok(idemq::store::dynamodb::Effect::new())
///     }))
///     .await
/// }
/// ```
pub async fn run<H: Handler>(handler: H) -> Result<(), HostError>
where
    H::Effect: OpenStore,
{
    // Chaos builds only: failpoints from the FAILPOINTS variable.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let on_lambda = std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some();
    logging::init_logging(on_lambda);
    if on_lambda {
        run_lambda(handler).await
    } else {
        run_worker(handler).await
    }
}

#[cfg(feature = "lambda")]
async fn run_lambda<H: Handler>(handler: H) -> Result<(), HostError>
where
    H::Effect: OpenStore,
{
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let host = crate::host::Host::from_sdk_config(handler, &sdk, None, BatchConfig::from_env()?)?;
    lambda_runtime::run(crate::lambda::BatchService::from_host(host)).await
}

#[cfg(all(feature = "worker", not(feature = "lambda")))]
async fn run_lambda<H: Handler>(_: H) -> Result<(), HostError> {
    Err(
        "AWS_LAMBDA_RUNTIME_API is set, but this binary was built without idemq's `lambda` feature"
            .into(),
    )
}

#[cfg(feature = "worker")]
async fn run_worker<H: Handler>(handler: H) -> Result<(), HostError>
where
    H::Effect: OpenStore,
{
    use clap::Parser;
    let args = crate::worker::WorkerArgs::parse();
    crate::worker::run_with(handler, args, BatchConfig::from_env()?)
        .await
        .map(drop)
}

#[cfg(all(feature = "lambda", not(feature = "worker")))]
async fn run_worker<H: Handler>(_: H) -> Result<(), HostError> {
    Err("AWS_LAMBDA_RUNTIME_API is not set (not on Lambda), and this binary was built without idemq's `worker` feature (the local worker)".into())
}
