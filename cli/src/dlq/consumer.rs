//! Whose settings a command uses: the flags first; then, with
//! `--function`, the Lambda function's configuration (its environment,
//! its DLQ through its SQS event source); else this shell's environment.
//!
//! With `--function` the shell's `IDEMQ_*` variables are not read: a
//! variable left over from another consumer would otherwise quietly
//! change the keys looked up. Each setting's origin is printed on stderr,
//! and secrets (a connection string's password) never are.

use std::process::ExitCode;

use idemq::dlq::settings::{CONSUMER_VARS, ConsumerEnv};

use super::function::{self, FunctionError};
use crate::{StoreKind, usage_error};

/// What a command asks for, from its flags.
pub(crate) struct Wanted {
    /// `--function`.
    pub function: Option<String>,
    /// `--dlq-url`.
    pub dlq_url: Option<String>,
    /// Whether the command works on a DLQ.
    pub needs_dlq: bool,
    /// `--table`.
    pub table: Option<String>,
    /// `--store`.
    pub store: Option<StoreKind>,
    /// Whether the command needs the function's source queue (an import
    /// without `--to`).
    pub source_queue: bool,
}

/// The settings settled.
pub(crate) struct Consumer {
    /// The consumer's environment (the function's, or this shell's).
    pub env: ConsumerEnv,
    /// The DLQ, when one is known.
    pub dlq_url: Option<String>,
    /// The function's source queue, when asked for.
    pub source_url: Option<String>,
    /// `--table`, which wins over the environment's `IDEMQ_TABLE`.
    pub table: Option<String>,
    pub store: StoreKind,
}

/// The settings of `wanted`, or the exit of a command that cannot have
/// them (the reason printed).
pub(crate) async fn resolve(
    wanted: Wanted,
    sdk: &aws_config::SdkConfig,
    sqs: &aws_sdk_sqs::Client,
) -> Result<Consumer, ExitCode> {
    let Some(name) = wanted.function.as_deref() else {
        return Ok(Consumer {
            env: ConsumerEnv::from_process(),
            dlq_url: wanted
                .dlq_url
                .or_else(|| std::env::var("IDEMQ_DLQ_URL").ok())
                .filter(|u| !u.is_empty()),
            source_url: None,
            table: wanted.table,
            store: wanted.store.unwrap_or_default(),
        });
    };
    let lambda = aws_sdk_lambda::Client::new(sdk);
    let f = function::read_function(&lambda, name)
        .await
        .map_err(|e| failed(&e))?;
    let env = ConsumerEnv::from_vars(f.vars);
    let shown = env.shown();
    if shown.is_empty() {
        eprintln!(
            "idemq: function {} (GetFunctionConfiguration): no idemq variable set; the defaults apply",
            f.arn
        );
    } else {
        eprintln!(
            "idemq: settings of function {} (GetFunctionConfiguration):",
            f.arn
        );
        for (var, value) in &shown {
            eprintln!("  {var}={value}");
        }
    }
    let ignored: Vec<&str> = CONSUMER_VARS
        .iter()
        .copied()
        .chain(["IDEMQ_DLQ_URL"])
        .filter(|v| std::env::var_os(v).is_some())
        .collect();
    if !ignored.is_empty() {
        eprintln!(
            "idemq: not read from this shell with --function: {} (flags override the function's \
             settings)",
            ignored.join(", ")
        );
    }
    if let (Some(t), Some(theirs)) = (&wanted.table, env.get("IDEMQ_TABLE")) {
        eprintln!("idemq: --table {t} instead of the function's IDEMQ_TABLE={theirs}");
    }

    let dlq_url = match (wanted.dlq_url, wanted.needs_dlq) {
        (Some(url), _) => {
            eprintln!("idemq: DLQ {url} (--dlq-url)");
            Some(url)
        }
        (None, false) => None,
        (None, true) => {
            let route = function::route(&lambda, sqs, name, true)
                .await
                .map_err(|e| failed(&e))?;
            let url = route.dlq_url.unwrap_or_default();
            eprintln!(
                "idemq: DLQ {url} (deadLetterTargetArn of the RedrivePolicy of {}, the function's \
                 SQS event source)",
                route.source_arn
            );
            Some(url)
        }
    };
    let source_url = if wanted.source_queue {
        let route = function::route(&lambda, sqs, name, false)
            .await
            .map_err(|e| failed(&e))?;
        eprintln!(
            "idemq: sending to {} (the function's SQS event source)",
            route.source_url
        );
        Some(route.source_url)
    } else {
        None
    };
    let store = match wanted.store {
        Some(s) => s,
        None => store_of(&env)?,
    };
    Ok(Consumer {
        env,
        dlq_url,
        source_url,
        table: wanted.table,
        store,
    })
}

/// The store a function's environment names: PostgreSQL when it has a
/// connection string and no table.
fn store_of(env: &ConsumerEnv) -> Result<StoreKind, ExitCode> {
    if !env.has_postgres_url() || env.get("IDEMQ_TABLE").is_some() {
        return Ok(StoreKind::Dynamodb);
    }
    #[cfg(feature = "postgres")]
    {
        eprintln!("idemq: store postgres (the function has a PostgreSQL URL and no IDEMQ_TABLE)");
        Ok(StoreKind::Postgres)
    }
    #[cfg(not(feature = "postgres"))]
    Err(usage_error(
        "the function keeps its records in PostgreSQL, and this idemq was built without the \
         `postgres` feature",
    ))
}

fn failed(e: &FunctionError) -> ExitCode {
    if e.is_usage() {
        return usage_error(&e.to_string());
    }
    eprintln!("idemq dlq: {e}");
    ExitCode::FAILURE
}
