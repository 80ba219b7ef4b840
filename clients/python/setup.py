"""Build the toolgate package from this folder alone: the gRPC stubs (and their type stubs) are
generated from the proto vendored in `proto/` into the build, never into the source tree."""

import pathlib
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE / "proto"
PROTO = PROTO_ROOT / "toolgate" / "v1" / "toolgate.proto"
# In a toolgate checkout, the repository's proto is the source of the vendored copy.
REPOSITORY_PROTO = HERE.parent.parent / "proto" / "toolgate" / "v1" / "toolgate.proto"


def check_vendored():
    if not PROTO.is_file():
        raise SystemExit(f"{PROTO}: the vendored proto file is missing")
    if REPOSITORY_PROTO.is_file() and REPOSITORY_PROTO.read_bytes() != PROTO.read_bytes():
        raise SystemExit(
            f"{PROTO} differs from {REPOSITORY_PROTO}; vendor it again: "
            "cp proto/toolgate/v1/toolgate.proto clients/python/proto/toolgate/v1/"
        )


def plugin(name):
    """A protoc plugin installed beside this Python (a build environment's scripts) or on PATH."""
    beside = pathlib.Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name} is missing: install mypy-protobuf (a build requirement)")
    return found


def generate_stubs(out):
    from grpc_tools import protoc

    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            f"--mypy_out={out}",
            f"--mypy_grpc_out={out}",
            str(PROTO),
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed on {PROTO} (exit {code})")


class build_py(_build_py):
    """The package's modules, then the stubs generated beside them in the build."""

    def run(self):
        check_vendored()
        super().run()
        generate_stubs(pathlib.Path(self.build_lib))


setup(cmdclass={"build_py": build_py})
