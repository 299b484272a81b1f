"""Whether the node's in-tree `xe` would load by itself at the next boot, and what says so.

A Done node that reboots comes up on whatever loads first. Where the distribution's kernel
ships an in-tree `xe` and nothing stops it, udev loads it for the GPU at boot (by its modalias);
KMM then sees the new boot and runs its loader, whose first act is `modprobe -r xe`, retried
until the device is idle: a GPU daemon or workload started on the in-tree driver in between
loses it. The agent reads what decides this (modprobe.d(5), modules-load.d(5), the kernel
command line) so the rollout, `gpuctl node inspect` and docs/reboots.md can say it:

- no in-tree module file for the running kernel: nothing to autoload;
- `install xe /bin/false` (or any `install xe` command that is not a modprobe of it): no
  modprobe loads xe at all, KMM's own load included: DISABLED, a misconfiguration;
- `module_blacklist=xe` on the kernel command line: the kernel refuses every xe: DISABLED;
- listed in modules-load.d: loaded by name at boot, whatever a blacklist says: AUTOLOADS;
- `blacklist xe` (modprobe.d) or `modprobe.blacklist=xe` (command line): udev's alias loads
  skip it: BLACKLISTED, the safe state;
- otherwise: AUTOLOADS.

Configuration directories are read in modprobe's order (/etc over /run over /usr/lib over
/lib, a file in an earlier one hiding a same-named file in a later one). A file that cannot
be read makes the answer UNKNOWN (with a warning): unknown is never reported as safe.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agent.hostfs import HostFiles
from agent.module_files import MODULE_SUFFIXES, is_directory_name
from agent.warninglog import WarningLog

MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
MODULES_LOAD_DIRS = (
    "etc/modules-load.d",
    "run/modules-load.d",
    "usr/lib/modules-load.d",
    "lib/modules-load.d",
)
CMDLINE = "proc/cmdline"
IN_TREE_DIR = "lib/modules/{release}/kernel/drivers/gpu/drm/{module}"


class Autoload(enum.Enum):
    UNKNOWN = "UNKNOWN"
    # The kernel has no in-tree module of that name: nothing loads by itself.
    NO_IN_TREE_MODULE = "NO_IN_TREE_MODULE"
    # Blacklisted: udev's alias loads at boot skip it.
    BLACKLISTED = "BLACKLISTED"
    # Loads at boot: nothing stops udev, or modules-load.d names it.
    AUTOLOADS = "AUTOLOADS"
    # No load works at all (an `install` override, `module_blacklist=`): KMM's neither.
    DISABLED = "DISABLED"


@dataclass(frozen=True, slots=True)
class AutoloadFacts:
    state: Autoload
    # Where each line that decided it is ("/etc/modprobe.d/xe.conf:3: blacklist xe").
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConfigLine:
    where: str  # "/etc/modprobe.d/xe.conf:3"
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {' '.join(self.words)}"


def config_files(files: HostFiles, directories: tuple[str, ...]) -> list[str]:
    """The `*.conf` files of `directories` in modprobe's precedence: by name, an earlier
    directory's file hiding a later one's of the same name. Raises OSError."""
    chosen: dict[str, str] = {}
    for directory in directories:
        if not files.is_dir(directory):
            continue
        for name in files.list_dir(directory):
            if name.endswith(".conf"):
                chosen.setdefault(name, f"{directory}/{name}")
    return [chosen[name] for name in sorted(chosen)]


def config_lines(text: str, where: str) -> list[ConfigLine]:
    """The lines of a modprobe.d / modules-load.d file: comments dropped, `\\` continued."""
    lines: list[ConfigLine] = []
    pending = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = pending + raw
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        words = tuple(line.split("#", 1)[0].split())
        if words:
            lines.append(ConfigLine(f"/{where}:{number}", words))
    return lines


def _same_module(name: str, module: str) -> bool:
    """modprobe treats - and _ alike in module names."""
    return name.replace("-", "_") == module.replace("-", "_")


def _about(line: ConfigLine, keyword: str, module: str) -> bool:
    """`line` is `<keyword> <module> ...`."""
    words = line.words
    return words[0] == keyword and len(words) >= 2 and _same_module(words[1], module)


def _cmdline_lists(params: list[str], key: str, module: str) -> str:
    """The `key=a,b,...` parameter naming `module` ("" for none)."""
    for param in params:
        name, _, value = param.partition("=")
        if name == key and any(_same_module(m, module) for m in value.split(",")):
            return param
    return ""


def judge_autoload(
    module: str,
    *,
    in_tree: bool,
    modprobe: list[ConfigLine],
    modules_load: list[ConfigLine],
    cmdline: str,
) -> AutoloadFacts:
    """The verdict on these facts (pure)."""
    if not in_tree:
        return AutoloadFacts(Autoload.NO_IN_TREE_MODULE)
    params = cmdline.split()
    refused = _cmdline_lists(params, "module_blacklist", module)
    if refused:
        return AutoloadFacts(Autoload.DISABLED, (f"/proc/cmdline: {refused}",))
    for line in modprobe:
        if _about(line, "install", module) and "modprobe" not in " ".join(line.words[2:]):
            return AutoloadFacts(Autoload.DISABLED, (str(line),))
    by_name = [
        str(line)
        for line in modules_load
        if len(line.words) == 1 and _same_module(line.words[0], module)
    ]
    if by_name:
        return AutoloadFacts(Autoload.AUTOLOADS, tuple(by_name))
    blacklists = [str(line) for line in modprobe if _about(line, "blacklist", module)]
    listed = _cmdline_lists(params, "modprobe.blacklist", module)
    if listed:
        blacklists.append(f"/proc/cmdline: {listed}")
    if blacklists:
        return AutoloadFacts(Autoload.BLACKLISTED, tuple(blacklists))
    return AutoloadFacts(Autoload.AUTOLOADS)


def in_tree_module_present(files: HostFiles, release: str, module: str) -> bool:
    directory = IN_TREE_DIR.format(release=release, module=module)
    return any(files.exists(f"{directory}/{module}{suffix}") for suffix in MODULE_SUFFIXES)


def read_autoload(files: HostFiles, release: str, module: str, log: WarningLog) -> AutoloadFacts:
    """Whether `module`'s in-tree build would load by itself at the next boot of this node."""
    if not is_directory_name(release):
        return AutoloadFacts(Autoload.UNKNOWN)  # the release's own warning says why
    try:
        present = in_tree_module_present(files, release, module)
    except OSError as error:
        log.add_error(IN_TREE_DIR.format(release=release, module=module), error)
        return AutoloadFacts(Autoload.UNKNOWN)
    if not present:
        return AutoloadFacts(Autoload.NO_IN_TREE_MODULE)
    modprobe = _read_lines(files, MODPROBE_DIRS, log)
    modules_load = _read_lines(files, MODULES_LOAD_DIRS, log)
    cmdline = _read_text(files, CMDLINE, log)
    if modprobe is None or modules_load is None or cmdline is None:
        return AutoloadFacts(Autoload.UNKNOWN)
    return judge_autoload(
        module, in_tree=True, modprobe=modprobe, modules_load=modules_load, cmdline=cmdline
    )


def _read_text(files: HostFiles, path: str, log: WarningLog) -> str | None:
    try:
        return files.read_text(path)
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(path, error)
        return None


def _read_lines(
    files: HostFiles, directories: tuple[str, ...], log: WarningLog
) -> list[ConfigLine] | None:
    """Every line of the directories' config files; None (with a warning) when one cannot be
    listed or read."""
    try:
        paths = config_files(files, directories)
    except OSError as error:
        log.add_error(directories[0].rsplit("/", 1)[-1], error)
        return None
    lines: list[ConfigLine] = []
    for path in paths:
        text = _read_text(files, path, log)
        if text is None:
            return None
        lines += config_lines(text, path)
    return lines
