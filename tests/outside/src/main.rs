//! An SQS-driven Lambda function that owns its `main`: its own subscriber,
//! its own `lambda_runtime::run`, idemq's batch handler as the service.

use idemq::{Handler, JobError, JobMeta};
use idemq::store::dynamodb::{Effect, Key, Write};

/// An order to import: where its lines are, and its options as JSON.
#[derive(serde::Deserialize)]
struct Import {
    order_id: String,
    lines_path: String,
    options: String,
}

#[derive(serde::Deserialize)]
struct Options {
    currency: String,
}

struct Orders {
    table: String,
}

impl Handler for Orders {
    type Job = Import;
    type Effect = Effect;

    async fn handle(&self, job: Import, _meta: JobMeta) -> Result<Effect, JobError> {
        // `?` on serde_json::Error and std::io::Error: transient, retried
        // with backoff, then dead-lettered with the error chain.
        let options: Options = serde_json::from_str(&job.options)?;
        let lines = std::fs::read_to_string(&job.lines_path)?;
        if options.currency.len() != 3 {
            // Retrying cannot fix this one: to the DLQ now.
            return Err(JobError::permanent("currency must be an ISO 4217 code"));
        }
        Ok(Effect::new().with(
            Write::update(
                &self.table,
                Key::string("pk", format!("order#{}", job.order_id)),
                "REMOVE pending",
            )
            .condition(if lines.is_empty() {
                "attribute_not_exists(lines)"
            } else {
                "attribute_exists(pk)"
            }),
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    // The function's own logging: idemq's BatchService installs nothing.
    tracing_subscriber::fmt().json().without_time().init();
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let h = Orders {
        table: std::env::var("IDEMQ_TABLE")?,
    };
    lambda_runtime::run(idemq::lambda::BatchService::new(h, &sdk).await?).await
}
