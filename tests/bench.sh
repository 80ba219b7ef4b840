#!/usr/bin/env bash
# The benches that need real servers (the operator's on the test cluster's node), run with
# everything tests/run.sh sets up: e.g. `tests/bench.sh -p toolgate-operator --bench node`.
# Arguments are passed to `cargo bench`. Benches print figures; none asserts a time.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
log() { echo "tests/bench.sh: $*" >&2; }

. tests/servers.sh

cargo bench --locked "$@"
