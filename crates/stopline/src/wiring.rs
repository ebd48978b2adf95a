//! What the dispatcher (`commands.rs`) hands a verb family besides the context: a leaf, so the
//! families take it without importing the dispatcher that calls them.

/// What the dispatcher hands a verb family besides the context.
pub struct Wiring {
    /// `--json`.
    pub json: bool,
    /// The distributed plane's gateway side, with `--control`.
    pub distributed: Option<stopline_gateway::Distributed>,
    /// `config_invalid`, when engage landed on the defaults.
    pub config_warning: Option<String>,
}
