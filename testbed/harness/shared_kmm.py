"""One KMM per control plane: the manager and webhook every test namespace shares.

Starting KMM's manager and webhook (a new CA, a serving certificate, two processes waiting to
be ready) for every test was a large part of the suite's time. KMM is one manager for every
namespace of a cluster (its controllers watch all of them; ``OPERATOR_NAMESPACE`` only says
where its own ConfigMap lives), and its webhook is scoped by a namespace selector, so one of
each serves all the tests of a control plane: ``SharedKmm.serve`` starts them (the first time,
or after a test that ran KMM of its own) and labels the test's namespace ``SHARED_LABEL`` so
the shared webhook admits its Modules. The kubelet of KMM's Pods and the kernel-boundary
record stay per test (``RealKmm``).

There is one ``SharedKmm`` per API server (``for_cluster``), whatever the scope of the fixture
that started the control plane (the session's, a package's, a module's own), and it stops with
it (``forget``, which ``tests/support/own_cluster.py`` calls before it stops a control plane).
Two KMM managers must never run against one API server (both would reconcile every Module):
``serve`` at another KMM version stops the running one first, ``stop`` stops it for a test that
runs KMM of its own (marked ``own_kmm``: it kills, stops or reconfigures KMM), and
``assert_none_running`` lets such a test's KMM refuse to start beside a shared one. A test that
asks for no KMM runs with none (``stop_all``), as every test did before KMM was shared: one
that writes KMM's objects by hand, or asserts nobody touched them, sees no KMM act.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from testbed.harness.access import KubeCluster
from testbed.harness.kmm_build import KmmBuild
from testbed.harness.kmm_operator import KmmOperator
from testbed.harness.kmm_webhook import KmmWebhook

SHARED_LABEL = "gpuctl.test/shared-kmm"
SHARED_VALUE = "true"
WEBHOOK_NAME = "kmm-webhook-shared"

_running: dict[Path, SharedKmm] = {}  # kubeconfig -> the SharedKmm with processes up
_known: dict[Path, SharedKmm] = {}  # kubeconfig -> its SharedKmm, running or not


def for_cluster(cluster: KubeCluster, make_folder: Callable[[], Path]) -> SharedKmm:
    """The shared KMM of ``cluster``'s API server (made the first time, its logs under
    ``make_folder()``)."""
    shared = _known.get(cluster.kubeconfig)
    if shared is None:
        shared = SharedKmm(cluster.admin_client(), cluster.kubeconfig, make_folder())
        _known[cluster.kubeconfig] = shared
    return shared


def stop_all() -> None:
    """Stops every running shared KMM (they start again when a test asks for one)."""
    for shared in list(_running.values()):
        shared.stop()


def forget(kubeconfig: Path) -> None:
    """Stops the shared KMM of the API server of ``kubeconfig``, if any, before that API server
    stops."""
    shared = _known.pop(kubeconfig, None)
    if shared is not None:
        shared.stop()


def assert_none_running(kubeconfig: Path) -> None:
    """Fails if a shared KMM runs against the API server of ``kubeconfig``."""
    shared = _running.get(kubeconfig)
    if shared is not None and shared.build is not None:
        raise AssertionError(
            f"a shared KMM ({shared.build.version}) runs against {kubeconfig}: a test that "
            "starts KMM of its own is marked own_kmm (tests/integration/conftest.py stops it)"
        )


class SharedKmm:
    """KMM's manager and webhook for every namespace labelled ``SHARED_LABEL`` on the API
    server of ``kubeconfig``; logs under ``folder/<version>``."""

    def __init__(self, api_client: Any, kubeconfig: Path, folder: Path) -> None:
        self._api_client = api_client
        self._core: Any = k8s.CoreV1Api(api_client)
        self._kubeconfig = kubeconfig
        self._folder = folder
        self.build: KmmBuild | None = None
        self.starts = 0
        self._parts: tuple[KmmOperator, KmmWebhook] | None = None

    def serve(self, namespace: str, build: KmmBuild) -> tuple[KmmOperator, KmmWebhook]:
        """KMM ``build``'s running manager and webhook, started if need be, now serving
        ``namespace``."""
        parts = self._running(build)
        self._core.patch_namespace(
            namespace, {"metadata": {"labels": {SHARED_LABEL: SHARED_VALUE}}}
        )
        return parts

    def _running(self, build: KmmBuild) -> tuple[KmmOperator, KmmWebhook]:
        if self._parts is not None and self.build == build:
            return self._parts
        self.stop()
        folder = self._folder / build.version
        folder.mkdir(parents=True, exist_ok=True)
        operator = KmmOperator(build, self._api_client, self._kubeconfig, folder)
        webhook = KmmWebhook(
            build,
            self._api_client,
            self._kubeconfig,
            folder,
            operator_namespace=operator.namespace,
            port=operator.webhook_port,
            name=WEBHOOK_NAME,
            scope={SHARED_LABEL: SHARED_VALUE},
        )
        _running[self._kubeconfig] = self
        self.build, self._parts = build, (operator, webhook)
        self.starts += 1
        try:
            operator.start()
            webhook.start()
        except BaseException:
            self.stop()
            raise
        return self._parts

    def stop(self) -> None:
        """Stops the manager and the webhook (unregistered first), if they run."""
        if self._parts is not None:
            operator, webhook = self._parts
            with contextlib.ExitStack() as stack:
                stack.callback(operator.stop)
                stack.callback(webhook.stop)
        self.build, self._parts = None, None
        _running.pop(self._kubeconfig, None)
