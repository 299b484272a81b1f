"""Entry point of the `gpuctl` command: argument parsing and exit codes, nothing else."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gpuctl.cli import (
    completion,
    driver_command,
    node_inspect,
    nodes_command,
    preflight_command,
    rollout_command,
    support_bundle,
    version_command,
)
from gpuctl.cli.errors import CommandError
from gpuctl.cli.help_format import lay_out_help
from gpuctl.common.build_version import gpuctl_version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuctl",
        description=(
            "Install, upgrade and remove the out-of-tree Intel xe driver across a Kubernetes "
            "fleet, safely. Inspect nodes and follow rollouts."
        ),
    )
    parser.add_argument("--version", action="version", version=f"gpuctl {gpuctl_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    node = commands.add_parser("node", help="inspect GPU nodes", description="Inspect GPU nodes.")
    node_commands = node.add_subparsers(title="commands", metavar="COMMAND", required=True)
    node_inspect.add_parser(node_commands)
    nodes_command.add_parser(commands)
    rollout_command.add_parser(commands)
    driver_command.add_parser(commands)
    preflight_command.add_parser(commands)
    version_command.add_parser(commands)
    support_bundle.add_parser(commands)
    completion.add_parser(commands)
    parser.set_defaults(root_parser=parser)  # `gpuctl completion` walks the whole tree
    lay_out_help(parser)
    return parser


def command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the deepest command `argv` names (`gpuctl rollout status` -> status's)."""
    current = parser
    for token in argv:
        commands = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not commands:
            break
        if token in commands[0].choices:
            current = commands[0].choices[token]
    return current


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # As kubectl: an unknown flag is answered with the command's own usage, not gpuctl's.
        command_parser(parser, words).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        code: int = args.run(args)
    except CommandError as error:
        sys.stderr.write(f"gpuctl: {error}\n")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gpuctl ... | head`: the reader went away; not an error worth a traceback. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
