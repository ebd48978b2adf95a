//! `stopline etcd roles`: the etcd role and user set-up for a prefix (docs/reference.md §10), printed as
//! etcdctl commands or applied through the client's auth API.
//!
//! - `stopline-operator`: readwrite on the whole prefix (latches, the WAL, the epoch, state,
//!   recovery evidence, `keys/verify.pub`).
//! - `stopline-gateway`: read on the prefix; readwrite only on `servers/`, `acks/`, `budgets/`
//!   and `breakers/`, the ranges a gateway writes (its leased registration and its
//!   acknowledgements, see `register.rs`; the fleet's budget ledger, `budgets.rs`; the fleet's
//!   breaker counts, `breakers.rs`). Gateways write nothing else: operation journals and the
//!   signing seed are local. An engage made *through* a gateway therefore cannot publish to
//!   etcd under this role; it lands in that host's local control directory and says
//!   `distributed_publish_failed`, containing that host (the operator engages fleet-wide).
//! - No role for agents: an agent holds no etcd credentials at all.
//! - `root` (etcd needs it before `auth enable`), then `auth enable`.
//!
//! etcd ranges are per prefix, and a gateway's id is chosen when it starts, so the gateway role
//! covers every gateway's registration and acknowledgement keys, not one gateway's.

use crate::client::EtcdClient;
use crate::names::Names;
use etcd_client::Permission;
use serde::Serialize;
use stopline_core::{Refusal, RefusalCode};

/// The operator role and user.
pub const OPERATOR: &str = "stopline-operator";
/// The gateway role and user.
pub const GATEWAY: &str = "stopline-gateway";

/// One permission of one role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Grant {
    /// The role.
    pub role: &'static str,
    /// `read` or `readwrite`.
    pub permission: &'static str,
    /// The key range, a prefix.
    pub prefix: String,
}

/// Every grant for `prefix`.
pub fn grants(prefix: &str) -> Vec<Grant> {
    let names = Names::new(prefix);
    let grant = |role, permission, prefix: String| Grant {
        role,
        permission,
        prefix,
    };
    vec![
        grant(OPERATOR, "readwrite", names.all()),
        grant(GATEWAY, "read", names.all()),
        grant(GATEWAY, "readwrite", names.servers()),
        grant(GATEWAY, "readwrite", names.acks()),
        grant(GATEWAY, "readwrite", names.budgets()),
        grant(GATEWAY, "readwrite", names.breakers()),
    ]
}

/// The set-up as etcdctl commands (each `user add` prompts for the password).
pub fn etcdctl(prefix: &str) -> Vec<String> {
    let mut lines = vec![
        "etcdctl user add root".to_string(),
        "etcdctl user grant-role root root".to_string(),
        format!("etcdctl role add {OPERATOR}"),
        format!("etcdctl role add {GATEWAY}"),
    ];
    for g in grants(prefix) {
        lines.push(format!(
            "etcdctl role grant-permission {} --prefix=true {} {}",
            g.role, g.permission, g.prefix
        ));
    }
    for user in [OPERATOR, GATEWAY] {
        lines.push(format!("etcdctl user add {user}"));
        lines.push(format!("etcdctl user grant-role {user} {user}"));
    }
    lines.push("etcdctl auth enable".to_string());
    lines
}

/// The passwords `--apply` gives the three users (read from 0600 files).
#[derive(Debug, Clone)]
pub struct Passwords {
    /// `root`'s.
    pub root: crate::access::Password,
    /// `stopline-operator`'s.
    pub operator: crate::access::Password,
    /// `stopline-gateway`'s.
    pub gateway: crate::access::Password,
}

/// What `etcd roles` did or would do.
#[derive(Debug, Clone, Serialize)]
pub struct RolesReceipt {
    /// The prefix.
    pub prefix: String,
    /// The grants.
    pub grants: Vec<Grant>,
    /// The etcdctl commands (what `--apply` does through the client).
    pub commands: Vec<String>,
    /// True when applied (auth is now enabled).
    pub applied: bool,
}

impl std::fmt::Display for RolesReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.applied {
            writeln!(
                f,
                "applied to etcd (auth is enabled) for the prefix {}:",
                self.prefix
            )?;
        }
        write!(f, "{}", self.commands.join("\n"))
    }
}

/// The set-up for `prefix`, not applied.
pub fn plan(prefix: &str) -> Result<RolesReceipt, Refusal> {
    let target = crate::url::EtcdTarget::parse(&format!("etcd://h:1?prefix={prefix}"))
        .map_err(|e| Refusal::new(RefusalCode::BadRequest, e.why))?;
    Ok(RolesReceipt {
        prefix: target.prefix.clone(),
        grants: grants(&target.prefix),
        commands: etcdctl(&target.prefix),
        applied: false,
    })
}

fn tolerate_existing<T>(result: Result<T, etcd_client::Error>) -> Result<(), etcd_client::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(error) if error.to_string().contains("already exists") => Ok(()),
        Err(error) => Err(error),
    }
}

/// Apply the set-up for `prefix` through `client` (which connects as the caller's `[etcd]`
/// says: before `auth enable`, etcd needs no user). Roles and users that already exist are
/// kept; grants are re-applied; then auth is enabled.
pub fn apply(
    client: &EtcdClient,
    prefix: &str,
    passwords: &Passwords,
) -> Result<RolesReceipt, Refusal> {
    let mut receipt = plan(prefix)?;
    let grants = receipt.grants.clone();
    let passwords = passwords.clone();
    client
        .call_within(
            "applying the etcd roles",
            std::time::Duration::from_secs(10),
            move |mut c| {
                let (grants, passwords) = (grants.clone(), passwords.clone());
                async move {
                    tolerate_existing(c.user_add("root", passwords.root.expose(), None).await)?;
                    c.user_grant_role("root", "root").await?;
                    for (user, password) in [
                        (OPERATOR, &passwords.operator),
                        (GATEWAY, &passwords.gateway),
                    ] {
                        tolerate_existing(c.role_add(user).await)?;
                        tolerate_existing(c.user_add(user, password.expose(), None).await)?;
                        c.user_grant_role(user, user).await?;
                    }
                    for g in &grants {
                        let permission = match g.permission {
                            "read" => Permission::read(g.prefix.as_str()),
                            _ => Permission::read_write(g.prefix.as_str()),
                        };
                        c.role_grant_permission(g.role, permission.with_prefix())
                            .await?;
                    }
                    c.auth_enable().await?;
                    Ok(())
                }
            },
        )
        .map_err(|e| Refusal::new(RefusalCode::DistributedUnavailable, e.to_string()))?;
    receipt.applied = true;
    Ok(receipt)
}

/// The password files `etcd roles --apply` takes, one per user it creates.
#[derive(Debug, Clone, Default)]
pub struct PasswordFiles {
    /// `--root-password-file`.
    pub root: Option<std::path::PathBuf>,
    /// `--operator-password-file`.
    pub operator: Option<std::path::PathBuf>,
    /// `--gateway-password-file`.
    pub gateway: Option<std::path::PathBuf>,
}

/// `etcd roles --apply`: read the three password files (each 0600, see
/// [`crate::access::read_password`]), connect to `control` as `config` says, and [`apply`].
pub fn apply_from(
    config: &stopline_control::config::EtcdConfig,
    home: &std::path::Path,
    control: Option<&str>,
    prefix: &str,
    files: PasswordFiles,
) -> Result<RolesReceipt, Refusal> {
    let control = control.ok_or_else(|| {
        Refusal::new(
            RefusalCode::BadRequest,
            "etcd roles --apply needs --control etcd://… (or etcds://…) naming the cluster",
        )
    })?;
    let password = |flag: &str, file: Option<std::path::PathBuf>| {
        let file = file.ok_or_else(|| {
            Refusal::new(
                RefusalCode::BadRequest,
                format!("etcd roles --apply needs --{flag}"),
            )
        })?;
        crate::access::read_password(&file)
    };
    let passwords = Passwords {
        root: password("root-password-file", files.root)?,
        operator: password("operator-password-file", files.operator)?,
        gateway: password("gateway-password-file", files.gateway)?,
    };
    let target = crate::url::EtcdTarget::parse(control)?;
    let access = crate::access::Access::load(config, home, &target)?;
    let client = EtcdClient::with_access(target, access).map_err(|e| {
        Refusal::new(
            RefusalCode::DistributedUnavailable,
            format!("cannot start the etcd client: {e}"),
        )
    })?;
    apply(&client, prefix, &passwords)
}
