"""What the rig's nodes' kernels saw, as rollout tests ask it: from the kernel-boundary record.

Under real KMM nothing in the test hooks a load or an unload: KMM's worker runs ``modprobe`` on
the node's fake host (testbed/harness/kubelet), which records each call. ``NodeKernels`` reads
that record in the rollout's terms:

- ``loads``: ``(node, KMM version)`` of every successful load of the out-of-tree xe, in order
  (the user's version is read back from the loaded module's version string, whose backport tag
  names it, and turned into the Module version it had in the GPUDriver);
- ``unloads``: the nodes of every successful unload (a loader's in-tree removal included);
- ``violations``: every unload attempted while its node was busy, refused or not, ever;
- ``begin()``: ``loads`` and ``unloads`` count from now on (``scenario.start`` calls it once
  the nodes are settled at OLD, so that KMM's first loads, which reload the running xe, are
  not taken for the rollout's);
- ``fail_probe(node, version)`` and ``refuse_loads(node, reason)``: the node's hardware or
  kernel misbehaving for a driver (files its fake kernel reads);
- ``trust_key(node, key)``: the node's kernel has ``key`` built in, so a module it signed
  verifies there (a node whose kernel enforces signatures refuses any it cannot verify;
  enrolled MOK keys are the root's own: FakeHost.boot_efi).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from testbed.fakehost import FakeHost
from testbed.fakehost.signing import SigningKey
from testbed.harness.kubelet import kernel, signature_check
from testbed.harness.real_kmm import RealKmm
from testbed.rollout_live.fake_nodes import backport_version_string

_BACKPORT_TAG = re.compile(r"xeb_(\S+) for ")


def user_version(module_version: str) -> str | None:
    """The user's version a loaded module names in its backport tag (None: not ours)."""
    match = _BACKPORT_TAG.search(module_version)
    return match.group(1) if match else None


class NodeKernels:
    def __init__(
        self,
        kmm: RealKmm,
        hosts: dict[str, FakeHost],
        kmm_version_at: Callable[[str | None], str],
        unversioned: str,
    ) -> None:
        self._kmm = kmm
        self._hosts = hosts
        self._kmm_version_at = kmm_version_at
        self._unversioned = unversioned
        self._since = 0.0

    def begin(self) -> None:
        self._since = time.time()

    @property
    def loads(self) -> list[tuple[str, str]]:
        found = []
        for call in self._kmm.load_calls():
            if call.at < self._since or call.modules != ("xe",):
                continue  # before begin(), or a companion module loaded with it
            version = user_version(call.version)
            if version is not None:
                user = None if version == self._unversioned else version
                found.append((call.node, self._kmm_version_at(user)))
        return found

    @property
    def unloads(self) -> list[str]:
        return [
            call.node
            for call in self._kmm.unload_calls()
            if call.succeeded and call.at >= self._since
        ]

    @property
    def violations(self) -> list[str]:
        return [call.describe() for call in self._kmm.unloads_while_busy()]

    def _write(self, node: str, relative: str, text: str) -> None:
        path: Path = self._hosts[node].real(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def fail_probe(self, node: str, version: str) -> None:
        """``version``'s probe of the node's GPUs fails: it loads, but binds nothing."""
        self._write(node, kernel.PROBE_FAILS, user_module_version(version) + "\n")

    def enter_survivability(self, node: str, version: str, mode: str = "Boot") -> None:
        """``version``'s probe of the node's GPUs lands in xe's survivability mode (`mode`):
        bound, serving nothing, as a GPU whose firmware failed."""
        self._write(node, kernel.SURVIVABILITY, f"{user_module_version(version)} {mode}\n")

    def refuse_loads(self, node: str, reason: str | None = "Key was rejected by service") -> None:
        """The node's kernel refuses every module load (``reason``), or no longer (None)."""
        if reason is None:
            self._hosts[node].remove(kernel.REFUSES_LOADS)
        else:
            self._write(node, kernel.REFUSES_LOADS, reason + "\n")

    def trust_key(self, node: str, key: SigningKey) -> None:
        """The node's kernel has ``key`` built in: modules signed with it verify there."""
        signature_check.trust_builtin_key(self._hosts[node].root, key.certificate_der)


def user_module_version(version: str) -> str:
    """The module version string the image of a user's version carries."""
    return backport_version_string(version).strip()
