#!/usr/bin/env bash
# Start a real one-node Kubernetes cluster for the tests, every binary built from the
# k8s.io/kubernetes Go module (pinned in go.mod here) and cached under ~/.cache/toolgate:
#
#   eval "$(tests/cluster/up.sh)"   # prints exports: TOOLGATE_KUBECONFIG, TOOLGATE_KUBECTL, ...
#   tests/cluster/down.sh DIR       # stops all of it and leaves the machine as it found it
#
# The control plane (Debian's etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs
# on this machine; the node (containerd + runc + the bridge CNI, and a kubelet) runs in its own
# network namespace, joined to the machine by a veth pair: the API server listens on the
# machine's end of it (10.251.N.1), the node is 10.251.N.2, its pods get 10.252.N.0/24 (N random
# per cluster). The node has no default route: pods reach the node, the machine's end of the
# link, and each other, nothing else. See README.md here.
#
# Identities (bearer tokens in the token file; one kubeconfig context each):
#   admin     system:masters
#   operator  system:serviceaccount:toolgate-system:toolgate-operator
#   agent     system:serviceaccount:team-a:fixer
#   reviewer  alice@example.com (group team-a-reviewers)
#   stranger  mallory@example.com (authenticated, no RBAC at all)
# and the node's own: system:node:toolgate-node (the kubelet), system:kube-scheduler,
# system:kube-router (the NetworkPolicy enforcer, kube-router in firewall mode).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION="$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"

log() { echo "tests/cluster/up.sh: $*" >&2; }

# The binaries (built once and cached by build.sh): the control plane, the kubelet, kube-proxy,
# kubectl and kube-router.
eval "$("$HERE/build.sh")"
BIN="$TOOLGATE_K8S_BIN"
command -v etcd >/dev/null || { log "etcd is required (Debian package etcd-server)"; exit 1; }
"$HERE/node/install.sh" >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }
DIR="$(mktemp -d "${TMPDIR:-/tmp}/toolgate-cluster.XXXXXX")"
# Whatever fails below, the machine is left as it was found.
trap 'status=$?; [ "$status" = 0 ] || "$HERE/down.sh" "$DIR"' EXIT
ETCD_CLIENT="$(free_port)"; ETCD_PEER="$(free_port)"; API_PORT="$(free_port)"

# The node's network: its own namespace, a veth pair to this machine, a /24 for its pods.
for _ in $(seq 1 50); do
  N="$(( (RANDOM % 250) + 2 ))"
  ip netns list | grep -qw "toolgate-node-$N" || ip route | grep -q "10.25[123].$N." || break
done
NODE_NS="toolgate-node-$N"; HOST_IP="10.251.$N.1"; NODE_IP="10.251.$N.2"; POD_CIDR="10.252.$N.0/24"
# Services' virtual IPs, per cluster, routed through the node, where kube-proxy translates them.
SERVICE_CIDR="10.253.$N.0/24"
echo "$NODE_NS" > "$DIR/node-netns"
ip netns add "$NODE_NS"
ip link add "tgn$N-host" type veth peer name "tgn$N-node"
ip link set "tgn$N-node" netns "$NODE_NS"
ip addr add "$HOST_IP/24" dev "tgn$N-host"
ip link set "tgn$N-host" up
ip -n "$NODE_NS" link set "tgn$N-node" name eth0
ip -n "$NODE_NS" addr add "$NODE_IP/24" dev eth0
ip -n "$NODE_NS" link set eth0 up
ip -n "$NODE_NS" link set lo up
ip route add "$POD_CIDR" via "$NODE_IP" dev "tgn$N-host"
ip route add "$SERVICE_CIDR" via "$NODE_IP" dev "tgn$N-host"
# Two more addresses of this machine on the link: test hosts for the NetworkPolicy suite (one
# inside an allowed CIDR, one outside it), so no test ever sends a packet anywhere else.
TEST_HOSTS="10.251.$N.10 10.251.$N.20"
for h in $TEST_HOSTS; do ip addr add "$h/32" dev "tgn$N-host"; done

openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
# The API server's client certificate for the kubelet (logs, exec), from a CA only the kubelet
# trusts: the kubelet authenticates by certificate and no one else holds one.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=toolgate-test-kubelet-client-ca" \
  -keyout "$DIR/kubelet-client-ca.key" -out "$DIR/kubelet-client-ca.crt" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
  -keyout "$DIR/apiserver-kubelet-client.key" -out "$DIR/apiserver-kubelet-client.csr" 2>/dev/null
openssl x509 -req -in "$DIR/apiserver-kubelet-client.csr" -CA "$DIR/kubelet-client-ca.crt" \
  -CAkey "$DIR/kubelet-client-ca.key" -CAcreateserial -days 2 -out "$DIR/apiserver-kubelet-client.crt" 2>/dev/null
token() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
ADMIN="$(token)"; OPERATOR="$(token)"; AGENT="$(token)"; REVIEWER="$(token)"; STRANGER="$(token)"; KUBELET="$(token)"; SCHEDULER="$(token)"; KUBE_ROUTER_TOKEN="$(token)"; KUBE_PROXY_TOKEN="$(token)"
cat > "$DIR/tokens.csv" <<CSV
$ADMIN,admin,admin,"system:masters"
$OPERATOR,system:serviceaccount:toolgate-system:toolgate-operator,operator,"system:serviceaccounts,system:serviceaccounts:toolgate-system"
$AGENT,system:serviceaccount:team-a:fixer,fixer,"system:serviceaccounts,system:serviceaccounts:team-a"
$REVIEWER,alice@example.com,alice,"team-a-reviewers"
$STRANGER,mallory@example.com,mallory,""
$KUBELET,system:node:toolgate-node,kubelet,"system:nodes"
$SCHEDULER,system:kube-scheduler,kube-scheduler,""
$KUBE_ROUTER_TOKEN,system:kube-router,kube-router,""
$KUBE_PROXY_TOKEN,system:kube-proxy,kube-proxy,""
CSV

etcd --data-dir "$DIR/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  >"$DIR/etcd.log" 2>&1 &
echo $! > "$DIR/etcd.pid"

"$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_CLIENT" \
  --bind-address="$HOST_IP" --advertise-address="$HOST_IP" --secure-port="$API_PORT" --cert-dir="$DIR/certs" \
  --token-auth-file="$DIR/tokens.csv" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$DIR/sa.pub" --service-account-signing-key-file="$DIR/sa.key" \
  --kubelet-preferred-address-types=InternalIP \
  --kubelet-client-certificate="$DIR/apiserver-kubelet-client.crt" --kubelet-client-key="$DIR/apiserver-kubelet-client.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" >"$DIR/apiserver.log" 2>&1 &
echo $! > "$DIR/apiserver.pid"

for _ in $(seq 1 120); do
  if curl -sfk -H "Authorization: Bearer $ADMIN" "https://$HOST_IP:$API_PORT/readyz" >/dev/null 2>&1; then
    READY=1; break
  fi
  sleep 0.5
done
if [ -z "${READY:-}" ]; then
  log "kube-apiserver did not become ready; last log lines:"; tail -20 "$DIR/apiserver.log" >&2
  exit 1
fi

CA="$DIR/certs/apiserver.crt"
{
  echo "apiVersion: v1"
  echo "kind: Config"
  echo "clusters: [{name: toolgate-test, cluster: {server: \"https://$HOST_IP:$API_PORT\", certificate-authority: \"$CA\"}}]"
  echo "users:"
  for u in admin:$ADMIN operator:$OPERATOR agent:$AGENT reviewer:$REVIEWER stranger:$STRANGER; do
    echo "- {name: ${u%%:*}, user: {token: ${u#*:}}}"
  done
  echo "contexts:"
  for u in admin operator agent reviewer stranger; do
    echo "- {name: $u, context: {cluster: toolgate-test, user: $u}}"
  done
  echo "current-context: admin"
} > "$DIR/kubeconfig"

"$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get --raw /readyz >/dev/null 2>"$DIR/kubectl.err" || { cat "$DIR/kubectl.err" >&2;
  log "kubectl cannot reach the API server with the generated kubeconfig"; exit 1; }

# Garbage collection (owner references), namespace deletion, the default ServiceAccount of each
# namespace (pods need one) and binding claims to volumes come from the controller manager; so
# do what the operator installed by Helm needs: Deployments and ReplicaSets, the EndpointSlices
# of its Service (kube-proxy routes by them) and the kube-root-ca.crt ConfigMap its
# service-account token volume mounts. Not the node lifecycle controller (the node's not-ready
# taint is lifted below once the kubelet says Ready; nothing here needs evictions).
"$BIN/kube-controller-manager" --kubeconfig "$DIR/kubeconfig" --secure-port=0 --leader-elect=false \
  --root-ca-file="$DIR/certs/apiserver.crt" \
  --controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,persistentvolume-binder-controller,deployment-controller,replicaset-controller,endpointslice-controller,root-ca-certificate-publisher-controller >"$DIR/controller-manager.log" 2>&1 &
echo $! > "$DIR/controller-manager.pid"
log "kube-apiserver $K8S_VERSION ready on $HOST_IP:$API_PORT ($DIR)"

# The node: containerd with runc, the bridge CNI, and a kubelet, inside the node's namespaces.
NODE_DIR="$DIR/node"
mkdir -p "$NODE_DIR/cni" "$NODE_DIR/kubelet" "$NODE_DIR/pod-logs"
echo "$NODE_IP" > "$NODE_DIR/node-ip"
# Folders at fixed paths that containerd, the CNI plugins and the kubelet write to: down.sh
# removes what it finds of this cluster there, and the folders it made.
for d in /run/containerd /var/lib/cni /var/log/containers; do
  [ -e "$d" ] || echo "$d" >> "$DIR/made-folders"
done
PAUSE_IMAGE="toolgate.test/pause:1"
cat > "$NODE_DIR/containerd.toml" <<TOML
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$NODE_DIR/containerd.sock"
[ttrpc]
  address = "$NODE_DIR/containerd.ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE on these machines: the sandbox's oom_score_adj of -998 cannot be set.
  restrict_oom_score_adj = true
  enable_cdi = false
  # Pod network namespaces under the state folder, not the machine's /run/netns.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$NODE_DIR/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni"
TOML
cat > "$NODE_DIR/cni/10-toolgate.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "toolgate-node-$N", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni-ipam",
            "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
: > "$NODE_DIR/resolv.conf"
cat > "$NODE_DIR/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines have cgroup v1 (hybrid) and no systemd: cgroupfs, no QoS hierarchy.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://$NODE_DIR/containerd.sock
imageServiceEndpoint: unix://$NODE_DIR/containerd.sock
podLogsDir: $NODE_DIR/pod-logs
resolvConf: $NODE_DIR/resolv.conf
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $DIR/kubelet-client-ca.crt}}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
healthzPort: 0
serializeImagePulls: false
# Never evict or collect images on the test machine's disk.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerWithTaints: [{key: toolgate.dev/test-node, value: "true", effect: NoSchedule}]
YAML
CA="$DIR/certs/apiserver.crt"
kubeconfig_for() {
  echo "apiVersion: v1"
  echo "kind: Config"
  echo "clusters: [{name: toolgate-test, cluster: {server: \"https://$HOST_IP:$API_PORT\", certificate-authority: \"$CA\"}}]"
  echo "users: [{name: $1, user: {token: $2}}]"
  echo "contexts: [{name: $1, context: {cluster: toolgate-test, user: $1}}]"
  echo "current-context: $1"
}
kubeconfig_for kubelet "$KUBELET" > "$NODE_DIR/kubelet.kubeconfig"
kubeconfig_for kube-scheduler "$SCHEDULER" > "$DIR/scheduler.kubeconfig"
kubeconfig_for kube-router "$KUBE_ROUTER_TOKEN" > "$NODE_DIR/kube-router.kubeconfig"
# kube-proxy is system:kube-proxy, which the bootstrap ClusterRoleBinding system:node-proxier binds.
kubeconfig_for kube-proxy "$KUBE_PROXY_TOKEN" > "$NODE_DIR/kube-proxy.kubeconfig"
# What kube-router's firewall reads (its own ClusterRole, as its manifests give it).
"$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:kube-router"}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [list, get, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, get, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, get, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kube-router"}
subjects: [{kind: User, apiGroup: rbac.authorization.k8s.io, name: "system:kube-router"}]
YAML
"$BIN/kube-scheduler" --kubeconfig "$DIR/scheduler.kubeconfig" --secure-port=0 --leader-elect=false \
  >"$DIR/scheduler.log" 2>&1 &
echo $! > "$DIR/scheduler.pid"
nsenter --net="/run/netns/$NODE_NS" unshare --mount --propagation slave -- \
  "$HERE/node/run.sh" "$NODE_DIR" "$BIN" >"$NODE_DIR/run.log" 2>&1 &
echo $! > "$DIR/node.pid"
for _ in $(seq 1 100); do [ -S "$NODE_DIR/containerd.sock" ] && break; sleep 0.1; done
[ -S "$NODE_DIR/containerd.sock" ] || { log "containerd did not start:"; tail -20 "$NODE_DIR/containerd.log" >&2; exit 1; }
PAUSE_CACHE="$CACHE/node-images"
mkdir -p "$PAUSE_CACHE"
if [ ! -f "$PAUSE_CACHE/pause.tar" ] || [ "$HERE/node/pause.c" -nt "$PAUSE_CACHE/pause.tar" ]; then
  gcc -static -O2 -o "$PAUSE_CACHE/pause" "$HERE/node/pause.c"
  python3 "$HERE/node/image.py" --tag "$PAUSE_IMAGE" --containerfile "$HERE/node/pause.Containerfile" \
    --context "$PAUSE_CACHE" --out "$PAUSE_CACHE/pause.tar" >/dev/null
fi
ctr --address "$NODE_DIR/containerd.sock" -n k8s.io images import --no-unpack=false "$PAUSE_CACHE/pause.tar" >/dev/null
touch "$NODE_DIR/images-imported"
for _ in $(seq 1 240); do
  if "$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" get node toolgate-node \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; then
    NODE_READY=1; break
  fi
  sleep 0.5
done
if [ -z "${NODE_READY:-}" ]; then
  log "the node did not become Ready; last kubelet log lines:"; tail -30 "$NODE_DIR/kubelet.log" >&2
  exit 1
fi
# The kubelet registers with the not-ready taint that the node lifecycle controller lifts once
# the node is Ready; that controller does not run here, so it is lifted here.
"$BIN/kubectl" --kubeconfig "$DIR/kubeconfig" taint node toolgate-node node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
# The NetworkPolicy enforcer, in the node's network namespace, once the node it serves exists;
# ready when it has written its chains there.
nsenter --net="/run/netns/$NODE_NS" "$TOOLGATE_KUBE_ROUTER_BIN" --run-firewall=true --run-router=false \
  --run-service-proxy=false --enable-cni=false --hostname-override=toolgate-node \
  --kubeconfig "$NODE_DIR/kube-router.kubeconfig" --health-port=0 --metrics-port=0 \
  >"$NODE_DIR/kube-router.log" 2>&1 &
echo $! > "$NODE_DIR/kube-router.pid"
for _ in $(seq 1 100); do
  nsenter --net="/run/netns/$NODE_NS" iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1 && ROUTER_READY=1 && break
  sleep 0.2
done
if [ -z "${ROUTER_READY:-}" ]; then
  log "kube-router did not program the node; its log:"; tail -20 "$NODE_DIR/kube-router.log" >&2
  exit 1
fi
# Services: kube-proxy (iptables mode) in the node's network namespace, so pods reach the API
# server as `kubernetes.default` (the in-cluster operator does) and this machine reaches a
# Service's virtual IP through the route above. No conntrack tuning: the namespace's sysctls
# are the machine's.
cat > "$NODE_DIR/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: "$NODE_DIR/kube-proxy.kubeconfig"}
hostnameOverride: toolgate-node
mode: iptables
clusterCIDR: "$POD_CIDR"
nodePortAddresses: ["$NODE_IP/32"]
healthzBindAddress: ""
metricsBindAddress: ""
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
nsenter --net="/run/netns/$NODE_NS" "$BIN/kube-proxy" --config "$NODE_DIR/kube-proxy.yaml" \
  >"$NODE_DIR/kube-proxy.log" 2>&1 &
echo $! > "$NODE_DIR/kube-proxy.pid"
for _ in $(seq 1 100); do
  nsenter --net="/run/netns/$NODE_NS" iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q "default/kubernetes" && PROXY_READY=1 && break
  sleep 0.2
done
if [ -z "${PROXY_READY:-}" ]; then
  log "kube-proxy did not program the node; its log:"; tail -20 "$NODE_DIR/kube-proxy.log" >&2
  exit 1
fi
log "node toolgate-node Ready at $NODE_IP (pods $POD_CIDR, containerd $NODE_DIR/containerd.sock)"
echo "export TOOLGATE_CLUSTER_DIR='$DIR'"
echo "export TOOLGATE_KUBECONFIG='$DIR/kubeconfig'"
echo "export TOOLGATE_KUBECTL='$BIN/kubectl'"
echo "export TOOLGATE_NODE_CONTAINERD='$NODE_DIR/containerd.sock'"
echo "export TOOLGATE_NODE_HOST_IP='$HOST_IP'"
echo "export TOOLGATE_NODE_POD_CIDR='$POD_CIDR'"
echo "export TOOLGATE_NODE_TEST_HOSTS='$TEST_HOSTS'"
echo "export TOOLGATE_NODE_SERVICE_CIDR='$SERVICE_CIDR'"
