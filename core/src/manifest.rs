//! Manifests: toolgate objects as read from files, before and after typing.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use toolgate_crds::{
    CredentialBindingSpec, SandboxPolicySpec, ToolApprovalSpec, ToolCallSpec, ToolDescriptorSpec,
    ToolGrantSpec,
};

/// Where a document came from: a file and the document's index in it (0-based).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// The file, as the user named it.
    pub source: String,
    /// Index of the YAML document in the file.
    pub document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.document == 0 {
            write!(f, "{}", self.source)
        } else {
            write!(f, "{} (document {})", self.source, self.document + 1)
        }
    }
}

/// One parsed document, as JSON, not yet checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RawManifest {
    /// Where it came from.
    pub origin: Origin,
    /// The document.
    pub value: serde_json::Value,
}

/// The metadata toolgate reads from a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Meta {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`; `None` means the namespace the manifest is applied to.
    #[serde(default)]
    pub namespace: Option<String>,
    /// `metadata.labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations` (a review of a flagged description is one).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// The file name ending that marks a policy test table (`toolgate policy test`): manifest
/// loaders skip these files, which hold cases, not objects.
pub const POLICY_TEST_SUFFIX: &str = ".policytest.yaml";

/// Whether a file under a manifests folder holds objects: a `.yaml`/`.yml` file that is neither a
/// policy test table nor kustomize's build file (`kustomization.yaml`, for `kubectl apply -k`:
/// the objects it names are read from their own files).
pub fn is_manifest_file(path: &std::path::Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    (name.ends_with(".yaml") || name.ends_with(".yml"))
        && !name.ends_with(POLICY_TEST_SUFFIX)
        && !matches!(name, "kustomization.yaml" | "kustomization.yml")
}

/// The namespace a manifest without one is applied to.
pub const DEFAULT_NAMESPACE: &str = "default";

impl Meta {
    /// The effective namespace.
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }
}

/// A typed toolgate object.
#[derive(Debug, Clone, PartialEq)]
pub enum Spec {
    /// A ToolDescriptor.
    ToolDescriptor(Box<ToolDescriptorSpec>),
    /// A ToolGrant.
    ToolGrant(Box<ToolGrantSpec>),
    /// A ToolPolicy.
    ToolPolicy(Box<toolgate_crds::ToolPolicySpec>),
    /// A SandboxPolicy.
    SandboxPolicy(Box<SandboxPolicySpec>),
    /// A CredentialBinding.
    CredentialBinding(Box<CredentialBindingSpec>),
    /// A ToolCall.
    ToolCall(Box<ToolCallSpec>),
    /// A ToolApproval.
    ToolApproval(Box<ToolApprovalSpec>),
    McpServer(Box<toolgate_crds::McpServerSpec>),
    /// A Skill.
    Skill(Box<toolgate_crds::SkillSpec>),
}

impl Spec {
    /// The kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            Spec::ToolDescriptor(_) => "ToolDescriptor",
            Spec::ToolGrant(_) => "ToolGrant",
            Spec::ToolPolicy(_) => "ToolPolicy",
            Spec::SandboxPolicy(_) => "SandboxPolicy",
            Spec::CredentialBinding(_) => "CredentialBinding",
            Spec::ToolCall(_) => "ToolCall",
            Spec::ToolApproval(_) => "ToolApproval",
            Spec::McpServer(_) => "McpServer",
            Spec::Skill(_) => "Skill",
        }
    }

    /// Type the `spec` of a document of kind `kind`, naming the field at fault on error.
    pub fn from_json(kind: &str, spec: &serde_json::Value) -> Result<Spec, TypingError> {
        fn typed<T: serde::de::DeserializeOwned>(
            v: &serde_json::Value,
        ) -> Result<Box<T>, TypingError> {
            serde_path_to_error::deserialize(v)
                .map(Box::new)
                .map_err(|e| TypingError {
                    path: format!("spec.{}", e.path()),
                    message: e.inner().to_string(),
                })
        }
        Ok(match kind {
            "ToolDescriptor" => Spec::ToolDescriptor(typed(spec)?),
            "ToolGrant" => Spec::ToolGrant(typed(spec)?),
            "ToolPolicy" => Spec::ToolPolicy(typed(spec)?),
            "SandboxPolicy" => Spec::SandboxPolicy(typed(spec)?),
            "CredentialBinding" => Spec::CredentialBinding(typed(spec)?),
            "ToolCall" => Spec::ToolCall(typed(spec)?),
            "ToolApproval" => Spec::ToolApproval(typed(spec)?),
            "McpServer" => Spec::McpServer(typed(spec)?),
            "Skill" => Spec::Skill(typed(spec)?),
            other => {
                return Err(TypingError {
                    path: "kind".into(),
                    message: format!("unknown kind {other:?}"),
                });
            }
        })
    }
}

/// A spec that did not deserialize into its Rust type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TypingError {
    /// Field path.
    pub path: String,
    /// What serde said.
    pub message: String,
}

/// A checked, typed object.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// Where it came from.
    pub origin: Origin,
    /// Its metadata.
    pub meta: Meta,
    /// Its spec.
    pub spec: Spec,
}

impl Object {
    /// `Kind/name` for messages.
    pub fn id(&self) -> String {
        format!("{}/{}", self.spec.kind(), self.meta.name)
    }
}

/// A set of typed objects, looked up by namespace and name.
#[derive(Debug, Clone, Default)]
pub struct ObjectSet {
    objects: Vec<Object>,
    index: std::collections::HashMap<(&'static str, String, String), usize>,
}

impl ObjectSet {
    /// Build from objects.
    pub fn new(objects: Vec<Object>) -> Self {
        let mut index = std::collections::HashMap::with_capacity(objects.len());
        for (i, o) in objects.iter().enumerate() {
            index
                .entry((
                    o.spec.kind(),
                    o.meta.namespace().to_string(),
                    o.meta.name.clone(),
                ))
                .or_insert(i);
        }
        ObjectSet { objects, index }
    }

    /// Whether an object of this kind, namespace and name exists.
    pub fn contains(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.find(kind, namespace, name).is_some()
    }

    /// All objects, in load order.
    pub fn iter(&self) -> impl Iterator<Item = &Object> {
        self.objects.iter()
    }

    /// Find an object by kind, namespace and name.
    pub fn find(&self, kind: &str, namespace: &str, name: &str) -> Option<&Object> {
        let kind = toolgate_crds::KINDS.iter().find(|k| **k == kind)?;
        self.index
            .get(&(*kind, namespace.to_string(), name.to_string()))
            .map(|&i| &self.objects[i])
    }

    /// Every ToolGrant with its metadata.
    pub fn grants(&self) -> impl Iterator<Item = (&Object, &ToolGrantSpec)> {
        self.objects.iter().filter_map(|o| match &o.spec {
            Spec::ToolGrant(s) => Some((o, s.as_ref())),
            _ => None,
        })
    }

    /// Every ToolCall with its metadata.
    pub fn calls(&self) -> impl Iterator<Item = (&Object, &ToolCallSpec)> {
        self.objects.iter().filter_map(|o| match &o.spec {
            Spec::ToolCall(s) => Some((o, s.as_ref())),
            _ => None,
        })
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}
