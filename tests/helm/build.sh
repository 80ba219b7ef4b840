#!/usr/bin/env bash
# Build helm for the chart's tests and the RBAC the operator suites install: once, from its Go
# module, cached under ~/.cache/toolgate/helm/<version>.
#
#   eval "$(tests/helm/build.sh)"   # prints: export TOOLGATE_HELM=...
set -euo pipefail
HELM_VERSION=v3.22.0
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
HELM="$CACHE/helm/$HELM_VERSION/bin/helm"
if [ ! -x "$HELM" ]; then
  command -v go >/dev/null || { echo "tests/helm/build.sh: Go is required to build helm" >&2; exit 1; }
  echo "tests/helm/build.sh: building helm $HELM_VERSION with go (once, a few minutes)" >&2
  mkdir -p "$(dirname "$HELM")"
  (cd "$(mktemp -d)" && GOBIN="$(dirname "$HELM")" GOFLAGS=-mod=mod \
     go install -trimpath -ldflags '-s -w' "helm.sh/helm/v3/cmd/helm@$HELM_VERSION") >&2
fi
echo "export TOOLGATE_HELM='$HELM'"
