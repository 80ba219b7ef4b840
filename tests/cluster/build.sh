#!/usr/bin/env bash
# Build the test cluster's binaries once and cache them under ~/.cache/toolgate: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, the kubelet and kube-proxy from the
# k8s.io/kubernetes Go module pinned in go.mod here, and kube-router (the NetworkPolicy enforcer).
# up.sh calls it; tests/build-tools.sh runs it beside the other Go builds.
#
#   eval "$(tests/cluster/build.sh)"   # prints: export TOOLGATE_K8S_BIN=... TOOLGATE_KUBE_ROUTER_BIN=...
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
BIN="$CACHE/k8s/$K8S_VERSION/bin"

log() { echo "tests/cluster/build.sh: $*" >&2; }

# The NetworkPolicy enforcer: kube-router, firewall only (iptables + ipset, which these kernels
# have; kube-network-policies needs nftables' queue expression, which they lack; Calico and
# Cilium are not served by the Go module proxy here). v2.1.0 is the only version served and has
# reported vulnerabilities: acceptable for a node that only ever sees the suite's own traffic.
KUBE_ROUTER_VERSION=v2.1.0
KUBE_ROUTER="$CACHE/kube-router/$KUBE_ROUTER_VERSION/bin/kube-router"
if [ ! -x "$KUBE_ROUTER" ]; then
  command -v go >/dev/null || { log "Go is required to build kube-router"; exit 1; }
  log "building kube-router $KUBE_ROUTER_VERSION (once; ~7 min cold on 2 cores)"
  mkdir -p "$(dirname "$KUBE_ROUTER")"
  (cd "$(mktemp -d)" && GOBIN="$(dirname "$KUBE_ROUTER")" GOFLAGS=-mod=mod \
     go install -trimpath -ldflags '-s -w' "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION") >&2 &
  ROUTER_BUILD=$!
fi

COMMANDS="kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy"
MISSING=""
for c in $COMMANDS; do [ -x "$BIN/$c" ] || MISSING="$MISSING k8s.io/kubernetes/cmd/$c"; done
if [ -n "$MISSING" ]; then
  command -v go >/dev/null || { log "Go is required to build the cluster"; exit 1; }
  log "building$MISSING $K8S_VERSION (once; ~15 min cold on 2 cores)"
  mkdir -p "$BIN"
  MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
  # No symbol table or DWARF: test binaries, and linking six of them is minutes of the build.
  LDFLAGS="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS="$LDFLAGS -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=clean"
  done
  (cd "$HERE" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/" \
      $MISSING) >&2
fi
# kube-router builds beside the Kubernetes binaries (their modules share no compiled package).
[ -z "${ROUTER_BUILD:-}" ] || wait "$ROUTER_BUILD" || { log "building kube-router failed"; exit 1; }
echo "export TOOLGATE_K8S_BIN='$BIN' TOOLGATE_KUBE_ROUTER_BIN='$KUBE_ROUTER'"
