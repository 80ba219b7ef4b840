//go:build tools

// A wrapper module so `go build` fetches Jaeger at the version pinned in go.mod (a test
// dependency only: the trace collector the OpenTelemetry tests send spans to).
package tools

import _ "github.com/jaegertracing/jaeger/cmd/jaeger"
