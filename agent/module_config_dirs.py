"""Where kmod and systemd read module configuration, relative to the host root (constants).

- modprobe.d(5): kmod's `default_config_paths` (libkmod/libkmod.c): /etc, /run,
  /usr/local/lib (kmod >= 29), /usr/lib (its DISTCONFDIR), /lib, in that order of precedence.
- modules-load.d(5): systemd-modules-load's CONF_PATHS: /etc, /run, /usr/local/lib, /usr/lib,
  and /lib where systemd was built for a split /usr.
- Debian and Ubuntu ship `/etc/modules-load.d/modules.conf` as a symlink `-> ../modules`, so
  their `/etc/modules` is a modules-load.d file too.

agent/host_paths.py mounts them; agent/config_files.py lists the files the tools would read.
"""

from __future__ import annotations

MODPROBE_DIRS = (
    "etc/modprobe.d",
    "run/modprobe.d",
    "usr/local/lib/modprobe.d",
    "usr/lib/modprobe.d",
    "lib/modprobe.d",
)
MODULES_LOAD_DIRS = (
    "etc/modules-load.d",
    "run/modules-load.d",
    "usr/local/lib/modules-load.d",
    "usr/lib/modules-load.d",
    "lib/modules-load.d",
)
# The target of Debian's /etc/modules-load.d/modules.conf link: a file, not a directory.
DEBIAN_MODULES_FILE = "etc/modules"
