"""A real `toolgate local` for the client's tests: the example manifests plus a tool that always
needs an approval, two tokens (the fixer agent, reviewer alice), a workspace with one file."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
AGENT = "agent-token-0123456789abcdef"
REVIEWER = "reviewer-token-0123456789abcdef"

GATED = """apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {name: test.gated, namespace: team-a}
spec:
  canonicalName: test.gated
  version: "1.0.0"
  source: {type: cli, packageName: coreutils}
  description:
    summary: Echo a message after approval.
    useWhen: ["testing toolgate"]
    doNotUseWhen: ["anything else"]
  intent: {actionTypes: [execute], domains: [test]}
  schemas:
    inputSchema:
      type: object
      additionalProperties: false
      properties:
        msg: {type: string, maxLength: 64}
  effects: {reads: [], writes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: false, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: always, requiredScopes: ["workspace:read"]}
  sandboxPolicyRef: {name: read-only}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: full, maxOutputPreviewTokens: 100}
  execution: {adapter: cli, argv: [echo, "{{msg}}"], timeoutMs: 20000}
  provenance: {trustLevel: first_party}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {name: test.traceparent, namespace: team-a}
spec:
  canonicalName: test.traceparent
  version: "1.0.0"
  source: {type: cli, packageName: coreutils}
  description:
    summary: Print the trace context the call's process was given.
    useWhen: ["testing toolgate"]
    doNotUseWhen: ["anything else"]
  intent: {actionTypes: [execute], domains: [test]}
  schemas:
    inputSchema: {type: object, additionalProperties: false, properties: {}}
  effects: {reads: [], writes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: true, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: never, requiredScopes: ["workspace:read"]}
  sandboxPolicyRef: {name: read-only}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: full, maxOutputPreviewTokens: 100}
  execution: {adapter: cli, argv: [printenv, TRACEPARENT], timeoutMs: 20000}
  provenance: {trustLevel: first_party}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolGrant
metadata: {name: python-tests, namespace: team-a}
spec:
  subjects: [{kind: ServiceAccount, name: fixer, namespace: team-a}]
  tools: {names: [test.gated, test.traceparent]}
  scopes: ["workspace:read"]
"""


def binary() -> str:
    b = os.environ.get("TOOLGATE_BINARY")
    if not b or not os.access(b, os.X_OK):
        pytest.fail("TOOLGATE_BINARY must name the built toolgate binary (tests/run.sh sets it)")
    return b


def start(root, extra=()):
    """`toolgate local` on the example manifests under `root`; its address and process."""
    manifests = root / "manifests"
    shutil.copytree(ROOT / "examples", manifests, ignore=shutil.ignore_patterns("calls", "*.policytest.yaml"))
    (manifests / "python-tests.yaml").write_text(GATED)
    ws = root / "workspace"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "serializer.ts").write_text("export const formatDate = (d: Date) => d.toISOString();\n")
    tokens = root / "tokens.yaml"
    tokens.write_text(
        f'- {{token: {AGENT}, principal: "system:serviceaccount:team-a:fixer"}}\n'
        f"- {{token: {REVIEWER}, principal: alice@example.com, approverIn: [team-a]}}\n"
    )
    tokens.chmod(0o600)
    proc = subprocess.Popen(
        [binary(), "local", "--manifests", str(manifests), "--workspace", str(ws),
         "--data", str(root / "data"), "--tokens", str(tokens), "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE, stderr=sys.stderr, text=True,
        env={**os.environ, "RUST_LOG": "warn"},
    )
    line = proc.stdout.readline()
    if "serving toolgate.v1 on " not in line:
        proc.kill()
        pytest.fail(f"toolgate local did not start: {line!r}")
    return line.split("serving toolgate.v1 on ")[1].split(" ")[0], proc


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    addr, proc = start(tmp_path_factory.mktemp("toolgate"))
    yield addr
    stop(proc)


def stop(proc):
    """Stop a server: asked first, killed if it has not gone after a while (a busy machine)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory):
    """A TLS server with a certificate from a test CA; yields (address, CA file)."""
    import trustme

    root = tmp_path_factory.mktemp("toolgate-tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(root / "server.pem"))
    cert.private_key_pem.write_to_path(str(root / "server.key"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    addr, proc = start(
        root,
        ["--tls-cert", str(root / "server.pem"), "--tls-key", str(root / "server.key")],
    )
    yield addr, str(root / "ca.pem")
    stop(proc)


@pytest.fixture(scope="session")
def mtls_server(tmp_path_factory):
    """A TLS server that requires client certificates from a test CA; yields (address, CA file,
    client certificate, client key)."""
    import trustme

    root = tmp_path_factory.mktemp("toolgate-mtls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(str(root / "server.pem"))
    cert.private_key_pem.write_to_path(str(root / "server.key"))
    ca.cert_pem.write_to_path(str(root / "ca.pem"))
    agent = ca.issue_cert("fixer@agents.example")
    agent.cert_chain_pems[0].write_to_path(str(root / "agent.pem"))
    agent.private_key_pem.write_to_path(str(root / "agent.key"))
    addr, proc = start(
        root,
        ["--tls-cert", str(root / "server.pem"), "--tls-key", str(root / "server.key"),
         "--tls-client-ca", str(root / "ca.pem")],
    )
    yield addr, str(root / "ca.pem"), str(root / "agent.pem"), str(root / "agent.key")
    stop(proc)
