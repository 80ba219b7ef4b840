//! Vault-brokered credentials on the cluster: the operator logs in to a real Vault with Vault's
//! Kubernetes auth method and its own service-account token (Vault checks it with a TokenReview
//! against the test API server), delivers a KV v2 value and a leased service-account token from
//! Vault's Kubernetes secrets engine, and revokes each lease when its call ends, when its
//! ToolCall is deleted, and after the operator is killed mid-call. A CredentialBinding's Ready
//! condition says whether Vault lets the operator read it; Vault stopped fails calls with
//! BrokerUnavailable until it is back.

mod support;

use std::time::{Duration, Instant};

use support::node;
use support::{have_cluster, jsonpath, kubectl, ok, operator_log, prepare, wait_for};
use toolgate_testkit::fixtures::Tool;
use toolgate_testkit::moto::Moto;
use toolgate_testkit::vault::{TestVault, have_vault};

const CANARY: &str = "canary-vault-cluster-credential-7e21";
const BUCKET: &str = "vault-artifacts";

/// What the operator's Vault role may do.
const OPERATOR_POLICY: &str = r#"
path "secret/data/team-a/*" { capabilities = ["read"] }
path "kubernetes/creds/agent" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }
"#;

fn configure(vault: &TestVault) {
    vault.ok(&["kv", "put", "secret/team-a/bot", &format!("token={CANARY}")]);
    vault.policy("toolgate-operator", OPERATOR_POLICY);
    vault.kubernetes_engine("agent");
    vault.kubernetes_auth(
        "toolgate-operator",
        "toolgate-system",
        "toolgate-operator",
        "toolgate-operator",
    );
}

/// A service-account token for Vault (audience `vault`), as a projected token would be.
fn sa_token(namespace: &str, account: &str) -> String {
    ok(
        &[
            "create",
            "token",
            account,
            "-n",
            namespace,
            "--audience",
            "vault",
            "--duration",
            "1h",
        ],
        None,
    )
    .trim()
    .to_string()
}

struct Suite {
    ns: String,
    vault: TestVault,
    operator: Option<support::Operator>,
    store: Moto,
    token_dir: tempfile::TempDir,
}

impl Drop for Suite {
    fn drop(&mut self) {
        if std::thread::panicking() {
            support::dump(&self.ns, "toolgate,pods,secrets,events");
        }
    }
}

impl Suite {
    fn new(prefix: &str) -> Option<Suite> {
        if !have_cluster() || !node::have_node() || !have_vault() {
            return None;
        }
        let ns = prepare(prefix);
        let vault = TestVault::start();
        configure(&vault);
        let binding = |name: &str, source: &str| {
            format!(
                "apiVersion: toolgate.dev/v1alpha1\nkind: CredentialBinding\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  vault: {source}\n  scopes: [\"test:read\"]\n  ttlSeconds: 900\n  delivery: {{mode: file, fileName: token}}\n"
            )
        };
        let mut docs = vec![
            node::example_policies(&ns),
            binding(
                "kv-bot",
                "{engine: kv2, mount: secret, path: team-a/bot, field: token}",
            ),
            binding(
                "kv-denied",
                "{engine: kv2, mount: secret, path: team-b/bot, field: token}",
            ),
            binding(
                "k8s-sa",
                "{engine: kubernetes, mount: kubernetes, path: creds/agent, role: agent}",
            ),
        ];
        for t in [
            Tool::test("vault.kv")
                .argv("[cat, /var/run/toolgate/credentials/token]")
                .binding("kv-bot"),
            Tool::test("vault.sa-sleep")
                .argv("[sleep, \"{{seconds}}\"]")
                .binding("k8s-sa"),
            Tool::test("vault.sa-fail")
                .argv("[\"false\"]")
                .binding("k8s-sa"),
        ] {
            docs.push(t.yaml(&ns));
        }
        docs.push(format!("apiVersion: toolgate.dev/v1alpha1\nkind: ToolGrant\nmetadata: {{name: vault, namespace: {ns}}}\nspec:\n  subjects: [{{kind: ServiceAccount, name: fixer, namespace: {ns}}}]\n  tools: {{names: [vault.kv, vault.sa-sleep, vault.sa-fail]}}\n  scopes: [\"workspace:read\"]\n"));
        ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
        let token_dir = tempfile::tempdir().expect("token dir");
        let suite = Suite {
            operator: None,
            store: node::artifact_store(BUCKET),
            ns,
            vault,
            token_dir,
        };
        Some(suite.with_operator())
    }

    /// (Re)start the operator, presenting the operator's own service-account token to Vault.
    fn with_operator(mut self) -> Suite {
        self.operator = None;
        let file = self.token_dir.path().join("token");
        std::fs::write(&file, sa_token("toolgate-system", "toolgate-operator")).expect("token");
        let file = file.display().to_string();
        self.operator = Some(node::operator_for(
            &self.ns,
            &self.store,
            BUCKET,
            &[
                "--vault-addr",
                &self.vault.addr,
                "--vault-token-file",
                &file,
                "--vault-timeout-seconds",
                "3",
                "--keep-failed-pods-seconds",
                "0",
            ],
        ));
        self
    }

    fn call(&self, name: &str, tool: &str, args: &str) {
        ok(
            &["apply", "-f", "-"],
            Some(&toolgate_testkit::fixtures::call(
                &self.ns, name, tool, args, &self.ns,
            )),
        );
    }

    fn leases(&self) -> Vec<String> {
        self.vault.leases("kubernetes/creds/agent")
    }

    /// Wait until the call's lease is revoked and its lease Secret gone.
    fn revoked(&self, call: &str) {
        wait_for(
            &self.ns,
            &format!("toolcall/{call}"),
            "{.status.conditions[?(@.type==\"CredentialsRevoked\")].status}",
            &["True"],
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while kubectl(
            &["get", "secret", &format!("tg-{call}-lease"), "-n", &self.ns],
            None,
        )
        .0
        {
            assert!(
                Instant::now() < deadline,
                "the lease Secret outlived the lease"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            self.leases().is_empty(),
            "Vault still has {:?}",
            self.leases()
        );
    }

    fn wait_lease(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.leases().len() != 1 {
            assert!(Instant::now() < deadline, "no lease: {:?}", self.leases());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn kubernetes_auth_brokers_kv_and_bindings_say_whether_vault_lets_them_read() {
    let Some(s) = Suite::new("tg-vault-kv") else {
        return;
    };
    let ns = &s.ns;
    // Vault checked the operator's own token; another service account's token is refused.
    ok(&["create", "serviceaccount", "fixer", "-n", ns], None);
    let (refused, out, err) = s.vault.cli(&[
        "write",
        "auth/kubernetes/login",
        "role=toolgate-operator",
        &format!("jwt={}", sa_token(ns, "fixer")),
    ]);
    assert!(!refused, "Vault let another service account in: {out}");
    assert!(err.contains("not authorized"), "{err}");

    wait_for(
        ns,
        "credentialbinding/kv-bot",
        "{.status.conditions[0].status}",
        &["True"],
    );
    wait_for(
        ns,
        "credentialbinding/kv-denied",
        "{.status.conditions[0].status}",
        &["False"],
    );
    assert_eq!(
        jsonpath(
            ns,
            "credentialbinding/kv-denied",
            "{.status.conditions[0].reason}"
        ),
        "BrokerForbidden"
    );
    let row = ok(&["get", "credentialbinding", "kv-denied", "-n", ns], None);
    assert!(
        row.contains("False"),
        "kubectl get shows the broken binding: {row}"
    );

    s.call("kv-1", "vault.kv", "{}");
    wait_for(
        ns,
        "toolcall/kv-1",
        "{.status.phase}",
        &["Succeeded", "Failed"],
    );
    assert_eq!(
        jsonpath(ns, "toolcall/kv-1", "{.status.phase}"),
        "Succeeded"
    );
    assert!(
        jsonpath(ns, "toolcall/kv-1", "{.status.result.outputPreview}").contains("REDACTED"),
        "the tool read the value Vault holds"
    );
    let status = jsonpath(ns, "toolcall/kv-1", "{.status}");
    let events = ok(&["get", "events", "-n", ns, "-o", "yaml"], None);
    let bindings = ok(&["get", "credentialbindings", "-n", ns, "-o", "yaml"], None);
    let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, CANARY);
    for (what, text) in [
        ("status", status.as_str()),
        ("events", events.as_str()),
        ("bindings", bindings.as_str()),
        ("operator log", operator_log().as_str()),
    ] {
        assert!(!text.contains(CANARY), "the credential reached the {what}");
        assert!(
            !text.contains(&b64),
            "the credential reached the {what} in base64"
        );
    }
}

#[test]
fn a_lease_is_revoked_when_its_call_ends_is_deleted_or_outlives_its_operator() {
    let Some(s) = Suite::new("tg-vault-lease") else {
        return;
    };
    let ns = s.ns.clone();
    // Success: the lease lives while the call runs, then it is revoked and its Secret removed. The
    // call sleeps long enough to still be running when the test looks, on a busy machine too.
    s.call("ok-1", "vault.sa-sleep", "{seconds: \"10\"}");
    wait_for(&ns, "toolcall/ok-1", "{.status.phase}", &["Running"]);
    s.wait_lease();
    assert!(kubectl(&["get", "secret", "tg-ok-1-lease", "-n", &ns], None).0);
    wait_for(&ns, "toolcall/ok-1", "{.status.phase}", &["Succeeded"]);
    s.revoked("ok-1");
    let status = jsonpath(&ns, "toolcall/ok-1", "{.status}");
    assert!(
        !status.contains("kubernetes/creds/agent/"),
        "no lease id in status: {status}"
    );

    // Failure.
    s.call("fail-1", "vault.sa-fail", "{}");
    wait_for(&ns, "toolcall/fail-1", "{.status.phase}", &["Failed"]);
    s.revoked("fail-1");

    // Deletion of a running call: the finalizer waits for the revocation.
    s.call("doomed", "vault.sa-sleep", "{seconds: \"30\"}");
    wait_for(&ns, "toolcall/doomed", "{.status.phase}", &["Running"]);
    s.wait_lease();
    ok(
        &[
            "delete",
            "toolcall",
            "doomed",
            "-n",
            &ns,
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );
    assert!(
        s.leases().is_empty(),
        "deleted, yet Vault has {:?}",
        s.leases()
    );

    // Cancelled while it runs (what CancelCall sets).
    s.call("stopped", "vault.sa-sleep", "{seconds: \"30\"}");
    wait_for(&ns, "toolcall/stopped", "{.status.phase}", &["Running"]);
    s.wait_lease();
    ok(
        &[
            "annotate",
            "toolcall",
            "stopped",
            "-n",
            &ns,
            "toolgate.dev/cancel-requested=alice@example.com: not needed",
        ],
        None,
    );
    wait_for(&ns, "toolcall/stopped", "{.status.phase}", &["Cancelled"]);
    s.revoked("stopped");

    // The operator killed mid-call, and the call ends while none runs: the next one revokes the
    // lease when it finds the call ended.
    let mut s = s;
    s.call("orphan", "vault.sa-sleep", "{seconds: \"10\"}");
    wait_for(&ns, "toolcall/orphan", "{.status.phase}", &["Running"]);
    s.wait_lease();
    s.operator = None;
    wait_for(&ns, "pod/tg-orphan", "{.status.phase}", &["Succeeded"]);
    assert_eq!(
        jsonpath(&ns, "toolcall/orphan", "{.status.phase}"),
        "Running"
    );
    assert_eq!(
        s.leases().len(),
        1,
        "nobody revoked it while no operator ran"
    );
    let s = s.with_operator();
    wait_for(&ns, "toolcall/orphan", "{.status.phase}", &["Succeeded"]);
    s.revoked("orphan");
}

#[test]
fn vault_stopped_fails_calls_with_its_reason_and_they_succeed_once_it_is_back() {
    let Some(mut s) = Suite::new("tg-vault-down") else {
        return;
    };
    let ns = s.ns.clone();
    wait_for(
        &ns,
        "credentialbinding/kv-bot",
        "{.status.conditions[0].status}",
        &["True"],
    );
    s.vault.stop();
    s.call("down-1", "vault.kv", "{}");
    wait_for(&ns, "toolcall/down-1", "{.status.phase}", &["Failed"]);
    assert_eq!(
        jsonpath(
            &ns,
            "toolcall/down-1",
            "{.status.conditions[?(@.type==\"CredentialsBound\")].reason}"
        ),
        "BrokerUnavailable"
    );
    assert_eq!(
        jsonpath(
            &ns,
            "toolcall/down-1",
            "{.status.conditions[?(@.type==\"Started\")].type}"
        ),
        "",
        "nothing started"
    );
    assert!(
        !kubectl(&["get", "pod", "tg-down-1", "-n", &ns], None).0,
        "no pod"
    );
    // Vault back (a dev server comes back empty: configured again); the operator logs in anew.
    s.vault.restart();
    configure(&s.vault);
    s.call("up-1", "vault.kv", "{}");
    wait_for(
        &ns,
        "toolcall/up-1",
        "{.status.phase}",
        &["Succeeded", "Failed"],
    );
    assert_eq!(
        jsonpath(&ns, "toolcall/up-1", "{.status.phase}"),
        "Succeeded",
        "{}",
        jsonpath(&ns, "toolcall/up-1", "{.status.conditions}")
    );
}

#[test]
fn a_revocation_that_fails_is_shown_and_retried_until_vault_answers() {
    let Some(s) = Suite::new("tg-vault-revoke") else {
        return;
    };
    let ns = s.ns.clone();
    s.call("sealed", "vault.sa-sleep", "{seconds: \"3\"}");
    wait_for(&ns, "toolcall/sealed", "{.status.phase}", &["Running"]);
    s.wait_lease();
    // Sealed while the call runs: its end cannot revoke the lease (Vault keeps it, sealed).
    s.vault.seal();
    wait_for(&ns, "toolcall/sealed", "{.status.phase}", &["Succeeded"]);
    let condition = "{.status.conditions[?(@.type==\"CredentialsRevoked\")]";
    wait_for(
        &ns,
        "toolcall/sealed",
        &format!("{condition}.reason}}"),
        &["RevokeFailed"],
    );
    let message = jsonpath(&ns, "toolcall/sealed", &format!("{condition}.message}}"));
    assert!(
        message.contains("BrokerUnavailable") && message.contains("retried"),
        "the same words as the embedded runtime's: {message}"
    );
    // Unsealed: the retry goes through, and the lease is gone.
    s.vault.unseal();
    s.revoked("sealed");
    assert_eq!(
        jsonpath(&ns, "toolcall/sealed", &format!("{condition}.reason}}")),
        "LeaseRevoked"
    );
    assert!(s.leases().is_empty(), "{:?}", s.leases());
}
