//! `idemq dlq`: see why every dead letter died, and replay it without
//! losing or doubling anything.
//!
//! One file per concern: [`read`] (stats, list, show), [`redrive`] (ours
//! and SQS's move task), [`archive`] (export, import). Each parses, calls
//! the library (`idemq::dlq`: `inspect`, `redrive`, `archive`) and prints.
//! This file holds the arguments and their bounds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use idemq::config::IdempotencyConfig;
use idemq::dlq::archive::AgeRule;
use idemq::dlq::inspect::{Dlq, DlqOptions, OpenError, Scanned};
use idemq::dlq::redrive::{Filter, MAX_CONCURRENCY, NativeRate, Rate, RedriveOptions};
use idemq::horizon::ReplayHorizon;
use idemq::job::JobIdResolver;

use crate::{StoreKind, usage_error};

mod archive;
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
struct Common {
    /// The dead-letter queue.
    #[arg(long, env = "IDEMQ_DLQ_URL")]
    dlq_url: String,
    /// The idemq table, for failure records (the whole error chain). Key
    /// names and prefix come from IDEMQ_ATTR_PK / IDEMQ_KEY_PREFIX, as for
    /// the consumer.
    #[arg(long, env = "IDEMQ_TABLE")]
    table: Option<String>,
    /// Where the consumer keeps its failure records: the table above, or
    /// (`postgres`, in a binary built with the `postgres` feature) the
    /// schema of IDEMQ_POSTGRES_URL / IDEMQ_POSTGRES_SCHEMA.
    #[arg(long, value_enum, default_value_t = StoreKind::Dynamodb)]
    store: StoreKind,
    /// Seconds each message stays invisible while it is read; then it is
    /// made visible again (1 to 43200, SQS's 12-hour limit).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=MAX_HOLD_SECS))]
    hold_secs: u64,
}

#[derive(Debug, clap::Subcommand)]
enum DlqCommand {
    /// Depth, age of the oldest message, counts by error, source queues.
    Stats {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        json: bool,
    },
    /// One row per dead letter (JSON lines with --json).
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
    },
    /// Send the messages of an export to a queue, as they were, each with
    /// idemq-job-id = the id the consumer resolved and its job's
    /// first-enqueued time. Messages whose job was first enqueued longer
    /// ago than the marker TTL (IDEMQ_MARKER_TTL) less a day are not sent.
    Import {
        file: PathBuf,
        #[arg(long)]
        to: String,
        /// Send those too, stamped as enqueued now (their jobs may be
        /// applied twice).
        #[arg(long)]
        allow_expired_markers: bool,
    },
}

pub async fn run(args: DlqArgs, sdk: &aws_config::SdkConfig) -> ExitCode {
    let sqs = aws_sdk_sqs::Client::new(sdk);
    let ddb = aws_sdk_dynamodb::Client::new(sdk);
    // The consumer's own settings: its job-id resolver (records are
    // stored, and copies stamped, under the id it resolves) and its marker
    // TTL (no copy is sent that its markers may have forgotten).
    let (resolver, horizon) = match IdempotencyConfig::from_env() {
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
            ..
        } => {
            let filter = Filter::from_flags(
                job_ids,
                error_contains,
                since.as_deref(),
                until.as_deref(),
                idemq::clock::now(),
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
                Ok(p) => Plan::Redrive(p),
                Err(msg) => return usage_error(&msg),
            }
        }
        other => Plan::Other(other),
    };
    let ctx = match common {
        Some(c) => {
            let options = DlqOptions {
                dlq_url: c.dlq_url,
                table: c.table,
                hold: Duration::from_secs(c.hold_secs),
                resolver: resolver.clone(),
                explicit_destination,
            };
            let opened = match c.store {
                StoreKind::Dynamodb => Dlq::connect(sqs.clone(), ddb, options).await,
                #[cfg(feature = "postgres")]
                StoreKind::Postgres => match crate::postgres_store(sdk) {
                    Ok(store) => {
                        Dlq::connect_with_records(
                            sqs.clone(),
                            Some(store.failure_records()),
                            options,
                        )
                        .await
                    }
                    Err(e) => return usage_error(&e),
                },
            };
            match opened {
                Ok(dlq) => Some(Ctx { dlq, horizon }),
                Err(e) => return open_failed(&e),
            }
        }
        None => None,
    };
    let result = match (plan, ctx) {
        (
            Plan::Redrive(RedrivePlan::Native {
                cancel,
                force,
                to,
                rate,
                allow_expired_markers,
            }),
            Some(ctx),
        ) => {
            ctx.native(cancel, force, to.as_deref(), rate, allow_expired_markers)
                .await
        }
        (Plan::Redrive(RedrivePlan::Ours(options)), Some(ctx)) => ctx.redrive(*options).await,
        (Plan::Other(DlqCommand::Stats { json, .. }), Some(ctx)) => ctx.stats(json).await,
        (Plan::Other(DlqCommand::List { json, .. }), Some(ctx)) => ctx.list(json).await,
        (Plan::Other(DlqCommand::Show { id, payload, .. }), Some(ctx)) => {
            ctx.show(&id, payload).await
        }
        (
            Plan::Other(DlqCommand::Export {
                file,
                delete,
                force,
                ..
            }),
            Some(ctx),
        ) => ctx.export(&file, delete, force).await,
        (
            Plan::Other(DlqCommand::Import {
                file,
                to,
                allow_expired_markers,
            }),
            _,
        ) => {
            let age = AgeRule {
                horizon,
                allow_expired_markers,
            };
            archive::import(&sqs, &file, &to, &resolver, age).await
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

type CmdResult = Result<ExitCode, Box<dyn std::error::Error>>;

/// A command with its flags checked. One value per run of the command:
/// the size of its largest variant is not worth a box.
#[allow(clippy::large_enum_variant)]
enum Plan {
    Redrive(RedrivePlan),
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
struct Ctx {
    dlq: Dlq,
    /// The consumer's marker TTL less a day: no copy of an older job.
    horizon: ReplayHorizon,
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
