//! ProposeCall with every field random or hostile, through the real service and the embedded
//! runtime's store: never a panic or an internal error, never a file outside the data folder,
//! and every rejection an InvalidArgument that names its field.
//!
//! Runs 2,000 requests by default (`PROPTEST_CASES` changes it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use toolgate_api::service::Service;
use toolgate_api::{Authenticator, Caller};
use toolgate_core::principal::Principal;
use toolgate_local::{Config, Runtime};
use toolgate_proto::v1 as pb;
use toolgate_proto::v1::toolgate_server::Toolgate;

/// Every caller is the example fixer agent: it has grants, so some proposals are authorized.
struct Fixer;

#[tonic::async_trait]
impl Authenticator for Fixer {
    async fn authenticate(&self, _token: &str) -> Option<Caller> {
        Some(Caller {
            principal: Principal::new("system:serviceaccount:team-a:fixer"),
            approver_in: vec![],
            reader_in: vec![],
            delegation: None,
        })
    }
}

/// The fields a rejection may name.
const FIELDS: &[&str] = &[
    "namespace",
    "tool",
    "tool_digest",
    "args_json",
    "intent",
    "intent.user_goal",
    "intent.current_task",
    "intent.rationale_summary",
    "intent.action_type",
    "intent.evidence_refs",
    "idempotency_key",
    "session_id",
];

/// A field's usual value most of the time (so proposals get through to the store), and
/// otherwise something hostile.
fn hostile_text(outside: &str, usual: &str) -> impl Strategy<Value = String> {
    let outside = outside.to_string();
    prop_oneof![
        60 => Just(usual.to_string()),
        1 => Just(String::new()),
        1 => "\\PC{0,40}",
        1 => ".{0,40}",
        1 => Just(format!("{outside}/abs")),
        1 => Just(format!("../../../../../../..{outside}/dotdot")),
        1 => Just("team-a/../team-b".to_string()),
        1 => Just("team\0a".to_string()),
        1 => Just("..".to_string()),
        1 => Just("\u{1b}[2J".to_string()),
        1 => (1usize..4).prop_map(|n| "x".repeat(n * 300)),
    ]
}

fn request(outside: &str) -> impl Strategy<Value = pb::ProposeCallRequest> {
    let tool = prop_oneof![
        Just("file.read".to_string()),
        Just("file_read".to_string()),
        Just("code.search".to_string()),
        Just("github.create-issue".to_string()),
        Just("file.delete".to_string()),
        hostile_text(outside, "file.read"),
    ];
    let args = prop_oneof![
        4 => Just(r#"{"path": "README.md"}"#.to_string()),
        2 => Just(r#"{"text": "x"}"#.to_string()),
        2 => Just("{}".to_string()),
        1 => Just("[]".to_string()),
        1 => Just("null".to_string()),
        1 => "\\PC{0,60}",
        1 => (0usize..400).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        1 => (0usize..3).prop_map(|n| format!(r#"{{"path": "{}"}}"#, "a".repeat(n * 200 * 1024))),
    ];
    let digest = prop_oneof![
        8 => Just(String::new()),
        1 => "sha256:[0-9a-f]{64}",
        1 => "\\PC{0,80}",
    ];
    let intent = proptest::option::weighted(
        0.9,
        (
            hostile_text(outside, "fix the failing test"),
            hostile_text(outside, "read the serializer"),
            prop_oneof![
                4 => Just("read".to_string()),
                1 => Just("search".to_string()),
                1 => "[a-z_]{0,12}"
            ],
            hostile_text(outside, "the test names it"),
            prop_oneof![
                8 => prop::collection::vec(Just("artifact://team-a/x/stdout".to_string()), 0..3),
                1 => prop::collection::vec(hostile_text(outside, "artifact://team-a/x/stdout"), 0..40),
            ],
        )
            .prop_map(|(goal, task, action, why, refs)| pb::Intent {
                user_goal: goal,
                current_task: task,
                action_type: action,
                rationale_summary: why,
                evidence_refs: refs,
            }),
    );
    (
        hostile_text(outside, "team-a"),
        tool,
        digest,
        args,
        intent,
        prop_oneof![4 => Just(String::new()), 1 => hostile_text(outside, "key-1")],
        any::<bool>(),
        prop_oneof![4 => Just(String::new()), 1 => hostile_text(outside, "session-1")],
    )
        .prop_map(
            |(namespace, tool, tool_digest, args_json, intent, key, dry_run, session)| {
                pb::ProposeCallRequest {
                    namespace,
                    tool,
                    tool_digest,
                    args_json,
                    intent,
                    idempotency_key: key,
                    dry_run,
                    session_id: session,
                }
            },
        )
}

/// Every path under `root`.
fn tree(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
            out.push(e.path());
        }
    }
    out
}

#[test]
fn hostile_proposals_are_refused_by_field_and_touch_nothing_outside_the_data_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("root");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let data = root.join("data");
    let outside = root.join("outside");
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let before = tree(&root);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let runtime = rt
        .block_on(Runtime::start(Config {
            manifests: examples,
            data: data.clone(),
            workspace: workspace.clone(),
            // Authorized calls fail to start: this suite is about what proposals write.
            executor: vec!["/nonexistent/toolgate-executor".into()],
            broker: Arc::new(toolgate_local::broker::NoBroker),
            reload_interval: std::time::Duration::from_secs(3600),
            warm_sandboxes: 0,
            tracer: Default::default(),
            runs: None,
            egress_nameservers: Vec::new(),
            egress_upstream_ca: Vec::new(),
        }))
        .expect("runtime starts");
    let service = Service::new(Arc::new(runtime), Arc::new(Fixer));
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let accepted = std::cell::Cell::new(0u32);
    let refused = std::cell::RefCell::new(std::collections::BTreeMap::<String, u32>::new());
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(req in request(&outside.display().to_string()))| {
        let mut r = tonic::Request::new(req.clone());
        r.metadata_mut().insert("authorization", "Bearer any".parse().expect("header"));
        match rt.block_on(service.propose_call(r)) {
            Ok(call) => {
                let call = call.into_inner();
                prop_assert!(toolgate_core::names::is_dns_label(&call.namespace), "{call:?}");
                prop_assert!(toolgate_core::names::is_dns_subdomain(&call.id), "{call:?}");
                accepted.set(accepted.get() + 1);
            }
            Err(status) => {
                let (code, field) = toolgate_api::error::status_code_and_field(&status);
                match status.code() {
                    tonic::Code::InvalidArgument => {
                        let field = field.unwrap_or_default();
                        prop_assert!(FIELDS.contains(&field.as_str())
                            || field.starts_with("intent.evidence_refs["),
                            "unknown field {field:?}: {}", status.message());
                        prop_assert!(status.message().starts_with(&format!("{field}: ")), "{}", status.message());
                        prop_assert!(status.message().len() < 2048, "the value is echoed whole");
                        *refused.borrow_mut().entry(field).or_default() += 1;
                    }
                    // The same idempotency key with other args is refused as such.
                    tonic::Code::AlreadyExists => prop_assert_eq!(code, "idempotency-key-reused"),
                    // A well-formed namespace where the caller has no grant (the hostile text
                    // can spell one, `a`): refused before anything is recorded.
                    tonic::Code::PermissionDenied => {
                        prop_assert_eq!(code, "no-grant-in-namespace");
                        prop_assert!(req.namespace != "team-a", "{}", status.message());
                    }
                    other => prop_assert!(false, "{other:?} {code}: {}", status.message()),
                }
            }
        }
    });
    assert!(
        !outside.exists(),
        "something was written outside the data folder"
    );
    let after = tree(&root);
    let strays: Vec<&PathBuf> = after
        .iter()
        .filter(|p| !before.contains(p) && !p.starts_with(&data))
        .collect();
    assert!(strays.is_empty(), "outside the data folder: {strays:#?}");
    let calls = data.join("calls");
    for ns in std::fs::read_dir(&calls).into_iter().flatten().flatten() {
        let name = ns.file_name().to_string_lossy().into_owned();
        assert!(toolgate_core::names::is_dns_label(&name), "{name:?}");
    }
    // The generator reaches both sides: some proposals are recorded, each field is refused.
    let refused = refused.into_inner();
    eprintln!(
        "{} proposals recorded; refused by field: {refused:?}",
        accepted.get()
    );
    assert!(accepted.get() > 0, "no proposal was accepted: {refused:?}");
    for field in [
        "namespace",
        "tool",
        "args_json",
        "idempotency_key",
        "session_id",
    ] {
        assert!(
            refused.contains_key(field),
            "no refusal of {field}: {refused:?}"
        );
    }
}
