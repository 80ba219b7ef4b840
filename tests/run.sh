#!/usr/bin/env bash
# The test command (README). Installs and starts the real servers the suites need, then runs
# every test of the workspace:
#   - bubblewrap (the local sandbox), with apt, through scripts/install-deps.sh;
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
#     after the cargo tests on a full run.
# Arguments are passed to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
log() { echo "tests/run.sh: $*" >&2; }

VENV="$CACHE/venv"
if [ ! -x "$VENV/bin/moto_server" ]; then
  log "installing moto[server] into $VENV (once)"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'moto[server]==5.*'
fi
export PATH="$VENV/bin:$PATH"
moto_server --help >/dev/null 2>&1 || { log "moto_server does not start"; exit 1; }

if ! command -v etcd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing etcd-server (apt)"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else
    log "etcd is missing: install Debian's etcd-server (or put an etcd 3.4+ binary on PATH)"; exit 1
  fi
fi

scripts/install-deps.sh   # bubblewrap: the sandbox suites and the embedded runtime need it

# helm, for the chart's tests and the RBAC the operator suites install (built once, cached).
eval "$(tests/helm/build.sh)"

# Real MCP servers for the MCP suites, in a virtualenv of the system's Python (its interpreter is
# under /usr, which every sandbox sees; the suites name the virtualenv as a read root).
MCP_SERVERS="$CACHE/mcp-servers"
if [ ! -x "$MCP_SERVERS/bin/mcp-server-time" ] || [ ! -x "$MCP_SERVERS/bin/mcp-server-git" ]; then
  log "installing the MCP test servers (mcp-server-time, mcp-server-git) into $MCP_SERVERS (once)"
  if ! /usr/bin/python3 -m venv "$MCP_SERVERS" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      rm -rf "$MCP_SERVERS"; /usr/bin/python3 -m venv "$MCP_SERVERS"
    else
      log "/usr/bin/python3 cannot make a virtualenv: install Debian's python3-venv"; exit 1
    fi
  fi
  "$MCP_SERVERS/bin/python" -m pip install --quiet --disable-pip-version-check \
    'mcp-server-time==2026.10.*' 'mcp-server-git==2026.10.*'
fi
export TOOLGATE_MCP_SERVERS="$MCP_SERVERS"

# The official TypeScript MCP SDK, a client of `toolgate mcp serve` in its suite, and the npm
# reference servers the MCP suites govern (server-everything, also over streamable HTTP, and
# server-filesystem) (npm, cached).
MCP_NODE="$CACHE/mcp-node"
NODE_PACKAGES="@modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31"
if [ ! -f "$MCP_NODE/node_modules/@modelcontextprotocol/sdk/package.json" ] \
   || [ ! -x "$MCP_NODE/node_modules/.bin/mcp-server-everything" ] \
   || [ ! -x "$MCP_NODE/node_modules/.bin/mcp-server-filesystem" ]; then
  if ! command -v npm >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      log "installing nodejs and npm (apt)"
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
    else
      log "npm is missing: install Node.js and npm"; exit 1
    fi
  fi
  log "installing $NODE_PACKAGES into $MCP_NODE (once)"
  mkdir -p "$MCP_NODE"
  # shellcheck disable=SC2086
  (cd "$MCP_NODE" && { [ -f package.json ] || npm init -y >/dev/null; } \
     && npm install --silent --no-audit --no-fund $NODE_PACKAGES >/dev/null)
fi
export TOOLGATE_MCP_NODE="$MCP_NODE"

# A real Vault for the credential-broker suites (built once from its Go module, cached; each
# suite starts its own dev server on a free loopback port).
eval "$(tests/vault/build.sh)"
# A real trace collector for the OpenTelemetry suites (each starts its own on free ports).
eval "$(tests/jaeger/build.sh)"

CLUSTER="$(tests/cluster/up.sh)"
eval "$CLUSTER"
trap 'tests/cluster/down.sh "$TOOLGATE_CLUSTER_DIR"' EXIT

cargo test --workspace --locked --no-fail-fast "$@"

# The Python client (clients/python) against a real `toolgate local`, on full runs only (the
# arguments above select cargo tests). Its stubs are generated from proto/ when pip builds it.
if [ "$#" -eq 0 ]; then
  PYVENV="$CACHE/pyclient"
  [ -x "$PYVENV/bin/python" ] || python3 -m venv "$PYVENV"
  log "installing the Python client into $PYVENV"
  "$PYVENV/bin/python" -m pip install --quiet --disable-pip-version-check './clients/python[test]'
  TOOLGATE_BINARY="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/toolgate" \
    "$PYVENV/bin/python" -m pytest -q clients/python/tests
fi
