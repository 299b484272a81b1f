"""kwok for the local control plane: its binary, its stages, its command line.

kwok (``sigs.k8s.io/kwok``) plays the kubelets of simulated Nodes against the real API server:
it renews each managed Node's Lease (the heartbeat the node-lifecycle controller watches),
turns a Node Ready, runs the Pods bound to it (Pending to Running and Ready), and finishes
deleted Pods. What it does is written as *stages*; ``STAGES`` are gpuctl's own, minimal and
without delays, so a test waits for exact states rather than for kwok's jitter. KMM's worker
and image pull Pods, and gpuctl's image probes, are left to the kubelet of KMM's Pods
(testbed/harness/kubelet), which runs KMM's worker on the node's fake host.

kwok manages every Node *without* ``HEARTBEAT_LABEL=stopped`` (a server-side label selector).
Setting that label takes the Node out of kwok's watch: kwok releases its Lease and stops
renewing it, as a kubelet that died would, and the node-lifecycle controller marks the Node
NotReady (Unknown) and taints it unreachable after its grace period. Removing the label gives
the Node back to kwok, which takes the Lease again and turns it Ready.

``find_kwok`` takes ``GPUCTL_KWOK`` (set by ``hack/test``) or runs ``hack/kwok/ensure``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from testbed.harness.layout import LOOPBACK

HEARTBEAT_LABEL = "kwok.gpuctl.dev/heartbeat"
# On a Pod whose process a test's stand-in runtime runs on a fake host (testbed/rollout_live/
# gpu_daemons.py): kwok leaves it to that runtime, which starts the process before it reports
# the Pod Running and Ready, and stops it before it confirms a deletion, as a kubelet does.
HOST_PROCESS_LABEL = "testbed.gpuctl.dev/host-process"
HEARTBEAT_STOPPED = "stopped"
KWOK_ENV = "GPUCTL_KWOK"

STAGES = """\
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuctl-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: kwok renews this node's Lease (gpuctl test harness)
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuctl-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: DoesNotExist
    - key: '.status.phase'
      operator: In
      values: ['Pending']
    - key: '.metadata.labels."testbed.gpuctl.dev/host-process"'
      operator: DoesNotExist
    - key: '.metadata.labels."kmm.node.kubernetes.io/worker-action"'
      operator: DoesNotExist
    - key: '.metadata.labels."kmm.node.kubernetes.io/pull-pod-type"'
      operator: DoesNotExist
    - key: '.metadata.labels."gpuctl.dev/image-probe"'
      operator: DoesNotExist
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Initialized
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: ContainersReady
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      containerStatuses:
      {{ range .spec.containers }}
      - name: {{ .name | Quote }}
        image: {{ .image | Quote }}
        imageID: ""
        ready: true
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: gpuctl-pod-gone
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: Exists
    - key: '.metadata.labels."testbed.gpuctl.dev/host-process"'
      operator: DoesNotExist
    - key: '.metadata.labels."kmm.node.kubernetes.io/worker-action"'
      operator: DoesNotExist
    - key: '.metadata.labels."kmm.node.kubernetes.io/pull-pod-type"'
      operator: DoesNotExist
    - key: '.metadata.labels."gpuctl.dev/image-probe"'
      operator: DoesNotExist
  next:
    delete: true
"""


class MissingKwokError(RuntimeError):
    """kwok is not there and could not be built."""


def find_kwok(repo_root: Path, environ: Mapping[str, str]) -> Path:
    """The kwok binary from ``GPUCTL_KWOK`` or from ``hack/kwok/ensure`` (which builds it)."""
    named = environ.get(KWOK_ENV, "")
    if named:
        if not os.access(named, os.X_OK):
            raise MissingKwokError(f"{KWOK_ENV}={named} is not an executable file")
        return Path(named)
    ensure = repo_root / "hack" / "kwok" / "ensure"
    result = subprocess.run(
        [str(ensure)], stdout=subprocess.PIPE, text=True, check=False, env=dict(environ)
    )
    if result.returncode != 0:
        raise MissingKwokError(
            f"{ensure} failed (exit {result.returncode}); its messages are above. "
            "It builds kwok with Go from the module proxy."
        )
    return Path(result.stdout.strip())


def kwok_args(
    binary: Path,
    *,
    kubeconfig: Path,
    stages: Path,
    port: int,
    lease_seconds: int,
) -> list[str]:
    """kwok managing every Node not labelled ``HEARTBEAT_LABEL=stopped``, its Leases lasting
    ``lease_seconds`` (renewed every quarter of that), health on ``http://LOOPBACK:port``."""
    return [
        str(binary),
        f"--config={stages}",
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-label-selector={HEARTBEAT_LABEL}!={HEARTBEAT_STOPPED}",
        f"--node-lease-duration-seconds={lease_seconds}",
        f"--server-address={LOOPBACK}:{port}",
        "--node-ip=10.250.0.1",
    ]


def health_url(port: int) -> str:
    return f"http://{LOOPBACK}:{port}/healthz"
