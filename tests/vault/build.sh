#!/usr/bin/env bash
# Build a real Vault for the credential-broker tests (a test dependency only: toolgate ships and
# links none of it; Vault's licence is the BSL). Built once from the github.com/hashicorp/vault Go
# module pinned in go.mod here and cached under ~/.cache/toolgate/vault/<version>; the suites
# start their own `vault server -dev` on a free loopback port (toolgate_testkit::vault).
#
#   eval "$(tests/vault/build.sh)"   # prints: export TOOLGATE_VAULT_BIN=...
#
# Why v1.21.0 and not later: Vault's go.mod replaces its own sdk and api with in-tree folders that
# module zips leave out, so as a dependency it builds against the published sdk; from v1.14 to
# v1.21.4 the in-tree sdk of every patch release tried had diverged from every published sdk tag
# (compile errors). v1.21.0's matches sdk v0.20.0. The checksum database mirror lacks two plugin
# modules, hence GONOSUMDB for them (go.sum pins what the proxy served).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require github.com\/hashicorp\/vault / {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
BIN="$CACHE/vault/$VERSION/bin/vault"
if [ ! -x "$BIN" ]; then
  command -v go >/dev/null || { echo "tests/vault/build.sh: Go is required to build Vault" >&2; exit 1; }
  echo "tests/vault/build.sh: building Vault $VERSION (once; ~8 min on 2 cores)" >&2
  mkdir -p "$(dirname "$BIN")"
  (cd "$HERE" && GONOSUMDB='github.com/hashicorp/vault-plugin-*' GOFLAGS=-mod=mod \
     go build -trimpath -ldflags '-s -w' -o "$BIN.partial" github.com/hashicorp/vault) >&2
  mv "$BIN.partial" "$BIN"
fi
echo "export TOOLGATE_VAULT_BIN='$BIN'"
