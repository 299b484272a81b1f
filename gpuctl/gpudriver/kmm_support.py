"""Is the installed KMM one gpuctl can roll on safely? Read from KMM's own CRD (pure).

KMM before v2.4.0 kept no boot id in a NodeModulesConfig's status (`status.modules[].bootId`):
a node's NotReady→Ready flip made it reload the module (v2.3), and after an upgrade across
v2.4.0 every status entry written without one counts as a rebooted node, so KMM reloads every
loaded node at once. gpuctl's promise cannot hold on such a KMM, so it writes no Module there
and says why. The schema of KMM's NodeModulesConfig CRD tells the versions apart: the field is
in it from v2.4.0 (v2.6.0 and main de3f8c9 have it). A CRD that cannot be read is unknown,
and unknown is never safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.common import names

NODE_CONFIG_CRD = f"{names.KMM_NODE_CONFIG_PLURAL}.{names.KMM_GROUP}"
SUPPORTED = "KMM v2.4.0 or later (tested: v2.6.0, main de3f8c9)"


def _status_module_fields(crd: Mapping[str, Any]) -> set[str] | None:
    """The fields of `status.modules[]` in the CRD's served KMM_VERSION, or None."""
    for version in (crd.get("spec") or {}).get("versions") or []:
        if version.get("name") != names.KMM_VERSION:
            continue
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
        status = (schema.get("properties") or {}).get("status") or {}
        modules = (status.get("properties") or {}).get("modules") or {}
        item = modules.get("items") or {}
        return set((item.get("properties") or {}).keys())
    return None


def unsupported_kmm(crd: Mapping[str, Any] | None, read_error: str = "") -> str | None:
    """Why no Module may be written on this KMM, or None when it is supported. `crd` is KMM's
    NodeModulesConfig CRD as read (None: not read, `read_error` says why)."""
    if crd is None:
        return (
            f"cannot tell which KMM is installed: CRD {NODE_CONFIG_CRD} could not be read "
            f"({read_error or 'no answer'}); gpuctl needs {SUPPORTED} and writes no Module "
            "until it knows"
        )
    fields = _status_module_fields(crd)
    if fields is None:
        return (
            f"KMM's CRD {NODE_CONFIG_CRD} does not serve {names.KMM_VERSION}; gpuctl needs "
            f"{SUPPORTED}"
        )
    if "bootId" not in fields:
        return (
            f"KMM is older than v2.4.0 (its NodeModulesConfig status has no bootId): it reloads "
            f"a node on a NotReady→Ready flip, and upgrading it across v2.4.0 reloads every "
            f"loaded node at once, busy or not. gpuctl needs {SUPPORTED}: upgrade KMM while no "
            "node runs GPU work, then gpuctl writes the Module"
        )
    return None
