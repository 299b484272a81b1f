"""The kernel's DRM texts as a fake host writes them: a debugfs `clients` list and DRM fdinfo.

Apart from the host's builders (clients.py writes them into a root) because the fuzz targets
(bench/fuzz/target_debugfs_clients.py, bench/fuzz/target_fdinfo.py) and the agent's parser
tests print them with no host at all.
"""

from __future__ import annotations

from collections.abc import Sequence

DEBUGFS_DRI = "sys/kernel/debug/dri"
# The header of drm_clients_info by kernel: "pid" (before 6.7), "tgid", "name" (6.15), "id".
DEBUGFS_STYLES = ("pid", "tgid", "name", "id")
_CLIENT_NAME_WIDTH = 64


def debugfs_clients_text(style: str, rows: Sequence[tuple[str, int, int, int]]) -> str:
    """A `clients` file as drm_clients_info prints it; rows are (command, tgid, minor, id)."""
    pid = "pid" if style == "pid" else "tgid"
    header = f"{'command':>20} {pid:>5} {'dev':>3} master a {'uid':>5} {'magic':>10}"
    if style in ("name", "id"):
        header += f" {'name':>{_CLIENT_NAME_WIDTH}}"
    if style == "id":
        header += f" {'id':>20}"
    lines = [header]
    for command, tgid, minor, client_id in rows:
        line = f"{command:>20} {tgid:>5} {minor:>3}   n    y {0:>5} {0:>10}"
        if style in ("name", "id"):
            line += f" {'<unset>':>{_CLIENT_NAME_WIDTH}}"
        if style == "id":
            line += f" {client_id:>20}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def drm_fdinfo(*, pdev: str | None, client_id: int | None, driver: str = "xe") -> str:
    """fdinfo text of a DRM fd as the kernel prints it (omit pdev/client id: older kernels)."""
    lines = ["pos:\t0", "flags:\t02100002", "mnt_id:\t26", "ino:\t1037", f"drm-driver:\t{driver}"]
    if client_id is not None:
        lines.append(f"drm-client-id:\t{client_id}")
    if pdev is not None:
        lines.append(f"drm-pdev:\t{pdev}")
    lines += ["drm-total-system:\t0", "drm-engine-rcs:\t0 ns"]
    return "\n".join(lines) + "\n"
