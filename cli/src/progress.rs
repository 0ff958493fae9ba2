//! Progress on a terminal: a bar with rate and ETA; nothing when stderr is
//! not a terminal (CI logs, pipes).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub fn bar(len: u64, unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit}  {{per_sec}}  ETA {{eta}}");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
