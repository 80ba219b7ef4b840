//! What ExplainCall says of a call's sandbox, the same on both runtimes.

use serde_json::{Value, json};

use super::snapshot::{Call, Snapshot};

/// The call's sandbox: the policy it ran (or would run) under — filesystem roots and blocked
/// paths, network, process limits, runtime class — and `placement`, what the runtime made of it
/// (the local sandbox's plan, or the pod). Empty when no policy is recorded or it is gone.
pub fn sandbox_view(snapshot: &Snapshot<'_>, call: &Call<'_>, placement: Value) -> Value {
    let name = call
        .status
        .runtime
        .as_ref()
        .and_then(|r| r.sandbox_policy_ref.as_ref())
        .map(|r| r.name.clone())
        .or_else(|| {
            snapshot
                .tool(call)
                .and_then(|t| t.spec.sandbox_policy_ref.as_ref())
                .map(|r| r.name.clone())
        });
    let Some(name) = name else {
        return Value::Null;
    };
    let Some(policy) = snapshot.sandbox_policy(call.namespace, &name) else {
        return json!({"policy": name, "missing": true, "placement": placement});
    };
    json!({
        "policy": name,
        "mode": policy.mode,
        "filesystem": policy.filesystem,
        "network": policy.network,
        "process": policy.process,
        "runtimeClassName": policy.runtime_class_name,
        "placement": placement,
    })
}
