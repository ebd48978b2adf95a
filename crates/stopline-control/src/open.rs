//! Opening the control plane for one command: `config.toml`, the store with its read bound, and
//! what a broken configuration means to that command (docs/reference.md §5).
//!
//! Engage does not depend on `config.toml`: with a broken one it lands on the defaults and says
//! `config_invalid` in its receipt (refusing to stop is never the answer). `check` always
//! answers with a decision receipt, so a broken configuration is a block. An owner-console verb
//! first says which console predicate fails, if one does, rather than name a file a confined
//! agent may not read. Every other command refuses `config_invalid`.

use crate::config::Config;
use crate::context::Context;
use std::path::PathBuf;
use stopline_core::{CheckReceipt, Mode, Refusal};
use stopline_store::Store;

/// What a command does with a `config.toml` that does not load.
#[derive(Debug, Clone, Copy)]
pub enum OnBrokenConfig {
    /// `engage`: the defaults, and the warning `config_invalid`.
    Defaults,
    /// `check`: a block receipt (exit 4).
    Block,
    /// An owner-console verb: the console's own refusal first, if it has one (the function is
    /// `stopline_owner::console::refuse_before_config`, given by the caller: this crate does
    /// not link the owner console).
    ConsoleFirst(fn(&Context) -> Option<Refusal>),
    /// Everything else: refuse.
    Refuse,
}

/// The control plane opened for a command, or why not.
#[derive(Debug)]
pub enum Opened {
    /// Ready, with the warning a defaulted configuration leaves for the receipt.
    Ready(Context, Option<String>),
    /// `check`'s answer to a broken configuration.
    Blocked(CheckReceipt),
    /// Refused.
    Refused(Refusal),
}

/// Load `home`'s configuration and open its store bounded by `read_timeout_ms`.
pub fn open(home: PathBuf, on_broken: OnBrokenConfig) -> Opened {
    let (config, warning) = match Config::load(&home.join("config.toml")) {
        Ok(config) => (config, None),
        Err(error) => match on_broken {
            OnBrokenConfig::Defaults => {
                let warning =
                    format!("config_invalid: {error}; engaged with the default configuration");
                (Config::default(), Some(warning))
            }
            OnBrokenConfig::Block => {
                let refusal = error.to_refusal();
                let block =
                    CheckReceipt::block(Mode::Emergency, refusal.code, refusal.message, Vec::new());
                return Opened::Blocked(block);
            }
            OnBrokenConfig::ConsoleFirst(refuse_before_config) => {
                let bare = Context::new(Store::open(home), Config::default());
                let refusal = refuse_before_config(&bare);
                return Opened::Refused(refusal.unwrap_or_else(|| error.to_refusal()));
            }
            OnBrokenConfig::Refuse => return Opened::Refused(error.to_refusal()),
        },
    };
    let bound = std::time::Duration::from_millis(config.read_timeout_ms.max(1));
    let store = Store::open(home).with_read_timeout(bound);
    Opened::Ready(Context::new(store, config), warning)
}
