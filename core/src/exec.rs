//! Building the executor's input ([`ExecSpec`]) from a descriptor, a sandbox policy and the
//! validated args; the contract itself is `toolgate_contract::exec`, re-exported here.

use std::collections::BTreeMap;

pub use toolgate_contract::exec::*;

/// What a runtime resolved for one execution; [`exec_spec`] turns it into the executor's input.
/// Both runtimes build the spec here, so a call means the same thing in a pod and locally.
#[derive(Debug, Clone)]
pub struct ExecInput<'a> {
    /// Which call and event.
    pub call: CallIdentity,
    /// The descriptor, at the digest the call was decided against.
    pub tool: &'a toolgate_crds::ToolDescriptorSpec,
    /// The resolved sandbox policy.
    pub policy: &'a toolgate_crds::SandboxPolicySpec,
    /// Validated args.
    pub args: serde_json::Value,
    /// Dry run.
    pub dry_run: bool,
    /// Where artifacts go.
    pub artifacts: ArtifactTarget,
    /// The credential binding by name, when the tool has one.
    pub credential: Option<(&'a str, &'a toolgate_crds::CredentialBindingSpec)>,
    /// Working directory inside the sandbox.
    pub working_dir: Option<String>,
    /// Write roots inside the sandbox.
    pub write_roots: Vec<String>,
    /// Filesystem rules the executor enforces itself (Landlock), when the runtime wants it to.
    pub confinement: Option<FsRules>,
    /// The call's W3C trace context, handed to the tool's process as `TRACEPARENT` (the OTel
    /// convention for processes) and to an MCP server in `_meta`.
    pub traceparent: Option<String>,
}

/// The executor's input for one discovery of a stdio McpServer on a cluster: its command in the
/// SandboxPolicy's sandbox, as a call of one of its tools would run it, listing instead of
/// calling (`discover`), within the server's discovery timeout; the list goes to the `tools`
/// artifact under `<namespace>/<server>-discovery`.
pub fn discovery_spec(
    namespace: &str,
    server: &str,
    spec: &toolgate_crds::McpServerSpec,
    policy: &toolgate_crds::SandboxPolicySpec,
    artifacts: ArtifactTarget,
    confinement: Option<FsRules>,
    working_dir: Option<String>,
) -> ExecSpec {
    let timeout_ms = u64::from(spec.discovery_timeout_seconds)
        .saturating_mul(1000)
        .min(u64::from(policy.process.timeout_ms));
    let name = format!("{server}-discovery");
    ExecSpec {
        api_version: EXEC_SPEC_VERSION.into(),
        call: CallIdentity {
            namespace: namespace.into(),
            event_id: format!("{name}/{}", jiff::Timestamp::now().as_second()),
            name,
        },
        execution: toolgate_crds::Execution {
            adapter: toolgate_crds::ExecutionAdapter::Mcp,
            image: None,
            argv: spec.command.clone(),
            stdin: None,
            working_dir: None,
            http: None,
            builtin: None,
            mcp: Some(toolgate_crds::McpExecution {
                tool: String::new(),
                url: None,
            }),
            script: None,
            timeout_ms: u32::try_from(timeout_ms).unwrap_or(u32::MAX),
            retry_policy: Default::default(),
        },
        args: serde_json::Value::Object(Default::default()),
        dry_run: false,
        limits: ExecLimits {
            timeout_ms,
            max_stdout_bytes: crate::mcp::MAX_LIST_BYTES as u64,
            max_stderr_bytes: policy.process.max_stderr_bytes,
        },
        context: ContextLimits {
            expose_output_to_model: toolgate_crds::OutputExposure::None,
            max_output_preview_tokens: 0,
        },
        output_schema: None,
        artifacts,
        credentials: Vec::new(),
        env: EnvSpec {
            inherit: policy.environment.inherited_env.clone(),
            set: policy
                .environment
                .injected_env
                .iter()
                .filter_map(|e| e.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        working_dir,
        write_roots: Vec::new(),
        allowed_domains: policy.network.allow_domains.clone(),
        deny_private_networks: policy.network.deny_private_networks,
        confinement,
        discover: true,
        egress_gate: None,
        egress_proxy: None,
        egress_ca: None,
        seccomp_inherited: false,
    }
}

/// Build the executor's input. Limits take the stricter of the descriptor and the policy.
pub fn exec_spec(input: ExecInput<'_>) -> ExecSpec {
    let process = &input.policy.process;
    let env = &input.policy.environment;
    let mut set: BTreeMap<String, String> = env
        .injected_env
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(tp) = input.traceparent {
        set.insert(TRACEPARENT_ENV.into(), tp);
    }
    let credentials = input
        .credential
        .map(|(name, binding)| CredentialFile {
            binding: name.to_string(),
            file_name: binding
                .delivery
                .file_name
                .clone()
                .unwrap_or_else(|| name.to_string()),
            env_name: match binding.delivery.mode {
                // A proxy-delivered binding's placeholder comes the way the value would.
                toolgate_crds::DeliveryMode::Env | toolgate_crds::DeliveryMode::Proxy => {
                    binding.delivery.env_name.clone()
                }
                toolgate_crds::DeliveryMode::File => None,
            },
            placeholder: binding.delivery.mode == toolgate_crds::DeliveryMode::Proxy,
        })
        .into_iter()
        .collect();
    ExecSpec {
        api_version: EXEC_SPEC_VERSION.into(),
        call: input.call,
        execution: input.tool.execution.clone(),
        args: crate::args::with_defaults(&input.tool.schemas.input_schema, input.args),
        dry_run: input.dry_run,
        limits: ExecLimits {
            timeout_ms: u64::from(input.tool.execution.timeout_ms.min(process.timeout_ms)),
            max_stdout_bytes: process.max_stdout_bytes,
            max_stderr_bytes: process.max_stderr_bytes,
        },
        context: ContextLimits {
            expose_output_to_model: input.tool.context_policy.expose_output_to_model,
            max_output_preview_tokens: input.tool.context_policy.max_output_preview_tokens,
        },
        output_schema: input.tool.schemas.output_schema.clone(),
        artifacts: input.artifacts,
        credentials,
        env: EnvSpec {
            inherit: env.inherited_env.clone(),
            set,
        },
        working_dir: input.working_dir,
        write_roots: input.write_roots,
        allowed_domains: input.policy.network.allow_domains.clone(),
        deny_private_networks: input.policy.network.deny_private_networks,
        confinement: input.confinement,
        discover: false,
        egress_gate: None,
        egress_proxy: None,
        egress_ca: None,
        seccomp_inherited: false,
    }
}

/// Whether a call's credential is delivered by its egress proxy (`delivery.mode: proxy`): its
/// sandbox holds a placeholder, and every request of the call goes through the proxy.
pub fn proxy_delivered(binding: Option<(&str, &toolgate_crds::CredentialBindingSpec)>) -> bool {
    binding.is_some_and(|(_, b)| b.delivery.mode == toolgate_crds::DeliveryMode::Proxy)
}

/// Whether the executor's own client may reach the network directly, checking each request
/// itself ([`executor_is_the_only_client`]): not when the call's credential is the proxy's to
/// deliver, which needs every request through the proxy whoever makes it.
pub fn executor_reaches_the_network(
    execution: &toolgate_crds::Execution,
    binding: Option<(&str, &toolgate_crds::CredentialBindingSpec)>,
) -> bool {
    executor_is_the_only_client(execution) && !proxy_delivered(binding)
}

/// Why a call cannot be placed with its credential: a proxy-delivered one under a policy whose
/// egress is not an allowlist (no proxy would carry it). Asked by both runtimes when they plan
/// a call's sandbox, before anyone approves it.
pub fn proxied_credential_refused(
    policy: &toolgate_crds::SandboxPolicySpec,
    binding: Option<(&str, &toolgate_crds::CredentialBindingSpec)>,
) -> Option<String> {
    let (name, _) = binding.filter(|_| proxy_delivered(binding))?;
    (policy.network.egress != toolgate_crds::EgressMode::Allowlist).then(|| {
        format!(
            "network.egress: CredentialBinding {name} is delivered by the call's egress proxy (delivery.mode: proxy), which only a sandbox with egress: allowlist has"
        )
    })
}

#[cfg(test)]
mod proxied_credentials {
    use super::*;

    fn binding(mode: &str) -> toolgate_crds::CredentialBindingSpec {
        serde_json::from_value(serde_json::json!({
            "vault": {"engine": "kv2", "mount": "secret", "path": "a/b", "field": "token"},
            "ttlSeconds": 60,
            "delivery": {"mode": mode, "proxy": {"hosts": ["api.example.com"]}},
        }))
        .expect("binding")
    }

    fn policy(network: serde_json::Value) -> toolgate_crds::SandboxPolicySpec {
        serde_json::from_value(serde_json::json!({
            "mode": "network_restricted",
            "filesystem": {"readRoots": [], "writeRoots": []},
            "network": network,
            "process": {"timeoutMs": 1000, "maxMemoryMb": 64, "maxStdoutBytes": 1024, "maxStderrBytes": 1024},
            "audit": {},
        }))
        .expect("policy")
    }

    #[test]
    fn a_proxy_delivered_credential_needs_an_allowlist_and_takes_the_executor_off_the_network() {
        let proxied = binding("proxy");
        let file = binding("file");
        let none = policy(serde_json::json!({"egress": "none"}));
        let allow =
            policy(serde_json::json!({"egress": "allowlist", "allowDomains": ["api.example.com"]}));
        let why = proxied_credential_refused(&none, Some(("bot", &proxied))).expect("refused");
        assert!(
            why.starts_with("network.egress: CredentialBinding bot"),
            "{why}"
        );
        assert_eq!(
            proxied_credential_refused(&allow, Some(("bot", &proxied))),
            None
        );
        assert_eq!(
            proxied_credential_refused(&none, Some(("bot", &file))),
            None
        );
        assert_eq!(proxied_credential_refused(&none, None), None);
        let http: toolgate_crds::Execution = serde_json::from_value(serde_json::json!({
            "adapter": "http", "timeoutMs": 1000,
            "http": {"method": "GET", "urlTemplate": "https://api.example.com/x"},
        }))
        .expect("execution");
        assert!(executor_reaches_the_network(&http, Some(("bot", &file))));
        assert!(!executor_reaches_the_network(
            &http,
            Some(("bot", &proxied))
        ));
    }
}
