//! A page per kind, walked from its generated CRD: the schema the API server and `toolgate lint`
//! enforce, field by field, with the rules (CEL) on each object.

use std::fmt::Write as _;

use anyhow::Context;
use serde_json::Value;

use super::cell;

/// (file name, text) for every kind.
pub fn pages() -> anyhow::Result<Vec<(String, String)>> {
    toolgate_crds::all_crds()
        .iter()
        .map(|crd| {
            let kind = crd.spec.names.kind.clone();
            let schema = toolgate_crds::openapi_schema(crd)
                .with_context(|| format!("the {kind} CRD has no schema"))?;
            Ok((format!("{}.md", kind.to_lowercase()), page(crd, &schema)))
        })
        .collect()
}

fn page(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    schema: &Value,
) -> String {
    let names = &crd.spec.names;
    let version = crd
        .spec
        .versions
        .first()
        .map(|v| v.name.as_str())
        .unwrap_or_default();
    let mut s = format!(
        "# {kind}\n\n\
         For platform teams writing `{kind}` manifests and anyone reading one with kubectl: every \
         field, its type and its rules, as the API server and `toolgate lint` enforce them.\n\n\
         | | |\n| --- | --- |\n\
         | apiVersion | `{group}/{version}` |\n| scope | {scope} |\n| plural | `{plural}` |\n",
        kind = names.kind,
        group = crd.spec.group,
        scope = crd.spec.scope,
        plural = names.plural,
    );
    if let Some(short) = names.short_names.as_ref().filter(|v| !v.is_empty()) {
        let _ = writeln!(s, "| short names | `{}` |", short.join("`, `"));
    }
    if let Some(cats) = names.categories.as_ref().filter(|v| !v.is_empty()) {
        let _ = writeln!(s, "| categories | `{}` |", cats.join("`, `"));
    }
    if let Some(cols) = crd
        .spec
        .versions
        .first()
        .and_then(|v| v.additional_printer_columns.as_ref())
    {
        let cols: Vec<String> = cols.iter().map(|c| format!("`{}`", c.name)).collect();
        let _ = writeln!(s, "| `kubectl get` columns | {} |", cols.join(", "));
    }
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let _ = writeln!(s, "\n{d}");
    }
    for top in ["spec", "status"] {
        if let Some(sub) = schema.pointer(&format!("/properties/{top}")) {
            let _ = writeln!(s, "\n## {top}\n");
            rules(&mut s, top, sub);
            s.push_str("| field | type | description |\n| --- | --- | --- |\n");
            let mut nested = Vec::new();
            fields(&mut s, top, sub, &mut nested);
            s.push('\n');
            for (path, obj) in nested {
                rules(&mut s, &path, obj);
            }
        }
    }
    s
}

/// One row per field under `obj` (recursively), and the objects that carry CEL rules.
fn fields<'a>(
    s: &mut String,
    path: &str,
    obj: &'a Value,
    with_rules: &mut Vec<(String, &'a Value)>,
) {
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = obj.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, field) in props {
        let here = format!("{path}.{name}");
        let mut desc = field
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if required.contains(&name.as_str()) {
            desc.insert_str(0, "**Required.** ");
        }
        desc.push_str(&constraints(field));
        let _ = writeln!(
            s,
            "| `{here}` | {} | {} |",
            type_of(field),
            cell(desc.trim())
        );
        if field.get("x-kubernetes-validations").is_some() {
            with_rules.push((here.clone(), field));
        }
        match field.get("type").and_then(Value::as_str) {
            Some("object") => {
                fields(s, &here, field, with_rules);
                if let Some(values) = field.get("additionalProperties").filter(|v| v.is_object()) {
                    fields(s, &format!("{here}.*"), values, with_rules);
                }
            }
            Some("array") => {
                if let Some(items) = field.get("items") {
                    if items.get("x-kubernetes-validations").is_some() {
                        with_rules.push((format!("{here}[]"), items));
                    }
                    fields(s, &format!("{here}[]"), items, with_rules);
                }
            }
            _ => {}
        }
    }
}

fn type_of(field: &Value) -> String {
    let t = field.get("type").and_then(Value::as_str).unwrap_or("any");
    let base = match t {
        "array" => {
            let item = field
                .get("items")
                .map(type_of)
                .unwrap_or_else(|| "any".into());
            format!("[]{item}")
        }
        "object" if field.get("properties").is_none() => match field.get("additionalProperties") {
            Some(v) if v.is_object() => format!("map[string]{}", type_of(v)),
            _ => "object".into(),
        },
        _ => t.to_string(),
    };
    match field.get("format").and_then(Value::as_str) {
        Some(f) => format!("{base} ({f})"),
        None => base,
    }
}

fn constraints(field: &Value) -> String {
    let mut c = Vec::new();
    if let Some(e) = field.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = e.iter().map(|v| format!("`{}`", plain(v))).collect();
        c.push(format!("One of {}.", values.join(", ")));
    }
    if let Some(d) = field.get("default") {
        c.push(format!("Default `{}`.", plain(d)));
    }
    for (key, words) in [
        ("minimum", "Minimum"),
        ("maximum", "Maximum"),
        ("minLength", "At least this many characters:"),
        ("maxLength", "At most this many characters:"),
        ("minItems", "At least this many items:"),
        ("maxItems", "At most this many items:"),
        ("maxProperties", "At most this many entries:"),
    ] {
        if let Some(v) = field.get(key) {
            c.push(format!("{words} {}.", plain(v)));
        }
    }
    if let Some(p) = field.get("pattern").and_then(Value::as_str) {
        c.push(format!("Pattern `{p}`."));
    }
    if field.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        c.push("Any JSON.".into());
    }
    if c.is_empty() {
        String::new()
    } else {
        format!(" {}", c.join(" "))
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // Schemas spell bounds as floats (`0.0`): a whole number reads better whole.
        Value::Number(n)
            if n.as_f64()
                .is_some_and(|f| f.fract() == 0.0 && f.abs() < 1e15) =>
        {
            format!("{}", n.as_f64().unwrap_or_default() as i64)
        }
        other => other.to_string(),
    }
}

fn rules(s: &mut String, path: &str, obj: &Value) {
    let Some(rules) = obj
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    else {
        return;
    };
    let _ = writeln!(
        s,
        "Rules on `{path}` (CEL, checked by the API server and `toolgate lint`):\n"
    );
    for r in rules {
        let rule = r.get("rule").and_then(Value::as_str).unwrap_or_default();
        let message = r.get("message").and_then(Value::as_str).unwrap_or_default();
        let _ = writeln!(s, "- `{}` — {}", rule.replace('`', "'"), message);
    }
    s.push('\n');
}
