"""Reads KMM's NodeModulesConfig CRD now and then, and says whether this KMM is one gpuctl may
write a Module for (gpuctl/gpudriver/kmm_support.py decides).

One GET at most every `max_age` seconds, not one per reconcile. A failed read keeps the last
answer it had (an API hiccup does not change which KMM is installed); with no answer yet, the
failure is the answer: unknown, so no Module is written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from coordinator.kube.client import KubeApi, KubeError, path
from gpuctl.gpudriver.kmm_support import NODE_CONFIG_CRD, unsupported_kmm

CRD_PATH = path("apiextensions.k8s.io", "v1", "customresourcedefinitions", name=NODE_CONFIG_CRD)
MAX_AGE_SECONDS = 60.0


class KmmSupportCheck:
    def __init__(
        self,
        kube: KubeApi,
        max_age: float = MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._answer: str | None = None
        self._read_at: float | None = None

    def problem(self) -> str | None:
        """Why no Module may be written on the installed KMM, or None."""
        with self._lock:
            now = self._clock()
            if self._read_at is not None and now - self._read_at < self._max_age:
                return self._answer
            try:
                answer = unsupported_kmm(self._kube.request("GET", CRD_PATH))
            except KubeError as err:
                if self._read_at is not None:
                    return self._answer
                return unsupported_kmm(None, err.message)
            self._answer, self._read_at = answer, now
            return answer
