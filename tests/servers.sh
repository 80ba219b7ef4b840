# Sourced by tests/run.sh and tests/bench.sh (from the repository's root): what the suites and
# the benches that need real servers find in place — everything installed rather than built,
# helm, Vault, the trace collector, and the one-node cluster (stopped when the sourcing script
# exits). Exports the TOOLGATE_* variables they read.

# Everything installed rather than built (tests/install.sh: moto, etcd, bubblewrap, the MCP
# servers and SDK, the node's runtime), once; found in place on later runs.
eval "$(tests/install.sh)"

# helm, for the chart's tests and the RBAC the operator suites install (built once, cached).
eval "$(tests/helm/build.sh)"

# A real Vault for the credential-broker suites (built once from its Go module, cached; each
# suite starts its own dev server on a free loopback port).
eval "$(tests/vault/build.sh)"
# A real trace collector for the OpenTelemetry suites (each starts its own on free ports).
eval "$(tests/jaeger/build.sh)"

CLUSTER="$(tests/cluster/up.sh)"
eval "$CLUSTER"
trap 'tests/cluster/down.sh "$TOOLGATE_CLUSTER_DIR"' EXIT

