"""The package as users get it: typed (mypy --strict on the example agent), built from the
proto this checkout vendors."""

import os
import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT

HERE = pathlib.Path(__file__).resolve().parents[1]


def test_the_vendored_proto_is_the_repositorys():
    assert (HERE / "proto/toolgate/v1/toolgate.proto").read_bytes() == (
        ROOT / "proto/toolgate/v1/toolgate.proto"
    ).read_bytes(), "vendor it again: cp proto/toolgate/v1/toolgate.proto clients/python/proto/toolgate/v1/"


def test_the_example_agent_and_the_package_pass_mypy_strict():
    pytest.importorskip("mypy")
    # No cache written into the checkout.
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", os.devnull,
         "--config-file", str(HERE / "pyproject.toml"), str(ROOT / "examples" / "agent_loop.py")],
        capture_output=True, text=True, cwd=HERE.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # The package as shipped (its generated stubs included), checked where nothing shadows it.
    import shutil
    import tempfile

    import toolgate

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(pathlib.Path(toolgate.__file__).parent, pathlib.Path(tmp) / "toolgate")
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--config-file", str(HERE / "pyproject.toml"),
             "toolgate"],
            capture_output=True, text=True, cwd=tmp,
        )
    assert out.returncode == 0, out.stdout + out.stderr
