//! The GitOps review commands, offline over a folder of manifests: `check`, `view`, `diff`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use toolgate_core::args::ArgsLimits;
use toolgate_core::decision::{ApprovalEntry, CallUnderReview, Decision, decide_in};
use toolgate_core::lint::{LintReport, Severity};
use toolgate_core::manifest::{Object, Spec};
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_core::view::{ViewFormat, ViewRequest, compile_view};
use toolgate_crds::{ActionType, DecisionOutcome};
use toolgate_review::policy_diff::{diff_policies, markdown, rule_changes, rules_markdown};

use crate::lint_cmd::{lint_paths_with, linter};
use crate::{out, outln};

use crate::client::exit::{EXIT_APPROVAL, EXIT_BAD_MANIFESTS, EXIT_DENY};

/// Output of the review commands: for people (`text`), or for programs (`json`, `yaml`).
pub use crate::client::out::Format as Output;

/// Output of `diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffOutput {
    /// A pull-request comment.
    Markdown,
    /// For programs.
    Json,
    /// For programs, as YAML.
    Yaml,
}

/// Provider formats of `view`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// toolgate's form, with digests and reasons.
    Canonical,
    /// OpenAI Chat Completions function tools.
    Openai,
    /// OpenAI Responses API function tools.
    OpenaiResponses,
    /// Anthropic tools.
    Anthropic,
    /// MCP tools/list entries.
    Mcp,
}

pub(crate) fn parse_now(now: Option<&str>) -> anyhow::Result<jiff::Timestamp> {
    match now {
        None => Ok(jiff::Timestamp::now()),
        Some(s) => s.parse().with_context(|| {
            format!("--now: expected an RFC 3339 time such as 2026-12-01T00:00:00Z, found {s:?}")
        }),
    }
}

/// Lint a folder (plus extra files); print the errors and fail if there are any outside `lenient`.
pub(crate) fn load(
    paths: &[PathBuf],
    lenient: Option<&Path>,
    now: jiff::Timestamp,
) -> anyhow::Result<Result<LintReport, ExitCode>> {
    load_with(paths, Vec::new(), lenient, now)
}

/// [`load`], with manifests a command made beside the files'.
pub(crate) fn load_with(
    paths: &[PathBuf],
    extra: Vec<toolgate_core::manifest::RawManifest>,
    lenient: Option<&Path>,
    now: jiff::Timestamp,
) -> anyhow::Result<Result<LintReport, ExitCode>> {
    let linter = linter()?;
    let mut report = lint_paths_with(&linter, paths, extra, now);
    report.findings.retain(|f| f.severity == Severity::Error);
    let lenient_src = lenient.map(|p| p.display().to_string());
    // In the call under review, semantic problems (bad args, stale digest) are the decision's to
    // report; only problems that stop it from being read at all are fatal.
    let fatal: Vec<_> = report
        .findings
        .iter()
        .filter(|f| !f.holds_back_its_tool_only())
        .filter(|f| {
            Some(&f.origin.source) != lenient_src.as_ref()
                || f.code.starts_with("schema")
                || matches!(
                    f.code,
                    "yaml-syntax"
                        | "io"
                        | "unknown-kind"
                        | "api-version"
                        | "metadata"
                        | "cel-rule"
                        | "duplicate-object"
                        | "not-an-object"
                )
        })
        .collect();
    for f in report
        .findings
        .iter()
        .filter(|f| f.holds_back_its_tool_only())
    {
        eprintln!("{f}");
    }
    if !fatal.is_empty() {
        for f in &fatal {
            eprintln!("{f}");
        }
        eprintln!(
            "toolgate: the manifests have {} error(s); fix them first (toolgate lint)",
            fatal.len()
        );
        return Ok(Err(ExitCode::from(EXIT_BAD_MANIFESTS)));
    }
    Ok(Ok(report))
}

/// `toolgate check`.
pub fn check(
    manifests: &Path,
    call_file: &Path,
    principal: Option<&str>,
    groups: &[String],
    output: Output,
    now: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let now = parse_now(now)?;
    if !call_file.is_file() {
        bail!("--call {}: no such file", call_file.display());
    }
    let report = match load(
        &[manifests.to_path_buf(), call_file.to_path_buf()],
        Some(call_file),
        now,
    )? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let registry = Registry::from_objects(&report.objects);
    let source = call_file.display().to_string();
    let calls: Vec<(&Object, &toolgate_crds::ToolCallSpec)> = report
        .objects
        .calls()
        .filter(|(o, _)| o.origin.source == source)
        .collect();
    if calls.is_empty() {
        bail!(
            "--call {}: expected a ToolCall manifest, found none",
            call_file.display()
        );
    }
    let mut worst = 0u8;
    let mut results = Vec::new();
    for (obj, spec) in calls {
        let principal = Principal::new(principal.unwrap_or(&spec.principal))
            .with_groups(groups.iter().cloned());
        let approvals: Vec<ApprovalEntry<'_>> = report
            .objects
            .iter()
            .filter(|o| o.meta.namespace() == obj.meta.namespace())
            .filter_map(|o| match &o.spec {
                Spec::ToolApproval(a) if a.call_ref.name == obj.meta.name => Some(ApprovalEntry {
                    name: &o.meta.name,
                    spec: a,
                    consumed: false,
                }),
                _ => None,
            })
            .collect();
        let call = CallUnderReview {
            namespace: obj.meta.namespace(),
            name: &obj.meta.name,
            spec,
            principal: &principal,
            dry_runs: &[],
            tool_policies: None,
            delegation: None,
        };
        let decision = decide_in(&registry, &call, &approvals, now, &ArgsLimits::default());
        let code = match decision.outcome {
            DecisionOutcome::Allow => 0,
            DecisionOutcome::RequireApproval => EXIT_APPROVAL,
            DecisionOutcome::Deny => EXIT_DENY,
        };
        worst = worst.max(code);
        results.push((
            obj.meta.namespace().to_string(),
            obj.meta.name.clone(),
            spec.tool_ref.name.clone(),
            principal.name.clone(),
            decision,
        ));
    }
    match output {
        Output::Json | Output::Yaml => {
            let items: Vec<serde_json::Value> = results
                .iter()
                .map(|(ns, name, tool, principal, d)| serde_json::json!({"call": format!("{ns}/{name}"), "tool": tool, "principal": principal, "decision": d}))
                .collect();
            crate::client::out::object(&serde_json::Value::Array(items), output);
        }
        Output::Text => {
            for (ns, name, tool, principal, d) in &results {
                print_decision(ns, name, tool, principal, d);
            }
        }
    }
    Ok(ExitCode::from(worst))
}

fn print_decision(ns: &str, name: &str, tool: &str, principal: &str, d: &Decision) {
    let outcome = match d.outcome {
        DecisionOutcome::Allow => "ALLOW",
        DecisionOutcome::RequireApproval => "REQUIRE APPROVAL",
        DecisionOutcome::Deny => "DENY",
    };
    outln!("call       {ns}/{name}");
    match (d.risk_tier, d.risk_level) {
        (Some(t), Some(l)) => outln!("tool       {tool} ({t} {}, declared {l})", t.label()),
        _ => outln!("tool       {tool}"),
    }
    if let Some(digest) = &d.tool_digest {
        outln!("version    {digest}");
    }
    outln!("principal  {principal}");
    if let Some(a) = &d.args_digest {
        outln!("args       {a}");
    }
    outln!("decision   {outcome}");
    if let Some(g) = &d.grant {
        outln!("grant      {g}");
    }
    if let Some(a) = &d.approval {
        outln!("approval   {a}");
    }
    if !d.missing_scopes.is_empty() {
        outln!("missing    {}", d.missing_scopes.join(", "));
    }
    outln!("because");
    for r in &d.reasons {
        outln!("  - {}: {}", r.code, r.message);
    }
    for v in &d.args_violations {
        outln!(
            "  - args {}: {} ({})",
            if v.pointer.is_empty() {
                "/"
            } else {
                &v.pointer
            },
            v.message,
            v.rule
        );
    }
    outln!();
}

/// Options of `toolgate view`.
pub struct ViewArgs<'a> {
    pub manifests: &'a Path,
    pub principal: &'a str,
    pub groups: &'a [String],
    pub namespace: Option<&'a str>,
    pub intent: &'a str,
    pub action_type: Option<ActionType>,
    pub domains: &'a [String],
    pub max_tools: usize,
    pub format: Format,
    pub explain: bool,
    pub now: Option<&'a str>,
    pub output: Output,
}

/// `toolgate view`.
pub fn view(a: &ViewArgs<'_>) -> anyhow::Result<ExitCode> {
    let now = parse_now(a.now)?;
    let report = match load(&[a.manifests.to_path_buf()], None, now)? {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let registry = Registry::from_objects(&report.objects);
    let principal = Principal::new(a.principal).with_groups(a.groups.iter().cloned());
    let namespace = match (a.namespace, principal.service_account()) {
        (Some(ns), _) => ns.to_string(),
        (None, Some((ns, _))) => ns.to_string(),
        (None, None) => bail!(
            "--namespace is required for a principal that is not a service account ({})",
            a.principal
        ),
    };
    let failures = BTreeMap::new();
    let view = compile_view(
        &registry,
        &ViewRequest {
            namespace: &namespace,
            principal: &principal,
            intent: a.intent,
            action_type: a.action_type,
            domains: a.domains,
            max_tools: a.max_tools,
            recent_failures: &failures,
            explain: a.explain,
            now,
            // A folder of manifests has no ledger: the view as if every budget were unused.
            usage: &Default::default(),
        },
    );
    let format = match a.format {
        Format::Canonical => ViewFormat::Canonical,
        Format::Openai => ViewFormat::OpenAi,
        Format::OpenaiResponses => ViewFormat::OpenAiResponses,
        Format::Anthropic => ViewFormat::Anthropic,
        Format::Mcp => ViewFormat::Mcp,
    };
    let tools = view.render(format);
    if a.explain {
        let exposed: Vec<serde_json::Value> = view
            .exposed
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "providerName": t.provider_name, "score": t.score, "approval": t.approval, "reason": t.reason}))
            .collect();
        crate::client::out::object(
            &serde_json::json!({"tools": tools, "exposed": exposed, "hidden": view.hidden}),
            a.output,
        );
    } else {
        crate::client::out::object(&tools, a.output);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `toolgate view` asks a running server for.
#[derive(Clone, Copy)]
pub struct RemoteView<'a> {
    pub namespace: Option<&'a str>,
    pub intent: &'a str,
    pub action_type: Option<ActionType>,
    pub max_tools: usize,
    pub format: Format,
    pub explain: bool,
    pub output: Output,
}

/// `toolgate view` against a running server, as the authenticated caller.
pub fn view_remote(conn: &crate::client::Conn, a: &RemoteView<'_>) -> anyhow::Result<ExitCode> {
    let RemoteView {
        namespace,
        intent,
        action_type,
        max_tools,
        format,
        explain,
        output,
    } = *a;
    use toolgate_proto::v1 as pb;
    let format = match format {
        Format::Canonical => pb::ViewFormat::Canonical,
        Format::Openai => pb::ViewFormat::Openai,
        Format::OpenaiResponses => pb::ViewFormat::OpenaiResponses,
        Format::Anthropic => pb::ViewFormat::Anthropic,
        Format::Mcp => pb::ViewFormat::Mcp,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut c = crate::client::connect(conn).await?;
        let view = c
            .view(pb::GetToolViewRequest {
                namespace: namespace.unwrap_or_default().into(),
                intent: intent.into(),
                format: format as i32,
                max_tools: u32::try_from(max_tools).unwrap_or(8),
                action_type: action_type.map(|a| a.as_str().to_string()).unwrap_or_default(),
                explain,
            })
            .await
            .map_err(crate::client::status_error)?;
        let tools: serde_json::Value = serde_json::from_str(&view.payload_json)?;
        if explain {
            let exposed: Vec<serde_json::Value> = view
                .exposed
                .iter()
                .map(|t| serde_json::json!({"name": t.name, "providerName": t.provider_name, "digest": t.digest, "needsApproval": t.needs_approval, "reason": t.reason}))
                .collect();
            let hidden: Vec<serde_json::Value> = view
                .hidden
                .iter()
                .map(|h| serde_json::json!({"name": h.name, "code": h.code, "reason": h.reason}))
                .collect();
            let skills: Vec<serde_json::Value> = view
                .skills
                .iter()
                .map(|s| serde_json::json!({"name": s.name, "description": s.description, "reason": s.reason, "tools": s.tools}))
                .collect();
            crate::client::out::object(
                &serde_json::json!({"tools": tools, "exposed": exposed, "hidden": hidden, "skills": skills}),
                output,
            );
        } else {
            crate::client::out::object(&tools, output);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `toolgate diff`.
pub fn diff(
    old: &Path,
    new: &Path,
    replay: Option<&Path>,
    output: DiffOutput,
    now: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let now = parse_now(now)?;
    let mut registries = Vec::new();
    for dir in [old, new] {
        if !dir.is_dir() {
            bail!("{}: expected a folder of manifests", dir.display());
        }
        match load(&[dir.to_path_buf()], None, now)? {
            Ok(r) => registries.push(Registry::from_objects(&r.objects)),
            Err(code) => return Ok(code),
        }
    }
    let changes = diff_policies(&registries[0], &registries[1], now);
    let rules = rule_changes(&registries[0], &registries[1]);
    let replayed = match replay {
        Some(path) => {
            let calls = crate::recorded::recorded_calls(path)?;
            Some((
                calls.len(),
                toolgate_review::policy_diff::replay(&registries[0], &registries[1], &calls),
            ))
        }
        None => None,
    };
    match output {
        DiffOutput::Markdown => {
            out!("{}", markdown(&changes));
            out!("{}", rules_markdown(&rules));
            if let Some((n, r)) = &replayed {
                out!("{}", toolgate_review::policy_diff::replay_markdown(*n, r));
            }
        }
        DiffOutput::Json | DiffOutput::Yaml => {
            let mut v = serde_json::json!({"permissions": changes, "rules": rules});
            if let Some((n, r)) = &replayed {
                v["replay"] = serde_json::json!({"calls": n, "changed": r});
            }
            let format = if output == DiffOutput::Yaml {
                crate::client::out::Format::Yaml
            } else {
                crate::client::out::Format::Json
            };
            crate::client::out::object(&v, format);
        }
    }
    Ok(ExitCode::SUCCESS)
}
