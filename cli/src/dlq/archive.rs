//! `export` and `import`: dead letters as JSON lines (the format and the
//! import's judging are the library's, `idemq::dlq::archive`).
//!
//! An export holds whole payloads, so it is created readable by its owner
//! only (0600), never over an existing file unless `--force`, through a
//! temporary file of its own (unique name, created exclusively) that is
//! published only once written and synced.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use idemq::dlq::archive::{
    AgeRule, ImportFailure, Lines, MAX_LINE_BYTES, export_lines, import_lines, written_whole,
};
use idemq::dlq::inspect::OpenError;
use idemq::dlq::peek::DeadMessage;
use idemq::dlq::redrive::first_enqueued_times;
use idemq::job::JobIdResolver;
use idemq::producer::Producer;

use super::{CmdResult, Ctx, open_failed, unseen_warning};
use crate::usage_error;

impl Ctx {
    pub(super) async fn export(
        &self,
        file: &Path,
        delete: bool,
        force: bool,
        json: bool,
    ) -> CmdResult {
        if !force && file.symlink_metadata().is_ok() {
            return Ok(usage_error(&format!(
                "{} exists: pass --force to replace it",
                file.display()
            )));
        }
        let read = self.read_letters().await?;
        let warnings = self.warnings(&read);
        let (items, unseen) = (read.items, read.unseen);
        // The summary: a line, or with --json one object.
        let summary = |exported: usize, deleted: Option<usize>, not_deleted: &[&str]| {
            if json {
                let value = serde_json::json!({
                    "file": file.display().to_string(),
                    "exported": exported,
                    "deleted": deleted,
                    "not_deleted": not_deleted,
                    "unseen": unseen,
                    "warnings": warnings,
                });
                println!("{value}");
            } else if let Some(deleted) = deleted {
                println!(
                    "exported {exported} to {}, deleted {deleted}",
                    file.display()
                );
            } else {
                println!("exported {exported} to {}", file.display());
            }
        };
        let letters: Vec<DeadMessage> = items.iter().map(|(m, _)| m.clone()).collect();
        let firsts = match first_enqueued_times(self.dlq.peek(), &letters).await {
            Ok(f) => f,
            Err(e) => {
                self.dlq.release(&items).await;
                return Err(e.into());
            }
        };
        let lines = match export_lines(&items, firsts) {
            Ok(l) => l,
            Err(e) => {
                self.dlq.release(&items).await;
                return Err(e.into());
            }
        };
        // Written whole, synced and published, then read back: only a file
        // that holds every message is allowed to stand for the DLQ.
        let written = write_export(file, &lines, force);
        let written = match written {
            Ok(()) => std::fs::read_to_string(file).map_err(|e| e.to_string()),
            Err(Publish::Exists) => {
                self.dlq.release(&items).await;
                return Ok(usage_error(&format!(
                    "{} exists: pass --force to replace it",
                    file.display()
                )));
            }
            Err(Publish::Io(e)) => Err(e),
        };
        let all_there = match written {
            Ok(text) => written_whole(&text, &items),
            Err(e) => {
                self.dlq.release(&items).await;
                eprintln!("idemq dlq: cannot write {}: {e}", file.display());
                return Ok(ExitCode::FAILURE);
            }
        };
        if !delete || !all_there {
            self.dlq.release(&items).await;
            if delete {
                eprintln!("the file does not read back whole: nothing deleted");
                return Ok(ExitCode::FAILURE);
            }
            summary(items.len(), None, &[]);
            if unseen > 0 {
                eprintln!("idemq dlq: {}", unseen_warning(unseen));
                return Ok(ExitCode::FAILURE);
            }
            return Ok(ExitCode::SUCCESS);
        }
        let messages: Vec<DeadMessage> = items.into_iter().map(|(m, _)| m).collect();
        let handles: Vec<&str> = messages.iter().map(|m| m.receipt_handle.as_str()).collect();
        let not_deleted: Vec<&str> = self
            .dlq
            .delete(&handles)
            .await
            .into_iter()
            .map(|i| messages[i].message_id.as_str())
            .collect();
        for id in &not_deleted {
            eprintln!("failed: {id}: exported but not deleted");
        }
        summary(
            messages.len(),
            Some(messages.len() - not_deleted.len()),
            &not_deleted,
        );
        if unseen > 0 {
            // The deleted letters unblock their groups: a second export
            // reads what this one could not.
            eprintln!(
                "idemq dlq: {}; about {unseen} remain in the DLQ: export again to another file",
                unseen_warning(unseen)
            );
        }
        Ok(if not_deleted.is_empty() && unseen == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}

/// Why an export was not published.
#[derive(Debug)]
pub(crate) enum Publish {
    /// The target appeared meanwhile, and `--force` was not given.
    Exists,
    Io(String),
}

/// Writes `lines` to a new temporary file next to `target` and publishes
/// it: without `force` by a hard link, which fails if the target exists
/// (so nothing is ever overwritten, even by a race), else by a rename.
pub(crate) fn write_export(target: &Path, lines: &[String], force: bool) -> Result<(), Publish> {
    let io = |e: std::io::Error| Publish::Io(e.to_string());
    let (tmp, mut f) = create_temporary(target).map_err(io)?;
    let written = (|| {
        for l in lines {
            writeln!(f, "{l}")?;
        }
        f.sync_all()
    })();
    drop(f);
    let published = written.and_then(|()| {
        if force {
            return std::fs::rename(&tmp, target);
        }
        match std::fs::hard_link(&tmp, target) {
            Ok(()) => std::fs::remove_file(&tmp),
            Err(e) => Err(e),
        }
    });
    match published {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Err(Publish::Exists)
            } else {
                Err(io(e))
            }
        }
    }
}

/// A new file next to `target`, readable and writable by its owner only,
/// under a name no other file has (created with O_EXCL: never a file that
/// was there, nor a symlink planted in its place).
fn create_temporary(target: &Path) -> std::io::Result<(PathBuf, File)> {
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    let mut last = None;
    for _ in 0..16 {
        let tmp = dir.join(format!(
            ".{name}.{}.{:016x}.partial",
            std::process::id(),
            rand::random::<u64>()
        ));
        match create_new_private(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no unique temporary name")))
}

fn create_new_private(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Sends an export's messages to `to` ([`import_lines`]: one line of at
/// most [`MAX_LINE_BYTES`] and 100 jobs in memory at a time), and prints
/// what was not sent, and why.
pub(super) async fn import(
    sqs: &aws_sdk_sqs::Client,
    file: &Path,
    to: &str,
    resolver: &JobIdResolver,
    age: AgeRule,
    json: bool,
) -> CmdResult {
    let input = match File::open(file) {
        Ok(f) => f,
        Err(e) => return Ok(usage_error(&format!("cannot read {}: {e}", file.display()))),
    };
    let size = input.metadata().map(|m| m.len()).unwrap_or(0);
    // A queue that does not exist is the operator's mistake (exit 2); any
    // other failure to read it is AWS's (exit 1).
    if let Err(e) = idemq::queue::QueueInfo::discover(sqs, to).await {
        return Ok(open_failed(&OpenError::of_queue(to, e)));
    }
    let producer = Producer::with_client(sqs.clone(), to).await?;
    let mut lines = Lines::new(BufReader::new(input), MAX_LINE_BYTES);
    let bar = crate::progress::bar(size, "bytes");
    let report = import_lines(&producer, &mut lines, resolver, &age, |bytes| {
        bar.set_position(bytes)
    })
    .await;
    bar.finish_and_clear();
    for (number, why) in &report.forced {
        eprintln!(
            "warning: line {number}: sent although {why}; stamped as first \
             enqueued now: its job may be applied twice"
        );
    }
    for f in &report.failures {
        match f {
            ImportFailure::Line(number, why) => eprintln!("failed: line {number}: {why}"),
            ImportFailure::Unreadable(e) => {
                eprintln!("failed: cannot read {}: {e}", file.display())
            }
        }
    }
    for (number, why) in &report.past_horizon {
        eprintln!("past horizon: line {number}: {why}");
    }
    if json {
        let failures: Vec<serde_json::Value> = report
            .failures
            .iter()
            .map(|f| match f {
                ImportFailure::Line(number, why) => {
                    serde_json::json!({"line": number, "error": why})
                }
                ImportFailure::Unreadable(e) => {
                    serde_json::json!({"line": null, "error": e.to_string()})
                }
            })
            .collect();
        let lines = |v: &[(usize, String)]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|(line, why)| serde_json::json!({"line": line, "why": why}))
                .collect()
        };
        let value = serde_json::json!({
            "file": file.display().to_string(),
            "to": to,
            "sent": report.sent,
            "failures": failures,
            "past_horizon": lines(&report.past_horizon),
            "forced": lines(&report.forced),
            "complete": report.is_complete(),
        });
        println!("{value}");
        return Ok(if report.is_complete() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let mut summary = format!("imported {}, failed {}", report.sent, report.failures.len());
    if !report.past_horizon.is_empty() {
        summary.push_str(&format!(
            ", not sent {} past the replay horizon (marker TTL {} less {}; --allow-expired-markers sends them)",
            report.past_horizon.len(),
            humantime::format_duration(age.horizon.marker_ttl),
            humantime::format_duration(age.horizon.margin),
        ));
    }
    println!("{summary}");
    Ok(if report.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "idemq-export-test-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[cfg(unix)]
    #[test]
    fn an_export_is_private_and_never_overwrites() {
        use std::os::unix::fs::PermissionsExt;
        let d = dir();
        let target = d.join("dlq.jsonl");
        write_export(&target, &["{\"a\":1}".into()], false).unwrap();
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "payloads readable by the owner only");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "{\"a\":1}\n");

        assert!(matches!(
            write_export(&target, &["{\"b\":2}".into()], false),
            Err(Publish::Exists)
        ));
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "{\"a\":1}\n",
            "the existing file is untouched"
        );
        write_export(&target, &["{\"b\":2}".into()], true).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "{\"b\":2}\n");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left behind: {left:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The old temporary name was `<file>.partial` (`with_extension`): an
    /// export to `dlq.jsonl` truncated a neighbour `dlq.partial`.
    #[test]
    fn the_temporary_file_never_clobbers_a_neighbour() {
        let d = dir();
        let neighbour = d.join("dlq.partial");
        std::fs::write(&neighbour, "keep me").unwrap();
        let target = d.join("dlq.jsonl");
        let (tmp1, _f1) = create_temporary(&target).unwrap();
        let (tmp2, _f2) = create_temporary(&target).unwrap();
        assert_ne!(tmp1, tmp2, "unique per call");
        assert_ne!(tmp1, neighbour);
        assert!(
            tmp1.starts_with(&d),
            "next to the target, for an atomic rename"
        );
        write_export(&target, &["x".into()], false).unwrap();
        assert_eq!(std::fs::read_to_string(&neighbour).unwrap(), "keep me");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_not_followed() {
        let d = dir();
        let victim = d.join("victim");
        std::fs::write(&victim, "secret").unwrap();
        let planted = d.join("planted");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let err = create_new_private(&planted).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
