#!/usr/bin/env bash
# Stop the cluster started by up.sh and leave the machine as up.sh found it: down.sh [DIR]
# The node's processes and every container, their cgroups, the node's network namespace (its
# veth, bridge and iptables chains go with it), the route to its pods, what the node wrote at
# fixed paths (/run/containerd, /var/lib/cni, /var/log/containers), then the folder.
set -uo pipefail
DIR="${1:-${TOOLGATE_CLUSTER_DIR:-}}"
[ -n "$DIR" ] && [ -d "$DIR" ] || exit 0

stop() {
  local pid="$1"
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
}

# The kubelet first (nothing restarts a container after it), then every container (runc's state
# names them; containerd puts each in the cgroup /k8s.io/<id>), then whatever still runs in the
# node's network namespace (containerd, its shims).
[ -f "$DIR/node/kubelet.pid" ] && stop "$(cat "$DIR/node/kubelet.pid")"
[ -f "$DIR/node/kube-router.pid" ] && stop "$(cat "$DIR/node/kube-router.pid")"
[ -f "$DIR/node/kube-proxy.pid" ] && stop "$(cat "$DIR/node/kube-proxy.pid")"
CONTAINERS="$(ls "$DIR/node/runc/k8s.io" 2>/dev/null)"
for _ in 1 2 3; do
  for id in $CONTAINERS; do
    cat /sys/fs/cgroup/*/k8s.io/"$id"/cgroup.procs 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  sleep 0.2
done
if [ -f "$DIR/node-netns" ]; then
  NS="$(cat "$DIR/node-netns")"
  for _ in 1 2 3; do
    ip netns pids "$NS" 2>/dev/null | xargs -r kill -9 2>/dev/null
    sleep 0.2
  done
fi
[ -f "$DIR/node.pid" ] && stop "$(cat "$DIR/node.pid")"
for id in $CONTAINERS; do
  rmdir /sys/fs/cgroup/*/k8s.io/"$id" 2>/dev/null
done
# The parent goes when no other containerd's containers are left in it.
rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null

for p in scheduler controller-manager apiserver etcd; do
  [ -f "$DIR/$p.pid" ] && stop "$(cat "$DIR/$p.pid")"
done

if [ -f "$DIR/node-netns" ]; then
  NS="$(cat "$DIR/node-netns")"
  N="${NS##*-}"
  ip route del "10.252.$N.0/24" 2>/dev/null
  ip route del "10.253.$N.0/24" 2>/dev/null
  ip link del "tgn$N-host" 2>/dev/null
  ip netns del "$NS" 2>/dev/null
  rm -f /var/lib/cni/results/"$NS"-* /var/lib/cni/cache/results/"$NS"-* 2>/dev/null
fi
find /var/log/containers -maxdepth 1 -lname "$DIR/*" -delete 2>/dev/null
if [ -f "$DIR/made-folders" ]; then
  while read -r made; do rm -rf "$made"; done < "$DIR/made-folders"
fi
rm -rf "$DIR"
