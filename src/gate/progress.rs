//! A progress bar for the long stages of a gate run — on a terminal only (stderr), so logs and
//! CI output stay clean.
use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress(Option<ProgressBar>);

impl Progress {
    /// `wanted` is the caller's wish; the bar only appears when stderr is a terminal.
    pub fn new(wanted: bool) -> Progress {
        if !wanted || !std::io::stderr().is_terminal() {
            return Progress(None);
        }
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {msg}")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Progress(Some(bar))
    }
    /// Whether a bar is shown: other long passes show theirs only then.
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }
    /// Start a stage of `len` steps.
    pub fn stage(&self, name: &str, len: u64) {
        if let Some(b) = &self.0 {
            b.set_prefix(name.to_string());
            b.set_length(len);
            b.set_position(0);
        }
    }
    pub fn step(&self, msg: &str) {
        if let Some(b) = &self.0 {
            b.set_message(msg.to_string());
            b.inc(1);
        }
    }
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
