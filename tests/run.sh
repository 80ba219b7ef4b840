#!/usr/bin/env bash
# The test command (README). Installs and starts the real servers the suites need, then runs
# every test of the workspace:
#   - bubblewrap (the local sandbox) and e2fsprogs (its write quotas), with apt, through scripts/install-deps.sh;
#   - moto (S3-compatible artifact store), in a virtualenv cached under ~/.cache/toolgate;
#   - helm (built with go by tests/helm/build.sh, cached under ~/.cache/toolgate/helm) for the
#     chart's tests;
#   - a one-node cluster (tests/cluster/up.sh): etcd (Debian's etcd-server), kube-apiserver,
#     kube-controller-manager, kube-scheduler, kubectl and a kubelet built from the
#     k8s.io/kubernetes Go module (cached under ~/.cache/toolgate/k8s/<version>), Debian's
#     containerd, runc and CNI plugins for the node, kube-router (built once, cached under
#     ~/.cache/toolgate/kube-router) enforcing its NetworkPolicies.
#   - Vault v1.21.0 built from the github.com/hashicorp/vault Go module (tests/vault/build.sh;
#     cached under ~/.cache/toolgate/vault/<version>-minimal: the minimal build and the Kubernetes
#     secrets and auth plugins), a test dependency only;
#   - Jaeger v1.76.0 (an OpenTelemetry Collector distribution) built from its Go module
#     (tests/jaeger/build.sh; cached under ~/.cache/toolgate/jaeger/<version>), the collector the
#     tracing suites send spans to;
#   - the MCP servers the MCP suites govern (PyPI mcp-server-time and mcp-server-git, in a
#     virtualenv cached under ~/.cache/toolgate/mcp-servers; npm server-everything and
#     server-filesystem) and the TypeScript MCP SDK (npm, ~/.cache/toolgate/mcp-node);
#   - the Python client's tests (pytest, in a virtualenv cached under ~/.cache/toolgate/pyclient),
#     after the other cargo tests on a full run.
# Everything installed rather than built is tests/install.sh's. A full run builds every test
# first, then runs the cluster's suites beside the others (see the end). Arguments are passed to
# `cargo test`, which then runs only what they select.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
log() { echo "tests/run.sh: $*" >&2; }

# The real servers every suite needs, installed, built and started (tests/servers.sh).
. tests/servers.sh

# The Python client (clients/python) as users get it: its wheel and sdist built from its folder
# alone (`python -m build`, the wheel made from the sdist; its stubs generated into the build),
# the wheel installed with its dependencies into a fresh virtualenv, and its suite run there
# against a real `toolgate local`. The test tools (pytest, mypy, the Agents SDK) come from the
# cached build virtualenv through a .pth placed after the fresh one's own packages.
python_client_tests() {
  local work; work="$(mktemp -d)"
  log "building the Python client's sdist and wheel"
  "$TOOLGATE_PYCLIENT_VENV/bin/python" -m build --no-isolation --outdir "$work/dist" clients/python >"$work/build.log" 2>&1 \
    || { cat "$work/build.log" >&2; return 1; }
  log "installing the wheel into a fresh virtualenv"
  python3 -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$work"/dist/toolgate-*.whl
  local tools fresh
  tools="$("$TOOLGATE_PYCLIENT_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  fresh="$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "$tools" > "$fresh/zz-toolgate-test-tools.pth"
  TOOLGATE_BINARY="$CARGO_TARGET/debug/toolgate" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests
  rm -rf "$work"
}
CARGO_TARGET="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

if [ "$#" -gt 0 ]; then
  # Arguments select cargo tests: those, one after another, and nothing else.
  cargo test --workspace --locked --no-fail-fast "$@"
  exit 0
fi

# A full run: every test binary built first, then two groups at once, each one test binary after
# another as `cargo test` would run them (from its package's folder): the suites of the cluster
# (the operator's and the CRDs' against the API server: mostly waiting on pods and watches)
# beside all the others, the doctests and the Python client's (mostly the machine's CPU). The
# binaries are run directly: two `cargo test -p` would each resolve features for their own
# packages and rebuild what the whole workspace's build shares. Each group's output is printed
# whole when both have ended, a line per finished test binary while they run.
log "building every test (cargo test --no-run)"
TESTS="$(cargo test --workspace --locked --no-run --message-format=json-render-diagnostics \
  | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    kinds = m.get("target", {}).get("kind", [])
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable") and "bench" not in kinds:
        package = os.path.dirname(m["manifest_path"])
        group = "cluster" if os.path.basename(package) in ("operator", "crds") else "workspace"
        print(group, package, m["executable"])
')"
LOGS="$(mktemp -d)"
run_binaries() {
  local group="$1" rc=0
  while read -r g package exe; do
    [ "$g" = "$group" ] || continue
    echo "     Running $(basename "$package")/$(basename "$exe")"
    (cd "$package" && "$exe") || { rc=1; echo "tests/run.sh: $(basename "$package")/$(basename "$exe") FAILED"; }
  done <<<"$TESTS"
  return "$rc"
}
run_group() {
  local name="$1"; shift
  local rc=0
  "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$LOGS/$name.rc"
  return "$rc"
}
( run_group cluster run_binaries cluster ) &
CLUSTER_GROUP=$!
( run_group workspace run_binaries workspace && run_group doctests cargo test --workspace --locked --doc \
    && run_group python-client python_client_tests ) &
WORKSPACE_GROUP=$!
# Live progress while both run: a line per test binary started and finished.
# (tail follows them until the sleeper it watches is gone.)
sleep infinity &
SLEEPER=$!
tail -q -F --pid="$SLEEPER" "$LOGS/cluster.log" "$LOGS/workspace.log" 2>/dev/null \
  | grep --line-buffered -E '^(     Running|test result:|tests/run.sh:)' &
PROGRESS=$!
wait "$CLUSTER_GROUP" || true
wait "$WORKSPACE_GROUP" || true
kill "$SLEEPER"
wait "$PROGRESS" || true
failed=""
for name in cluster workspace doctests python-client; do
  if [ ! -f "$LOGS/$name.rc" ]; then failed="$failed $name(not run)"; continue; fi
  rc="$(cat "$LOGS/$name.rc")"
  echo; echo "==== tests/run.sh: the $name group $([ "$rc" = 0 ] && echo passed || echo FAILED) ===="
  cat "$LOGS/$name.log"
  [ "$rc" = 0 ] || failed="$failed $name"
done
if [ -n "$failed" ]; then log "failed:$failed"; exit 1; fi
log "every group passed"
