//! The shapes of a job's effect, one per job, drawn from a hash of the seed
//! and the job (not from the run's generator, so the jobs, their kinds and
//! their send times are those the seed drew before shapes came):
//!
//! - [`Shape::Separate`]: `ADD 1` to the job's counter (`count#<k>`) and
//!   idemq's own marker item, in one transaction;
//! - [`Shape::FusedTx`]: the counter, and a Put of the job's own item
//!   (`entry#<k>`) that is its marker (`Effect::marked_by`): a transaction
//!   of two items, no marker item;
//! - [`Shape::FusedSingle`]: the counter itself, put with `n = 1`, is the
//!   marker and the whole effect: one conditional `PutItem`
//!   (src/store/dynamodb/commit/single.rs);
//! - [`Shape::FollowUp`]: the counter, a separate marker, and a follow-up
//!   job (`Effect::then_send`, src/followup/) onto the source queue: the
//!   child `<k>f` (`"kind": "child"`, `"parent": "<k>"`), whose own effect
//!   is separate;
//! - [`Shape::Optimistic`]: a read-modify-write of one of
//!   [`SHARED_COUNTERS`] shared counters (`shared#<c>`: `n` and `version`),
//!   read, then written back guarded by the version read and marked
//!   `Write::optimistic`, with the counter: a lost race is
//!   `CommitOutcome::Contended` and idemq runs the handler again. One in
//!   four reads eventually consistently (a handler that breaks the
//!   documented assumption: it loses more races, and must still count
//!   exactly).

use aws_sdk_dynamodb::types::AttributeValue;
use idemq::followup::FollowUp;
use idemq::store::dynamodb::Effect;
use idemq::store::dynamodb::{Key, Write};
use idemq::{JobError, JobMeta};
use serde_json::json;

use super::faults::hash;
use super::run::TABLE;

/// Shared counters the optimistic jobs of a run race on.
pub const SHARED_COUNTERS: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Separate,
    FusedTx,
    FusedSingle,
    FollowUp,
    Optimistic { counter: u64, consistent: bool },
}

impl Shape {
    /// Job `k`'s shape in the run of `seed`; a follow-up job (`kind`
    /// `child`) is always [`Shape::Separate`]; with `only` every other job
    /// has that shape.
    pub fn of(seed: u64, k: &str, kind: &str, only: Option<Only>) -> Self {
        if kind == "child" {
            return Shape::Separate;
        }
        let h = hash(&[&seed.to_le_bytes(), b"shape", k.as_bytes()]);
        let share = match only {
            None => h % 100,
            Some(Only::FollowUp) => 70,
            Some(Only::Optimistic) => 99,
        };
        match share {
            0..40 => Shape::Separate,
            40..55 => Shape::FusedTx,
            55..70 => Shape::FusedSingle,
            70..85 => Shape::FollowUp,
            _ => Shape::Optimistic {
                counter: (h / 100) % SHARED_COUNTERS,
                consistent: !(h / 1000).is_multiple_of(4),
            },
        }
    }
}

/// A scenario's single shape for every job but follow-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// [`Shape::FollowUp`]: every job sends a child.
    FollowUp,
    /// [`Shape::Optimistic`]: every job races on a shared counter.
    Optimistic,
}

/// The key of a job's follow-up.
pub fn child_of(k: &str) -> String {
    format!("{k}f")
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn counter(k: &str) -> Write {
    Write::update(
        TABLE,
        Key::string("pk", format!("count#{k}")),
        "ADD #n :one",
    )
    .name("#n", "n")
    .value(":one", n(1))
}

/// The effect of a successful attempt of job `k` (its body's `n` is
/// `body_n`) in `shape`.
pub async fn effect(
    shape: Shape,
    k: &str,
    body_n: u64,
    meta: &JobMeta,
    ddb: &aws_sdk_dynamodb::Client,
) -> Result<Effect, JobError> {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    Ok(match shape {
        Shape::Separate => Effect::new().with(counter(k)),
        Shape::FusedTx => Effect::new().with(counter(k)).marked_by(Write::put(
            TABLE,
            Key::string("pk", format!("entry#{k}")),
            [("k".to_owned(), s(k))].into(),
        )),
        Shape::FusedSingle => Effect::new().marked_by(Write::put(
            TABLE,
            Key::string("pk", format!("count#{k}")),
            [("n".to_owned(), n(1)), ("k".to_owned(), s(k))].into(),
        )),
        Shape::FollowUp => {
            let child = child_of(k);
            let body = json!({"k": child, "kind": "child", "n": body_n, "parent": k}).to_string();
            let mut next = FollowUp::raw(&meta.queue_url, format!("{k}/then"), body);
            if meta.queue_url.ends_with(".fifo") {
                next = next.in_group(k);
            }
            Effect::new().with(counter(k)).then_send(next)
        }
        Shape::Optimistic {
            counter: c,
            consistent,
        } => {
            let key = Key::string("pk", format!("shared#{c}"));
            let read = ddb
                .get_item()
                .table_name(TABLE)
                .set_key(Some(key.as_item().clone()))
                .consistent_read(consistent)
                .send()
                .await
                .map_err(|e| {
                    JobError::transient(format!(
                        "sim: reading shared#{c} failed: {}",
                        aws_sdk_dynamodb::error::DisplayErrorContext(e)
                    ))
                })?;
            let num = |name: &str| {
                read.item()
                    .and_then(|i| i.get(name))
                    .and_then(|v| v.as_n().ok())
                    .and_then(|v| v.parse::<u64>().ok())
            };
            let write = Write::update(TABLE, key, "SET #n = :n, #v = :next")
                .name("#n", "n")
                .name("#v", "version")
                .value(":n", n(num("n").unwrap_or(0) + 1));
            let write = match num("version") {
                Some(v) => write
                    .condition("#v = :read")
                    .value(":next", n(v + 1))
                    .value(":read", n(v)),
                None => write
                    .condition("attribute_not_exists(pk)")
                    .value(":next", n(1)),
            };
            Effect::new().with(counter(k)).with(write.optimistic())
        }
    })
}
