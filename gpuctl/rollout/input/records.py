"""What the rollout writes into node annotations before it changes a node, and reads back.

- `prepare-changes`: the agent's NodeChange list in proto3 JSON, exactly what a
  RestoreRequest hands back;
- `bound-before`: the functions bound to the module's driver before the unload, as
  [{"pciAddress", "driver"}];
- `vfs-before`: {"<PF address>": numVfs} before preparation, so VFs an agent disabled can be
  restored even when the coordinator died before it recorded the agent's answer;
- `verified-boot`: {"bootID", "kernel"}, the boot a Done node was verified in (reboots.py).

All pure; a malformed annotation (an admin's edit) reads as a RecordError naming it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from google.protobuf import json_format

from gpuctl.api.v1alpha1 import agent_service_pb2 as agent_pb


class RecordError(ValueError):
    """An annotation that does not hold what the rollout wrote there."""


@dataclass(frozen=True, order=True)
class BoundFunction:
    pci_address: str
    driver: str


def encode_changes(changes: Sequence[agent_pb.NodeChange]) -> str:
    return json.dumps(
        [json_format.MessageToDict(c) for c in changes], separators=(",", ":"), sort_keys=True
    )


def decode_changes(text: str | None, what: str = "prepare-changes") -> list[agent_pb.NodeChange]:
    if not text:
        return []
    try:
        items = json.loads(text)
        if not isinstance(items, list):
            raise TypeError("not a list")
        return [json_format.ParseDict(item, agent_pb.NodeChange()) for item in items]
    except (ValueError, TypeError, json_format.ParseError) as err:
        raise RecordError(f"annotation {what} is not a NodeChange list: {err}") from None


def change_key(change: agent_pb.NodeChange) -> tuple[str, str]:
    kind = change.WhichOneof("kind") or ""
    address = change.unbound.pci_address if kind == "unbound" else change.disabled_vfs.pci_address
    return kind, address


def merge_changes(*lists: Iterable[agent_pb.NodeChange]) -> list[agent_pb.NodeChange]:
    """All changes, the first record of each (kind, function) kept: it holds the earliest,
    so the original, state (a second PrepareRequest finds VFs already at 0)."""
    seen: set[tuple[str, str]] = set()
    out: list[agent_pb.NodeChange] = []
    for changes in lists:
        for change in changes:
            key = change_key(change)
            if key not in seen:
                seen.add(key)
                out.append(change)
    return out


def encode_bound(functions: Iterable[BoundFunction]) -> str:
    return json.dumps(
        [{"pciAddress": f.pci_address, "driver": f.driver} for f in sorted(functions)],
        separators=(",", ":"),
    )


def decode_bound(text: str | None) -> list[BoundFunction]:
    if not text:
        return []
    try:
        items = json.loads(text)
        return [BoundFunction(str(i["pciAddress"]), str(i["driver"])) for i in items]
    except (ValueError, TypeError, KeyError) as err:
        raise RecordError(f"annotation bound-before is not a function list: {err}") from None


def encode_vfs(vfs: Mapping[str, int]) -> str:
    return json.dumps(dict(sorted(vfs.items())), separators=(",", ":"))


def decode_vfs(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    try:
        items = json.loads(text)
        return {str(k): int(v) for k, v in items.items()}
    except (ValueError, TypeError, AttributeError) as err:
        raise RecordError(f"annotation vfs-before is not a VF count map: {err}") from None


def reconstructed_changes(
    vfs_before: Mapping[str, int],
    vfs_now: Mapping[str, int],
    bound_before: Iterable[BoundFunction],
    drivers_now: Mapping[str, str],
) -> list[agent_pb.NodeChange]:
    """The changes a preparation must have made, from the states before and after it.

    `drivers_now` maps every function present now to its driver ("" when unbound): a
    function bound before and present but unbound now was unbound; VFs that vanished went
    with their PF's sriov_numvfs and are restored by that.
    """
    out: list[agent_pb.NodeChange] = []
    for pf, count in sorted(vfs_before.items()):
        if count > 0 and vfs_now.get(pf) == 0:
            out.append(
                agent_pb.NodeChange(
                    disabled_vfs=agent_pb.DisabledVfs(pci_address=pf, num_vfs=count)
                )
            )
    for function in sorted(bound_before):
        if drivers_now.get(function.pci_address) == "":
            unbound = agent_pb.UnboundFunction(
                pci_address=function.pci_address, driver=function.driver
            )
            out.append(agent_pb.NodeChange(unbound=unbound))
    return out


@dataclass(frozen=True)
class BootRecord:
    """One boot of a node, as its Node's status.nodeInfo says it."""

    boot_id: str
    kernel: str


def encode_boot(boot: BootRecord) -> str:
    return json.dumps({"bootID": boot.boot_id, "kernel": boot.kernel}, separators=(",", ":"))


# Every Done node's record is read on every pass, and a fleet's records change only as its
# nodes reboot: the records read are kept (BootRecord is immutable; an error is not kept).
@functools.lru_cache(maxsize=16_384)
def decode_boot(text: str | None) -> BootRecord | None:
    """The recorded boot (None when nothing is recorded)."""
    if not text:
        return None
    try:
        item = json.loads(text)
        return BootRecord(str(item["bootID"]), str(item.get("kernel", "")))
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        raise RecordError(f"annotation verified-boot is not a boot record: {err}") from None
