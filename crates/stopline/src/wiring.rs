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

/// `ctx` on the plane `--control` names (this host's directory without it): the context, the
/// gateway's distributed backend with `--control`, and the plane's owner side, which only the
/// owner console's verbs receive (`owner.rs`), never `serve`.
#[allow(clippy::type_complexity)]
pub fn attach(
    ctx: stopline_control::Context,
    control: Option<&str>,
) -> Result<
    (
        stopline_control::Context,
        Option<stopline_gateway::Distributed>,
        std::sync::Arc<dyn stopline_owner::OwnerPlane>,
    ),
    stopline_core::Refusal,
> {
    let Some(url) = control else {
        let owner_plane = std::sync::Arc::new(ctx.store.clone());
        return Ok((ctx, None, owner_plane));
    };
    let local = std::sync::Arc::new(stopline_gateway::LocalSource::new(ctx.store.clone()));
    let (ctx, distributed, owner_plane) = stopline_etcd::wiring::attach(ctx, url, local)?;
    Ok((ctx, Some(distributed), owner_plane))
}
