"""A reload flips only once a probe of its image on the node proved the image holds
/opt/lib/modules/<the node's kernel> (gpuctl/rollout/step/kernel_proof.py,
gpuctl/rollout/input/image_probe.py): KMM's `Exists` says only that the image pulls, and its
loader's copy fails for ever after the flip
unloaded the old module."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpuctl.common import names
from gpuctl.common.names import Phase
from gpuctl.rollout.actions import DeleteImageProbe, PatchNode, ProbeImage, RequestReport
from gpuctl.rollout.decide import decide
from gpuctl.rollout.input.facts import INSPECT, NodeFacts
from gpuctl.rollout.input.image_probe import (
    ImageProbe,
    ProbeOutcome,
    copy_command,
    probe_name,
    probe_pod,
    read_probe,
)
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.step.checking import step_checking
from gpuctl.rollout.step.kernel_proof import kernel_proof
from gpuctl.rollout.step.preparing import step_preparing
from tests.support.rollout_samples import (
    DRIVER,
    KMM,
    OLD,
    TARGET,
    ago,
    answered,
    loaded_labels,
    node,
    report,
    rollout,
)

IMAGE = "r.example/xe:fixed"
KERNEL = "6.8.0-40-generic"
PROBE = probe_name(DRIVER, "n1", IMAGE, KERNEL)
PULL = "registry-login"  # the Module's imageRepoSecret


def probe(outcome: ProbeOutcome, *, words: str = "", ended: float = 0.0) -> ImageProbe:
    finished = ago(ended) if outcome in (ProbeOutcome.HOLDS, ProbeOutcome.LACKS) else ""
    return ImageProbe(PROBE, IMAGE, KERNEL, outcome, words, finished)


LACKS = probe(
    ProbeOutcome.LACKS,
    words=f"exit code 1: cp: can't stat '/opt/lib/modules/{KERNEL}': No such file or directory",
)


def reload(
    phase: Phase = Phase.CHECKING,
    *,
    since: float = 5,
    probes: tuple[ImageProbe, ...] | None = (),
    kernel: str = KERNEL,
    **kwargs: Any,
) -> NodeFacts:
    """Node n1, KMM loaded at OLD, KMM found its target image `Exists`; its probes as given."""
    facts = node(phase=phase, since=since, labels=loaded_labels(OLD), **kwargs)
    return dataclasses.replace(
        facts, target_image=IMAGE, kernel_version=kernel, image_probes=probes
    )


def patches(actions: list[Any]) -> list[PatchNode]:
    return [a for a in actions if isinstance(a, PatchNode)]


def test_a_reload_check_makes_the_probe_and_waits_for_it_asking_nothing_else() -> None:
    facts = reload()
    step = step_checking(rollout([facts]), facts)
    assert step.actions == [ProbeImage("n1", IMAGE, KERNEL)]
    running = reload(probes=(probe(ProbeOutcome.RUNNING),))
    assert step_checking(rollout([running]), running).actions == []


def test_the_probe_is_kmms_own_copy_of_the_kernels_folder_on_the_node() -> None:
    pod = probe_pod(
        driver=DRIVER, namespace="gpuctl", node="n1", image=IMAGE, kernel=KERNEL, pull_secret=PULL
    )
    spec = pod["spec"]
    assert pod["metadata"]["name"] == PROBE
    assert spec["nodeName"] == "n1"
    assert spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["imagePullSecrets"] == [{"name": PULL}]
    [container] = spec["containers"]
    assert container["image"] == IMAGE
    # workerpodmanager.go's addCopyCommand, for dirName /opt and the node's kernel.
    kmm = (
        f"\nmkdir -p /tmp/opt/lib/modules;\ncp -R /opt/lib/modules/{KERNEL} /tmp/opt/lib/modules;\n"
    )
    assert container["command"] == ["/bin/sh", "-c"]
    assert container["args"] == [kmm] == [copy_command(KERNEL)]
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]


def test_a_lack_blocks_at_once_naming_image_and_kernel_and_flips_nothing() -> None:
    facts = reload(probes=(LACKS,))
    [patch] = patches(step_checking(rollout([facts]), facts).actions)
    assert patch.phase_to is Phase.BLOCKED
    assert patch.annotations[names.REASON_KIND] == "image-lacks-kernel"
    reason = str(patch.annotations[names.REASON])
    assert f"image {IMAGE} lacks /opt/lib/modules/{KERNEL}" in reason
    assert f"the node's kernel {KERNEL}" in reason
    assert f"the reload would unload {OLD}" in reason
    assert "No such file or directory" in reason
    assert KMM.version not in patch.labels  # KMM's version label stays at OLD


def test_a_proof_lets_the_check_go_on() -> None:
    facts = reload(probes=(probe(ProbeOutcome.HOLDS),))
    assert step_checking(rollout([facts]), facts).actions == [RequestReport("n1", facts.attempt)]


def test_unknown_is_never_proof_and_blocks_after_the_check_timeout() -> None:
    unread = reload(probes=None)
    assert step_checking(rollout([unread]), unread).actions == []  # nothing made, nothing asked
    late = reload(probes=None, since=61)
    [patch] = patches(step_checking(rollout([late]), late).actions)
    assert patch.annotations[names.REASON_KIND] == BlockKind.IMAGE_NOT_READY
    assert "Pod watch cannot be trusted" in str(patch.annotations[names.REASON])
    for outcome in (ProbeOutcome.RUNNING, ProbeOutcome.CANNOT_PULL):
        still = reload(probes=(probe(outcome, words="ImagePullBackOff"),), since=61)
        [patch] = patches(step_checking(rollout([still]), still).actions)
        assert patch.phase_to is Phase.BLOCKED
        assert patch.annotations[names.REASON_KIND] == BlockKind.IMAGE_NOT_READY
        assert f"not proven that image {IMAGE} holds /opt/lib/modules/{KERNEL}" in str(
            patch.annotations[names.REASON]
        )


def test_a_probe_that_ended_without_an_answer_runs_again() -> None:
    facts = reload(probes=(probe(ProbeOutcome.UNDECIDED, words="Evicted"),))
    assert step_checking(rollout([facts]), facts).actions == [DeleteImageProbe("n1", PROBE)]


def test_probes_of_another_image_are_deleted_and_never_count() -> None:
    old = ImageProbe("gpuctl-image-probe-old", "r.example/xe:old", KERNEL, ProbeOutcome.HOLDS)
    facts = reload(probes=(old,))
    actions = step_checking(rollout([facts]), facts).actions
    assert actions == [
        DeleteImageProbe("n1", "gpuctl-image-probe-old"),
        ProbeImage("n1", IMAGE, KERNEL),
    ]


def test_a_first_load_and_a_removal_need_no_probe() -> None:
    first = dataclasses.replace(
        node(phase=Phase.CHECKING), target_image=IMAGE, kernel_version=KERNEL
    )
    assert step_checking(rollout([first]), first).actions == [RequestReport("n1", first.attempt)]
    removal = dataclasses.replace(reload(), wanted=False)
    assert step_checking(rollout([removal]), removal).actions == [
        RequestReport("n1", removal.attempt)
    ]


def blocked_lacking(probes: tuple[ImageProbe, ...]) -> NodeFacts:
    facts = reload(
        Phase.BLOCKED,
        since=100,
        probes=(LACKS,),
    )
    lack = kernel_proof(rollout([facts]), facts).block
    assert lack is not None
    facts = dataclasses.replace(facts, annotations={**facts.annotations, names.REASON: lack.words})
    facts = dataclasses.replace(facts, image_probes=probes)
    return answered(facts, report=report())


def test_a_blocked_node_runs_its_probe_again_and_goes_on_once_a_fixed_image_proves_it() -> None:
    fresh = blocked_lacking((dataclasses.replace(LACKS, finished_at=ago(5)),))
    decision = decide(rollout([fresh]))
    assert not patches(decision.actions)  # still Blocked, reason kept
    assert not [a for a in decision.actions if isinstance(a, DeleteImageProbe)]
    old = blocked_lacking((dataclasses.replace(LACKS, finished_at=ago(31)),))
    assert DeleteImageProbe("n1", PROBE) in decide(rollout([old])).actions  # run it again
    gone = blocked_lacking(())
    decision = decide(rollout([gone]))
    assert ProbeImage("n1", IMAGE, KERNEL) in decision.actions
    assert not patches(decision.actions)  # while it runs again the node keeps its reason
    fixed = blocked_lacking((probe(ProbeOutcome.HOLDS),))
    [start] = patches(decide(rollout([fixed])).actions)
    assert start.phase_to is Phase.CHECKING


def test_the_kmm_write_deletes_the_nodes_probes_after_it() -> None:
    facts = reload(Phase.PREPARING, probes=(probe(ProbeOutcome.HOLDS),))
    facts = answered(facts, report=report())
    actions = step_preparing(rollout([facts]), facts).actions
    assert isinstance(actions[0], PatchNode)
    assert actions[0].phase_to is Phase.LOADING
    assert actions[0].labels[KMM.version] == TARGET
    assert actions[1:] == [DeleteImageProbe("n1", PROBE)]


def kubelet_pod(status: dict[str, Any]) -> dict[str, Any]:
    pod = probe_pod(driver=DRIVER, namespace="gpuctl", node="n1", image=IMAGE, kernel=KERNEL)
    return {**pod, "status": status}


def test_the_probes_end_is_read_as_a_kubelet_writes_it() -> None:
    ended = {"terminated": {"exitCode": 1, "message": "cp: can't stat", "finishedAt": "x"}}
    failed = kubelet_pod(
        {"phase": "Failed", "containerStatuses": [{"name": "probe", "state": ended}]}
    )
    assert read_probe(failed).outcome is ProbeOutcome.LACKS
    assert read_probe(failed).words == "exit code 1: cp: can't stat"
    ok = {"terminated": {"exitCode": 0, "finishedAt": "x"}}
    done = kubelet_pod(
        {"phase": "Succeeded", "containerStatuses": [{"name": "probe", "state": ok}]}
    )
    assert read_probe(done).outcome is ProbeOutcome.HOLDS
    pull = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}
    pulling = kubelet_pod(
        {"phase": "Pending", "containerStatuses": [{"name": "probe", "state": pull}]}
    )
    assert read_probe(pulling).outcome is ProbeOutcome.CANNOT_PULL
    assert read_probe(kubelet_pod({"phase": "Pending"})).outcome is ProbeOutcome.RUNNING
    evicted = kubelet_pod({"phase": "Failed", "reason": "Evicted"})
    assert read_probe(evicted).outcome is ProbeOutcome.UNDECIDED


def test_the_check_waits_for_the_probe_of_the_step_it_is_in() -> None:
    facts = answered(reload(probes=(probe(ProbeOutcome.RUNNING),)), INSPECT, report=report())
    assert step_checking(rollout([facts]), facts).actions == []
