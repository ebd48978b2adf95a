//! Wiring for the binary: `--control etcd://…` turns a local [`Context`] into one whose plane is
//! etcd, and yields the gateway's distributed backend (plane, view source, the fleet's budget
//! ledger and breaker counters) for `serve` and the plane's owner side for the owner console's
//! verbs.
//!
//! TLS and credentials come from `[etcd]` ([`Access::load`]), read here for the CLI and `serve`
//! alike. The permit comes from the configuration key `permit_ttl_ms` (default 2000); a value that is
//! not a positive integer is refused rather than silently replaced.

use crate::access::Access;
use crate::breakers::EtcdBreakers;
use crate::budgets::EtcdBudgets;
use crate::plane::EtcdPlane;
use crate::source::EtcdSource;
use crate::url::EtcdTarget;
use std::sync::Arc;
use std::time::Duration;
use stopline_control::config::Config;
use stopline_control::fleet::Fleet;
use stopline_control::view_source::{Distributed, ViewSource};
use stopline_control::Context;
use stopline_core::{Refusal, RefusalCode};
use stopline_store::OwnerPlane;

/// The permit from `config` (`permit_ttl_ms`), or the default ([`Config::permit_ttl`]).
pub fn permit_ttl(config: &Config) -> Result<Duration, Refusal> {
    config.permit_ttl()
}

/// `ctx` on the etcd plane named by `url`, the gateway's distributed backend over it (whose view
/// source also starts `local`'s watchers: this host's directory, where fallback latches land),
/// and the plane's owner side.
pub fn attach(
    ctx: Context,
    url: &str,
    local: Arc<dyn ViewSource>,
) -> Result<(Context, Distributed, Arc<dyn OwnerPlane>), Refusal> {
    let target = EtcdTarget::parse(url)?;
    let permit = permit_ttl(&ctx.config)?;
    let access = Access::load(&ctx.config.etcd, ctx.store.layout().home(), &target)?;
    let plane = EtcdPlane::with_access(target, access, ctx.store.clone()).map_err(|e| {
        Refusal::new(
            RefusalCode::DistributedUnavailable,
            format!("cannot start the etcd client: {e}"),
        )
    })?;
    let distributed = Distributed {
        plane: Arc::new(plane.clone()),
        source: Arc::new(EtcdSource::new(plane.clone(), permit, local)),
        fleet: Fleet {
            budgets: Some(Arc::new(EtcdBudgets::new(
                plane.clone(),
                &stopline_control::view_source::gateway_id_for_this_process(),
            ))),
            breakers: Some(Arc::new(EtcdBreakers::new(plane.clone()))),
        },
    };
    let owner_plane: Arc<dyn OwnerPlane> = Arc::new(plane);
    Ok((
        ctx.with_plane(distributed.plane.clone()),
        distributed,
        owner_plane,
    ))
}
