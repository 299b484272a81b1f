"""The host paths the agent reads, relative to the host root: what its DaemonSet mounts.

The chart mounts each of these (and nothing else of the host) under `/host`, read-only and,
where the node's runtime supports it, with `recursiveReadOnly` so that the file systems
mounted below them (debugfs, securityfs, efivarfs under /sys) are read-only too. The list is made of
the constants the readers themselves use, so a reader that starts reading somewhere new adds
its path here by adding its constant; `hack/generate.py` writes it into the chart
(`templates/_agent_host_paths.tpl`), and `tests/agent/test_host_paths.py` checks that an
agent which sees only these paths reports every node exactly as one that sees the whole host.

Not here, on purpose: the host's /dev. The agent matches the targets of /proc/<pid>/fd links
("/dev/dri/renderD128") as text and never opens a device node.
"""

from __future__ import annotations

from agent.module_config_dirs import DEBIAN_MODULES_FILE, MODPROBE_DIRS, MODULES_LOAD_DIRS
from agent.next_kernel import DEFAULT_GRUB

SYSFS = "sys"
PROCFS = "proc"
BOOT = "boot"  # installed kernels, GRUB's grubenv, BLS entries
KERNEL_MODULES = "lib/modules"  # module files, modules.dep, in-tree xe, BLS vmlinuz
# The directory of /etc/default/grub rather than the file: a hostPath of a file that does not
# exist (a node without GRUB) would be created as a directory by the container runtime.
GRUB_DEFAULTS_DIR = DEFAULT_GRUB.rsplit("/", 1)[0]

# Every host path the agent reads, in the order the chart mounts them.
AGENT_HOST_PATHS: tuple[str, ...] = (
    SYSFS,
    PROCFS,
    BOOT,
    KERNEL_MODULES,
    GRUB_DEFAULTS_DIR,
    *MODPROBE_DIRS,
    *MODULES_LOAD_DIRS,
    DEBIAN_MODULES_FILE,
)
# Paths every Linux node with loadable modules has: the chart mounts them with hostPath type
# Directory (on a host without one the Pod does not start, and the kubelet says which). The
# other directories are configuration a node may lack; the chart mounts them with
# DirectoryOrCreate, so the kubelet makes an empty one (which configures nothing) rather than
# the Pod never starting.
REQUIRED_HOST_PATHS: tuple[str, ...] = (SYSFS, PROCFS, KERNEL_MODULES)
# Paths that are files, not directories: /etc/modules, which Debian and Ubuntu read through
# their /etc/modules-load.d/modules.conf link (a link into a path not mounted would dangle in
# the agent's container). The chart mounts it with FileOrCreate: on a node without one the
# kubelet makes an empty file, which loads nothing (and only that link reads it).
FILE_HOST_PATHS: tuple[str, ...] = (DEBIAN_MODULES_FILE,)


def is_read_path(relative: str) -> bool:
    """True when `relative` (a host-root-relative path) lies in one of AGENT_HOST_PATHS."""
    return any(relative == top or relative.startswith(top + "/") for top in AGENT_HOST_PATHS)
