#!/usr/bin/env bash
# The test command (README): installs the real servers the suites start themselves — moto as the
# S3-compatible artifact store — into a cached virtualenv, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
VENV="$CACHE/venv"
if [ ! -x "$VENV/bin/moto_server" ]; then
  echo "tests/run.sh: installing moto[server] into $VENV (once)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'moto[server]==5.*'
fi
export PATH="$VENV/bin:$PATH"
moto_server --help >/dev/null 2>&1 || { echo "tests/run.sh: moto_server does not start" >&2; exit 1; }

exec cargo test --workspace --locked "$@"
