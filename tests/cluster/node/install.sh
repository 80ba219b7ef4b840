#!/usr/bin/env bash
# The test node's runtime from Debian's packages: containerd 1.6, runc 1.1 (crun 1.8 refuses
# these machines' hybrid cgroups), the reference CNI plugins, iptables, ipset and a static C compiler
# for the pause image. Installs what is missing; needs root and apt.
set -euo pipefail
need=""
command -v containerd >/dev/null || need="$need containerd"
command -v runc >/dev/null || need="$need runc"
[ -x /usr/lib/cni/bridge ] || need="$need containernetworking-plugins"
command -v iptables >/dev/null || need="$need iptables"
# kube-router, the NetworkPolicy enforcer, keeps its address sets with the ipset utility.
command -v ipset >/dev/null || need="$need ipset"
command -v nsenter >/dev/null || need="$need util-linux"
command -v ip >/dev/null || need="$need iproute2"
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || need="$need libc6-dev"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "tests/cluster/node/install.sh: installing$need (apt)"
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $need >/dev/null
  else
    echo "tests/cluster/node/install.sh: missing$need (Debian packages); install them as root" >&2
    exit 1
  fi
fi
