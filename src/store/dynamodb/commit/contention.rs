//! A lost optimistic-concurrency race, told apart from a business
//! rejection.
//!
//! A write marked [`Write::optimistic`](crate::store::dynamodb::Write::optimistic)
//! guards state the handler read (`version = :read`); its failed condition
//! means the state moved, so the job is run again rather than
//! dead-lettered. DynamoDB returns one cancellation reason per transaction
//! item, in request order, `None` where that item was fine ("If no error
//! occurred for the associated item an error with a Null code and Null
//! message will be present",
//! <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>),
//! so a rejection is read across all of them: if a write *not* so marked
//! failed its condition too, the business rule said no on the state as it
//! is now, and the job is [`Rejected`](CommitOutcome::Rejected) (DLQ) as
//! before; only when every failed condition is an optimistic write's is it
//! [`Contended`](CommitOutcome::Contended). Nothing is applied either way
//! (a cancelled transaction is all-or-nothing), so no marker was written.

use aws_sdk_dynamodb::types::CancellationReason;

use super::{CommitOutcome, Plan};
use crate::store::dynamodb::effect::Effect;

/// `outcome`, or [`CommitOutcome::Contended`] when it is a rejection and
/// every failed condition among `reasons` is on an optimistic effect write.
pub(super) fn lost_race(
    effect: &Effect,
    plan: Plan,
    reasons: &[CancellationReason],
    outcome: CommitOutcome,
) -> CommitOutcome {
    let CommitOutcome::Rejected { index, reason } = outcome else {
        return outcome;
    };
    let optimistic = |i: usize| {
        Some(i) != plan.marker
            && i >= plan.offset
            && effect
                .writes()
                .get(i - plan.offset)
                .is_some_and(|w| w.is_optimistic())
    };
    let all_optimistic = reasons
        .iter()
        .enumerate()
        .filter(|(_, r)| r.code() == Some("ConditionalCheckFailed"))
        .all(|(i, _)| optimistic(i));
    if all_optimistic && optimistic(index + plan.offset) {
        CommitOutcome::Contended { index, reason }
    } else {
        CommitOutcome::Rejected { index, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dynamodb::effect::{Key, Write};
    use aws_sdk_dynamodb::types::AttributeValue;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason::builder().code(code).build()
    }

    fn guarded(pk: &str) -> Write {
        Write::update("t", Key::string("pk", pk), "SET v = :next")
            .condition("v = :read")
            .value(":next", AttributeValue::N("2".into()))
            .value(":read", AttributeValue::N("1".into()))
    }

    fn rejected(index: usize) -> CommitOutcome {
        CommitOutcome::Rejected {
            index,
            reason: "The conditional request failed".into(),
        }
    }

    #[test]
    fn an_optimistic_writes_failed_condition_is_a_lost_race() {
        let effect = Effect::new()
            .with(guarded("a"))
            .with(guarded("b").optimistic());
        let reasons = [
            reason("None"),
            reason("None"),
            reason("ConditionalCheckFailed"),
        ];
        assert_eq!(
            lost_race(&effect, Plan::SEPARATE, &reasons, rejected(1)),
            CommitOutcome::Contended {
                index: 1,
                reason: "The conditional request failed".into()
            }
        );
        // Without the mark, the same failure is the business outcome.
        let plain = Effect::new().with(guarded("a")).with(guarded("b"));
        assert_eq!(
            lost_race(&plain, Plan::SEPARATE, &reasons, rejected(1)),
            rejected(1)
        );
    }

    #[test]
    fn a_business_condition_failing_too_wins_over_the_race() {
        let effect = Effect::new()
            .with(guarded("a").optimistic())
            .with(guarded("b"));
        let reasons = [
            reason("None"),
            reason("ConditionalCheckFailed"),
            reason("ConditionalCheckFailed"),
        ];
        assert_eq!(
            lost_race(&effect, Plan::SEPARATE, &reasons, rejected(0)),
            rejected(0)
        );
    }

    #[test]
    fn other_outcomes_and_fused_markers_pass_through() {
        let effect = Effect::new()
            .with(guarded("a").optimistic())
            .marked_by(Write::put("t", Key::string("pk", "e"), Default::default()));
        let transient = CommitOutcome::Transient { reason: "x".into() };
        assert_eq!(
            lost_race(&effect, Plan::fused(1), &[], transient.clone()),
            transient
        );
        // Fused: no offset; write 0 is at reason 0.
        let reasons = [reason("ConditionalCheckFailed"), reason("None")];
        assert!(matches!(
            lost_race(&effect, Plan::fused(1), &reasons, rejected(0)),
            CommitOutcome::Contended { index: 0, .. }
        ));
    }
}
