//! Reconciler scenarios against a mocked API server (tower-test): which requests a reconcile
//! makes, and, above all, which it never makes.
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use toolgate_core::exec::ArtifactTarget;
use toolgate_crds::ToolCall;

use super::{CallConfig, Context, FINALIZER, reconcile};
use crate::cache::PolicyCache;
use http::{Request, Response};
use kube::client::Body;
use std::sync::Mutex;

/// Every request the reconciler made: method, path, body.
type Log = Arc<Mutex<Vec<(String, String, serde_json::Value)>>>;

const NS: &str = "team-a";

fn tool() -> serde_json::Value {
    let yaml = toolgate_testkit::fixtures::Tool::test("test.echo")
        .policy("none")
        .yaml(NS);
    serde_norway::from_str(&yaml).expect("tool")
}

fn grant() -> serde_json::Value {
    let yaml = toolgate_testkit::fixtures::grant(NS, "g", &["test.echo"]);
    let mut g: serde_json::Value = serde_norway::from_str(&yaml).expect("grant");
    g["metadata"]["resourceVersion"] = "7".into();
    g
}

fn policy() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "toolgate.dev/v1alpha1", "kind": "SandboxPolicy",
        "metadata": {"name": "none", "namespace": NS},
        "spec": {"mode": "read_only", "filesystem": {"readRoots": [], "writeRoots": []}, "network": {"egress": "none"},
                 "environment": {}, "process": {"timeoutMs": 5000, "maxMemoryMb": 64, "maxStdoutBytes": 1000, "maxStderrBytes": 1000},
                 "audit": {}}
    })
}

fn call(principal: &str, status: Option<serde_json::Value>) -> ToolCall {
    let mut v = serde_json::json!({
        "apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolCall",
        "metadata": {"name": "c1", "namespace": NS, "uid": "uid-1", "generation": 1, "finalizers": [FINALIZER]},
        "spec": {"toolRef": {"name": "test.echo"}, "principal": principal, "args": {"msg": "hi"},
                 "intent": {"userGoal": "g", "currentTask": "t", "actionType": "execute", "rationaleSummary": "r"}}
    });
    if let Some(s) = status {
        v["status"] = s;
    }
    serde_json::from_value(v).expect("call")
}

/// A fake API server: lists answer with `objects` of the kind, writes echo their body.
fn context(objects: Vec<serde_json::Value>) -> (Arc<Context>, Log, tokio::task::JoinHandle<()>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let cached = objects.clone();
    let log: Log = Arc::default();
    let seen = log.clone();
    let server = tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_string();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            seen.lock()
                .expect("log")
                .push((method.clone(), path.clone(), body.clone()));
            let named = |kind: &str| {
                let rest = path.split(&format!("/{kind}/")).nth(1)?;
                let name = rest.split('/').next()?;
                objects
                    .iter()
                    .find(|o| o["metadata"]["name"] == name)
                    .cloned()
            };
            let reply = if let Some(mut g) = named("toolgrants") {
                // A grant's budget: GET answers it, a status patch answers it with the status.
                if method == "PATCH" {
                    g["status"] = body["status"].clone();
                }
                g
            } else if method == "GET" {
                let kind = path.rsplit('/').next().unwrap_or_default().to_string();
                let items: Vec<_> = objects
                    .iter()
                    .filter(|o| {
                        let k = o["kind"].as_str().unwrap_or_default().to_lowercase();
                        let plural = k
                            .strip_suffix('y')
                            .map_or_else(|| format!("{k}s"), |stem| format!("{stem}ies"));
                        plural == kind
                    })
                    .cloned()
                    .collect();
                serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
            } else if path.ends_with("/toolcalls/c1/status") {
                let mut c = serde_json::to_value(call("system:serviceaccount:team-a:fixer", None))
                    .expect("call");
                c["status"] = body["status"].clone();
                c
            } else if body.is_object() {
                let mut b = body.clone();
                if b.get("metadata").is_none() {
                    b["metadata"] = serde_json::json!({"name": "c1", "namespace": NS});
                }
                b
            } else {
                serde_json::json!({"apiVersion": "v1", "kind": "Status", "status": "Success"})
            };
            send.send_response(
                Response::builder()
                    .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                    .expect("response"),
            );
        }
    });
    let client = Client::new(service, NS);
    fn of_kind<K: serde::de::DeserializeOwned>(
        objects: &[serde_json::Value],
        kind: &str,
    ) -> Vec<K> {
        objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .map(|o| serde_json::from_value(o.clone()).expect(kind))
            .collect()
    }
    let cache = PolicyCache::of(
        of_kind(&cached, "ToolDescriptor"),
        of_kind(&cached, "ToolGrant"),
        of_kind(&cached, "SandboxPolicy"),
        of_kind(&cached, "CredentialBinding"),
        of_kind(&cached, "ToolApproval"),
    );
    let ctx = Arc::new(Context {
        cache,
        pods: kube::runtime::reflector::store().0,
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        ),
        client,
        config: CallConfig {
            executor_image: "executor:test".into(),
            artifacts: ArtifactTarget::Local {
                dir: "/tmp/artifacts".into(),
            },
            artifact_secret: None,
            broker: Arc::new(toolgate_broker::NoBroker),
            artifact_egress: Default::default(),
            egress_gate: Default::default(),
            keep_failed_pods: Duration::from_secs(0),
            egress: Arc::default(),
            tracer: Default::default(),
        },
        metrics: Arc::default(),
        failures: Default::default(),
    });
    (ctx, log, server)
}

fn status_patches(log: &Log) -> Vec<serde_json::Value> {
    log.lock()
        .expect("log")
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/toolcalls/c1/status"))
        .map(|(_, _, b)| b["status"].clone())
        .collect()
}

fn touched(log: &Log, kind: &str) -> Vec<String> {
    log.lock()
        .expect("log")
        .iter()
        .filter(|(m, p, _)| m != "GET" && p.contains(&format!("/{kind}")))
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect()
}

#[tokio::test]
async fn a_call_without_a_grant_is_denied_and_creates_nothing() {
    let (ctx, log, _server) = context(vec![tool(), policy()]);
    let action = reconcile(
        Arc::new(call("system:serviceaccount:team-a:fixer", None)),
        ctx,
    )
    .await
    .expect("reconciled");
    let _ = action;
    let statuses = status_patches(&log);
    let last = statuses.last().expect("a status");
    assert_eq!(last["phase"], "Denied");
    assert!(
        log.lock()
            .expect("log")
            .iter()
            .any(|(m, p, _)| m == "GET" && p.ends_with("/toolgrants")),
        "a deny from the caches is confirmed against the API server"
    );
    for kind in ["pods", "secrets", "configmaps", "networkpolicies"] {
        assert!(
            touched(&log, kind).is_empty(),
            "a denied call touched {kind}: {:?}",
            touched(&log, kind)
        );
    }
    // One Event per step.
    assert!(
        log.lock()
            .expect("log")
            .iter()
            .any(|(m, p, _)| m == "POST" && p.contains("/events"))
    );
}

#[tokio::test]
async fn an_allowed_call_applies_its_children_then_the_pod() {
    let (ctx, log, _server) = context(vec![tool(), grant(), policy()]);
    let principal = "system:serviceaccount:team-a:fixer";
    reconcile(Arc::new(call(principal, None)), ctx.clone())
        .await
        .expect("decided");
    assert!(
        !log.lock().expect("log").iter().any(|(m, _, _)| m == "GET"),
        "an allowed call is decided from the caches, without a request"
    );
    let decided = status_patches(&log).last().cloned().expect("status");
    assert_eq!(decided["phase"], "Authorized", "{decided}");
    log.lock().expect("log").clear();
    reconcile(Arc::new(call(principal, Some(decided))), ctx)
        .await
        .expect("started");
    let writes: Vec<String> = log
        .lock()
        .expect("log")
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && !p.contains("toolcalls"))
        .map(|(_, p, _)| p.rsplit('/').nth(1).unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        writes,
        ["networkpolicies", "configmaps", "pods"],
        "order: policy and spec before the pod"
    );
    let pod = log
        .lock()
        .expect("log")
        .iter()
        .find(|(m, p, _)| m == "PATCH" && p.contains("/pods/"))
        .map(|(_, _, b)| b.clone())
        .expect("pod");
    assert_eq!(pod["metadata"]["name"], "tg-c1");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    assert!(
        touched(&log, "secrets").is_empty(),
        "no credential, no Secret"
    );
    assert_eq!(
        status_patches(&log).last().expect("status")["phase"],
        "Running"
    );
}

#[tokio::test]
async fn a_call_that_does_not_deserialize_is_left_alone_without_a_request() {
    let (ctx, log, _server) = context(vec![tool(), grant(), policy()]);
    let mut broken =
        serde_json::to_value(call("system:serviceaccount:team-a:fixer", None)).expect("call");
    broken["spec"]["args"] = serde_json::json!("not an object");
    broken["spec"]["toolRef"] = serde_json::json!(42);
    let guard: kube::core::error_boundary::DeserializeGuard<ToolCall> =
        serde_json::from_value(broken).expect("a guard holds any object");
    assert!(guard.0.is_err(), "the object is invalid");
    let action = super::reconcile_guarded(Arc::new(guard), ctx)
        .await
        .expect("no error, so no hot retry loop");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    assert!(
        log.lock().expect("log").is_empty(),
        "an invalid object costs no request"
    );
}

#[tokio::test]
async fn authorizing_charges_the_grant_under_its_resource_version() {
    let mut g = grant();
    g["spec"]["budget"] = serde_json::json!({"maxCalls": 1});
    let (ctx, log, _server) = context(vec![tool(), g, policy()]);
    reconcile(
        Arc::new(call("system:serviceaccount:team-a:fixer", None)),
        ctx,
    )
    .await
    .expect("decided");
    let charges: Vec<serde_json::Value> = log
        .lock()
        .expect("log")
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/toolgrants/g/status"))
        .map(|(_, _, b)| b.clone())
        .collect();
    assert_eq!(charges.len(), 1, "{charges:#?}");
    assert_eq!(
        charges[0]["metadata"]["resourceVersion"], "7",
        "the write is conditional on the version read"
    );
    assert_eq!(charges[0]["status"]["callsUsed"], 1);
    assert_eq!(
        charges[0]["status"]["recentCharges"][0]["call"],
        "team-a/c1"
    );
    let decided = status_patches(&log).last().cloned().expect("status");
    assert_eq!(decided["phase"], "Authorized", "{decided}");
    assert_eq!(decided["budgetCharged"]["name"], "g");
}
