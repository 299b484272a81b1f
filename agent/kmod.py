"""Read a kernel module's state from sys/module/<name>: loaded, built in, or absent.

A loadable module has `initstate` (live/coming/going), `refcnt` and `holders/`; a built-in
one has only `parameters/` (and maybe `version`); no directory means not loaded. Also says,
for the PCI drivers bound to GPUs, whether their modules hold any reference that is not a
dependent module - if none does, no process can have a GPU open and the /proc scan is skipped.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from agent.hostfs import HostFiles
from agent.sysattr import read_attribute, read_decimal
from agent.warninglog import WarningLog

MODULES_DIR = "sys/module"
_INIT_STATES = {"live": "LIVE", "coming": "COMING", "going": "GOING"}


class ModuleState(enum.Enum):
    NOT_LOADED = "NOT_LOADED"
    LIVE = "LIVE"
    COMING = "COMING"
    GOING = "GOING"
    BUILTIN = "BUILTIN"
    # initstate present but unreadable or garbage.
    UNKNOWN = "UNKNOWN"


@dataclass(slots=True)
class ModuleFacts:
    name: str
    state: ModuleState
    # None when unknown: unreadable, or built in.
    refcnt: int | None = None
    holders: list[str] = field(default_factory=list)
    # False when holders/ exists but could not be listed.
    holders_known: bool = True
    parameters: dict[str, str] = field(default_factory=dict)
    srcversion: str = ""
    # None when the file exists but could not be read; "" when absent.
    version: str | None = ""
    taint: str | None = ""


def read_module(files: HostFiles, name: str, log: WarningLog) -> ModuleFacts:
    base = f"{MODULES_DIR}/{name}"
    if not files.is_dir(base):
        return ModuleFacts(name=name, state=ModuleState.NOT_LOADED)
    facts = ModuleFacts(name=name, state=_read_state(files, base, log))
    facts.parameters = _read_parameters(files, f"{base}/parameters", log)
    facts.version = _read_optional_text(files, f"{base}/version", log)
    if facts.state is ModuleState.BUILTIN:
        return facts
    facts.refcnt = read_decimal(files, f"{base}/refcnt", log)
    facts.srcversion = read_attribute(files, f"{base}/srcversion", log, missing_ok=True) or ""
    facts.taint = _read_optional_text(files, f"{base}/taint", log)
    try:
        facts.holders = files.list_dir(f"{base}/holders")
    except FileNotFoundError:
        facts.holders = []
    except OSError as error:
        log.add_error(f"{base}/holders", error)
        facts.holders_known = False
    return facts


def _read_state(files: HostFiles, base: str, log: WarningLog) -> ModuleState:
    if not files.exists(f"{base}/initstate"):
        if files.exists(f"{base}/refcnt"):
            log.add(f"{base}/initstate", "missing although refcnt exists")
            return ModuleState.UNKNOWN
        return ModuleState.BUILTIN
    text = read_attribute(files, f"{base}/initstate", log)
    if text is None:
        return ModuleState.UNKNOWN
    if text not in _INIT_STATES:
        log.add(f"{base}/initstate", f"unknown module state {text!r}")
        return ModuleState.UNKNOWN
    return ModuleState(_INIT_STATES[text])


def _read_optional_text(files: HostFiles, relative: str, log: WarningLog) -> str | None:
    """ "" when absent, None (with a warning) when present but unreadable."""
    try:
        return files.read_text(relative).strip()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as error:
        log.add_error(relative, error)
        return None


def _read_parameters(files: HostFiles, relative: str, log: WarningLog) -> dict[str, str]:
    try:
        names = files.list_dir(relative)
    except FileNotFoundError:
        return {}
    except OSError as error:
        log.add_error(relative, error)
        return {}
    parameters = {}
    for name in names:
        value = read_attribute(files, f"{relative}/{name}", log)
        if value is not None:
            parameters[name] = value
    return parameters


def driver_module_name(files: HostFiles, driver: str) -> str:
    """The module providing a PCI driver ("vfio-pci" -> "vfio_pci"), from its `module` link."""
    try:
        return files.read_link(f"sys/bus/pci/drivers/{driver}/module").rstrip("/").rsplit("/")[-1]
    except OSError:
        return driver.replace("-", "_")


def open_references(files: HostFiles, module: str, log: WarningLog) -> int | None:
    """refcnt minus dependent modules: references held by open files and the like.

    None when unknown: the module is built in (no refcnt) or its attributes are unreadable.
    """
    base = f"{MODULES_DIR}/{module}"
    if not files.exists(f"{base}/refcnt"):
        return None
    refcnt = read_decimal(files, f"{base}/refcnt", log)
    try:
        holders = files.list_dir(f"{base}/holders")
    except FileNotFoundError:
        holders = []
    except OSError as error:
        log.add_error(f"{base}/holders", error)
        return None
    return None if refcnt is None else refcnt - len(holders)
