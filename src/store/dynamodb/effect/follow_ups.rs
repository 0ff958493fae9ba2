//! Follow-up jobs on an effect: sent if and only if it commits (see
//! [`crate::followup`]), stored in the job's marker. Their builders and
//! their part of the validation are one file: what a follow-up adds to the
//! marker item is checked where it is added.

use super::validate::FUSED_MARKER_VALUES;
use super::{
    Effect, EffectError, MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES, MarkerSlot, WriteKind, item_size,
};
use crate::followup::{FOLLOW_UPS_ATTRIBUTE, FollowUp, FollowUpError};

impl Effect {
    /// Adds a follow-up job: sent, with its own `idemq-job-id`, if and only
    /// if this effect commits, at least once (see [`crate::followup`]).
    /// idemq stores it in the job's marker (separate or
    /// [fused](Effect::marked_by)) in the same write, sends it after the
    /// commit and before the job is acknowledged, and re-sends it from the
    /// marker when a redelivery finds the job done. An effect
    /// [`without_marker`](Effect::without_marker) cannot carry follow-ups.
    ///
    /// ```
    /// use idemq::followup::FollowUp;
    /// use idemq::store::dynamodb::Effect;
    /// let next = FollowUp::raw("https://sqs.us-east-1.amazonaws.com/1/next", "t-1/then", "{}");
    /// let effect = Effect::new().then_send(next);
    /// assert_eq!(effect.follow_ups().len(), 1);
    /// ```
    pub fn then_send(mut self, follow_up: FollowUp) -> Self {
        self.follow_ups.push(follow_up);
        self
    }

    /// Adds a follow-up job to an effect held by reference
    /// ([`Effect::then_send`]).
    pub fn push_follow_up(&mut self, follow_up: FollowUp) {
        self.follow_ups.push(follow_up);
    }

    /// The follow-up jobs, in the order they were added.
    pub fn follow_ups(&self) -> &[FollowUp] {
        &self.follow_ups
    }

    /// The follow-ups' part of [`Effect::validate`]: each one as SQS would
    /// take it, and the marker that stores them within DynamoDB's item
    /// limit (`total`: the effect's bytes so far, for the 4 MB limit).
    pub(super) fn validate_follow_ups(
        &self,
        marker: &MarkerSlot<'_>,
        total: usize,
    ) -> Result<(), EffectError> {
        crate::followup::check_all(&self.follow_ups, self.uses_marker())?;
        if self.follow_ups.is_empty() {
            return Ok(());
        }
        let bytes = item_size(&crate::store::dynamodb::outbox::stored(&self.follow_ups));
        let item = match self.fused_marker().map(|w| (w, &w.kind)) {
            Some((w, WriteKind::Put { attributes })) => {
                if attributes.contains_key(FOLLOW_UPS_ATTRIBUTE) {
                    return Err(EffectError::MarkerAttribute {
                        index: self.fused_index().unwrap_or_default(),
                        attribute: FOLLOW_UPS_ATTRIBUTE.to_owned(),
                    });
                }
                w.stored_size() + marker.names_len() + FUSED_MARKER_VALUES
            }
            _ => crate::store::dynamodb::outbox::SEPARATE_MARKER_BYTES,
        };
        if item + bytes > MAX_ITEM_BYTES {
            return Err(FollowUpError::MarkerTooLarge {
                bytes: item + bytes,
                limit: MAX_ITEM_BYTES,
            }
            .into());
        }
        if total + bytes > MAX_TRANSACTION_BYTES {
            return Err(EffectError::TooLarge {
                bytes: total + bytes,
            });
        }
        Ok(())
    }
}
