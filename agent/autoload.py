"""Whether the node's in-tree `xe` would load by itself at the next boot, and what says so.

A Done node that reboots comes up on whatever loads first. Where the distribution's kernel
ships an in-tree `xe` and nothing stops it, udev loads it for the GPU at boot (by its modalias);
KMM then sees the new boot and runs its loader, whose first act is `modprobe -r xe`, retried
until the device is idle: a GPU daemon or workload started on the in-tree driver in between
loses it. The agent reads what decides this (modprobe.d(5), modules-load.d(5), the kernel
command line) so the rollout, `gpuctl node inspect` and docs/reboots.md can say it:

- no in-tree module file for the running kernel: nothing to autoload;
- xe cannot load at all, KMM's own build included: DISABLED, a misconfiguration. That is
  `nomodeset` on the kernel command line (xe's module init, `xe_check_nomodeset` in
  drivers/gpu/drm/xe/xe_module.c, fails with ENODEV when `drm_firmware_drivers_only()`),
  `module_blacklist=xe` (the kernel refuses the module; the parameter holds one list, the
  last one given), or `install xe /bin/false` (any `install xe` command that is not a
  modprobe of it: no modprobe loads xe);
- `blacklist xe` (modprobe.d) or `modprobe.blacklist=xe` (command line): udev's alias loads
  skip it, and so does systemd-modules-load, which loads what modules-load.d names with
  KMOD_PROBE_APPLY_BLACKLIST (src/shared/module-util.c): BLACKLISTED, the safe state;
- listed in modules-load.d (or `modules-load=` on the command line): loaded by name at boot:
  AUTOLOADS, naming where;
- otherwise: AUTOLOADS (udev).

Configuration files are chosen as kmod and systemd choose them (agent/config_files.py: an
earlier directory's file hides a same-named later one) and read as they read them: modprobe.d
by kmod's rules (libkmod-config.c `kmod_config_parse` over shared/util.c `freadline_wrapped`:
a `\\` at the end of a line joins the next one to it with nothing between, a `\\` before
any other character is dropped, `#` starts a comment only as a line's first character, words
are split at spaces and tabs), modules-load.d by systemd-modules-load's (each line stripped is
one module name; empty lines and lines starting with `#` or `;` are skipped). A file that
cannot be read makes the answer UNKNOWN (with a warning): unknown is never reported as safe.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from agent.config_files import config_files, read_config
from agent.hostfs import HostFiles
from agent.kernel_cmdline import KernelParam, kernel_params, last_value, setup_flag
from agent.module_config_dirs import MODPROBE_DIRS, MODULES_LOAD_DIRS
from agent.module_files import MODULE_SUFFIXES, is_directory_name
from agent.warninglog import WarningLog

__all__ = ["MODPROBE_DIRS", "MODULES_LOAD_DIRS", "Autoload", "AutoloadFacts", "read_autoload"]

CMDLINE = "proc/cmdline"
IN_TREE_DIR = "lib/modules/{release}/kernel/drivers/gpu/drm/{module}"
# DRM drivers whose module init refuses to load under `nomodeset`.
REFUSED_BY_NOMODESET = frozenset({"xe"})
_KMOD_SPACES = re.compile(r"[ \t]+")


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


def kmod_lines(text: str, where: str) -> list[ConfigLine]:
    """The lines of a modprobe.d file as kmod reads them; each named by the physical line it
    ends on, as kmod counts."""
    lines: list[ConfigLine] = []
    logical: list[str] = []
    number = 0
    chars = iter(text)
    for char in chars:
        if char == "\n":
            number += 1
            _add_kmod_line(lines, "".join(logical), f"/{where}:{number}")
            logical = []
        elif char == "\\":
            following = next(chars, "")
            if following == "\n":
                number += 1
            else:
                logical.append(following)
        else:
            logical.append(char)
    if logical:
        _add_kmod_line(lines, "".join(logical), f"/{where}:{number + 1}")
    return lines


def _add_kmod_line(lines: list[ConfigLine], line: str, where: str) -> None:
    if not line or line.startswith("#"):
        return
    words = tuple(word for word in _KMOD_SPACES.split(line) if word)
    if words:
        lines.append(ConfigLine(where, words))


def modules_load_lines(text: str, where: str) -> list[ConfigLine]:
    """The module names of a modules-load.d file as systemd-modules-load reads them."""
    lines: list[ConfigLine] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if line and line[0] not in "#;":
            lines.append(ConfigLine(f"/{where}:{number}", (line,)))
    return lines


def _same_module(name: str, module: str) -> bool:
    """modprobe treats - and _ alike in module names."""
    return name.replace("-", "_") == module.replace("-", "_")


def _about(line: ConfigLine, keyword: str, module: str) -> bool:
    """`line` is `<keyword> <module> ...`."""
    words = line.words
    return words[0] == keyword and len(words) >= 2 and _same_module(words[1], module)


def _install_loads(line: ConfigLine) -> bool:
    """An `install` command that runs modprobe (a wrapper that still loads the module), up to
    the shell comment kmod passes along with it."""
    command = []
    for word in line.words[2:]:
        if word.startswith("#"):
            break
        command.append(word)
    return "modprobe" in " ".join(command)


def _cmdline_lists(params: list[KernelParam], key: str, module: str) -> list[str]:
    """Every `key=a,b,...` word naming `module` (kmod and systemd add up every one)."""
    return [
        f"/proc/cmdline: {param}"
        for param in params
        if param.name == key
        and any(_same_module(m, module) for m in (param.value or "").split(","))
    ]


def _cannot_load(module: str, params: list[KernelParam], modprobe: list[ConfigLine]) -> list[str]:
    """What stops every load of `module`, KMM's included."""
    found = []
    nomodeset = setup_flag(params, "nomodeset")
    if nomodeset is not None and module in REFUSED_BY_NOMODESET:
        found.append(f"/proc/cmdline: {nomodeset}")
    # The kernel compares the list's names with the module's own, which has underscores.
    refused = last_value(params, "module_blacklist")
    if refused is not None and module.replace("-", "_") in (refused.value or "").split(","):
        found.append(f"/proc/cmdline: {refused}")
    found += [
        str(line)
        for line in modprobe
        if _about(line, "install", module) and not _install_loads(line)
    ]
    return found


def judge_autoload(
    module: str,
    *,
    in_tree: bool,
    modprobe: list[ConfigLine],
    modules_load: list[ConfigLine],
    cmdline: str,
) -> AutoloadFacts:
    """The verdict on these facts (pure). What stops every load is told first, whether the
    kernel ships an in-tree module or not: it stops KMM's out-of-tree build just the same."""
    params = kernel_params(cmdline)
    disabled = _cannot_load(module, params, modprobe)
    if disabled:
        return AutoloadFacts(Autoload.DISABLED, tuple(disabled))
    if not in_tree:
        return AutoloadFacts(Autoload.NO_IN_TREE_MODULE)
    blacklists = [str(line) for line in modprobe if _about(line, "blacklist", module)]
    blacklists += _cmdline_lists(params, "modprobe.blacklist", module)
    if blacklists:
        return AutoloadFacts(Autoload.BLACKLISTED, tuple(blacklists))
    by_name = [
        str(line)
        for line in modules_load
        if len(line.words) == 1 and _same_module(line.words[0], module)
    ]
    by_name += _cmdline_lists(params, "modules-load", module)
    by_name += _cmdline_lists(params, "rd.modules-load", module)
    return AutoloadFacts(Autoload.AUTOLOADS, tuple(by_name))


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
    modprobe = _read_lines(files, MODPROBE_DIRS, kmod_lines, log)
    modules_load = _read_lines(files, MODULES_LOAD_DIRS, modules_load_lines, log)
    cmdline = _read_text(files, CMDLINE, log)
    if modprobe is None or modules_load is None or cmdline is None:
        return AutoloadFacts(Autoload.UNKNOWN)
    return judge_autoload(
        module, in_tree=present, modprobe=modprobe, modules_load=modules_load, cmdline=cmdline
    )


def _read_text(files: HostFiles, path: str, log: WarningLog) -> str | None:
    try:
        return files.read_text(path)
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(path, error)
        return None


def _read_lines(
    files: HostFiles,
    directories: tuple[str, ...],
    parse: Callable[[str, str], list[ConfigLine]],
    log: WarningLog,
) -> list[ConfigLine] | None:
    """Every line of the directories' config files; None (with a warning) when one cannot be
    listed or read."""
    try:
        found = config_files(files, directories)
    except OSError as error:
        log.add_error(error.filename or directories[0], error)
        return None
    lines: list[ConfigLine] = []
    for config in found:
        try:
            text = read_config(files, config)
        except (OSError, UnicodeDecodeError) as error:
            log.add_error(config.target or config.path, error)
            return None
        lines += parse(text, config.path)
    return lines
