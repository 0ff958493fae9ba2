//! `idemq dlq`: see why every dead letter died, and replay it without
//! losing or doubling anything.
//!
//! One file per concern: [`read`] (stats, list, show), [`redrive`] (ours
//! and SQS's move task), [`archive`] (export, import). Each parses, calls
//! the library (`idemq::dlq`: `inspect`, `redrive`, `archive`) and prints.
//! [`consumer`] settles whose settings a command uses (flags, a Lambda
//! function's configuration through [`function`], or this shell's
//! environment). This file holds the arguments and their bounds.
//!
//! With `--json` each command prints one JSON object on stdout (`list`:
//! one per letter, a line each), with a `warnings` array where it has
//! any; what a person reads (progress, each failure as it happens) stays
//! on stderr. Exit codes are the same with or without it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use idemq::dlq::archive::AgeRule;
use idemq::dlq::inspect::{Dlq, DlqOptions, NoFailureRecords, OpenError, RecordsPlace, Scanned};
use idemq::dlq::redrive::{Filter, MAX_CONCURRENCY, NativeRate, Rate, RedriveOptions};
use idemq::horizon::ReplayHorizon;
use idemq::job::JobIdResolver;

use crate::{StoreKind, usage_error};

pub(crate) mod archive;
pub(crate) mod consumer;
pub(crate) mod function;
mod read;
mod redrive;

/// SQS's longest visibility timeout, 12 hours
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ReceiveMessage.html>,
/// `VisibilityTimeout`: 0 to 43,200 seconds).
const MAX_HOLD_SECS: u64 = 43_200;

#[derive(Debug, clap::Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Common {
    /// Read the consumer's settings from this Lambda function (name, ARN,
    /// or NAME:ALIAS): its IDEMQ_* environment (GetFunctionConfiguration)
    /// instead of this shell's, and its DLQ through its SQS event source's
    /// RedrivePolicy. Flags still win; what was read from where is printed
    /// on stderr.
    #[arg(long, value_name = "NAME_OR_ARN")]
    pub(crate) function: Option<String>,
    /// Read the consumer's settings from this file instead of this shell:
    /// KEY=VALUE lines (a .env file; `#` comments, `export`, quotes) or a
    /// JSON object (`aws lambda get-function-configuration --query
    /// Environment.Variables`), IDEMQ_DLQ_URL included.
    #[arg(long, value_name = "FILE", conflicts_with = "function")]
    pub(crate) env_file: Option<PathBuf>,
    /// The dead-letter queue [default: IDEMQ_DLQ_URL, or the function's].
    #[arg(long)]
    pub(crate) dlq_url: Option<String>,
    /// The idemq table, for failure records (the whole error chain)
    /// [default: IDEMQ_TABLE, or the function's]. Key names, prefix and
    /// namespace come from IDEMQ_ATTR_PK / IDEMQ_KEY_PREFIX /
    /// IDEMQ_NAMESPACE, as for the consumer.
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// Where the consumer keeps its failure records: the table above, or
    /// (`postgres`, in a binary built with the `postgres` feature) the
    /// schema of IDEMQ_POSTGRES_URL / IDEMQ_POSTGRES_SCHEMA [default:
    /// dynamodb; with --function, postgres when the function has a
    /// PostgreSQL URL and no IDEMQ_TABLE].
    #[arg(long, value_enum)]
    pub(crate) store: Option<StoreKind>,
    /// Seconds each message stays invisible while it is read; then it is
    /// made visible again (1 to 43200, SQS's 12-hour limit).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_HOLD_SECS))]
    pub(crate) hold_secs: u64,
}

#[derive(Debug, clap::Subcommand)]
enum DlqCommand {
    /// Depth, age of the oldest message, counts by error, source queues.
    Stats {
        #[command(flatten)]
        common: Common,
        /// One JSON object: the stats and `warnings`.
        #[arg(long)]
        json: bool,
    },
    /// One row per dead letter (--json: a JSON object per line, each with
    /// `failure_record`, whether the letter's record was found).
    List {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        json: bool,
    },
    /// The whole context of one dead letter, by job id or message id.
    Show {
        #[command(flatten)]
        common: Common,
        id: String,
        /// Print the payload too (it may hold personal data).
        #[arg(long)]
        payload: bool,
        /// One JSON object: `found`, the `letter` (with its attributes;
        /// its `payload` with --payload), the `failure_record`, `warnings`.
        #[arg(long)]
        json: bool,
    },
    /// Move dead letters back to their source queue: sent first, then
    /// deleted, so a kill at any instant loses nothing. Each copy carries
    /// idemq-job-id = the id the consumer resolved (attribute, body pointer
    /// IDEMQ_JOB_ID_POINTER, else the DLQ MessageId).
    Redrive {
        #[command(flatten)]
        common: Common,
        /// Only this job id or message id (repeatable).
        #[arg(long = "job-id")]
        job_ids: Vec<String>,
        /// Only those whose last error contains this (case-insensitive).
        #[arg(long)]
        error_contains: Option<String>,
        /// Only those that failed at or after this: a time
        /// (2026-12-01T10:00:00Z) or a duration ago (2h).
        #[arg(long)]
        since: Option<String>,
        /// Only those that failed at or before this.
        #[arg(long)]
        until: Option<String>,
        #[arg(long)]
        max: Option<usize>,
        /// Messages per second (at least 1/86400, one a day; with --native
        /// 1 to 500).
        #[arg(long)]
        rate: Option<f64>,
        /// List what would move; move nothing.
        #[arg(long)]
        dry_run: bool,
        /// Send here instead of to each message's source queue.
        #[arg(long)]
        to: Option<String>,
        /// SQS's own StartMessageMoveTask: every message, up to 500/s. It
        /// cannot stamp idemq-job-id, so it refuses while any letter lacks
        /// one (unless --force).
        #[arg(long)]
        native: bool,
        /// With --native: move even letters without idemq-job-id (SQS gives
        /// each a new MessageId, so a job known by its MessageId is applied
        /// again).
        #[arg(long, requires = "native")]
        force: bool,
        /// Cancel the running native move task.
        #[arg(long)]
        cancel: bool,
        /// Also send letters whose job was first enqueued longer ago than
        /// the marker TTL (IDEMQ_MARKER_TTL, default 21d) less a day: each
        /// copy is stamped as enqueued now and its job may be applied
        /// twice. Without it they stay in the DLQ, each reported with why.
        #[arg(long)]
        allow_expired_markers: bool,
        /// Receive loops at once (1 to 32).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=MAX_CONCURRENCY as u64))]
        concurrency: u64,
        /// While letters are held by another reader (a killed run, another
        /// idemq dlq command), wait up to this long (30s, 5m; at most 12h)
        /// for them to come back, and move them too.
        #[arg(long, value_parser = parse_wait)]
        wait: Option<Duration>,
        /// One JSON object: what was (or would be) moved, skipped, failed
        /// and left, and `complete`.
        #[arg(long)]
        json: bool,
    },
    /// Write every dead letter with its attributes and context as JSON lines
    /// (a new file, mode 0600).
    Export {
        #[command(flatten)]
        common: Common,
        file: PathBuf,
        /// Delete the exported messages from the DLQ once the file is
        /// written and read back.
        #[arg(long)]
        delete: bool,
        /// Replace the file if it exists.
        #[arg(long)]
        force: bool,
        /// One JSON object: `file`, `exported`, `deleted`, `not_deleted`,
        /// `unseen`, `warnings`.
        #[arg(long)]
        json: bool,
    },
    /// Send the messages of an export to a queue, as they were, each with
    /// idemq-job-id = the id the consumer resolved and its job's
    /// first-enqueued time. Messages whose job was first enqueued longer
    /// ago than the marker TTL (IDEMQ_MARKER_TTL) less a day are not sent.
    Import {
        file: PathBuf,
        /// The queue to send to [default: with --function, the function's
        /// SQS source queue].
        #[arg(long, required_unless_present = "function")]
        to: Option<String>,
        /// Read the consumer's settings (IDEMQ_JOB_ID_POINTER,
        /// IDEMQ_ENVELOPE, IDEMQ_MARKER_TTL) from this Lambda function, and
        /// send to its SQS source queue unless --to says otherwise.
        #[arg(long, value_name = "NAME_OR_ARN")]
        function: Option<String>,
        /// Send those too, stamped as enqueued now (their jobs may be
        /// applied twice).
        #[arg(long)]
        allow_expired_markers: bool,
        /// One JSON object: `sent`, `failures`, `past_horizon`, `forced`,
        /// `complete`.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: DlqArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    // Whose settings: the flags, then --function's configuration, or else
    // this shell's environment.
    let wanted = match &args.command {
        DlqCommand::Stats { common, .. }
        | DlqCommand::List { common, .. }
        | DlqCommand::Show { common, .. }
        | DlqCommand::Redrive { common, .. }
        | DlqCommand::Export { common, .. } => consumer::Wanted {
            function: common.function.clone(),
            env_file: common.env_file.clone(),
            dlq_url: common.dlq_url.clone(),
            needs_dlq: true,
            table: common.table.clone(),
            store: common.store,
            source_queue: false,
        },
        DlqCommand::Import { function, to, .. } => consumer::Wanted {
            function: function.clone(),
            env_file: None,
            dlq_url: None,
            needs_dlq: false,
            table: None,
            store: None,
            source_queue: to.is_none(),
        },
    };
    let consumer = match consumer::resolve(wanted, sdk, &sqs).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The consumer's own settings: its job-id resolver (records are
    // stored, and copies stamped, under the id it resolves) and its marker
    // TTL (no copy is sent that its markers may have forgotten).
    let (resolver, horizon) = match consumer.env.behaviour() {
        Ok(c) => (c.job_id, ReplayHorizon::new(c.marker_ttl)),
        Err(e) => return usage_error(&e.to_string()),
    };
    let common = match &args.command {
        DlqCommand::Stats { common, .. }
        | DlqCommand::List { common, .. }
        | DlqCommand::Show { common, .. }
        | DlqCommand::Redrive { common, .. }
        | DlqCommand::Export { common, .. } => Some(common.clone()),
        DlqCommand::Import { .. } => None,
    };
    let explicit_destination = matches!(&args.command, DlqCommand::Redrive { to: Some(_), .. });
    // Every flag is checked before the first request.
    let plan = match args.command {
        DlqCommand::Redrive {
            job_ids,
            error_contains,
            since,
            until,
            max,
            rate,
            dry_run,
            to,
            native,
            force,
            cancel,
            allow_expired_markers,
            concurrency,
            wait,
            json,
            ..
        } => {
            let filter = Filter::from_flags(
                job_ids,
                error_contains,
                since.as_deref(),
                until.as_deref(),
                std::time::SystemTime::now(),
            )
            .map_err(|e| e.to_string());
            let plan = redrive_plan(
                filter,
                max,
                rate,
                dry_run,
                to,
                (native, force, cancel),
                concurrency,
                wait,
                resolver.clone(),
                (horizon, allow_expired_markers),
            );
            match plan {
                Ok(p) => Plan::Redrive(p, json),
                Err(msg) => return usage_error(&msg),
            }
        }
        other => Plan::Other(other),
    };
    let ctx = match common {
        Some(c) => match open(
            &consumer,
            &c,
            explicit_destination,
            (resolver.clone(), horizon),
            sdk,
        )
        .await
        {
            Ok(ctx) => Some(ctx),
            Err(code) => return code,
        },
        None => None,
    };
    let result = match (plan, ctx) {
        (
            Plan::Redrive(
                RedrivePlan::Native {
                    cancel,
                    force,
                    to,
                    rate,
                    allow_expired_markers,
                },
                json,
            ),
            Some(ctx),
        ) => {
            ctx.native(
                cancel,
                force,
                to.as_deref(),
                rate,
                allow_expired_markers,
                json,
            )
            .await
        }
        (Plan::Redrive(RedrivePlan::Ours(options), json), Some(ctx)) => {
            ctx.redrive(*options, json).await
        }
        (Plan::Other(DlqCommand::Stats { json, .. }), Some(ctx)) => ctx.stats(json).await,
        (Plan::Other(DlqCommand::List { json, .. }), Some(ctx)) => ctx.list(json).await,
        (
            Plan::Other(DlqCommand::Show {
                id, payload, json, ..
            }),
            Some(ctx),
        ) => ctx.show(&id, payload, json).await,
        (
            Plan::Other(DlqCommand::Export {
                file,
                delete,
                force,
                json,
                ..
            }),
            Some(ctx),
        ) => ctx.export(&file, delete, force, json).await,
        (
            Plan::Other(DlqCommand::Import {
                file,
                to,
                allow_expired_markers,
                json,
                ..
            }),
            _,
        ) => {
            let age = AgeRule {
                horizon,
                allow_expired_markers,
            };
            let Some(to) = to.or(consumer.source_url) else {
                return usage_error("--to is required (or --function NAME: its SQS source queue)");
            };
            archive::import(&sqs, &file, &to, &resolver, age, json).await
        }
        (_, _) => unreachable!("every command but import has common arguments"),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemq dlq: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The DLQ of `consumer` opened with its failure records, as `common`'s
/// flags say: what every command on a DLQ needs (and the console), or the
/// exit of one that cannot have it (the reason printed).
pub(crate) async fn open(
    consumer: &consumer::Consumer,
    c: &Common,
    explicit_destination: bool,
    (resolver, horizon): (JobIdResolver, ReplayHorizon),
    sdk: &aws_config::SdkConfig,
) -> Result<Ctx, ExitCode> {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    let Some(dlq_url) = consumer.dlq_url.clone() else {
        return Err(usage_error(
            "--dlq-url is required (or IDEMQ_DLQ_URL, or --function NAME to find the \
             function's DLQ)",
        ));
    };
    let options = DlqOptions {
        dlq_url,
        table: None,
        hold: Duration::from_secs(c.hold_secs),
        resolver: resolver.clone(),
        explicit_destination,
    };
    let (opened, place) = match consumer.store {
        StoreKind::Dynamodb => {
            let layout = match consumer.env.layout(consumer.table.as_deref()) {
                Ok(l) => l,
                Err(e) => return Err(usage_error(&e.to_string())),
            };
            let place = layout
                .as_ref()
                .map_or(RecordsPlace::None, |l| RecordsPlace::Dynamodb {
                    table: l.table_name.clone(),
                    key_prefix: l.key_prefix.clone(),
                    namespace: l.namespace.clone(),
                });
            (
                Dlq::connect_with_layout(sqs.clone(), ddb, layout, options).await,
                place,
            )
        }
        #[cfg(feature = "postgres")]
        StoreKind::Postgres => {
            let store = consumer
                .env
                .postgres(sdk)
                .map_err(|e| e.to_string())
                .and_then(|config| {
                    let schema = config.schema().to_owned();
                    idemq::store::postgres::Postgres::new(config)
                        .map(|store| (store, schema))
                        .map_err(|e| e.to_string())
                });
            let (store, schema) = match store {
                Ok(s) => s,
                Err(e) => return Err(usage_error(&e)),
            };
            let place = RecordsPlace::Postgres {
                schema,
                namespace: consumer.env.namespace().map(str::to_owned),
            };
            let records = Some(store.failure_records());
            (
                Dlq::connect_with_records(sqs.clone(), records, options).await,
                place,
            )
        }
    };
    match opened {
        Ok(dlq) => Ok(Ctx {
            dlq,
            horizon,
            place,
        }),
        Err(e) => Err(open_failed(&e)),
    }
}

type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// A command with its flags checked. One value per run of the command:
/// the size of its largest variant is not worth a box.
#[allow(clippy::large_enum_variant)]
enum Plan {
    /// The redrive, and `--json`.
    Redrive(RedrivePlan, bool),
    Other(DlqCommand),
}

enum RedrivePlan {
    Native {
        cancel: bool,
        force: bool,
        to: Option<String>,
        rate: Option<NativeRate>,
        allow_expired_markers: bool,
    },
    Ours(Box<RedriveOptions>),
}

#[allow(clippy::too_many_arguments)]
fn redrive_plan(
    filter: Result<Filter, String>,
    max: Option<usize>,
    rate: Option<f64>,
    dry_run: bool,
    to: Option<String>,
    (native, force, cancel): (bool, bool, bool),
    concurrency: u64,
    wait: Option<Duration>,
    resolver: JobIdResolver,
    (horizon, allow_expired_markers): (ReplayHorizon, bool),
) -> Result<RedrivePlan, String> {
    let filter = filter?;
    if native || cancel {
        if filter != Filter::default() || max.is_some() || dry_run || wait.is_some() {
            return Err(
                "--native moves every message: filters, --max, --dry-run and --wait need the default redrive"
                    .into(),
            );
        }
        let rate = rate
            .map(NativeRate::new)
            .transpose()
            .map_err(|e| e.to_string())?;
        return Ok(RedrivePlan::Native {
            cancel,
            force,
            to,
            rate,
            allow_expired_markers,
        });
    }
    let rate = rate
        .map(Rate::per_second)
        .transpose()
        .map_err(|e| e.to_string())?;
    Ok(RedrivePlan::Ours(Box::new(RedriveOptions {
        filter,
        max,
        rate,
        dry_run,
        to,
        concurrency: usize::try_from(concurrency).unwrap_or(MAX_CONCURRENCY),
        resolver,
        wait,
        horizon,
        allow_expired_markers,
    })))
}

/// The exit of a command whose DLQ (or destination) could not be opened:
/// the operator's input exits 2, AWS (throttling, an outage or a denied
/// request is not a usage error) exits 1.
fn open_failed(e: &OpenError) -> ExitCode {
    if e.is_usage() {
        return usage_error(&e.to_string());
    }
    eprintln!("idemq dlq: {e}");
    ExitCode::FAILURE
}

/// What every subcommand on a DLQ needs, checked once.
pub(crate) struct Ctx {
    pub(crate) dlq: Dlq,
    /// The consumer's marker TTL less a day: no copy of an older job.
    pub(crate) horizon: ReplayHorizon,
    /// Where its failure records are looked for.
    pub(crate) place: RecordsPlace,
}

impl Ctx {
    /// Every dead letter read, with its context, left invisible until
    /// `release`; and about how many could not be read.
    async fn read_letters(&self) -> Result<Scanned, Box<dyn std::error::Error>> {
        let total = self.dlq.peek().depth().await?.total();
        let bar = crate::progress::bar(total, "read");
        let read = self
            .dlq
            .read_letters(|n| bar.set_position(n as u64))
            .await?;
        bar.finish_and_clear();
        Ok(read)
    }

    /// The warnings of a command that read `read`: the letters' failure
    /// records were looked for where the consumer keeps none. Printed on
    /// stderr at once; returned for a command's JSON (`warnings`).
    fn warnings(&self, read: &Scanned) -> Vec<NoFailureRecords> {
        let warning = NoFailureRecords::check(&read.items, &self.place, self.dlq.source_queues());
        if let Some(w) = &warning {
            eprintln!("warning: {}", w.message);
        }
        warning.into_iter().collect()
    }
}

/// The line a command prints when it could not read every letter.
fn unseen_warning(unseen: u64) -> String {
    format!(
        "incomplete: about {unseen} dead letters could not be read (SQS returns no further message \
         of a FIFO group while one of its messages is in flight, and these sit behind more than 10 \
         letters of their group); what is shown covers only the letters read"
    )
}

/// `--wait`: a duration up to SQS's longest hold, 12 hours; longer could
/// only wait for letters that will never come back.
fn parse_wait(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value)
        .map_err(|e| format!("{value:?} is not a duration (30s, 5m): {e}"))?;
    if d > Duration::from_secs(MAX_HOLD_SECS) {
        return Err(format!("{value:?} is longer than SQS's longest hold (12h)"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_enforced_by_the_parser() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            dlq: DlqCommand,
        }
        let parse = |args: &[&str]| {
            Cli::try_parse_from(
                ["idemq", "list", "--dlq-url", "http://x/q"]
                    .iter()
                    .chain(args),
            )
            .map(|_| ())
        };
        assert!(parse(&["--hold-secs", "43200"]).is_ok());
        assert!(
            parse(&["--hold-secs", "43201"]).is_err(),
            "past SQS's 12 hours"
        );
        assert!(parse(&["--hold-secs", "0"]).is_err());
        let redrive = |args: &[&str]| {
            Cli::try_parse_from(
                ["idemq", "redrive", "--dlq-url", "http://x/q"]
                    .iter()
                    .chain(args),
            )
            .map(|_| ())
        };
        let import = |args: &[&str]| {
            Cli::try_parse_from(["idemq", "import", "f.jsonl"].iter().chain(args)).map(|_| ())
        };
        assert!(import(&[]).is_err(), "--to or --function");
        assert!(import(&["--to", "http://x/q"]).is_ok());
        assert!(import(&["--function", "orders"]).is_ok());
        let list =
            |args: &[&str]| Cli::try_parse_from(["idemq", "list"].iter().chain(args)).map(|_| ());
        assert!(
            list(&["--function", "orders"]).is_ok(),
            "no --dlq-url needed"
        );
        assert!(
            list(&["--env-file", "billing.env"]).is_ok(),
            "the file may hold IDEMQ_DLQ_URL"
        );
        assert!(
            list(&["--env-file", "billing.env", "--function", "orders"]).is_err(),
            "one source of settings"
        );
        assert!(redrive(&["--concurrency", "32"]).is_ok());
        assert!(redrive(&["--concurrency", "33"]).is_err());
        assert!(redrive(&["--concurrency", "0"]).is_err());
        assert!(redrive(&["--force"]).is_err(), "--force needs --native");
        assert!(redrive(&["--wait", "30s"]).is_ok());
        assert!(redrive(&["--wait", "12h"]).is_ok());
        assert!(redrive(&["--wait", "13h"]).is_err(), "past SQS's 12 hours");
        assert!(redrive(&["--wait", "soon"]).is_err());
        assert!(redrive(&["--native", "--force"]).is_ok());
        assert!(redrive(&["--allow-expired-markers"]).is_ok());
        assert!(redrive(&["--native", "--allow-expired-markers"]).is_ok());
    }
}
