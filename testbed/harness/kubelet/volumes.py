"""A Pod's volumes and a container's mounts, as the kubelet of KMM's Pods lays them out.

Apart from the kubelet's loop (kubelet.py) and its Pod runs (pod_runners.py) because it is
plain file layout with no API or thread: downwardAPI files written from the Pod's
annotations, emptyDir folders made under the Pod's folder, hostPath paths on the node's fake
host root, and the node's ``firmware_class`` parameters mounted over this machine's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.harness.kubelet.containers import Mount

FIRMWARE_CLASS_PARAMETERS = "/sys/module/firmware_class/parameters"


def write_volumes(pod: dict[str, Any], folder: Path) -> dict[str, tuple[str, Path]]:
    """Each volume's kind and source: downwardAPI files written from the annotations,
    emptyDir folders made, hostPath paths (on the node's root, resolved when mounted)."""
    annotations = pod["metadata"].get("annotations") or {}
    sources: dict[str, tuple[str, Path]] = {}
    for volume in pod["spec"].get("volumes") or []:
        name = volume["name"]
        if "downwardAPI" in volume:
            path = folder / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            for item in volume["downwardAPI"]["items"]:
                key = item["fieldRef"]["fieldPath"].split("['", 1)[1].rstrip("']")
                (path / item["path"]).write_text(annotations.get(key, ""))
            sources[name] = ("downwardAPI", path)
        elif "emptyDir" in volume:
            path = folder / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            sources[name] = ("emptyDir", path)
        elif "hostPath" in volume:
            sources[name] = ("hostPath", Path(volume["hostPath"]["path"]))
        elif "projected" in volume:  # the ServiceAccount token: KMM's containers never use it
            sources[name] = ("projected", folder)
    return sources


def firmware_class_path(root: Path) -> Mount:
    """The node's ``firmware_class`` parameters over this machine's (the worker writes
    ``path``; sysfs takes a folder mounted over its own, not a file)."""
    folder = root / FIRMWARE_CLASS_PARAMETERS.lstrip("/")
    if not (folder / "path").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "path").write_text("\n")
    return Mount(folder, FIRMWARE_CLASS_PARAMETERS)


def container_mounts(
    container: dict[str, Any], volumes: dict[str, tuple[str, Path]], root: Path
) -> list[Mount]:
    """The container's volume mounts; a hostPath is the node's fake host root's path."""
    mounts = []
    for mount in container.get("volumeMounts") or []:
        kind, source = volumes[mount["name"]]
        if kind == "projected":
            continue
        if kind == "hostPath":
            source = root / str(source).lstrip("/")
            source.mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(source, mount["mountPath"], bool(mount.get("readOnly"))))
    return mounts
