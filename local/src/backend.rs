//! The gRPC API over the embedded runtime.

use futures::StreamExt;
use tokio::io::AsyncReadExt;
use toolgate_api::{ApiError, Backend, BoxStream, Caller, internal};
use toolgate_core::lifecycle::{is_terminal, may_see, phase_name};
use toolgate_core::principal::Principal;
use toolgate_crds::ApprovalDecision;
use toolgate_proto::v1 as pb;

use crate::runtime::Runtime;
use crate::store::{CallRecord, EventRecord};

/// A record as the API returns it.
pub fn call_message(rec: &CallRecord) -> pb::Call {
    toolgate_api::convert::call_message(
        &rec.id,
        &rec.namespace,
        &rec.spec,
        &rec.status,
        &rec.created_at.to_string(),
    )
}

/// An event as the API returns it.
pub fn event_message(e: &EventRecord) -> pb::CallEvent {
    pb::CallEvent {
        call_id: e.call_id.clone(),
        sequence: e.sequence,
        event_id: e.event_id.clone(),
        r#type: e.kind.clone(),
        status: e.status.clone(),
        reason: e.reason.clone(),
        message: e.message.clone(),
        time: e.time.clone(),
        phase: e.phase.clone(),
        terminal: e.terminal,
        call: None,
    }
}

impl Runtime {
    /// The tool view of `principal` for an intent.
    pub fn view_for(
        &self,
        namespace: &str,
        principal: &Principal,
        req: &pb::GetToolViewRequest,
    ) -> Result<pb::ToolView, ApiError> {
        toolgate_api::convert::tool_view(
            &self.loaded().policies,
            &self.usage(namespace, jiff::Timestamp::now())?,
            namespace,
            principal,
            req,
            None,
        )
    }
}

#[tonic::async_trait]
impl Backend for Runtime {
    async fn view(
        &self,
        caller: &Caller,
        req: pb::GetToolViewRequest,
    ) -> Result<pb::ToolView, ApiError> {
        let ns = toolgate_api::request::namespace_of(caller, &req.namespace)?;
        let parent = match &caller.delegation {
            Some(d) => self.store().get(&d.parent_call).map_err(internal)?,
            None => None,
        };
        toolgate_api::convert::caller_view(
            &self.loaded().policies,
            &self.usage(&ns, jiff::Timestamp::now())?,
            &ns,
            caller,
            &req,
            parent.as_ref().map(|p| p.spec.tool_ref.name.as_str()),
        )
    }

    async fn delegation_token(
        &self,
        caller: &Caller,
        req: pb::GetDelegationTokenRequest,
    ) -> Result<pb::DelegationToken, ApiError> {
        Runtime::get(self, caller, &req.call_id)?;
        Runtime::delegation_token(self, caller, &req.call_id).await
    }

    async fn complete_delegation(
        &self,
        caller: &Caller,
        req: pb::CompleteDelegationRequest,
    ) -> Result<pb::Call, ApiError> {
        Ok(call_message(
            &Runtime::complete_delegation(self, caller, req).await?,
        ))
    }

    async fn propose(
        &self,
        caller: &Caller,
        req: pb::ProposeCallRequest,
    ) -> Result<pb::Call, ApiError> {
        Ok(call_message(&Runtime::propose(self, caller, req).await?))
    }

    async fn skill(
        &self,
        caller: &Caller,
        req: pb::GetSkillRequest,
    ) -> Result<pb::Skill, ApiError> {
        let ns = toolgate_api::request::namespace_of(caller, &req.namespace)?;
        toolgate_api::convert::skill_message(&self.loaded().policies, &ns, &req.name, None)
    }

    async fn get(&self, caller: &Caller, id: &str) -> Result<pb::Call, ApiError> {
        Ok(call_message(&Runtime::get(self, caller, id)?))
    }

    async fn list(
        &self,
        caller: &Caller,
        req: pb::ListCallsRequest,
    ) -> Result<pb::ListCallsResponse, ApiError> {
        let size = toolgate_api::request::page_size(&req)?;
        let after = (!req.page_token.is_empty()).then_some(req.page_token.as_str());
        let page = self
            .store()
            .scan(after, size + 1, |r| {
                may_see(
                    caller.name(),
                    &r.spec.principal,
                    caller.reads_in(&r.namespace),
                ) && toolgate_api::request::list_filter_matches(
                    &req,
                    &r.namespace,
                    phase_name(r.status.phase),
                    &r.spec.tool_ref.name,
                    &r.spec.principal,
                )
            })
            .map_err(internal)?;
        Ok(toolgate_api::request::page(
            page.iter().map(call_message).collect(),
            size,
        ))
    }

    async fn watch(&self, caller: &Caller, id: &str) -> Result<BoxStream<pb::CallEvent>, ApiError> {
        // Subscribe before reading the past, so no event falls between the two.
        let mut live = self.subscribe();
        let rec = Runtime::get(self, caller, id)?;
        let past = self.store().events(id, 0).map_err(internal)?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let id = rec.id.clone();
        let done_already =
            is_terminal(rec.status.phase) && past.last().is_some_and(|e| e.sequence >= rec.events);
        tokio::spawn(async move {
            let mut last = 0;
            for e in &past {
                last = e.sequence;
                if tx.send(Ok(event_message(e))).await.is_err() {
                    return;
                }
            }
            if done_already || past.last().is_some_and(|e| e.terminal) {
                return;
            }
            loop {
                match live.recv().await {
                    Ok(e) if e.call_id == id && e.sequence > last => {
                        last = e.sequence;
                        let end = e.terminal;
                        if tx.send(Ok(event_message(&e))).await.is_err() || end {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx
                            .send(Err(ApiError::Internal(
                                "the watcher fell behind; watch again to resume from the log"
                                    .into(),
                            )))
                            .await;
                        return;
                    }
                    Err(_) => return,
                }
            }
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
    }

    async fn cancel(
        &self,
        caller: &Caller,
        req: pb::CancelCallRequest,
    ) -> Result<pb::Call, ApiError> {
        Ok(call_message(
            &Runtime::cancel(self, caller, &req.id, &req.reason).await?,
        ))
    }

    async fn approve(
        &self,
        caller: &Caller,
        req: pb::ApproveCallRequest,
    ) -> Result<pb::Call, ApiError> {
        let rec = self
            .decide_approval(
                caller,
                &req.id,
                if req.for_session {
                    ApprovalDecision::AllowForSession
                } else {
                    ApprovalDecision::AllowOnce
                },
                Some((&req.args_digest, &req.tool_digest)),
                req.ttl_seconds,
                &req.comment,
            )
            .await?;
        Ok(call_message(&rec))
    }

    async fn deny(&self, caller: &Caller, req: pb::DenyCallRequest) -> Result<pb::Call, ApiError> {
        Ok(call_message(
            &self
                .decide_approval(
                    caller,
                    &req.id,
                    ApprovalDecision::Deny,
                    None,
                    0,
                    &req.comment,
                )
                .await?,
        ))
    }

    async fn explain(&self, caller: &Caller, id: &str) -> Result<pb::Explanation, ApiError> {
        let rec = Runtime::get(self, caller, id)?;
        let events = self.store().events(id, 0).map_err(internal)?;
        let call = crate::runtime::call_of(&rec);
        let view = self.view_for(
            &rec.namespace,
            &call.principal(),
            &toolgate_api::convert::explanation_view_request(&rec.namespace, &rec.spec),
        )?;
        let loaded = self.loaded();
        let session = self.session_approvals(&rec)?;
        let snapshot = self.snapshot(&loaded, &rec, &rec.approvals, &session, &[])?;
        let sandbox = toolgate_core::lifecycle::sandbox_view(
            &snapshot,
            &call,
            serde_json::json!({
                "runtime": "local",
                // An approver (a person, the one running the runtime) sees the whole plan.
                "plan": if caller.approves_in(&rec.namespace) {
                    rec.sandbox.clone()
                } else {
                    rec.sandbox.as_ref().map(|p| plan_for_agent(p, &self.inner.config))
                },
            }),
        );
        let (approval, approver) = toolgate_api::convert::approvals_line(
            &toolgate_core::lifecycle::explained_approvals(&snapshot, &call),
        );
        Ok(toolgate_api::convert::explanation(
            call_message(&rec),
            &rec.status,
            toolgate_api::convert::Trace {
                view: Some(view),
                events: events.iter().map(event_message).collect(),
                approval,
                approver,
                sandbox,
                children: self.children(&rec)?.into_iter().map(|c| c.id).collect(),
            },
        ))
    }

    async fn artifact(
        &self,
        caller: &Caller,
        req: pb::GetArtifactRequest,
    ) -> Result<BoxStream<pb::ArtifactChunk>, ApiError> {
        let rec = Runtime::get(self, caller, &req.call_id)?;
        let not_found = || ApiError::NotFound {
            what: format!("artifact {:?} of call {}", req.artifact_id, rec.id),
        };
        let artifact = toolgate_api::convert::artifact_of(&rec.status, &rec.id, &req.artifact_id)?;
        let root =
            std::fs::canonicalize(self.inner.config.data.join("artifacts")).map_err(internal)?;
        let path = artifact
            .uri
            .strip_prefix("file://")
            .map(std::path::PathBuf::from)
            .ok_or_else(|| internal(format!("artifact {} is not a local file", artifact.uri)))?;
        let path = std::fs::canonicalize(&path).map_err(|_| not_found())?;
        if !path.starts_with(&root) {
            return Err(internal("artifact outside the artifact store"));
        }
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|_| not_found())?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut first = true;
            loop {
                let mut buf = vec![0u8; 64 * 1024];
                match file.read(&mut buf).await {
                    Ok(0) if !first => return,
                    Ok(n) => {
                        buf.truncate(n);
                        let chunk = pb::ArtifactChunk {
                            data: buf,
                            content_hash: if first {
                                artifact.content_hash.clone()
                            } else {
                                String::new()
                            },
                            size_bytes: if first { artifact.size_bytes } else { 0 },
                        };
                        first = false;
                        let end = n == 0;
                        if tx.send(Ok(chunk)).await.is_err() || end {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx
                            .send(Err(internal(format!("reading the artifact: {e}"))))
                            .await;
                        return;
                    }
                }
            }
        });
        Ok(tokio_stream::wrappers::ReceiverStream::new(rx).boxed())
    }
}

/// What an agent (anyone but an approver) is shown of its call's sandbox plan: paths in the workspace relative to it,
/// other system paths as they are, and none of the runtime's own (its data folder, the executor's
/// files); the environment's names without their values. Where the workspace is on the host and
/// the runtime's `PATH` are not the agent's to know. The stored plan keeps everything.
fn plan_for_agent(plan: &serde_json::Value, config: &crate::runtime::Config) -> serde_json::Value {
    use serde_json::Value;
    let canonical =
        |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let workspace = [config.workspace.clone(), canonical(&config.workspace)];
    let mut private = vec![config.data.clone(), canonical(&config.data)];
    let runs = config
        .runs
        .clone()
        .unwrap_or_else(|| crate::slot::default_run_folder(&config.data));
    private.extend([canonical(&runs), runs]);
    let shown = |path: &str| -> Option<Value> {
        let p = std::path::Path::new(path);
        for w in &workspace {
            if let Ok(rel) = p.strip_prefix(w) {
                let rel = rel.display().to_string();
                return Some(Value::String(if rel.is_empty() { ".".into() } else { rel }));
            }
        }
        (!private.iter().any(|d| p.starts_with(d))).then(|| Value::String(path.into()))
    };
    let Some(fields) = plan.as_object() else {
        return Value::Null;
    };
    let mut out = serde_json::Map::new();
    for (key, value) in fields {
        let shown_value = match key.as_str() {
            // The executor's own files and the copy of /etc: the runtime's, not the tool's.
            "runtime" | "etc" => continue,
            "readOnly" | "writable" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|b| b.get("inside").and_then(Value::as_str).and_then(shown))
                    .collect(),
            ),
            "hidden" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str().and_then(shown))
                    .collect(),
            ),
            "cwd" => value.as_str().and_then(shown).unwrap_or(Value::Null),
            "env" => Value::Array(
                value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|pair| pair.get(0).cloned())
                    .collect(),
            ),
            _ => value.clone(),
        };
        out.insert(key.clone(), shown_value);
    }
    Value::Object(out)
}
