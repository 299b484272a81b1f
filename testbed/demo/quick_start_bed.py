"""The cluster docs/getting-started.md starts from, on the demo's system, and what the test bed
does where the chart's Pods would run (kwok plays their kubelet: Running, no container); for
tests/integration/demo/test_quick_start.py, which runs the page's commands.

- `add_nodes`: the page's GPU nodes (gpu-1, gpu-2, gpu-3), one Arc B580 each on its kernel's
  in-tree xe, on a kernel the page's kernelMappings match, labelled and sized as a kubelet
  would; the page's image pushed for that kernel; gpu-2 running ollama on the host, holding its
  render node (testbed/rollout_live/scenario.py): the page's first Blocked node.
- `adopt_agent_account`: the rig made the agents' ServiceAccount (it mints their tokens) under
  the chart's name; marked as the release's, `helm install` takes it over.
- `start_coordinator`: the chart's coordinator Deployment's process, as the chart's
  ServiceAccount (its RBAC; and the chart's Module guard lets only that account touch a
  Module), managing every GPUDriver. It rechecks a Blocked node every hour, not every 30 s, so
  that the page's `gpuctl rollout retry` is what starts gpu-2 again, never a recheck racing it.
- `start_agent`: the DaemonSet's agent on a node once it is labelled, ready once it reports.
- `run_test_pod`: the kubelet of `helm test`'s Pod: its own command, pointed at the test bed's
  coordinator, and its exit written as the Pod's phase, which helm waits for.
- `freeze`/`thaw`: a node's agent stopped (SIGSTOP) from the command that starts a rollout
  until a watch has printed the node's check. The test bed's node takes a second where a real
  one takes minutes; without it, the watch after the command would find the rollout well past
  the opening the page shows, or over.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coordinator.kube.client import MERGE_PATCH, path
from gpuctl.common.names import GPUDRIVER_PLURAL, GROUP, VERSION, Phase
from gpuctl.rollout.reasons import HoldKind
from testbed.cluster_agents import AGENT_SA, get_gpunode
from testbed.coordinator_rbac import token_kubeconfig
from testbed.demo.system import NAMESPACE, System
from testbed.fakehost.scenarios import arc_b580_in_tree
from testbed.harness.waiting import wait_until
from testbed.kwok_nodes import give_gpus
from testbed.rollout_live.scenario import busy_with_ollama, idle_again

NODES = ("gpu-1", "gpu-2", "gpu-3")
FIRST, BUSY = "gpu-1", "gpu-2"
KERNEL = "7.0.0-15-generic"
RELEASE = "gpuctl"  # the page's `helm install gpuctl`
WAIT_SECONDS = 120.0
TOKEN_SECONDS = 2 * 3600


class QuickStartBed:
    def __init__(self, system: System, driver: Mapping[str, Any]) -> None:
        self.system = system
        self.rig = system.rig
        self.driver = driver
        self._frozen: subprocess.Popen[bytes] | None = None

    @property
    def version(self) -> str:
        return str(self.driver["spec"]["kernelModule"]["version"])

    def add_nodes(self) -> None:
        [mapping] = self.driver["spec"]["kernelModule"]["kernelMappings"]
        if not re.fullmatch(mapping["regexp"], KERNEL):
            raise AssertionError(f"the page's kernelMappings do not map the nodes' {KERNEL}")
        for node in NODES:
            self.rig.add_node(
                node,
                lambda root: arc_b580_in_tree(root, kernel_release=KERNEL),
                labelled=False,
                kernel_release=KERNEL,
            )
            # What a kubelet labels its Node with (the chart's agent selects on the OS), and
            # the room for Pods it and the GPU's device plugin advertise.
            self._patch(path("", "v1", "nodes", name=node), {"metadata": {"labels": _OS}})
            give_gpus(self.rig.kube, node, 1)
        image = mapping["containerImage"].replace("$KERNEL_FULL_VERSION", KERNEL)
        self.rig.publish(self.version, KERNEL, image)
        busy_with_ollama(self.rig, BUSY)

    def free_busy_node(self) -> None:
        """What gpu-2's remedy says: ollama stopped."""
        idle_again(self.rig, BUSY)

    def unloaded_everywhere(self) -> bool:
        return not any(self.rig.hosts[n].real("sys/module/xe").exists() for n in NODES)

    # -- the chart's Pods -----------------------------------------------------------------

    def adopt_agent_account(self) -> None:
        self._patch(
            path("", "v1", "serviceaccounts", namespace=NAMESPACE, name=AGENT_SA),
            {
                "metadata": {
                    "labels": {"app.kubernetes.io/managed-by": "Helm"},
                    "annotations": {
                        "meta.helm.sh/release-name": RELEASE,
                        "meta.helm.sh/release-namespace": NAMESPACE,
                    },
                }
            },
        )

    def start_coordinator(self) -> None:
        deployments = self.rig.kube.request(
            "GET", path("apps", "v1", "deployments", namespace=NAMESPACE)
        )
        [deployment] = deployments["items"]
        account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        cluster = self.system.cluster
        token = cluster.service_account_token(NAMESPACE, account, expiration_seconds=TOKEN_SECONDS)
        self.rig.coordinator_kubeconfig = token_kubeconfig(
            self.system.folder / "chart-coordinator.kubeconfig",
            cluster.server,
            cluster.ca_cert,
            token,
        )
        self.rig.start_coordinator(
            # No GPUDriver carries this label: every one is managed, as by the chart's.
            "--gpudriver-selector=!testbed.gpuctl.dev/none",
            "--rollout-blocked-recheck=3600",
        )

    def start_agent(self, node: str) -> None:
        self.rig.start_agent(node)
        wait_until(f"{node}'s GPUNode", lambda: get_gpunode(self.rig.kube, node), WAIT_SECONDS)

    def agents_everywhere(self) -> bool:
        """The chart's DaemonSet has a ready agent Pod on every GPU node."""
        agents = path("apps", "v1", "daemonsets", namespace=NAMESPACE, name=f"{RELEASE}-agent")
        status = self.rig.kube.request("GET", agents).get("status") or {}
        ready = (status.get("desiredNumberScheduled"), status.get("numberReady"))
        return ready == (len(NODES), len(NODES))

    def run_test_pod(self, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """`helm test`'s Pod, once kwok has it Running: its command (with `env`), at the test
        bed's coordinator, its CA and a token of the Pod's ServiceAccount; the Pod then
        Succeeded or Failed by its exit code."""
        pod = wait_until("helm test's Pod Running", self._test_pod, WAIT_SECONDS)
        [container] = pod["spec"]["containers"]
        token = self.system.folder / "helm-test.token"
        token.write_text(
            self.system.cluster.service_account_token(
                NAMESPACE, pod["spec"]["serviceAccountName"], bound_pod=pod["metadata"]["name"]
            )
        )
        here = {
            "--coordinator": f"localhost:{self.rig.port}",
            "--ca-file": str(self.rig.folder / "ca.crt"),
            "--token-file": str(token),
        }
        args = [
            f"{flag}={here[flag]}" if (flag := arg.split("=", 1)[0]) in here else arg
            for arg in container["args"]
        ]
        [program, *words] = container["command"]
        done = subprocess.run(
            [str(Path(sys.executable).parent / program), *words, *args],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=WAIT_SECONDS,
            check=False,
        )
        ended = {
            "exitCode": done.returncode,
            "reason": "Completed" if not done.returncode else "Error",
        }
        self._patch(
            path(
                "",
                "v1",
                "pods",
                namespace=NAMESPACE,
                name=pod["metadata"]["name"],
                subresource="status",
            ),
            {
                "status": {
                    "phase": "Failed" if done.returncode else "Succeeded",
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "image": container["image"],
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": ended},
                        }
                    ],
                }
            },
        )
        return done

    def _test_pod(self) -> dict[str, Any] | None:
        answer = self.rig.kube.request(
            "GET",
            path("", "v1", "pods", namespace=NAMESPACE),
            query={"labelSelector": "app.kubernetes.io/component=test"},
        )
        running = [p for p in answer["items"] if (p.get("status") or {}).get("phase") == "Running"]
        return running[0] if running else None

    # -- pace -----------------------------------------------------------------------------

    def freeze(self, node: str) -> None:
        self._frozen = self.rig.agents[node]
        self._frozen.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        if self._frozen is not None:
            self._frozen.send_signal(signal.SIGCONT)
            self._frozen = None

    def rollout(self) -> dict[str, Any]:
        """The page's GPUDriver's status.rollout, as the coordinator last wrote it."""
        named = path(GROUP, VERSION, GPUDRIVER_PLURAL, name=self.driver["metadata"]["name"])
        return dict((self.rig.kube.request("GET", named).get("status") or {}).get("rollout") or {})

    def hold_released(self) -> bool:
        return self.rollout().get("holdKind") != HoldKind.AFTER_FIRST_NODE.value

    def busy_node_taken_up(self) -> bool:
        listed = {n["name"]: n["phase"] for n in self.rollout().get("nodes") or ()}
        return listed.get(BUSY) != Phase.BLOCKED.value

    def _patch(self, resource: str, body: dict[str, Any]) -> None:
        self.rig.kube.request("PATCH", resource, body=body, content_type=MERGE_PATCH)


_OS = {"kubernetes.io/os": "linux"}
