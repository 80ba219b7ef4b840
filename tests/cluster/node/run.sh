#!/usr/bin/env bash
# The test node's processes, containerd and the kubelet, started by tests/cluster/up.sh inside
# the node's own network namespace and a private mount namespace:
#   nsenter --net=/run/netns/NS unshare --mount --propagation slave -- run.sh NODE_DIR BIN
# so the kubelet's iptables chains, its volume mounts, the pod bridge and every container mount
# stay out of the machine's own tables and mount table, and end with the namespace.
# It writes NODE_DIR/containerd.pid and NODE_DIR/kubelet.pid, then waits for both.
set -euo pipefail
NODE_DIR="$1"; BIN="$2"

# Pods reach the machine (the API server, the artifact store) through the node; the node has
# no default route, so nothing goes further.
sysctl -qw net.ipv4.ip_forward=1
ip link set lo up

containerd --config "$NODE_DIR/containerd.toml" >"$NODE_DIR/containerd.log" 2>&1 &
echo $! > "$NODE_DIR/containerd.pid"
for _ in $(seq 1 100); do
  [ -S "$NODE_DIR/containerd.sock" ] && break
  sleep 0.1
done
# The kubelet starts once up.sh has imported the images (it waits for this file).
for _ in $(seq 1 1200); do
  [ -f "$NODE_DIR/images-imported" ] && break
  sleep 0.1
done

"$BIN/kubelet" --config "$NODE_DIR/kubelet.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
  --hostname-override toolgate-node --node-ip "$(cat "$NODE_DIR/node-ip")" \
  --node-labels toolgate.dev/test-node=true \
  --root-dir "$NODE_DIR/kubelet" --cert-dir "$NODE_DIR/kubelet-pki" --v=1 \
  >"$NODE_DIR/kubelet.log" 2>&1 &
echo $! > "$NODE_DIR/kubelet.pid"
wait
