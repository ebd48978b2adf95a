//! The command-line definition (docs/reference.md §3). Flags and names here are a contract.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Kill switch and containment control plane for AI agents.
#[derive(Debug, Parser)]
#[command(name = "stopline", version, about)]
pub struct Cli {
    /// The control directory (default $STOPLINE_HOME, else $XDG_STATE_HOME/stopline).
    #[arg(long, global = true, env = "STOPLINE_HOME")]
    pub home: Option<PathBuf>,
    /// Machine-readable output on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// The distributed backend (`etcd://HOST:PORT[,…][?prefix=/stopline]`, or `etcds://…` for TLS; credentials go in `[etcd]` of config.toml, never here).
    #[arg(long, global = true)]
    pub control: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// A token given by flag, file, or `STOPLINE_TOKEN`.
#[derive(Debug, Args, Clone, Default)]
pub struct TokenArgs {
    /// A token (visible in /proc: prefer --token-file or STOPLINE_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// Read the token from a file.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

/// Task class.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ClassArg {
    /// Safety, logging, heartbeat, audit.
    Critical,
    /// Domain work.
    Noncritical,
}

/// Role of a minted token.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// An agent.
    Agent,
    /// A safety monitor.
    Monitor,
    /// An operator.
    Operator,
    /// Critical infrastructure.
    Critical,
}

/// Reconciliation outcomes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OutcomeArg {
    /// The effect happened.
    Committed,
    /// The effect did not happen.
    Failed,
    /// Given up without knowing.
    Abandoned,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Engage a stop (any admitted caller).
    Engage {
        /// `machine` | `agent:<name>` | `project:<root>` | `run:<id>`
        #[arg(long)]
        scope: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// halt-noncritical | halt-all | emergency (default).
        #[arg(long)]
        level: Option<String>,
        /// Who engages.
        #[arg(long)]
        by: Option<String>,
        /// The caller's token (`--token`, `--token-file`, else `STOPLINE_TOKEN`).
        #[command(flatten)]
        token: TokenArgs,
    },
    /// Lift the halt-level latches of exactly one scope.
    Disengage {
        /// The scope.
        #[arg(long)]
        scope: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// An operator or monitor name.
        #[arg(long)]
        by: Option<String>,
        /// The caller's token (`--token`, `--token-file`, else `STOPLINE_TOKEN`).
        #[command(flatten)]
        token: TokenArgs,
    },
    /// The derived phase, latches, epochs, workers and unresolved operations.
    Status,
    /// Create the control directory whole (0700, latches/, latches.staging/, the full-disk
    /// reserve) and nothing else.
    Init,
    /// One admission decision: exit 0 allow, 3 queue, 4 block.
    Check {
        /// The class asked for.
        #[arg(long, value_enum)]
        class: ClassArg,
        /// The caller's token (`--token`, `--token-file`, else `STOPLINE_TOKEN`).
        #[command(flatten)]
        token: TokenArgs,
        /// An agent name without a token (unprovable identity).
        #[arg(long)]
        agent: Option<String>,
        /// A project directory.
        #[arg(long)]
        project: Option<String>,
        /// A run id.
        #[arg(long)]
        run: Option<String>,
        /// A target (`mcp:<server>:<tool>`, `file:<path>`, `model:<model>`).
        #[arg(long)]
        target: Option<String>,
    },
    /// Tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Owner console: a bounded window for durably prepared work after a machine stop.
    Drain {
        /// Seconds, 1..=3600.
        #[arg(long, allow_negative_numbers = true)]
        deadline: i64,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
    },
    /// Owner console: recovery.
    #[command(subcommand)]
    Recover(RecoverCommand),
    /// Operations.
    #[command(subcommand)]
    Ops(OpsCommand),
    /// MCP: a governed stdio proxy, and a server offering engage and status.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Agent hooks that fail closed.
    #[command(subcommand)]
    Hook(HookCommand),
    /// Run the gateway: the enforcement point agents must pass (docs/reference.md §8).
    Serve {
        /// The listen address (default: the config's `listen`, else 127.0.0.1:7077).
        #[arg(long)]
        listen: Option<String>,
        /// The configuration file (default `<home>/config.toml`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The log's format on stderr: `text` for people, `json` one object a line. What is
        /// logged: `STOPLINE_LOG`, else `RUST_LOG` (default `info`).
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Log one line per admitted call at its end (agent, route, operation target, status,
        /// latency), beside the refusals that are always logged.
        #[arg(long)]
        access_log: bool,
    },
    /// Run an agent under a policy card, contained, and enforce every stop on it (docs/reference.md §6).
    Run {
        /// The policy card (policy-card.v1, JSON or TOML).
        #[arg(long)]
        policy: PathBuf,
        /// The agent (default: the only agent in the card's budgets).
        #[arg(long)]
        agent: Option<String>,
        /// Run the agent as this user: `auto` (the default) takes a fresh uid from `[run]
        /// uid_range` that no live process uses; a NAME is refused `uid_in_use` while that uid
        /// runs another agent or any other process.
        #[arg(long, conflicts_with = "unconfined")]
        user: Option<String>,
        /// Run the agent as the caller's own uid (status marks it unconfined).
        #[arg(long)]
        unconfined: bool,
        /// gateway-only (the default): the agent's only way out is the gateway, and the host's
        /// /tmp, /var/tmp, /run and /dev/shm are replaced by fresh ones; host: the host's
        /// network and filesystem.
        #[arg(long, value_enum, default_value = "gateway-only")]
        net: NetArg,
        /// Map PATH into the agent's private mounts (gateway-only; repeatable). The working
        /// directory is always mapped.
        #[arg(long, value_name = "PATH")]
        share: Vec<PathBuf>,
        /// Feed the agent this process's stdin through a pipe (default: /dev/null). The agent
        /// never gets the terminal itself.
        #[arg(long)]
        stdin: bool,
        /// The gateway handed to the agent (default $STOPLINE_URL, else the config's listen).
        #[arg(long)]
        gateway: Option<String>,
        /// What the agent is, when its program does not say (a wrapper script): `codex` gets a
        /// CODEX_HOME of its own naming the gateway and the stop's hook; `claude-code` has its
        /// stopline hooks checked. Default: told by the program (`codex`, `claude`).
        #[arg(long, value_enum)]
        agent_kind: Option<AgentKindArg>,
        /// The command and its arguments (after --).
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Benchmarks.
    Bench {
        /// Which benchmark (default: all available).
        #[arg(value_enum)]
        which: Option<BenchArg>,
        /// Iterations.
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        /// `history`: operations recorded in the aged home.
        #[arg(long, default_value_t = 100_000)]
        operations: usize,
        /// `history`: engage/disengage cycles in the aged home.
        #[arg(long, default_value_t = 10_000)]
        cycles: usize,
        /// `history`: evidence records in the aged home.
        #[arg(long, default_value_t = 10_000)]
        evidence: usize,
        /// `history`: supervised runs that ran to their end, in the aged home.
        #[arg(long, default_value_t = 10_000)]
        runs: usize,
        /// `history`: token revocations on record for the authority measure.
        #[arg(long, default_value_t = 1_000)]
        revocations: usize,
        /// `history`: samples per measure and home (default 15); `fleet`: rounds (default 5);
        /// `gateway`: rounds (default 7, 3 in the default set).
        #[arg(long)]
        samples: Option<usize>,
        /// `history`: seconds an idle gateway is sampled for CPU and RSS, on each home.
        #[arg(long, default_value_t = 10.0)]
        idle_window_s: f64,
        /// `sessions`: the stdio tool server to start, as one string split at spaces
        /// (default: a minimal POSIX sh MCP server, so only the gateway's own cost is timed).
        #[arg(long)]
        server_command: Option<String>,
        /// `fleet`: the etcd binary to start on loopback (default /usr/bin/etcd).
        #[arg(long)]
        etcd: Option<PathBuf>,
        /// `gateway`: the nginx binary measured beside the gateway (default /usr/sbin/nginx,
        /// when installed).
        #[arg(long)]
        nginx: Option<PathBuf>,
        /// `bare-proxy` (internal): where it listens.
        #[arg(long, hide = true)]
        bare_listen: Option<String>,
        /// `bare-proxy` (internal): what it forwards to.
        #[arg(long, hide = true)]
        bare_upstream: Option<String>,
    },
    /// Check the four-mode machine and the real protocol exhaustively (docs/reference.md §11).
    ModelCheck,
    /// The distributed plane's etcd set-up (docs/reference.md §10).
    #[command(subcommand)]
    Etcd(EtcdCommand),
    /// Print the shell completion script for `bash`, `zsh` or `fish` on stdout (docs/reference.md §3).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: ShellArg,
    },
    /// Print the manual page (roff) on stdout (docs/reference.md §3): `stopline man | man -l -`.
    Man,
    /// Run the boundary battery against this binary (docs/reference.md §11); exit 1 unless every case passed.
    Conformance {
        /// Run only the cases whose id contains this text.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Drill the stop under load and file a control-observation.v1 (docs/reference.md §11); exit 1 if it failed.
    Drill(DrillArgs),
    /// The hash-chained evidence log (docs/reference.md §9).
    #[command(subcommand)]
    Evidence(EvidenceCommand),
    /// Validate the configuration, then make every gateway of this host serving this home
    /// re-read it (`SIGHUP`). A file that does not parse is refused and no gateway is touched;
    /// each gateway logs what it changed and which changed keys need a restart.
    Reload {
        /// The file the gateways were started with (default `<home>/config.toml`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Internal: deliver the latch alerts a CLI command handed over on stdin, with retries.
    /// Started detached by `engage`, `disengage` and `recover apply` when no gateway runs.
    #[command(hide = true)]
    AlertDeliver,
}

/// `completions`: the shells a completion script is generated for.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ShellArg {
    /// GNU bash (`/usr/share/bash-completion/completions/stopline`).
    Bash,
    /// zsh (`_stopline` in a directory of `$fpath`).
    Zsh,
    /// fish (`~/.config/fish/completions/stopline.fish`).
    Fish,
}

/// `serve --log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line an event.
    Text,
    /// One JSON object a line (timestamp, level, target, message and the event's fields).
    Json,
}

/// `run --net`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetArg {
    /// A network namespace whose only way out is the gateway.
    GatewayOnly,
    /// The host's network.
    Host,
}

/// Benchmarks.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BenchArg {
    /// Time to contained against a bare fsync'd file create.
    Engage,
    /// One admission decision against an in-memory view.
    Admission,
    /// Killing a group of N = 10, 100, 500 processes, from latch publication to observed
    /// quiescence (needs cgroup v2 and root; the default set runs it with at most 5
    /// iterations and reports it as an error where it cannot run).
    Kill,
    /// A proxied MCP tool call through the real `stopline serve` beside the bare proxy and nginx,
    /// each its own process, rounds interleaved.
    Gateway,
    /// Opening an MCP session through the gateway with a stdio tool server started ahead
    /// (the warm spare) against one started for the session, side by side.
    Sessions,
    /// `check`, `status`, engage, disengage, gateway reload, engage → refusal and an idle
    /// gateway on an aged home (long history) beside a fresh one and one with only the aged
    /// home's live state, in one run.
    History,
    /// A budgeted tool call with its budget kept in etcd (the fleet ledger) against the same
    /// call on the local control directory, through two real `stopline serve` processes side by
    /// side (starts its own etcd on loopback: needs Debian's etcd-server or --etcd).
    Fleet,
    /// Internal: the bare proxy `bench gateway` starts as its own process (`--bare-listen
    /// ADDR --bare-upstream URL`), serving until it is ended.
    #[value(hide = true)]
    BareProxy,
}

/// `mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Wrap a stdio MCP server: every message is governed; refusals are answered here.
    Proxy {
        /// The caller's token (`--token`, `--token-file`, else `STOPLINE_TOKEN`).
        #[command(flatten)]
        token: TokenArgs,
        /// The server's name in operation targets (`mcp:<name>:<tool>`) and in `[mcp.<name>]`.
        #[arg(long, default_value = "stdio")]
        name: String,
        /// The server command and its arguments (after --).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// An MCP server on stdio whose tools are engage and status (no recovery).
    Serve,
}

/// `run --agent-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentKindArg {
    /// The Codex CLI.
    Codex,
    /// Claude Code.
    ClaudeCode,
    /// Anything else (no agent-specific wiring).
    Other,
}

/// `hook …`.
#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// Claude Code PreToolUse hook: exit 0 allows, exit 2 blocks (errors included).
    ClaudeCode,
    /// Codex PreToolUse hook: exit 0 allows, exit 2 with the reason on stderr blocks (errors
    /// included).
    Codex,
}

/// `token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token.
    Issue {
        /// The agent.
        #[arg(long)]
        agent: String,
        /// Its role.
        #[arg(long, value_enum, default_value = "agent")]
        role: RoleArg,
        /// Its project root.
        #[arg(long)]
        project: Option<String>,
        /// Its run.
        #[arg(long)]
        run: Option<String>,
        /// Lifetime in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
        /// KIND=N (steps, tool_calls, tokens, spend_usd, wall_clock_s).
        #[arg(long)]
        budget: Vec<String>,
        /// KEY=VALUE signed into the token (repeatable; names' characters).
        #[arg(long)]
        label: Vec<String>,
    },
    /// Mint a child token under a parent.
    Delegate {
        /// The parent token.
        #[arg(long)]
        parent: Option<String>,
        /// Read the parent token from a file.
        #[arg(long)]
        parent_file: Option<PathBuf>,
        /// The child agent.
        #[arg(long)]
        agent: String,
        /// Lifetime in seconds.
        #[arg(long)]
        ttl: Option<u64>,
        /// KIND=N, carved from the parent's.
        #[arg(long)]
        budget: Vec<String>,
        /// KEY=VALUE added to the parent's labels (repeatable; never changes one).
        #[arg(long)]
        label: Vec<String>,
    },
    /// Verify a token (signature, expiry, epoch standing).
    Verify {
        /// The token (else --token-file / STOPLINE_TOKEN).
        token: Option<String>,
        /// Read the token from a file.
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
    /// The live tokens minted here and their delegates (a gateway's /v1/delegate included).
    List,
    /// Refuse one token from now on, durably (docs/reference.md §5, "Revoking one token").
    Revoke {
        /// The token's id (its jti, as `token list` shows it).
        id: String,
        /// Refuse every token delegated under it too, at any depth.
        #[arg(long)]
        with_delegates: bool,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// A configured operator's name.
        #[arg(long)]
        by: Option<String>,
        /// An operator's token (`--token`, `--token-file`, else `STOPLINE_TOKEN`).
        #[command(flatten)]
        token: TokenArgs,
    },
}

/// `recover …`.
#[derive(Debug, Subcommand)]
pub enum RecoverCommand {
    /// Fix the plan: exact latch names and the census.
    Plan {
        /// The scope.
        #[arg(long)]
        scope: String,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
    },
    /// Apply a plan.
    Apply {
        /// The plan id.
        #[arg(long)]
        plan: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
    },
    /// Truncate a torn WAL tail and rebuild epoch.json from a valid WAL (and, in etcd mode,
    /// re-found a plane that went back below this host's high-water marks).
    Repair {
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
    },
    /// etcd mode: publish this host's token verification key in place of the plane's and pin
    /// it here (or, with --adopt, pin the key the plane publishes now).
    RotateKey {
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
        /// Pin the key the plane publishes now instead (the owner rotated it from another host).
        #[arg(long)]
        adopt: bool,
    },
}

/// `etcd …`.
#[derive(Debug, Subcommand)]
pub enum EtcdCommand {
    /// Print the etcd role and user set-up for a prefix as etcdctl commands (an operator role
    /// that may write the prefix, a gateway role that may write only registrations and
    /// acknowledgements, no agent role, then `auth enable`), or apply it with --apply through
    /// --control (as the `[etcd]` user, or before auth is enabled).
    Roles {
        /// The key prefix, e.g. /stopline.
        #[arg(long)]
        prefix: String,
        /// Apply through the client instead of printing.
        #[arg(long)]
        apply: bool,
        /// --apply: the file holding root's password (mode 0600).
        #[arg(long, requires = "apply")]
        root_password_file: Option<PathBuf>,
        /// --apply: the file holding stopline-operator's password (mode 0600).
        #[arg(long, requires = "apply")]
        operator_password_file: Option<PathBuf>,
        /// --apply: the file holding stopline-gateway's password (mode 0600).
        #[arg(long, requires = "apply")]
        gateway_password_file: Option<PathBuf>,
    },
}

/// `ops …`.
#[derive(Debug, Subcommand)]
pub enum OpsCommand {
    /// List operations.
    List {
        /// Only those without an outcome.
        #[arg(long)]
        unresolved: bool,
        /// Only unresolved operations prepared more than SECS ago (the age-based in-doubt query).
        #[arg(long, value_name = "SECS")]
        older_than: Option<u64>,
    },
    /// Rewrite the open-set snapshot of every journal that grew and move the journals of
    /// writers that are gone to ops/archive/, so gates read the open operations and not the
    /// history; fold gone writers' spending journals into spend/settled.json and move them to
    /// spend/archive/, so a budget reservation reads that snapshot (a gateway does this every
    /// minute; the history stays unless `[retention] gone_journals = "prune"`).
    Compact,
    /// Owner console: record the outcome of an unresolved operation.
    Reconcile {
        /// The operation id.
        id: String,
        /// The outcome.
        #[arg(long, value_enum)]
        outcome: OutcomeArg,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// The operator.
        #[arg(long)]
        by: Option<String>,
    },
}

/// `drill` flags (docs/reference.md §11).
#[derive(Debug, Args)]
pub struct DrillArgs {
    /// Top-level agents.
    #[arg(long, default_value_t = 10)]
    pub agents: usize,
    /// Delegated sub-agents per agent.
    #[arg(long, default_value_t = 2)]
    pub subagents: usize,
    /// The earliest pull; it lands at a random moment up to half as long again later.
    #[arg(long, default_value_t = 500)]
    pub pull_after_ms: u64,
    /// The window watched after the trip (always longer than the longest task; default twice
    /// the longest task, at least 1000 ms).
    #[arg(long)]
    pub window_ms: Option<u64>,
    /// The scope to stop (default: the drill's own run, `run:drill-<id>`).
    #[arg(long)]
    pub scope: Option<String>,
    /// halt-noncritical | halt-all | emergency (default).
    #[arg(long, default_value = "emergency")]
    pub level: String,
    /// The harness version the drill is recorded against.
    #[arg(long, default_value = "drill")]
    pub harness_version: String,
    /// Drill a live gateway (over this home), stopping only the drill's own run.
    #[arg(long)]
    pub against: Option<String>,
    /// The p99 time to first rejection above which the drill fails.
    #[arg(long, default_value_t = 1000)]
    pub target_ms: u64,
    /// Drills in a row (each recorded); exit 1 if any failed.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Numbers of agents to sweep, e.g. 10,50,100,200 (`--repeat` drills at each).
    #[arg(long, value_delimiter = ',')]
    pub sweep: Vec<usize>,
    /// With --sweep: write the plot of time to first rejection against agents (SVG) here.
    #[arg(long, requires = "sweep")]
    pub plot: Option<PathBuf>,
    /// Test knob: the drill's own gateway swaps in a changed view this many ms late.
    #[arg(long, hide = true)]
    pub slow_view_ms: Option<u64>,
    /// Also run the floor: the same load against a fresh gateway whose stop was engaged before
    /// the load started, its time to first rejection reported beside the drill's (`floor`).
    #[arg(long)]
    pub floor: bool,
}

/// `evidence …`.
#[derive(Debug, Subcommand)]
pub enum EvidenceCommand {
    /// Check the chain (naming the first break) and report operations admitted after a trip:
    /// the newest two segments of the log (the current one and its link into the one before).
    Verify {
        /// Verify every segment, from the log's first record.
        #[arg(long)]
        all: bool,
    },
    /// Every record in the evidence log.
    List,
}
