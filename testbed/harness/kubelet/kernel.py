"""What a node's kernel does when kmod asks it to load or remove a module, on a fake host root.

A fake host root (testbed/fakehost) is laid out like sysfs and procfs: ``sys/module/<name>``
for a live module, ``sys/bus/pci/devices/<address>`` links into ``sys/devices``, each bound
function's ``driver`` link, ``proc/<pid>/fd/<n>`` links to what a process holds open. This
module changes such a root the way the kernel would, from another process than the test's:

- ``remove``: ``delete_module`` refuses a module that is in use (a refcount, a holder module,
  a process holding one of its devices open: an open DRM file holds the driver's module),
  with EBUSY; otherwise every function bound to it is unbound (a PF's VFs go with it, as the
  driver's remove disables SR-IOV) and ``sys/module/<name>`` goes.
- ``load``: the file's appended signature is checked as the node's kernel checks it
  (``signature_check``: refused, or loaded verified or not); then ``sys/module/<name>``
  appears with the file's ``version`` and ``srcversion``, its parameters, taint ``O``
  (out-of-tree) or ``OE`` (out-of-tree, unverified); if its ``alias`` lines name Intel PCI
  devices (a driver, not a helper module), it probes every Intel display PF no driver holds -
  unless the node's probe of that version fails (``PROBE_FAILS``, a file in the root listing
  versions whose probe fails there). A version listed in ``SURVIVABILITY`` (``<version>
  <Boot|Runtime>`` lines) probes into xe's survivability mode: bound, with its
  ``survivability_mode`` file, as a GPU whose firmware failed; unbinding takes the file
  away. A node whose root holds ``REFUSES_LOADS`` refuses every load with the words it holds
  (whatever the module's signature).

``busy_reasons`` is the oracle's question - would unloading hurt now? - asked at the moment of
every unload attempt. It counts what makes ``remove`` fail and also what does not but still
hurts: enabled VFs (the remove takes them from their VM or their clients).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from testbed.harness.kubelet import signature_check

PCI_DEVICES = "sys/bus/pci/devices"
PCI_DRIVERS = "sys/bus/pci/drivers"
INTEL = "0x8086"
INTEL_PCI_ALIAS = "pci:v00008086"  # a module whose aliases match Intel PCI devices drives them
DISPLAY_CLASS_PREFIX = "0x03"
PROBE_FAILS = "fake-kernel/probe-fails"
REFUSES_LOADS = "fake-kernel/refuses-loads"
SURVIVABILITY = "fake-kernel/survivability"
SURVIVABILITY_FILE = "survivability_mode"


class ModuleInUseError(RuntimeError):
    """``delete_module`` returned EBUSY; the message says what holds the module."""


class LoadRefusedError(RuntimeError):
    """``init_module`` failed; the message is the errno's words (e.g. a kernel that enforces
    module signatures refusing an unsigned one: "Key was rejected by service", or under
    lockdown "Operation not permitted")."""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _function_dir(root: Path, address: str) -> Path:
    """The function's sysfs folder, its link followed lexically: ``root`` may be named
    through ``/proc/<pid>/root``, which ``Path.resolve`` would leave."""
    link = root / PCI_DEVICES / address
    return Path(os.path.normpath(link.parent / link.readlink()))


def functions(root: Path) -> list[str]:
    """Every PCI function's address, sorted."""
    folder = root / PCI_DEVICES
    return sorted(entry.name for entry in folder.iterdir()) if folder.is_dir() else []


def driver_of(root: Path, address: str) -> str | None:
    link = _function_dir(root, address) / "driver"
    return link.readlink().as_posix().rsplit("/", 1)[-1] if link.is_symlink() else None


def is_live(root: Path, module: str) -> bool:
    return (root / "sys/module" / module / "initstate").is_file()


def _drm_nodes(root: Path, address: str) -> list[str]:
    drm = _function_dir(root, address) / "drm"
    return sorted(entry.name for entry in drm.iterdir()) if drm.is_dir() else []


def _open_files(root: Path) -> list[tuple[str, str]]:
    """(pid, target) of every fd link under proc/."""
    found = []
    proc = root / "proc"
    for fd_dir in sorted(proc.glob("*/fd")):
        for fd in sorted(fd_dir.iterdir()):
            if fd.is_symlink():
                found.append((fd_dir.parent.name, fd.readlink().as_posix()))
    return found


def in_use(root: Path, module: str) -> list[str]:
    """Why ``delete_module(module)`` fails with EBUSY now (empty: it would succeed)."""
    reasons = []
    base = root / "sys/module" / module
    refcnt = _read(base / "refcnt")
    if refcnt not in ("", "0"):
        reasons.append(f"refcount {refcnt}")
    holders = base / "holders"
    if holders.is_dir():
        reasons += [f"held by {h.name}" for h in sorted(holders.iterdir())]
    nodes = {
        f"/dev/dri/{node}"
        for address in functions(root)
        if driver_of(root, address) == module
        for node in _drm_nodes(root, address)
    }
    reasons += [f"pid {pid} holds {target}" for pid, target in _open_files(root) if target in nodes]
    return reasons


def busy_reasons(root: Path, module: str) -> list[str]:
    """Why unloading ``module`` would fail or hurt now: what ``in_use`` finds, any process
    holding a DRM node, and enabled VFs."""
    reasons = in_use(root, module)
    reasons += [
        f"pid {pid} holds {target}"
        for pid, target in _open_files(root)
        if target.startswith("/dev/dri/") and f"pid {pid} holds {target}" not in reasons
    ]
    for address in functions(root):
        numvfs = _read(_function_dir(root, address) / "sriov_numvfs")
        if numvfs not in ("", "0"):
            reasons.append(f"{address} has {numvfs} VFs enabled")
    return reasons


def _unlink(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _unbind(root: Path, address: str) -> None:
    driver = driver_of(root, address)
    _unlink(_function_dir(root, address) / "driver")
    _unlink(_function_dir(root, address) / SURVIVABILITY_FILE)
    if driver is not None:
        _unlink(root / PCI_DRIVERS / driver / address)


def _disable_vfs(root: Path, pf: str) -> None:
    pf_dir = _function_dir(root, pf)
    for link in sorted(pf_dir.glob("virtfn*")):
        vf = link.readlink().as_posix().rsplit("/", 1)[-1]
        if driver_of(root, vf) is not None:
            _unbind(root, vf)
        _unlink(_function_dir(root, vf))
        _unlink(root / PCI_DEVICES / vf)
        _unlink(link)
    if (pf_dir / "sriov_numvfs").is_file():
        (pf_dir / "sriov_numvfs").write_text("0\n")


def remove(root: Path, module: str) -> None:
    """``delete_module``: ModuleInUseError while in use, else the module and its bindings go."""
    reasons = in_use(root, module)
    if reasons:
        raise ModuleInUseError("; ".join(reasons))
    for address in functions(root):
        if (root / PCI_DEVICES / address).exists() and driver_of(root, address) == module:
            _disable_vfs(root, address)
            _unbind(root, address)
    _unlink(root / PCI_DRIVERS / module)
    _unlink(root / "sys/module" / module)


def _link(root: Path, relative: str, to_relative: Path) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    _unlink(path)
    path.symlink_to(os.path.relpath(to_relative, path.parent))


def _bind(root: Path, address: str, module: str) -> None:
    device = _function_dir(root, address)
    driver_dir = root / PCI_DRIVERS / module
    if not driver_dir.is_dir():
        driver_dir.mkdir(parents=True)
        _link(root, f"{PCI_DRIVERS}/{module}/module", root / "sys/module" / module)
    _link(root, str((device / "driver").relative_to(root)), driver_dir)
    _link(root, f"{PCI_DRIVERS}/{module}/{address}", device)


def survivability_of(root: Path, version: str) -> str | None:
    """The survivability mode ("Boot", "Runtime") `version`'s probe lands in, if listed."""
    path = root / SURVIVABILITY
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        listed, _, mode = line.strip().rpartition(" ")
        if listed == version.strip():
            return mode
    return None


def probe_fails(root: Path, version: str) -> bool:
    path = root / PROBE_FAILS
    return path.is_file() and version.strip() in [
        line.strip() for line in path.read_text().splitlines()
    ]


def load(
    root: Path,
    module: str,
    modinfo: Mapping[str, Sequence[str]],
    parameters: Mapping[str, str],
    *,
    image: bytes,
) -> list[str]:
    """``init_module`` of the file ``image`` with ``modinfo``: its signature checked, the
    module live with ``parameters``, then its probe of every unbound Intel display PF.
    Returns the addresses it bound."""
    refusal = root / REFUSES_LOADS
    if refusal.is_file():
        raise LoadRefusedError(refusal.read_text().strip())
    verdict = signature_check.check(root, image)
    if verdict.refused:
        raise LoadRefusedError(verdict.refused)
    base = root / "sys/module" / module
    version = (modinfo.get("version") or [""])[0]
    for sub in ("parameters", "holders", "sections"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    declared = {entry.split(":", 1)[0]: "" for entry in modinfo.get("parm", [])}
    for key, value in {**declared, **parameters}.items():
        (base / "parameters" / key).write_text(value + "\n")
    for name, text in (
        ("version", version),
        ("srcversion", (modinfo.get("srcversion") or [""])[0]),
        ("initstate", "live"),
        ("refcnt", "0"),
        ("taint", "OE" if verdict.unverified else "O"),
        ("coresize", "4194304"),
    ):
        (base / name).write_text(text + "\n")
    drives_intel_pci = any(a.startswith(INTEL_PCI_ALIAS) for a in modinfo.get("alias", []))
    if not drives_intel_pci or probe_fails(root, version):
        return []
    bound = []
    for address in functions(root):
        device = _function_dir(root, address)
        intel = _read(device / "vendor") == INTEL
        display = _read(device / "class").startswith(DISPLAY_CLASS_PREFIX)
        is_vf = (device / "physfn").exists()
        if intel and display and not is_vf and driver_of(root, address) is None:
            _bind(root, address, module)
            bound.append(address)
            mode = survivability_of(root, version)
            if mode is not None:
                (device / SURVIVABILITY_FILE).write_text(
                    f"Survivability mode type: {mode}\nCapability Info: 0x138344 - 0x1f\n"
                )
    return bound
