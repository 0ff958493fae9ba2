//! SQS's own redrive (`StartMessageMoveTask`): its pace, the refusals
//! that keep it from starting where it would apply jobs twice, and
//! starting, watching and cancelling the task.

use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use serde::Serialize;

use super::{Refused, past_horizon};
use crate::dlq::peek::{DeadMessage, Peek};
use crate::failure::DlqError;
use crate::horizon::ReplayHorizon;
use crate::job::JobIdResolver;

/// A pace for SQS's move task: a whole number of messages per second, 1
/// to 500
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html>,
/// `MaxNumberOfMessagesPerSecond`: "The maximum value for messages per
/// second is 500").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeRate(i32);

/// A `--rate` SQS's move task cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("--rate {value}: SQS's move task takes a whole number of messages per second, 1 to 500")]
pub struct InvalidNativeRate {
    /// The number given.
    pub value: f64,
}

impl NativeRate {
    /// `value` messages per second, if SQS's move task takes it.
    pub fn new(value: f64) -> Result<Self, InvalidNativeRate> {
        if value.is_finite() && (1.0..=500.0).contains(&value) && value.fract() == 0.0 {
            Ok(Self(value as i32))
        } else {
            Err(InvalidNativeRate { value })
        }
    }

    /// Messages per second, as [`start_native`] takes it.
    pub fn messages_per_second(self) -> i32 {
        self.0
    }
}

/// Why SQS's move task is not to start on a DLQ (see [`check_native`]).
#[derive(Debug, thiserror::Error)]
pub enum NativeRefusal {
    /// Letters past the replay horizon: the task would move them too.
    #[error(
        "{} of {read} dead letters are past the replay horizon: SQS's move task would \
         move them too, as new jobs their markers may no longer remember. Use the \
         default redrive (it leaves them in the DLQ and moves the rest), or pass \
         --allow-expired-markers to move them anyway",
        .refused.len()
    )]
    PastHorizon {
        /// Each letter past the horizon, with why.
        refused: Vec<Refused>,
        /// Letters read.
        read: usize,
    },
    /// Letters known only by their MessageId, which the task changes.
    #[error(
        "{unstable} of {read} dead letters carry no idemq-job-id{}: SQS's move task gives each \
         a new MessageId, so the consumer would apply them again as new jobs. Use the default \
         redrive (it stamps idemq-job-id), or pass --force to move them anyway",
        pointer_note(.body_pointer)
    )]
    NoStableId {
        /// How many.
        unstable: usize,
        /// Letters read.
        read: usize,
        /// Whether the consumer also looks for a job id in the body.
        body_pointer: bool,
    },
    /// About this many letters could not be read, and may be either.
    #[error(
        "not starting the move task: the unread letters may lack idemq-job-id \
         or be past the replay horizon (--force and --allow-expired-markers move anyway)"
    )]
    Unseen(u64),
    /// The letters' ages could not be read.
    #[error(transparent)]
    Dlq(#[from] DlqError),
}

/// What else the consumer looked at for a job id.
fn pointer_note(body_pointer: &bool) -> &'static str {
    if *body_pointer {
        " and no job id at IDEMQ_JOB_ID_POINTER"
    } else {
        ""
    }
}

impl NativeRefusal {
    /// Whether the operator can clear it with a flag (the default redrive,
    /// `--force`, `--allow-expired-markers`), rather than a rerun.
    pub fn is_usage(&self) -> bool {
        matches!(self, Self::PastHorizon { .. } | Self::NoStableId { .. })
    }
}

/// Whether SQS's move task may start on `peek`'s DLQ, whose letters
/// (`letters`, with about `unseen` more not read) the consumer resolves
/// with `resolver`.
///
/// The task cannot add `idemq-job-id`, and gives every message it moves a
/// new MessageId
/// (<https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html>:
/// "All redriven messages are considered new messages and are assigned a
/// new messageID"). A job known only by its MessageId would be applied
/// again, so it starts only when every letter carries a stable id
/// (attribute or body pointer), or with `force`. Nor can it leave a letter
/// behind or stamp `idemq-first-enqueued`: it starts only when no letter
/// is past `horizon`, or with `allow_expired_markers`.
pub async fn check_native(
    peek: &Peek,
    letters: &[DeadMessage],
    unseen: u64,
    resolver: &JobIdResolver,
    horizon: &ReplayHorizon,
    force: bool,
    allow_expired_markers: bool,
) -> Result<(), NativeRefusal> {
    if !allow_expired_markers {
        let refused = past_horizon(peek, letters, horizon, resolver, crate::clock::now()).await?;
        if !refused.is_empty() {
            return Err(NativeRefusal::PastHorizon {
                refused,
                read: letters.len(),
            });
        }
    }
    if !force {
        let unstable = letters
            .iter()
            .filter(|m| {
                matches!(
                    m.resolve(resolver),
                    Ok((_, crate::job::JobIdSource::MessageId))
                )
            })
            .count();
        if unstable > 0 {
            return Err(NativeRefusal::NoStableId {
                unstable,
                read: letters.len(),
                body_pointer: resolver.body_pointer.is_some(),
            });
        }
    }
    if unseen > 0 {
        return Err(NativeRefusal::Unseen(unseen));
    }
    Ok(())
}

/// SQS's own redrive (`StartMessageMoveTask`): every message, up to 500/s,
/// back to its source queue (or to `to`). Returns the task handle.
pub async fn start_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
    to_arn: Option<&str>,
    rate: Option<i32>,
) -> Result<String, DlqError> {
    let out = sqs
        .start_message_move_task()
        .source_arn(dlq_arn)
        .set_destination_arn(to_arn.map(str::to_owned))
        .set_max_number_of_messages_per_second(rate)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(out.task_handle().unwrap_or_default().to_owned())
}

/// The newest move task of a DLQ, as `ListMessageMoveTasks` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MoveTask {
    /// `RUNNING`, `COMPLETED`, `CANCELLING`, `CANCELLED` or `FAILED`.
    pub status: String,
    /// The handle to cancel it with, while it runs.
    pub task_handle: Option<String>,
    /// Messages moved so far (approximate).
    pub moved: i64,
    /// Messages it set out to move (approximate).
    pub to_move: Option<i64>,
    /// Why it failed, if it did.
    pub failure_reason: Option<String>,
}

/// The DLQ's newest move task (`ListMessageMoveTasks`), if any.
pub async fn native_status(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
) -> Result<Option<MoveTask>, DlqError> {
    let out = sqs
        .list_message_move_tasks()
        .source_arn(dlq_arn)
        .max_results(1)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(out.results().first().map(|t| MoveTask {
        status: t.status().unwrap_or("UNKNOWN").to_owned(),
        task_handle: t.task_handle().map(str::to_owned),
        moved: t.approximate_number_of_messages_moved(),
        to_move: t.approximate_number_of_messages_to_move(),
        failure_reason: t.failure_reason().map(str::to_owned),
    }))
}

/// How often [`wait_native`] asks how the move task is doing.
const NATIVE_POLL: Duration = Duration::from_millis(500);

/// Waits for the DLQ's move task to end (any status but `RUNNING`) and
/// returns it; `progress` sees it each time it is read.
pub async fn wait_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
    mut progress: impl FnMut(&MoveTask),
) -> Result<MoveTask, DlqError> {
    loop {
        tokio::time::sleep(NATIVE_POLL).await;
        let Some(task) = native_status(sqs, dlq_arn).await? else {
            continue;
        };
        progress(&task);
        if task.status != "RUNNING" {
            return Ok(task);
        }
    }
}

/// Cancels the running move task of a DLQ, if there is one.
pub async fn cancel_native(
    sqs: &aws_sdk_sqs::Client,
    dlq_arn: &str,
) -> Result<Option<i64>, DlqError> {
    let Some(task) = native_status(sqs, dlq_arn).await? else {
        return Ok(None);
    };
    let (true, Some(handle)) = (task.status == "RUNNING", task.task_handle) else {
        return Ok(None);
    };
    let out = sqs
        .cancel_message_move_task()
        .task_handle(handle)
        .send()
        .await
        .map_err(|e| DlqError::Sqs(DisplayErrorContext(e).to_string()))?;
    Ok(Some(out.approximate_number_of_messages_moved()))
}
