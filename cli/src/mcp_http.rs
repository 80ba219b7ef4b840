//! `toolgate mcp serve --listen`: the MCP gateway on streamable HTTP (rmcp's service under
//! axum). Each request's `Authorization: Bearer` token is a toolgate token: checked against the
//! API before the MCP layer sees the request (401 otherwise), then every gRPC call of that
//! request is made as its holder, so each MCP client sees its own tool view and its own calls.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use toolgate_proto::v1 as pb;

use crate::client::Conn;
use crate::mcp_serve::{Gateway, ServeArgs, bearer};
use toolgate_client::Client;

/// How long a token the API accepted is trusted without asking again.
const TOKEN_TTL: Duration = Duration::from_secs(30);

/// Tokens the API accepted lately (by hash; never the token itself).
struct Verifier {
    base: Client,
    accepted: tokio::sync::Mutex<HashMap<[u8; 32], Instant>>,
    /// `--single-principal`: the command line's token, for a request that sends none.
    single: Option<String>,
}

impl Verifier {
    /// Whether the API knows the token: `Ok(false)` when it says it does not, `Err` when it
    /// cannot be asked.
    async fn knows(&self, token: &str) -> Result<bool, tonic::Status> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(at) = self.accepted.lock().await.get(&key)
            && at.elapsed() < TOKEN_TTL
        {
            return Ok(true);
        }
        let mut c = self.base.with_token(token);
        let r = c.req(pb::ListCallsRequest {
            page_size: 1,
            ..Default::default()
        });
        match c.api().list_calls(r).await {
            Ok(_) => {
                let mut accepted = self.accepted.lock().await;
                // Old entries go as new ones come: the map holds the tokens of the last TTL.
                accepted.retain(|_, at| at.elapsed() < TOKEN_TTL);
                accepted.insert(key, Instant::now());
                Ok(true)
            }
            Err(s) if s.code() == tonic::Code::Unauthenticated => Ok(false),
            Err(s) => Err(s),
        }
    }
}

fn refuse(status: StatusCode, message: &str) -> Response {
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::json!({"error": message}).to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"toolgate\""),
        );
    }
    r
}

/// Refuse a request without a token the API knows, before MCP reads it.
async fn authenticate(
    State(verifier): State<Arc<Verifier>>,
    mut request: Request<Body>,
    next: Next,
) -> Response {
    // One principal on loopback: a client that cannot send a header (the conformance runner,
    // the Inspector's CLI) acts as the command line's token.
    if bearer(request.headers()).is_none()
        && let Some(token) = &verifier.single
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let Some(token) = bearer(request.headers()) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "send `Authorization: Bearer <toolgate token>` (a token of the server's tokens file, or a Kubernetes token on a cluster)",
        );
    };
    match verifier.knows(&token).await {
        Ok(true) => next.run(request).await,
        Ok(false) => refuse(StatusCode::UNAUTHORIZED, "the bearer token is not known"),
        Err(s) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("the toolgate API cannot be asked: {}", s.message()),
        ),
    }
}

/// Serve streamable HTTP on `listen` until Ctrl-C or SIGTERM.
pub fn run(conn: &Conn, args: ServeArgs, listen: SocketAddr) -> anyhow::Result<ExitCode> {
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {listen}: {} is not a loopback address. MCP clients send their toolgate tokens to this port in clear, so it listens on loopback only (127.0.0.1 or [::1]); put a TLS-terminating proxy in front to serve elsewhere",
            listen.ip()
        );
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let single = match (args.single_principal, &conn.token) {
            (true, Some(token)) => Some(token.clone()),
            (true, None) => anyhow::bail!(
                "--single-principal: no token to act as; pass --token or set TOOLGATE_TOKEN"
            ),
            (false, _) => None,
        };
        let base = crate::client::connect_without_token(conn).await?;
        let verifier = Arc::new(Verifier {
            base: base.clone(),
            accepted: tokio::sync::Mutex::new(HashMap::new()),
            single,
        });
        let config = StreamableHttpServerConfig::default().with_allowed_hosts([
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
            listen.to_string(),
        ]);
        let service = StreamableHttpService::new(
            move || Ok(Gateway::new(Ok(base.clone()), None, true, args.clone())),
            LocalSessionManager::default().into(),
            config,
        );
        let app = axum::Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(verifier, authenticate));
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("--listen {listen}: {e}"))?;
        let addr = listener.local_addr()?;
        crate::outln!("toolgate mcp serve: streamable HTTP on http://{addr}/mcp");
        axum::serve(listener, app)
            .with_graceful_shutdown(crate::local_cmd::shutdown_signal())
            .await?;
        Ok(ExitCode::SUCCESS)
    })
}
