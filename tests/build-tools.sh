#!/usr/bin/env bash
# Build every Go-built test tool at once, each once and cached under ~/.cache/toolgate: Vault,
# Jaeger, helm, and the test cluster's binaries (Kubernetes and kube-router). tests/run.sh builds
# whichever is missing one after another; .ci/run starts this in the background first, so the
# builds overlap each other's module downloads and links and the cargo builds before the tests.
# Exits non-zero if any build failed, after all of them ended.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
pids=""
CPU_DIR="$(mktemp -d)"
trap 'rm -rf "$CPU_DIR"' EXIT
for build in vault/build.sh jaeger/build.sh helm/build.sh cluster/build.sh; do
  # Each says when it ended, in seconds from the start, and the CPU its processes took (user and
  # system, from `times`): the log is how a slow build is found, and which one to make smaller.
  ( start=$SECONDS; rc=0; "$HERE/$build" >/dev/null || rc=$?
    times >"$CPU_DIR/${build%%/*}"   # a builtin's redirect: the times of this subshell's children
    cpu="$(tail -n 1 "$CPU_DIR/${build%%/*}")"
    echo "tests/build-tools.sh: $build ended after $((SECONDS - start)) s (exit $rc; CPU user/system ${cpu/ / / })" >&2
    exit $rc ) &
  pids="$pids $!:$build"
done
failed=""
for entry in $pids; do
  wait "${entry%%:*}" || failed="$failed ${entry#*:}"
done
if [ -n "$failed" ]; then
  echo "tests/build-tools.sh: failed:$failed" >&2
  exit 1
fi
echo "tests/build-tools.sh: every Go-built test tool is built" >&2
