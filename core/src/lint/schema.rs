//! Checking a document against its kind's CRD schema: the OpenAPI structure with jsonschema,
//! the CEL rules with kube-cel. The schema is the generated one; there is no second copy.

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::{Value, json};

use super::{Severity, field_path_from_pointer, join_path, short_json};

/// A problem found in one document against its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    /// Field path (`spec.effects.idempotent`).
    pub path: String,
    /// Stable code (`schema-type`).
    pub code: &'static str,
    /// Expected and found.
    pub message: String,
    /// Severity.
    pub severity: Severity,
}

/// One kind's compiled schema.
pub struct KindSchema {
    kind: String,
    structural: jsonschema::Validator,
    cel: kube_cel::CompiledSchema,
}

/// The schema could not be compiled: a bug in the generated CRDs, never user input.
#[derive(Debug, thiserror::Error)]
pub enum SchemaSetupError {
    /// The OpenAPI schema is not usable as JSON Schema.
    #[error("the {kind} CRD schema does not compile as JSON Schema: {message}")]
    Structural {
        /// Kind.
        kind: String,
        /// Why.
        message: String,
    },
    /// A CEL rule does not compile.
    #[error("the {kind} CRD has CEL rules that do not compile: {message}")]
    Cel {
        /// Kind.
        kind: String,
        /// Why.
        message: String,
    },
}

impl KindSchema {
    /// Compile a kind's `openAPIV3Schema`.
    pub fn compile(kind: &str, openapi: &Value) -> Result<Self, SchemaSetupError> {
        let strict = strict_schema(openapi, true);
        let structural = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(true)
            .build(&strict)
            .map_err(|e| SchemaSetupError::Structural {
                kind: kind.into(),
                message: e.to_string(),
            })?;
        let cel = kube_cel::compile_schema(openapi);
        if cel.has_errors() {
            let message = cel
                .compilation_errors()
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(SchemaSetupError::Cel {
                kind: kind.into(),
                message,
            });
        }
        Ok(KindSchema {
            kind: kind.into(),
            structural,
            cel,
        })
    }

    /// The kind this schema checks.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Every structural problem of `doc`; CEL rules run only on a structurally valid document,
    /// as the API server does.
    pub fn check(&self, doc: &Value) -> Vec<SchemaProblem> {
        let mut problems: Vec<SchemaProblem> = self
            .structural
            .iter_errors(doc)
            .flat_map(|e| describe(&e))
            .collect();
        problems.sort_by(|a, b| a.path.cmp(&b.path).then(a.code.cmp(b.code)));
        problems.dedup();
        if !problems.is_empty() {
            return problems;
        }
        if let Err(errors) = kube_cel::validate_compiled(&self.cel, doc, None) {
            for e in errors.iter() {
                let path = e.field_path.trim_start_matches('.').to_string();
                problems.push(SchemaProblem {
                    path: if path.is_empty() { "spec".into() } else { path },
                    code: "cel-rule",
                    message: e.message.clone(),
                    severity: Severity::Error,
                });
            }
        }
        problems
    }
}

/// Make the CRD schema strict for lint: unknown fields are errors (the API server would prune
/// them silently, which hides typos), `nullable` admits null, and the root admits the standard
/// object fields.
fn strict_schema(schema: &Value, root: bool) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in map {
        let v = match k.as_str() {
            "properties" => match v {
                Value::Object(props) => Value::Object(
                    props
                        .iter()
                        .map(|(pk, pv)| (pk.clone(), strict_schema(pv, false)))
                        .collect(),
                ),
                other => other.clone(),
            },
            "items" | "additionalProperties" if v.is_object() => strict_schema(v, false),
            "allOf" | "anyOf" | "oneOf" => match v {
                Value::Array(items) => {
                    Value::Array(items.iter().map(|i| strict_schema(i, false)).collect())
                }
                other => other.clone(),
            },
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    if map.get("nullable") == Some(&Value::Bool(true))
        && let Some(Value::String(t)) = map.get("type")
    {
        out.insert("type".into(), json!([t, "null"]));
    }
    if root && let Some(Value::Object(props)) = out.get_mut("properties") {
        props.insert("apiVersion".into(), json!({"type": "string"}));
        props.insert("kind".into(), json!({"type": "string"}));
        props.insert("metadata".into(), json!({"type": "object"}));
    }
    let preserves = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if out.contains_key("properties") && !out.contains_key("additionalProperties") && !preserves {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    out.into_iter().collect::<serde_json::Map<_, _>>().into()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn expected_type(kind: &TypeKind) -> String {
    match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => {
            let names: Vec<String> = set
                .iter()
                .filter(|t| t.to_string() != "null")
                .map(|t| t.to_string())
                .collect();
            names.join(" or ")
        }
    }
}

fn limit(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// Turn one jsonschema error into problems that say where, what was expected and what was found:
/// one arm per kind of JSON Schema error, each its own sentence (its length is the number of
/// error kinds).
fn describe(e: &jsonschema::ValidationError<'_>) -> Vec<SchemaProblem> {
    let at = field_path_from_pointer(e.instance_path().as_str());
    let found = e.instance();
    let one = |path: String, code: &'static str, message: String| {
        vec![SchemaProblem {
            path,
            code,
            message,
            severity: Severity::Error,
        }]
    };
    match e.kind() {
        ValidationErrorKind::Type { kind } => one(
            at,
            "schema-type",
            format!(
                "expected {}, found {} {}",
                expected_type(kind),
                type_name(found),
                short_json(found)
            ),
        ),
        ValidationErrorKind::Enum { options } => {
            let opts: Vec<String> = options
                .as_array()
                .map(|a| a.iter().filter(|o| !o.is_null()).map(short_json).collect())
                .unwrap_or_default();
            one(
                at,
                "schema-enum",
                format!(
                    "expected one of {}, found {}",
                    opts.join(", "),
                    short_json(found)
                ),
            )
        }
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or("?");
            one(
                join_path(&at, name),
                "schema-required",
                "required field is missing".into(),
            )
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| SchemaProblem {
                path: join_path(&at, name),
                code: "schema-unknown-field",
                message:
                    "unknown field: not part of the schema (check its spelling and indentation)"
                        .into(),
                severity: Severity::Error,
            })
            .collect(),
        ValidationErrorKind::Pattern { pattern } => one(
            at,
            "schema-pattern",
            format!(
                "expected a string matching {pattern}, found {}",
                short_json(found)
            ),
        ),
        ValidationErrorKind::MaxLength { limit: l } => one(
            at,
            "schema-bounds",
            format!(
                "expected at most {l} characters, found {}",
                found.as_str().map_or(0, |s| s.chars().count())
            ),
        ),
        ValidationErrorKind::MinLength { limit: l } => one(
            at,
            "schema-bounds",
            format!(
                "expected at least {l} characters, found {}",
                found.as_str().map_or(0, |s| s.chars().count())
            ),
        ),
        ValidationErrorKind::Maximum { limit: l } => one(
            at,
            "schema-bounds",
            format!("expected at most {}, found {}", limit(l), short_json(found)),
        ),
        ValidationErrorKind::Minimum { limit: l } => one(
            at,
            "schema-bounds",
            format!(
                "expected at least {}, found {}",
                limit(l),
                short_json(found)
            ),
        ),
        ValidationErrorKind::MaxItems { limit: l } => {
            // A grant of more tools than it may name selects them instead.
            let hint = if at.ends_with("spec.tools.names") {
                "; select more by spec.tools.selector (matchLabels such as {toolgate.dev/mcp-server: NAME} for all of an MCP server's tools, actionTypes, maxTier)"
            } else {
                ""
            };
            one(
                at,
                "schema-bounds",
                format!(
                    "expected at most {l} items, found {}{hint}",
                    found.as_array().map_or(0, Vec::len)
                ),
            )
        }
        ValidationErrorKind::MinItems { limit: l } => one(
            at,
            "schema-bounds",
            format!(
                "expected at least {l} items, found {}",
                found.as_array().map_or(0, Vec::len)
            ),
        ),
        ValidationErrorKind::Format { format } => one(
            at,
            "schema-format",
            format!(
                "expected a {format} string (RFC 3339, e.g. 2026-12-31T00:00:00Z), found {}",
                short_json(found)
            ),
        ),
        _ => one(at, "schema", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_schema_closes_objects_but_not_preserved_ones() {
        let s = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "a": {"type": "string", "nullable": true},
                    "args": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}
            }
        });
        let strict = strict_schema(&s, true);
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(
            strict["properties"]["spec"]["additionalProperties"],
            json!(false)
        );
        assert_eq!(
            strict["properties"]["spec"]["properties"]["a"]["type"],
            json!(["string", "null"])
        );
        assert!(
            strict["properties"]["spec"]["properties"]["args"]
                .get("additionalProperties")
                .is_none()
        );
        assert!(strict["properties"]["kind"].is_object());
    }
}
