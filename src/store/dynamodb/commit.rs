//! The dedup transaction: a job's marker and its effect in one
//! `TransactWriteItems`.
//!
//! The marker is a `Put` with `attribute_not_exists(pk)`. If it commits, the
//! effect committed with it; if a crash or an error stops the transaction,
//! neither did. There is no "in progress" state and no lock: two deliveries
//! of one job may both run the handler, exactly one transaction commits, and
//! the other finds the marker and is reported as a [`CommitOutcome::Duplicate`].
//!
//! Cancellation reasons are read by index: with a separate marker, index 0
//! is the marker and index `i + 1` is effect write `i`; with a fused marker
//! ([`Effect::marked_by`]) or none, index `i` is effect write `i`.
//!
//! An effect of one write that needs no transaction (its fused marker alone,
//! or one unconditional upsert without a marker) is committed with one
//! standard conditional write instead (the `single` module): half the write
//! units, the same outcomes.

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::TransactWriteItem;

use super::effect::{Effect, Item, MarkerSlot};
use crate::commit::{CommitError, CommitOutcome, JobRef, Marker};
use crate::config::{LegacyMarkers, TableLayout};
use crate::job::JobId;
use crate::store::Settled;
// Also what the sibling modules name as `super::…` (`single`, `look_up`).
use cancellation::{
    Cancellation, Plan, WriteError, classify_cancellation, classify_sdk_error, key_schema_attribute,
};
use marker::FusedPut;

mod cancellation;
mod contention;
mod deployment;
mod look_up;
mod marker;
mod replaced;
mod single;
mod switch;

#[cfg(test)]
mod tests;

/// Commits effects with their markers. Cheap to clone; build one per
/// process and share it.
#[derive(Debug, Clone)]
pub struct Committer {
    client: Client,
    layout: TableLayout,
    marker_ttl: Duration,
    legacy: LegacyMarkers,
    marker_first: bool,
}

impl Committer {
    /// A committer writing markers into `layout`'s table, kept for
    /// `marker_ttl`. It reads no legacy (un-namespaced) markers: a consumer
    /// upgraded over a table an earlier version wrote sets
    /// [`Committer::with_legacy_markers`] (the host does, from
    /// `IDEMQ_LEGACY_MARKERS`, reading them by default).
    pub fn new(client: Client, layout: TableLayout, marker_ttl: Duration) -> Self {
        Self {
            client,
            layout,
            marker_ttl,
            legacy: LegacyMarkers::Off,
            marker_first: false,
        }
    }

    /// Whether the batch reads a job's marker before running its handler,
    /// so that a duplicate's handler does not run again (see
    /// `src/store/dynamodb/commit/look_up.rs`; the host sets it from
    /// `IDEMQ_READ_MARKER_FIRST`).
    pub fn with_marker_first(mut self, marker_first: bool) -> Self {
        self.marker_first = marker_first;
        self
    }

    /// Whether the batch's look-up before the handler also reads the job's
    /// marker under the key an earlier version wrote ([`LegacyMarkers`]).
    pub fn with_legacy_markers(mut self, legacy: LegacyMarkers) -> Self {
        self.legacy = legacy;
        self
    }

    /// How long its markers live.
    pub fn marker_ttl(&self) -> Duration {
        self.marker_ttl
    }

    /// The idemq table's layout.
    pub fn layout(&self) -> &TableLayout {
        &self.layout
    }

    fn slot(&self) -> MarkerSlot<'_> {
        MarkerSlot {
            table: &self.layout.table_name,
            partition_key: &self.layout.partition_key,
            reserved_prefix: &self.layout.key_prefix,
            job_id: &self.layout.job_id,
            payload_hash: &self.layout.payload_hash,
            committed_at: &self.layout.committed_at,
        }
    }

    /// Commits `effect` for `job`: one `TransactWriteItems`, or one
    /// standard write when the effect is a single write that needs no
    /// transaction (one round trip either way; a second read only when the
    /// marker already exists and the emulator did not return it with the
    /// failed condition).
    pub async fn commit(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
    ) -> Result<CommitOutcome, CommitError> {
        self.commit_into(job, effect, &mut None).await
    }

    /// [`Committer::commit`], and for a [`CommitOutcome::Duplicate`] the
    /// marker as stored, with what deciding on its follow-ups needs (they
    /// are sent again within the follow-up horizon: [`crate::followup`]).
    pub(crate) async fn settle(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
    ) -> Result<Settled, CommitError> {
        let mut stored = None;
        let outcome = self.commit_into(job, effect, &mut stored).await?;
        Ok(Settled {
            outcome,
            stored: stored.map(|item| self.stored_marker(job, item)),
        })
    }

    /// The commit; a duplicate's stored marker goes into `stored`.
    async fn commit_into(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
        stored: &mut Option<Item>,
    ) -> Result<CommitOutcome, CommitError> {
        effect.validate(&self.slot())?;
        if let Some(write) = single::eligible(effect) {
            return self.commit_single(job, effect, write, stored).await;
        }
        let plan = Plan::of(effect);
        let mut items = Vec::with_capacity(effect.len() + 1);
        // One commit time for the marker, whichever form it takes.
        let now = crate::clock::now();
        if effect.uses_separate_marker() {
            items.push(self.marker_put(job, now, effect)?);
        }
        for (index, write) in effect.writes().iter().enumerate() {
            items.push(if effect.fused_index() == Some(index) {
                TransactWriteItem::builder()
                    .put(self.fused_put(job, write, effect, now)?.into_put()?)
                    .build()
            } else {
                self.switch_write(job, effect, write)?
            });
        }
        items.extend(self.switch_checks(job, effect)?);
        if items.is_empty() {
            return Ok(CommitOutcome::Committed);
        }
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            // Makes the SDK's own retries of this call idempotent on AWS.
            // Random per call, so a later delivery with a different effect
            // is never refused as IdempotentParameterMismatch.
            .client_request_token(format!("{:032x}", crate::clock::random_u128()))
            .send()
            .await;
        let err = match sent {
            Ok(_) => return Ok(CommitOutcome::Committed),
            Err(err) => err,
        };
        let reasons = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(e)) => {
                e.cancellation_reasons()
            }
            Some(e) if e.code() == Some("ValidationException") => {
                let message = e.message().unwrap_or("");
                if let Some(named) = key_schema_attribute(message) {
                    return Ok(self.key_schema_mismatch(effect, plan, None, named, message));
                }
                return classify_sdk_error(err, &self.needs(effect));
            }
            _ => return classify_sdk_error(err, &self.needs(effect)),
        };
        let other_forms = switch::other_forms(effect, plan, reasons, |item| {
            self.parse_marker(item)
                .is_some_and(|m| m.job_id == job.id.as_str())
        });
        if !other_forms.is_empty()
            && let Some(outcome) = self
                .settle_other_form(job, effect, other_forms, stored)
                .await
        {
            return Ok(outcome);
        }
        match classify_cancellation(reasons, plan) {
            Cancellation::Outcome(outcome) => {
                Ok(contention::lost_race(effect, plan, reasons, outcome))
            }
            Cancellation::Invalid(why) => Err(CommitError::Invalid(why)),
            Cancellation::KeySchema { index, message } => {
                let named = key_schema_attribute(&message).flatten();
                Ok(self.key_schema_mismatch(effect, plan, Some(index), named, &message))
            }
            Cancellation::MarkerExists(item) => {
                Ok(self.compare_marker(job, effect, item, stored).await)
            }
        }
    }

    /// The table's key is not the key idemq or the effect writes: a deploy
    /// problem (a table created with another key, `IDEMQ_ATTR_PK` not set
    /// alike for `idemq init` and the consumer) that a deploy fixes, not the
    /// job. Retried with backoff, and logged as an error naming the table
    /// and key attribute so the operator sees it before redrive gives up.
    /// `index` is the transaction item when DynamoDB said which; `named` the
    /// key attribute when its message named one.
    fn key_schema_mismatch(
        &self,
        effect: &Effect,
        plan: Plan,
        index: Option<usize>,
        named: Option<&str>,
        message: &str,
    ) -> CommitOutcome {
        let marker = || {
            (
                self.layout.table_name.clone(),
                vec![self.layout.partition_key.clone()],
            )
        };
        let write = |i: usize| {
            effect.writes().get(i).map(|w| {
                let mut keys: Vec<String> = w.key().as_item().keys().cloned().collect();
                keys.sort_unstable();
                (w.table().to_owned(), keys)
            })
        };
        let lacks_named = |keys: &[String]| named.is_none_or(|n| !keys.iter().any(|k| k == n));
        let has_marker = effect.uses_separate_marker();
        let (table, keys) = match index {
            Some(0) if has_marker => marker(),
            Some(i) => write(i - plan.offset).unwrap_or_else(marker),
            // DynamoDB refused the request as a whole without saying which
            // item: every table whose write lacks the attribute it named
            // (all of them when it named none), the marker's first.
            None => {
                let mut candidates: Vec<(String, Vec<String>)> = Vec::new();
                let all = has_marker
                    .then(marker)
                    .into_iter()
                    .chain((0..effect.len()).filter_map(write));
                for (table, keys) in all {
                    if lacks_named(&keys) && !candidates.iter().any(|(t, _)| *t == table) {
                        candidates.push((table, keys));
                    }
                }
                let keys = candidates.first().map(|(_, k)| k.clone());
                let tables: Vec<String> = candidates.into_iter().map(|(t, _)| t).collect();
                match keys {
                    Some(keys) => (tables.join(" or "), keys),
                    None => marker(),
                }
            }
        };
        let key = named.map_or_else(|| keys.join("\", \""), str::to_owned);
        tracing::error!(
            table,
            key_attribute = key,
            dynamodb = message,
            "the table's key schema does not match the keys written: a deploy problem, \
             the job is retried (check the table's key and IDEMQ_ATTR_PK)"
        );
        CommitOutcome::Transient {
            reason: format!(
                "key schema mismatch in table {table} (key attribute \"{key}\"): {message}; \
                 retried until the table or IDEMQ_ATTR_PK is fixed"
            ),
        }
    }

    /// Duplicate or conflict, by the stored payload hash. A retried
    /// transaction that had in fact committed (an emulator that ignores
    /// `ClientRequestToken`) lands here too, with our own hash: a duplicate.
    /// `returned` is the marker as DynamoDB returned it with the failed
    /// condition (`ALL_OLD`); without it the marker is read.
    async fn compare_marker(
        &self,
        job: JobRef<'_>,
        effect: &Effect,
        returned: Option<&Item>,
        duplicate_of: &mut Option<Item>,
    ) -> CommitOutcome {
        let fused = effect.fused_index().zip(effect.fused_marker());
        let read = match returned {
            Some(item) => Ok(Some(item.clone())),
            None => match fused {
                Some((_, w)) => self.read_item(w.table(), w.key().as_item()).await,
                None => {
                    self.read_item(&self.layout.table_name, &self.marker_key(job))
                        .await
                }
            },
        };
        let stored = match read {
            Ok(item) => item,
            Err(e) => {
                return CommitOutcome::Transient {
                    reason: format!("marker exists but could not be read: {e}"),
                };
            }
        };
        let Some(stored) = stored else {
            // Expired (or deleted) between the write and the read: the next
            // try commits.
            return CommitOutcome::Transient {
                reason: "marker condition failed but no marker is stored".into(),
            };
        };
        match (self.parse_marker(&stored), fused) {
            // A fused marker's key is the user's: the item there may be
            // another job's, or no job's at all. That is the business
            // outcome of the write, not a duplicate.
            (m, Some((index, write))) if m.as_ref().is_none_or(|m| m.job_id != job.id.as_str()) => {
                CommitOutcome::Rejected {
                    index,
                    reason: match m {
                        Some(_) => {
                            "the item this job's marker creates exists and is another job's marker"
                                .into()
                        }
                        None => replaced::reason(write, &stored, effect),
                    },
                }
            }
            (Some(m), _) if &m.payload_hash == job.payload_hash => {
                *duplicate_of = Some(stored);
                CommitOutcome::Duplicate
            }
            (Some(m), _) => CommitOutcome::Conflict {
                stored_hash: m.payload_hash,
            },
            (None, _) => CommitOutcome::Transient {
                reason: "marker condition failed but the stored item is no marker".into(),
            },
        }
    }

    /// One item, by a consistent read.
    async fn read_item(&self, table: &str, key: &Item) -> Result<Option<Item>, CommitError> {
        self.consistent_get_item(table, key.clone())
            .await
            .map_err(|e| CommitError::Service(DisplayErrorContext(e).to_string()))
    }

    /// The `GetItem` request behind every read of a marker or an effect's
    /// item: consistent, so it sees every commit that has answered.
    async fn consistent_get_item(
        &self,
        table: &str,
        key: Item,
    ) -> Result<Option<Item>, SdkError<GetItemError>> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await?;
        Ok(out.item().cloned())
    }

    /// Reads a job's separate marker, as committed from `queue` (its
    /// namespace: [`TableLayout::namespace_for`]), with a consistent read.
    /// A fused marker is the effect's own item: read it where the effect
    /// wrote it.
    pub async fn read_marker(
        &self,
        queue: &str,
        job_id: &JobId,
    ) -> Result<Option<Marker>, CommitError> {
        let namespace = self.layout.namespace_for(queue);
        let key = self.key(self.layout.marker_key(namespace, job_id.as_str()));
        let item = self.read_item(&self.layout.table_name, &key).await?;
        Ok(item.and_then(|item| self.parse_marker(&item)))
    }
}
