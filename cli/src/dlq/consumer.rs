//! Whose settings a command uses: the flags first; then, with
//! `--function`, the Lambda function's configuration (its environment,
//! its DLQ through its SQS event source); with `--env-file`, the variables
//! a file holds (the consumer's environment written down); else this
//! shell's environment.
//!
//! With `--function` or `--env-file` the shell's `IDEMQ_*` variables are
//! not read: a variable left over from another consumer would otherwise
//! quietly change the keys looked up. Each setting's origin is printed on stderr,
//! and secrets (a connection string's password) never are.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use idemq::dlq::settings::{CONSUMER_VARS, ConsumerEnv};

use super::function::{self, FunctionError};
use crate::{StoreKind, usage_error};

/// What a command asks for, from its flags.
pub(crate) struct Wanted {
    /// `--function`.
    pub function: Option<String>,
    /// `--env-file` (never with `--function`).
    pub env_file: Option<PathBuf>,
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
    if let Some(path) = wanted.env_file.clone() {
        return from_file(&path, wanted);
    }
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
    tell_settings(
        &env,
        &format!("function {} (GetFunctionConfiguration)", f.arn),
        "--function",
        wanted.table.as_deref(),
    );
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
    read_consumer(env, dlq_url, source_url, wanted.table, wanted.store)
}

/// The settings `--env-file` names: its variables instead of this shell's,
/// its `IDEMQ_DLQ_URL` unless `--dlq-url` is given.
fn from_file(path: &Path, wanted: Wanted) -> Result<Consumer, ExitCode> {
    let vars = read_env_file(path).map_err(|e| usage_error(&e))?;
    let dlq_in_file = vars
        .iter()
        .find(|(k, _)| k == "IDEMQ_DLQ_URL")
        .map(|(_, v)| v.clone());
    let env = ConsumerEnv::from_vars(vars);
    tell_settings(
        &env,
        &path.display().to_string(),
        "--env-file",
        wanted.table.as_deref(),
    );
    let dlq_url = match (wanted.dlq_url, dlq_in_file) {
        (Some(url), _) => Some(url),
        (None, Some(url)) if wanted.needs_dlq && !url.is_empty() => {
            eprintln!("idemq: DLQ {url} (IDEMQ_DLQ_URL in {})", path.display());
            Some(url)
        }
        _ => None,
    };
    read_consumer(env, dlq_url, None, wanted.table, wanted.store)
}

/// A consumer whose environment was read (a function's, a file's): the
/// store is `--store`'s, else the one its environment names.
fn read_consumer(
    env: ConsumerEnv,
    dlq_url: Option<String>,
    source_url: Option<String>,
    table: Option<String>,
    store: Option<StoreKind>,
) -> Result<Consumer, ExitCode> {
    let store = match store {
        Some(s) => s,
        None => store_of(&env)?,
    };
    Ok(Consumer {
        env,
        dlq_url,
        source_url,
        table,
        store,
    })
}

/// Says on stderr which settings were read from `origin` (secrets hidden),
/// which of this shell's variables were not read, and a `--table` that
/// overrides the origin's.
fn tell_settings(env: &ConsumerEnv, origin: &str, flag: &str, table: Option<&str>) {
    let shown = env.shown();
    if shown.is_empty() {
        eprintln!("idemq: {origin}: no idemq variable set; the defaults apply");
    } else {
        eprintln!("idemq: settings of {origin}:");
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
            "idemq: not read from this shell with {flag}: {} (flags override the consumer's \
             settings)",
            ignored.join(", ")
        );
    }
    if let (Some(t), Some(theirs)) = (table, env.get("IDEMQ_TABLE")) {
        eprintln!("idemq: --table {t} instead of the consumer's IDEMQ_TABLE={theirs}");
    }
}

/// A consumer's variables as a file holds them: `KEY=VALUE` lines, as a
/// `.env` file or systemd's `EnvironmentFile=` has them (blank lines and
/// `#` comments skipped, an `export ` prefix and one pair of quotes around
/// a value allowed, nothing expanded), or one JSON object of strings, as
/// `aws lambda get-function-configuration --query Environment.Variables`
/// prints it.
pub(crate) fn read_env_file(path: &Path) -> Result<Vec<(String, String)>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--env-file {}: {e}", path.display()))?;
    parse_env(&text).map_err(|e| format!("--env-file {}: {e}", path.display()))
}

fn parse_env(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.trim_start().starts_with('{') {
        let map: std::collections::BTreeMap<String, String> =
            serde_json::from_str(text).map_err(|e| format!("not a JSON object of strings: {e}"))?;
        return Ok(map.into_iter().collect());
    }
    let mut vars = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: not KEY=VALUE: {line:?}", n + 1));
        };
        let key = key.trim();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("line {}: {key:?} is not a variable name", n + 1));
        }
        let value = value.trim();
        let value = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        vars.push((key.to_owned(), value.to_owned()));
    }
    Ok(vars)
}

/// The store a consumer's environment (a function's, a file's) names:
/// PostgreSQL when it has a connection string and no table.
fn store_of(env: &ConsumerEnv) -> Result<StoreKind, ExitCode> {
    if !env.has_postgres_url() || env.get("IDEMQ_TABLE").is_some() {
        return Ok(StoreKind::Dynamodb);
    }
    #[cfg(feature = "postgres")]
    {
        eprintln!("idemq: store postgres (the consumer has a PostgreSQL URL and no IDEMQ_TABLE)");
        Ok(StoreKind::Postgres)
    }
    #[cfg(not(feature = "postgres"))]
    Err(usage_error(
        "the consumer keeps its records in PostgreSQL, and this idemq was built without the \
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

#[cfg(test)]
mod tests {
    use super::parse_env;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_env_file_as_dotenv_and_systemd_write_it() {
        let text = "# the billing consumer\n\
                    IDEMQ_TABLE=jobs\n\
                    \n\
                    export IDEMQ_NAMESPACE = billing\n\
                    IDEMQ_DLQ_URL=\"http://127.0.0.1:4566/000000000000/billing-dlq\"\n\
                    IDEMQ_JOB_ID_POINTER='/order_id'\n\
                    IDEMQ_KEY_PREFIX=a=b\n";
        assert_eq!(
            parse_env(text).unwrap(),
            pairs(&[
                ("IDEMQ_TABLE", "jobs"),
                ("IDEMQ_NAMESPACE", "billing"),
                (
                    "IDEMQ_DLQ_URL",
                    "http://127.0.0.1:4566/000000000000/billing-dlq"
                ),
                ("IDEMQ_JOB_ID_POINTER", "/order_id"),
                ("IDEMQ_KEY_PREFIX", "a=b"),
            ])
        );
    }

    #[test]
    fn an_env_file_as_the_lambda_api_prints_it() {
        let text = r#"{"IDEMQ_TABLE": "jobs", "STRIPE_KEY": "sk_live_x"}"#;
        assert_eq!(
            parse_env(text).unwrap(),
            pairs(&[("IDEMQ_TABLE", "jobs"), ("STRIPE_KEY", "sk_live_x")])
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        let err = parse_env("IDEMQ_TABLE=jobs\nthis is not a variable\n").unwrap_err();
        assert!(err.starts_with("line 2: not KEY=VALUE"), "{err}");
        let err = parse_env("MY VAR=1\n").unwrap_err();
        assert!(err.contains("\"MY VAR\" is not a variable name"), "{err}");
        let err = parse_env(r#"{"IDEMQ_TABLE": 7}"#).unwrap_err();
        assert!(err.starts_with("not a JSON object of strings"), "{err}");
    }
}
