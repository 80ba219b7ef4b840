//! Chainable fixtures for the suites: the test tools, grants and calls every suite needs, in the
//! manner of controller-rs's `fixtures.rs` — `Tool::test("test.gated").approval("always")`.
//! One definition serves the embedded runtime's suites, the operator's and the scenario suite
//! that runs on both, so the backends are compared on the same objects.

/// A ToolDescriptor for tests: a CLI tool in the test domain, first party, read-only policy.
#[derive(Debug, Clone)]
pub struct Tool {
    name: String,
    argv: String,
    approval: String,
    idempotent: bool,
    summary: String,
    policy: String,
    binding: Option<String>,
    timeout_ms: u32,
    destructive: Option<String>,
}

impl Tool {
    /// `name`, echoing its `msg` arg, never needing approval, idempotent.
    pub fn test(name: &str) -> Tool {
        Tool {
            name: name.into(),
            argv: "[echo, \"{{msg}}\"]".into(),
            approval: "never".into(),
            idempotent: true,
            summary: "A tool of toolgate's test suites.".into(),
            policy: "read-only".into(),
            binding: None,
            timeout_ms: 20_000,
            destructive: None,
        }
    }

    /// An L5 tool: it also deletes (in the workspace, so under the `workspace-write` policy),
    /// supports dry runs (it is told through `TOOLGATE_DRY_RUN`) and asks for `confirmation`
    /// (`dry_run`, `second_approver`) besides the approval of each call.
    pub fn destructive(mut self, confirmation: &str) -> Tool {
        self.destructive = Some(confirmation.into());
        self.policy = "workspace-write".into();
        self
    }

    /// The argv template, as YAML (`[sleep, "{{seconds}}"]`).
    pub fn argv(mut self, argv: &str) -> Tool {
        self.argv = argv.into();
        self
    }

    /// The approval policy (`never`, `on_risk`, `always`).
    pub fn approval(mut self, policy: &str) -> Tool {
        self.approval = policy.into();
        self
    }

    /// Whether the tool may run again after an interruption.
    pub fn idempotent(mut self, yes: bool) -> Tool {
        self.idempotent = yes;
        self
    }

    /// The summary models read.
    pub fn summary(mut self, text: &str) -> Tool {
        self.summary = text.into();
        self
    }

    /// The sandbox policy it names.
    pub fn policy(mut self, name: &str) -> Tool {
        self.policy = name.into();
        self
    }

    /// The credential binding it names.
    pub fn binding(mut self, name: &str) -> Tool {
        self.binding = Some(name.into());
        self
    }

    /// Its timeout.
    pub fn timeout_ms(mut self, ms: u32) -> Tool {
        self.timeout_ms = ms;
        self
    }

    /// The descriptor as YAML in `namespace`.
    pub fn yaml(&self, namespace: &str) -> String {
        let binding = self
            .binding
            .as_ref()
            .map(|b| format!("  credentialBindingRef: {{name: {b}}}\n"))
            .unwrap_or_default();
        let (actions, effects, risk, confirmation) = match &self.destructive {
            None => (
                "[execute]",
                "reads: [], writes: [], externalCalls: false, sendsUserData: false,\n            mutatesState: false, idempotent: {idempotent}, reversible: true, dryRunSupported: false",
                "{level: low, destructive: false, openWorld: false}",
                String::new(),
            ),
            Some(c) => (
                "[execute, delete]",
                "reads: [], writes: [], deletes: [\"workspace:**\"], externalCalls: false, sendsUserData: false,\n            mutatesState: true, idempotent: {idempotent}, reversible: false, dryRunSupported: true",
                "{level: high, destructive: true, openWorld: false}",
                format!(", strongConfirmation: {c}"),
            ),
        };
        let effects = effects.replace("{idempotent}", &self.idempotent.to_string());
        format!(
            r#"apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  canonicalName: {name}
  version: "1.0.0"
  source: {{type: cli, packageName: coreutils}}
  description:
    summary: {summary}
    useWhen: ["testing toolgate"]
    doNotUseWhen: ["anything else"]
  intent: {{actionTypes: {actions}, domains: [test]}}
  schemas:
    inputSchema:
      type: object
      additionalProperties: false
      properties:
        seconds: {{type: string, pattern: "^[0-9]{{1,2}}$"}}
        msg: {{type: string, maxLength: 64}}
  effects: {{{effects}}}
  risk: {risk}
  permissions: {{approvalPolicy: {approval}, requiredScopes: ["workspace:read"]{confirmation}}}
  sandboxPolicyRef: {{name: {policy}}}
{binding}  contextPolicy: {{exposeToModel: true, exposeOutputToModel: full, maxOutputPreviewTokens: 100}}
  execution: {{adapter: cli, argv: {argv}, timeoutMs: {timeout}}}
  provenance: {{trustLevel: first_party}}
"#,
            name = self.name,
            summary = self.summary,
            approval = self.approval,
            policy = self.policy,
            argv = self.argv,
            timeout = self.timeout_ms,
        )
    }
}

/// A ToolGrant in `namespace` giving the fixer agent (`system:serviceaccount:team-a:fixer`, the
/// agent of the examples and of the test control plane) the named tools with `workspace:read`.
pub fn grant(namespace: &str, name: &str, tools: &[&str]) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  subjects:\n  - {{kind: ServiceAccount, name: fixer, namespace: team-a}}\n  tools: {{names: [{}]}}\n  scopes: [\"workspace:read\"]\n  reason: toolgate's test suites\n",
        tools.join(", ")
    )
}

/// A subagent tool `name` in `namespace`: a delegation to the `helper` subagent allowing
/// `test.echo` only, for `max_calls` calls and `timeout_ms`, its result `{echoed: <integer>}`.
pub fn delegation_tool(namespace: &str, name: &str, max_calls: u32, timeout_ms: u64) -> String {
    format!(
        r#"apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  canonicalName: {name}
  version: "1.0.0"
  source: {{type: subagent, sourceId: helper}}
  description: {{summary: Delegate echoing to the helper subagent.}}
  intent: {{actionTypes: [subagent_delegate]}}
  schemas:
    inputSchema: {{type: object, required: [task], additionalProperties: false, properties: {{task: {{type: string}}}}}}
    outputSchema: {{type: object, required: [echoed], properties: {{echoed: {{type: integer}}}}}}
  effects: {{reads: [], writes: [], deletes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: false, reversible: true, dryRunSupported: false}}
  risk: {{level: low, destructive: false, openWorld: false}}
  permissions: {{approvalPolicy: never, requiredScopes: ["workspace:read"]}}
  contextPolicy: {{exposeToModel: true, exposeOutputToModel: structured, maxOutputPreviewTokens: 500}}
  execution: {{adapter: subagent, timeoutMs: 600000}}
  subagent:
    agentId: helper
    allowedTools: [test.echo]
    contextPolicy: {{inheritParentContext: summary, returnTranscript: false}}
    budget: {{maxCalls: {max_calls}, maxTokens: 1000, timeoutMs: {timeout_ms}}}
  provenance: {{trustLevel: first_party}}
"#
    )
}

/// The tools every suite uses: an echo, a sleep (idempotent and not), an echo that always
/// needs an approval.
pub fn standard_tools() -> Vec<Tool> {
    vec![
        Tool::test("test.echo").summary("Echo a message."),
        Tool::test("test.sleep")
            .argv("[sleep, \"{{seconds}}\"]")
            .idempotent(false)
            .summary("Sleep for a while."),
        Tool::test("test.sleep-idempotent")
            .argv("[sleep, \"{{seconds}}\"]")
            .summary("Sleep, safely repeatable."),
        Tool::test("test.gated")
            .approval("always")
            .idempotent(false)
            .summary("Echo a message after approval."),
    ]
}

/// Names of [`standard_tools`].
pub const STANDARD_TOOLS: [&str; 4] = [
    "test.echo",
    "test.sleep",
    "test.sleep-idempotent",
    "test.gated",
];

/// A ToolCall object as YAML (a call made with kubectl rather than the API).
pub fn call(namespace: &str, name: &str, tool: &str, args: &str, principal_ns: &str) -> String {
    format!(
        r#"apiVersion: toolgate.dev/v1alpha1
kind: ToolCall
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  toolRef: {{name: {tool}}}
  principal: system:serviceaccount:{principal_ns}:fixer
  args: {args}
  intent: {{userGoal: test the operator, currentTask: run {tool}, actionType: execute, rationaleSummary: end-to-end test}}
"#
    )
}
