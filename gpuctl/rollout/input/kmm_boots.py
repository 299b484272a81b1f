"""The boot KMM's loader last ran in on a node, from its NodeModulesConfig (pure).

KMM keeps one NodeModulesConfig per node (named after it); its `status.modules[]` has an
entry per Module loaded there (`namespace`, `name`, `config`, `bootId`, ...), the `bootId`
being the node's boot in which KMM's loader last succeeded (KMM v2.6.0
internal/controllers/nmc_reconciler.go: the status is written from the worker Pod's end,
with the Node's `status.nodeInfo.bootID`; `IsNodeRebooted` compares the two). KMM's ready
labels survive a reboot; this record does not pretend to: a node counts as verified in its
current boot only when KMM's record is of that boot too (writes.not_loaded_in_this_boot).

Its `spec.modules[]` has the config KMM's loader of each Module runs with, `kernelVersion`
included: written by KMM's module reconciler for the node's kernel, and left as it is on a node
whose KMM version label is not the Module's version (module_reconciler.go
prepareNodeSchedulingData: "the previous version should run"). Such a node that reboots into
another kernel keeps a config for the old one, which its loader can never load
(`configured_kernel`; gpuctl/rollout/step/reboots.py).

`boot_part` is what the coordinator's watch keeps of a NodeModulesConfig (the rest it drops);
`loaded_boot` reads one Module's boot of it, `configured_kernel` its configured kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def boot_part(config: dict[str, Any]) -> dict[str, Any]:
    """A NodeModulesConfig as the watch keeps it: its name, resourceVersion and each status
    entry's Module and boot."""
    meta = config.get("metadata") or {}
    entries = ((config.get("status") or {}).get("modules")) or []
    return {
        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
        "spec": {
            "modules": [
                {
                    "namespace": entry.get("namespace"),
                    "name": entry.get("name"),
                    "config": {
                        "kernelVersion": (entry.get("config") or {}).get("kernelVersion", "")
                    },
                }
                for entry in ((config.get("spec") or {}).get("modules")) or []
                if isinstance(entry, Mapping)
            ]
        },
        "status": {
            "modules": [
                {
                    "namespace": entry.get("namespace"),
                    "name": entry.get("name"),
                    "bootId": entry.get("bootId", ""),
                }
                for entry in entries
                if isinstance(entry, Mapping)
            ]
        },
    }


def loaded_boot(config: Mapping[str, Any] | None, namespace: str, module: str) -> str:
    """The boot KMM records its loader of Module `namespace/module` ran in ("" for none:
    no NodeModulesConfig, no entry for the Module, or an entry without a boot)."""
    for entry in ((config or {}).get("status") or {}).get("modules") or []:
        if entry.get("namespace") == namespace and entry.get("name") == module:
            return str(entry.get("bootId") or "")
    return ""


def configured_kernel(config: Mapping[str, Any] | None, namespace: str, module: str) -> str:
    """The kernel KMM configures its loader of Module `namespace/module` for on the node
    (spec.modules[].config.kernelVersion; "" when KMM configures no load of it there)."""
    for entry in ((config or {}).get("spec") or {}).get("modules") or []:
        if entry.get("namespace") == namespace and entry.get("name") == module:
            return str((entry.get("config") or {}).get("kernelVersion") or "")
    return ""
