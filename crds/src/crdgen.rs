//! CustomResourceDefinition generation: the one source of the schemas the API server enforces
//! and `toolgate lint` checks against.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{CredentialBinding, SandboxPolicy, ToolApproval, ToolCall, ToolDescriptor, ToolGrant};

/// The six CRDs, in [`crate::KINDS`] order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        SandboxPolicy::crd(),
        CredentialBinding::crd(),
        ToolDescriptor::crd(),
        ToolGrant::crd(),
        ToolCall::crd(),
        ToolApproval::crd(),
    ]
}

/// The file a CRD is committed as under `crds/generated/` (`toolcalls.toolgate.dev.yaml`).
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// The `openAPIV3Schema` of a kind's only version, as JSON.
pub fn openapi_schema(crd: &CustomResourceDefinition) -> Option<serde_json::Value> {
    let version = crd.spec.versions.first()?;
    let schema = version.schema.as_ref()?.open_api_v3_schema.as_ref()?;
    serde_json::to_value(schema).ok()
}
