"""Is KMM installed? Is DRA served? API discovery, re-checked so late installs are noticed.

The reference operator looks for the `kmm.sigs.x-k8s.io` group once at startup and needs a
restart when KMM is installed later. Here discovery is asked again every few seconds (it is
one small GET of /apis), so installing (or removing) KMM takes effect without a restart.
The discovery call is a parameter: tests run a coordinator that sees no KMM against the
real API server by passing a function that reports none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from coordinator.kube.client import KubeApi
from gpuctl.common.gpu_claims import served_dra_version
from gpuctl.common.names import KMM_GROUP, KMM_VERSION

# group -> versions the API server serves for it
ServedGroups = dict[str, list[str]]
Discover = Callable[[], ServedGroups]


def api_discovery(kube: KubeApi) -> Discover:
    """Discovery through the API server's /apis."""

    def discover() -> ServedGroups:
        answer = kube.request("GET", "/apis")
        return {
            str(g["name"]): [str(v["version"]) for v in g.get("versions") or []]
            for g in answer.get("groups") or []
        }

    return discover


class Discovery:
    """Cached answers of `discover`, refreshed at most every `max_age` seconds."""

    def __init__(
        self,
        discover: Discover,
        max_age: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._discover = discover
        self._max_age = max_age
        self._clock = clock
        self._groups: ServedGroups = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def refresh(self) -> ServedGroups:
        """Ask again now; on failure keep the last answer (an API hiccup is not an uninstall)."""
        try:
            groups = self._discover()
        except Exception:
            with self._lock:
                return dict(self._groups)
        with self._lock:
            self._groups = groups
            self._fetched_at = self._clock()
            return dict(groups)

    def groups(self) -> ServedGroups:
        with self._lock:
            fresh = (
                self._fetched_at is not None and self._clock() - self._fetched_at < self._max_age
            )
            if fresh:
                return dict(self._groups)
        return self.refresh()

    def kmm_installed(self) -> bool:
        return KMM_VERSION in self.groups().get(KMM_GROUP, [])

    def dra_version(self) -> str | None:
        return served_dra_version(self.groups())
