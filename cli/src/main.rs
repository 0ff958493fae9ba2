//! `idemq`: the operator CLI.
//!
//! Exit codes: 0 done, 1 failed (each failure named), 2 usage or
//! configuration error (one line).
//!
//! Logs go to stderr as text, at `warn` unless the environment says
//! otherwise, with the precedence `idemq::run` uses (see
//! `idemq::config::log_filter_from_env`): the first set of `IDEMQ_LOG`,
//! `RUST_LOG` and `AWS_LAMBDA_LOG_LEVEL` decides. `IDEMQ_LOG=debug` raises
//! idemq's own logs only; `RUST_LOG=debug` raises every crate but the AWS
//! SDK, HTTP and TLS ones, which stay at `warn`; either raises a dependency
//! by naming it (`IDEMQ_LOG=debug,aws_smithy_runtime=trace`). An invalid
//! value is reported as a warning and `warn` used.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use idemq::config::{IdempotencyConfig, TableLayout};
use idemq::init::{InitError, InitSpec, TableProtection, init_with};

mod console;
mod dlq;
mod new;
mod progress;
mod send;
mod stack;

#[derive(Parser)]
#[command(
    name = "idemq",
    version,
    about = "Effectively-once SQS jobs on AWS Lambda: operator tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create (or verify, if they exist) a queue, its DLQ and the idemq table.
    ///
    /// Creates what the templates create (encrypted queues, a 14-day DLQ, an
    /// on-demand table with KMS encryption, point-in-time recovery, deletion
    /// protection and TTL). The table layout comes from the same variables as
    /// the consumer's (IDEMQ_ATTR_PK, IDEMQ_ATTR_EXPIRES_AT, IDEMQ_KEY_PREFIX)
    /// and is printed on stderr. Endpoints come from AWS_ENDPOINT_URL /
    /// AWS_ENDPOINT_URL_SQS / AWS_ENDPOINT_URL_DYNAMODB. Prints {"queue_url",
    /// "dlq_url", "table_name"}. Exit 1 when an existing resource breaks the
    /// templates' rules (each named, with the numbers).
    ///
    /// With `--store postgres` (a binary built with the `postgres`
    /// feature), creates or upgrades idemq's schema in the database of
    /// IDEMQ_POSTGRES_URL (schema IDEMQ_POSTGRES_SCHEMA, default idemq)
    /// instead of the table; "table_name" is then the schema.
    Init(InitArgs),
    /// Send JSON lines as jobs, each with a stable idemq-job-id.
    Send(send::SendArgs),
    /// See why dead letters died; move them back without losing any.
    Dlq(dlq::DlqArgs),
    /// The dead letters of one or more consumers in a browser: grouped by
    /// cause, searched by job id, error, time or payload field, and
    /// redriven, deleted or exported after a dry run (loopback, read-only
    /// unless --allow).
    Console(console::ConsoleArgs),
    /// Create a function crate: a handler against its own table, its unit
    /// test on the test kit, sample jobs, and how to run and deploy it.
    New(new::NewArgs),
    /// Start, stop or inspect the local stack (SQS, DynamoDB, PostgreSQL on
    /// 127.0.0.1) from any project, with this idemq's pinned versions.
    Stack(stack::StackArgs),
}

/// The store of the consumer's markers and failure records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StoreKind {
    /// The idemq table in DynamoDB (IDEMQ_TABLE).
    #[default]
    Dynamodb,
    /// idemq's schema in PostgreSQL (IDEMQ_POSTGRES_URL,
    /// IDEMQ_POSTGRES_SCHEMA).
    #[cfg(feature = "postgres")]
    Postgres,
}

/// The consumer's PostgreSQL store, from the same variables as the
/// consumer's (IDEMQ_POSTGRES_URL, IDEMQ_POSTGRES_SCHEMA, IDEMQ_NAMESPACE,
/// IDEMQ_POSTGRES_IAM_AUTH, IDEMQ_POSTGRES_CA_FILE), with one connection.
#[cfg(feature = "postgres")]
pub(crate) fn postgres_store(
    sdk: &aws_config::SdkConfig,
) -> Result<idemq::store::postgres::Postgres, String> {
    let config =
        idemq::store::postgres::PostgresConfig::from_env(sdk, 1).map_err(|e| e.to_string())?;
    idemq::store::postgres::Postgres::new(config).map_err(|e| e.to_string())
}

#[derive(clap::Args)]
struct InitArgs {
    #[arg(long)]
    queue_name: String,
    /// Where markers and failure records live.
    #[arg(long, value_enum, default_value_t = StoreKind::Dynamodb)]
    store: StoreKind,
    /// The idemq table (DynamoDB).
    #[arg(long, env = "IDEMQ_TABLE", required_if_eq("store", "dynamodb"))]
    table_name: Option<String>,
    /// Make FIFO queues (".fifo" is added to the names).
    #[arg(long)]
    fifo: bool,
    /// Receives before SQS moves a message to the DLQ (5 to 1000, as the templates).
    #[arg(long, default_value_t = 6)]
    max_receive_count: u32,
    #[arg(long, default_value_t = 30)]
    visibility_timeout_secs: u64,
    /// Create the table without deletion protection (Terraform's
    /// table_deletion_protection = false), and accept an existing one without.
    #[arg(long)]
    no_deletion_protection: bool,
    /// Print also what was created, the warnings and the violations in the
    /// JSON object (`created`, `warnings`, `violations`).
    #[arg(long)]
    json: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    {
        use tracing_subscriber::filter::LevelFilter;
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let default = LevelFilter::WARN;
        let (filter, invalid) = idemq::config::log_filter_from_env(default);
        tracing_subscriber::registry()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .init();
        if let Some(e) = invalid {
            tracing::warn!("{e}; logging at {default}");
        }
    }
    let cli = Cli::parse();
    // Files and processes only: no AWS configuration needed.
    let command = match cli.command {
        Command::New(args) => return new::run(args),
        Command::Stack(args) => return stack::run(args),
        command => command,
    };
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if let Err(msg) = check_credentials(&sdk).await {
        return usage_error(&msg);
    }
    match command {
        Command::Init(args) => run_init(args, &sdk).await,
        Command::Send(args) => send::run(args, &sdk).await,
        Command::Dlq(args) => dlq::run(args, &sdk).await,
        Command::Console(args) => console::run(args, &sdk).await,
        Command::New(_) | Command::Stack(_) => unreachable!("handled above"),
    }
}

/// One clear line instead of an SDK error chain on the first request.
async fn check_credentials(sdk: &aws_config::SdkConfig) -> Result<(), String> {
    use aws_sdk_sqs::config::ProvideCredentials;
    const HINT: &str = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE";
    let Some(provider) = sdk.credentials_provider() else {
        return Err(format!("no AWS credentials provider: {HINT}"));
    };
    match tokio::time::timeout(Duration::from_secs(10), provider.provide_credentials()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(_)) => Err(format!("no AWS credentials found: {HINT}")),
        Err(_) => Err(format!("timed out looking for AWS credentials: {HINT}")),
    }
}

async fn run_init(args: InitArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    let behaviour = match IdempotencyConfig::from_env() {
        Ok(c) => c,
        Err(e) => return usage_error(&e.to_string()),
    };
    let spec = |layout: TableLayout| InitSpec {
        queue_name: args.queue_name.clone(),
        fifo: args.fifo,
        max_receive_count: args.max_receive_count,
        visibility_timeout: Duration::from_secs(args.visibility_timeout_secs),
        layout,
        marker_ttl: behaviour.marker_ttl,
    };
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let result = match args.store {
        StoreKind::Dynamodb => {
            // The consumer's layout variables, the table from --table-name
            // (or IDEMQ_TABLE): init and the consumer must agree on the keys.
            let layout = match TableLayout::from_env_with_table(args.table_name.clone()) {
                Ok(layout) => layout,
                Err(e) => return usage_error(&e.to_string()),
            };
            let spec = spec(layout);
            if let Err(e) = spec.queue_names().and_then(|_| spec.check_template_rules()) {
                return usage_error(&e.to_string());
            }
            let l = &spec.layout;
            eprintln!(
                "table layout: table {}, partition key {:?}, expires_at attribute {:?}, key prefix {:?} \
                 (from --table-name/IDEMQ_TABLE, IDEMQ_ATTR_PK, IDEMQ_ATTR_EXPIRES_AT, IDEMQ_KEY_PREFIX; \
                 the consumer must run with the same)",
                l.table_name, l.partition_key, l.expires_at, l.key_prefix
            );
            let protection = TableProtection {
                deletion_protection: !args.no_deletion_protection,
            };
            let ddb = aws_sdk_dynamodb::Client::new(sdk);
            init_with(&sqs, &ddb, &spec, protection).await
        }
        #[cfg(feature = "postgres")]
        StoreKind::Postgres => {
            let store = match postgres_store(sdk) {
                Ok(store) => store,
                Err(e) => return usage_error(&e),
            };
            // The layout is DynamoDB's: init_store does not read it.
            let spec = spec(TableLayout::new("unused"));
            if let Err(e) = spec.queue_names().and_then(|_| spec.check_template_rules()) {
                return usage_error(&e.to_string());
            }
            idemq::init::init_store(&sqs, &store.schema(), &spec).await
        }
    };
    match result {
        Ok(report) => {
            for c in &report.created {
                eprintln!("created {c}");
            }
            for w in &report.warnings {
                eprintln!("warning: {w}");
            }
            for v in &report.violations {
                eprintln!("idemq init: {v}");
            }
            let mut value = serde_json::to_value(&report).expect("report serialises");
            if args.json {
                value["created"] = serde_json::json!(report.created);
                value["warnings"] = serde_json::json!(report.warnings);
                value["violations"] = serde_json::json!(report.violations);
            }
            println!("{value}");
            if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "idemq init: {} existing resource setting(s) break the templates' rules (above); \
                     fix them or recreate the resources",
                    report.violations.len()
                );
                ExitCode::FAILURE
            }
        }
        Err(e @ InitError::InvalidSpec(_)) => usage_error(&e.to_string()),
        Err(e) => {
            eprintln!("idemq init: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One line on stderr, exit 2.
pub(crate) fn usage_error(msg: &str) -> ExitCode {
    eprintln!("idemq: {msg}");
    ExitCode::from(2)
}
