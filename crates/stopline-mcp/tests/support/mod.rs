//! What this crate's in-process gateway tests share: a throwaway home whose `config.toml` the
//! test writes, the real gateway started in process with the Streamable HTTP proxy mounted, the
//! home's control context, an agent token minted there, and an emergency engaged the way an
//! operator at the console engages one. Their upstreams are `stopline_testkit::upstream`'s.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
// Each test binary uses part of this.
#![allow(dead_code)]

use stopline_control::config::Config;
use stopline_control::receipts::EngageReceipt;
use stopline_control::{engage, tokens, Context};
use stopline_core::Role;
use stopline_gateway::{start, RunningGateway, ServeOptions};
use stopline_store::Store;

/// A running gateway over a throwaway home. Fields drop in order: the gateway (shut it down
/// first) before the directory it runs in.
pub struct World {
    /// The gateway, `[mcp.*]` mounted at `/mcp/<server>`.
    pub gateway: RunningGateway,
    /// The home's control context (its store, the default configuration).
    pub ctx: Context,
    /// An agent token of the world's agent (ten minutes).
    pub token: String,
    _dir: tempfile::TempDir,
}

impl World {
    /// The home with `config` as its `config.toml`, the gateway started over it, and a token
    /// for `agent`.
    pub async fn start(config: &str, agent: &str) -> World {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("config.toml"), config).unwrap();
        let gateway = start(ServeOptions {
            home: home.clone(),
            config: None,
            listen: Some("127.0.0.1:0".into()),
            mount: Some(Box::new(stopline_mcp::http::router)),
            access_log: false,
        })
        .await
        .expect("gateway");
        let ctx = Context::new(Store::open(&home), Config::default());
        let args = tokens::IssueArgs::new(agent, Role::Agent, 600);
        let token = tokens::issue(&ctx, &args).expect("token").token;
        World {
            gateway,
            ctx,
            token,
            _dir: dir,
        }
    }

    /// `http://<gateway>/mcp/<server>`.
    pub fn mcp_url(&self, server: &str) -> String {
        format!("http://{}/mcp/{server}", self.gateway.addr)
    }

    /// `POST` a JSON-RPC `body` to `server` as the world's agent (in `session` when given),
    /// accepting JSON or an event stream, on a client of its own (its own connection).
    pub async fn post_rpc(
        &self,
        server: &str,
        session: Option<&str>,
        body: &serde_json::Value,
    ) -> reqwest::Response {
        let mut request = client()
            .post(self.mcp_url(server))
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream");
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.json(body).send().await.unwrap()
    }

    /// Open the server's event stream of `session` on `server` (`GET`), resuming after
    /// `last_event_id` when given, on a client of its own (its own connection).
    pub async fn open_stream(
        &self,
        server: &str,
        session: &str,
        last_event_id: Option<&str>,
    ) -> reqwest::Response {
        let mut request = client()
            .get(self.mcp_url(server))
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", session);
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last);
        }
        request.send().await.unwrap()
    }

    /// Engage an emergency of `scope` from the console (off the async workers), as `tester`.
    pub async fn emergency(&self, scope: &str, reason: &str) -> EngageReceipt {
        let (ctx, scope, reason) = (self.ctx.clone(), scope.to_string(), reason.to_string());
        tokio::task::spawn_blocking(move || {
            let caller = engage::Caller {
                token: None,
                by: Some("tester".into()),
                local: true,
            };
            engage::engage(&ctx, &caller, &scope, Some("emergency"), &reason)
        })
        .await
        .unwrap()
        .expect("engage")
    }

    /// Shut the gateway down.
    pub async fn shutdown(self) {
        self.gateway.shutdown().await;
    }
}

/// A client that never goes through a proxy of the environment.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}
