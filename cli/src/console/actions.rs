//! What the console does to dead letters: redrive, delete and export of
//! the letters a search matches, each first as a dry run, then as a
//! background task whose progress a page shows, each leaving an audit
//! record.
//!
//! An action takes exactly the letters the operator saw match: the search
//! is run on a fresh read of the DLQ and the action is given their
//! message ids. The redrive is the library's (`idemq::dlq::redrive`, as
//! `idemq dlq redrive` runs it): sent before deleted, so a kill at any
//! instant loses nothing; every copy stamped with its job id; no letter
//! sent whose job's markers may have expired. A delete first archives
//! what it deletes (the export's JSON lines, beside the audit file), read
//! back whole, so nothing is lost by a click.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use idemq::dlq::archive::{export_lines, written_whole};
use idemq::dlq::peek::{Context, DeadMessage};
use idemq::dlq::redrive::{Filter, Rate, Redrive, RedriveOptions, first_enqueued_times};
use serde::{Deserialize, Serialize};

use super::App;
use super::snapshot::{Consumer, Search, message_ids};
use crate::dlq::archive::{Publish, write_export};

/// An action on dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Action {
    /// Send back to the source queue (then delete from the DLQ).
    Redrive,
    /// Archive to a file beside the audit file, then delete from the DLQ.
    Delete,
    /// Download as JSON lines (`idemq dlq import` reads them).
    Export,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Redrive => "redrive",
            Action::Delete => "delete",
            Action::Export => "export",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Action::Redrive, Action::Delete, Action::Export]
            .into_iter()
            .find(|a| a.name() == s)
    }

    pub const ALL: [Action; 3] = [Action::Redrive, Action::Delete, Action::Export];
}

/// A letter in a dry run's sample or a page's table.
pub(crate) struct Brief {
    pub job_id: Option<String>,
    pub message_id: String,
    pub attempts: Option<u32>,
    pub failed_at: Option<SystemTime>,
    pub error: String,
}

impl Brief {
    pub fn of(c: &Context) -> Self {
        Self {
            job_id: c.job_id.clone(),
            message_id: c.message_id.clone(),
            attempts: c.attempts,
            failed_at: c.failed_at,
            error: c.error_line(),
        }
    }
}

/// What a dry run found.
pub(crate) struct Preview {
    pub action: Action,
    pub search: Search,
    /// Letters the action would take.
    pub count: usize,
    /// Up to ten of them.
    pub sample: Vec<Brief>,
    /// Letters the search matched that the action would not take, and why.
    pub refused: Vec<String>,
}

const SAMPLE: usize = 10;

/// The letters `search` matches on a fresh read of the DLQ: their message
/// ids, and their contexts in DLQ order.
async fn matched(
    app: &App,
    c: &Consumer,
    search: &Search,
) -> Result<(HashSet<String>, Vec<Context>), String> {
    let snapshot = c.snapshot(app.max_age, true).await?;
    let matcher = search.matcher(SystemTime::now())?;
    let letters = matcher.select(&snapshot);
    let contexts = letters.iter().map(|l| l.context.clone()).collect();
    Ok((message_ids(&letters), contexts))
}

/// The redrive of exactly the letters `ids`. Never called with none: an
/// empty filter is the whole DLQ.
fn redrive_options(c: &Consumer, ids: HashSet<String>, dry_run: bool) -> RedriveOptions {
    debug_assert!(!ids.is_empty());
    RedriveOptions {
        filter: Filter {
            job_ids: ids,
            ..Filter::default()
        },
        dry_run,
        resolver: c.ctx.dlq.resolver().clone(),
        horizon: c.ctx.horizon,
        ..RedriveOptions::default()
    }
}

/// The dry run of `action` on what `search` matches; recorded in the audit.
pub(crate) async fn preview(
    app: &App,
    c: &Consumer,
    action: Action,
    search: &Search,
    who: &str,
) -> Result<Preview, String> {
    let (ids, contexts) = matched(app, c, search).await?;
    let mut refused = Vec::new();
    let (count, sample) = match action {
        Action::Redrive if !ids.is_empty() => {
            let redrive = Redrive::new(
                c.ctx.dlq.peek(),
                c.ctx.dlq.records(),
                redrive_options(c, ids, true),
            )
            .await
            .map_err(|e| e.to_string())?;
            let report = redrive.run(&|_, _| {}).await.map_err(|e| e.to_string())?;
            for r in &report.past_horizon {
                refused.push(format!(
                    "{} (job {}): {}",
                    r.message_id,
                    r.job_id.as_deref().unwrap_or("-"),
                    r.why
                ));
            }
            for (id, why) in &report.failed {
                refused.push(format!("{id}: {why}"));
            }
            let sample = report.moved.iter().take(SAMPLE).map(Brief::of).collect();
            (report.moved.len(), sample)
        }
        _ => (
            contexts.len(),
            contexts.iter().take(SAMPLE).map(Brief::of).collect(),
        ),
    };
    app.audit.append(&Record::new(
        who,
        &c.name,
        action,
        search,
        count,
        "dry run".into(),
    ));
    Ok(Preview {
        action,
        search: search.clone(),
        count,
        sample,
        refused,
    })
}

/// How a task stands.
#[derive(Debug, Clone)]
pub(crate) enum State {
    Running,
    Done,
    Failed(String),
}

/// An action running (or run) in the background.
pub(crate) struct Task {
    pub id: String,
    pub consumer: String,
    pub action: Action,
    pub search: Search,
    /// Letters matched when it started.
    pub total: usize,
    /// Letters done so far.
    pub done: AtomicUsize,
    state: Mutex<State>,
    /// Its counts once done (`moved`, `failed`, `left`, …), in page order.
    result: Mutex<Vec<(&'static str, usize)>>,
    /// What the operator should know of the run, a line each.
    notes: Mutex<Vec<String>>,
    /// An export's JSON lines.
    export: Mutex<Option<String>>,
    /// Where a delete archived what it deleted.
    pub archived: Mutex<Option<PathBuf>>,
}

impl Task {
    pub fn state(&self) -> State {
        self.state.lock().expect("task state").clone()
    }

    pub fn result(&self) -> Vec<(&'static str, usize)> {
        self.result.lock().expect("task result").clone()
    }

    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().expect("task notes").clone()
    }

    pub fn export(&self) -> Option<String> {
        self.export.lock().expect("task export").clone()
    }

    fn finish(&self, outcome: Result<Vec<(&'static str, usize)>, String>) {
        let state = match outcome {
            Ok(result) => {
                *self.result.lock().expect("task result") = result;
                State::Done
            }
            Err(e) => State::Failed(e),
        };
        *self.state.lock().expect("task state") = state;
    }

    fn note(&self, line: String) {
        self.notes.lock().expect("task notes").push(line);
    }
}

/// The tasks of this console's run.
#[derive(Default)]
pub(crate) struct Tasks {
    next: AtomicU64,
    all: Mutex<BTreeMap<String, Arc<Task>>>,
}

impl Tasks {
    pub fn get(&self, id: &str) -> Option<Arc<Task>> {
        self.all.lock().expect("tasks").get(id).cloned()
    }

    fn add(&self, consumer: &str, action: Action, search: Search, total: usize) -> Arc<Task> {
        let id = (self.next.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let task = Arc::new(Task {
            id: id.clone(),
            consumer: consumer.to_owned(),
            action,
            search,
            total,
            done: AtomicUsize::new(0),
            state: Mutex::new(State::Running),
            result: Mutex::new(Vec::new()),
            notes: Mutex::new(Vec::new()),
            export: Mutex::new(None),
            archived: Mutex::new(None),
        });
        self.all.lock().expect("tasks").insert(id, task.clone());
        task
    }
}

/// Starts `action` on what `search` matches now; returns the task's id.
pub(crate) async fn start(
    app: Arc<App>,
    consumer: usize,
    action: Action,
    search: Search,
    rate: Option<Rate>,
    who: String,
) -> Result<String, String> {
    let c = &app.consumers[consumer];
    let (ids, _) = matched(&app, c, &search).await?;
    if ids.is_empty() {
        return Err("no dead letter matches this search (any more): nothing was done".into());
    }
    let task = app.tasks.add(&c.name, action, search, ids.len());
    let id = task.id.clone();
    tokio::spawn(async move {
        let c = &app.consumers[consumer];
        let outcome = match action {
            Action::Redrive => redrive(c, ids, rate, &task).await,
            Action::Delete => delete(c, &ids, &app.audit.dir(), &task).await,
            Action::Export => export(c, &ids, &task).await,
        };
        let mut outcome_text = match &outcome {
            Ok(result) => result
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("failed: {e}"),
        };
        if let Some(rate) = rate {
            outcome_text.push_str(&format!(" (at most {}/s)", rate.get()));
        }
        task.finish(outcome);
        c.invalidate().await;
        app.audit.append(&Record::new(
            &who,
            &c.name,
            action,
            &task.search,
            task.total,
            outcome_text,
        ));
    });
    Ok(id)
}

async fn redrive(
    c: &Consumer,
    ids: HashSet<String>,
    rate: Option<Rate>,
    task: &Task,
) -> Result<Vec<(&'static str, usize)>, String> {
    let total = ids.len();
    if let Some(rate) = rate {
        task.note(format!("at most {} messages per second", rate.get()));
    }
    let redrive = Redrive::new(
        c.ctx.dlq.peek(),
        c.ctx.dlq.records(),
        RedriveOptions {
            rate,
            ..redrive_options(c, ids, false)
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let report = redrive
        .run(&|moved, _| task.done.store(moved, Ordering::Relaxed))
        .await
        .map_err(|e| e.to_string())?;
    task.done.store(report.moved.len(), Ordering::Relaxed);
    for r in &report.past_horizon {
        task.note(format!(
            "kept {} (job {}): {}",
            r.message_id,
            r.job_id.as_deref().unwrap_or("-"),
            r.why
        ));
    }
    for (id, why) in &report.failed {
        task.note(format!("failed {id}: {why}"));
    }
    if let Some(held) = &report.held_elsewhere {
        task.note(format!(
            "not read: {held}; run the same search again once they are back (or idemq dlq \
             redrive --wait, which waits for them)"
        ));
    }
    if report.unseen > 0 {
        task.note(format!(
            "about {} letters could not be read (FIFO groups behind letters left in place); run \
             the same search again",
            report.unseen
        ));
    }
    for id in &report.sent_not_deleted {
        task.note(format!(
            "{id} was sent but not deleted from the DLQ: a rerun sends it again (absorbed as a duplicate)"
        ));
    }
    Ok(vec![
        ("moved", report.moved.len()),
        ("failed", report.failed.len()),
        ("past-horizon", report.past_horizon.len()),
        ("left", total.saturating_sub(report.moved.len())),
    ])
}

/// The letters `ids` read now, held invisible; every other letter read is
/// made visible again at once.
async fn take(c: &Consumer, ids: &HashSet<String>) -> Result<Vec<(DeadMessage, Context)>, String> {
    let scanned = c
        .ctx
        .dlq
        .read_letters(|_| {})
        .await
        .map_err(|e| e.to_string())?;
    let (taken, others): (Vec<_>, Vec<_>) = scanned
        .items
        .into_iter()
        .partition(|(m, _)| ids.contains(&m.message_id));
    c.ctx.dlq.release(&others).await;
    Ok(taken)
}

async fn lines(c: &Consumer, items: &[(DeadMessage, Context)]) -> Result<Vec<String>, String> {
    let messages: Vec<DeadMessage> = items.iter().map(|(m, _)| m.clone()).collect();
    let firsts = first_enqueued_times(c.ctx.dlq.peek(), &messages)
        .await
        .map_err(|e| e.to_string())?;
    export_lines(items, firsts).map_err(|e| e.to_string())
}

async fn export(
    c: &Consumer,
    ids: &HashSet<String>,
    task: &Task,
) -> Result<Vec<(&'static str, usize)>, String> {
    let items = take(c, ids).await?;
    let written = lines(c, &items).await;
    c.ctx.dlq.release(&items).await;
    let lines = written?;
    task.done.store(lines.len(), Ordering::Relaxed);
    let mut body = lines.join("\n");
    body.push('\n');
    *task.export.lock().expect("task export") = Some(body);
    Ok(vec![
        ("exported", items.len()),
        ("left", ids.len().saturating_sub(items.len())),
    ])
}

async fn delete(
    c: &Consumer,
    ids: &HashSet<String>,
    dir: &std::path::Path,
    task: &Task,
) -> Result<Vec<(&'static str, usize)>, String> {
    let items = take(c, ids).await?;
    let archive = dir.join(format!(
        "deleted-{}-{}-task{}.jsonl",
        c.name
            .replace(|ch: char| !ch.is_ascii_alphanumeric() && ch != '-', "_"),
        humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .replace(':', ""),
        task.id
    ));
    let whole = match lines(c, &items).await {
        Ok(lines) => match std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                write_export(&archive, &lines, false).map_err(|e| match e {
                    Publish::Exists => format!("{} exists", archive.display()),
                    Publish::Io(e) => e,
                })
            })
            .and_then(|()| std::fs::read_to_string(&archive).map_err(|e| e.to_string()))
        {
            Ok(text) => written_whole(&text, &items),
            Err(e) => {
                c.ctx.dlq.release(&items).await;
                return Err(format!(
                    "cannot archive to {}: {e}; nothing deleted",
                    archive.display()
                ));
            }
        },
        Err(e) => {
            c.ctx.dlq.release(&items).await;
            return Err(e);
        }
    };
    if !whole {
        c.ctx.dlq.release(&items).await;
        return Err(format!(
            "{} does not read back whole: nothing deleted",
            archive.display()
        ));
    }
    *task.archived.lock().expect("task archive") = Some(archive);
    let handles: Vec<&str> = items
        .iter()
        .map(|(m, _)| m.receipt_handle.as_str())
        .collect();
    let failed = c.ctx.dlq.delete(&handles).await;
    for i in &failed {
        task.note(format!(
            "{}: archived but not deleted (still in the DLQ)",
            items[*i].0.message_id
        ));
    }
    task.done
        .store(items.len() - failed.len(), Ordering::Relaxed);
    Ok(vec![
        ("deleted", items.len() - failed.len()),
        ("failed", failed.len()),
        ("left", ids.len().saturating_sub(items.len() - failed.len())),
    ])
}

/// One audit record: who did what to which letters, and how it ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub at: String,
    pub who: String,
    pub consumer: String,
    pub action: String,
    /// The search, `field=value` pairs (empty: every letter).
    pub filter: String,
    pub count: usize,
    pub outcome: String,
}

impl Record {
    fn new(
        who: &str,
        consumer: &str,
        action: Action,
        search: &Search,
        count: usize,
        outcome: String,
    ) -> Self {
        let filter = search.text();
        Self {
            at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            who: who.to_owned(),
            consumer: consumer.to_owned(),
            action: action.name().to_owned(),
            filter,
            count,
            outcome,
        }
    }
}

/// The audit file: JSON lines, appended, mode 0600. It outlives the
/// console's run: the console shows every record in it.
pub(crate) struct Audit {
    path: PathBuf,
    lock: Mutex<()>,
}

impl Audit {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            lock: Mutex::new(()),
        }
    }

    /// The directory of the audit file, where deletes archive.
    pub fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."))
            .to_owned()
    }

    /// Appends `record`; a record that cannot be written is reported on
    /// stderr (the action has happened by then).
    pub fn append(&self, record: &Record) {
        use std::os::unix::fs::OpenOptionsExt;
        let _one_writer = self.lock.lock().expect("audit lock");
        let line = serde_json::to_string(record).expect("a record serialises");
        let written = std::fs::create_dir_all(self.dir()).and_then(|()| {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&self.path)?;
            writeln!(f, "{line}")?;
            f.sync_data()
        });
        if let Err(e) = written {
            eprintln!(
                "idemq console: cannot write the audit record to {}: {e}: {line}",
                self.path.display()
            );
        }
    }

    /// Every record, newest first (unreadable lines skipped).
    pub fn read(&self) -> Vec<Record> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut records: Vec<Record> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        records.reverse();
        records
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}
