//! Skill: procedural knowledge an agent asks for by intent. A skill teaches; it never grants.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Condition, LocalObjectRef};
use crate::descriptor::TrustLevel;
use crate::mcp::{DiscoveredTool, EnabledTool};

/// A skill folder in the layout agents already use: `SKILL.md` (front matter `name` and
/// `description`, then the instructions), `references/`, `assets/`, `scripts/`, and
/// `toolgate.yaml`, which declares each script that may run as a tool (`<skill>.<tool>`: its
/// schema, effects, risk, permissions and sandbox, never inferred). The instructions reach an
/// agent through the API (`GetSkill`, and the view lists the skills its intent matches); a
/// script runs only as its ToolDescriptor, through the whole chain, with its content carried in
/// the descriptor (the sandbox never sees the folder, so no other script of it). A declared
/// tool stays `discovered` until a reviewer enables its digest here; only grants make it
/// callable.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[cfg_attr(
    feature = "kube",
    derive(kube::CustomResource),
    kube(
        group = "toolgate.dev",
        version = "v1alpha1",
        kind = "Skill",
        namespaced,
        status = "SkillStatus",
        shortname = "sk",
        category = "toolgate",
        doc = "A skill: instructions an agent reads through the API and scripts that run only as the ToolDescriptors it declares, reviewed by digest and granted like any tool.",
        printcolumn(name = "Trust", type_ = "string", json_path = ".spec.trustLevel"),
        printcolumn(name = "Tools", type_ = "integer", json_path = ".status.toolCount"),
        printcolumn(
            name = "Enabled",
            type_ = "integer",
            json_path = ".status.enabledCount"
        ),
        printcolumn(
            name = "Ready",
            type_ = "string",
            json_path = ".status.conditions[?(@.type==\"Ready\")].status"
        ),
        printcolumn(
            name = "Age",
            type_ = "date",
            json_path = ".metadata.creationTimestamp"
        ),
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.path) != has(self.configMapRef)",
        "message": "a Skill's files are either a folder beside the manifest (spec.path, toolgate local) or a ConfigMap (spec.configMapRef), one of them",
        "fieldPath": ".path"
    }
]))]
pub struct SkillSpec {
    /// The skill's folder, relative to the folder of the manifest file (`toolgate local`). Either
    /// this or `configMapRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub path: Option<String>,
    /// A ConfigMap holding the skill's files keyed by base name, as
    /// `kubectl create configmap NAME --from-file=SKILL.md --from-file=toolgate.yaml --from-file=scripts/`
    /// makes it (`scripts/run.py` is the key `run.py`). Either this or `path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<LocalObjectRef>,
    /// How far the skill's origin is trusted; its tools' provenance. `untrusted` tools are
    /// blocked.
    pub trust_level: TrustLevel,
    /// The SandboxPolicy a script runs under unless its declaration names another.
    pub sandbox_policy_ref: LocalObjectRef,
    /// The tools a reviewer enabled, each with the descriptor digest they read (this object's
    /// status and `toolgate skill inspect` show it). A tool not named, or whose script or
    /// declaration changed since, stays `discovered`.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub enabled: Vec<EnabledTool>,
    /// The digest of the instructions a reviewer read (`status.instructionsDigest`). Needed only
    /// when the instructions contain text shaped like a prompt injection (an order to hide
    /// something from the user, a credential path, …): until then they are withheld.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[0-9a-f]{64}$"))]
    pub instructions_reviewed: Option<String>,
}

/// What the last read of the skill's files found.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillStatus {
    /// The `.metadata.generation` the status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions (`Ready`: the files were read and every declaration is valid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The front matter's `description`: when an agent should use the skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// SHA-256 of the instructions (`SKILL.md`), what `spec.instructionsReviewed` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_digest: Option<String>,
    /// Why the instructions are withheld from agents (text shaped like a prompt injection that
    /// no reviewer has read), if they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_withheld: Option<String>,
    /// Tools declared.
    #[serde(default)]
    pub tool_count: u32,
    /// Tools enabled (their reviewed digest is current).
    #[serde(default)]
    pub enabled_count: u32,
    /// Each declared tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<DiscoveredTool>,
    /// Files under `scripts/` that no declaration names: they never run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unregistered_scripts: Vec<String>,
}
