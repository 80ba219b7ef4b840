"""Generate the toolgate.v1 stubs from the repository's proto file whenever the package is built
(metadata included: setuptools looks for `toolgate.v1` before it builds anything)."""

import pathlib

from setuptools import setup

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"


def generate_stubs():
    from grpc_tools import protoc

    proto = PROTO_ROOT / "toolgate" / "v1" / "toolgate.proto"
    if not proto.is_file():
        raise SystemExit(f"{proto}: the proto file is missing; build from a toolgate checkout")
    (HERE / "toolgate" / "v1").mkdir(parents=True, exist_ok=True)
    (HERE / "toolgate" / "v1" / "__init__.py").write_text('"""Generated from proto/toolgate/v1 at build time."""\n')
    code = protoc.main(
        ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={HERE}", f"--grpc_python_out={HERE}", str(proto)]
    )
    if code != 0:
        raise SystemExit(f"protoc failed on {proto} (exit {code})")


generate_stubs()
setup()
