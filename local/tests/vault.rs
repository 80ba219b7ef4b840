//! Vault-brokered credentials in `toolgate local`, end to end with a real Vault (`vault server
//! -dev`, built by tests/vault/build.sh), the real binary and sandbox, and Vault's Kubernetes
//! secrets engine minting service-account tokens on the test API server:
//! - a KV v2 credential reaches the tool and nothing model-visible (canaries, raw and base64);
//! - a dynamic credential's lease exists while the call runs and is gone right after it ends,
//!   for success, failure, cancel and timeout, and after a `kill -9` of the runtime, on restart;
//! - Vault sealed, stopped, or a path the broker may not read: the call fails with its reason,
//!   nothing hangs, and calls succeed once Vault is back.

mod support;

use base64::Engine as _;
use futures::StreamExt;
use support::*;
use toolgate_proto::v1 as pb;
use toolgate_testkit::vault::{TestVault, have_vault};

/// What the broker may do (a binding's own role narrows it further).
const BROKER_POLICY: &str = r#"
path "secret/data/team-a/*" { capabilities = ["read"] }
path "kubernetes/creds/agent" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }
path "auth/token/create/narrow" { capabilities = ["update"] }
"#;

/// What a binding with `authRole: narrow` may do: only the bot's secret.
const NARROW_POLICY: &str = r#"
path "secret/data/team-a/bot" { capabilities = ["read"] }
"#;

/// The broker's token id: the same after Vault restarts (a dev server forgets every token).
const BROKER_TOKEN: &str = "toolgate-local-test-broker-0001";

/// Configure Vault: the secrets, the kubernetes engine, the policies and the broker's token.
fn configure(vault: &TestVault) {
    vault.ok(&["kv", "put", "secret/team-a/bot", &format!("token={CANARY}")]);
    vault.ok(&[
        "kv",
        "put",
        "secret/team-a/other",
        "token=other-secret-0042",
    ]);
    vault.policy("toolgate-local", BROKER_POLICY);
    vault.policy("narrow", NARROW_POLICY);
    vault.ok(&[
        "write",
        "auth/token/roles/narrow",
        "allowed_policies=narrow",
        "orphan=false",
        "token_ttl=10m",
    ]);
    vault.kubernetes_engine("agent");
    vault.ok(&[
        "token",
        "create",
        "-id",
        BROKER_TOKEN,
        "-policy",
        "toolgate-local",
        "-ttl",
        "1h",
    ]);
}

/// The manifests of the suite: a policy that lets a credential arrive as an environment
/// variable, the bindings, the tools and their grant.
fn manifests(root: &std::path::Path, k8s_namespace: &str) {
    let m = root.join("manifests");
    let policy = r#"apiVersion: toolgate.dev/v1alpha1
kind: SandboxPolicy
metadata: {name: vault-env, namespace: team-a}
spec:
  mode: read_only
  filesystem: {readRoots: [], writeRoots: []}
  network: {egress: none}
  environment: {inheritedEnv: [PATH], secretEnvAllowed: true}
  process: {timeoutMs: 30000, maxMemoryMb: 128, maxProcesses: 8, maxStdoutBytes: 65536, maxStderrBytes: 65536}
"#;
    let binding = |name: &str, vault: &str, delivery: &str| {
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: CredentialBinding\nmetadata: {{name: {name}, namespace: team-a}}\nspec:\n  vault: {vault}\n  scopes: [\"test:read\"]\n  ttlSeconds: 900\n  delivery: {delivery}\n"
        )
    };
    let bindings = [
        binding(
            "kv-bot",
            "{engine: kv2, mount: secret, path: team-a/bot, field: token}",
            "{mode: env, envName: VAULT_CRED}",
        ),
        binding(
            "kv-narrow-other",
            "{engine: kv2, mount: secret, path: team-a/other, field: token, authRole: narrow}",
            "{mode: env, envName: VAULT_CRED}",
        ),
        binding(
            "kv-denied",
            "{engine: kv2, mount: secret, path: team-b/bot, field: token}",
            "{mode: env, envName: VAULT_CRED}",
        ),
        binding(
            "k8s-sa",
            &format!(
                "{{engine: kubernetes, mount: kubernetes, path: creds/agent, role: agent, kubernetesNamespace: {k8s_namespace}}}"
            ),
            "{mode: file, fileName: token}",
        ),
    ]
    .join("---\n");
    let tools = [
        Tool::test("vault.print")
            .argv("[printenv, VAULT_CRED]")
            .policy("vault-env")
            .binding("kv-bot"),
        // A tool that prints its credential in every form it can produce without trying.
        Tool::test("vault.encodings")
            .argv(ENCODINGS_ARGV)
            .policy("vault-env")
            .binding("kv-bot"),
        Tool::test("vault.narrow-other")
            .argv("[printenv, VAULT_CRED]")
            .policy("vault-env")
            .binding("kv-narrow-other"),
        Tool::test("vault.denied")
            .argv("[printenv, VAULT_CRED]")
            .policy("vault-env")
            .binding("kv-denied"),
        Tool::test("vault.sa-sleep")
            .argv("[sleep, \"{{seconds}}\"]")
            .idempotent(false)
            .binding("k8s-sa"),
        Tool::test("vault.sa-fail")
            .argv("[\"false\"]")
            .binding("k8s-sa"),
        Tool::test("vault.sa-short")
            .argv("[sleep, \"{{seconds}}\"]")
            .timeout_ms(1500)
            .binding("k8s-sa"),
    ];
    let mut text = format!("{policy}---\n{bindings}");
    for t in &tools {
        text.push_str("---\n");
        text.push_str(&t.yaml("team-a"));
    }
    text.push_str("---\n");
    text.push_str(&toolgate_testkit::fixtures::grant(
        "team-a",
        "vault-tools",
        &[
            "vault.print",
            "vault.encodings",
            "vault.narrow-other",
            "vault.denied",
            "vault.sa-sleep",
            "vault.sa-fail",
            "vault.sa-short",
        ],
    ));
    std::fs::write(m.join("vault.yaml"), text).expect("manifests");
}

/// Prints `VAULT_CRED` as hex (both cases), reversed, dot separated, base64url, inside a
/// base64-encoded header, as JSON escapes, and as `xxd` does.
const ENCODINGS_ARGV: &str = r#"[python3, -c, "import os, base64\nv = os.environ['VAULT_CRED'].encode()\nprint(v.hex(), v.hex().upper())\nprint(v[::-1].decode(), '.'.join(v.decode()))\nprint(base64.urlsafe_b64encode(v).decode().rstrip('='))\nprint(base64.b64encode(b'Authorization: Bearer ' + v).decode())\nprint(''.join('\\\\u%04x' % c for c in v))\nfor i in range(0, len(v), 16):\n  line = v[i:i + 16]\n  print('%08x: %s  %s' % (i, ' '.join(line[j:j + 2].hex() for j in range(0, len(line), 2)), line.decode()))\n"]"#;

/// What a reader could decode the canary from: its letters and digits in any run of eight, as
/// they are, reversed, or in hex (those with digits: the canary's words are ordinary text).
fn canary_runs() -> Vec<String> {
    let letters = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let own = letters(CANARY);
    let reversed: String = own.chars().rev().collect();
    let hex = hex::encode(CANARY);
    let mut runs = Vec::new();
    for (form, run) in [(own, 8), (reversed, 8), (hex, 16)] {
        let chars: Vec<char> = form.chars().collect();
        runs.extend(chars.windows(run).map(|w| w.iter().collect::<String>()));
    }
    // The canary's words (`credential`) are ordinary text elsewhere; its digits are its own.
    runs.retain(|r| r.chars().filter(char::is_ascii_digit).count() >= 2);
    runs
}

struct Suite {
    dir: tempfile::TempDir,
    vault: TestVault,
    k8s_namespace: String,
}

impl Suite {
    fn new() -> Option<Suite> {
        if !have_vault() || !toolgate_testkit::have_cluster() {
            return None;
        }
        let vault = TestVault::start();
        configure(&vault);
        let dir = setup();
        let k8s_namespace = toolgate_testkit::namespace("vault-local");
        manifests(dir.path(), &k8s_namespace);
        write_private(&dir.path().join("vault-token"), BROKER_TOKEN);
        Some(Suite {
            dir,
            vault,
            k8s_namespace,
        })
    }

    fn server(&self) -> Server {
        let root = self.dir.path();
        let token = root.join("vault-token").display().to_string();
        let log = root.join("server.log");
        Server::start_logged(
            root,
            &root.join("data"),
            &root.join("workspace"),
            &[
                "--listen",
                "127.0.0.1:0",
                "--vault-addr",
                &self.vault.addr,
                "--vault-token-file",
                &token,
                "--vault-timeout-seconds",
                "3",
            ],
            Some(&log),
        )
    }

    /// The leases of the kubernetes role, as Vault lists them.
    fn leases(&self) -> Vec<String> {
        self.vault.leases("kubernetes/creds/agent")
    }

    /// The service accounts Vault made in the suite's namespace.
    fn vault_accounts(&self) -> Vec<String> {
        toolgate_testkit::ok(
            &[
                "get",
                "serviceaccounts",
                "-n",
                &self.k8s_namespace,
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ],
            None,
        )
        .split_whitespace()
        .filter(|n| n.starts_with("v-token-"))
        .map(str::to_string)
        .collect()
    }
}

fn condition<'c>(call: &'c pb::Call, kind: &str) -> Option<&'c pb::Condition> {
    call.conditions.iter().find(|c| c.r#type == kind)
}

async fn wait_until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Wait for the call's lease to be revoked (its CredentialsRevoked condition).
async fn revoked(
    c: &mut pb::toolgate_client::ToolgateClient<tonic::transport::Channel>,
    id: &str,
) -> pb::Call {
    let mut last = None;
    wait_until("CredentialsRevoked=True", async || {
        let call = get(c, id).await;
        let done = condition(&call, "CredentialsRevoked").is_some_and(|k| k.status == "True");
        last = Some(call);
        done
    })
    .await;
    last.expect("the call")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kv_credential_reaches_the_tool_and_nothing_model_visible() {
    let Some(suite) = Suite::new() else { return };
    let server = suite.server();
    let mut c = server.client().await;
    let call = submit(&mut c, "vault.print", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    // The tool printed its credential: the executor's redactor replaced exactly that value.
    assert!(
        done.output_preview.contains("[REDACTED"),
        "the tool got the value Vault holds: {:?}",
        done.output_preview
    );
    let bound = condition(&done, "CredentialsBound").expect("bound");
    assert_eq!(bound.reason, "Brokered", "{bound:?}");
    assert!(bound.message.contains("Kv2 secret/team-a/bot"), "{bound:?}");
    // Everything a model or an agent can see: the call, its events, its explanation, the view,
    // the stored output, the server's log.
    let events = watch(&mut c, AGENT, &call.id).await;
    let explained = c
        .explain_call(req(
            AGENT,
            pb::ExplainCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect("explain")
        .into_inner();
    let view = c
        .get_tool_view(req(
            AGENT,
            pb::GetToolViewRequest {
                intent: "print the bot's credential".into(),
                max_tools: 64,
                ..Default::default()
            },
        ))
        .await
        .expect("view")
        .into_inner();
    let mut artifact = Vec::new();
    let mut s = c
        .get_artifact(req(
            AGENT,
            pb::GetArtifactRequest {
                call_id: call.id.clone(),
                artifact_id: "stdout".into(),
            },
        ))
        .await
        .expect("artifact")
        .into_inner();
    while let Some(chunk) = s.next().await {
        artifact.extend(chunk.expect("chunk").data);
    }
    assert!(
        String::from_utf8_lossy(&artifact).contains("[REDACTED"),
        "{artifact:?}"
    );
    let log = std::fs::read_to_string(suite.dir.path().join("server.log")).unwrap_or_default();
    let everything = format!(
        "{done:?} {events:?} {explained:?} {view:?} {} {log}",
        String::from_utf8_lossy(&artifact)
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    assert!(!everything.contains(CANARY), "the credential leaked");
    assert!(
        !everything.contains(&b64),
        "the credential leaked in base64"
    );
    assert!(
        !everything.contains(BROKER_TOKEN),
        "the broker's Vault token leaked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_printed_in_any_easy_encoding_reaches_nothing_model_visible() {
    let Some(suite) = Suite::new() else { return };
    let server = suite.server();
    let mut c = server.client().await;
    let call = submit(&mut c, "vault.encodings", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    let events = watch(&mut c, AGENT, &call.id).await;
    let explained = c
        .explain_call(req(
            AGENT,
            pb::ExplainCallRequest {
                id: call.id.clone(),
            },
        ))
        .await
        .expect("explain")
        .into_inner();
    let artifact =
        String::from_utf8_lossy(&artifact_bytes(&mut c, &call.id, "stdout").await).into_owned();
    // Seven lines of output (two of them xxd's), each with the credential's place redacted.
    assert_eq!(artifact.lines().count(), 7, "{artifact}");
    assert!(
        artifact.lines().all(|l| l.contains("[REDACTED")),
        "{artifact}"
    );
    let log = std::fs::read_to_string(suite.dir.path().join("server.log")).unwrap_or_default();
    let everything = format!("{done:?} {events:?} {explained:?} {artifact} {log}");
    let letters: String = everything
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>()
        .to_ascii_lowercase();
    for run in canary_runs() {
        assert!(
            !letters.contains(&run),
            "a run of the credential ({run}) reached a model-visible surface: {artifact}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dynamic_lease_lives_while_its_call_runs_and_is_revoked_when_it_ends() {
    let Some(suite) = Suite::new() else { return };
    let server = suite.server();
    let mut c = server.client().await;

    // Success: the lease (and the service account Vault made for it) exist while it runs.
    let call = submit(
        &mut c,
        "vault.sa-sleep",
        serde_json::json!({"seconds": "3"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Running"]).await;
    wait_until("the lease exists while the call runs", async || {
        suite.leases().len() == 1
    })
    .await;
    assert_eq!(
        suite.vault_accounts().len(),
        1,
        "Vault made one service account"
    );
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    let bound = condition(&done, "CredentialsBound").expect("bound");
    assert!(
        bound.message.contains("leased, revoked when the call ends"),
        "{bound:?}"
    );
    let done = revoked(&mut c, &call.id).await;
    assert_eq!(
        condition(&done, "CredentialsRevoked").map(|k| k.reason.as_str()),
        Some("LeaseRevoked")
    );
    assert!(
        suite.leases().is_empty(),
        "the lease is gone: {:?}",
        suite.leases()
    );
    assert!(
        suite.vault_accounts().is_empty(),
        "its service account is deleted: {:?}",
        suite.vault_accounts()
    );

    // Failure.
    let call = submit(&mut c, "vault.sa-fail", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Failed");
    revoked(&mut c, &call.id).await;
    assert!(suite.leases().is_empty());

    // Cancel, while it runs.
    let call = submit(
        &mut c,
        "vault.sa-sleep",
        serde_json::json!({"seconds": "30"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Running"]).await;
    wait_until("the lease exists", async || suite.leases().len() == 1).await;
    c.cancel_call(req(
        AGENT,
        pb::CancelCallRequest {
            id: call.id.clone(),
            reason: "not needed".into(),
        },
    ))
    .await
    .expect("cancel");
    let done = wait_phase(&mut c, &call.id, &["Cancelled"]).await;
    assert_eq!(done.phase, "Cancelled");
    revoked(&mut c, &call.id).await;
    assert!(suite.leases().is_empty());

    // Timeout: the tool outlives its 1.5 s.
    let call = submit(
        &mut c,
        "vault.sa-short",
        serde_json::json!({"seconds": "20"}),
        "execute",
    )
    .await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Failed", "{:#?}", done.conditions);
    revoked(&mut c, &call.id).await;
    assert!(suite.leases().is_empty());
    assert!(suite.vault_accounts().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_left_by_a_killed_runtime_is_revoked_when_it_restarts() {
    let Some(suite) = Suite::new() else { return };
    let mut server = suite.server();
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "vault.sa-sleep",
        serde_json::json!({"seconds": "30"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Running"]).await;
    wait_until("the lease exists", async || suite.leases().len() == 1).await;
    server.kill9();
    assert_eq!(suite.leases().len(), 1, "nobody revoked it yet");
    let server = suite.server();
    let mut c = server.client().await;
    let done = revoked(&mut c, &call.id).await;
    // The tool is not idempotent: the call failed, interrupted, rather than running again.
    assert_eq!(done.phase, "Failed", "{:#?}", done.conditions);
    assert!(suite.leases().is_empty(), "{:?}", suite.leases());
    assert!(suite.vault_accounts().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn vault_down_or_refusing_fails_the_call_with_its_reason_and_recovers() {
    let Some(mut suite) = Suite::new() else {
        return;
    };
    let server = suite.server();
    let mut c = server.client().await;
    let ends = async |c: &mut pb::toolgate_client::ToolgateClient<tonic::transport::Channel>,
                      tool: &str| {
        let call = submit(c, tool, serde_json::json!({}), "execute").await;
        wait_phase(c, &call.id, &["Succeeded", "Failed"]).await
    };
    let bound = |call: &pb::Call| {
        let k = condition(call, "CredentialsBound").expect("CredentialsBound");
        (k.status.clone(), k.reason.clone(), k.message.clone())
    };

    // A path the broker's policy does not cover; and one its own token could read, but not
    // the binding's narrower role.
    let denied = ends(&mut c, "vault.denied").await;
    let (status, reason, message) = bound(&denied);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "BrokerForbidden"),
        "{message}"
    );
    assert!(message.contains("secret/data/team-b/bot"), "{message}");
    let narrow = ends(&mut c, "vault.narrow-other").await;
    let (_, reason, message) = bound(&narrow);
    assert_eq!(reason, "BrokerForbidden", "{message}");
    assert!(message.contains("role narrow"), "{message}");
    assert_eq!(condition(&narrow, "Started"), None, "nothing started");

    // Sealed.
    suite.vault.seal();
    let sealed = ends(&mut c, "vault.print").await;
    let (_, reason, message) = bound(&sealed);
    assert_eq!(reason, "BrokerUnavailable", "{message}");
    suite.vault.unseal();
    let back = ends(&mut c, "vault.print").await;
    assert_eq!(back.phase, "Succeeded", "{:#?}", back.conditions);

    // Stopped: refused at once, not hanging.
    suite.vault.stop();
    let down = ends(&mut c, "vault.print").await;
    let (_, reason, message) = bound(&down);
    assert_eq!(reason, "BrokerUnavailable", "{message}");
    assert!(message.contains("cannot be reached"), "{message}");
    assert_eq!(condition(&down, "Started"), None, "nothing started");

    // Vault comes back (empty: a dev server), is configured again: calls succeed.
    suite.vault.restart();
    configure(&suite.vault);
    let back = ends(&mut c, "vault.print").await;
    assert_eq!(back.phase, "Succeeded", "{:#?}", back.conditions);
    let log = std::fs::read_to_string(suite.dir.path().join("server.log")).unwrap_or_default();
    assert!(!log.contains(CANARY), "the credential reached the log");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revocation_that_fails_is_shown_and_retried_until_vault_answers() {
    let Some(suite) = Suite::new() else { return };
    let server = suite.server();
    let mut c = server.client().await;
    let call = submit(
        &mut c,
        "vault.sa-sleep",
        serde_json::json!({"seconds": "2"}),
        "execute",
    )
    .await;
    wait_phase(&mut c, &call.id, &["Running"]).await;
    wait_until("the lease exists", async || suite.leases().len() == 1).await;
    // Sealed while the call runs: its end cannot revoke the lease (Vault keeps it, sealed).
    suite.vault.seal();
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded");
    let mut failed = None;
    wait_until("CredentialsRevoked=False", async || {
        let call = get(&mut c, &call.id).await;
        failed = condition(&call, "CredentialsRevoked")
            .filter(|k| k.status == "False")
            .cloned();
        failed.is_some()
    })
    .await;
    let failed = failed.expect("condition");
    assert_eq!(failed.reason, "RevokeFailed", "{failed:?}");
    assert!(
        failed.message.contains("BrokerUnavailable") && failed.message.contains("retried"),
        "{failed:?}"
    );
    // Unsealed: the retry goes through, and the lease is gone.
    suite.vault.unseal();
    let done = revoked(&mut c, &call.id).await;
    assert_eq!(
        condition(&done, "CredentialsRevoked").map(|k| k.reason.as_str()),
        Some("LeaseRevoked")
    );
    assert!(suite.leases().is_empty(), "{:?}", suite.leases());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_vault_token_is_refused_with_its_reason_and_a_rotated_one_is_read_again() {
    let Some(suite) = Suite::new() else { return };
    // The broker's token expires a second after it is made.
    let short = suite.vault.token(&["toolgate-local"], "1s");
    write_private(&suite.dir.path().join("vault-token"), &short);
    let server = suite.server();
    let mut c = server.client().await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let call = submit(&mut c, "vault.print", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    let bound = condition(&done, "CredentialsBound").expect("bound");
    assert_eq!(
        (done.phase.as_str(), bound.reason.as_str()),
        ("Failed", "BrokerForbidden"),
        "{bound:?}"
    );
    assert!(bound.message.contains("invalid token"), "{bound:?}");
    assert!(!format!("{done:?}").contains(&short), "the token leaked");
    // The platform team rotates the file: the next call logs in with the new token.
    write_private(
        &suite.dir.path().join("vault-token"),
        &suite.vault.token(&["toolgate-local"], "1h"),
    );
    let call = submit(&mut c, "vault.print", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
}

#[tokio::test(flavor = "multi_thread")]
async fn approle_credentials_from_a_file_log_the_broker_in() {
    let Some(suite) = Suite::new() else { return };
    let v = &suite.vault;
    v.ok(&["auth", "enable", "approle"]);
    v.ok(&[
        "write",
        "auth/approle/role/toolgate-local",
        "token_policies=toolgate-local",
        "token_ttl=10m",
    ]);
    let role_id = v
        .ok(&[
            "read",
            "-field=role_id",
            "auth/approle/role/toolgate-local/role-id",
        ])
        .trim()
        .to_string();
    let secret_id = v
        .ok(&[
            "write",
            "-f",
            "-field=secret_id",
            "auth/approle/role/toolgate-local/secret-id",
        ])
        .trim()
        .to_string();
    let root = suite.dir.path();
    let file = root.join("approle.yaml");
    write_private(
        &file,
        &format!("roleId: {role_id}\nsecretId: {secret_id}\n"),
    );
    let server = Server::start_logged(
        root,
        &root.join("data"),
        &root.join("workspace"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--vault-addr",
            &suite.vault.addr,
            "--vault-approle-file",
            &file.display().to_string(),
        ],
        Some(&root.join("server.log")),
    );
    let mut c = server.client().await;
    let call = submit(&mut c, "vault.print", serde_json::json!({}), "execute").await;
    let done = wait_phase(&mut c, &call.id, &["Succeeded", "Failed"]).await;
    assert_eq!(done.phase, "Succeeded", "{:#?}", done.conditions);
    let log = std::fs::read_to_string(root.join("server.log")).unwrap_or_default();
    assert!(!log.contains(&secret_id), "the secret id reached the log");
}
