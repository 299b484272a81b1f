"""gpuctl/api/ from proto/: messages, gRPC stubs and their typing stubs, by protoc.

The .proto path mirrors the package: proto/gpuctl/api/v1alpha1/<name>.proto -> gpuctl.api.v1alpha1.
Every file under gpuctl/ with a generated suffix is claimed, so a stub whose .proto was removed
is found too.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

from hack.generators import Generator, GeneratorError, Output

GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def _generated_files(root: Path) -> set[Path]:
    return {
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
    }


def _run_protoc(proto_root: Path, out_dir: Path) -> None:
    include = Path(grpc_tools.__file__).parent / "_proto"
    # mypy-protobuf's protoc plugins are scripts beside this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    args = [
        "protoc",
        f"-I{proto_root}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out=quiet:{out_dir}",  # quiet: no "Writing mypy to ..." line per file
        f"--mypy_grpc_out=quiet:{out_dir}",
        *(str(p.relative_to(proto_root)) for p in sorted(proto_root.rglob("*.proto"))),
    ]
    if protoc.main(args) != 0:
        raise GeneratorError(f"protoc failed on {proto_root}")


def outputs(repo: Path) -> list[Output]:
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(tmp)
        _run_protoc(repo / "proto", out_dir)
        return [Output(p, (out_dir / p).read_bytes()) for p in sorted(_generated_files(out_dir))]


def claimed(repo: Path) -> set[Path]:
    return {Path("gpuctl") / p for p in _generated_files(repo / "gpuctl")}


GENERATOR = Generator(source="proto/", outputs=outputs, claimed=claimed)
