//! `idemq`: the operator CLI.
//!
//! Exit codes: 0 done, 1 failed, 2 usage or configuration error.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use idemq::config::{IdempotencyConfig, TableLayout};
use idemq::init::{InitError, InitSpec, init};

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
    /// Endpoints come from AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_SQS /
    /// AWS_ENDPOINT_URL_DYNAMODB. Prints {"queue_url", "dlq_url", "table_name"}.
    Init {
        #[arg(long)]
        queue_name: String,
        #[arg(long, env = "IDEMQ_TABLE")]
        table_name: String,
        /// Make FIFO queues (".fifo" is added to the names).
        #[arg(long)]
        fifo: bool,
        /// Receives before SQS moves a message to the DLQ.
        #[arg(long, default_value_t = 6)]
        max_receive_count: u32,
        #[arg(long, default_value_t = 30)]
        visibility_timeout_secs: u64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDEMQ_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Init {
            queue_name,
            table_name,
            fifo,
            max_receive_count,
            visibility_timeout_secs,
        } => {
            let behaviour = match IdempotencyConfig::from_env() {
                Ok(c) => c,
                Err(e) => return usage_error(&e.to_string()),
            };
            let mut layout = TableLayout::new(table_name);
            if let Ok(from_env) = TableLayout::from_env() {
                // Attribute-name overrides apply; the --table-name wins.
                layout = TableLayout {
                    table_name: layout.table_name,
                    ..from_env
                };
            }
            let spec = InitSpec {
                queue_name,
                fifo,
                max_receive_count,
                visibility_timeout: Duration::from_secs(visibility_timeout_secs),
                layout,
                marker_ttl: behaviour.marker_ttl,
            };
            let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            let sqs = aws_sdk_sqs::Client::new(&sdk);
            let ddb = aws_sdk_dynamodb::Client::new(&sdk);
            match init(&sqs, &ddb, &spec).await {
                Ok(report) => {
                    for c in &report.created {
                        eprintln!("created {c}");
                    }
                    for w in &report.warnings {
                        eprintln!("warning: {w}");
                    }
                    println!(
                        "{}",
                        serde_json::to_string(&report).expect("report serialises")
                    );
                    ExitCode::SUCCESS
                }
                Err(e @ InitError::InvalidSpec(_)) => usage_error(&e.to_string()),
                Err(e) => {
                    eprintln!("idemq init: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("idemq: {msg}");
    ExitCode::from(2)
}
