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

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::get_item::GetItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};

use super::effect::{Effect, EffectError, Item, MarkerSlot, Write};
use crate::commit::{CommitError, CommitOutcome, JobRef, Marker};
use crate::config::{LegacyMarkers, TableLayout};
use crate::followup::StoredMarker;
use crate::job::{JobId, PayloadHash};
use crate::store::Settled;

mod contention;
mod deployment;
mod look_up;
mod replaced;
mod single;
mod switch;

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
    /// `src/commit/look_up.rs`; the host sets it from
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

    /// A duplicate's marker item, with its commit time and this consumer's
    /// follow-up horizon.
    fn stored_marker(&self, job: JobRef<'_>, item: Item) -> StoredMarker {
        StoredMarker {
            job_id: job.id.to_string(),
            committed_at: self.parse_marker(&item).and_then(|m| m.committed_at),
            horizon: crate::horizon::ReplayHorizon::new(self.marker_ttl),
            follow_ups: super::outbox::from_marker(&item),
        }
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

    fn marker_key(&self, job: JobRef<'_>) -> Item {
        let namespace = self.layout.namespace_for(job.queue);
        self.key(self.layout.marker_key(namespace, job.id.as_str()))
    }

    fn key(&self, key: String) -> Item {
        HashMap::from([(self.layout.partition_key.clone(), AttributeValue::S(key))])
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

    fn parse_marker(&self, item: &Item) -> Option<Marker> {
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

    fn marker_put(
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
        item.extend(super::outbox::stored(effect.follow_ups()));
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
    fn fused_put(
        &self,
        job: JobRef<'_>,
        write: &Write,
        effect: &Effect,
        now: SystemTime,
    ) -> Result<FusedPut, EffectError> {
        let super::effect::WriteKind::Put { attributes } = write.kind() else {
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
        item.extend(super::outbox::stored(effect.follow_ups()));
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
struct FusedPut {
    table: String,
    item: Item,
    key_attribute: String,
}

impl FusedPut {
    const CONDITION: &'static str = "attribute_not_exists(#idemq_key)";
    const NAME: &'static str = "#idemq_key";

    fn into_put(self) -> Result<Put, EffectError> {
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

const THROTTLING_CODES: [&str; 3] = [
    "ProvisionedThroughputExceeded",
    "ThrottlingError",
    "RequestLimitExceeded",
];

/// Another transaction or write held one of the items at the same moment
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-conflict-handling>,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CancellationReason.html>).
const CONFLICT_CODE: &str = "TransactionConflict";

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
trait WriteError: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static {
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
fn classify_sdk_error<E: WriteError>(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str) -> CancellationReason {
        CancellationReason::builder()
            .code(code)
            .message(format!("{code} happened"))
            .build()
    }

    #[test]
    fn marker_condition_failure_means_the_job_exists_whatever_else_failed() {
        let item = Item::from([("pk".to_string(), AttributeValue::S("x".into()))]);
        let marker = CancellationReason::builder()
            .code("ConditionalCheckFailed")
            .set_item(Some(item.clone()))
            .build();
        let reasons = [marker, reason("TransactionConflict")];
        assert_eq!(
            classify_cancellation(&reasons, Plan::SEPARATE),
            Cancellation::MarkerExists(Some(&item))
        );
        let without_item = [reason("ConditionalCheckFailed"), reason("None")];
        assert_eq!(
            classify_cancellation(&without_item, Plan::SEPARATE),
            Cancellation::MarkerExists(None)
        );
    }

    #[test]
    fn effect_condition_failure_is_a_rejection_with_the_effect_index() {
        let reasons = [
            reason("None"),
            reason("None"),
            reason("ConditionalCheckFailed"),
        ];
        assert_eq!(
            classify_cancellation(&reasons, Plan::SEPARATE),
            Cancellation::Outcome(CommitOutcome::Rejected {
                index: 1,
                reason: "ConditionalCheckFailed happened".into()
            })
        );
        // Without a marker, reason i is effect write i; index 0 is not the marker.
        let reasons = [reason("ConditionalCheckFailed"), reason("None")];
        assert!(matches!(
            classify_cancellation(&reasons, Plan::NONE),
            Cancellation::Outcome(CommitOutcome::Rejected { index: 0, .. })
        ));
    }

    /// A fused marker's reason is at its own index, and every index is the
    /// effect write's own (no separate marker to skip).
    #[test]
    fn a_fused_marker_is_read_at_its_index_and_effect_indexes_are_unshifted() {
        let item = Item::from([("pk".to_string(), AttributeValue::S("entry#1".into()))]);
        let marker = CancellationReason::builder()
            .code("ConditionalCheckFailed")
            .set_item(Some(item.clone()))
            .build();
        let reasons = [reason("None"), marker, reason("None")];
        assert_eq!(
            classify_cancellation(&reasons, Plan::fused(1)),
            Cancellation::MarkerExists(Some(&item))
        );
        let reasons = [
            reason("None"),
            reason("None"),
            reason("ConditionalCheckFailed"),
        ];
        assert!(matches!(
            classify_cancellation(&reasons, Plan::fused(1)),
            Cancellation::Outcome(CommitOutcome::Rejected { index: 2, .. })
        ));
        match classify_cancellation(&[reason("ValidationError")], Plan::fused(0)) {
            Cancellation::Invalid(why) => assert!(why.starts_with("effect write 0"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn throttling_is_transient_and_wins_over_a_conflict_and_a_rejection() {
        for code in THROTTLING_CODES {
            let reasons = [
                reason("None"),
                reason("ConditionalCheckFailed"),
                reason(CONFLICT_CODE),
                reason(code),
            ];
            match classify_cancellation(&reasons, Plan::SEPARATE) {
                Cancellation::Outcome(CommitOutcome::Transient { reason }) => {
                    assert!(reason.contains(code), "{reason}")
                }
                other => panic!("{code}: {other:?}"),
            }
        }
    }

    /// A concurrent transaction on one of the items applied nothing of
    /// this one: a lost race (re-run), winning over an effect condition,
    /// which the re-run may find true.
    #[test]
    fn a_transaction_conflict_is_a_collision_naming_the_item() {
        let reasons = [
            reason("None"),
            reason("ConditionalCheckFailed"),
            reason(CONFLICT_CODE),
        ];
        match classify_cancellation(&reasons, Plan::SEPARATE) {
            Cancellation::Outcome(CommitOutcome::Collided { reason }) => {
                assert!(
                    reason.contains("TransactionConflict on effect write 1"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        match classify_cancellation(&[reason(CONFLICT_CODE), reason("None")], Plan::SEPARATE) {
            Cancellation::Outcome(CommitOutcome::Collided { reason }) => {
                assert!(reason.contains("on the marker"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn validation_errors_are_permanent_and_name_the_write() {
        let reasons = [
            reason("None"),
            reason("TransactionConflict"),
            reason("ValidationError"),
        ];
        match classify_cancellation(&reasons, Plan::SEPARATE) {
            Cancellation::Invalid(why) => {
                assert!(why.starts_with("effect write 1: ValidationError"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match classify_cancellation(&[reason("ValidationError")], Plan::SEPARATE) {
            Cancellation::Invalid(why) => assert!(why.starts_with("the marker"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn key_schema_messages_are_recognised_with_their_attribute() {
        assert_eq!(
            key_schema_attribute("The provided key element does not match the schema"),
            Some(None)
        );
        assert_eq!(
            key_schema_attribute(
                "One or more parameter values were invalid: Missing the key id in the item"
            ),
            Some(Some("id"))
        );
        assert_eq!(
            key_schema_attribute(
                "One or more parameter values were invalid: Type mismatch for key pk expected: S actual: N"
            ),
            Some(Some("pk"))
        );
        assert_eq!(key_schema_attribute("Invalid UpdateExpression: x"), None);
        // In a cancellation, a key-schema ValidationError is its own case.
        let reasons = [
            reason("None"),
            CancellationReason::builder()
                .code("ValidationError")
                .message("The provided key element does not match the schema")
                .build(),
        ];
        assert!(matches!(
            classify_cancellation(&reasons, Plan::SEPARATE),
            Cancellation::KeySchema { index: 1, .. }
        ));
    }

    #[test]
    fn unknown_or_missing_reasons_are_transient() {
        for reasons in [vec![], vec![reason("None")], vec![reason("SomethingNew")]] {
            assert!(matches!(
                classify_cancellation(&reasons, Plan::SEPARATE),
                Cancellation::Outcome(CommitOutcome::Transient { .. })
            ));
        }
    }

    /// Both marker forms store their commit time in the layout's
    /// `committed_at`, and read back as the time it was, to the
    /// millisecond; a fused marker an earlier version wrote has none.
    #[test]
    fn markers_of_both_forms_carry_their_commit_time() {
        let client = Client::from_conf(
            aws_sdk_dynamodb::Config::builder()
                .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
                .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
                .build(),
        );
        let committer = Committer::new(
            client,
            TableLayout::new("t"),
            crate::config::DEFAULT_MARKER_TTL,
        );
        let id = JobId::new("order-7").unwrap();
        let hash = PayloadHash::of(b"{}");
        let job = JobRef {
            id: &id,
            payload_hash: &hash,
            queue: "orders",
        };
        let now = UNIX_EPOCH + Duration::from_millis(1_800_000_000_123);
        let entry = Write::put(
            "t",
            crate::store::dynamodb::effect::Key::string("pk", "entry#order-7"),
            Item::from([("amount".to_owned(), AttributeValue::N("5".into()))]),
        );
        let effect = Effect::new().marked_by(entry.clone());
        let fused = committer.fused_put(job, &entry, &effect, now).unwrap().item;
        assert_eq!(
            fused.get("committed_at"),
            Some(&AttributeValue::S("2027-01-15T08:00:00.123Z".into()))
        );
        let separate = committer.marker_put(job, now, &Effect::new()).unwrap();
        let separate = separate.put().unwrap().item().clone();
        for item in [&fused, &separate] {
            let m = committer.parse_marker(item).expect("a marker");
            assert_eq!(m.job_id, "order-7");
            assert_eq!(m.committed_at, Some(now), "{item:?}");
        }
        let mut earlier = fused.clone();
        earlier.remove("committed_at");
        assert_eq!(committer.parse_marker(&earlier).unwrap().committed_at, None);
    }
}
