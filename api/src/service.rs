//! The tonic service: authenticate, hand the request to the backend, map errors to statuses.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use toolgate_proto::v1::toolgate_server::{Toolgate, ToolgateServer};
use toolgate_proto::v1::{
    ApproveCallRequest, ArtifactChunk, Call, CallEvent, CancelCallRequest,
    CompleteDelegationRequest, DelegationToken, DenyCallRequest, ExplainCallRequest, Explanation,
    GetArtifactRequest, GetCallRequest, GetDelegationTokenRequest, GetSkillRequest,
    GetToolViewRequest, ListCallsRequest, ListCallsResponse, ProposeCallRequest, Skill, ToolView,
    WatchCallRequest,
};

use crate::auth::{Authenticator, Caller};
use crate::error::ApiError;
use crate::validate::Checked;

/// A stream of results, boxed.
pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, ApiError>> + Send + 'static>>;

/// What serves the API: the embedded store or the Kubernetes API. Every method gets the
/// authenticated caller; the backend decides what that caller may see and do.
#[tonic::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The caller's tool view.
    async fn view(&self, caller: &Caller, req: GetToolViewRequest) -> Result<ToolView, ApiError>;
    /// Propose a call as the caller.
    async fn propose(&self, caller: &Caller, req: ProposeCallRequest) -> Result<Call, ApiError>;
    /// One call.
    async fn get(&self, caller: &Caller, id: &str) -> Result<Call, ApiError>;
    /// Calls the caller may see.
    async fn list(
        &self,
        caller: &Caller,
        req: ListCallsRequest,
    ) -> Result<ListCallsResponse, ApiError>;
    /// The call's events, past then live, until it ends. The service puts the call as it
    /// ended on the last event; a backend need not.
    async fn watch(&self, caller: &Caller, id: &str) -> Result<BoxStream<CallEvent>, ApiError>;
    /// Cancel a call.
    async fn cancel(&self, caller: &Caller, req: CancelCallRequest) -> Result<Call, ApiError>;
    /// Approve a call as the caller.
    async fn approve(&self, caller: &Caller, req: ApproveCallRequest) -> Result<Call, ApiError>;
    /// Deny a call as the caller.
    async fn deny(&self, caller: &Caller, req: DenyCallRequest) -> Result<Call, ApiError>;
    /// The whole trace of a call.
    async fn explain(&self, caller: &Caller, id: &str) -> Result<Explanation, ApiError>;
    /// An artifact's content.
    async fn artifact(
        &self,
        caller: &Caller,
        req: GetArtifactRequest,
    ) -> Result<BoxStream<ArtifactChunk>, ApiError>;
    /// A skill's instructions.
    async fn skill(&self, caller: &Caller, req: GetSkillRequest) -> Result<Skill, ApiError>;
    /// A running delegation's token, for its principal, once.
    async fn delegation_token(
        &self,
        caller: &Caller,
        req: GetDelegationTokenRequest,
    ) -> Result<DelegationToken, ApiError>;
    /// End the caller's delegation with its subagent's report.
    async fn complete_delegation(
        &self,
        caller: &Caller,
        req: CompleteDelegationRequest,
    ) -> Result<Call, ApiError>;
}

/// The gRPC service over a backend.
pub struct Service<B> {
    backend: Arc<B>,
    auth: Arc<dyn Authenticator>,
}

impl<B: Backend> Service<B> {
    /// A service.
    pub fn new(backend: Arc<B>, auth: Arc<dyn Authenticator>) -> Self {
        Service { backend, auth }
    }

    async fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        let header = req
            .metadata()
            .get("authorization")
            .ok_or_else(|| {
                ApiError::Unauthenticated(
                    "no credentials: send `authorization: Bearer <token>`".into(),
                )
            })?
            .to_str()
            .map_err(|_| ApiError::Unauthenticated("authorization: not ASCII".into()))?;
        let token = header.strip_prefix("Bearer ").ok_or_else(|| {
            ApiError::Unauthenticated("authorization: expected `Bearer <token>`".into())
        })?;
        self.auth.authenticate(token.trim()).await.ok_or_else(|| {
            Status::from(ApiError::Unauthenticated(
                "the bearer token is not known".into(),
            ))
        })
    }
}

/// The request's message once its fields are checked ([`Checked`]); ProposeCall is checked by
/// [`crate::request::Proposal::validate`], which every backend calls.
fn checked<T: Checked>(req: Request<T>) -> Result<T, Status> {
    let msg = req.into_inner();
    msg.check()?;
    Ok(msg)
}

fn stream<T: Send + 'static>(
    s: BoxStream<T>,
) -> Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>> {
    Box::pin(s.map(|r| r.map_err(Status::from)))
}

#[tonic::async_trait]
impl<B: Backend> Toolgate for Service<B> {
    async fn get_tool_view(
        &self,
        req: Request<GetToolViewRequest>,
    ) -> Result<Response<ToolView>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.view(&caller, req).await?))
    }

    async fn propose_call(
        &self,
        req: Request<ProposeCallRequest>,
    ) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let traceparent = crate::trace::from_metadata(req.metadata());
        let call = crate::trace::with_traceparent(
            traceparent,
            self.backend.propose(&caller, req.into_inner()),
        )
        .await?;
        Ok(Response::new(call))
    }

    async fn get_call(&self, req: Request<GetCallRequest>) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.get(&caller, &req.id).await?))
    }

    async fn list_calls(
        &self,
        req: Request<ListCallsRequest>,
    ) -> Result<Response<ListCallsResponse>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.list(&caller, req).await?))
    }

    type WatchCallStream = Pin<Box<dyn Stream<Item = Result<CallEvent, Status>> + Send + 'static>>;

    async fn watch_call(
        &self,
        req: Request<WatchCallRequest>,
    ) -> Result<Response<Self::WatchCallStream>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        let events = self.backend.watch(&caller, &req.id).await?;
        // The last event carries the call as it ended, so a watcher needs no GetCall after it.
        let backend = Arc::clone(&self.backend);
        let events = events.then(move |event| {
            let backend = Arc::clone(&backend);
            let caller = caller.clone();
            async move {
                let mut event = event?;
                if event.terminal && event.call.is_none() {
                    event.call = backend.get(&caller, &event.call_id).await.ok();
                }
                Ok(event)
            }
        });
        Ok(Response::new(stream(Box::pin(events))))
    }

    async fn cancel_call(&self, req: Request<CancelCallRequest>) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.cancel(&caller, req).await?))
    }

    async fn approve_call(
        &self,
        req: Request<ApproveCallRequest>,
    ) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.approve(&caller, req).await?))
    }

    async fn deny_call(&self, req: Request<DenyCallRequest>) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.deny(&caller, req).await?))
    }

    async fn explain_call(
        &self,
        req: Request<ExplainCallRequest>,
    ) -> Result<Response<Explanation>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.explain(&caller, &req.id).await?))
    }

    type GetArtifactStream =
        Pin<Box<dyn Stream<Item = Result<ArtifactChunk, Status>> + Send + 'static>>;

    async fn get_artifact(
        &self,
        req: Request<GetArtifactRequest>,
    ) -> Result<Response<Self::GetArtifactStream>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        let s = self.backend.artifact(&caller, req).await?;
        Ok(Response::new(stream(s)))
    }

    async fn get_delegation_token(
        &self,
        req: Request<GetDelegationTokenRequest>,
    ) -> Result<Response<DelegationToken>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(
            self.backend.delegation_token(&caller, req).await?,
        ))
    }

    async fn complete_delegation(
        &self,
        req: Request<CompleteDelegationRequest>,
    ) -> Result<Response<Call>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(
            self.backend.complete_delegation(&caller, req).await?,
        ))
    }

    async fn get_skill(&self, req: Request<GetSkillRequest>) -> Result<Response<Skill>, Status> {
        let caller = self.caller(&req).await?;
        let req = checked(req)?;
        Ok(Response::new(self.backend.skill(&caller, req).await?))
    }
}

/// The connections accepted on `listener`, each with TCP_NODELAY: tonic's own setting does not
/// reach a stream handed to it, and with Nagle on, a response written in more than one segment
/// waits for the client's delayed ACK — 40 ms on every unary RPC (a Python grpcio GetCall took
/// 44 ms p50 before, 1 ms after; see the README's performance section).
fn incoming(
    listener: TcpListener,
) -> impl Stream<Item = std::io::Result<tokio::net::TcpStream>> + Send + 'static {
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        accepted.and_then(|stream| {
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    })
}

/// Serve the API, gRPC reflection and `grpc.health.v1` on `listener` until `shutdown` resolves;
/// over TLS when `tls` is given.
pub async fn serve<B: Backend>(
    backend: Arc<B>,
    auth: Arc<dyn Authenticator>,
    listener: TcpListener,
    tls: Option<&crate::tls::TlsFiles>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ApiError> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<ToolgateServer<Service<B>>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolgate_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ApiError::Internal(format!("reflection: {e}")))?;
    // Many clients in use (older grpcurl, Python's grpc_requests) speak only v1alpha.
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(toolgate_proto::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ApiError::Internal(format!("reflection: {e}")))?;
    let router = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection)
        .add_service(reflection_v1alpha)
        .add_service(ToolgateServer::new(Service::new(backend, auth)));
    match tls {
        // TLS is ours, not tonic's: its acceptor cannot change certificates under a running
        // server (crate::tls reloads them).
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(
                    crate::tls::incoming(listener, tls.server_config()?),
                    shutdown,
                )
                .await
        }
        None => {
            router
                .serve_with_incoming_shutdown(incoming(listener), shutdown)
                .await
        }
    }
    .map_err(|e| ApiError::Internal(format!("gRPC server: {e}")))
}

#[cfg(test)]
mod nodelay_tests {
    use futures::StreamExt;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut accepted = Box::pin(super::incoming(listener));
        let _client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let server_side = accepted.next().await.expect("a connection").expect("ok");
        assert!(server_side.nodelay().expect("nodelay"));
    }
}
