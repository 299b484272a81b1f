"""One fuzzing process: `python -m bench.fuzz.run TARGET [libFuzzer flags] [corpus dirs]`.

Imports the target with atheris's instrumentation of gpuctl's own code (agent, coordinator,
gpuctl.common), then hands over to libFuzzer, which exits the process when done.
"""

from __future__ import annotations

import sys

import atheris

from bench.fuzz.targets import TARGETS, fuzz_function, load


def main() -> None:
    name = sys.argv[1]
    if name not in TARGETS:
        sys.exit(f"unknown target {name!r}; one of {', '.join(TARGETS)}")
    with atheris.instrument_imports(include=["agent", "coordinator", "gpuctl"]):
        module = load(name)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], fuzz_function(module))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
