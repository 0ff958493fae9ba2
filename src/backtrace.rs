//! Where a job failed: the backtrace a failure record and a dead letter
//! carry, captured where a handler's [`JobError`](crate::JobError)
//! was made or where its handler panicked, and written down with the
//! frames of the user's code first.
//!
//! A leaf module: the handler captures, the batch takes a panic's
//! backtrace, `classify` renders; no store depends on anything here but
//! the text.
//!
//! Capturing is `IDEMQ_BACKTRACE`'s choice ([`BacktraceMode`]), read once
//! per process. Only failures pay for it: a capture is a walk of the stack
//! (microseconds), and the walk is turned into names and lines only when
//! its failure is recorded. A job that succeeds captures nothing.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Whether idemq captures backtraces of failed jobs (`IDEMQ_BACKTRACE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BacktraceMode {
    /// `on` (the default): every handler error and panic.
    On,
    /// `off`: none.
    Off,
    /// `env`: as Rust's own rules say, `RUST_LIB_BACKTRACE`, else
    /// `RUST_BACKTRACE` (<https://doc.rust-lang.org/std/backtrace/index.html#environment-variables>).
    Env,
}

/// The variable that sets [`BacktraceMode`].
pub(crate) const BACKTRACE_ENV_VAR: &str = "IDEMQ_BACKTRACE";

impl BacktraceMode {
    /// The mode `IDEMQ_BACKTRACE` names (`on`, `off`, `env`; unset is
    /// `on`), or why it names none.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::On),
            Some(v) if v.eq_ignore_ascii_case("on") => Ok(Self::On),
            Some(v) if v.eq_ignore_ascii_case("off") => Ok(Self::Off),
            Some(v) if v.eq_ignore_ascii_case("env") => Ok(Self::Env),
            Some(v) => Err(format!(
                "{BACKTRACE_ENV_VAR}={v:?} is not on, off or env; capturing backtraces (on)"
            )),
        }
    }

    /// This process's mode, read once; an invalid value is logged once
    /// and taken as `on`.
    pub fn current() -> Self {
        static MODE: OnceLock<BacktraceMode> = OnceLock::new();
        *MODE.get_or_init(|| {
            let value = std::env::var(BACKTRACE_ENV_VAR).ok();
            Self::parse(value.as_deref()).unwrap_or_else(|e| {
                tracing::warn!("{e}");
                Self::On
            })
        })
    }
}

/// A backtrace of here, as this process's [`BacktraceMode`] says: `None`
/// when it captures none, and on a simulated thread.
pub(crate) fn capture() -> Option<Box<Backtrace>> {
    // A simulated run is a function of its seed (crate::clock::simulate).
    if crate::clock::is_simulated() {
        return None;
    }
    let bt = match BacktraceMode::current() {
        BacktraceMode::Off => return None,
        BacktraceMode::On => Backtrace::force_capture(),
        BacktraceMode::Env => Backtrace::capture(),
    };
    (bt.status() == BacktraceStatus::Captured).then(|| Box::new(bt))
}

thread_local! {
    /// The last panic on this thread: its message and where it happened,
    /// noted by the hook [`note_panics`] installs, taken by
    /// [`take_panic`] right after the batch caught it.
    static LAST_PANIC: RefCell<Option<(String, Box<Backtrace>)>> = const { RefCell::new(None) };
}

/// Puts a panic hook in front of the one set now, which notes each
/// panic's backtrace for [`take_panic`] and then calls that hook (so
/// what it prints or logs stays as it was). Once per process; a hook set
/// after this one replaces it, and a panic's failure then has no
/// backtrace. Nothing is noted when [`BacktraceMode`] captures none.
pub(crate) fn note_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if BacktraceMode::current() == BacktraceMode::Off {
            return;
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(bt) = capture() {
                let message = payload_text(info.payload());
                LAST_PANIC.with(|last| *last.borrow_mut() = Some((message, bt)));
            }
            previous(info);
        }));
    });
}

/// The backtrace of the panic with `message` that this thread has just
/// caught, if the hook noted it.
pub(crate) fn take_panic(message: &str) -> Option<Box<Backtrace>> {
    LAST_PANIC
        .with(|last| last.borrow_mut().take())
        .and_then(|(noted, bt)| (noted == message).then_some(bt))
}

/// A panic's message: its `&str` or `String` payload, else a placeholder.
pub(crate) fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}

/// The most bytes of a backtrace a failure record keeps.
pub const MAX_RECORD_BACKTRACE: usize = 16 * 1024;

/// Crates whose frames are idemq's or the runtime's, by function name:
/// what a build without line tables (a release build's default) has to go
/// by.
const FOLDED_CRATES: [&str; 20] = [
    "std",
    "core",
    "alloc",
    "__rustc",
    "idemq",
    "tokio",
    "futures",
    "futures_util",
    "futures_core",
    "futures_executor",
    "lambda_runtime",
    "lambda_runtime_api_client",
    "tower",
    "tower_service",
    "hyper",
    "hyper_util",
    "tracing",
    "tracing_futures",
    "tracing_core",
    "backtrace",
];

/// Where the sources of crates that are not the user's are: std's (the
/// toolchain's, `/rustc/<commit>/library/…`) and every dependency
/// downloaded by Cargo.
const FOLDED_PATHS: [&str; 3] = ["/rustc/", "/.cargo/registry/", "/.cargo/git/"];

/// One frame of a rendered backtrace: its function and, where the build
/// has line tables, its file and line.
#[derive(Debug, PartialEq, Eq)]
struct Frame<'a> {
    function: &'a str,
    at: Option<&'a str>,
}

impl Frame<'_> {
    /// The crate a frame's function belongs to: the first path segment of
    /// its name, or of the type of a `<T as Trait>::f` name. `None` for a
    /// name without a path (the C library's, an unresolved address, or a
    /// name from line tables, which std gives without its path).
    fn krate(&self) -> Option<&str> {
        let name = self.function.trim_start_matches(['<', '&', '*']);
        let name = name.strip_prefix("dyn ").unwrap_or(name);
        let name = name.strip_prefix("mut ").unwrap_or(name);
        name.split_once("::").map(|(first, _)| first)
    }

    /// Whether the frame is the user's code. With a location, by its file:
    /// Rust, not std's, not a downloaded crate's, not idemq's own sources
    /// (`idemq_src`; a relative path is `cwd`'s, as std prints it). Without
    /// one, by the crate its function's name names.
    fn is_users(&self, idemq_src: &Path, cwd: Option<&Path>) -> bool {
        match self.at {
            Some(at) => {
                let file = at.split(':').next().unwrap_or(at);
                // The C library's frames (`pthread_create.c`) are not.
                if !file.ends_with(".rs") || FOLDED_PATHS.iter().any(|p| file.contains(p)) {
                    return false;
                }
                let path = Path::new(file);
                let path = match cwd {
                    Some(cwd) if path.is_relative() => cwd.join(path),
                    _ => path.to_path_buf(),
                };
                !normalized(&path).starts_with(idemq_src)
            }
            None => self.krate().is_some_and(|k| !FOLDED_CRATES.contains(&k)),
        }
    }
}

/// `path` without its `.` components (std prints `./src/…`).
fn normalized(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

/// The frames of std's rendering of a backtrace (`   3: name` lines, each
/// followed by its `at file:line:col` line when there is one).
fn frames(text: &str) -> Vec<Frame<'_>> {
    let mut out: Vec<Frame<'_>> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(at) = trimmed.strip_prefix("at ") {
            if let Some(last) = out.last_mut().filter(|f| f.at.is_none()) {
                last.at = Some(at.trim_end());
            }
        } else if let Some((index, name)) = trimmed.split_once(": ")
            && !index.is_empty()
            && index.bytes().all(|b| b.is_ascii_digit())
        {
            out.push(Frame {
                function: name.trim_end(),
                at: None,
            });
        }
    }
    out
}

/// How many frames are shown when none is the user's (a panic in idemq
/// itself, or a build without symbols).
const UNFOLDED_WHEN_NO_USER_FRAME: usize = 16;

/// `bt` as a failure record keeps it: the user's frames (innermost first,
/// each with its file and line where the build has them), then one line
/// counting the frames of idemq, the async runtime, other dependencies
/// and std that are left out; at most `max` bytes, cut at a frame. `None` when nothing was
/// captured. Frames carry function names and source paths only, never a
/// value of the job.
pub(crate) fn render(bt: &Backtrace, max: usize) -> Option<String> {
    if bt.status() != BacktraceStatus::Captured {
        return None;
    }
    Some(render_text(&bt.to_string(), max))
}

/// Bytes kept free for the lines that count cut and folded frames.
const SUMMARY_ROOM: usize = 128;

fn render_text(text: &str, max: usize) -> String {
    let idemq_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cwd = std::env::current_dir().ok();
    let all = frames(text);
    let users: Vec<&Frame<'_>> = all
        .iter()
        .filter(|f| f.is_users(&idemq_src, cwd.as_deref()))
        .collect();
    let any_users = !users.is_empty();
    let shown = if any_users {
        users
    } else {
        all.iter().take(UNFOLDED_WHEN_NO_USER_FRAME).collect()
    };
    let folded = all.len() - shown.len();
    let mut out = String::new();
    let mut kept = 0;
    for frame in &shown {
        let mut entry = String::from(frame.function);
        if let Some(at) = frame.at {
            entry.push_str("\n    at ");
            entry.push_str(at);
        }
        entry.push('\n');
        // Room for the two summary lines below (under 128 bytes).
        if out.len() + entry.len() + SUMMARY_ROOM > max {
            break;
        }
        out.push_str(&entry);
        kept += 1;
    }
    let cut = shown.len() - kept;
    if cut > 0 {
        out.push_str(&format!("… {cut} more frames cut (backtrace capped)\n"));
    }
    if folded > 0 {
        let which = if any_users {
            "of idemq, the runtime, dependencies and std "
        } else {
            ""
        };
        out.push_str(&format!("… {folded} frames {which}folded\n"));
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STD_TEXT: &str = "   0: std::backtrace::Backtrace::force_capture
             at /rustc/abc/library/std/src/backtrace.rs:312:9
   1: idemq::handler::JobError::transient
             at ./src/handler.rs:90:24
   2: <idemq::handler::JobError as core::convert::From<E>>::from
             at ./src/handler.rs:80:9
   3: ledger::charge::{{closure}}
             at /app/examples/ledger.rs:88:22
   4: {async_fn#0}<ledger::Ledger>
             at /app/examples/ledger.rs:60:9
   5: {async_fn#0}<idemq::store::dynamodb::effect::Effect>
             at /home/u/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/idemq-0.1.0/src/batch.rs:650:17
   6: poll<alloc::boxed::Box<dyn core::future::future::Future>>
             at IDEMQ_SRC/batch.rs:700:9
   7: tokio::runtime::task::core::Core<T,S>::poll
   8: start_thread
   9: clone
";

    fn std_text() -> String {
        STD_TEXT.replace("IDEMQ_SRC", concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
    }

    #[test]
    fn the_users_frames_come_first_and_the_rest_is_counted() {
        let out = render_text(&std_text(), MAX_RECORD_BACKTRACE);
        assert_eq!(
            out,
            "ledger::charge::{{closure}}
    at /app/examples/ledger.rs:88:22
{async_fn#0}<ledger::Ledger>
    at /app/examples/ledger.rs:60:9
… 8 frames of idemq, the runtime, dependencies and std folded"
        );
    }

    #[test]
    fn without_a_users_frame_the_first_frames_are_shown_as_they_are() {
        let text = "   0: idemq::batch::f\n   1: tokio::x::y\n   2: clone\n";
        assert_eq!(
            render_text(text, MAX_RECORD_BACKTRACE),
            "idemq::batch::f\ntokio::x::y\nclone"
        );
    }

    #[test]
    fn a_deep_backtrace_is_cut_at_a_frame_within_the_bound() {
        let mut text = String::new();
        for i in 0..2000 {
            text.push_str(&format!(
                "  {i}: app::recurse::level_{i}\n             at /app/src/deep.rs:{i}:5\n"
            ));
        }
        for max in [512, 4096, MAX_RECORD_BACKTRACE] {
            let out = render_text(&text, max);
            assert!(out.len() <= max, "{} > {max}", out.len());
            assert!(out.starts_with("app::recurse::level_0\n    at /app/src/deep.rs:0:5\n"));
            assert!(out.ends_with("more frames cut (backtrace capped)"), "{out}");
            // Whole frames only: every name line has its location.
            let names = out.lines().filter(|l| l.starts_with("app::")).count();
            let ats = out.lines().filter(|l| l.starts_with("    at ")).count();
            assert_eq!(names, ats);
        }
    }

    #[test]
    fn the_crate_of_a_frame_is_its_path_or_its_types() {
        let krate = |function| Frame { function, at: None }.krate().map(str::to_owned);
        assert_eq!(krate("ledger::main"), Some("ledger".into()));
        assert_eq!(
            krate("<ledger::L as idemq::handler::Handler>::handle"),
            Some("ledger".into())
        );
        assert_eq!(krate("<&dyn core::ops::Fn<()>>::call"), Some("core".into()));
        assert_eq!(krate("__libc_start_main"), None);
    }

    #[test]
    fn the_mode_is_on_unless_said_otherwise() {
        assert_eq!(BacktraceMode::parse(None), Ok(BacktraceMode::On));
        assert_eq!(BacktraceMode::parse(Some("OFF")), Ok(BacktraceMode::Off));
        assert_eq!(BacktraceMode::parse(Some(" env ")), Ok(BacktraceMode::Env));
        assert!(
            BacktraceMode::parse(Some("1"))
                .unwrap_err()
                .contains("IDEMQ_BACKTRACE")
        );
    }

    #[test]
    fn a_caught_panic_leaves_its_backtrace_for_the_catcher_only() {
        note_panics();
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 7)).unwrap_err();
        let message = payload_text(caught.as_ref());
        assert_eq!(message, "boom 7");
        // Another message is not this panic's.
        assert!(take_panic("something else").is_none());
        let _ = std::panic::catch_unwind(|| panic!("again"));
        let bt = take_panic("again").expect("the hook noted it");
        // idemq's own frames only here: shown as they are.
        let out = render(&bt, MAX_RECORD_BACKTRACE).expect("captured");
        assert!(out.contains("idemq::backtrace"), "{out}");
        assert!(take_panic("again").is_none(), "taken once");
    }
}
