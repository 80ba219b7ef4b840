//! `toolgate lint`: check manifests against the CRD schemas the API server enforces, then
//! against the rules a schema cannot express (cross-object references, risk honesty, secrets).
//!
//! Every problem is reported, each with its file, object and field path, what was expected and
//! what was found. Nothing stops at the first problem.

mod rules;
mod schema;

use crate::names::{is_dns_label, is_dns_subdomain};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

pub use crate::findings::descriptor::{MCP_NOT_REVIEWED, SKILL_NOT_REVIEWED, descriptor_findings};
pub use crate::findings::{Local, Severity, join_path, poisoning};
use crate::manifest::{Meta, Object, ObjectSet, Origin, RawManifest, Spec};
pub use schema::{KindSchema, SchemaSetupError};

/// One problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// File and document.
    pub origin: Origin,
    /// `Kind/name`, when the document got that far.
    pub object: Option<String>,
    /// Field path (`spec.effects.reads`), empty for the whole document.
    pub path: String,
    /// Stable machine code (`schema-enum`, `dangling-reference`).
    pub code: &'static str,
    /// What was expected and what was found.
    pub message: String,
}

impl Finding {
    /// Whether the finding keeps only its own tool out (registered as blocked, the rest of the
    /// manifests usable) rather than refusing the set: instruction-like text in what a tool from
    /// outside shows a model. One flagged tool of a server does not take its server's other
    /// tools away; the finding is the reviewer's to read.
    pub fn holds_back_its_tool_only(&self) -> bool {
        self.code == poisoning::CODE
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.severity)?;
        if let Some(object) = &self.object {
            write!(f, ": {object}")?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {} [{}]", self.message, self.code)
    }
}

/// The outcome of a lint run.
#[derive(Debug, Default)]
pub struct LintReport {
    /// Every problem, in file order.
    pub findings: Vec<Finding>,
    /// The objects that passed the schema checks, typed.
    pub objects: ObjectSet,
    /// Documents read.
    pub documents: usize,
}

impl LintReport {
    /// Number of errors.
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count()
    }
}

/// Parse a YAML file into documents. A syntax error becomes a finding with line and column.
pub fn parse_yaml(source: &str, text: &str) -> (Vec<RawManifest>, Vec<Finding>) {
    use serde::Deserialize;
    let mut docs = Vec::new();
    let mut findings = Vec::new();
    for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let origin = Origin {
            source: source.to_string(),
            document: i,
        };
        match Value::deserialize(de) {
            Ok(Value::Null) => {} // an empty document (a trailing `---`)
            Ok(value) => docs.push(RawManifest { origin, value }),
            Err(e) => {
                findings.push(Finding {
                    severity: Severity::Error,
                    origin,
                    object: None,
                    path: String::new(),
                    code: "yaml-syntax",
                    message: format!("not valid YAML: {e}"),
                });
                // The parser cannot resynchronize after a syntax error.
                break;
            }
        }
    }
    (docs, findings)
}

/// Checks manifests. Built once from the CRD schemas, used for any number of runs.
pub struct Linter {
    schemas: BTreeMap<String, KindSchema>,
}

impl Linter {
    /// Compile the `openAPIV3Schema` of each kind (from the generated CRDs).
    pub fn new<'a>(
        schemas: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> Result<Self, SchemaSetupError> {
        let schemas = schemas
            .into_iter()
            .map(|(kind, s)| Ok((kind.to_string(), KindSchema::compile(kind, s)?)))
            .collect::<Result<_, SchemaSetupError>>()?;
        Ok(Linter { schemas })
    }

    /// Lint documents as one set (references resolve within it). `now` decides expiry warnings.
    pub fn lint(&self, docs: Vec<RawManifest>, now: jiff::Timestamp) -> LintReport {
        let mut findings = Vec::new();
        let mut objects = Vec::new();
        // Every (kind, namespace, name) that was declared, even if its spec is broken, so a
        // reference to a broken object is not also reported as dangling.
        let mut declared = BTreeSet::new();
        let mut seen: BTreeMap<(String, String, String), Origin> = BTreeMap::new();
        let documents = docs.len();
        for doc in docs {
            let Some((kind, meta)) = self.header(&doc, &mut findings) else {
                continue;
            };
            let id = format!("{kind}/{}", meta.name);
            let key = (
                kind.clone(),
                meta.namespace().to_string(),
                meta.name.clone(),
            );
            if let Some(first) = seen.get(&key) {
                findings.push(Finding {
                    severity: Severity::Error,
                    origin: doc.origin.clone(),
                    object: Some(id.clone()),
                    path: "metadata.name".into(),
                    code: "duplicate-object",
                    message: format!(
                        "{id} in namespace {} is already defined in {first}",
                        meta.namespace()
                    ),
                });
                continue;
            }
            seen.insert(key.clone(), doc.origin.clone());
            declared.insert(key);

            let mut local = Vec::new();
            let secret_paths = rules::scan_secrets(&kind, &doc.value, &mut local);
            if let Some(schema) = self.schemas.get(&kind) {
                for p in schema.check(&doc.value) {
                    // A secret finding already explains this field; one message per defect.
                    if secret_paths
                        .iter()
                        .any(|s| p.path == *s || p.path.starts_with(&format!("{s}.")))
                    {
                        continue;
                    }
                    local.push((p.severity, p.path, p.code, p.message));
                }
            }
            if doc.value.get("status").is_some() {
                local.push((
                    Severity::Warning,
                    "status".into(),
                    "status-in-manifest",
                    "status is written by toolgate and ignored on apply; remove it from the manifest".into(),
                ));
            }
            let clean = !local.iter().any(|(s, ..)| *s == Severity::Error);
            for (severity, path, code, message) in local {
                findings.push(Finding {
                    severity,
                    origin: doc.origin.clone(),
                    object: Some(id.clone()),
                    path,
                    code,
                    message,
                });
            }
            if !clean {
                continue;
            }
            let spec = doc.value.get("spec").cloned().unwrap_or(Value::Null);
            match Spec::from_json(&kind, &spec) {
                Ok(spec) => objects.push(Object {
                    origin: doc.origin,
                    meta,
                    spec,
                }),
                Err(e) => findings.push(Finding {
                    severity: Severity::Error,
                    origin: doc.origin,
                    object: Some(id),
                    path: e.path,
                    code: "schema-type",
                    message: e.message,
                }),
            }
        }
        let set = ObjectSet::new(objects);
        rules::check_objects(&set, &declared, now, &mut findings);
        findings.sort_by(|a, b| a.origin.cmp(&b.origin).then(a.path.cmp(&b.path)));
        LintReport {
            findings,
            objects: set,
            documents,
        }
    }

    /// Check `apiVersion`, `kind` and `metadata`; `None` if the document cannot be identified.
    fn header(&self, doc: &RawManifest, findings: &mut Vec<Finding>) -> Option<(String, Meta)> {
        let mut fail = |path: &str, code: &'static str, message: String| {
            findings.push(Finding {
                severity: Severity::Error,
                origin: doc.origin.clone(),
                object: None,
                path: path.into(),
                code,
                message,
            });
        };
        let Value::Object(map) = &doc.value else {
            fail(
                "",
                "not-an-object",
                format!(
                    "expected a Kubernetes object (a mapping), found {}",
                    short_json(&doc.value)
                ),
            );
            return None;
        };
        let kind = match map.get("kind") {
            Some(Value::String(k)) => k.clone(),
            other => {
                fail(
                    "kind",
                    "unknown-kind",
                    format!(
                        "expected one of {}, found {}",
                        self.kind_list(),
                        other.map_or("nothing".into(), short_json)
                    ),
                );
                return None;
            }
        };
        if !self.schemas.contains_key(&kind) {
            fail(
                "kind",
                "unknown-kind",
                format!("expected one of {}, found {kind:?}", self.kind_list()),
            );
            return None;
        }
        match map.get("apiVersion") {
            Some(Value::String(v)) if v == toolgate_crds::API_VERSION => {}
            other => {
                fail(
                    "apiVersion",
                    "api-version",
                    format!(
                        "expected {:?}, found {}",
                        toolgate_crds::API_VERSION,
                        other.map_or("nothing".into(), short_json)
                    ),
                );
                return None;
            }
        }
        let meta: Meta = match map
            .get("metadata")
            .map(|m| serde_json::from_value::<Meta>(m.clone()))
        {
            Some(Ok(meta)) => meta,
            Some(Err(e)) => {
                fail(
                    "metadata",
                    "metadata",
                    format!("expected metadata with a string name: {e}"),
                );
                return None;
            }
            None => {
                fail(
                    "metadata.name",
                    "metadata",
                    "required field is missing".into(),
                );
                return None;
            }
        };
        if !is_dns_subdomain(&meta.name) {
            fail(
                "metadata.name",
                "metadata",
                format!(
                    "expected a DNS subdomain name (lowercase letters, digits, '-' and '.', at most 253 characters), found {:?}",
                    meta.name
                ),
            );
            return None;
        }
        if let Some(ns) = &meta.namespace
            && !is_dns_label(ns)
        {
            fail(
                "metadata.namespace",
                "metadata",
                format!(
                    "expected a DNS label (lowercase letters, digits and '-', at most 63 characters), found {ns:?}"
                ),
            );
            return None;
        }
        Some((kind, meta))
    }

    fn kind_list(&self) -> String {
        self.schemas.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// `/spec/effects/reads/0` → `spec.effects.reads[0]`.
pub fn field_path_from_pointer(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            out = join_path(&out, &seg);
        }
    }
    out
}

pub use crate::args::short_json;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_become_field_paths() {
        assert_eq!(
            field_path_from_pointer("/spec/effects/reads/0"),
            "spec.effects.reads[0]"
        );
        assert_eq!(field_path_from_pointer(""), "");
        assert_eq!(
            field_path_from_pointer("/metadata/labels/app.kubernetes.io~1name"),
            "metadata.labels[\"app.kubernetes.io/name\"]"
        );
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_subdomain("file.write"));
        assert!(!is_dns_subdomain("File.Write"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_dns_label("team-a"));
        assert!(!is_dns_label("team.a"));
    }

    #[test]
    fn yaml_syntax_errors_are_findings() {
        let (docs, findings) = parse_yaml("x.yaml", "a: 1\n---\nb: [1, 2\n");
        assert_eq!(docs.len(), 1);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].code, "yaml-syntax");
        assert_eq!(findings[0].origin.document, 1);
    }
}
