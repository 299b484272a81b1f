"""KMM as a test has it: KMM's own manager, a kubelet for its Pods, a registry, an oracle.

``RealKmm`` puts together, for one test namespace:

- ``operator`` - KMM's manager (``kmm_operator``), built from KMM's source: the control
  plane's shared one (``shared_kmm``, when given ``shared``), or its own, which it starts and
  stops (a test that kills, stops or reconfigures KMM);
- ``webhook`` - KMM's webhook server, its admission rules applied to the namespace
  (``kmm_webhook``), shared or its own likewise;
- ``kubelet`` - runs KMM's image pull and worker Pods of the namespace on the nodes served
  (``serve``), with KMM's real ``worker`` binary over each node's fake host root, and its sign
  Pods (kaniko and ``sign-file`` over the catalogue, with the Module's key Secrets);
- ``catalogue`` - the module images that exist (``kubelet.catalogue``);
- the kernel-boundary record: every ``modprobe`` the workers ran, with whether the node was
  busy at that moment (``kernel_calls``, ``assert_no_unload_while_busy``).

It reads what KMM wrote from the API: ``nmc`` (a node's NodeModulesConfig), ``loaded`` (its
status entry for a Module), ``spec_entry``. ``close`` stops the kubelet (and its own manager
and webhook) and then takes KMM's finalizers off the namespace's Modules and Pods: no kubelet
is left to end the Pods, and no KMM of its own to finalize the Modules. A shared KMM finishes
what is left when the test's Nodes go (their NodeModulesConfigs are the Nodes' to garbage
collect; KMM then drops its Pods' finalizers).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.harness.kmm_build import KmmBuild
from testbed.harness.kmm_operator import KANIKO_IMAGE, SIGN_IMAGE, KmmOperator
from testbed.harness.kmm_webhook import KmmWebhook, namespace_scope
from testbed.harness.kubelet import record
from testbed.harness.kubelet.catalogue import ImageCatalogue
from testbed.harness.kubelet.kubelet import KmmKubelet
from testbed.harness.kubelet.pod_status import BackOff
from testbed.harness.shared_kmm import SharedKmm, assert_none_running

KMM_GROUP = "kmm.sigs.x-k8s.io"
KMM_VERSION = "v1beta1"
HTTP_NOT_FOUND = 404


@dataclass(frozen=True)
class LoadedModule:
    """What KMM's NodeModulesConfig status says is loaded of a Module on a node."""

    version: str
    image: str
    boot_id: str


class RealKmm:
    """KMM's manager and a kubelet for the Pods of ``namespace``; files under ``folder``."""

    def __init__(
        self,
        build: KmmBuild,
        api_client: Any,
        kubeconfig: Path,
        namespace: str,
        folder: Path,
        *,
        backoff: BackOff | None = None,
        shared: SharedKmm | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.namespace = namespace
        self.build = build
        self._kubeconfig = kubeconfig
        self._shared = shared
        self._core: Any = k8s.CoreV1Api(api_client)
        self._custom: Any = k8s.CustomObjectsApi(api_client)
        self.catalogue = ImageCatalogue(folder / "registry")
        # The manager and the webhook: the shared ones once ``start`` has them, else its own.
        self.operator: KmmOperator
        self.webhook: KmmWebhook
        if shared is None:
            self.operator = KmmOperator(build, api_client, kubeconfig, folder)
            self.webhook = KmmWebhook(
                build,
                api_client,
                kubeconfig,
                folder,
                operator_namespace=self.operator.namespace,
                port=self.operator.webhook_port,
                name=f"kmm-webhook-{namespace}",
                scope=namespace_scope(namespace),
            )
        self.kubelet = KmmKubelet(
            api_client,
            namespace,
            catalogue=self.catalogue,
            worker_binary=build.worker,
            folder=folder / "kubelet",
            backoff=backoff,
            kaniko_image=KANIKO_IMAGE,
            sign_image=SIGN_IMAGE,
        )

    def start(self) -> None:
        self.kubelet.start()
        if self._shared is not None:
            self.operator, self.webhook = self._shared.serve(self.namespace, self.build)
            return
        assert_none_running(self._kubeconfig)
        self.operator.start()
        self.webhook.start()

    def close(self) -> None:
        """Stops what ``start`` started (all of it, even after a failed start, and each part
        even when stopping another one failed: none is left running into the next test)."""
        with contextlib.ExitStack() as stack:
            stack.callback(self._release_finalizers)
            if self._shared is None:
                stack.callback(self.operator.stop)
            stack.callback(self.kubelet.stop)
            if self._shared is None:
                stack.callback(self.webhook.stop)

    def __enter__(self) -> RealKmm:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- nodes ---------------------------------------------------------------------------

    def serve(self, node: str, root: Path, kernel_release: str) -> None:
        self.kubelet.serve(node, root, kernel_release)

    def delay_node(self, node: str, seconds: float) -> None:
        self.kubelet.delay_node(node, seconds)

    def hold_node(self, node: str, held: bool = True) -> None:
        self.kubelet.hold_node(node, held)

    def hold_probes(self, node: str, held: bool = True) -> None:
        self.kubelet.hold_probes(node, held)

    # --- what KMM wrote ------------------------------------------------------------------

    def nmc(self, node: str) -> dict[str, Any] | None:
        try:
            response = self._custom.get_cluster_custom_object(
                KMM_GROUP, KMM_VERSION, "nodemodulesconfigs", node, _preload_content=False
            )
        except k8s.ApiException as error:
            if error.status == HTTP_NOT_FOUND:
                return None
            raise
        result: dict[str, Any] = json.loads(response.data)
        return result

    def _entry(self, node: str, part: str, module: str) -> dict[str, Any] | None:
        nmc = self.nmc(node) or {}
        for entry in (nmc.get(part) or {}).get("modules") or []:
            if entry.get("namespace") == self.namespace and entry.get("name") == module:
                return dict(entry)
        return None

    def spec_entry(self, module: str, node: str) -> dict[str, Any] | None:
        return self._entry(node, "spec", module)

    def status_entry(self, module: str, node: str) -> dict[str, Any] | None:
        return self._entry(node, "status", module)

    def loaded(self, module: str, node: str) -> LoadedModule | None:
        status = self.status_entry(module, node)
        if status is None:
            return None
        config = status.get("config") or {}
        return LoadedModule(
            str(status.get("version", "")),
            str(config.get("containerImage", "")),
            str(status.get("bootId", "")),
        )

    # --- the kernel boundary -------------------------------------------------------------

    def kernel_calls(self) -> list[record.KernelCall]:
        return self.kubelet.kernel_calls()

    def unload_calls(self, node: str | None = None) -> list[record.KernelCall]:
        return [
            call
            for call in self.kernel_calls()
            if call.action == record.UNLOAD and node in (None, call.node)
        ]

    def load_calls(self, node: str | None = None) -> list[record.KernelCall]:
        return [
            call
            for call in self.kernel_calls()
            if call.action == record.LOAD and call.succeeded and node in (None, call.node)
        ]

    def unloads_while_busy(self) -> list[record.KernelCall]:
        return record.unloads_while_busy(self.kubelet.record)

    def assert_no_unload_while_busy(
        self, excused: Callable[[record.KernelCall], bool] = record.never
    ) -> None:
        self.kubelet.assert_no_unload_while_busy(excused)

    # --- teardown ------------------------------------------------------------------------

    def _release_finalizers(self) -> None:
        modules = json.loads(
            self._custom.list_namespaced_custom_object(
                KMM_GROUP, KMM_VERSION, self.namespace, "modules", _preload_content=False
            ).data
        )["items"]
        for module in modules:
            if module["metadata"].get("finalizers"):
                self._ignore_gone(
                    self._custom.patch_namespaced_custom_object,
                    KMM_GROUP,
                    KMM_VERSION,
                    self.namespace,
                    "modules",
                    module["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
        for pod in self._core.list_namespaced_pod(self.namespace).items:
            if pod.metadata.finalizers:
                self._ignore_gone(
                    self._core.patch_namespaced_pod,
                    pod.metadata.name,
                    self.namespace,
                    {"metadata": {"finalizers": None}},
                )

    @staticmethod
    def _ignore_gone(call: Any, *args: Any) -> None:
        try:
            call(*args)
        except k8s.ApiException as error:
            if error.status != HTTP_NOT_FOUND:
                raise
