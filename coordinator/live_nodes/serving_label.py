"""Marks the coordinator Pod that serves gRPC, so the chart's Service routes only to it.

Only the leading replica runs the gRPC server. A readiness probe cannot express that (the
standby would never be Ready, and a Deployment rollout waits for Ready pods forever), so the
leader labels its own Pod `gpuctl.dev/grpc-serving=true` while it serves, and the Service
selects that label. Every replica removes the label from its own Pod when it starts (a
restarted container must not keep a label its predecessor set) and when it stops leading.
"""

from __future__ import annotations

import logging

from coordinator.kube.client import MERGE_PATCH, KubeApi, KubeError, path
from gpuctl.common.names import SERVING_LABEL

log = logging.getLogger(__name__)


class ServingLabel:
    """The serving label on one Pod; start() sets it, stop() removes it (LeaderScoped)."""

    def __init__(self, kube: KubeApi, namespace: str, pod: str) -> None:
        self._kube = kube
        self._path = path("", "v1", "pods", namespace=namespace, name=pod)
        self._pod = pod

    def _set(self, value: str | None) -> None:
        try:
            self._kube.request(
                "PATCH",
                self._path,
                body={"metadata": {"labels": {SERVING_LABEL: value}}},
                content_type=MERGE_PATCH,
            )
        except KubeError as err:
            # Without the label the Service sends nobody here: agents keep retrying and the
            # rollout, without reports, moves no node. Loud, but safe.
            log.error(
                "could not label this Pod for the gRPC Service",
                extra={"pod": self._pod, "error": str(err)},
            )

    def start(self) -> None:
        self._set("true")

    def stop(self, timeout: float = 10.0) -> None:
        self._set(None)
