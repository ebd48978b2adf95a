//! Starting the agent of a run: mint its token, build its environment, set up the gateway-only
//! network namespace if asked, and start the command in its own cgroup v2 group (joined before
//! exec) through the supervisor.
//!
//! Called only after the run was recorded. Nothing here decides whether a run may start; the
//! preflight did. A failure here leaves no process behind: the supervisor removes a group whose
//! spawn failed, and no group exists before the spawn.

use super::card::LoadedCard;
use super::environment::{agent_environment, Session};
use super::gateway::Gateway;
use super::{NetMode, RunError};
use crate::context::Context;
use crate::tokens::{self, IssueArgs};
use std::ffi::OsString;
use std::path::Path;
use stopline_core::{Refusal, RefusalCode, Role};
use stopline_supervisor::{
    CommandSpec, Containment, GatewayNamespace, StdioMode, UserIdentity, Worker, WorkerSpec,
};

/// A started agent and what must live as long as it does.
pub struct Started {
    /// The worker.
    pub worker: Worker,
    /// The namespace and its forwarder (`--net gateway-only`); dropping it stops forwarding.
    pub namespace: Option<GatewayNamespace>,
    /// The URL the agent was handed.
    pub agent_url: String,
}

/// What to start.
pub struct StartPlan<'a> {
    /// The validated card.
    pub card: &'a LoadedCard,
    /// The canonical project root (the agent's working directory).
    pub project: &'a Path,
    /// The command and its arguments.
    pub command: &'a [OsString],
    /// `--user`, or `None` for `--unconfined`.
    pub identity: Option<&'a UserIdentity>,
    /// The network mode.
    pub net: NetMode,
    /// The probed gateway.
    pub gateway: &'a Gateway,
}

/// The group name the supervisor will use for this run's agent.
pub fn group_name(card: &LoadedCard) -> String {
    WorkerSpec::new(
        card.run_id.as_str(),
        card.agent.as_str(),
        CommandSpec::new("", [""; 0]),
    )
    .group_name()
}

/// Mint the token and start the agent.
pub fn start(ctx: &Context, plan: &StartPlan<'_>) -> Result<Started, RunError> {
    let card = plan.card;
    let minted = tokens::issue(
        ctx,
        &IssueArgs {
            agent: card.agent.to_string(),
            role: Role::Agent,
            project: Some(plan.project.display().to_string()),
            run: Some(card.run_id.to_string()),
            ttl_s: card.ttl_s(),
            budgets: card.budgets(),
        },
    )?;
    let namespace = match plan.net {
        NetMode::Host => None,
        NetMode::GatewayOnly => Some(
            GatewayNamespace::create(plan.gateway.addr, plan.gateway.addr.port())
                .map_err(RunError::Namespace)?,
        ),
    };
    let agent_url = match &namespace {
        Some(namespace) => format!("http://{}", namespace.inside_addr()),
        None => plan.gateway.url.clone(),
    };
    let session = Session {
        token: &minted.token,
        session: format!("{}/{}", card.run_id, card.agent),
        gateway_url: &agent_url,
        user: plan
            .identity
            .map(|identity| (identity.name.as_str(), identity.home.as_path())),
    };
    let env = agent_environment(std::env::vars_os(), &session);
    let (program, args) = plan
        .command
        .split_first()
        .ok_or_else(|| Refusal::new(RefusalCode::BadRequest, "no command to run after --"))?;
    let command = CommandSpec {
        program: program.clone(),
        args: args.to_vec(),
        env,
        cwd: plan.project.to_path_buf(),
        user: plan.identity.cloned(),
        stdin: StdioMode::Inherit,
        stdout: StdioMode::Inherit,
        stderr: StdioMode::Inherit,
    };
    let mut spec = WorkerSpec::new(card.run_id.as_str(), card.agent.as_str(), command);
    spec.containment = Containment::Auto;
    spec.unconfined = plan.identity.is_none();
    let worker = Worker::start(spec, namespace.as_ref().map(|n| n.namespace_fd()))
        .map_err(RunError::Start)?;
    tracing::info!(
        pid = worker.pid(),
        method = worker.method().as_str(),
        "agent started"
    );
    Ok(Started {
        worker,
        namespace,
        agent_url,
    })
}
