//! What the console shows of a consumer: its DLQ read once (every letter
//! with its context, grouped by cause) and its queues' depths, kept as a
//! snapshot that pages share until it is older than `--refresh-secs`.
//!
//! Reading a DLQ receives every message (SQS has no peek) and makes each
//! visible again at once; a snapshot is what lets a page, a search or a
//! chart not read it again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idemq::dead_letter::ATTR_ERROR;
use idemq::dlq::peek::{Context, DeadMessage, Depth, Peek};
use idemq::dlq::redrive::{Filter, parse_when};
use serde::Serialize;
use tokio::sync::Mutex;

use super::metrics::Watch;
use crate::dlq::Ctx;

/// One consumer the console shows.
pub(crate) struct Consumer {
    /// Its name in URLs: the function's, or its DLQ's first source queue's.
    pub name: String,
    pub ctx: Ctx,
    /// Its source queues, for their depths.
    pub sources: Vec<Peek>,
    /// Its retries and its source queues' oldest message, from CloudWatch.
    pub watch: Watch,
    snapshot: Mutex<Option<Arc<Snapshot>>>,
}

/// A DLQ as read at `read_at`.
pub(crate) struct Snapshot {
    pub read_at: SystemTime,
    /// In first-receive order.
    pub letters: Vec<Letter>,
    /// About how many letters could not be read (FIFO groups).
    pub unseen: u64,
    pub dlq: Depth,
    /// The source queues' depths, summed; `None` when none could be read.
    pub source: Option<Depth>,
}

/// A dead letter with what the console derives from it.
pub(crate) struct Letter {
    pub message: DeadMessage,
    pub context: Context,
    pub kind: Kind,
    /// The last error with its variable parts (numbers, ids, quoted text)
    /// replaced, so letters that died of the same cause group together.
    pub cause: String,
    /// The group's id: a hash of kind and cause.
    pub group: String,
}

/// How a letter came to the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Kind {
    /// idemq dead-lettered it at once (a permanent error: it carries
    /// `idemq-error`).
    Permanent,
    /// SQS moved it after maxReceiveCount receives (transient errors).
    RetriesExhausted,
    /// Neither can be told (sent to the DLQ by something else).
    Unknown,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Permanent => "permanent",
            Kind::RetriesExhausted => "retries exhausted",
            Kind::Unknown => "unknown",
        }
    }

    fn of(message: &DeadMessage, context: &Context) -> Self {
        if message.attributes.contains_key(ATTR_ERROR) {
            Kind::Permanent
        } else if message.source_arn().is_some() || context.failure_record {
            Kind::RetriesExhausted
        } else {
            Kind::Unknown
        }
    }
}

impl Letter {
    fn of(message: DeadMessage, context: Context) -> Self {
        let kind = Kind::of(&message, &context);
        let cause = normalise(&context.error_line());
        let group = format!("{:016x}", fnv1a(&format!("{}\n{cause}", kind.label())));
        Self {
            message,
            context,
            kind,
            cause,
            group,
        }
    }

    /// When it died: its failure time, else when it entered the DLQ.
    pub fn died_at(&self) -> Option<SystemTime> {
        self.context.failed_at.or_else(|| self.message.sent_at())
    }

    /// The value at `pointer` in its payload, as the search compares it:
    /// a string as its text, anything else as its JSON.
    fn payload_value(&self, pointer: &str) -> Option<String> {
        let body: serde_json::Value = serde_json::from_str(&self.message.body).ok()?;
        Some(match body.pointer(pointer)? {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

impl Consumer {
    pub fn new(name: String, ctx: Ctx, sources: Vec<Peek>, watch: Watch) -> Self {
        Self {
            name,
            ctx,
            sources,
            watch,
            snapshot: Mutex::new(None),
        }
    }

    /// The snapshot, read again when it is older than `max_age` or
    /// `fresh` is set. One reader at a time: pages that ask meanwhile wait
    /// for its read and share it.
    pub async fn snapshot(&self, max_age: Duration, fresh: bool) -> Result<Arc<Snapshot>, String> {
        let mut slot = self.snapshot.lock().await;
        if let Some(s) = slot.as_ref() {
            let age = SystemTime::now()
                .duration_since(s.read_at)
                .unwrap_or_default();
            if !fresh && age < max_age {
                return Ok(s.clone());
            }
        }
        let read = self.read().await?;
        let read = Arc::new(read);
        *slot = Some(read.clone());
        Ok(read)
    }

    /// The DLQ's and the source queues' depths now, from their attributes
    /// (`GetQueueAttributes`): no message is received, so watching them
    /// costs no receive and moves nothing.
    pub async fn depths(&self) -> Result<(Depth, Option<Depth>), String> {
        let dlq = self
            .ctx
            .dlq
            .peek()
            .depth()
            .await
            .map_err(|e| e.to_string())?;
        Ok((dlq, self.source_depth().await))
    }

    /// The source queues' depths, summed; `None` when none could be read.
    async fn source_depth(&self) -> Option<Depth> {
        let mut source: Option<Depth> = None;
        for peek in &self.sources {
            if let Ok(d) = peek.depth().await {
                let sum = source.get_or_insert(Depth {
                    visible: 0,
                    in_flight: 0,
                    delayed: 0,
                });
                sum.visible += d.visible;
                sum.in_flight += d.in_flight;
                sum.delayed += d.delayed;
            }
        }
        source
    }

    /// Forgets the snapshot: the next page reads the DLQ again.
    pub async fn invalidate(&self) {
        *self.snapshot.lock().await = None;
    }

    async fn read(&self) -> Result<Snapshot, String> {
        let dlq = &self.ctx.dlq;
        let depth = dlq.peek().depth().await.map_err(|e| e.to_string())?;
        let scanned = dlq.read_letters(|_| {}).await.map_err(|e| e.to_string())?;
        // Visible again at once: the console holds nothing.
        dlq.release(&scanned.items).await;
        let source = self.source_depth().await;
        Ok(Snapshot {
            read_at: SystemTime::now(),
            letters: scanned
                .items
                .into_iter()
                .map(|(m, c)| Letter::of(m, c))
                .collect(),
            unseen: scanned.unseen,
            dlq: depth,
            source,
        })
    }
}

/// A group of letters with the same kind and cause.
pub(crate) struct Group<'a> {
    pub id: &'a str,
    pub kind: Kind,
    pub cause: &'a str,
    pub count: usize,
    pub first: Option<SystemTime>,
    pub last: Option<SystemTime>,
}

impl Snapshot {
    /// The groups of `letters`, the largest first.
    pub fn groups<'a>(letters: &[&'a Letter]) -> Vec<Group<'a>> {
        let mut groups: Vec<Group<'a>> = Vec::new();
        for l in letters {
            let at = l.died_at();
            match groups.iter_mut().find(|g| g.id == l.group) {
                Some(g) => {
                    g.count += 1;
                    g.first = min_time(g.first, at);
                    g.last = max_time(g.last, at);
                }
                None => groups.push(Group {
                    id: &l.group,
                    kind: l.kind,
                    cause: &l.cause,
                    count: 1,
                    first: at,
                    last: at,
                }),
            }
        }
        groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
        groups
    }

    /// Letters that died in each of the last `hours` hours, oldest first.
    pub fn per_hour(&self, hours: usize, now: SystemTime) -> Vec<u64> {
        per_hour(self.letters.iter(), hours, now)
    }

    /// The letters by cause over the last `hours` hours, the most letters
    /// first: one cause under several deploys reads as a downstream's
    /// outage riding across them.
    pub fn by_cause(&self, hours: usize, now: SystemTime) -> Vec<Trend> {
        let mut trends = self.trends(
            |l| l.cause.clone(),
            |l| l.context.deploy_label(),
            hours,
            now,
        );
        trends.sort_by(|a, b| b.letters.cmp(&a.letters).then(a.first.cmp(&b.first)));
        trends
    }

    /// The letters by the deploy that failed them over the last `hours`
    /// hours, in the order the deploys began to fail, each with the hour
    /// of its first failure: one new deploy under several causes reads as
    /// a bug it shipped.
    pub fn by_deploy(&self, hours: usize, now: SystemTime) -> Vec<Trend> {
        let mut trends = self.trends(
            |l| l.context.deploy_label(),
            |l| l.cause.clone(),
            hours,
            now,
        );
        trends.sort_by(|a, b| {
            (a.first.is_none(), a.first, &a.label).cmp(&(b.first.is_none(), b.first, &b.label))
        });
        trends
    }

    /// The letters by `key`, each trend naming the `other` values its
    /// letters have, in the order they first failed.
    fn trends(
        &self,
        key: impl Fn(&Letter) -> String,
        other: impl Fn(&Letter) -> String,
        hours: usize,
        now: SystemTime,
    ) -> Vec<Trend> {
        let mut by_key: Vec<(String, Vec<&Letter>)> = Vec::new();
        for l in &self.letters {
            let k = key(l);
            match by_key.iter_mut().find(|(label, _)| *label == k) {
                Some((_, letters)) => letters.push(l),
                None => by_key.push((k, vec![l])),
            }
        }
        by_key
            .into_iter()
            .map(|(label, mut letters)| {
                letters.sort_by_key(|l| (l.died_at().is_none(), l.died_at()));
                let mut others: Vec<String> = Vec::new();
                for l in &letters {
                    let o = other(l);
                    if !others.contains(&o) {
                        others.push(o);
                    }
                }
                let first = letters.iter().find_map(|l| l.died_at());
                Trend {
                    label,
                    letters: letters.len(),
                    per_hour: per_hour(letters.iter().copied(), hours, now),
                    first,
                    first_hour: first.and_then(|t| hour_index(t, hours, now)),
                    others,
                }
            })
            .collect()
    }

    /// When the oldest letter entered the DLQ.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.letters
            .iter()
            .filter_map(|l| l.message.sent_at())
            .min()
    }

    /// The letter whose job id or message id is `id`.
    pub fn find(&self, id: &str) -> Option<&Letter> {
        self.letters
            .iter()
            .find(|l| l.message.message_id == id)
            .or_else(|| {
                self.letters
                    .iter()
                    .find(|l| l.context.job_id.as_deref() == Some(id))
            })
    }
}

/// Dead letters of one cause or of one deploy ([`Snapshot::by_cause`],
/// [`Snapshot::by_deploy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trend {
    /// The cause, or the deploy as `idemq dlq stats` names it.
    pub label: String,
    /// Its letters in the snapshot.
    pub letters: usize,
    /// Those that died in each of the last hours, oldest first.
    pub per_hour: Vec<u64>,
    /// When the first of them died.
    pub first: Option<SystemTime>,
    /// The index in `per_hour` of the hour `first` falls in, if within it.
    pub first_hour: Option<usize>,
    /// For a cause, the deploys its letters name; for a deploy, the causes
    /// of its letters: in the order they first failed.
    pub others: Vec<String>,
}

/// The index among the last `hours` hours (oldest first) of the hour `t`
/// falls in, `None` outside them.
fn hour_index(t: SystemTime, hours: usize, now: SystemTime) -> Option<usize> {
    let ago = now.duration_since(t).ok()?;
    let hour = (ago.as_secs() / 3600) as usize;
    (hour < hours).then(|| hours - 1 - hour)
}

/// `letters` that died in each of the last `hours` hours, oldest first.
fn per_hour<'a>(
    letters: impl Iterator<Item = &'a Letter>,
    hours: usize,
    now: SystemTime,
) -> Vec<u64> {
    let mut buckets = vec![0; hours];
    for l in letters {
        if let Some(i) = l.died_at().and_then(|t| hour_index(t, hours, now)) {
            buckets[i] += 1;
        }
    }
    buckets
}

fn min_time(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn max_time(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    a.max(b)
}

/// A search over a snapshot's letters, from a page's query (or an
/// action's form, which carries the same fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Search {
    /// A job id or message id, exact.
    pub job: String,
    /// A piece of the last error, case-insensitive.
    pub error: String,
    /// RFC 3339, or a duration ago (`2h`).
    pub since: String,
    pub until: String,
    /// A JSON pointer into the payload (`/account`) and the value there.
    pub pointer: String,
    pub value: String,
    /// A group's id.
    pub group: String,
}

/// The fields of a [`Search`], as named in queries and forms.
pub(crate) const SEARCH_FIELDS: [&str; 7] = [
    "job", "error", "since", "until", "pointer", "value", "group",
];

/// A [`Search`] checked: its times read, its pointer valid.
#[derive(Debug)]
pub(crate) struct Matcher {
    filter: Filter,
    pointer: Option<(String, String)>,
    group: Option<String>,
}

impl Search {
    pub fn from_pairs(get: impl Fn(&str) -> Option<String>) -> Self {
        let f = |k: &str| get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
        Self {
            job: f("job"),
            error: f("error"),
            since: f("since"),
            until: f("until"),
            pointer: f("pointer"),
            value: get("value").unwrap_or_default(),
            group: f("group"),
        }
    }

    /// Each field with its value, in [`SEARCH_FIELDS`] order.
    pub fn pairs(&self) -> [(&'static str, &str); 7] {
        [
            ("job", &self.job),
            ("error", &self.error),
            ("since", &self.since),
            ("until", &self.until),
            ("pointer", &self.pointer),
            ("value", &self.value),
            ("group", &self.group),
        ]
    }

    /// Its non-empty fields as `field=value` pairs, space-separated
    /// (empty: every letter), as pages and audit records show it.
    pub fn text(&self) -> String {
        self.pairs()
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub fn is_empty(&self) -> bool {
        self.pairs().iter().all(|(_, v)| v.is_empty())
    }

    /// The search checked, or why it cannot run (one line).
    pub fn matcher(&self, now: SystemTime) -> Result<Matcher, String> {
        let some = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
        let filter = Filter {
            job_ids: some(&self.job).into_iter().collect(),
            error_contains: some(&self.error),
            since: some(&self.since)
                .map(|s| parse_when("since", &s, now))
                .transpose()
                .map_err(|e| e.to_string())?,
            until: some(&self.until)
                .map(|s| parse_when("until", &s, now))
                .transpose()
                .map_err(|e| e.to_string())?,
        };
        let pointer = match some(&self.pointer) {
            None if !self.value.is_empty() => {
                return Err("a payload value needs a JSON pointer (/account)".into());
            }
            None => None,
            Some(p) if !p.starts_with('/') => {
                return Err(format!(
                    "{p:?} is not a JSON pointer: it starts with / (/account, /items/0/sku)"
                ));
            }
            Some(p) => Some((p, self.value.clone())),
        };
        Ok(Matcher {
            filter,
            pointer,
            group: some(&self.group),
        })
    }
}

impl Matcher {
    pub fn matches(&self, l: &Letter) -> bool {
        self.filter.matches(&l.context)
            && self.group.as_ref().is_none_or(|g| *g == l.group)
            && self
                .pointer
                .as_ref()
                .is_none_or(|(p, v)| l.payload_value(p).as_deref() == Some(v.as_str()))
    }

    /// The letters of `snapshot` it matches.
    pub fn select<'a>(&self, snapshot: &'a Snapshot) -> Vec<&'a Letter> {
        snapshot
            .letters
            .iter()
            .filter(|l| self.matches(l))
            .collect()
    }
}

/// The message ids of `letters`: what an action is told to take, so that
/// it takes exactly the letters the operator saw match.
pub(crate) fn message_ids(letters: &[&Letter]) -> HashSet<String> {
    letters
        .iter()
        .map(|l| l.message.message_id.clone())
        .collect()
}

/// An error with its variable parts replaced: runs of digits by `N`,
/// hexadecimal or UUID-like ids by `ID`, quoted text by `"…"`.
pub(crate) fn normalise(error: &str) -> String {
    let mut out = String::with_capacity(error.len());
    let mut chars = error.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' {
            // Quoted text, up to the matching quote (or the end).
            let mut closed = false;
            for d in chars.by_ref() {
                if d == c {
                    closed = true;
                    break;
                }
            }
            out.push(c);
            out.push('…');
            if closed {
                out.push(c);
            }
            continue;
        }
        if c.is_ascii_alphanumeric() {
            let mut word = String::from(c);
            while let Some(&d) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '-' || d == '_' {
                    word.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push_str(&normalise_word(&word));
            continue;
        }
        out.push(c);
    }
    out
}

fn normalise_word(word: &str) -> String {
    let digits = word.chars().filter(char::is_ascii_digit).count();
    if digits == 0 {
        return word.to_owned();
    }
    if digits == word.len() {
        return "N".into();
    }
    // An id: long, mostly hex and dashes, or any word half digits.
    let hexish = word
        .chars()
        .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_');
    if (hexish && word.len() >= 8) || digits * 2 >= word.len() {
        return "ID".into();
    }
    // A name with a number in it (acct-7, o-4): keep the name.
    let mut out = String::new();
    let mut in_digits = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// FNV-1a, 64 bits: a short stable id for a group.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_lose_their_variable_parts() {
        assert_eq!(
            normalise("downstream acct-outage is down (attempt 3)"),
            "downstream acct-outage is down (attempt N)"
        );
        assert_eq!(
            normalise("order 12345 failed: \"card 4242\" declined"),
            "order N failed: \"…\" declined"
        );
        assert_eq!(
            normalise("no item 9f1c2d3e-aa00-4b1c-9d2e-0123456789ab"),
            "no item ID"
        );
        assert_eq!(normalise("account acct-7 frozen"), "account acct-N frozen");
        assert_eq!(
            normalise("amount must be positive"),
            "amount must be positive"
        );
        assert_eq!(normalise("unterminated 'quote"), "unterminated '…");
    }

    /// A letter that died `mins_ago` minutes before `now`, of `error`,
    /// under `deploy`.
    fn letter(id: &str, error: &str, deploy: &str, now: SystemTime, mins_ago: u64) -> Letter {
        let message = DeadMessage {
            message_id: id.into(),
            receipt_handle: format!("rh-{id}"),
            body: "{}".into(),
            attributes: Default::default(),
            system: Default::default(),
        };
        let context = Context {
            job_id: Some(id.into()),
            message_id: id.into(),
            attempts: Some(5),
            last_error: Some(error.into()),
            error_chain: Vec::new(),
            failed_at: Some(now - Duration::from_secs(60 * mins_ago)),
            source_queue: Some("ledger".into()),
            deploy: Some(deploy.into()),
            idemq_version: Some("0.1.0".into()),
            backtrace: None,
            payload_bytes: 2,
            failure_record: true,
        };
        Letter::of(message, context)
    }

    /// The two stories the overview tells apart: a downstream outage that
    /// rides across two deploys (one cause, both deploys), and a bug only
    /// the newer deploy has (one deploy, a second cause), each deploy's
    /// first letter in its own hour.
    #[test]
    fn letters_by_cause_and_by_deploy_tell_an_outage_from_a_new_deploys_bug() {
        let now = SystemTime::now();
        let letters = vec![
            letter("a", "downstream outage for account acct-7", "v1", now, 200),
            letter("b", "downstream outage for account acct-9", "v1", now, 190),
            letter("c", "downstream outage for account acct-7", "v2", now, 30),
            letter("d", "no ledger rule for account acct-3", "v2", now, 20),
            letter("e", "no ledger rule for account acct-4", "v2", now, 10),
            letter("f", "downstream outage for account acct-9", "v2", now, 5),
            // Older than the last 24 hours: counted, not in any hour.
            letter(
                "g",
                "downstream outage for account acct-1",
                "v0",
                now,
                60 * 30,
            ),
        ];
        let snapshot = Snapshot {
            read_at: now,
            letters,
            unseen: 0,
            dlq: Depth {
                visible: 7,
                in_flight: 0,
                delayed: 0,
            },
            source: None,
        };
        let v = |d: &str| format!("{d}, idemq 0.1.0");

        let causes = snapshot.by_cause(24, now);
        let summary: Vec<(&str, usize, Vec<String>)> = causes
            .iter()
            .map(|t| (t.label.as_str(), t.letters, t.others.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (
                    "downstream outage for account acct-N",
                    5,
                    vec![v("v0"), v("v1"), v("v2")]
                ),
                ("no ledger rule for account acct-N", 2, vec![v("v2")]),
            ]
        );
        let mut outage = vec![0; 24];
        outage[20] = 2; // 200 and 190 minutes ago: the hour 3 h ago.
        outage[23] = 2; // 30 and 5 minutes ago.
        assert_eq!(causes[0].per_hour, outage);
        assert_eq!(causes[0].first, snapshot.letters[6].died_at());
        assert_eq!(
            causes[0].first_hour, None,
            "the first letter is older than 24 h"
        );

        let deploys = snapshot.by_deploy(24, now);
        let order: Vec<&str> = deploys.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            order,
            [v("v0"), v("v1"), v("v2")],
            "in the order they began to fail"
        );
        let (v1, v2) = (&deploys[1], &deploys[2]);
        assert_eq!(v1.others, ["downstream outage for account acct-N"]);
        assert_eq!(v1.first_hour, Some(20));
        assert_eq!(v1.per_hour.iter().sum::<u64>(), 2);
        assert_eq!(
            v2.others,
            [
                "downstream outage for account acct-N",
                "no ledger rule for account acct-N"
            ],
            "the causes in the order they first failed"
        );
        assert_eq!((v2.letters, v2.first_hour), (4, Some(23)));
        assert_eq!(v2.first, snapshot.letters[2].died_at());
        assert_eq!(deploys[0].per_hour, vec![0; 24]);
    }

    #[test]
    fn a_value_without_a_pointer_is_refused() {
        let now = SystemTime::now();
        let s = Search {
            value: "alice".into(),
            ..Search::default()
        };
        assert!(s.matcher(now).is_err());
        let s = Search {
            pointer: "account".into(),
            value: "alice".into(),
            ..Search::default()
        };
        assert!(s.matcher(now).unwrap_err().contains("JSON pointer"));
        let s = Search {
            since: "yesterday-ish".into(),
            ..Search::default()
        };
        assert!(s.matcher(now).is_err());
    }
}
