//! The progress bar of a drill (and of a series of drills), drawn on stderr only when stderr is
//! a terminal and progress was asked for; otherwise every call here does nothing, so scripts
//! and `--json` output never see it.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A bar, or nothing.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar of `total` steps labelled `prefix`, when `enabled` and stderr is a terminal.
    pub fn new(enabled: bool, total: u64, prefix: &str) -> Progress {
        if !enabled || !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(total.max(1));
        let style = ProgressStyle::with_template(
            "{spinner} {prefix} {elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(prefix.to_string());
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress { bar: Some(bar) }
    }

    /// Nothing drawn.
    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    /// Change the total.
    pub fn set_length(&self, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total.max(1));
        }
    }

    /// Move to `position`.
    pub fn set_position(&self, position: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(position);
        }
    }

    /// Advance by one.
    pub fn inc(&self) {
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    /// Say what is happening.
    pub fn message(&self, message: impl Into<String>) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.into());
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
