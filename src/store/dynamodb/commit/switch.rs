//! An effect switching between idemq's separate marker and a fused one
//! ([`Effect::switching_marker_form`]), across a deploy.
//!
//! Each form checks only its own marker: a job committed with a fused
//! marker and delivered again to a version that uses a separate one finds
//! no separate marker and is applied a second time; the other way round,
//! the fused Put finds the item the previous version wrote without a job id
//! and the job is rejected. While the switch is on, a commit also requires
//! the other form to be absent, in the same transaction:
//!
//! - fused: a `ConditionCheck` that the job's separate marker item does not
//!   exist ([`absent`], which any other marker form a commit must rule out
//!   can use too);
//! - separate: every effect write's condition also requires that its item
//!   is not this job's fused marker ([`guarded`]). A `ConditionCheck` cannot
//!   do that: "no two actions can target the same item. For example, you
//!   cannot both ConditionCheck and Update the same item"
//!   (<https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html>),
//!   and the item that was the fused marker is one the effect still writes.
//!
//! Both ask for `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a failed
//! check carries the marker found, at no read cost; without it (an emulator
//! that does not return it) the item is read.

use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem,
};

use super::{CommitOutcome, Committer, JobRef, Plan};
use crate::store::dynamodb::effect::{Effect, EffectError, Item, Write};

const JOB_NAME: &str = "#idemq_switch_job";
const JOB_VALUE: &str = ":idemq_switch_job";
const HASH_NAME: &str = "#idemq_switch_hash";

/// A `ConditionCheck` that no item has `key` in `table` (`attribute` is
/// one of its key attributes): a marker form this commit does not write
/// must not exist. A failed check returns the item found.
pub(crate) fn absent(
    table: &str,
    key: Item,
    attribute: &str,
) -> Result<TransactWriteItem, EffectError> {
    let check = ConditionCheck::builder()
        .table_name(table)
        .set_key(Some(key))
        .condition_expression("attribute_not_exists(#idemq_absent)")
        .expression_attribute_names("#idemq_absent", attribute)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| EffectError::Build(e.to_string()))?;
    Ok(TransactWriteItem::builder().condition_check(check).build())
}

/// `write`, whose condition also requires that its item is not `job`'s
/// fused marker (this job's id in `job_id` and a payload hash in
/// `payload_hash`, what a fused marker carries). A failed condition returns
/// the item found.
pub(crate) fn guarded(
    write: &Write,
    job: JobRef<'_>,
    job_id: &str,
    payload_hash: &str,
) -> Result<TransactWriteItem, EffectError> {
    let not_marker = format!("NOT ({JOB_NAME} = {JOB_VALUE} AND attribute_exists({HASH_NAME}))");
    let mut write = write.clone();
    write.condition = Some(match write.condition.take() {
        Some(own) => format!("({own}) AND {not_marker}"),
        None => not_marker,
    });
    write.names.insert(JOB_NAME.into(), job_id.into());
    write.names.insert(HASH_NAME.into(), payload_hash.into());
    write
        .values
        .insert(JOB_VALUE.into(), AttributeValue::S(job.id.to_string()));
    write.to_sdk_returning(Some(ReturnValuesOnConditionCheckFailure::AllOld))
}

/// Where a cancelled transaction's reasons say the other marker form
/// exists.
#[derive(Debug)]
pub(super) enum OtherForm<'a> {
    /// The separate marker, found by a fused commit's [`absent`] check.
    Separate(Option<&'a Item>),
    /// The fused Put's condition failed on an item that is not (or may not
    /// be) this job's, and the check was not reported failed: should a
    /// transaction report only some of its failed conditions, the separate
    /// marker is read before the Put's failure is taken as the answer.
    MaybeSeparate,
    /// Effect write `index`'s condition failed: its item may be this job's
    /// fused marker, found by a separate commit's [`guarded`] write.
    Fused {
        index: usize,
        item: Option<&'a Item>,
    },
}

/// The transaction index of a fused commit's [`absent`] check: after every
/// effect write, so that effect indexes stay unshifted.
pub(super) fn check_index(effect: &Effect) -> usize {
    effect.len()
}

/// The reasons that may be the other form's marker, in the order to look
/// at them. Empty when the switch is off, or when a separate marker exists
/// (which settles the job as always). A fused commit's check comes first
/// even when its own Put failed too: the item that Put finds is then the
/// one the separate-marker version wrote, with no job id.
pub(super) fn other_forms<'a>(
    effect: &Effect,
    plan: Plan,
    reasons: &'a [CancellationReason],
    this_jobs: impl Fn(&Item) -> bool,
) -> Vec<OtherForm<'a>> {
    let failed = |r: &CancellationReason| r.code() == Some("ConditionalCheckFailed");
    if !effect.is_switching_marker_form() {
        return Vec::new();
    }
    if effect.fused_index().is_some() {
        return reasons
            .get(check_index(effect))
            .filter(|r| failed(r))
            .map(|r| OtherForm::Separate(r.item()))
            .or_else(|| {
                plan.marker
                    .and_then(|at| reasons.get(at))
                    .filter(|r| failed(r) && !r.item().is_some_and(this_jobs))
                    .map(|_| OtherForm::MaybeSeparate)
            })
            .into_iter()
            .collect();
    }
    if plan
        .marker
        .and_then(|at| reasons.get(at))
        .is_some_and(failed)
    {
        return Vec::new();
    }
    reasons
        .iter()
        .enumerate()
        .skip(plan.offset)
        .filter(|(_, r)| failed(r))
        .map(|(i, r)| OtherForm::Fused {
            index: i - plan.offset,
            item: r.item(),
        })
        .collect()
}

impl Committer {
    /// The transaction items a switching effect adds after its writes.
    pub(super) fn switch_checks(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
    ) -> Result<Vec<TransactWriteItem>, EffectError> {
        if !effect.is_switching_marker_form() || effect.fused_index().is_none() {
            return Ok(Vec::new());
        }
        Ok(vec![absent(
            &self.layout.table_name,
            self.marker_key(job),
            &self.layout.partition_key,
        )?])
    }

    /// Effect write `index` as sent: guarded when a separate-marker effect
    /// is switching.
    pub(super) fn switch_write(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
        write: &Write,
    ) -> Result<TransactWriteItem, EffectError> {
        if effect.is_switching_marker_form() && effect.uses_separate_marker() {
            guarded(write, job, &self.layout.job_id, &self.layout.payload_hash)
        } else {
            write.to_sdk()
        }
    }

    /// The outcome when the other form marks this job, `None` when it does
    /// not (the cancellation is read as usual then).
    pub(super) async fn settle_other_form(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
        found: Vec<OtherForm<'_>>,
        duplicate_of: &mut Option<Item>,
    ) -> Option<CommitOutcome> {
        for form in found {
            let separate = matches!(form, OtherForm::Separate(_));
            let read = match form {
                OtherForm::Separate(Some(item))
                | OtherForm::Fused {
                    item: Some(item), ..
                } => Ok(Some(item.clone())),
                OtherForm::Separate(None) | OtherForm::MaybeSeparate => {
                    self.read_item(&self.layout.table_name, &self.marker_key(job))
                        .await
                }
                OtherForm::Fused { index, item: None } => {
                    let write = &effect.writes()[index];
                    self.read_item(write.table(), write.key().as_item()).await
                }
            };
            let item = match read {
                Ok(item) => item,
                Err(e) => {
                    return Some(CommitOutcome::Transient {
                        reason: format!("the other marker form could not be read: {e}"),
                    });
                }
            };
            let marker = item
                .as_ref()
                .and_then(|item| self.parse_marker(item))
                .filter(|m| m.job_id == job.id.as_str());
            let (Some(marker), Some(item)) = (marker, item) else {
                // A separate marker's check has no other reading: it
                // expired (or was deleted) since, and the next try decides.
                // A write's failed condition is then its own.
                if separate {
                    return Some(CommitOutcome::Transient {
                        reason: "the separate marker check failed but no marker is stored".into(),
                    });
                }
                continue;
            };
            return Some(if &marker.payload_hash == job.payload_hash {
                *duplicate_of = Some(item);
                CommitOutcome::Duplicate
            } else {
                CommitOutcome::Conflict {
                    stored_hash: marker.payload_hash,
                }
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dynamodb::effect::Key;

    fn reason(code: &str, item: Option<Item>) -> CancellationReason {
        CancellationReason::builder()
            .code(code)
            .set_item(item)
            .build()
    }

    fn entry() -> Write {
        Write::put("t", Key::string("pk", "entry#1"), Item::new())
    }

    fn counter() -> Write {
        Write::update("t", Key::string("pk", "count#1"), "ADD n :one")
            .value(":one", AttributeValue::N("1".into()))
    }

    fn item(job: &str) -> Item {
        Item::from([("job_id".to_string(), AttributeValue::S(job.into()))])
    }

    fn this_jobs(item: &Item) -> bool {
        item.get("job_id") == Some(&AttributeValue::S("j".into()))
    }

    #[test]
    fn nothing_is_looked_at_without_the_switch() {
        let effect = Effect::new().with(counter()).marked_by(entry());
        let reasons = [reason("None", None), reason("ConditionalCheckFailed", None)];
        assert!(other_forms(&effect, Plan::of(&effect), &reasons, this_jobs).is_empty());
    }

    /// The separate marker, which the previous version wrote, wins over the
    /// fused Put's failure on the item that version wrote without a job id.
    #[test]
    fn a_fused_commit_reads_its_check_first_even_when_its_put_failed_too() {
        let effect = Effect::new()
            .with(counter())
            .marked_by(entry())
            .switching_marker_form();
        let plan = Plan::of(&effect);
        let marker = item("j");
        let reasons = [
            reason("None", None),
            reason("ConditionalCheckFailed", Some(Item::new())),
            reason("ConditionalCheckFailed", Some(marker.clone())),
        ];
        assert_eq!(check_index(&effect), 2);
        match other_forms(&effect, plan, &reasons, this_jobs).as_slice() {
            [OtherForm::Separate(Some(found))] => assert_eq!(*found, &marker),
            other => panic!("{other:?}"),
        }
        // The check not reported failed: the separate marker is read, but
        // only when the Put's item is not this job's own (a plain duplicate).
        let reasons = [
            reason("None", None),
            reason("ConditionalCheckFailed", Some(Item::new())),
            reason("None", None),
        ];
        assert!(matches!(
            other_forms(&effect, plan, &reasons, this_jobs).as_slice(),
            [OtherForm::MaybeSeparate]
        ));
        let reasons = [
            reason("None", None),
            reason("ConditionalCheckFailed", Some(item("j"))),
            reason("None", None),
        ];
        assert!(other_forms(&effect, plan, &reasons, this_jobs).is_empty());
    }

    #[test]
    fn a_separate_commit_looks_at_failed_writes_unless_its_marker_exists() {
        let effect = Effect::new()
            .with(counter())
            .with(entry())
            .switching_marker_form();
        let plan = Plan::of(&effect);
        let reasons = [
            reason("None", None),
            reason("None", None),
            reason("ConditionalCheckFailed", Some(item("j"))),
        ];
        assert!(matches!(
            other_forms(&effect, plan, &reasons, this_jobs).as_slice(),
            [OtherForm::Fused {
                index: 1,
                item: Some(_)
            }]
        ));
        let reasons = [
            reason("ConditionalCheckFailed", None),
            reason("None", None),
            reason("ConditionalCheckFailed", Some(item("j"))),
        ];
        assert!(other_forms(&effect, plan, &reasons, this_jobs).is_empty());
    }
}
