#!/usr/bin/env bash
# Build a real trace collector for the OpenTelemetry tests: Jaeger v2 (an OpenTelemetry Collector
# distribution with in-memory storage and a query API), a test dependency only — toolgate links
# none of it. Built once from the github.com/jaegertracing/jaeger Go module pinned in go.mod here
# and cached under ~/.cache/toolgate/jaeger/<version>; the suites start their own on free
# loopback ports (toolgate_testkit::jaeger).
#
#   eval "$(tests/jaeger/build.sh)"   # prints: export TOOLGATE_JAEGER_BIN=...
#
# Why Jaeger rather than a bare collector: its query API hands a trace back as JSON, so a test
# asserts on the spans the collector stored, not on a log it printed.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION="$(awk '/^require github.com\/jaegertracing\/jaeger / {print $3}' "$HERE/go.mod")"
CACHE="${TOOLGATE_CACHE:-$HOME/.cache/toolgate}"
BIN="$CACHE/jaeger/$VERSION/bin/jaeger"
if [ ! -x "$BIN" ]; then
  command -v go >/dev/null || { echo "tests/jaeger/build.sh: Go is required to build Jaeger" >&2; exit 1; }
  echo "tests/jaeger/build.sh: building Jaeger $VERSION (once; ~3 min on 2 cores)" >&2
  mkdir -p "$(dirname "$BIN")"
  (cd "$HERE" && GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' -o "$BIN.partial" \
     github.com/jaegertracing/jaeger/cmd/jaeger) >&2
  mv "$BIN.partial" "$BIN"
fi
echo "export TOOLGATE_JAEGER_BIN='$BIN'"
