//! Tool definitions written for a model provider's API — OpenAI Chat Completions
//! (`{"type": "function", "function": {name, description, parameters}}`), OpenAI Responses
//! (`{"type": "function", name, description, parameters}`) or Anthropic Messages
//! (`{name, description, input_schema}`) — imported as ToolDescriptors, so the functions an
//! application already hands a model can be governed: each becomes an `http` tool that POSTs its
//! args to the application's endpoint for it, and calls go through grants, policy, approvals
//! and a sandbox like any other.
//!
//! What a definition says is kept: its schema byte for byte (the model is shown the same
//! thing), its name where it is a valid object name, its description as the summary. What it
//! does not say is taken conservatively: definitions carry no annotations, so every tool is a
//! writer of an outside system nobody said is safe ([`toolgate_core::mcp::calibrate`]): an approval on
//! every call from the team's own definitions; from a third party, L5 with a second approver.

use serde_json::Value;
use toolgate_crds::{
    Execution, ExecutionAdapter, HttpExecution, HttpMethod, SourceType, ToolDescriptorSpec,
    TrustLevel,
};

use toolgate_core::mcp::{ListError, Normalized, Refused, ServerConfig};

/// Where imported tools run and how far they are believed.
#[derive(Debug, Clone, Copy)]
pub struct ImportConfig<'a> {
    /// Namespace of the descriptors.
    pub namespace: &'a str,
    /// A prefix for every name (`app` → `app.get-weather`); none keeps names as they are where
    /// valid.
    pub prefix: Option<&'a str>,
    /// The application's endpoint: a tool `get_weather` is POSTed to `<url_base>/get_weather`.
    pub url_base: &'a str,
    /// The SandboxPolicy the calls run under (its egress must allow the endpoint's host).
    pub sandbox_policy: &'a str,
    /// The CredentialBinding sent as `Authorization: Bearer`, if the endpoint needs one.
    pub credential_binding: Option<&'a str>,
    /// How far the definitions are believed.
    pub trust: TrustLevel,
}

/// A definition as the provider's API takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// The function's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its arguments' JSON Schema, as given.
    pub schema: Value,
}

/// Every definition of a file: a JSON array, an object with `tools`, or one definition. A
/// definition that is not one of the three shapes is refused with why; the others are kept.
pub fn parse_definitions(text: &str) -> Result<Vec<Result<Definition, Refused>>, ListError> {
    if text.len() > toolgate_core::mcp::MAX_LIST_BYTES {
        return Err(ListError::TooLarge(text.len()));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| ListError::NotJson(e.to_string()))?;
    let items = match v {
        Value::Array(items) => items,
        Value::Object(mut m) => match m.remove("tools") {
            Some(Value::Array(items)) => items,
            Some(_) => return Err(ListError::Shape("a \"tools\" that is not an array")),
            None => vec![Value::Object(m)],
        },
        _ => return Err(ListError::Shape("neither an object nor an array")),
    };
    Ok(items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            definition(item).map_err(|message| Refused {
                index,
                name: item
                    .get("name")
                    .or_else(|| item.get("function").and_then(|f| f.get("name")))
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .chars()
                    .take(128)
                    .collect(),
                message,
            })
        })
        .collect())
}

fn definition(item: &Value) -> Result<Definition, String> {
    // OpenAI Chat Completions wraps the function; Anthropic names its schema `input_schema`;
    // OpenAI Responses is flat.
    let (body, schema_key) = if let Some(f) = item.get("function") {
        (f, "parameters")
    } else if item.get("input_schema").is_some() {
        (item, "input_schema")
    } else if item.get("type").and_then(Value::as_str) == Some("function") {
        (item, "parameters")
    } else {
        return Err(
            "expected an OpenAI function tool ({type: function, function: {...}} or {type: function, name, parameters}) or an Anthropic tool ({name, input_schema})".into(),
        );
    };
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .ok_or("name: expected a string")?
        .to_string();
    let description = match body.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err("description: expected a string".into()),
    };
    let schema = match body.get(schema_key) {
        // OpenAI lets a function take no arguments by leaving `parameters` out.
        None | Some(Value::Null) if schema_key == "parameters" => {
            serde_json::json!({"type": "object", "properties": {}})
        }
        Some(v @ Value::Object(_)) => v.clone(),
        None | Some(Value::Null) => {
            return Err(format!(
                "{schema_key}: expected a JSON Schema object, found none"
            ));
        }
        Some(_) => {
            return Err(format!(
                "{schema_key}: expected a JSON Schema object, found another JSON type"
            ));
        }
    };
    Ok(Definition {
        name,
        description,
        schema,
    })
}

/// The descriptors of the definitions, and the definitions refused with why.
pub fn import(
    config: &ImportConfig<'_>,
    definitions: &[Definition],
) -> (Vec<Normalized>, Vec<Refused>) {
    let group = config.prefix.unwrap_or("imported");
    let command: [String; 0] = [];
    let server = ServerConfig {
        name: group,
        trust: config.trust,
        namespace: config.namespace,
        command: &command,
        url: None,
        credential_binding: config.credential_binding,
        image: None,
        sandbox_policy: config.sandbox_policy,
        version: None,
    };
    // The MCP shape the normalizer reads: the same name, description and schema, no hints.
    let tools: Vec<Value> = definitions
        .iter()
        .map(|d| serde_json::json!({"name": d.name, "description": d.description, "inputSchema": d.schema}))
        .collect();
    let (normalized, mut refused) = toolgate_core::mcp::normalize(&server, &tools);
    let mut out = Vec::new();
    let mut taken = std::collections::BTreeSet::new();
    for n in normalized {
        let raw = n
            .spec
            .execution
            .mcp
            .as_ref()
            .map(|m| m.tool.clone())
            .unwrap_or_default();
        let index = definitions.iter().position(|d| d.name == raw).unwrap_or(0);
        match as_http(config, n, &raw) {
            Ok(t) if !taken.insert(t.name.clone()) => refused.push(Refused {
                index,
                name: raw,
                message: format!("its name {} is taken by an earlier definition", t.name),
            }),
            Ok(t) => out.push(t),
            Err(message) => refused.push(Refused {
                index,
                name: raw,
                message,
            }),
        }
    }
    refused.sort_by_key(|r| r.index);
    (out, refused)
}

/// A normalized tool turned into an `http` tool of the application's endpoint, named as the
/// definition names it where that is a valid object name.
fn as_http(config: &ImportConfig<'_>, n: Normalized, raw: &str) -> Result<Normalized, String> {
    let mut spec: ToolDescriptorSpec = n.spec;
    let name = match config.prefix {
        Some(_) => n.name,
        None if toolgate_core::names::is_dns_subdomain(raw) => raw.to_string(),
        None => n
            .name
            .split_once('.')
            .map_or(n.name.clone(), |(_, rest)| rest.to_string()),
    };
    let base = config.url_base.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(format!(
            "--url-base: expected an http:// or https:// URL, found {base:?}"
        ));
    }
    let url = format!("{base}/{}", toolgate_core::text::percent_encode(raw));
    let properties: Vec<String> = spec
        .schemas
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if properties.len() > 64 {
        return Err(format!(
            "inputSchema: {} top-level properties; the http adapter sends at most 64",
            properties.len()
        ));
    }
    if spec.description.summary.starts_with("The MCP tool ") {
        spec.description.summary =
            format!("The function {raw} (its definition gives no description).");
    }
    // The application's things, and the scope a grant gives for them.
    let group = config.prefix.unwrap_or("imported");
    let resources = |list: &mut Vec<String>| {
        if !list.is_empty() {
            *list = vec![format!("http:{group}:**")];
        }
    };
    resources(&mut spec.effects.reads);
    resources(&mut spec.effects.writes);
    resources(&mut spec.effects.deletes);
    spec.permissions.required_scopes = vec![format!("tools:{group}")];
    spec.canonical_name = name.clone();
    spec.source.type_ = SourceType::Http;
    spec.source.server_id = None;
    spec.source.uri = Some(url.clone());
    spec.execution = Execution {
        adapter: ExecutionAdapter::Http,
        image: None,
        argv: Vec::new(),
        http: Some(HttpExecution {
            method: HttpMethod::Post,
            url_template: url,
            headers: Default::default(),
            body_args: properties,
            credential_header: config
                .credential_binding
                .map(|_| "Authorization".to_string()),
            credential_prefix: config.credential_binding.map(|_| "Bearer ".to_string()),
        }),
        mcp: None,
        ..spec.execution
    };
    Ok(Normalized { name, spec })
}

/// The descriptors as YAML documents, for a pull request.
pub fn to_yaml(config: &ImportConfig<'_>, tools: &[Normalized]) -> Result<String, String> {
    let mut out = String::new();
    for t in tools {
        let object = serde_json::json!({
            "apiVersion": toolgate_crds::API_VERSION,
            "kind": "ToolDescriptor",
            "metadata": {"name": t.name, "namespace": config.namespace},
            "spec": t.spec,
        });
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&object).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_crds::{ApprovalPolicy, RiskTier};

    const SCHEMA: &str = r#"{"type":"object","properties":{"location":{"type":"string","description":"City, e.g. Paris"},"unit":{"type":"string","enum":["c","f"]}},"required":["location"],"additionalProperties":false}"#;

    fn config(trust: TrustLevel) -> ImportConfig<'static> {
        ImportConfig {
            namespace: "team-a",
            prefix: None,
            url_base: "https://weather.internal/tools/",
            sandbox_policy: "weather-api",
            credential_binding: Some("weather-token"),
            trust,
        }
    }

    #[test]
    fn every_provider_shape_is_read_and_the_schema_kept_byte_for_byte() {
        let text = format!(
            r#"[
              {{"type": "function", "function": {{"name": "get_weather", "description": "Weather now.", "parameters": {SCHEMA}}}}},
              {{"type": "function", "name": "get-forecast", "description": "Forecast.", "parameters": {SCHEMA}}},
              {{"name": "getAlerts", "description": "Alerts.", "input_schema": {SCHEMA}}},
              {{"type": "function", "function": {{"name": "ping"}}}},
              {{"name": "broken"}},
              {{"name": "bad", "input_schema": "none"}}
            ]"#
        );
        let parsed = parse_definitions(&text).expect("a list");
        let (ok, bad): (Vec<_>, Vec<_>) = parsed.into_iter().partition(Result::is_ok);
        let defs: Vec<Definition> = ok.into_iter().map(|d| d.expect("ok")).collect();
        let bad: Vec<String> = bad
            .into_iter()
            .map(|e| e.expect_err("bad").to_string())
            .collect();
        assert_eq!(defs.len(), 4);
        assert!(
            bad[0].contains("tools[4] (broken): expected an OpenAI function tool"),
            "{bad:?}"
        );
        assert!(
            bad[1].contains("input_schema: expected a JSON Schema object"),
            "{bad:?}"
        );
        let (tools, refused) = import(&config(TrustLevel::FirstParty), &defs);
        assert!(refused.is_empty(), "{refused:?}");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        // Names kept where valid, made valid where not.
        assert_eq!(names, ["get-weather", "get-forecast", "getalerts", "ping"]);
        for t in &tools[..3] {
            assert_eq!(
                serde_json::to_string(&t.spec.schemas.input_schema).expect("json"),
                SCHEMA,
                "{}",
                t.name
            );
            assert_eq!(t.spec.permissions.required_scopes, ["tools:imported"]);
            let http = t.spec.execution.http.as_ref().expect("http");
            assert_eq!(http.body_args, ["location", "unit"]);
            assert_eq!(http.credential_header.as_deref(), Some("Authorization"));
        }
        assert_eq!(
            tools[0]
                .spec
                .execution
                .http
                .as_ref()
                .expect("http")
                .url_template,
            "https://weather.internal/tools/get_weather"
        );
        assert_eq!(tools[3].spec.schemas.input_schema["type"], "object");
        // Nothing said it is safe: an approval on every call, not a deletion.
        let spec = &tools[0].spec;
        assert_eq!(spec.permissions.approval_policy, ApprovalPolicy::Always);
        assert_eq!(toolgate_core::risk::descriptor_tier(spec), RiskTier::L4);
        let (third, _) = import(&config(TrustLevel::ThirdParty), &defs);
        assert_eq!(
            toolgate_core::risk::descriptor_tier(&third[0].spec),
            RiskTier::L5
        );
    }

    #[test]
    fn a_prefix_names_every_tool_and_bad_input_says_what_is_wrong() {
        let defs = vec![Definition {
            name: "get_weather".into(),
            description: String::new(),
            schema: serde_json::json!({"type": "object"}),
        }];
        let cfg = ImportConfig {
            prefix: Some("weather"),
            ..config(TrustLevel::FirstParty)
        };
        let (tools, _) = import(&cfg, &defs);
        assert_eq!(tools[0].name, "weather.get-weather");
        assert!(
            tools[0]
                .spec
                .description
                .summary
                .contains("function get_weather")
        );
        let cfg = ImportConfig {
            url_base: "ftp://x",
            ..cfg
        };
        let (_, refused) = import(&cfg, &defs);
        assert!(refused[0].message.contains("--url-base"), "{refused:?}");
        for text in ["nope", "42", r#"{"tools": 3}"#] {
            assert!(parse_definitions(text).is_err(), "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_imported_or_refused_never_a_panic(text in ".{0,300}") {
            if let Ok(defs) = parse_definitions(&text) {
                let defs: Vec<Definition> = defs.into_iter().filter_map(Result::ok).collect();
                let _ = import(&config(TrustLevel::Untrusted), &defs);
            }
        }
    }
}
