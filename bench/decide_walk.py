"""How straight the walk through one rollout decision is: the files a reader follows `decide()`
into, and how often the walk comes back to a file it had already left.

    .venv/bin/python -m bench.decide_walk [--nodes 20] [--files]

The input is bench/rollout_pass.py's fleet, a mid-rollout snapshot with nodes in every step,
Done at the new version and Done at the old one, built into a decision's input as the
coordinator's pass builds it. One `decide()` over it is followed with sys.setprofile: every
call into and return out of a function in this repository's Python files moves the walk to
that function's file (the standard library and the packages installed are stepped over).
The walk is the sequence of files it is in, a file's repeats in a row counted once.

- files entered: how many different files the walk is in;
- returns: how many times it moves into a file it had been in before and left (the length of
  the walk less the files entered);
- the same by stage: a file of gpuctl/rollout's stage sub-packages (input/, place/, step/,
  fleet/, start/, report/) counts as its stage, a module of gpuctl/rollout itself (decide.py,
  decision.py, ...) as itself, any other file as its folder.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from bench.rollout_pass import fleet, pass_input
from gpuctl.rollout.decide import decide

ROOT = Path(__file__).resolve().parent.parent


def walk(call: Callable[[], Any]) -> list[str]:
    """The files, relative to the repository, that a reader of `call()` moves through, in
    order: into each function the first time it is called, and back out of it to its caller;
    a function already read is not read again (the walk stays where it is)."""
    stack: list[str] = []
    files: list[str] = []
    read: set[object] = set()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event not in ("call", "return"):
            return
        path = Path(frame.f_code.co_filename)
        if not path.is_relative_to(ROOT) or frame.f_code.co_filename == __file__:
            return
        if event == "call":
            new = frame.f_code not in read
            read.add(frame.f_code)
            here = str(path.relative_to(ROOT))
            stack.append(here if new or not stack else stack[-1])
        elif stack:
            stack.pop()
        if stack and (not files or files[-1] != stack[-1]):
            files.append(stack[-1])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return files


def stage_of(file: str) -> str:
    """The stage a file of the walk belongs to (see the module's docstring)."""
    parts = file.removesuffix(".py").split("/")
    if parts[:2] == ["gpuctl", "rollout"]:
        return parts[2]
    return "/".join(parts[:-1])


def collapsed(walked: list[str]) -> list[str]:
    """`walked` with a name's repeats in a row counted once."""
    return [name for i, name in enumerate(walked) if i == 0 or walked[i - 1] != name]


def line(what: str, walked: list[str]) -> str:
    entered = len(set(walked))
    return f"{entered} {what} entered, {len(walked) - entered} returns to one already left"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument(
        "--files", action="store_true", help="the stages in order, the files most entered first"
    )
    args = parser.parse_args(argv)
    inp = pass_input(fleet(args.nodes), None, None)
    files = walk(lambda: decide(inp))
    stages = collapsed([stage_of(f) for f in files])
    print(f"decide() over {args.nodes} nodes: {line('files', files)}; {line('stages', stages)}")
    entered = sorted(set(files), key=lambda f: (-files.count(f), f))
    if args.files:
        print("  " + " > ".join(stages))
        for name in entered:
            print(f"  {files.count(name):4}  {name}")


if __name__ == "__main__":
    main()
