#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback for the tests: etcd and kube-apiserver built
# from the k8s.io/kubernetes Go module (pinned in go.mod here), cached under ~/.cache/toolgate.
#
#   eval "$(tests/cluster/up.sh)"   # prints exports: TOOLGATE_KUBECONFIG, TOOLGATE_KUBECTL, ...
# Runs etcd, kube-apiserver and kube-controller-manager (garbage collector, namespace controller).
#   tests/cluster/down.sh           # stops it and removes its folder
#
# Identities (bearer tokens in the token file; one kubeconfig context each):
#   admin     system:masters
#   operator  system:serviceaccount:toolgate-system:toolgate-operator
#   agent     system:serviceaccount:team-a:fixer
#   reviewer  alice@example.com (group team-a-reviewers)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
BIN="$CACHE/k8s/$K8S_VERSION/bin"

log() { echo "tests/cluster/up.sh: $*" >&2; }

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kubectl" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  command -v go >/dev/null || { log "Go is required to build the control plane"; exit 1; }
  log "building kube-apiserver, kube-controller-manager and kubectl $K8S_VERSION (once; ~11 min cold on 2 cores)"
  mkdir -p "$BIN"
  MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
  LDFLAGS=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS="$LDFLAGS -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=clean"
  done
  (cd "$HERE" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl) >&2
fi
command -v etcd >/dev/null || { log "etcd is required (Debian package etcd-server)"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
DIR="$(mktemp -d "${TMPDIR:-/tmp}/toolgate-cluster.XXXXXX")"
ETCD_CLIENT="$(free_port)"; ETCD_PEER="$(free_port)"; API_PORT="$(free_port)"

openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
ADMIN="$(token)"; OPERATOR="$(token)"; AGENT="$(token)"; REVIEWER="$(token)"
cat > "$DIR/tokens.csv" <<CSV
$ADMIN,admin,admin,"system:masters"
$OPERATOR,system:serviceaccount:toolgate-system:toolgate-operator,operator,"system:serviceaccounts,system:serviceaccounts:toolgate-system"
$AGENT,system:serviceaccount:team-a:fixer,fixer,"system:serviceaccounts,system:serviceaccounts:team-a"
$REVIEWER,alice@example.com,alice,"team-a-reviewers"
CSV

etcd --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  >"$DIR/etcd.log" 2>&1 &
echo $! > "$DIR/etcd.pid"

"$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_CLIENT" \
  --bind-address=127.0.0.1 --secure-port="$API_PORT" --cert-dir="$DIR/certs" \
  --token-auth-file="$DIR/tokens.csv" --authorization-mode=RBAC \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$DIR/sa.pub" --service-account-signing-key-file="$DIR/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 >"$DIR/apiserver.log" 2>&1 &
echo $! > "$DIR/apiserver.pid"

for _ in $(seq 1 120); do
  if curl -sfk -H "Authorization: Bearer $ADMIN" "https://127.0.0.1:$API_PORT/readyz" >/dev/null 2>&1; then
    READY=1; break
  fi
  sleep 0.5
done
if [ -z "${READY:-}" ]; then
  log "kube-apiserver did not become ready; last log lines:"; tail -20 "$DIR/apiserver.log" >&2
  "$HERE/down.sh" "$DIR" || true
  exit 1
fi

CA="$DIR/certs/apiserver.crt"
{
  echo "apiVersion: v1"
  echo "kind: Config"
  echo "clusters: [{name: toolgate-test, cluster: {server: \"https://127.0.0.1:$API_PORT\", certificate-authority: \"$CA\"}}]"
  echo "users:"
  for u in admin:$ADMIN operator:$OPERATOR agent:$AGENT reviewer:$REVIEWER; do
    echo "- {name: ${u%%:*}, user: {token: ${u#*:}}}"
  done
  echo "contexts:"
  for u in admin operator agent reviewer; do
    echo "- {name: $u, context: {cluster: toolgate-test, user: $u}}"
  done
  echo "current-context: admin"
} > "$DIR/kubeconfig"

"$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz >/dev/null 2>"$DIR/kubectl.err" || { cat "$DIR/kubectl.err" >&2;
  log "kubectl cannot reach the API server with the generated kubeconfig"; "$HERE/down.sh" "$DIR" || true; exit 1; }

# Garbage collection (owner references), namespace deletion, the default ServiceAccount of each
# namespace (pods need one) and binding claims to volumes come from the controller manager.
"$BIN/kube-controller-manager" --kubeconfig "$DIR/kubeconfig" --secure-port=0 --leader-elect=false \
  --controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,persistentvolume-binder-controller >"$DIR/controller-manager.log" 2>&1 &
echo $! > "$DIR/controller-manager.pid"
log "kube-apiserver $K8S_VERSION ready on 127.0.0.1:$API_PORT ($DIR)"
echo "export TOOLGATE_CLUSTER_DIR='$DIR'"
echo "export TOOLGATE_KUBECONFIG='$DIR/kubeconfig'"
echo "export TOOLGATE_KUBECTL='$BIN/kubectl'"
