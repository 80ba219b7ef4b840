#!/usr/bin/env bash
# Build a real Vault for the credential-broker tests (a test dependency only: toolgate ships and
# links none of it; Vault's licence is the BSL). Built once from the github.com/hashicorp/vault Go
# module pinned in go.mod here and cached under ~/.cache/toolgate/vault/<version>-minimal; the suites
# start their own `vault server -dev` on a free loopback port (toolgate_testkit::vault).
#
#   eval "$(tests/vault/build.sh)"   # prints: export TOOLGATE_VAULT_BIN=... TOOLGATE_VAULT_PLUGINS=...
#
# Why v1.21.0 and not later: Vault's go.mod replaces its own sdk and api with in-tree folders that
# module zips leave out, so as a dependency it builds against the published sdk; from v1.14 to
# v1.21.4 the in-tree sdk of every patch release tried had diverged from every published sdk tag
# (compile errors). v1.21.0's matches sdk v0.20.0. The checksum database mirror lacks two plugin
# modules, hence GONOSUMDB for them (go.sum pins what the proxy served).
#
# Built with Vault's own `minimal` build tag: the server with its core engines (kv, transit, pki,
# ssh; token, approle, userpass, cert, jwt auth) and none of the ~20 storage backends and cloud
# plugins the full binary links (AWS, Azure, GCP, OCI, databases...), which were most of the CPU
# of a cold CI run's Go builds. The two engines the suites need beyond those, Kubernetes secrets
# and Kubernetes auth, are HashiCorp's own plugins at the versions Vault v1.21.0 pins, built as
# external plugins into plugins/ beside bin/; `vault server -dev -dev-plugin-dir` registers them
# (toolgate_testkit::vault mounts them at kubernetes/ and auth/kubernetes/, where the built-in
# ones were).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require github.com\/hashicorp\/vault / {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
DIR="$CACHE/vault/$VERSION-minimal"
BIN="$DIR/bin/vault"
PLUGINS="$DIR/plugins"
SECRETS_PLUGIN=github.com/hashicorp/vault-plugin-secrets-kubernetes/cmd/vault-plugin-secrets-kubernetes
AUTH_PLUGIN=github.com/hashicorp/vault-plugin-auth-kubernetes/cmd/vault-plugin-auth-kubernetes
if [ ! -x "$BIN" ] || [ ! -x "$PLUGINS/vault-plugin-secrets-kubernetes" ] || [ ! -x "$PLUGINS/vault-plugin-auth-kubernetes" ]; then
  command -v go >/dev/null || { echo "tests/vault/build.sh: Go is required to build Vault" >&2; exit 1; }
  echo "tests/vault/build.sh: building Vault $VERSION (once; a few minutes on 2 cores)" >&2
  mkdir -p "$(dirname "$BIN")" "$PLUGINS.partial"
  (cd "$HERE" && export GONOSUMDB='github.com/hashicorp/vault-plugin-*' GOFLAGS=-mod=mod &&
     go build -trimpath -tags minimal -ldflags '-s -w' -o "$BIN.partial" github.com/hashicorp/vault &&
     go build -trimpath -ldflags '-s -w' -o "$PLUGINS.partial/" "$SECRETS_PLUGIN" "$AUTH_PLUGIN") >&2
  rm -rf "$PLUGINS"
  mv "$PLUGINS.partial" "$PLUGINS"
  mv "$BIN.partial" "$BIN"
fi
echo "export TOOLGATE_VAULT_BIN='$BIN' TOOLGATE_VAULT_PLUGINS='$PLUGINS'"
