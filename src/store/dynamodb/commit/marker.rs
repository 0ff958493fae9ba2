//! The marker item: its key, its two written forms (idemq's own Put with a
//! TTL, or the effect's Put made the marker) and what a stored one says.
//! Its own file: what a marker is, apart from the transaction that writes
//! it and the reading of why one failed.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use super::Committer;
use crate::commit::{JobRef, Marker};
use crate::followup::StoredMarker;
use crate::job::PayloadHash;
use crate::store::dynamodb::effect::{Effect, EffectError, Item, Write};

impl Committer {
    /// A duplicate's marker item, with its commit time and this consumer's
    /// follow-up horizon.
    pub(super) fn stored_marker(&self, job: JobRef<'_>, item: Item) -> StoredMarker {
        StoredMarker {
            job_id: job.id.to_string(),
            committed_at: self.parse_marker(&item).and_then(|m| m.committed_at),
            horizon: crate::horizon::ReplayHorizon::new(self.marker_ttl),
            follow_ups: crate::store::dynamodb::outbox::from_marker(&item),
        }
    }

    pub(super) fn marker_key(&self, job: JobRef<'_>) -> Item {
        let namespace = self.layout.namespace_for(job.queue);
        self.key(self.layout.marker_key(namespace, job.id.as_str()))
    }

    pub(super) fn key(&self, key: String) -> Item {
        HashMap::from([(self.layout.partition_key.clone(), AttributeValue::S(key))])
    }

    pub(super) fn parse_marker(&self, item: &Item) -> Option<Marker> {
        let s = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let expires = item
            .get(&self.layout.expires_at)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .map_or(UNIX_EPOCH, |secs| UNIX_EPOCH + Duration::from_secs(secs));
        Some(Marker {
            job_id: s(&self.layout.job_id)?,
            payload_hash: PayloadHash::from_hex(s(&self.layout.payload_hash)?),
            committed_at: s(&self.layout.committed_at)
                .and_then(|t| humantime::parse_rfc3339_weak(&t).ok()),
            queue: s(&self.layout.queue).unwrap_or_default(),
            expires_at: expires,
        })
    }

    pub(super) fn marker_put(
        &self,
        job: JobRef<'_>,
        now: SystemTime,
        effect: &Effect,
    ) -> Result<TransactWriteItem, EffectError> {
        let l = &self.layout;
        let expires_at = (now + self.marker_ttl)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut item: Item = HashMap::from([
            (
                l.partition_key.clone(),
                AttributeValue::S(l.marker_key(l.namespace_for(job.queue), job.id.as_str())),
            ),
            (l.job_id.clone(), AttributeValue::S(job.id.to_string())),
            (
                l.payload_hash.clone(),
                AttributeValue::S(job.payload_hash.to_string()),
            ),
            (l.committed_at.clone(), committed_at(now)),
            (l.queue.clone(), AttributeValue::S(job.queue.to_owned())),
            (
                l.expires_at.clone(),
                AttributeValue::N(expires_at.to_string()),
            ),
        ]);
        item.extend(crate::store::dynamodb::outbox::stored(effect.follow_ups()));
        let put = Put::builder()
            .table_name(&l.table_name)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", &l.partition_key)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| EffectError::Build(e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// `write` as the job's fused marker: its item plus the job id,
    /// payload hash and commit time (`now`), put only if no item has its
    /// key, and returning the item that has it when one does. Validation
    /// has checked that `write` is a Put without a condition of its own
    /// and that its attributes leave those names free.
    ///
    /// The commit time is what a redelivery weighs its stored follow-ups'
    /// re-send against ([`crate::followup`]): the item never expires, so
    /// without it a duplicate found years later would look as fresh as
    /// one found a second after the commit.
    pub(super) fn fused_put(
        &self,
        job: JobRef<'_>,
        write: &Write,
        effect: &Effect,
        now: SystemTime,
    ) -> Result<FusedPut, EffectError> {
        let crate::store::dynamodb::effect::WriteKind::Put { attributes } = write.kind() else {
            return Err(EffectError::Build("a fused marker must be a Put".into()));
        };
        let mut item = write.key().as_item().clone();
        item.extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        item.insert(
            self.layout.job_id.clone(),
            AttributeValue::S(job.id.to_string()),
        );
        item.insert(
            self.layout.payload_hash.clone(),
            AttributeValue::S(job.payload_hash.to_string()),
        );
        item.insert(self.layout.committed_at.clone(), committed_at(now));
        item.extend(crate::store::dynamodb::outbox::stored(effect.follow_ups()));
        // Any key attribute exists exactly when the item does; the
        // smallest name, so the request is the same on every call.
        let key_attribute = write
            .key()
            .as_item()
            .keys()
            .min()
            .cloned()
            .ok_or_else(|| EffectError::Build("a fused marker needs a key".into()))?;
        Ok(FusedPut {
            table: write.table().to_owned(),
            item,
            key_attribute,
        })
    }
}

/// A marker's commit time as stored, separate or fused: RFC 3339 with
/// milliseconds, UTC (`2026-03-01T12:00:00.123Z`).
fn committed_at(now: SystemTime) -> AttributeValue {
    AttributeValue::S(humantime::format_rfc3339_millis(now).to_string())
}

/// A fused marker's request, for a transaction's `Put` or a `PutItem`.
pub(super) struct FusedPut {
    pub(super) table: String,
    pub(super) item: Item,
    pub(super) key_attribute: String,
}

impl FusedPut {
    pub(super) const CONDITION: &'static str = "attribute_not_exists(#idemq_key)";
    pub(super) const NAME: &'static str = "#idemq_key";

    pub(super) fn into_put(self) -> Result<Put, EffectError> {
        Put::builder()
            .table_name(self.table)
            .set_item(Some(self.item))
            .condition_expression(Self::CONDITION)
            .expression_attribute_names(Self::NAME, self.key_attribute)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(|e| EffectError::Build(e.to_string()))
    }
}
