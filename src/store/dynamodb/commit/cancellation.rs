//! What DynamoDB's refusal of a commit means: a cancelled transaction's
//! reasons, read by index ([`Plan`]), and any other error of a write. Its
//! own file: the reading of a failure, apart from the requests that fail.

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::CancellationReason;

use super::deployment;
use crate::commit::{CommitError, CommitOutcome};
use crate::store::dynamodb::effect::{Effect, Item};

/// Where the marker's and the effect writes' cancellation reasons are in a
/// transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The transaction index of the marker, if the effect has one.
    pub(crate) marker: Option<usize>,
    /// Effect write `i` is transaction item `i + offset`.
    pub(crate) offset: usize,
}

impl Plan {
    /// idemq's own marker first, then the effect.
    pub(crate) const SEPARATE: Self = Self {
        marker: Some(0),
        offset: 1,
    };
    /// The effect alone.
    pub(crate) const NONE: Self = Self {
        marker: None,
        offset: 0,
    };

    /// Effect write `index` is the marker.
    pub(crate) const fn fused(index: usize) -> Self {
        Self {
            marker: Some(index),
            offset: 0,
        }
    }

    pub(crate) fn of(effect: &Effect) -> Self {
        match effect.fused_index() {
            Some(i) => Self::fused(i),
            None if effect.uses_separate_marker() => Self::SEPARATE,
            None => Self::NONE,
        }
    }
}

/// What a `TransactionCanceledException` means for this commit.
#[derive(Debug, PartialEq)]
pub(crate) enum Cancellation<'a> {
    Outcome(CommitOutcome),
    /// The marker's condition failed; the old marker if DynamoDB returned it.
    MarkerExists(Option<&'a Item>),
    Invalid(String),
    /// Transaction item `index` does not fit its table's key schema.
    KeySchema {
        index: usize,
        message: String,
    },
}

/// Whether a DynamoDB validation message says that a key does not fit the
/// table's key schema, and which key attribute it names if any (the outer
/// `Option`: is it a key-schema problem; the inner: the attribute). Matched
/// on DynamoDB's own wording, since a `ValidationException` has no finer
/// code:
/// - "The provided key element does not match the schema" (a key of the
///   wrong name or type: <https://repost.aws/knowledge-center/dynamodb-provided-key-element-error>;
///   inside a transaction the cancellation reason `ValidationError`:
///   <https://github.com/paritysuite/dynamodb-conformance/pull/60>);
/// - "One or more parameter values were invalid: Missing the key id in the
///   item" (a Put without the table's key: <https://github.com/aws/aws-sdk-js/issues/4057>);
/// - "One or more parameter values were invalid: Type mismatch for key pk
///   expected: S actual: N".
pub(crate) fn key_schema_attribute(message: &str) -> Option<Option<&str>> {
    if message.contains("The provided key element does not match the schema") {
        return Some(None);
    }
    let after = |marker: &str| message.split_once(marker).map(|(_, rest)| rest);
    if let Some(rest) = after("Missing the key ") {
        return Some(rest.strip_suffix(" in the item").or(rest.split(' ').next()));
    }
    if let Some(rest) = after("Type mismatch for key ") {
        return Some(rest.split(' ').next());
    }
    None
}

pub(super) const THROTTLING_CODES: [&str; 3] = [
    "ProvisionedThroughputExceeded",
    "ThrottlingError",
    "RequestLimitExceeded",
];

/// Another transaction or write held one of the items at the same moment
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>).
pub(super) const CONFLICT_CODE: &str = "TransactionConflict";

/// Reads cancellation reasons by index. Precedence: an existing marker
/// settles it (the job is done, whatever else failed); then errors that a
/// retry cannot fix; then throttling and contention, which a retry may turn
/// into any outcome; only then an effect condition, the business outcome.
pub(crate) fn classify_cancellation(
    reasons: &[CancellationReason],
    plan: Plan,
) -> Cancellation<'_> {
    fn code(r: &CancellationReason) -> &str {
        r.code().unwrap_or("None")
    }
    let message = |r: &CancellationReason| r.message().unwrap_or("").to_owned();
    let effect_index = |i: usize| i - plan.offset;

    if let Some(at) = plan.marker
        && let Some(marker) = reasons.get(at)
        && code(marker) == "ConditionalCheckFailed"
    {
        return Cancellation::MarkerExists(marker.item());
    }
    let find =
        |pred: &dyn Fn(&str) -> bool| reasons.iter().enumerate().find(|(_, r)| pred(code(r)));
    if let Some((i, r)) = find(&|c| c == "ValidationError")
        && key_schema_attribute(r.message().unwrap_or("")).is_some()
    {
        return Cancellation::KeySchema {
            index: i,
            message: message(r),
        };
    }
    if let Some((i, r)) =
        find(&|c| c == "ValidationError" || c == "ItemCollectionSizeLimitExceeded")
    {
        let what = if plan == Plan::SEPARATE && i == 0 {
            "the marker".to_owned()
        } else {
            format!("effect write {}", effect_index(i))
        };
        return Cancellation::Invalid(format!("{what}: {}: {}", code(r), message(r)));
    }
    if let Some((_, r)) = find(&|c| THROTTLING_CODES.contains(&c)) {
        return Cancellation::Outcome(CommitOutcome::Transient {
            reason: format!("transaction cancelled: {}: {}", code(r), message(r)),
        });
    }
    // Throttling first: it wants the backoff, which a re-run at once would
    // not give it.
    if let Some((i, r)) = find(&|c| c == CONFLICT_CODE) {
        let what = if plan.marker == Some(i) {
            "the marker".to_owned()
        } else {
            format!("effect write {}", effect_index(i))
        };
        return Cancellation::Outcome(CommitOutcome::Collided {
            reason: format!(
                "transaction cancelled: {CONFLICT_CODE} on {what}: {}",
                message(r)
            ),
        });
    }
    if let Some((i, r)) = find(&|c| c == "ConditionalCheckFailed") {
        return Cancellation::Outcome(CommitOutcome::Rejected {
            index: effect_index(i),
            reason: message(r),
        });
    }
    let codes: Vec<&str> = reasons.iter().map(code).collect();
    Cancellation::Outcome(CommitOutcome::Transient {
        reason: format!("transaction cancelled for no known reason: {codes:?}"),
    })
}

/// The errors of DynamoDB's write operations, classified alike by their
/// generated `is_*` methods.
pub(super) trait WriteError:
    ProvideErrorMetadata + std::error::Error + Send + Sync + 'static
{
    /// Throttling, contention or a server-side failure: a retry may succeed.
    fn is_transient(&self) -> bool;
    fn is_table_missing(&self) -> bool;
}

impl WriteError for TransactWriteItemsError {
    fn is_transient(&self) -> bool {
        self.is_provisioned_throughput_exceeded_exception()
            || self.is_request_limit_exceeded()
            || self.is_throttling_exception()
            || self.is_internal_server_error()
            || self.is_transaction_in_progress_exception()
    }

    fn is_table_missing(&self) -> bool {
        self.is_resource_not_found_exception()
    }
}

/// Any other error of a write: throttling, server errors, timeouts and lost
/// connections are transient (the marker makes a retry safe even if the
/// request was applied); a missing table or a denied permission is a
/// deployment error, named by `needs` (what the request needed); the rest
/// need a person.
pub(super) fn classify_sdk_error<E: WriteError>(
    err: SdkError<E>,
    needs: &deployment::Needs,
) -> Result<CommitOutcome, CommitError> {
    let transient = |err: &SdkError<E>| CommitOutcome::Transient {
        reason: DisplayErrorContext(err).to_string(),
    };
    match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            Ok(transient(&err))
        }
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            if e.is_transient() || ctx.raw().status().is_server_error() {
                Ok(transient(&err))
            } else if e.is_table_missing() {
                Err(needs.table_missing())
            } else if deployment::is_access_denied(e.code()) {
                Err(needs.access_denied(e.message().unwrap_or("")))
            } else if e.code() == Some("ValidationException") {
                Err(CommitError::Invalid(e.message().unwrap_or("").to_owned()))
            } else {
                Err(CommitError::Service(DisplayErrorContext(&err).to_string()))
            }
        }
        _ => Err(CommitError::Service(DisplayErrorContext(&err).to_string())),
    }
}
