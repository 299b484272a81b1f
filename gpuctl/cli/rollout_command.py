"""`gpuctl rollout`: follow, pause, resume and retry a GPUDriver's node-by-node rollout."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from gpuctl.cli.errors import CommandError
from gpuctl.cli.gpudriver_api import DRY_RUN_CHOICES, GpuDriverApi
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kmm_touch import module_ref, module_version
from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.object_output import add_output, render_document, render_names
from gpuctl.cli.rollout_facts import (
    gather_facts,
    get_images_config,
    get_module,
    get_signing_certificates,
)
from gpuctl.cli.rollout_history import plan_undo, render_history
from gpuctl.cli.rollout_plan import RolloutPlanInput, plan_document, plan_rollout, render_plan
from gpuctl.cli.rollout_view import (
    EXIT_COMPLETE,
    EXIT_NEEDS_YOU,
    EXIT_NOT_DONE,
    RolloutView,
    acted_on,
    awaits_first_status,
    exit_code,
    from_gpudriver,
    needs_you,
    removal_finished,
    removal_line,
    render_status,
    watch_lines,
)
from gpuctl.cli.source_flags import Clock, add_kube_flags, utc_now
from gpuctl.common import names
from gpuctl.gpudriver.gitops import gitops_owner

GPUDRIVER_RESOURCE = f"gpudriver.{names.GROUP}"

STATUS_EPILOG = """\
exit codes: 0 the rollout is complete; 1 it failed (paused at its failure budget) or the
GPUDriver could not be read; 2 bad arguments; 3 not done yet (progressing, held after the
first node, or paused). --watch follows it, printing each change and an estimate of the time
left, until 0 or 1; or 4 where it waits for you, saying what to do: held after its first node
(`gpuctl rollout resume`), paused, refused or rolled back, no node targeted, every node left
Blocked; or --timeout: 3. A deleted GPUDriver's: 0 once no node has its driver."""


PLAN_DESCRIPTION = """\
A dry run of the pending change by the coordinator's own decision, from what is true now; it
changes nothing. Every node KMM would touch for the GPUDriver, in the order the coordinator
would start them, with what the coordinator does to it first and, for a node that starts or
waits its turn, where its checks take it on its agent's latest report (the GPUNode). The
target is the spec's version; the plan does not ask the Prometheus gate nor the agents."""

PLAN_EPILOG = f"""\
columns:
  ORDER   the order the coordinator would start nodes in (already cordoned or NotReady first)
  NOW     the node's rollout state, and the version it is about
  ACTION  what KMM would do:
          load     wanted, not yet loaded by KMM (first install); a live xe, in-tree or
                   not, is removed first by KMM's loader: that is an unload
          reload   labelled for another version or configuration: unload, then load
          unload   no longer wanted: the GPUDriver is being deleted, its kernelModule was
                   removed, the node left the node selector, or no kernel mapping serves
                   its kernel
          none     at the target already
  CHANGE  the action in words: from which version to which, why a node is unloaded
  NEXT    the coordinator's first move: start, wait (Held, MaxUnavailable, NodeNotReady,
          Blocked, GateNotAsked), step (PHASE); after a placement (Pending, Skipped, ...)
  WOULD   go       it starts and its checks pass to the agent's preparation, or it is in a
                   step already
          wait     something passes by itself: a hold, maxUnavailable, the gate, GPU pods
                   (evictGPUPods is off)
          blocked  a person must act, now or at its turn: busy devices, allocated claims,
                   NotReady, a Blocked or Failed node, or something unknown (no fresh agent
                   report, claims that cannot be listed): unknown is never safe
          skip     opted out ({names.OPT_OUT_LABEL}={names.OPT_OUT_VALUE})
          done     at the target
  WHY     the coordinator's words; "at its turn:" where its checks go once a wait is over

Nodes neither wanted nor carrying {names.TARGET_LABEL}=NAME are not listed: KMM does not
touch them. Exit code 0 when the plan is printed."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rollout = commands.add_parser(
        "rollout",
        help="follow and steer a GPUDriver's node-by-node driver rollout",
        description=(
            "The coordinator moves every targeted node to kernelModule.version one node at a "
            "time: check, cordon, prepare, label for KMM, verify, uncordon. These commands "
            "follow it and give the admin's hand: pause, resume (also releases the hold after "
            "the first node) and retry a failed or blocked node."
        ),
    )
    steps = rollout.add_subparsers(title="commands", metavar="COMMAND", required=True)

    status = steps.add_parser(
        "status",
        help="progress: which node is in which step, what blocks whom",
        description="Show the rollout's progress: nodes updated, and each node not done yet "
        "with its step, how long it has been there and why.",
        epilog=with_examples(
            STATUS_EPILOG,
            examples(
                ("gpuctl rollout status", "the only GPUDriver's rollout, once"),
                ("gpuctl rollout status xe-driver -w", "follow it until it ends or needs you"),
                (
                    "gpuctl rollout status xe-driver -o jsonpath='{.status.rollout.state}'",
                    "its state alone, for a script (the exit code is the same)",
                ),
            ),
        ),
    )
    _add_name(status)
    status.add_argument(
        "-w",
        "--watch",
        action="store_true",
        help="follow until complete, failed, or waiting for you (exit codes below)",
    )
    status.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="with --watch: give up after this long (default: no limit)",
    )
    add_output(
        status,
        ("table", "json", "yaml", "name"),
        "table (default) for people; json or yaml: the GPUDriver as the API serves it (its "
        "status.rollout and conditions), name: gpudriver.gpuctl.dev/NAME; the exit code is the "
        "same",
    )
    status.set_defaults(run=run_status)

    pause = steps.add_parser(
        "pause",
        help="stop starting nodes (nodes mid-step finish their step)",
        description="Set spec.rollout.paused: no new node is started.",
        epilog=examples(
            ("gpuctl rollout pause xe-driver", ""),
            ("gpuctl rollout pause xe-driver --dry-run=server", "check RBAC and admission only"),
        ),
    )
    _add_name(pause)
    add_dry_run(pause)
    pause.set_defaults(run=run_pause)

    resume = steps.add_parser(
        "resume",
        help="continue a paused rollout, or release the hold after the first node",
        description="Clear spec.rollout.paused and release the hold after the first node for "
        "the current target version.",
        epilog=examples(
            ("gpuctl rollout resume", "the only GPUDriver: after checking its first node"),
            ("gpuctl rollout resume xe-driver", ""),
        ),
    )
    _add_name(resume)
    add_dry_run(resume)
    resume.set_defaults(run=run_resume)

    plan = steps.add_parser(
        "plan",
        help="dry run by the coordinator's own decision: what it would do to each node now",
        description=PLAN_DESCRIPTION,
        epilog=with_examples(
            PLAN_EPILOG,
            examples(
                ("gpuctl rollout plan", "what the coordinator would do to each node now"),
                ("gpuctl rollout plan xe-driver -o yaml", "the same plan as data"),
            ),
        ),
    )
    _add_name(plan)
    add_output(
        plan,
        ("table", "json", "yaml"),
        "table (default); json or yaml: the same plan as data, a field per column",
    )
    plan.set_defaults(run=run_plan)

    history = steps.add_parser(
        "history",
        help="the driver revisions the GPUDriver rolled out",
        description="List the revisions recorded in status.revisions: the Module's KMM "
        "version, images, how many nodes ran it, when it was rolled out and completed.",
        epilog=examples(("gpuctl rollout history xe-driver", "")),
    )
    _add_name(history)
    add_output(
        history,
        ("table", "json", "yaml"),
        "table (default); json or yaml: status.revisions as the API serves it",
    )
    history.set_defaults(run=run_history)

    undo = steps.add_parser(
        "undo",
        help="take the fleet back to an earlier revision, node by node",
        description="Rewrite spec.kernelModule from a recorded revision (default: the "
        "previous one), like `kubectl rollout undo`: the coordinator takes every node there "
        "one at a time with the same settings and checks (no unload while busy; the hold "
        "after the first node applies).",
        epilog=examples(
            ("gpuctl rollout undo xe-driver", "back to the previous revision"),
            ("gpuctl rollout undo xe-driver --to-revision 2", "to revision 2 of `history`"),
        ),
    )
    _add_name(undo)
    undo.add_argument(
        "--to-revision", type=int, metavar="N", help="the revision to go back to (see history)"
    )
    undo.add_argument(
        "--force",
        action="store_true",
        help="write spec.kernelModule even where a GitOps tool (Argo CD, Flux, Fleet) applies "
        "it; without this, undo refuses there and names the revision to put back in Git",
    )
    add_dry_run(undo)
    undo.set_defaults(run=run_undo)

    retry = steps.add_parser(
        "retry",
        help="try a Failed or Blocked node again",
        description="Put a Failed or Blocked node of the GPUDriver's rollout back to Pending; "
        "the coordinator starts it again from the check step, and a failure no longer counts "
        "against the budget. `gpuctl rollout retry NODE`, the older form, still works (with a "
        "warning) where NODE names no GPUDriver.",
        epilog=examples(
            ("gpuctl rollout retry --node gpu-2", "the node's own GPUDriver"),
            ("gpuctl rollout retry xe-driver --node gpu-2", ""),
        ),
    )
    retry.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="the GPUDriver whose rollout has the node (default: the node's own); a node of "
        "another GPUDriver is refused",
    )
    retry.add_argument("--node", metavar="NODE", help="the Failed or Blocked node to retry")
    add_kube_flags(retry)
    add_dry_run(retry)
    retry.set_defaults(run=run_retry)


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", metavar="NAME", help="the GPUDriver (default: the only one)"
    )
    add_kube_flags(parser)


def _api(args: argparse.Namespace) -> GpuDriverApi:
    api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
    return GpuDriverApi(api_client, getattr(args, "dry_run", "none"))


def add_dry_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        nargs="?",
        const="client",
        default="none",
        choices=DRY_RUN_CHOICES,
        help="as kubectl's: client reads what it needs and writes nothing (its line ends "
        "'(dry run)'); server sends the write with dryRun=All (admission, validation and RBAC "
        "run, nothing is stored) "
        "(default: %(default)s; --dry-run alone: client)",
    )


def _dry(args: argparse.Namespace) -> str:
    """What the line a write prints ends with: kubectl's "(dry run)" or "(server dry run)"."""
    return {"client": " (dry run)", "server": " (server dry run)"}.get(args.dry_run, "")


def _rollout_of(obj: object, name: str) -> RolloutView:
    view = from_gpudriver(obj) if isinstance(obj, dict) else None
    if view is None:
        raise CommandError(
            f'GPUDriver "{name}" has no versioned rollout: set spec.kernelModule.version'
        )
    return view


def run_status(args: argparse.Namespace, out: TextIO = sys.stdout, clock: Clock = utc_now) -> int:
    api = _api(args)
    obj = api.resolve(args.name)
    name = str(obj["metadata"]["name"])
    if removal_finished(obj) and args.output == "table":
        out.write(removal_line(name))
        return EXIT_COMPLETE
    if args.watch and awaits_first_status(obj) and args.output == "table":
        return _watch(api, name, args.timeout, out, clock)
    view = _rollout_of(obj, name)
    if args.watch:
        if args.output != "table":
            raise CommandError(f"--watch prints changes as text; drop -o {args.output}")
        return _watch(api, name, args.timeout, out, clock)
    if args.output == "table":
        out.write(render_status(view, clock()))
    else:
        out.write(
            render_names(GPUDRIVER_RESOURCE, [obj])
            if args.output == "name"
            else render_document(obj, args.output)
        )
    code = exit_code(view)
    return EXIT_NOT_DONE if code is None else code


def _watch(api: GpuDriverApi, name: str, timeout: float | None, out: TextIO, clock: Clock) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    previous: RolloutView | None = None
    told_first = False
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            out.write(f"gave up waiting after {timeout:g}s\n")
            return EXIT_NOT_DONE
        for obj in api.changes(name, remaining):
            if removal_finished(obj):
                out.write(removal_line(name))
                return EXIT_COMPLETE
            if awaits_first_status(obj):
                if not told_first:
                    out.write(f"waiting for the coordinator's first status of {name}\n")
                    out.flush()
                    told_first = True
                continue
            view = _rollout_of(obj, name)
            out.write(watch_lines(previous, view, clock()))
            out.flush()
            previous = view
            code = exit_code(view)
            if code is not None:
                return code
            todo = needs_you(view)
            if todo and not acted_on(obj, view) and not _blocked_node_retried(api, view):
                out.write(f"waiting for you: {todo}\n")
                return EXIT_NEEDS_YOU


def _blocked_node_retried(api: GpuDriverApi, view: RolloutView) -> bool:
    """A node the status lists as Blocked is Blocked no more on its Node (`gpuctl rollout
    retry` put it back, or it went on): the status is older than the Node, and `--watch`
    waits for the coordinator's next one rather than ending on it."""
    return any(
        api.node_phase(node.name) not in (None, "Blocked")
        for node in view.nodes
        if node.phase == "Blocked"
    )


def run_plan(args: argparse.Namespace, out: TextIO = sys.stdout, clock: Clock = utc_now) -> int:
    api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
    driver = GpuDriverApi(api_client).resolve(args.name)
    module = get_module(api_client, driver)
    if module is not None and not module_version(module):
        ref = "/".join(module_ref(driver) or ("?", "?"))
        raise CommandError(
            f"Module {ref} has no version: an older gpuctl-coordinator wrote it, and KMM loads "
            "and unloads its nodes without the rollout; upgrade gpuctl-coordinator"
        )
    facts = gather_facts(api_client, clock)
    images_config, images_unknown = get_images_config(api_client, module)
    plan = plan_rollout(
        RolloutPlanInput(
            driver,
            module,
            facts.nodes,
            claims_unknown=facts.claims_unknown,
            claims=facts.claims,
            drivers=GpuDriverApi(api_client).list_all(),
            images_config=images_config,
            images_unknown=images_unknown,
            signing_certificates=get_signing_certificates(api_client, driver),
            now=clock(),
        )
    )
    if args.output == "table":
        out.write(render_plan(plan))
    else:
        out.write(render_document(plan_document(plan), args.output))
    return 0


def run_pause(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    api = _api(args)
    name = str(api.resolve(args.name)["metadata"]["name"])
    api.set_paused(name, paused=True, resumed_version=None)
    out.write(
        f"rollout of {name} paused{_dry(args)}: nodes mid-step finish their step, no new node "
        "starts\n"
    )
    return 0


def run_resume(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    api = _api(args)
    obj = api.resolve(args.name)
    name = str(obj["metadata"]["name"])
    # The hold after the first node is about the version the rollout moves to: the Module's
    # KMM version, which the coordinator states in status.rollout.targetVersion.
    version = ((obj.get("status") or {}).get("rollout") or {}).get("targetVersion")
    api.set_paused(name, paused=False, resumed_version=str(version) if version else None)
    released = f" (hold released for {version})" if version else ""
    out.write(f"rollout of {name} resumed{released}{_dry(args)}\n")
    return 0


def run_history(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    driver = _api(args).resolve(args.name)
    if args.output == "table":
        out.write(render_history(driver))
    else:
        revisions = list((driver.get("status") or {}).get("revisions") or [])
        out.write(render_document(revisions, args.output))
    return 0


def run_undo(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    api = _api(args)
    driver = api.resolve(args.name)
    name = str(driver["metadata"]["name"])
    undo = plan_undo(driver, args.to_revision)
    owner = gitops_owner(driver)
    if owner and not args.force:
        raise CommandError(
            f"gpudriver/{name}: spec.kernelModule is applied by {owner}; its next sync would "
            f"undo this. Put revision {undo.revision['revision']} "
            f"({undo.revision['version']}) back in Git instead, or pass --force (and turn off "
            "the tool's self-heal for it)"
        )
    api.patch_driver(name, undo.patch)
    out.write(
        f"gpudriver/{name} rolled back to revision {undo.revision['revision']} "
        f"({undo.revision['version']}){_dry(args)}: the coordinator takes the nodes there one at "
        "a time\n"
    )
    return 0


def run_retry(args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    api = _api(args)
    if args.node is not None:
        # Without NAME the node's own label says whose rollout it is in (one GPUDriver or many).
        driver = str(api.get(args.name)["metadata"]["name"]) if args.name else None
        node = args.node
    elif args.name is None:
        raise CommandError("which node? gpuctl rollout retry [NAME] --node NODE")
    elif api.find(args.name) is not None:
        raise CommandError(f'which node of GPUDriver "{args.name}"? add --node NODE')
    else:
        # The older form, `retry NODE`, where NODE names no GPUDriver: any GPUDriver's node.
        err.write(
            "warning: `gpuctl rollout retry NODE` is deprecated; use `gpuctl rollout retry "
            f"--node {args.name}`\n"
        )
        node, driver = args.name, None
    was = api.retry_node(node, driver)
    out.write(
        f"node {node} was {was}: back to Pending{_dry(args)}, the coordinator will start it again\n"
    )
    return 0
