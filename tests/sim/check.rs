//! The history of a run and the checker over it. Job identity here is the
//! ground truth the simulation wrote into each body (`"k"`), never the id
//! idemq resolved, so the checker cannot share idemq's mistakes.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::Value;

use super::dynamodb::Item;
use super::shapes::Shape;

#[derive(Debug, Clone)]
pub enum Event {
    Sent {
        queue: String,
        message_id: String,
        body: String,
    },
    Deleted {
        queue: String,
        message_id: String,
        body: String,
        by: String,
    },
    Expired {
        queue: String,
        body: String,
    },
    /// SQS's redrive moved it from `from` to the DLQ.
    Redriven {
        from: String,
        message_id: String,
        body: String,
    },
    /// An item was written (DynamoDB).
    Written {
        key: String,
        item: Value,
    },
    /// Something the environment itself saw go wrong (Lambda).
    Violation(String),
}

#[derive(Debug, Default)]
pub struct History {
    pub events: Vec<Event>,
}

impl History {
    pub fn push(&mut self, e: Event) {
        self.events.push(e);
    }
}

/// A string field of a job's JSON body.
fn body_field(body: &str, name: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get(name)?
        .as_str()
        .map(str::to_owned)
}

/// The job key (`"k"`) of a body.
pub fn job_of(body: &str) -> Option<String> {
    body_field(body, "k")
}

/// A FIFO job's message group (its body's `"g"`).
pub fn group_of(body: &str) -> Option<String> {
    body_field(body, "g")
}

/// What a job is meant to do (from its body's `"kind"`).
pub fn kind_of(body: &str) -> String {
    body_field(body, "kind").unwrap_or_default()
}

#[derive(Debug, Default, Clone)]
pub struct Verdicts {
    pub jobs: usize,
    pub applied: usize,
    pub dead_lettered: usize,
    pub pending: usize,
    pub expired: usize,
    pub violations: Vec<String>,
    /// Each job's kind (its body's `"kind"`).
    pub kinds: BTreeMap<String, String>,
}

/// A lost race does not spend a receive: a transaction cancelled by
/// `TransactionConflict` (or a write refused with
/// `TransactionConflictException`) applied nothing and is run again in the
/// invocation, and only one that outlasts the re-runs backs off, recorded
/// as `contended`. A failure record that files one as a plain transient
/// failure is a receive spent on a race alone.
fn receive_spent_on_a_conflict(key: &str, item: &Value) -> Option<String> {
    let failure = key.contains("failure#") || key.contains("failure-message#");
    let kind = item["kind"]["S"].as_str()?;
    let error = item["error"]["S"].as_str()?;
    (failure && kind == "transient" && error.contains("TransactionConflict")).then(|| {
        format!(
            "{key}: a receive spent on a TransactionConflict alone (recorded as {kind}: {error})"
        )
    })
}

/// Replays the history in order and checks, at each step and at the end:
/// - no copy of a job is deleted (acknowledged by Lambda, or moved out of
///   the DLQ by a redrive) unless the job is applied or another copy of it
///   lives on, on the queue or in the DLQ;
/// - no job's effect is applied twice;
/// - no job that must fail (`poison`, `garbage`, and the edges' `evil`,
///   `ugly`, `huge`) is applied;
/// - no marker is written but whole by its own commit (edge 4: an effect
///   aimed at another job's marker), and no effect lands on an item it did
///   not name as its key;
/// - at the end every job is applied, or in the DLQ with its context (an
///   `idemq-error` attribute or a failure record), or still on the source
///   queue; none is lost (expired, or deleted unapplied);
/// - no failure record files a `TransactionConflict` as a transient
///   failure (a lost race re-run in the invocation spends no receive);
/// - the environment saw no violation (a response after the deadline, an
///   invalid id in a batch response);
/// - FIFO order within groups for applied jobs: in each message group,
///   the jobs that are applied and never had a copy in the DLQ (dead-
///   lettered by idemq or moved by SQS's redrive) are applied in the order
///   in which they were first sent to the source queue (its sequence
///   order, which is what SQS keeps: a producer's retried entry may land
///   after later ones). docs/reliability.md, "Not promised": order within
///   a group after a failure is not; a job that went through the DLQ comes
///   back (if at all) behind newer ones, and one handed back untried may be
///   moved there by SQS, so those are left out, and the rest must keep
///   their order around them.
///
/// `dlq` and `table` are the final contents: (body, attributes) of each DLQ
/// message and every item.
pub fn check(
    history: &History,
    source: &str,
    dlq: &str,
    dlq_final: &[(String, Value, String)],
    table: &BTreeMap<String, Item>,
) -> Verdicts {
    let mut v = Verdicts::default();
    let mut applied: BTreeMap<String, u64> = BTreeMap::new();
    let mut in_source: BTreeMap<String, i64> = BTreeMap::new();
    let mut in_dlq: BTreeMap<String, i64> = BTreeMap::new();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut expired: BTreeMap<String, u32> = BTreeMap::new();
    // FIFO order: each job's group and the index of its first send to the
    // source queue; jobs that had a copy in the DLQ; jobs in the order of
    // their first application.
    let mut groups: BTreeMap<String, String> = BTreeMap::new();
    let mut first_sent: BTreeMap<String, usize> = BTreeMap::new();
    let mut through_dlq: std::collections::BTreeSet<String> = Default::default();
    let mut applied_order: Vec<String> = Vec::new();
    for (at, e) in history.events.iter().enumerate() {
        match e {
            Event::Sent { queue, body, .. } => {
                let Some(k) = job_of(body) else { continue };
                kinds.entry(k.clone()).or_insert_with(|| kind_of(body));
                if let Some(g) = group_of(body) {
                    groups.entry(k.clone()).or_insert(g);
                    if queue == source {
                        first_sent.entry(k.clone()).or_insert(at);
                    } else if queue == dlq {
                        through_dlq.insert(k.clone());
                    }
                }
                if queue == source {
                    *in_source.entry(k).or_default() += 1;
                } else if queue == dlq {
                    *in_dlq.entry(k).or_default() += 1;
                }
            }
            Event::Redriven { body, .. } => {
                let Some(k) = job_of(body) else { continue };
                through_dlq.insert(k.clone());
                *in_source.entry(k.clone()).or_default() -= 1;
                *in_dlq.entry(k).or_default() += 1;
            }
            Event::Expired { queue, body } => {
                let Some(k) = job_of(body) else { continue };
                if queue == source {
                    *in_source.entry(k.clone()).or_default() -= 1;
                    *expired.entry(k).or_default() += 1;
                } else if queue == dlq {
                    *in_dlq.entry(k.clone()).or_default() -= 1;
                    v.violations
                        .push(format!("{k}: a dead letter expired in the DLQ"));
                }
            }
            Event::Deleted {
                queue,
                body,
                by,
                message_id,
            } => {
                let Some(k) = job_of(body) else { continue };
                let done = applied.get(&k).copied().unwrap_or(0) > 0;
                if queue == source {
                    *in_source.entry(k.clone()).or_default() -= 1;
                } else if queue == dlq {
                    *in_dlq.entry(k.clone()).or_default() -= 1;
                } else {
                    continue;
                }
                // Deleting a copy is safe once the job is applied, or while
                // another copy of it (on the queue or in the DLQ) lives on.
                let others =
                    in_source.get(&k).copied().unwrap_or(0) + in_dlq.get(&k).copied().unwrap_or(0);
                if !done && others <= 0 {
                    v.violations.push(format!(
                        "{k}: {message_id} deleted from {queue} ({by}) with the job not applied and no other copy left"
                    ));
                }
            }
            Event::Written { key, item } => {
                // A marker (`<prefix>job#<id>`) is only ever written by
                // idemq's commit, whole: anything else there overwrote it.
                if let Some((_, id)) = key.split_once("job#")
                    && !key.starts_with("count#")
                    && !key.starts_with("evil#")
                    && (item["job_id"]["S"].as_str() != Some(id)
                        || item["payload_hash"]["S"].as_str().is_none())
                {
                    v.violations.push(format!(
                        "{key}: a marker overwritten by something other than its commit"
                    ));
                }
                if key.starts_with("evil#") {
                    v.violations.push(format!(
                        "{key}: an effect aimed at another job's item was written"
                    ));
                }
                if let Some(why) = receive_spent_on_a_conflict(key, item) {
                    v.violations.push(why);
                }
                if let Some(k) = key.strip_prefix("count#") {
                    let n: u64 = item["n"]["N"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    let before = applied.insert(k.to_owned(), n).unwrap_or(0);
                    if n >= 1 && before == 0 {
                        applied_order.push(k.to_owned());
                    }
                    if n >= 2 && before < 2 {
                        v.violations.push(format!("{k}: applied {n} times"));
                    }
                }
            }
            Event::Violation(what) => v.violations.push(what.clone()),
        }
    }
    // FIFO order within groups, for applied jobs that never went through
    // the DLQ: each group's first-send indexes, in application order, must
    // rise.
    let mut last: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    for k in &applied_order {
        let (Some(g), Some(at)) = (groups.get(k), first_sent.get(k)) else {
            continue;
        };
        if through_dlq.contains(k) {
            continue;
        }
        if let Some((before, before_at)) = last.get(g.as_str())
            && *before_at > *at
        {
            v.violations.push(format!(
                "group {g}: {k} applied after {before}, which was sent after it (FIFO order)"
            ));
        }
        last.insert(g, (k, *at));
    }
    // The DLQ's final contents, by job: do they say why they died?
    let mut letters: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    for (body, attributes, record_key) in dlq_final {
        let Some(k) = job_of(body) else { continue };
        let has_context = attributes.get("idemq-error").is_some() || table.contains_key(record_key);
        letters.entry(k).or_default().push(has_context);
    }
    for (k, kind) in &kinds {
        v.jobs += 1;
        let n = applied.get(k).copied().unwrap_or(0);
        let must_fail = matches!(
            kind.as_str(),
            "poison" | "garbage" | "evil" | "ugly" | "huge"
        );
        if must_fail && n > 0 {
            v.violations.push(format!("{k}: a {kind} job was applied"));
        }
        if n >= 1 {
            v.applied += 1;
            continue;
        }
        if let Some(l) = letters.get(k) {
            v.dead_lettered += 1;
            if !l.iter().any(|c| *c) {
                v.violations
                    .push(format!("{k}: in the DLQ without its context"));
            }
            continue;
        }
        if in_source.get(k).copied().unwrap_or(0) > 0 {
            v.pending += 1;
            continue;
        }
        let mut why = String::new();
        if let Some(x) = expired.get(k) {
            let _ = write!(why, " (expired {x}x by retention)");
            v.expired += 1;
        }
        v.violations.push(format!(
            "{k}: lost: not applied, not in the DLQ, not on the queue{why}"
        ));
    }
    v.kinds = kinds;
    v
}

/// The follow-up's parent (`"parent"` in its body), if it is one.
fn parent_of(body: &str) -> Option<String> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .get("parent")?
        .as_str()
        .map(str::to_owned)
}

/// A number attribute of an item.
fn number(item: &Value, name: &str) -> Option<u64> {
    item[name]["N"].as_str().and_then(|s| s.parse().ok())
}

/// The rules of the effects' shapes (tests/sim/shapes.rs), over the same
/// history; `shape_of` gives each job's shape from its key and kind, `left`
/// the jobs with a copy still on the source queue or in the DLQ at the end.
/// - A fused marker (`entry#<k>`, or a `count#<k>` put whole with the
///   job's hash) is written once, by its job's commit: with the job's id,
///   hash and key (`"k"`), and for `entry#<k>` right after the counter it
///   commits with (one transaction); a later write of its key overwrote it.
/// - A follow-up (a body with `"parent"`) is sent only once its parent is
///   applied; an applied parent whose shape has one has sent it by the end,
///   unless a copy of the parent is still on the queue or in the DLQ (its
///   retry re-sends it). That the follow-up is then applied once is
///   [`check`]'s rule for every job.
/// - Each shared counter (`shared#<c>`) moves by one count and one version
///   per write (every write built on the state it replaced: no lost
///   update), and ends at the number of applied jobs that add to it.
pub fn check_shapes(
    history: &History,
    shape_of: &dyn Fn(&str, &str) -> Shape,
    left: &BTreeSet<String>,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut applied: BTreeMap<String, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut fused: BTreeSet<String> = BTreeSet::new();
    let mut follow_ups_sent: BTreeSet<String> = BTreeSet::new();
    let mut shared: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut previous: Option<&str> = None;
    for e in &history.events {
        match e {
            Event::Sent { body, .. } => {
                let Some(k) = job_of(body) else { continue };
                kinds.entry(k.clone()).or_insert_with(|| kind_of(body));
                if let Some(parent) = parent_of(body) {
                    if applied.get(&parent).copied().unwrap_or(0) == 0 {
                        out.push(format!(
                            "{k}: follow-up sent before its parent {parent} was applied"
                        ));
                    }
                    follow_ups_sent.insert(parent);
                }
            }
            Event::Written { key, item } => {
                if fused.contains(key) {
                    out.push(format!(
                        "{key}: a fused marker written again, not by its job's first commit"
                    ));
                }
                let entry = key.strip_prefix("entry#");
                let whole_counter = key
                    .strip_prefix("count#")
                    .filter(|_| !item["payload_hash"].is_null());
                if let Some(k) = entry.or(whole_counter) {
                    if item["job_id"]["S"].as_str().is_none()
                        || item["payload_hash"]["S"].as_str().is_none()
                        || item["k"]["S"].as_str() != Some(k)
                    {
                        out.push(format!(
                            "{key}: a fused marker written without its job's id, hash or key"
                        ));
                    }
                    if entry.is_some() && previous != Some(format!("count#{k}").as_str()) {
                        out.push(format!(
                            "{key}: a fused marker written without the counter it commits with"
                        ));
                    }
                    fused.insert(key.clone());
                }
                if let Some(k) = key.strip_prefix("count#") {
                    applied.insert(k.to_owned(), number(item, "n").unwrap_or(0));
                }
                if key.starts_with("shared#") {
                    let was = shared.get(key).copied().unwrap_or((0, 0));
                    let now = (
                        number(item, "n").unwrap_or(0),
                        number(item, "version").unwrap_or(0),
                    );
                    if now != (was.0 + 1, was.1 + 1) {
                        out.push(format!(
                            "{key}: written from n {} version {} to n {} version {}: a lost update",
                            was.0, was.1, now.0, now.1
                        ));
                    }
                    shared.insert(key.clone(), now);
                }
            }
            _ => {}
        }
        previous = match e {
            Event::Written { key, .. } => Some(key.as_str()),
            _ => None,
        };
    }
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for (k, kind) in &kinds {
        if applied.get(k).copied().unwrap_or(0) == 0 {
            continue;
        }
        match shape_of(k, kind) {
            Shape::FollowUp if !follow_ups_sent.contains(k) && !left.contains(k) => {
                out.push(format!(
                    "{k}: applied, but its follow-up {} was never sent",
                    super::shapes::child_of(k)
                ));
            }
            Shape::Optimistic { counter, .. } => {
                *expected.entry(format!("shared#{counter}")).or_default() += 1;
            }
            _ => {}
        }
    }
    for c in 0..super::shapes::SHARED_COUNTERS {
        let key = format!("shared#{c}");
        let n = shared.get(&key).map_or(0, |s| s.0);
        let want = expected.get(&key).copied().unwrap_or(0);
        if n != want {
            out.push(format!("{key}: n = {n}, but {want} applied jobs add to it"));
        }
    }
    out
}
