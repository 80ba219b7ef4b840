//! Skills in `toolgate local`, end to end with the example skill (`examples/skills/
//! fix-failing-test`): its instructions reach the agent through the API (the view lists the
//! skill for a matching intent, GetSkill returns SKILL.md's body); its one declared script runs
//! only as its registered tool, in that tool's sandbox, through the whole chain; a caller with
//! no grant for it is refused; a script the skill does not declare is no tool and cannot be
//! reached from inside a skill tool's sandbox; a changed script is a new digest that leaves the
//! view until it is reviewed again.

mod support;

use std::path::Path;

use support::*;
use toolgate_proto::v1 as pb;

/// The test folder with the example skill and its manifest (the example grant names its tool).
fn with_skill() -> tempfile::TempDir {
    let dir = setup();
    let m = dir.path().join("manifests");
    std::fs::copy(examples().join("skills.yaml"), m.join("skills.yaml")).expect("skill manifest");
    copy_tree(&examples().join("skills"), &m.join("skills"));
    let ws = dir.path().join("workspace/src");
    std::fs::write(ws.join("serializer.ts"), "export const f = 1;\n").expect("src");
    std::fs::write(ws.join("serializer.test.ts"), "test('f', () => {});\n").expect("test");
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read") {
        let p = entry.expect("entry").path();
        let target = to.join(p.file_name().expect("name"));
        if p.is_dir() {
            copy_tree(&p, &target);
        } else {
            std::fs::copy(&p, &target).expect("copy");
        }
    }
}

async fn view(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    token: &str,
    intent: &str,
) -> pb::ToolView {
    c.get_tool_view(req(
        token,
        pb::GetToolViewRequest {
            intent: intent.into(),
            max_tools: 16,
            explain: true,
            ..Default::default()
        },
    ))
    .await
    .expect("view")
    .into_inner()
}

async fn locate(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    token: &str,
    source: &str,
) -> Result<pb::Call, tonic::Status> {
    c.propose_call(req(
        token,
        propose(
            "fix-failing-test.locate-test",
            serde_json::json!({ "source": source }),
            "search",
        ),
    ))
    .await
    .map(tonic::Response::into_inner)
}

fn structured(call: &pb::Call) -> serde_json::Value {
    let status: serde_json::Value = serde_json::from_str(&call.status_json).expect("status");
    status["result"]["structuredOutput"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_teaches_through_the_api_and_its_script_runs_only_as_its_granted_tool() {
    let dir = with_skill();
    let server = Server::start(dir.path());
    let mut c = server.client().await;

    // The instructions reach the agent: listed for a matching intent, with why, then read.
    let v = view(&mut c, AGENT, "the serializer test is failing, fix it").await;
    let skill = v
        .skills
        .iter()
        .find(|s| s.name == "fix-failing-test")
        .unwrap_or_else(|| panic!("the skill is offered: {:?}", v.skills));
    assert!(skill.reason.contains("\"fail\""), "{}", skill.reason);
    assert_eq!(
        skill.tools,
        vec!["fix-failing-test.locate-test".to_string()]
    );
    assert!(
        v.exposed
            .iter()
            .any(|t| t.name == "fix-failing-test.locate-test"),
        "the granted, reviewed tool is in the view"
    );
    let unrelated = view(&mut c, AGENT, "deploy the website").await;
    assert!(unrelated.skills.is_empty(), "{:?}", unrelated.skills);
    let got = c
        .get_skill(req(
            AGENT,
            pb::GetSkillRequest {
                namespace: String::new(),
                name: "fix-failing-test".into(),
            },
        ))
        .await
        .expect("GetSkill")
        .into_inner();
    assert!(got.instructions.starts_with("# Fixing a failing test"));
    assert!(got.instructions.contains("fix-failing-test.locate-test"));
    assert!(got.instructions_digest.starts_with("sha256:"));
    let missing = c
        .get_skill(req(
            AGENT,
            pb::GetSkillRequest {
                namespace: String::new(),
                name: "no-such-skill".into(),
            },
        ))
        .await
        .expect_err("no such skill");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let bad = c
        .get_skill(req(
            AGENT,
            pb::GetSkillRequest {
                namespace: String::new(),
                name: "Not_A_Name".into(),
            },
        ))
        .await
        .expect_err("bad name");
    assert_eq!(
        toolgate_api::error::status_code_and_field(&bad)
            .1
            .as_deref(),
        Some("name")
    );

    // The script runs as its tool, in its sandbox, through the chain.
    let call = locate(&mut c, AGENT, "src/serializer.ts")
        .await
        .expect("proposed");
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
    assert_eq!(done.phase, "Succeeded", "{}", done.status_json);
    assert_eq!(
        structured(&done),
        serde_json::json!({"source": "src/serializer.ts", "tests": ["src/serializer.test.ts"]})
    );

    // A caller with no grant for the tool gets nothing from the skill: the view leaves the tool
    // out, the call is refused (this caller has no grant in the namespace at all: no record).
    let theirs = view(&mut c, OTHER, "the serializer test is failing, fix it").await;
    assert!(
        !theirs
            .exposed
            .iter()
            .any(|t| t.name == "fix-failing-test.locate-test")
    );
    let refused = locate(&mut c, OTHER, "src/serializer.ts")
        .await
        .expect_err("no grant");
    assert_eq!(code_of(&refused), "no-grant-in-namespace", "{refused}");

    // The script the skill does not declare is no tool.
    let unregistered = c
        .propose_call(req(
            AGENT,
            propose(
                "fix-failing-test.reset-workspace",
                serde_json::json!({}),
                "execute",
            ),
        ))
        .await
        .expect("proposed")
        .into_inner();
    assert_eq!(unregistered.phase, "Denied");
    assert!(
        unregistered
            .conditions
            .iter()
            .any(|c| c.r#type == "PolicyChecked" && c.reason == "ToolNotFound"),
        "{:?}",
        unregistered.conditions
    );
}

/// A skill tool's script that tries to read a file by host path and reports what happened.
const PROBE: &str = r#"import json, os, sys
out = {"self": os.path.abspath(sys.argv[0]).startswith("/tmp/")}
for p in sys.argv[1:]:
    try:
        with open(p) as f:
            f.read()
        out[p] = "read"
    except OSError as e:
        out[p] = type(e).__name__
print(json.dumps(out))
"#;

/// The probe skill, kept in the workspace as a repository keeps its skills: without the
/// runtime hiding it, every tool reading the workspace could read (and run) its scripts.
fn probe_skill(root: &Path) {
    let folder = root.join("workspace/skills/probe");
    std::fs::create_dir_all(folder.join("scripts")).expect("mkdir");
    std::fs::write(
        folder.join("SKILL.md"),
        "---\nname: probe\ndescription: Probe what a skill tool's sandbox can read.\n---\nCall probe.read.\n",
    )
    .expect("SKILL.md");
    std::fs::write(folder.join("scripts/read.py"), PROBE).expect("script");
    std::fs::write(folder.join("scripts/secret.sh"), "echo not declared\n").expect("sibling");
    std::fs::write(
        folder.join("toolgate.yaml"),
        r#"tools:
- name: read
  script: scripts/read.py
  interpreter: [python3, -I, -B]
  argv: ["{{path}}"]
  description: {summary: Try to read one file and say whether it could.}
  intent: {actionTypes: [read]}
  inputSchema: {type: object, required: [path], additionalProperties: false, properties: {path: {type: string, maxLength: 4096}}}
  outputSchema: {type: object}
  effects: {reads: ["workspace:**"], writes: [], deletes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: true, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: never, requiredScopes: ["workspace:read"]}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: structured, maxOutputPreviewTokens: 500}
  timeoutMs: 10000
"#,
    )
    .expect("toolgate.yaml");
}

fn probe_manifests(root: &Path, enabled: &str) {
    std::fs::write(
        root.join("manifests/probe.yaml"),
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: Skill\nmetadata: {{name: probe, namespace: team-a}}\nspec:\n  path: ../workspace/skills/probe\n  trustLevel: workspace\n  sandboxPolicyRef: {{name: read-only}}\n  enabled: [{enabled}]\n---\n{}",
            toolgate_testkit::fixtures::grant("team-a", "probe", &["probe.read"])
        ),
    )
    .expect("probe manifests");
}

/// `toolgate lint` on the manifests: the digest it asks a reviewer to enable for `tool`.
fn digest_to_review(root: &Path, tool: &str) -> String {
    let out = std::process::Command::new(toolgate_binary())
        .arg("lint")
        .arg(root.join("manifests"))
        .output()
        .expect("lint");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| {
            l.contains("skill-not-reviewed") && l.contains(&format!("{{tool: {tool}, digest: "))
        })
        .and_then(|l| l.split("digest: \"").nth(1))
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("lint names the digest of {tool}:\n{text}"))
        .to_string()
}

async fn wait_for_tool(
    c: &mut toolgate_proto::v1::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    tool: &str,
    present: bool,
) {
    for _ in 0..100 {
        let v = view(c, AGENT, "probe what the sandbox can read").await;
        if v.exposed.iter().any(|t| t.name == tool) == present {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "{tool} never became {}",
        if present { "exposed" } else { "hidden" }
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_tool_is_discovered_until_reviewed_and_its_sandbox_sees_no_other_script() {
    let dir = with_skill();
    let root = dir.path();
    probe_skill(root);
    probe_manifests(root, "");
    let server = Server::start(root);
    let mut c = server.client().await;

    // Declared, granted, not reviewed: out of the view, refused.
    let v = view(&mut c, AGENT, "probe what the sandbox can read").await;
    let hidden = v
        .hidden
        .iter()
        .find(|h| h.name == "probe.read")
        .unwrap_or_else(|| panic!("probe.read is listed hidden: {:?}", v.hidden));
    assert!(hidden.reason.contains("Discovered"), "{}", hidden.reason);
    // Relative to the workspace, where the tool runs.
    let sibling = "skills/probe/scripts/secret.sh";
    let args = serde_json::json!({ "path": sibling });
    let refused = c
        .propose_call(req(AGENT, propose("probe.read", args.clone(), "read")))
        .await
        .expect("proposed")
        .into_inner();
    assert_eq!(refused.phase, "Denied", "{}", refused.status_json);

    // Reviewed at the digest lint names: in the view, and it runs.
    let digest = digest_to_review(root, "read");
    probe_manifests(root, &format!("{{tool: read, digest: \"{digest}\"}}"));
    wait_for_tool(&mut c, "probe.read", true).await;
    let probe = |path: &'static str| {
        let mut c = c.clone();
        async move {
            let call = c
                .propose_call(req(
                    AGENT,
                    propose("probe.read", serde_json::json!({ "path": path }), "read"),
                ))
                .await
                .expect("proposed")
                .into_inner();
            let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed", "Denied"]).await;
            assert_eq!(done.phase, "Succeeded", "{}", done.status_json);
            structured(&done)
        }
    };
    let out = probe(sibling).await;
    assert_eq!(
        out["self"], true,
        "the script ran from the sandbox's /tmp: {out}"
    );
    assert_eq!(
        out[sibling], "FileNotFoundError",
        "the skill's folder is hidden from the sandbox, its undeclared script with it: {out}"
    );
    let out = probe("skills/probe/scripts/read.py").await;
    assert_eq!(
        out["skills/probe/scripts/read.py"], "FileNotFoundError",
        "{out}"
    );
    let out = probe("src/a.ts").await;
    assert_eq!(
        out["src/a.ts"], "read",
        "the rest of the workspace is readable: {out}"
    );

    // The script changes: a new digest, out of the view until reviewed again.
    std::fs::write(
        root.join("workspace/skills/probe/scripts/read.py"),
        format!("{PROBE}\nimport shutil\n"),
    )
    .expect("change the script");
    wait_for_tool(&mut c, "probe.read", false).await;
    let after = c
        .propose_call(req(AGENT, propose("probe.read", args, "read")))
        .await
        .expect("proposed")
        .into_inner();
    assert_eq!(after.phase, "Denied", "{}", after.status_json);
}

#[test]
fn a_broken_skill_refuses_the_manifests_with_what_and_where() {
    let dir = with_skill();
    let root = dir.path();
    probe_skill(root);
    probe_manifests(root, "");
    let declarations = root.join("workspace/skills/probe/toolgate.yaml");
    let text = std::fs::read_to_string(&declarations).expect("read");
    std::fs::write(
        &declarations,
        text.replace("interpreter: [python3, -I, -B]", "interpreter: [sh, -c]"),
    )
    .expect("write");
    let out = local_command(root, &root.join("data"), &root.join("workspace"))
        .arg("--listen")
        .arg("127.0.0.1:0")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("toolgate.yaml: tools[0].interpreter") && err.contains("never runs a shell"),
        "{err}"
    );
}
