//! Calls on the test cluster's real node (tests/cluster/up.sh): each call's pod is scheduled by
//! kube-scheduler and run by a real kubelet in a container of the executor image (this build's
//! executor with what `executor/Containerfile` installs), through containerd and runc; the
//! executor uploads the call's output to a real S3-compatible bucket (moto) that the operator
//! reads back. What the pod spec asks for — non-root user, read-only root, no service-account
//! token, no capabilities, seccomp, the deadline — is observed from inside the container, and
//! every call's NetworkPolicy, enforced by kube-router, by a tool that tries to connect.

mod support;

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use support::node::{self, RUNTIME_CLASS};
use support::{have_cluster, jsonpath, kubectl, ok, prepare, wait_for};
use toolgate_testkit::fixtures::{self, Tool};
use toolgate_testkit::moto::Moto;

const BUCKET: &str = "node-artifacts";

/// The policy of the node's calls: read-only, no network, run on the real node.
fn policy(ns: &str) -> String {
    node::sandbox_policy(ns, "on-node")
}

const TOOLS: &[(&str, &str, u32)] = &[
    ("node.echo", "[echo, \"{{msg}}\"]", 10000),
    ("node.sleep", "[sleep, \"{{seconds}}\"]", 10000),
    // The executor is the container's first process: its own status is what the runtime made.
    (
        "node.probe",
        "[grep, -E, \"^(Uid|Gid|CapEff|CapBnd|Seccomp|NoNewPrivs):\", /proc/1/status]",
        10000,
    ),
    ("node.write-root", "[touch, /written-by-a-tool]", 10000),
    (
        "node.sa-token",
        "[ls, /var/run/secrets/kubernetes.io/serviceaccount]",
        10000,
    ),
    ("node.git", "[git, --version]", 10000),
    ("node.quick", "[sleep, \"{{seconds}}\"]", 1000),
];

struct Node {
    ns: String,
    _operator: support::Operator,
    store: Moto,
    /// The operator's agent API (TLS, `toolgate_testkit::api::TestTls`).
    grpc: String,
    /// How the operator was started, to start it again.
    operator_args: Vec<String>,
    artifacts: (String, u16),
}

impl Node {
    /// Kill the operator (SIGKILL, as a crash) and start it again with the same arguments.
    fn restart_operator(&mut self) {
        let args: Vec<&str> = self.operator_args.iter().map(String::as_str).collect();
        let (host, port) = (&self.artifacts.0, self.artifacts.1);
        drop(std::mem::replace(
            &mut self._operator,
            support::start_operator_s3(&self.ns, (host, port), BUCKET, &args),
        ));
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            support::dump(&self.ns, "toolgate,pods,events");
        }
    }
}

/// A namespace with the node's tools, and an operator running calls in `image` (the executor
/// image when `None`) whose artifacts go to the store at this port of the machine's end of the
/// node's link (moto's when `None`).
fn node_with(prefix: &str, artifacts_port: Option<u16>, image: Option<String>) -> Option<Node> {
    node_with_args(prefix, artifacts_port, image, &[])
}

/// [`node_with`], the operator started with `extra` arguments too.
fn node_with_args(
    prefix: &str,
    artifacts_port: Option<u16>,
    image: Option<String>,
    extra_args: &[&str],
) -> Option<Node> {
    if !have_cluster() || !node::have_node() {
        return None;
    }
    let ns = prepare(prefix);
    node::install_runtime_class();
    let mut docs = vec![policy(&ns)];
    for (name, argv, timeout) in TOOLS {
        docs.push(
            Tool::test(name)
                .argv(argv)
                .policy("on-node")
                .timeout_ms(*timeout)
                .summary("A tool that runs on the test cluster's real node.")
                .yaml(&ns),
        );
    }
    let names: Vec<&str> = TOOLS.iter().map(|t| t.0).collect();
    docs.push(fixtures::grant(&ns, "node-tools", &names));
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let store = Moto::start(&node::host_ip());
    store.create_bucket(BUCKET);
    let image = image.unwrap_or_else(node::executor_image);
    let host = node::host_ip();
    let port = artifacts_port.unwrap_or(store.port);
    let grpc = format!("127.0.0.1:{}", support::free_port());
    let mut extra = toolgate_testkit::api::TestTls::get().operator_args(&grpc);
    extra.extend(["--executor-image".to_string(), image]);
    extra.extend(extra_args.iter().map(|a| a.to_string()));
    let args: Vec<&str> = extra.iter().map(String::as_str).collect();
    let operator = support::start_operator_s3(&ns, (&host, port), BUCKET, &args);
    support::apply_agent_access(&ns);
    Some(Node {
        ns,
        _operator: operator,
        store,
        grpc,
        operator_args: extra,
        artifacts: (host, port),
    })
}

fn propose(ns: &str, name: &str, tool: &str, args: &str) {
    ok(
        &["apply", "-f", "-"],
        Some(&fixtures::call(ns, name, tool, args, "team-a")),
    );
}

fn preview(ns: &str, call: &str) -> String {
    jsonpath(
        ns,
        &format!("toolcall/{call}"),
        "{.status.result.outputPreview}",
    )
}

fn error(ns: &str, call: &str) -> String {
    jsonpath(
        ns,
        &format!("toolcall/{call}"),
        "{.status.result.error.message}",
    )
}

#[test]
fn a_call_runs_in_a_container_of_the_executor_image_on_the_real_node() {
    let Some(n) = node_with("tg-node-run", None, None) else {
        return;
    };
    let ns = &n.ns;
    propose(ns, "sleepy", "node.sleep", "{seconds: \"3\"}");
    // While it runs: bound by the scheduler to the node, its container started by containerd
    // from the image this build made.
    let pod = "tg-sleepy";
    let deadline = Instant::now() + Duration::from_secs(90);
    let started = loop {
        let got = jsonpath(
            ns,
            &format!("pod/{pod}"),
            "{.spec.nodeName} {.status.containerStatuses[0].state.running.startedAt} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].image}",
        );
        if got.split_whitespace().count() == 4 {
            break got;
        }
        assert!(Instant::now() < deadline, "the pod never ran: {got:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let fields: Vec<&str> = started.split_whitespace().collect();
    assert_eq!(fields[0], node::NODE, "{started}");
    assert!(fields[2].starts_with("containerd://"), "{started}");
    assert_eq!(fields[3], node::executor_image(), "{started}");
    let scheduled = kubectl(
        &[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            &format!("involvedObject.name={pod},reason=Scheduled"),
            "-o",
            "jsonpath={.items[*].message}",
        ],
        None,
    )
    .1;
    assert!(scheduled.contains(node::NODE), "{scheduled:?}");
    wait_for(ns, "toolcall/sleepy", "{.status.phase}", &["Succeeded"]);

    // The full output is in the bucket, under the hash the status records.
    propose(ns, "echo", "node.echo", "{msg: hello-from-a-container}");
    wait_for(ns, "toolcall/echo", "{.status.phase}", &["Succeeded"]);
    assert_eq!(preview(ns, "echo"), "hello-from-a-container\n");
    let uri = jsonpath(
        ns,
        "toolcall/echo",
        "{.status.result.artifacts[?(@.artifactId==\"stdout\")].uri}",
    );
    let hash = jsonpath(
        ns,
        "toolcall/echo",
        "{.status.result.artifacts[?(@.artifactId==\"stdout\")].contentHash}",
    );
    let key = uri
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .unwrap_or_else(|| panic!("an s3 artifact: {uri:?}"));
    let body = n.store.object(BUCKET, key);
    assert_eq!(body, b"hello-from-a-container\n");
    assert_eq!(
        hash,
        format!("sha256:{}", hex::encode(Sha256::digest(&body)))
    );
    // And `toolgate artifact` fetches it through the operator, which reads the bucket.
    let fetched = std::process::Command::new(support::toolgate_cli())
        .args(["artifact", &format!("{ns}/echo"), "stdout"])
        .env("TOOLGATE_SERVER", format!("https://{}", n.grpc))
        .env("TOOLGATE_TOKEN", support::token_of("agent"))
        .env("TOOLGATE_CA", &toolgate_testkit::api::TestTls::get().cert)
        .output()
        .expect("toolgate runs");
    assert!(
        fetched.status.success(),
        "{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    assert_eq!(fetched.stdout, body);

    // The image holds what its Containerfile installs.
    propose(ns, "git", "node.git", "{}");
    wait_for(ns, "toolcall/git", "{.status.phase}", &["Succeeded"]);
    assert!(
        preview(ns, "git").starts_with("git version "),
        "{}",
        preview(ns, "git")
    );
}

#[test]
fn the_pod_security_context_is_enforced_inside_the_container() {
    let Some(n) = node_with("tg-node-sec", None, None) else {
        return;
    };
    let ns = &n.ns;
    propose(ns, "probe", "node.probe", "{}");
    propose(ns, "write-root", "node.write-root", "{}");
    propose(ns, "sa-token", "node.sa-token", "{}");
    wait_for(ns, "toolcall/probe", "{.status.phase}", &["Succeeded"]);
    let status = preview(ns, "probe");
    // The image's non-root user, no capability at all, seccomp filtering, no new privileges.
    for want in [
        "Uid:\t65532\t65532\t65532\t65532",
        "Gid:\t65532\t65532\t65532\t65532",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(status.contains(want), "{want:?} not in:\n{status}");
    }
    // The root filesystem is read-only; no service-account token is mounted.
    wait_for(ns, "toolcall/write-root", "{.status.phase}", &["Failed"]);
    let written = error(ns, "write-root");
    assert!(written.contains("Read-only file system"), "{written}");
    wait_for(ns, "toolcall/sa-token", "{.status.phase}", &["Failed"]);
    let token = error(ns, "sa-token");
    assert!(token.contains("No such file or directory"), "{token}");
}

/// A listener that accepts and never answers: an artifact store that hangs.
fn tarpit(host: &str) -> (std::net::TcpListener, u16) {
    let l = std::net::TcpListener::bind((host, 0)).expect("bind");
    let port = l.local_addr().expect("addr").port();
    (l, port)
}

#[test]
fn active_deadline_seconds_ends_a_call_whose_executor_overruns() {
    // The executor ends the tool at its timeout itself; what the pod's deadline is for is an
    // executor that cannot end: here its upload to an artifact store that never answers.
    if !have_cluster() || !node::have_node() {
        return;
    }
    let (_held, port) = tarpit(&node::host_ip());
    let Some(n) = node_with("tg-node-deadline", Some(port), None) else {
        return;
    };
    let ns = &n.ns;
    propose(ns, "overrun", "node.quick", "{seconds: \"0\"}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let phase = jsonpath(ns, "toolcall/overrun", "{.status.phase}");
        if phase == "Failed" {
            break;
        }
        assert_ne!(phase, "Succeeded");
        assert!(Instant::now() < deadline, "still {phase:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let message = jsonpath(
        ns,
        "toolcall/overrun",
        "{.status.conditions[?(@.type==\"Finished\")].message}",
    );
    assert!(message.contains("DeadlineExceeded"), "{message}");
}

/// A policy of the node in `ns` named `name` with this `network` block.
fn network_policy(ns: &str, name: &str, network: &str) -> String {
    policy(ns)
        .replace("name: on-node,", &format!("name: {name},"))
        .replace("network: {egress: none}", &format!("network: {network}"))
}

/// NetworkPolicies on the node, enforced by kube-router, observed by a tool that tries to
/// connect (`tcp-probe`): every address tried is one this suite made — a listener pod, the node,
/// the API server, two listeners on this machine's end of the link.
#[test]
fn network_policies_are_enforced_on_the_node() {
    if !have_cluster() || !node::have_node() {
        return;
    }
    let probe_image = node::probe_image();
    let Some(n) = node_with("tg-node-net", None, Some(probe_image.clone())) else {
        return;
    };
    let ns = &n.ns;
    let (inside, outside) = node::test_hosts();
    let listen = |host: &str| {
        let l = std::net::TcpListener::bind((host, 0)).expect("bind a test host");
        let port = l.local_addr().expect("addr").port();
        (l, format!("{host}:{port}"))
    };
    let (_a, host_in) = listen(&inside);
    let (_b, host_out) = listen(&outside);
    // A pod that listens: what another call's pod must not reach.
    ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: listener, namespace: {ns}}}\nspec:\n  \
             runtimeClassName: {RUNTIME_CLASS}\n  automountServiceAccountToken: false\n  \
             containers: [{{name: listen, image: \"{probe_image}\", imagePullPolicy: IfNotPresent, \
             command: [tcp-probe, listen, \"8080\"], securityContext: {{runAsNonRoot: true, allowPrivilegeEscalation: false}}}}]\n"
        )),
    );
    let listener = format!("{}:8080", wait_pod_ip(ns, "listener"));
    let mut docs = vec![
        network_policy(ns, "net-none", "{egress: none}"),
        network_policy(
            ns,
            "net-cidr",
            &format!("{{egress: allowlist, allowCidrs: [\"{inside}/32\"]}}"),
        ),
        // Private networks are denied unless a policy says otherwise (the default).
        network_policy(ns, "net-open", "{egress: open, denyPrivateNetworks: false}"),
        network_policy(
            ns,
            "net-open-public",
            "{egress: open, denyPrivateNetworks: true}",
        ),
    ];
    let policies = ["net-none", "net-cidr", "net-open", "net-open-public"];
    for p in policies {
        // kube-router programs a new pod's rules about a second after the pod starts; the probe
        // tries at once: the executor's egress gate holds the tool until the policy is in force.
        docs.push(
            Tool::test(&format!("probe.{p}"))
                .argv("[tcp-probe, connect, \"{{msg}}\", \"1500\"]")
                .policy(p)
                .summary("Tries one TCP connection and says what happened.")
                .yaml(ns),
        );
    }
    let tools: Vec<String> = policies.iter().map(|p| format!("probe.{p}")).collect();
    let tools: Vec<&str> = tools.iter().map(String::as_str).collect();
    docs.push(fixtures::grant(ns, "probes", &tools));
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let api = support::api_server();
    let node_kubelet = format!("{}:10250", node::node_ip());
    let cases: Vec<(&str, &str, &str)> = vec![
        // Controls: with egress open, the targets answer.
        ("open-listener", "net-open", &listener),
        ("open-host", "net-open", &host_in),
        // Egress none: nothing but the artifact store's port.
        ("none-listener", "net-none", &listener),
        ("none-node", "net-none", &node_kubelet),
        ("none-api", "net-none", &api),
        ("none-host", "net-none", &host_in),
        // A CIDR allowlist: inside reached, outside not.
        ("cidr-in", "net-cidr", &host_in),
        ("cidr-out", "net-cidr", &host_out),
        // Open egress, private networks denied by default: a private address refused.
        ("public-private", "net-open-public", &host_in),
    ];
    for (name, policy, target) in &cases {
        propose(
            ns,
            name,
            &format!("probe.{policy}"),
            &format!("{{msg: \"{target}\"}}"),
        );
    }
    let mut seen = Vec::new();
    for (name, _, target) in &cases {
        wait_for(
            ns,
            &format!("toolcall/{name}"),
            "{.status.phase}",
            &["Succeeded"],
        );
        seen.push((
            name.to_string(),
            target.to_string(),
            preview(ns, name).trim().to_string(),
        ));
    }
    let outcome = |name: &str| {
        seen.iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, o)| o.clone())
            .unwrap_or_default()
    };
    for reached in ["open-listener", "open-host", "cidr-in"] {
        assert_eq!(outcome(reached), "connected", "{reached}: {seen:?}");
    }
    for blocked in [
        "none-listener",
        "none-node",
        "none-api",
        "none-host",
        "cidr-out",
        "public-private",
    ] {
        assert_ne!(outcome(blocked), "connected", "{blocked}: {seen:?}");
        assert!(
            ["refused", "timed out"].contains(&outcome(blocked).as_str()),
            "{blocked}: {seen:?}"
        );
    }
    // The upload still went through the one port the policy opens for it.
    let uri = jsonpath(
        ns,
        "toolcall/none-api",
        "{.status.result.artifacts[?(@.artifactId==\"stdout\")].uri}",
    );
    assert!(uri.starts_with(&format!("s3://{BUCKET}/")), "{uri:?}");
}

fn wait_pod_ip(ns: &str, pod: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ip = jsonpath(
            ns,
            &format!("pod/{pod}"),
            "{.status.containerStatuses[0].state.running.startedAt} {.status.podIP}",
        );
        if let Some((_, ip)) = ip
            .split_once(' ')
            .filter(|(s, ip)| !s.is_empty() && !ip.is_empty())
        {
            return ip.to_string();
        }
        assert!(Instant::now() < deadline, "pod {pod} never ran: {ip:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Fifty calls on the real node while the operator is SIGKILLed and restarted at random: every
/// call succeeds, each ran in exactly one pod (distinct pod UIDs the scheduler bound, from its
/// Scheduled events), the credential reached the calls that have one, and no pod or Secret
/// outlives its call.
#[test]
fn fifty_calls_survive_an_operator_killed_at_random_with_real_pods() {
    const CANARY: &str = "canary-node-credential-7e21";
    let (secrets, secrets_arg) = support::secrets_file(CANARY);
    let Some(mut n) = node_with_args(
        "tg-node-chaos",
        None,
        None,
        // Fifty pods at once on two cores: kube-router took up to 18 s to filter the last ones
        // (median 9 s), beside a CI run; the default 30 s bound leaves too little margin here.
        &[
            "--secrets",
            &secrets_arg,
            "--keep-failed-pods-seconds",
            "0",
            "--egress-gate-ms",
            "90000",
        ],
    ) else {
        return;
    };
    let _secrets = secrets;
    let ns = n.ns.clone();
    let binding =
        std::fs::read_to_string(support::root().join("examples/credential-bindings.yaml"))
            .expect("bindings")
            .replace("namespace: team-a}", &format!("namespace: {ns}}}"));
    let secret_tool = Tool::test("node.secret")
        .argv("[cat, /var/run/toolgate/credentials/github-token]")
        .policy("on-node")
        .binding("github-issues-bot")
        .summary("Reads its brokered credential on the real node.")
        .yaml(&ns);
    ok(
        &["apply", "-f", "-"],
        Some(
            &[
                binding,
                secret_tool,
                fixtures::grant(&ns, "node-secret", &["node.secret"]),
            ]
            .join("\n---\n"),
        ),
    );
    support::eventually(
        &ns,
        "tooldescriptor/node.secret",
        "{.status.lifecycle}",
        "enabled",
    );
    let names: Vec<String> = (0..50).map(|i| format!("chaos-{i:02}")).collect();
    let docs: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| match i % 5 {
            0 => fixtures::call(&ns, name, "node.secret", "{}", "team-a"),
            1 => fixtures::call(&ns, name, "node.sleep", "{seconds: \"3\"}", "team-a"),
            _ => fixtures::call(
                &ns,
                name,
                "node.echo",
                &format!("{{msg: \"{name}\"}}"),
                "team-a",
            ),
        })
        .collect();
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let kills = support::finish_while_killing(
        &ns,
        names.len(),
        Duration::from_secs(420),
        (500, 2000),
        8,
        || n.restart_operator(),
    );
    assert!(kills >= 3, "the operator was killed only {kills} times");
    let now = support::call_phases(&ns);
    assert_eq!(
        now.split_whitespace().filter(|p| *p == "Succeeded").count(),
        50,
        "{now}"
    );
    for (i, name) in names.iter().enumerate() {
        let out = jsonpath(
            &ns,
            &format!("toolcall/{name}"),
            "{.status.result.outputPreview}",
        );
        match i % 5 {
            0 => assert!(
                !out.contains(CANARY) && out.contains("REDACTED"),
                "{name}: {out:?}"
            ),
            1 => assert_eq!(out, "", "{name}"),
            _ => assert_eq!(out, format!("{name}\n"), "{name}"),
        }
    }
    // How long kube-router took to filter each pod under this burst (what the gate waited).
    let mut waits: Vec<u64> = names
        .iter()
        .filter_map(|name| {
            jsonpath(
                &ns,
                &format!("toolcall/{name}"),
                "{.status.result.usage.egressGateMs}",
            )
            .parse()
            .ok()
        })
        .collect();
    waits.sort_unstable();
    assert_eq!(
        waits.len(),
        50,
        "every call passed the egress gate: {waits:?}"
    );
    eprintln!(
        "egress gate waits under a burst of 50 pods: min {} ms, median {} ms, max {} ms",
        waits[0], waits[25], waits[49]
    );
    // One pod per call: the scheduler bound exactly one pod object (one UID) of each name.
    let bound = kubectl(
        &[
            "get",
            "events",
            "-n",
            &ns,
            "--field-selector",
            "reason=Scheduled",
            "-o",
            "jsonpath={range .items[*]}{.involvedObject.name} {.involvedObject.uid}{\"\\n\"}{end}",
        ],
        None,
    )
    .1;
    for name in &names {
        let pod = format!("tg-{name}");
        let uids: std::collections::BTreeSet<&str> = bound
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(p, _)| *p == pod)
            .map(|(_, uid)| uid)
            .collect();
        assert_eq!(uids.len(), 1, "{name} ran in {} pods: {uids:?}", uids.len());
    }
    support::wait_children_gone(&ns, Duration::from_secs(90));
}

/// A process tool under a domain allowlist on the real node: its pod reaches its call's egress
/// proxy (served by the operator) and nothing else. Through it, an allowed name answers and a
/// name the policy does not list is refused with the proxy's reason; around it, the same
/// upstream's address is not reached. A credential delivered by the proxy reaches an HTTPS API
/// that checks it (Python's own client, trusting the call's CA), while the pod holds only a
/// placeholder. The proxy resolves with a DNS server the suite runs.
#[test]
fn a_process_tool_reaches_allowed_names_only_through_its_proxy_on_the_node() {
    if !have_cluster() || !node::have_node() {
        return;
    }
    let (inside, _) = node::test_hosts();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let upstream = rt
        .block_on(toolgate_testkit::upstream::start(&inside))
        .expect("an upstream on a test host");
    let ip: std::net::IpAddr = inside.parse().expect("test host address");
    const CANARY: &str = "canary-node-proxied-credential-3b8e";
    let api = rt
        .block_on(toolgate_testkit::upstream::start_tls(
            &inside, "api.test", CANARY,
        ))
        .expect("an HTTPS API on a test host");
    let dns = rt
        .block_on(toolgate_testkit::dns::DnsServer::start(vec![
            ("allowed.test", vec![ip]),
            ("denied.test", vec![ip]),
            ("api.test", vec![ip]),
        ]))
        .expect("dns");
    let host = node::host_ip();
    let nameserver = dns.addr().to_string();
    let (secrets, secrets_arg) = support::secrets_file(CANARY);
    let upstream_ca = secrets.path().join("api-ca.pem");
    std::fs::write(&upstream_ca, &api.ca_pem).expect("the API's CA");
    let upstream_ca = upstream_ca.display().to_string();
    let Some(n) = node_with_args(
        "tg-node-proxy",
        None,
        Some(node::probe_image()),
        &[
            "--egress-proxy-address",
            &host,
            "--egress-nameserver",
            &nameserver,
            "--egress-upstream-ca",
            &upstream_ca,
            "--secrets",
            &secrets_arg,
        ],
    ) else {
        return;
    };
    let ns = &n.ns;
    let port = upstream.port();
    let api_port = api.addr.port();
    let script = format!(
        "import os, urllib.request as u; t = os.environ['API_TOKEN']; \
         r = u.Request('https://api.test:{api_port}/user', headers={{'Authorization': 'Bearer ' + t}}); \
         print(u.urlopen(r).read().decode().strip(), t[:21])"
    );
    let docs = [
        network_policy(
            ns,
            "net-names",
            &format!(
                "{{egress: allowlist, allowDomains: [\"allowed.test:{port}\", \"api.test:{api_port}\"], allowCidrs: [\"{inside}/32\"]}}"
            ),
        ),
        format!(
            "apiVersion: toolgate.dev/v1alpha1\nkind: CredentialBinding\nmetadata: {{name: api-token, namespace: {ns}}}\nspec:\n  vault: {{engine: kv2, mount: secret, path: team-a/github-issues-bot, field: token}}\n  scopes: [\"workspace:read\"]\n  ttlSeconds: 300\n  delivery:\n    mode: proxy\n    envName: API_TOKEN\n    proxy: {{hosts: [\"api.test:{api_port}\"]}}\n"
        ),
        Tool::test("proxy.api")
            .argv(&format!("[python3, -c, {script:?}]"))
            .policy("net-names")
            .binding("api-token")
            .summary("Calls an API with a credential its proxy delivers.")
            .yaml(ns),
        Tool::test("proxy.get")
            .argv("[tcp-probe, proxy-get, \"{{msg}}\"]")
            .policy("net-names")
            .summary("Fetches a URL through the call's egress proxy.")
            .yaml(ns),
        Tool::test("proxy.direct")
            .argv("[tcp-probe, connect, \"{{msg}}\", \"1500\"]")
            .policy("net-names")
            .summary("Tries one TCP connection around the proxy.")
            .yaml(ns),
        fixtures::grant(
            ns,
            "proxy-tools",
            &["proxy.get", "proxy.direct", "proxy.api"],
        ),
    ];
    ok(&["apply", "-f", "-"], Some(&docs.join("\n---\n")));
    let cases = [
        (
            "allowed",
            "proxy.get",
            format!("http://allowed.test:{port}/hello"),
        ),
        (
            "denied",
            "proxy.get",
            format!("http://denied.test:{port}/hello"),
        ),
        ("around", "proxy.direct", format!("{inside}:{port}")),
        ("credential", "proxy.api", String::new()),
    ];
    for (name, tool, target) in &cases {
        propose(ns, name, tool, &format!("{{msg: \"{target}\"}}"));
    }
    for (name, _, _) in &cases {
        wait_for(
            ns,
            &format!("toolcall/{name}"),
            "{.status.phase}",
            &["Succeeded", "Failed"],
        );
    }
    let allowed = preview(ns, "allowed");
    assert!(
        allowed.contains("hello from upstream; request line GET /hello HTTP/1.1"),
        "{allowed}"
    );
    let denied = preview(ns, "denied");
    assert!(denied.contains("HTTP/1.1 403"), "{denied}");
    assert!(
        denied.contains("is not among the sandbox's allowed domains"),
        "{denied}"
    );
    let around = preview(ns, "around");
    assert!(
        ["refused", "timed out"].contains(&around.trim()),
        "around the proxy: {around}"
    );
    // The call's result says what its proxy let through and what it refused.
    let effects = |call: &str| {
        jsonpath(
            ns,
            &format!("toolcall/{call}"),
            "{.status.result.effectsObserved}",
        )
    };
    assert!(
        effects("allowed").contains(&format!("GET allowed.test:{port}/hello")),
        "{}",
        effects("allowed")
    );
    assert!(
        effects("denied").contains("(domain-not-allowed)"),
        "{}",
        effects("denied")
    );
    // The API got the value; the tool held a placeholder; the value is in no status or event.
    assert_eq!(
        preview(ns, "credential").trim(),
        "token ok toolgate-placeholder-",
        "{}",
        error(ns, "credential")
    );
    let status = jsonpath(ns, "toolcall/credential", "{.status}");
    assert!(!status.contains(CANARY), "{status}");
    let events = kubectl(&["get", "events", "-n", ns, "-o", "yaml"], None).1;
    assert!(!events.contains(CANARY), "the credential reached an event");
    drop(n);
    drop(secrets);
    drop(rt);
}
