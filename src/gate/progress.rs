//! A progress bar for the long stages of a gate run — on a terminal only (stderr), so logs and
//! CI output stay clean.
use std::io::IsTerminal;

use crate::verdict::report::PhaseTime;
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

/// Where a run's time goes: each stage's wall seconds and the requests it sent, for the
/// report's per-phase table (a slow server shows which stage it slows; CI's matrices read it).
#[derive(Default)]
pub struct PhaseClock {
    phases: Vec<PhaseTime>,
    current: Option<(String, std::time::Instant, Option<u64>)>,
    /// The server whose requests are counted, once the target is open.
    target: Option<crate::endpoint::openai::HttpTarget>,
}

impl PhaseClock {
    /// Count the requests this server is sent from now on.
    pub fn watch(&mut self, target: Option<&crate::endpoint::openai::HttpTarget>) {
        self.target = target.cloned();
    }

    fn sent(&self) -> Option<u64> {
        self.target.as_ref().map(|t| t.requests_sent())
    }

    /// End the stage before (if any) and start `name`.
    pub fn start(&mut self, name: &str) {
        self.end();
        self.current = Some((name.to_string(), std::time::Instant::now(), self.sent()));
    }

    /// End the running stage.
    pub fn end(&mut self) {
        if let Some((phase, t0, before)) = self.current.take() {
            let requests = match (before, self.sent()) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                // The target opened during this stage: all it sent so far.
                (None, b) => b,
                _ => None,
            };
            self.phases.push(PhaseTime {
                phase,
                seconds: t0.elapsed().as_secs_f64(),
                requests,
                steps: Vec::new(),
            });
        }
    }

    /// The running stage's steps (ended with it).
    pub fn steps(&mut self, steps: Vec<PhaseTime>) {
        self.end();
        if let Some(last) = self.phases.last_mut() {
            last.steps = steps;
        }
    }

    /// The stages so far, the running one ended.
    pub fn take(&mut self) -> Vec<PhaseTime> {
        self.end();
        std::mem::take(&mut self.phases)
    }
}
