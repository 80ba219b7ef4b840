#!/usr/bin/env bash
# Stop the control plane started by up.sh and remove its folder: down.sh [DIR]
set -uo pipefail
DIR="${1:-${TOOLGATE_CLUSTER_DIR:-}}"
[ -n "$DIR" ] && [ -d "$DIR" ] || exit 0
for p in controller-manager apiserver etcd; do
  if [ -f "$DIR/$p.pid" ]; then
    pid="$(cat "$DIR/$p.pid")"
    kill "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
done
rm -rf "$DIR"
