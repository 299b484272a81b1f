"""The `*.conf` files kmod (modprobe.d) and systemd (modules-load.d) read from drop-in
directories, and where each one's text lives on the host.

Both tools take each file name once, from the first directory that has it: an earlier
directory's file hides a later one's of the same name, even an empty one (the way to turn a
distribution's file off), and read the chosen files in name order. What kmod skips
(libkmod-config.c `conf_files_filter_out`) takes no name: a name starting with `.`, one not
ending in `.conf`, a directory, and an entry that cannot be stat'ed (a dangling link). A link
to /dev/null is an empty file (systemd calls it masked).

Links are followed under the host root (agent/host_symlinks.py). A file whose link leads out
of the paths the agent reads (agent/host_paths.py) cannot be judged from what its DaemonSet
sees: an OSError, so the caller reports unknown rather than guess.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from agent.host_paths import is_read_path
from agent.host_symlinks import resolve_in_root
from agent.hostfs import HostFiles

DEV_NULL = "dev/null"


@dataclass(frozen=True, slots=True)
class ConfigFile:
    # As the tool names it: "etc/modules-load.d/modules.conf".
    path: str
    # Where its text is on the host, links followed ("etc/modules"); "" for /dev/null.
    target: str


def config_files(files: HostFiles, directories: tuple[str, ...]) -> list[ConfigFile]:
    """The files the tool reads, in the order it reads them. Raises OSError, its filename the
    host-relative path that could not be read."""
    chosen: dict[str, ConfigFile] = {}
    for directory in directories:
        try:
            names = files.list_dir(directory) if files.is_dir(directory) else []
        except OSError as error:
            raise _named(error, directory) from error
        for name in names:
            if name.startswith(".") or not name.endswith(".conf") or name in chosen:
                continue
            path = f"{directory}/{name}"
            try:
                found = _config_file(files, path)
            except OSError as error:
                raise _named(error, path) from error
            if found is not None:
                chosen[name] = found
    return [chosen[name] for name in sorted(chosen)]


def read_config(files: HostFiles, found: ConfigFile) -> str:
    """The file's text ("" for /dev/null). Raises OSError, UnicodeDecodeError."""
    return files.read_text(found.target) if found.target else ""


def _named(error: OSError, relative: str) -> OSError:
    """The same error (its type kept: PermissionError...) naming `relative`."""
    return type(error)(error.errno, error.strerror, relative)


def _config_file(files: HostFiles, path: str) -> ConfigFile | None:
    """The entry as a configuration file; None when the tool skips it (a directory, a
    dangling link)."""
    target = resolve_in_root(files, path)
    if target == DEV_NULL:
        return ConfigFile(path, "")
    if not is_read_path(target):
        raise OSError(errno.EXDEV, f"Links to /{target}, which the agent does not read", path)
    if not files.resolves(target) or files.is_dir(target):
        return None
    return ConfigFile(path, target)
