"""The ``modprobe`` of a simulated node: kmod's command line, exit statuses and words, over the
node's fake kernel (``kernel``), recording every attempt at the kernel boundary (``record``).

KMM's real ``worker`` binary runs it inside the worker Pod (``containers``) exactly as it runs
kmod's: ``modprobe -vd /tmp/opt xe k=v`` to load from the image's files, ``modprobe -rvd
/tmp/opt xe`` to unload, ``modprobe -rv xe`` to take the in-tree module off first. What kmod
does, it does:

- load: the module file is looked up in ``<dir>/lib/modules/<kernel>/modules.dep``; missing,
  ``FATAL: Module xe not found in directory …`` (exit 1); already live, nothing happens (exit
  0); else its ``pre:`` soft dependencies (``/etc/modprobe.d/*.conf``), then the module.
- remove: a module that is not live is skipped (exit 0); one in use fails with ``FATAL: Module
  xe is in use.`` (exit 1); else it goes, then its ``pre:`` soft dependencies.

The node comes from the environment the kubelet gives the container: ``GPUCTL_KUBELET_ROOT``
(the node's fake host root), ``GPUCTL_KUBELET_KERNEL`` (its ``uname -r``),
``GPUCTL_KUBELET_RECORD``, ``GPUCTL_KUBELET_NODE`` and ``GPUCTL_KUBELET_POD``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.modinfo import elf_section, parse_modinfo
from testbed.harness.kubelet import kernel
from testbed.harness.kubelet.record import LOAD, UNLOAD, KernelCall, append

SOFTDEP_DIR = Path("/etc/modprobe.d")


class UsageError(ValueError):
    """An option kmod would reject, or one this stand-in does not know."""


@dataclass
class Invocation:
    remove: bool = False
    verbose: bool = False
    all_modules: bool = False
    dirname: str = "/"
    words: list[str] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        """The modules named: all words with -a or -r, else the first."""
        if self.remove or self.all_modules:
            return self.words
        return self.words[:1]

    @property
    def parameters(self) -> dict[str, str]:
        if self.remove or self.all_modules:
            return {}
        pairs = (word.partition("=") for word in self.words[1:])
        return {key: value for key, _, value in pairs}


_FLAGS = {"r": "remove", "v": "verbose", "a": "all_modules", "q": None}
_LONG = {"--remove": "remove", "--verbose": "verbose", "--all": "all_modules", "--quiet": None}


def parse(argv: Sequence[str]) -> Invocation:
    """kmod's getopt: bundled short flags (``-rvd DIR``), ``--dirname=DIR``, then words."""
    invocation = Invocation()
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg.startswith("--dirname"):
            invocation.dirname = arg.partition("=")[2] or args.pop(0)
        elif arg in _LONG:
            if _LONG[arg]:
                setattr(invocation, str(_LONG[arg]), True)
        elif arg.startswith("--"):
            raise UsageError(f"unrecognized option '{arg}'")
        else:
            letters = arg[1:]
            for index, letter in enumerate(letters):
                if letter == "d":
                    rest = letters[index + 1 :]
                    invocation.dirname = rest or args.pop(0)
                    break
                if letter not in _FLAGS:
                    raise UsageError(f"invalid option -- '{letter}'")
                if _FLAGS[letter]:
                    setattr(invocation, str(_FLAGS[letter]), True)
    invocation.words = args
    if not invocation.words:
        raise UsageError("missing module name")
    return invocation


def soft_dependencies(module: str, config_dir: Path = SOFTDEP_DIR) -> list[str]:
    """The ``pre:`` modules of ``softdep <module> pre: …`` lines in ``config_dir``."""
    found: list[str] = []
    for conf in sorted(config_dir.glob("*.conf")) if config_dir.is_dir() else []:
        for line in conf.read_text().splitlines():
            words = line.split()
            if words[:2] == ["softdep", module] and "pre:" in words:
                for word in words[words.index("pre:") + 1 :]:
                    if word.endswith(":"):
                        break
                    found.append(word)
    return found


@dataclass(frozen=True)
class Node:
    root: Path
    kernel_release: str
    record: Path
    name: str
    pod: str

    @classmethod
    def from_environment(cls, environ: dict[str, str]) -> Node:
        return cls(
            Path(environ["GPUCTL_KUBELET_ROOT"]),
            environ["GPUCTL_KUBELET_KERNEL"],
            Path(environ["GPUCTL_KUBELET_RECORD"]),
            environ["GPUCTL_KUBELET_NODE"],
            environ["GPUCTL_KUBELET_POD"],
        )

    def call(self, action: str, modules: Sequence[str], **fields: object) -> KernelCall:
        values = {"busy": (), "succeeded": True, "error": "", "version": "", **fields}
        return KernelCall(
            node=self.name,
            pod=self.pod,
            action=action,
            modules=tuple(modules),
            at=time.time(),
            **values,  # type: ignore[arg-type]
        )


def _module_file(dirname: str, kernel_release: str, module: str) -> Path | None:
    base = Path(dirname) / "lib/modules" / kernel_release
    dep = base / "modules.dep"
    if not dep.is_file():
        return None
    for line in dep.read_text().splitlines():
        relative = line.partition(":")[0].strip()
        if Path(relative).name.split(".ko")[0].replace("-", "_") == module:
            return base / relative
    return None


def _live_version(node: Node, module: str) -> str:
    path = node.root / "sys/module" / module / "version"
    return path.read_text().strip() if path.is_file() else ""


def remove(node: Node, invocation: Invocation, out: list[str]) -> int:
    modules = [m.replace("-", "_") for m in invocation.modules]
    ordered = [x for m in modules for x in (m, *soft_dependencies(m))]
    live = [m for m in ordered if kernel.is_live(node.root, m)]
    if not live:
        return 0
    busy = tuple(r for m in live for r in kernel.busy_reasons(node.root, m))
    version = _live_version(node, live[0])
    for module in live:
        try:
            kernel.remove(node.root, module)
        except kernel.ModuleInUseError:
            error = f"modprobe: FATAL: Module {module} is in use."
            out.append(error)
            append(
                node.record,
                node.call(UNLOAD, live, busy=busy, succeeded=False, error=error, version=version),
            )
            return 1
        if invocation.verbose:
            out.append(f"rmmod {module}")
    append(node.record, node.call(UNLOAD, live, busy=busy, version=version))
    return 0


def load(node: Node, invocation: Invocation, out: list[str]) -> int:
    module = invocation.modules[0].replace("-", "_")
    for name in [*soft_dependencies(module), module]:
        if kernel.is_live(node.root, name):
            continue
        path = _module_file(invocation.dirname, node.kernel_release, name)
        if path is None:
            where = Path(invocation.dirname) / "lib/modules" / node.kernel_release
            error = f"modprobe: FATAL: Module {name} not found in directory {where}"
            out.append(error)
            append(node.record, node.call(LOAD, [name], succeeded=False, error=error))
            return 1
        image = path.read_bytes()
        modinfo = parse_modinfo(elf_section(image, ".modinfo"))
        parameters = invocation.parameters if name == module else {}
        if invocation.verbose:
            out.append(f"insmod {path} {' '.join(f'{k}={v}' for k, v in parameters.items())}")
        version = (modinfo.get("version") or [""])[0]
        try:
            kernel.load(node.root, name, modinfo, parameters, image=image)
        except kernel.LoadRefusedError as refused:
            error = f"modprobe: ERROR: could not insert '{name}': {refused}"
            out.append(error)
            append(
                node.record, node.call(LOAD, [name], succeeded=False, error=error, version=version)
            )
            return 1
        append(node.record, node.call(LOAD, [name], version=version))
    return 0


def main(argv: Sequence[str], environ: dict[str, str]) -> int:
    out: list[str] = []
    try:
        invocation = parse(argv)
    except UsageError as error:
        print(f"modprobe: ERROR: {error}", file=sys.stderr)
        return 1
    node = Node.from_environment(environ)
    status = (remove if invocation.remove else load)(node, invocation, out)
    for line in out:
        print(line, file=sys.stderr if line.startswith("modprobe:") else sys.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], dict(os.environ)))
