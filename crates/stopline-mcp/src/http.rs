//! The Streamable HTTP proxy at `/mcp/<server>`: `POST` for messages, `GET` for the server's
//! stream, `DELETE` to end a session. The gateway mounts [`router`].
//!
//! Each `POST` is authenticated (bearer token), parsed, checked against [`crate::frame`]'s rules
//! (a notification other than `notifications/*`, or a batch with a duplicate id, is HTTP 400 and
//! nothing is forwarded), and governed member by member; each surviving member is forwarded on
//! its own, re-serialized, with the agent's token stripped — a batch's members one by one, their
//! answers gathered into one batch reply. A single message's answer is passed back as it comes:
//! JSON whole, SSE event by event through [`crate::pump`]. Exchanges run detached from the agent
//! (`upstream.rs`): an agent that goes away does not leave them in doubt, and one an emergency
//! covers is answered at once. Sessions (`Mcp-Session-Id`) are passed through
//! and bound to the agent that opened them, so one agent cannot ride another's session.
//! Nothing here decides admission; the [`Governor`] does.

use crate::frame::check_frame;
use crate::govern::{govern_frame, Member, ToolCatalog};
use crate::governor::{Call, Caller, Governor, Outcome};
use crate::jsonrpc::{parse, Incoming, Message};
use crate::origin::{with_cors, Origins};
use crate::reply::{json_reply, local_reply, refusal_reply, reply_messages};
use crate::sessions::SessionBindings;
use crate::upstream::{self, Exchange};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use foldhash::HashMap;
use futures::future::BoxFuture;
use futures::StreamExt as _;
use std::collections::BTreeMap;
use std::sync::Arc;
use stopline_core::{Refusal, RefusalCode};
use stopline_gateway::config::UpstreamHeaders;
use stopline_gateway::{McpPost, McpServerConfig, Mount};

/// Headers the agent sends that the upstream needs (never `Authorization`).
pub const FORWARDED_REQUEST_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// [`FORWARDED_REQUEST_HEADERS`] as header names, made at compile time: a lookup by a `&str`
/// parses the name again on every call (the read-only path's profile, BENCHMARKS.md).
const FORWARDED_NAMES: [header::HeaderName; 4] = [
    header::ACCEPT,
    header::HeaderName::from_static(FORWARDED_REQUEST_HEADERS[1]),
    header::HeaderName::from_static(FORWARDED_REQUEST_HEADERS[2]),
    header::HeaderName::from_static(FORWARDED_REQUEST_HEADERS[3]),
];

/// The proxy's shared state.
pub struct McpState {
    pub(crate) governor: Arc<dyn Governor>,
    pub(crate) servers: BTreeMap<String, McpServerConfig>,
    pub(crate) catalog: Arc<ToolCatalog>,
    pub(crate) client: stopline_gateway::client::UpstreamClient,
    /// Which agent opened which session.
    pub(crate) sessions: SessionBindings,
    pub(crate) stdio: Arc<upstream::StdioSessions>,
    /// Each configured server's name, route and upstream, made once (not on every message).
    pub(crate) entries: HashMap<String, Arc<ServerEntry>>,
    /// The `Origin`s served (`allowed_origins`).
    pub(crate) origins: Origins,
    /// Requests whose answers a resumed stream may still deliver (SEP-1699).
    pub(crate) parked: Arc<crate::resume::Parked>,
}

/// What the proxy takes from the gateway's configuration besides its servers.
#[derive(Debug, Clone, Default)]
pub struct ProxySettings {
    /// `allowed_origins` (`None`: the loopback origins).
    pub allowed_origins: Option<Vec<String>>,
    /// Each server's own upstream headers (`[mcp.<server>] headers`, resolved).
    pub headers: BTreeMap<String, UpstreamHeaders>,
}

/// A configured server as every message to it needs it.
#[derive(Debug)]
pub(crate) struct ServerEntry {
    /// Its name (`everything` for `/mcp/everything`).
    pub name: Arc<str>,
    /// The path it is served at: the `route` its calls log.
    pub route: Arc<str>,
    /// Where its messages go.
    pub upstream: Upstream,
    /// An HTTP upstream's URL, parsed (`None`: not a URL, so nothing can be delivered).
    pub target: Option<Arc<upstream::Target>>,
}

/// Where a server's messages go.
#[derive(Debug, Clone, PartialEq)]
pub enum Upstream {
    /// A Streamable HTTP endpoint.
    Http(String),
    /// A stdio server the proxy starts per session: program and arguments.
    Stdio(Vec<String>),
}

/// The upstream a `[mcp.<server>]` table names: exactly one of `url` and `command`.
pub fn upstream_of(config: &McpServerConfig) -> Option<Upstream> {
    match (&config.url, &config.command) {
        (Some(url), None) => Some(Upstream::Http(url.clone())),
        (None, Some(command)) if !command.is_empty() => Some(Upstream::Stdio(command.clone())),
        _ => None,
    }
}

/// The MCP proxy over the gateway's governor and its `[mcp.*]` configuration, ready to be
/// mounted on the gateway (`ServeOptions::mount`): its routes, and its `POST` handler served
/// before the gateway's router.
pub fn router(governor: stopline_gateway::Governor) -> Mount {
    let config = governor.config();
    let settings = ProxySettings {
        allowed_origins: config.base.allowed_origins.clone(),
        headers: config.mcp_headers.clone(),
    };
    router_with(Arc::new(governor), config.mcp.clone(), settings)
}

/// The MCP proxy over any governor and server table.
pub fn router_with(
    governor: Arc<dyn Governor>,
    servers: BTreeMap<String, McpServerConfig>,
    settings: ProxySettings,
) -> Mount {
    for (name, server) in &servers {
        if upstream_of(server).is_none() {
            tracing::error!(server = %name, "[mcp.{name}] names neither or both of url and command; its calls are refused");
        }
    }
    // A server whose table names no upstream has no entry: its calls are refused as to a
    // server that is not configured.
    let entries = servers
        .iter()
        .filter_map(|(name, server)| {
            let upstream = upstream_of(server)?;
            let target = match &upstream {
                Upstream::Http(url) => upstream::Target::parse(url).ok().map(|target| {
                    let headers = settings.headers.get(name).map(|h| h.0.clone());
                    Arc::new(target.with_headers(headers.unwrap_or_default()))
                }),
                Upstream::Stdio(_) => None,
            };
            let entry = ServerEntry {
                name: Arc::from(name.as_str()),
                route: Arc::from(format!("/mcp/{name}")),
                upstream,
                target,
            };
            Some((name.clone(), Arc::new(entry)))
        })
        .collect();
    let state = Arc::new(McpState {
        governor,
        servers,
        entries,
        catalog: Arc::new(ToolCatalog::default()),
        client: stopline_gateway::client::UpstreamClient::new(),
        sessions: SessionBindings::default(),
        stdio: Arc::default(),
        origins: Origins::new(settings.allowed_origins),
        parked: Arc::default(),
    });
    // Each HTTP server's sessions whose agents went quiet are ended upstream.
    for (name, server) in &state.servers {
        if let Some(Upstream::Http(_)) = upstream_of(server) {
            end_idle_sessions(&state, name, crate::stdio_spawn::idle_bound(server));
        }
    }
    // Each stdio server's first warm spare, so even the first session finds one.
    for (name, server) in &state.servers {
        if let Some(Upstream::Stdio(command)) = upstream_of(server) {
            state.stdio.refill(name, &command, server);
        }
    }
    let router = Router::new()
        .route(
            "/mcp/{server}",
            post(handle_post)
                .get(handle_get)
                .delete(handle_delete)
                .options(handle_options),
        )
        .with_state(state.clone());
    Mount {
        router,
        mcp_post: Some(Arc::new(Post(state))),
    }
}

/// `POST /mcp/<server>` served on hyper directly, before the gateway's router: the request
/// takes the same steps as through [`handle_post`] (the router's body limit and its refusal
/// included), with the route logged as the router's middleware would.
struct Post(Arc<McpState>);

impl McpPost for Post {
    fn post(&self, request: hyper::Request<hyper::body::Incoming>) -> BoxFuture<'static, Response> {
        let state = self.0.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let uri = std::mem::take(&mut parts.uri);
            let path = uri.path();
            let server = stopline_gateway::mcp_post_server(&parts.method, path).unwrap_or("");
            let entry = state.entries.get(server).cloned();
            let route = entry
                .as_ref()
                .map_or_else(|| Arc::from(path), |e| e.route.clone());
            let headers = std::mem::take(&mut parts.headers);
            let request = axum::extract::Request::from_parts(parts, Body::new(body));
            stopline_gateway::logs::in_route(
                route,
                post_message(&state, server, entry, headers, request),
            )
            .await
        })
    }
}

impl McpState {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, Refusal> {
        let value = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.governor.authenticate(value)
    }

    /// The parsed URL of `server`'s HTTP upstream (`None`: not a URL).
    fn target(&self, server: &str) -> Option<Arc<upstream::Target>> {
        self.entries.get(server).and_then(|e| e.target.clone())
    }

    /// The upstream of `server`, or a 404 reply.
    fn upstream(&self, server: &str) -> Result<Upstream, Box<Response>> {
        match self.entries.get(server) {
            Some(entry) => Ok(entry.upstream.clone()),
            None => Err(Box::new(not_found(server))),
        }
    }

    /// Authenticate and check the session: the caller, or the reply that refuses it.
    fn admit_caller(&self, server: &str, headers: &HeaderMap) -> Result<Caller, Box<Response>> {
        let caller = self
            .authenticate(headers)
            .map_err(|r| Box::new(unauthenticated(&r)))?;
        self.sessions
            .check(server, headers, &caller)
            .map_err(|r| Box::new(refusal_reply(None, &r)))?;
        Ok(caller)
    }
}

/// `POST /mcp/{server}` through the router (a path the handler served before the router
/// leaves to it, e.g. a percent-encoded server name, which the router decodes).
async fn handle_post(
    State(state): State<Arc<McpState>>,
    Path(server): Path<String>,
    mut request: axum::extract::Request,
) -> Response {
    // The headers are taken, not copied (axum's `HeaderMap` extractor clones them).
    let headers = std::mem::take(request.headers_mut());
    let entry = state.entries.get(&server).cloned();
    post_message(&state, &server, entry, headers, request).await
}

/// One `POST` of messages to `server` (`entry`, when it is configured), however it was routed:
/// an `Origin` not allowed is refused before anything else; an allowed one gets its CORS
/// headers on the answer.
async fn post_message(
    state: &Arc<McpState>,
    server: &str,
    entry: Option<Arc<ServerEntry>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    let origin = match state.origins.check(&headers) {
        Ok(origin) => origin,
        Err(refused) => return *refused,
    };
    with_cors(
        origin,
        post_messages(state, server, entry, headers, request).await,
    )
}

async fn post_messages(
    state: &Arc<McpState>,
    server: &str,
    entry: Option<Arc<ServerEntry>>,
    headers: HeaderMap,
    request: axum::extract::Request,
) -> Response {
    // The body is read under the router's body limit as the `Bytes` extractor reads it (the
    // same limit and refusal whichever way the request came).
    let body = match Bytes::from_request(request, &()).await {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
    };
    let Some(entry) = entry else {
        return unknown_server(state, server, &headers, &body, not_found(server)).await;
    };
    let caller = match state.admit_caller(server, &headers) {
        Ok(caller) => caller,
        Err(reply) => return *reply,
    };
    let frame = match parse(&body) {
        Ok(frame) => frame,
        Err(error) => return json_reply(400, Incoming::Single(error.to_response()).to_bytes()),
    };
    if let Err(error) = check_frame(&frame) {
        tracing::info!(agent = %caller.agent, "mcp frame refused: {error}");
        return json_reply(400, Incoming::Single(error.to_response()).to_bytes());
    }
    let initialize = frame
        .messages()
        .iter()
        .any(|m| m.method() == Some("initialize"));
    let mut governed = govern_frame(
        state.governor.as_ref(),
        &state.catalog,
        server,
        &caller,
        frame,
    )
    .await;
    let dispatch = governed.dispatch(&caller);
    if dispatch.members.is_empty() {
        return local_reply(governed);
    }
    let exchange = Exchange {
        state: state.clone(),
        server: entry.name.clone(),
        caller,
        headers: forwarded_headers(&headers),
        initialize,
    };
    let mut members = dispatch.members;
    if !governed.is_batch() && members.len() == 1 {
        let member = members.pop().expect("one member");
        return forward(exchange, &entry, member).await;
    }
    // A batch: each member on its own (never as a batch), their answers gathered into one.
    let replies = futures::future::join_all(
        members
            .into_iter()
            .map(|member| forward(exchange.clone(), &entry, member)),
    )
    .await;
    let mut messages = Vec::new();
    for reply in replies {
        messages.extend(
            reply_messages(reply)
                .await
                .into_iter()
                .filter(|m| matches!(m, Message::Response { .. })),
        );
    }
    messages.append(&mut governed.local);
    match Incoming::from_messages(messages, true) {
        Some(frame) => json_reply(200, frame.to_bytes()),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// The agent's headers an upstream gets ([`FORWARDED_REQUEST_HEADERS`]; never its token).
pub(crate) fn forwarded_headers(headers: &HeaderMap) -> HeaderMap {
    // Room for the two the upstream request adds (`content-type`, a default `accept`).
    let mut out = HeaderMap::with_capacity(FORWARDED_NAMES.len() + 2);
    for name in FORWARDED_NAMES {
        if let Some(value) = headers.get(&name) {
            out.insert(name, value.clone());
        }
    }
    out
}

/// Forward one member to the server's upstream.
async fn forward(exchange: Exchange, entry: &ServerEntry, member: Member) -> Response {
    match &entry.upstream {
        Upstream::Http(_) => upstream::post_http(exchange, entry.target.clone(), member).await,
        Upstream::Stdio(command) => upstream::post_stdio(exchange, command.clone(), member).await,
    }
}

/// End upstream, with `DELETE`, every session of HTTP server `server` unused for `idle`
/// (`session_idle_s`): the gateway's session is over, and an agent that vanished without ending
/// it must not leave the upstream holding it. Runs until the proxy is dropped.
fn end_idle_sessions(state: &Arc<McpState>, server: &str, idle: std::time::Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (state, server) = (Arc::downgrade(state), server.to_string());
    let every = (idle / 2).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(5),
    );
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(state) = state.upgrade() else {
                return;
            };
            for session in state.sessions.take_idle(&server, idle) {
                let Ok(id) = HeaderValue::from_str(&session) else {
                    continue;
                };
                let mut headers = HeaderMap::new();
                headers.insert("mcp-session-id", id);
                let ended = upstream::delete_http(&state, state.target(&server), &headers).await;
                tracing::info!(server = %server, status = %ended.status(), "ended an idle MCP session upstream");
            }
        }
    });
}

/// The 401 for a missing or invalid token: the refusal, with `WWW-Authenticate` (the only
/// refusal an MCP client should meet as an HTTP error: it is about the transport's credentials).
fn unauthenticated(refusal: &Refusal) -> Response {
    let mut reply = refusal_reply(None, refusal);
    reply.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"stopline\""),
    );
    reply
}

/// The 404 for a server that is not configured (or names no upstream).
fn not_found(server: &str) -> Response {
    let refusal = Refusal::new(
        RefusalCode::BadRequest,
        format!("no MCP server named {server:?} is configured"),
    );
    let mut reply = refusal_reply(None, &refusal);
    *reply.status_mut() = StatusCode::NOT_FOUND;
    reply
}

/// A call to a server that is not configured is egress the gateway refuses. A caller it can
/// authenticate is governed like any other call, so every request in the frame is refused
/// `egress_refused` and counts toward the agent's `refused_egress` breaker (docs/reference.md §8); anyone
/// else, and anything the governor would not refuse, gets the plain 404. Nothing is forwarded.
async fn unknown_server(
    state: &Arc<McpState>,
    server: &str,
    headers: &HeaderMap,
    body: &Bytes,
    not_found: Response,
) -> Response {
    let (Ok(caller), Ok(frame)) = (state.authenticate(headers), parse(body)) else {
        return not_found;
    };
    let mut governed = govern_frame(
        state.governor.as_ref(),
        &state.catalog,
        server,
        &caller,
        frame,
    )
    .await;
    let dispatch = governed.dispatch(&caller);
    if !dispatch.members.is_empty() {
        return not_found;
    }
    local_reply(governed)
}

async fn handle_get(
    State(state): State<Arc<McpState>>,
    Path(server): Path<String>,
    headers: HeaderMap,
) -> Response {
    match state.origins.check(&headers) {
        Ok(origin) => with_cors(origin, get_stream(state, server, headers).await),
        Err(refused) => *refused,
    }
}

async fn get_stream(state: Arc<McpState>, server: String, headers: HeaderMap) -> Response {
    let upstream = match state.upstream(&server) {
        Ok(upstream) => upstream,
        Err(reply) => return *reply,
    };
    let caller = match state.admit_caller(&server, &headers) {
        Ok(caller) => caller,
        Err(reply) => return *reply,
    };
    let call = Call {
        server: server.clone(),
        method: "GET".into(),
        tool: None,
        read_only: true,
        request_id: None,
    };
    let mut admission = match state.governor.admit(&caller, &call).await {
        Ok(admission) => admission,
        Err(refusal) => return refusal_reply(None, &refusal),
    };
    if let Err(refusal) = admission.dispatch() {
        return refusal_reply(None, &refusal);
    }
    let reply = match upstream {
        Upstream::Http(_) => {
            upstream::get_http(&state, &server, &caller, state.target(&server), &headers).await
        }
        Upstream::Stdio(_) => upstream::get_stdio(&state, &server, &caller, &headers).await,
    };
    // The session is in use for as long as the agent holds its stream.
    let reply = match state.sessions.hold(&server, &headers) {
        Some(hold) => {
            let (parts, body) = reply.into_parts();
            let body = body.into_data_stream().map(move |chunk| {
                let _held = &hold;
                chunk
            });
            Response::from_parts(parts, Body::from_stream(body))
        }
        None => reply,
    };
    let reached = reply.status() != StatusCode::BAD_GATEWAY;
    admission.finish(if reached {
        Outcome::Committed
    } else {
        Outcome::UpstreamUnreachable
    });
    reply
}

async fn handle_delete(
    State(state): State<Arc<McpState>>,
    Path(server): Path<String>,
    headers: HeaderMap,
) -> Response {
    match state.origins.check(&headers) {
        Ok(origin) => with_cors(origin, end_session(state, server, headers).await),
        Err(refused) => *refused,
    }
}

/// A CORS preflight: answered for an allowed `Origin` (the methods and headers an MCP client
/// sends), refused 403 for any other; without an `Origin` it is not a preflight, and only the
/// allowed methods are named.
async fn handle_options(State(state): State<Arc<McpState>>, headers: HeaderMap) -> Response {
    match state.origins.check(&headers) {
        Ok(Some(origin)) => crate::origin::preflight(origin),
        Ok(None) => (
            StatusCode::NO_CONTENT,
            [(
                header::ALLOW,
                HeaderValue::from_static(crate::origin::METHODS),
            )],
        )
            .into_response(),
        Err(refused) => *refused,
    }
}

async fn end_session(state: Arc<McpState>, server: String, headers: HeaderMap) -> Response {
    let upstream = match state.upstream(&server) {
        Ok(upstream) => upstream,
        Err(reply) => return *reply,
    };
    if let Err(reply) = state.admit_caller(&server, &headers) {
        return *reply;
    }
    // Ending a session is always allowed: it can only reduce what the agent can do.
    state.sessions.forget(&server, &headers);
    match upstream {
        Upstream::Http(_) => upstream::delete_http(&state, state.target(&server), &headers).await,
        Upstream::Stdio(_) => upstream::delete_stdio(&state, &server, &headers).await,
    }
}
