//! One standard write instead of a transaction, where one is enough.
//!
//! A transactional write costs twice a standard one: "Transactional write
//! requests require 2 WCUs to perform one write per second for items up to
//! 1 KB" against one for a standard write
//! (<https://aws.amazon.com/dynamodb/pricing/provisioned/>; on demand, a
//! transactional write is two write request units:
//! "DynamoDB performs two underlying reads or writes of every item in the
//! transaction", <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-capacity-handling>).
//! A transaction of one item buys nothing that the item's own condition
//! does not, so an effect of one write is sent as that write:
//!
//! - **its fused marker alone** ([`Effect::marked_by`]): a `PutItem` with
//!   `attribute_not_exists` on its key and
//!   `ReturnValuesOnConditionCheckFailure=ALL_OLD`, with which a failed
//!   condition returns the existing item in the
//!   `ConditionalCheckFailedException`
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_PutItem.html#DDB-PutItem-request-ReturnValuesOnConditionCheckFailure>),
//!   at no read cost ("There is no additional cost associated with
//!   requesting a return value … No read capacity units are consumed",
//!   <https://docs.aws.amazon.com/sdk-for-kotlin/api/latest/dynamodb/aws.sdk.kotlin.services.dynamodb.model/-delete-item-request/return-values-on-condition-check-failure.html>).
//!   Duplicate, conflict and rejection are then decided from that item
//!   exactly as from a transaction's cancellation reason. An SDK retry of a
//!   put that was applied finds its own item: a duplicate, as it should be.
//! - **one unconditional Put, Update or Delete without a marker** (an
//!   upsert): a `PutItem`, `UpdateItem` or `DeleteItem`.
//!
//! Not sent alone: a *conditional* write without a marker. A transaction
//! carries a `ClientRequestToken`, which turns the SDK's retry of a request
//! that was applied into a success; a standalone conditional write retried
//! after a lost response would fail its own condition, a false rejection.
//! Nor a `ConditionCheck`, which has no standalone form.

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::{
    CommitError, CommitOutcome, Committer, FusedPut, JobRef, Plan, WriteError, classify_sdk_error,
    key_schema_attribute,
};
use crate::store::dynamodb::effect::{Effect, Item, Write, WriteKind};

/// An effect that one standard write commits.
#[derive(Debug, Clone, Copy)]
pub(super) enum Single<'e> {
    /// The fused marker, the effect's only write.
    Marker(&'e Write),
    /// One unconditional write, no marker.
    Upsert(&'e Write),
}

/// Whether `effect` (validated) is committed with one standard write.
pub(super) fn eligible(effect: &Effect) -> Option<Single<'_>> {
    match effect.writes() {
        // A switching marker adds a check on the other form's item: a
        // transaction.
        [only] if effect.fused_index() == Some(0) && !effect.is_switching_marker_form() => {
            Some(Single::Marker(only))
        }
        [only]
            if !effect.uses_marker()
                && only.condition_expression().is_none()
                && *only.kind() != WriteKind::ConditionCheck =>
        {
            Some(Single::Upsert(only))
        }
        _ => None,
    }
}

/// The errors of the standard writes, which carry a failed condition's
/// item themselves.
trait SingleWriteError: WriteError {
    /// A transaction held the item at that moment: a `PutItem`,
    /// `UpdateItem` or `DeleteItem` on an item that an ongoing
    /// `TransactWriteItems` includes is refused with
    /// `TransactionConflictException`
    /// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>).
    /// Nothing was written: a lost race, re-run like a transaction's
    /// `TransactionConflict` ([`CommitOutcome::Collided`]).
    fn collided(&self) -> bool;

    /// `Some` when the write's condition failed, with the item if DynamoDB
    /// returned it.
    fn condition_failed(&self) -> Option<Option<&Item>>;
}

macro_rules! single_write_error {
    ($error:ident) => {
        impl WriteError for $error {
            fn is_transient(&self) -> bool {
                self.is_provisioned_throughput_exceeded_exception()
                    || self.is_request_limit_exceeded()
                    || self.is_throttling_exception()
                    || self.is_internal_server_error()
                    || self.is_replicated_write_conflict_exception()
            }

            fn is_table_missing(&self) -> bool {
                self.is_resource_not_found_exception()
            }
        }

        impl SingleWriteError for $error {
            fn collided(&self) -> bool {
                self.is_transaction_conflict_exception()
            }

            fn condition_failed(&self) -> Option<Option<&Item>> {
                match self {
                    $error::ConditionalCheckFailedException(e) => Some(e.item()),
                    _ => None,
                }
            }
        }
    };
}

single_write_error!(PutItemError);
single_write_error!(UpdateItemError);
single_write_error!(DeleteItemError);

/// How a standard write failed.
enum Failed {
    /// Its condition failed; the item if DynamoDB returned it.
    Condition(Option<Item>),
    /// Anything else, classified.
    Classified(Result<CommitOutcome, CommitError>),
}

impl Committer {
    /// Commits `effect`, which [`eligible`] found to be `single`.
    pub(super) async fn commit_single(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
        single: Single<'_>,
        stored: &mut Option<Item>,
    ) -> Result<CommitOutcome, CommitError> {
        let failed = match single {
            Single::Marker(write) => {
                let FusedPut {
                    table,
                    item,
                    key_attribute,
                } = self.fused_put(job, write, effect, crate::clock::now())?;
                let sent = self
                    .client
                    .put_item()
                    .table_name(&table)
                    .set_item(Some(item))
                    .condition_expression(FusedPut::CONDITION)
                    .expression_attribute_names(FusedPut::NAME, key_attribute)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                sent.err()
                    .map(|e| self.failed(e, effect, Plan::fused(0), &table))
            }
            Single::Upsert(write) => self.upsert(effect, write).await,
        };
        match (failed, single) {
            (None, _) => Ok(CommitOutcome::Committed),
            (Some(Failed::Classified(outcome)), _) => outcome,
            (Some(Failed::Condition(item)), Single::Marker(_)) => Ok(self
                .compare_marker(job, effect, item.as_ref(), stored)
                .await),
            // An upsert has no condition to fail; if DynamoDB says it did,
            // it is the write's, as in a transaction.
            (Some(Failed::Condition(_)), Single::Upsert(_)) => Ok(CommitOutcome::Rejected {
                index: 0,
                reason: "The conditional request failed".into(),
            }),
        }
    }

    /// One unconditional write, without a marker.
    async fn upsert(&self, effect: &Effect, write: &Write) -> Option<Failed> {
        let names =
            (!write.expression_names().is_empty()).then(|| write.expression_names().clone());
        let values =
            (!write.expression_values().is_empty()).then(|| write.expression_values().clone());
        let key = write.key().as_item().clone();
        let table = write.table();
        let plan = Plan::NONE;
        match write.kind() {
            WriteKind::Put { attributes } => {
                let mut item = key;
                item.extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
                let sent = self
                    .client
                    .put_item()
                    .table_name(table)
                    .set_item(Some(item))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await;
                sent.err().map(|e| self.failed(e, effect, plan, table))
            }
            WriteKind::Update { expression } => {
                let sent = self
                    .client
                    .update_item()
                    .table_name(table)
                    .set_key(Some(key))
                    .update_expression(expression)
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await;
                sent.err().map(|e| self.failed(e, effect, plan, table))
            }
            WriteKind::Delete => {
                let sent = self
                    .client
                    .delete_item()
                    .table_name(table)
                    .set_key(Some(key))
                    .set_expression_attribute_names(names)
                    .set_expression_attribute_values(values)
                    .send()
                    .await;
                sent.err().map(|e| self.failed(e, effect, plan, table))
            }
            // `eligible` never picks one.
            WriteKind::ConditionCheck => Some(Failed::Classified(Err(CommitError::Invalid(
                "a condition check cannot be committed without a transaction".into(),
            )))),
        }
    }

    /// A standard write's error, read as a transaction's would be.
    fn failed<E: SingleWriteError>(
        &self,
        err: SdkError<E>,
        effect: &Effect,
        plan: Plan,
        table: &str,
    ) -> Failed {
        if let Some(e) = err.as_service_error() {
            if let Some(item) = e.condition_failed() {
                return Failed::Condition(item.cloned());
            }
            if e.collided() {
                return Failed::Classified(Ok(CommitOutcome::Collided {
                    reason: format!("write to table {table} refused: {e}"),
                }));
            }
            if e.code() == Some("ValidationException") {
                let message = e.message().unwrap_or("");
                if let Some(named) = key_schema_attribute(message) {
                    return Failed::Classified(Ok(self.key_schema_mismatch(
                        effect,
                        plan,
                        Some(0),
                        named,
                        message,
                    )));
                }
            }
        }
        Failed::Classified(classify_sdk_error(err, &self.needs(effect)))
    }
}
