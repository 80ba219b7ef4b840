//! Test infrastructure shared by the suites that meet the test control plane (`tests/cluster`,
//! started by `tests/run.sh`): kubectl as the identities `up.sh` creates, fresh namespaces with
//! the CRDs installed, and manifests moved into a namespace. A dev-dependency only.
//!
//! In CI a missing API server fails the suite; elsewhere the suite says how to start one and
//! skips.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod api;
pub mod dns;
pub mod fixtures;
pub mod jaeger;
pub mod moto;
pub mod upstream;
pub mod vault;

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Whether what a suite needs is there (`var`, exported by tests/run.sh); in CI its absence is a
/// failure, never a skip: `missing` says what is missing, `how` how to get it.
pub fn have(var: &str, missing: &str, how: &str) -> bool {
    if std::env::var_os(var).is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{missing}: CI runs this suite through tests/run.sh, which provides it"
    );
    eprintln!("skipping: {how}");
    false
}

/// Whether a real API server is there; in CI its absence is a failure, never a skip.
pub fn have_cluster() -> bool {
    let how = "run tests/run.sh to start a real kube-apiserver";
    have("TOOLGATE_KUBECONFIG", "no API server", how) && have("TOOLGATE_KUBECTL", "no kubectl", how)
}

/// `kubectl apply --server-side` of `yaml`, as the suites' own field manager: objects several
/// suites apply at once (an AlreadyExists race loses a client-side apply).
pub fn apply_shared(yaml: &str) {
    ok(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=toolgate-tests",
            "-f",
            "-",
        ],
        Some(yaml),
    );
}

/// Run kubectl against the test control plane: (success, stdout, stderr).
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let kubectl = std::env::var_os("TOOLGATE_KUBECTL").expect("TOOLGATE_KUBECTL");
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(std::env::var_os("TOOLGATE_KUBECONFIG").expect("TOOLGATE_KUBECONFIG"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let (Some(t), Some(mut p)) = (stdin, child.stdin.take()) {
        // A kubectl that exits before reading everything says why on stderr.
        if let Err(e) = p.write_all(t.as_bytes())
            && e.kind() != std::io::ErrorKind::BrokenPipe
        {
            panic!("kubectl stdin: {e}");
        }
    }
    let out = child.wait_with_output().expect("kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// kubectl that must succeed; its stdout.
pub fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let (success, out, err) = kubectl(args, stdin);
    assert!(success, "kubectl {args:?}: {err}");
    out
}

/// Poll a jsonpath until it equals `want`.
pub fn eventually(ns: &str, object: &str, jsonpath: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = kubectl(
            &[
                "get",
                object,
                "-n",
                ns,
                "-o",
                &format!("jsonpath={jsonpath}"),
            ],
            None,
        )
        .1;
        if last == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    panic!("{object} {jsonpath}: expected {want:?}, last saw {last:?}");
}

/// Install the CRDs (server-side apply, idempotent) and wait until they are served.
pub fn install_crds() {
    ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=toolgate-tests",
            "-f",
            &root().join("crds/generated").display().to_string(),
        ],
        None,
    );
    // The generated files are named after their CRDs (`toolcalls.toolgate.dev.yaml`).
    let mut names: Vec<String> = std::fs::read_dir(root().join("crds/generated"))
        .expect("crds/generated")
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|f| f.strip_suffix(".yaml"))
                .map(|n| format!("crd/{n}"))
        })
        .collect();
    names.sort();
    for name in names {
        ok(
            &[
                "wait",
                "--for=condition=Established",
                &name,
                "--timeout=60s",
            ],
            None,
        );
    }
}

/// The admission policies of `crds/admission/identity.yaml`, applied server-side by every suite
/// with the same field manager.
pub fn apply_admission_policies() {
    let path = root().join("crds/admission/identity.yaml");
    apply_shared(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    );
}

/// The CRDs installed and a fresh namespace `<prefix>-<random>`.
pub fn namespace(prefix: &str) -> String {
    install_crds();
    let ns = format!(
        "{prefix}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    ok(&["create", "namespace", &ns], None);
    ns
}

/// Create `manifest` as `context` until admission refuses it (a new policy takes a moment to
/// reach the admission plugin); what was accepted meanwhile is deleted. Returns the refusal, or
/// an empty string if it was never refused.
pub fn refused_eventually(
    context: &str,
    manifest: &str,
    kind: &str,
    name: &str,
    ns: &str,
) -> String {
    for _ in 0..120 {
        let (created, _, err) =
            kubectl(&["--context", context, "create", "-f", "-"], Some(manifest));
        if !created {
            return err;
        }
        ok(&["delete", kind, name, "-n", ns, "--wait=false"], None);
        std::thread::sleep(Duration::from_millis(250));
    }
    String::new()
}

/// The YAML of a file, or of every `.yaml` file under a folder (relative to the repository root),
/// with each object's `metadata` namespace (`team-a`, `lint-test`) moved to `ns`. Other fields
/// that name a namespace — a grant's subject, a principal — keep theirs.
pub fn manifests(path: &str, ns: &str) -> String {
    let start = root().join(path);
    let mut files: Vec<PathBuf> = Vec::new();
    let mut stack = Vec::new();
    if start.is_file() {
        files.push(start);
    } else {
        stack.push(start);
    }
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                // A skill's folder holds its own files, read through its Skill manifest.
                if !p.join("SKILL.md").is_file() {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "yaml")
                // Policy test tables (`toolgate policy test`) and kustomize's build files are
                // not objects.
                && !p.to_string_lossy().ends_with(".policytest.yaml")
                && !p.ends_with("kustomization.yaml")
            {
                files.push(p);
            }
        }
    }
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect::<Vec<_>>()
        .join("\n---\n")
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("metadata:") {
                l.replace("namespace: team-a", &format!("namespace: {ns}"))
                    .replace("namespace: lint-test", &format!("namespace: {ns}"))
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
