//! Skills on the cluster, end to end with the real API server: a skill's files in a ConfigMap
//! (`kubectl create configmap --from-file`), the operator registering its declared script as a
//! ToolDescriptor it owns (`discovered` until the digest in its status is enabled), the agent
//! API serving the instructions (GetSkill, the view's skills), the script running as its tool in
//! a call's pod on the real node, in the executor image (whose python3 is the example skill's
//! interpreter), from the descriptor (the pod never mounts the ConfigMap), and a changed script
//! sending the tool back to `discovered` with an Event.

mod support;

use std::time::{Duration, Instant};

use support::node;
use support::{jsonpath, kubectl, ok, prepare, wait_for};
use toolgate_proto::v1 as pb;

/// A script that reports where it runs from and what it can see of the skill.
const PROBE: &str = r#"import json, os, sys
print(json.dumps({
    "fromTmp": os.path.abspath(sys.argv[0]).startswith("/tmp/"),
    "uid": os.getuid(),
    "siblings": sorted(os.listdir(os.path.dirname(os.path.abspath(sys.argv[0])))),
}))
"#;

const PROBE_DECLARATIONS: &str = r#"tools:
- name: where
  script: scripts/where.py
  interpreter: [python3, -I, -B]
  description: {summary: Say where the script runs from.}
  intent: {actionTypes: [inspect]}
  inputSchema: {type: object, additionalProperties: false, properties: {}}
  outputSchema: {type: object}
  effects: {reads: [], writes: [], deletes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: true, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: never, requiredScopes: ["workspace:read"]}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: structured, maxOutputPreviewTokens: 500}
  timeoutMs: 10000
"#;

fn skill(ns: &str, name: &str, enabled: &str) -> String {
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: Skill\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  configMapRef: {{name: {name}}}\n  trustLevel: workspace\n  sandboxPolicyRef: {{name: read-only}}\n  enabled: [{enabled}]\n"
    )
}

/// The probe skill's ConfigMap, labelled so the operator sees its changes at once.
fn probe_config_map(ns: &str, script: &str) -> String {
    let data = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "probe", "namespace": ns, "labels": {"toolgate.dev/skill": "probe"}},
        "data": {
            "SKILL.md": "---\nname: probe\ndescription: Probe where a skill's script runs on the cluster.\n---\nCall probe.where.\n",
            "toolgate.yaml": PROBE_DECLARATIONS,
            "where.py": script,
            "unlisted.sh": "echo never\n",
        }
    });
    data.to_string()
}

#[test]
fn a_skill_on_the_cluster_teaches_through_the_api_and_its_script_runs_in_a_call_pod() {
    if !toolgate_testkit::have_cluster() || !node::have_node() {
        return;
    }
    let port = support::free_port();
    let grpc = format!("127.0.0.1:{port}");
    let tls = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let ns = prepare("tg-skill");
    ok(&["apply", "-f", "-"], Some(&node::example_policies(&ns)));
    // The example skill, as a platform team ships it: its folder as a ConfigMap.
    let folder = support::root().join("examples/skills/fix-failing-test");
    let from = |f: &str| format!("--from-file={}", folder.join(f).display());
    ok(
        &[
            "create",
            "configmap",
            "fix-failing-test",
            "-n",
            &ns,
            &from("SKILL.md"),
            &from("toolgate.yaml"),
            &from("scripts/"),
        ],
        None,
    );
    ok(
        &["apply", "-f", "-"],
        Some(&skill(&ns, "fix-failing-test", "")),
    );
    ok(&["apply", "-f", "-"], Some(&probe_config_map(&ns, PROBE)));
    ok(&["apply", "-f", "-"], Some(&skill(&ns, "probe", "")));
    ok(
        &["apply", "-f", "-"],
        Some(&toolgate_testkit::fixtures::grant(
            &ns,
            "skills",
            &["fix-failing-test.locate-test", "probe.where"],
        )),
    );
    support::apply_agent_access(&ns);
    let _operator = node::start_operator(&ns, "skill-artifacts", &tls);

    // Read and registered: the tool discovered and owned by the Skill, the status saying what a
    // reviewer enables and which script never runs.
    wait_for(
        &ns,
        "skill/fix-failing-test",
        "{.status.conditions[?(@.type==\"Ready\")].reason}",
        &["Loaded"],
    );
    wait_for(
        &ns,
        "tooldescriptor/fix-failing-test.locate-test",
        "{.status.lifecycle}",
        &["discovered"],
    );
    assert_eq!(
        jsonpath(
            &ns,
            "tooldescriptor/fix-failing-test.locate-test",
            "{.metadata.ownerReferences[0].kind}"
        ),
        "Skill"
    );
    assert_eq!(
        jsonpath(
            &ns,
            "skill/fix-failing-test",
            "{.status.unregisteredScripts}"
        ),
        "[\"reset_workspace.sh\"]"
    );
    let digest = jsonpath(&ns, "skill/fix-failing-test", "{.status.tools[0].digest}");
    assert_eq!(
        digest,
        // The folder and its ConfigMap are one skill: the same digest as `toolgate lint
        // examples` names and examples/skills.yaml enables.
        std::fs::read_to_string(support::root().join("examples/skills.yaml"))
            .expect("skills.yaml")
            .split("digest: \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("the example's digest")
    );
    wait_for(
        &ns,
        "tooldescriptor/probe.where",
        "{.status.lifecycle}",
        &["discovered"],
    );
    let probe_digest = jsonpath(&ns, "skill/probe", "{.status.tools[0].digest}");
    ok(
        &["apply", "-f", "-"],
        Some(&skill(
            &ns,
            "probe",
            &format!("{{tool: where, digest: \"{probe_digest}\"}}"),
        )),
    );
    wait_for(
        &ns,
        "tooldescriptor/probe.where",
        "{.status.lifecycle}",
        &["enabled"],
    );

    let agent = support::token_of("agent");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        use support::authorized as req;
        let mut api = toolgate_testkit::api::grpc_tls_client(&grpc).await;
        let view = api
            .get_tool_view(req(
                &agent,
                pb::GetToolViewRequest {
                    namespace: ns.clone(),
                    intent: "the serializer test is failing, fix it".into(),
                    max_tools: 16,
                    ..Default::default()
                },
            ))
            .await
            .expect("view")
            .into_inner();
        let offered = view
            .skills
            .iter()
            .find(|s| s.name == "fix-failing-test")
            .unwrap_or_else(|| panic!("the skill is offered: {:?}", view.skills));
        assert!(offered.reason.contains("\"fail\""), "{}", offered.reason);
        let got = api
            .get_skill(req(
                &agent,
                pb::GetSkillRequest {
                    namespace: ns.clone(),
                    name: "fix-failing-test".into(),
                },
            ))
            .await
            .expect("GetSkill")
            .into_inner();
        assert!(
            got.instructions.starts_with("# Fixing a failing test"),
            "{}",
            got.instructions
        );
        assert_eq!(got.tools, vec!["fix-failing-test.locate-test".to_string()]);
        let missing = api
            .get_skill(req(
                &agent,
                pb::GetSkillRequest {
                    namespace: ns.clone(),
                    name: "nope".into(),
                },
            ))
            .await
            .expect_err("no such skill");
        assert_eq!(missing.code(), tonic::Code::NotFound);
    });

    // The script runs as its tool in a call's pod: from the sandbox's /tmp, alone.
    let call = toolgate_testkit::fixtures::call(&ns, "where-1", "probe.where", "{}", "team-a")
        .replace("actionType: execute", "actionType: inspect");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (created, _, err) = kubectl(&["--context", "agent", "create", "-f", "-"], Some(&call));
        if created {
            break;
        }
        assert!(Instant::now() < deadline, "creating the call: {err}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let phase = wait_for(
        &ns,
        "toolcall/where-1",
        "{.status.phase}",
        &["Succeeded", "Failed", "Denied"],
    );
    let conditions = jsonpath(&ns, "toolcall/where-1", "{.status.conditions}");
    assert_eq!(phase, "Succeeded", "{conditions}");
    let out: serde_json::Value = serde_json::from_str(&jsonpath(
        &ns,
        "toolcall/where-1",
        "{.status.result.structuredOutput}",
    ))
    .expect("structured output");
    assert_eq!(out["fromTmp"], true, "{out}");
    assert_eq!(out["siblings"], serde_json::json!(["where.py"]), "{out}");

    // The script changes in the ConfigMap: a new digest, discovered again, an Event says so.
    ok(
        &["apply", "-f", "-"],
        Some(&probe_config_map(&ns, &format!("{PROBE}\nimport shutil\n"))),
    );
    wait_for(
        &ns,
        "tooldescriptor/probe.where",
        "{.status.lifecycle}",
        &["discovered"],
    );
    support::until("a ToolsChanged Event on the Skill", || {
        kubectl(
            &[
                "get",
                "events",
                "-n",
                &ns,
                "--field-selector",
                "involvedObject.kind=Skill,involvedObject.name=probe,reason=ToolsChanged",
                "-o",
                "name",
            ],
            None,
        )
        .1
        .contains("event")
    });

    // Deleting the skill deletes its tools (owner references).
    ok(&["delete", "skill/probe", "-n", &ns], None);
    support::until("the skill's tools to go", || {
        kubectl(
            &[
                "get",
                "tooldescriptors",
                "-n",
                &ns,
                "-l",
                "toolgate.dev/skill=probe",
                "-o",
                "name",
            ],
            None,
        )
        .1
        .trim()
        .is_empty()
    });
}
