"""Remedies of the Blocked kinds the node's own devices decide (pure): the agent's blockers
(gpuctl.api NodeReport Blocker.Reason, gpuctl/rollout/step/writes.py maps them), a device
opened after the check (gpuctl/rollout/step/worker_hold.py) and a reboot that brought up a
busy module (gpuctl/rollout/step/reboots.py).
"""

from __future__ import annotations

from gpuctl.common import names
from gpuctl.rollout.reasons import BlockKind
from gpuctl.rollout.remedies.remedy import (
    INSPECT_FRESH,
    NAMESPACE,
    STATUS,
    Remedy,
    annotation,
)

RECHECKED = "The node is checked again every 30 s and goes on by itself once nothing holds it."

DEVICE_BLOCKS = {
    BlockKind.OPEN_CLIENTS: Remedy(
        summary="processes hold the GPU open: stop them (`gpuctl node inspect NODE` names them)",
        means=(
            "Processes hold the node's GPU devices (`/dev/dri`) open, a pod, a host process or "
            "a GPU daemon that neither the pause nor the drain takes off: unloading `xe` now "
            "would pull the driver from under them."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # every client, with its pod",
            "gpuctl rollout plan NAME  # what the node's step would pause and drain",
        ),
        fix=(
            "Stop the holders named. A GPU workload's pod: drained with "
            "`rollout.evictGPUPods: true`. A GPU daemon's pod: declare its DaemonSet in "
            f"`rollout.pause` and have it select on `{names.DRIVER_READY_LABEL}` "
            "(docs/gpu-daemons.md). A host process: stop it on the node. Closing the device "
            f"is enough. {RECHECKED}"
        ),
    ),
    BlockKind.VFS: Remedy(
        summary="SR-IOV VFs are enabled: stop the VMs using them, then disable them",
        means=(
            "A GPU has SR-IOV virtual functions enabled that the rollout may not disable: "
            "`rollout.disableIdleVFs` is off, or a VF is in use (handed to a VM, bound to "
            "another driver, open)."
        ),
        confirm=(f"{INSPECT_FRESH}  # the VFs, their drivers and VM holders (through VFIO)",),
        fix=(
            "Stop or migrate the VMs that use the VFs and unbind those from the passthrough "
            "driver. Then set `rollout.disableIdleVFs: true` (the agent needs the chart's "
            "`agent.allowNodeChanges`): the rollout disables idle VFs and restores them after "
            "the load. Or disable them yourself on the node "
            f"(`echo 0 > /sys/bus/pci/devices/PF/sriov_numvfs`). {RECHECKED}"
        ),
    ),
    BlockKind.MODULE_HOLDERS: Remedy(
        summary="another kernel module holds xe: unload it on the node first",
        means=(
            "Another kernel module holds `xe` (one that uses its symbols, say `xe_vfio_pci`): "
            "KMM's unloader removes `xe` first, so `modprobe -r xe` would fail with EBUSY, even "
            "where `kernelModule.modulesLoadingOrder` lists the holder."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # Module xe: ... held by ...",
            "lsmod | grep -w xe  # on the node: the Used by column",
        ),
        fix=(
            "Unload the holder on the node first (`modprobe -r HOLDER`, once nothing uses it); "
            f"listing it in `modulesLoadingOrder` does not help. {RECHECKED}"
        ),
    ),
    BlockKind.MODULE_IN_USE: Remedy(
        summary="xe has users the agent cannot see: find them (a hidden process, fbcon)",
        means=(
            "`xe` holds more references than the processes the agent can see account for: a "
            "process outside the agent's view (no `hostPID`) or an in-kernel user such as the "
            "framebuffer console."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # refcnt, clients and the blocker's words",
            "cat /sys/module/xe/refcnt  # on the node",
            "cat /sys/class/vtconsole/vtcon*/name  # on the node: a frame buffer console",
        ),
        fix=(
            "Run the agent as the chart does (`hostPID`, `CAP_SYS_PTRACE`) so it sees every "
            "process, and stop the user it then names; unbind the framebuffer console from "
            "the GPU (`echo 0 > /sys/class/vtconsole/vtconN/bind` on the node) or boot "
            f"without it. {RECHECKED}"
        ),
    ),
    BlockKind.BUILTIN: Remedy(
        summary="xe is built into this kernel: boot one with xe as a module, or opt the node out",
        means=(
            "The node's kernel has `xe` built in, not as a module: it can never be unloaded, "
            "so KMM cannot replace it."
        ),
        confirm=(
            "gpuctl node inspect NODE  # Module xe: built into the kernel",
            "grep /xe.ko /lib/modules/$(uname -r)/modules.builtin  # on the node",
        ),
        fix=(
            "Boot the node into a kernel that builds `xe` as a module (`CONFIG_DRM_XE=m`, as "
            "distribution kernels do), or opt the node out: "
            f"`kubectl label node NODE {names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE}`."
        ),
    ),
    BlockKind.TRANSITIONING: Remedy(
        summary="a load or unload of xe is in flight: wait; it is checked again by itself",
        means=(
            "A load or unload of `xe` was in flight on the node (its initstate `coming` or "
            "`going`) when the agent looked."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # Module xe: coming or going",
            "cat /sys/module/xe/initstate  # on the node",
            f"kubectl -n {NAMESPACE} get pods -o wide --field-selector spec.nodeName=NODE"
            "  # a KMM worker Pod at work",
        ),
        fix=(
            "Usually nothing: it ends within seconds and the node is checked again by itself. "
            "One that lasts is a `modprobe` stuck in the kernel (`dmesg` on the node says "
            "why), which may only end with a reboot."
        ),
    ),
    BlockKind.UNKNOWN_STATE: Remedy(
        summary="the agent cannot tell what holds the GPU: read its warnings, fix its access",
        means=(
            "The agent could not tell what holds the node's devices (a process whose files it "
            "cannot read, a module or device attribute it cannot read), or its report could "
            "not be read; unknown is never taken for idle."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # the blocker and the report's warnings name what was unreadable",
            "kubectl get gpunode NODE -o wide",
        ),
        fix=(
            "Give the agent what it reads: run it as the chart does (`hostPID`, "
            "`CAP_SYS_PTRACE`, the host's `/sys` and `/proc`), at a version the coordinator "
            f"supports (`gpuctl version`). {RECHECKED}"
        ),
    ),
    BlockKind.OPENED_AFTER_CHECK: Remedy(
        summary="the GPU was opened after the check: stop the holder; KMM waits until it is idle",
        means=(
            "Something opened the GPU after the check found it idle and before KMM's worker "
            "ran, so KMM's worker is held off the node (its Pods deleted and refused), the "
            "node's labels kept, until the node is checked idle again."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # the holder",
            f"{STATUS}  # opened after the check, before KMM acted: the holder",
            annotation(names.KMM_WORKER_HOLDS, on=f"namespace {NAMESPACE}"),
        ),
        fix=(
            "Stop the holder (a host daemon that started late; a GPU daemon: declare it in "
            "`rollout.pause`; a pod: keep `rollout.cordon` on). Once the node is idle its KMM "
            "write is made again after the checks and the hold is let go by itself "
            "(docs/rollout.md#opened-after-the-check). Do not take the node off the hold list "
            "by hand: KMM's unloader would then take `xe` away at its first idle moment."
        ),
    ),
    BlockKind.DRIVERLESS_HELD: Remedy(
        summary="no driver on the node, and the rollout is held: lift the hold it names",
        means=(
            "The node's agent reports its GPU with no driver in this boot (no `xe` loaded, "
            "every function unbound): KMM loads nothing there, as after a Node is deleted and "
            "registered again (KMM's labels go with the old object) and then reboots with the "
            "in-tree `xe` blacklisted, or a new node joins; it would start at once, outside "
            "`maxUnavailable`, but a rollout-wide hold (the reason names it) keeps every start."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # Module: not loaded; each function's driver: none",
            f"{STATUS}  # the hold",
        ),
        fix=(
            "Lift the hold the reason names (`gpuctl rollout resume` for a pause; a "
            "maintenance window opens by itself): the node then starts first and gets the "
            "target. Nothing else is needed; it is checked again by itself."
        ),
    ),
    BlockKind.REBOOTED_IN_USE: Remedy(
        summary="rebooted into a busy in-tree xe: stop its users, then blacklist the in-tree xe",
        means=(
            "The node rebooted and came back with a module that is not the verified one (the "
            "in-tree `xe`, autoloaded at boot) in use; KMM's loader would remove it from under "
            "its users, so KMM's worker is held off the node."
        ),
        confirm=(
            f"{INSPECT_FRESH}  # the holders; At boot: the in-tree xe loads by itself",
            annotation(names.REBOOTED) + "  # from which boot to which",
        ),
        fix=(
            "Stop the users named; once nothing holds the module the node is verified again "
            "and KMM loads its own. Blacklist the in-tree `xe` on the node so the next boot "
            "does not bring it up (docs/reboots.md#blacklisting-it)."
        ),
    ),
}
