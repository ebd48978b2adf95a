//! Starting the agent of a run: mint its token, build its environment, set up the gateway-only
//! network namespace if asked, and start the command in its own cgroup v2 group (joined before
//! exec) through the supervisor.
//!
//! Called only after the run was recorded. Nothing here decides whether a run may start; the
//! preflight did. A failure here leaves no process behind: the supervisor removes a group whose
//! spawn failed, and no group exists before the spawn.

use super::card::LoadedCard;
use super::codex::CodexHome;
use super::environment::{agent_environment, Session};
use super::gateway::Gateway;
use super::relay::Relays;
use super::{NetMode, RunError};
use std::ffi::OsString;
use std::path::Path;
use std::path::PathBuf;
use stopline_control::context::Context;
use stopline_control::tokens::{self, IssueArgs};
use stopline_core::{Refusal, RefusalCode, Role};
use stopline_supervisor::{
    CommandSpec, Confinement, Containment, GatewayNamespace, Limits, PrivateMounts, StdioMode,
    UserIdentity, Worker, WorkerSpec,
};

/// A started agent and what must live as long as it does.
pub struct Started {
    /// The worker.
    pub worker: Worker,
    /// The namespace and its forwarder (`--net gateway-only`); dropping it stops forwarding.
    pub namespace: Option<GatewayNamespace>,
    /// The URL the agent was handed.
    pub agent_url: String,
    /// The copies of the agent's standard streams.
    pub relays: Relays,
    /// A Codex agent's own `CODEX_HOME` (removed when dropped).
    pub codex_home: Option<CodexHome>,
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
    /// `--stdin`: feed the agent the supervisor's stdin through a pipe.
    pub stdin: bool,
    /// `--share PATH`: paths mapped into the private mount namespace (gateway-only).
    pub share: &'a [PathBuf],
    /// For a Codex agent, the program its hook runs (`<it> hook codex`).
    pub codex: Option<PathBuf>,
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
            labels: card.labels()?,
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
    let mut env = agent_environment(std::env::vars_os(), &session);
    // A Codex agent's provider and hook, in a home of its own, mapped into its private mounts.
    let codex_home = match &plan.codex {
        Some(stopline) => Some(super::codex::prepare(
            &std::env::temp_dir(),
            card.run_id.as_str(),
            &agent_url,
            stopline,
        )?),
        None => None,
    };
    let mut share = plan.share.to_vec();
    if let Some(home) = &codex_home {
        env.insert("CODEX_HOME".into(), home.dir().as_os_str().to_owned());
        share.push(home.dir().to_path_buf());
    }
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
        // Never the operator's terminal (docs/reference.md §6): pipes the supervisor relays.
        stdin: if plan.stdin {
            StdioMode::Piped
        } else {
            StdioMode::Null
        },
        stdout: StdioMode::Piped,
        stderr: StdioMode::Piped,
        confinement: Confinement {
            new_session: true,
            no_new_privs: true,
            // SysV objects and POSIX queues die with the agent and none of a uid's last holder's
            // reach it (docs/reference.md §6). Needs root, as every uid drop does; an unconfined run by
            // another user hands no uid over.
            new_ipc_namespace: rustix::process::geteuid().is_root(),
            // Under gateway-only it sees only its own processes (docs/reference.md §6).
            new_pid_namespace: plan.net == NetMode::GatewayOnly,
            limits: Default::default(),
            mounts: match plan.net {
                NetMode::GatewayOnly => Some(PrivateMounts { share }),
                NetMode::Host => None,
            },
        },
    };
    let mut spec = WorkerSpec::new(card.run_id.as_str(), card.agent.as_str(), command);
    spec.containment = Containment::Auto;
    spec.unconfined = plan.identity.is_none();
    spec.limits = card_limits(card);
    let mut worker = Worker::start(spec, namespace.as_ref().map(|n| n.namespace_fd()))
        .map_err(RunError::Start)?;
    let child = worker.child_mut();
    let relays = Relays::start(child.stdin.take(), child.stdout.take(), child.stderr.take());
    tracing::info!(
        pid = worker.pid(),
        method = worker.method().as_str(),
        "agent started"
    );
    Ok(Started {
        worker,
        namespace,
        agent_url,
        relays,
        codex_home,
    })
}

/// The card's `limits`, with the default process ceiling when it names none.
fn card_limits(card: &LoadedCard) -> Limits {
    let mut limits = Limits::default();
    if let Some(given) = card.card.limits {
        if given.pids.is_some() {
            limits.pids = given.pids;
        }
        limits.memory_mb = given.memory_mb;
    }
    limits
}
