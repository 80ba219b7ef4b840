//! Delegations on the cluster: what the core decides ([`toolgate_core::delegation`]), placed in
//! Kubernetes objects. A delegation's token exists only as its SHA-256 in a Secret the call owns
//! (labelled with the call, so it goes with the call's children when the call ends); creating
//! that Secret is what issues the token, so it is issued once. The subagent's report is written
//! into the same Secret and the call annotated; the ToolCall controller ends the call from it.
//! A subagent's calls carry [`PARENT_LABEL`], which finds them.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use toolgate_api::{ApiError, Caller};
use toolgate_core::delegation::{self, Child, Report, Scope};
use toolgate_crds::{CallPhase, ToolCall};

use crate::build::{CALL_LABEL, child_name};
use crate::cache::PolicyCache;
use crate::policies::call_of;

/// The label a subagent's call carries: its delegation (parent call).
pub const PARENT_LABEL: &str = "toolgate.dev/parent-call";
/// The annotation the agent API sets on a delegation when its subagent reported.
pub const REPORTED_ANNOTATION: &str = "toolgate.dev/delegation-reported";
/// The Secret keys: the token's digest, the subagent's report.
const DIGEST_KEY: &str = "token-sha256";
const REPORT_KEY: &str = "report";

/// The Secret of a delegation.
pub fn secret_name(call: &str) -> String {
    format!("{}-delegation", child_name(call))
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The subagent block of a call's tool, as the cache holds it.
pub fn subagent_of(
    cache: &PolicyCache,
    ns: &str,
    call: &ToolCall,
) -> Option<toolgate_crds::SubagentSpec> {
    cache
        .namespace(ns, "")
        .policies
        .registry
        .tool(ns, &call.spec.tool_ref.name)
        .and_then(|t| delegation::subagent_of(&t.spec).cloned())
}

/// A delegation's calls, oldest first.
pub async fn children(
    client: &Client,
    ns: &str,
    parent: &str,
) -> Result<Vec<ToolCall>, kube::Error> {
    let mut calls: Vec<ToolCall> = crate::kit::list_readable(
        client,
        ns,
        &ListParams::default().labels(&format!("{PARENT_LABEL}={parent}")),
    )
    .await?;
    calls.retain(|c| {
        c.spec
            .delegation
            .as_ref()
            .is_some_and(|d| d.parent_call == parent)
    });
    // Creation times have whole seconds; when each was requested has more.
    let requested = |c: &ToolCall| {
        c.status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|k| k.type_ == toolgate_crds::conditions::TOOL_CALL_REQUESTED)
            })
            .map(|k| k.last_transition_time.0)
    };
    calls.sort_by_key(|c| {
        (
            c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            requested(c),
        )
    });
    Ok(calls)
}

/// A delegation's calls as its parent may see them.
pub fn child_views(children: &[ToolCall]) -> Vec<Child> {
    children
        .iter()
        .map(|c| Child {
            id: c.name_any(),
            tool: c.spec.tool_ref.name.clone(),
            phase: c.status.as_ref().and_then(|s| s.phase),
            preview: c
                .status
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .and_then(|r| r.output_preview.clone()),
        })
        .collect()
}

/// The delegation a subagent's call is decided within (`None`: not a subagent's call, or its
/// parent is gone, which denies it).
pub async fn scope(
    client: &Client,
    cache: &PolicyCache,
    ns: &str,
    call: &ToolCall,
) -> Result<Option<Scope>, kube::Error> {
    let Some(d) = &call.spec.delegation else {
        return Ok(None);
    };
    let Some(parent) = Api::<ToolCall>::namespaced(client.clone(), ns)
        .get_opt(&d.parent_call)
        .await?
    else {
        return Ok(None);
    };
    let name = call.name_any();
    let used = children(client, ns, &d.parent_call)
        .await?
        .iter()
        .filter(|c| {
            c.name_any() != name
                && c.status.as_ref().and_then(|s| s.phase) != Some(CallPhase::Denied)
        })
        .count();
    let status = parent.status.clone().unwrap_or_default();
    let parent_name = parent.name_any();
    let cluster = cache.namespace(ns, "");
    let tool = cluster
        .policies
        .registry
        .tool(ns, &parent.spec.tool_ref.name)
        .map(|t| &*t.spec);
    Ok(Some(Scope::of(
        &call.spec,
        &call_of(&parent, &parent_name, ns, &status),
        tool,
        u32::try_from(used).unwrap_or(u32::MAX),
        jiff::Timestamp::now(),
    )))
}

/// Issue a running delegation's token to its principal, once: the Secret holding its digest is
/// created, or the token was issued before.
pub async fn issue(
    client: &Client,
    cache: &PolicyCache,
    caller: &Caller,
    ns: &str,
    call: &ToolCall,
) -> Result<toolgate_proto::v1::DelegationToken, ApiError> {
    let name = call.name_any();
    let status = call.status.clone().unwrap_or_default();
    let cluster = cache.namespace(ns, "");
    let tool = cluster
        .policies
        .registry
        .tool(ns, &call.spec.tool_ref.name)
        .map(|t| &*t.spec);
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let issued_before = secrets
        .get_opt(&secret_name(&name))
        .await
        .map_err(toolgate_api::internal)?
        .is_some();
    let this = call_of(call, &name, ns, &status);
    delegation::may_issue(
        caller.name(),
        &this,
        tool,
        issued_before,
        jiff::Timestamp::now(),
    )?;
    let subagent = tool
        .and_then(delegation::subagent_of)
        .ok_or_else(|| ApiError::Internal("a delegation without its subagent block".into()))?;
    let mut secret_bytes = [0u8; 32];
    getrandom::fill(&mut secret_bytes)
        .map_err(|e| ApiError::Internal(format!("no randomness for a token: {e}")))?;
    let token = delegation::token(ns, &name, &secret_bytes);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(secret_name(&name)),
            namespace: Some(ns.to_string()),
            labels: Some(
                [(CALL_LABEL.to_string(), name.clone())]
                    .into_iter()
                    .collect(),
            ),
            owner_references: call.controller_owner_ref(&()).map(|o| vec![o]),
            ..Default::default()
        },
        string_data: Some(
            [(DIGEST_KEY.to_string(), digest(&token))]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {}
        // Another request issued it first.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            return Err(ApiError::FailedPrecondition {
                code: "delegation-token-issued",
                message: format!(
                    "call {name}'s token was issued already: one subagent per delegation"
                ),
            });
        }
        Err(e) => return Err(toolgate_api::internal(e)),
    }
    let expires = delegation::expires_at(&status, subagent);
    Ok(toolgate_proto::v1::DelegationToken {
        token,
        handoff_json: delegation::handoff(ns, &name, &call.spec, subagent, expires).to_string(),
        expires_at: expires.map(|t| t.to_string()).unwrap_or_default(),
    })
}

/// The caller a delegation token stands for, while its delegation lives.
pub async fn caller_of(client: &Client, cache: &PolicyCache, token: &str) -> Option<Caller> {
    let (ns, name) = delegation::parse_token(token)?;
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&secret_name(name))
        .await
        .ok()??;
    let stored = secret.data?.get(DIGEST_KEY)?.0.clone();
    // Both are hex digests of a fixed length: equal bytes or not.
    if stored != digest(token).into_bytes() {
        return None;
    }
    let call = Api::<ToolCall>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let subagent = subagent_of(cache, ns, &call)?;
    delegation::live(
        &call.status.clone().unwrap_or_default(),
        &subagent,
        jiff::Timestamp::now(),
    )
    .ok()?;
    Some(Caller::delegated(ns, name, &call.spec))
}

/// What the agent API keeps of a subagent's report for the controller.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredReport {
    summary: String,
    result: Option<serde_json::Value>,
    failed: bool,
    tokens_used: Option<u64>,
}

impl From<StoredReport> for Report {
    fn from(r: StoredReport) -> Report {
        Report {
            summary: r.summary,
            result: r.result,
            failed: r.failed,
            tokens_used: r.tokens_used,
        }
    }
}

/// Take a subagent's report: checked by the core now (a bad one is refused to the subagent),
/// kept in the delegation's Secret, the call annotated so its controller ends it.
pub async fn report(
    client: &Client,
    cache: &PolicyCache,
    ns: &str,
    parent: &str,
    report: Report,
) -> Result<ToolCall, ApiError> {
    let calls = Api::<ToolCall>::namespaced(client.clone(), ns);
    let call = calls
        .get_opt(parent)
        .await
        .map_err(toolgate_api::internal)?
        .ok_or_else(|| ApiError::NotFound {
            what: format!("call {ns}/{parent}"),
        })?;
    if toolgate_core::lifecycle::is_terminal(call.status.as_ref().and_then(|s| s.phase)) {
        return Err(ApiError::FailedPrecondition {
            code: "delegation-ended",
            message: format!("delegation {parent} has ended"),
        });
    }
    let cluster = cache.namespace(ns, "");
    let tool = cluster
        .policies
        .registry
        .tool(ns, &call.spec.tool_ref.name)
        .ok_or_else(|| ApiError::FailedPrecondition {
            code: "tool-gone",
            message: format!("the tool of delegation {parent} is gone"),
        })?;
    let kids = children(client, ns, parent)
        .await
        .map_err(toolgate_api::internal)?;
    delegation::result_of(&tool.spec, report.clone(), &child_views(&kids), 0)?;
    let stored = serde_json::to_string(&StoredReport {
        summary: report.summary,
        result: report.result,
        failed: report.failed,
        tokens_used: report.tokens_used,
    })
    .map_err(toolgate_api::internal)?;
    let patch = serde_json::json!({"stringData": {REPORT_KEY: stored}});
    Api::<Secret>::namespaced(client.clone(), ns)
        .patch(
            &secret_name(parent),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(toolgate_api::internal)?;
    let note = serde_json::json!({"metadata": {"annotations": {REPORTED_ANNOTATION: jiff::Timestamp::now().to_string()}}});
    calls
        .patch(
            parent,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&note),
        )
        .await
        .map_err(toolgate_api::internal)
}

/// The subagent's report kept for a delegation, if it reported.
pub async fn reported(
    client: &Client,
    ns: &str,
    call: &str,
) -> Result<Option<Report>, kube::Error> {
    let Some(secret) = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&secret_name(call))
        .await?
    else {
        return Ok(None);
    };
    Ok(secret
        .data
        .and_then(|d| d.get(REPORT_KEY).cloned())
        .and_then(|b| serde_json::from_slice::<StoredReport>(&b.0).ok())
        .map(Into::into))
}
