"""`gpuctl rollout`: follow, pause, resume and retry a GPUDriver's node-by-node rollout."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from gpuctl.cli.errors import CommandError
from gpuctl.cli.gpudriver_api import GpuDriverApi
from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.rollout_facts import gather_facts, module_selector, plan_settings
from gpuctl.cli.rollout_plan import plan_rollout, render_plan
from gpuctl.cli.rollout_view import (
    EXIT_NOT_DONE,
    RolloutView,
    exit_code,
    from_gpudriver,
    node_changes,
    render_status,
    summary_line,
)
from gpuctl.cli.source_flags import Clock, add_kube_flags, utc_now

STATUS_EPILOG = """\
exit codes: 0 the rollout is complete; 1 it failed (paused at its failure budget) or the
GPUDriver could not be read; 2 bad arguments; 3 not done yet (progressing, held after the
first node, or paused). With --watch, waits for 0 or 1 (or --timeout: 3)."""


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
        epilog=STATUS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_name(status)
    status.add_argument("-w", "--watch", action="store_true", help="follow until done or failed")
    status.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="with --watch: give up after this long (default: no limit)",
    )
    status.set_defaults(run=run_status)

    pause = steps.add_parser(
        "pause",
        help="stop starting nodes (nodes mid-step finish their step)",
        description="Set spec.rollout.paused: no new node is started.",
    )
    _add_name(pause)
    pause.set_defaults(run=run_pause)

    resume = steps.add_parser(
        "resume",
        help="continue a paused rollout, or release the hold after the first node",
        description="Clear spec.rollout.paused and release the hold after the first node for "
        "the current target version.",
    )
    _add_name(resume)
    resume.set_defaults(run=run_resume)

    plan = steps.add_parser(
        "plan",
        help="dry run: the order nodes would go in and what would stop each now",
        description="A dry run of the rollout from what is true now: every targeted node in "
        "the coordinator's order, and whether it would go, wait (GPU pods must finish) or is "
        "blocked (busy devices, claims, no fresh agent report), with the reasons. Changes "
        "nothing.",
    )
    _add_name(plan)
    plan.set_defaults(run=run_plan)

    retry = steps.add_parser(
        "retry",
        help="try a Failed or Blocked node again",
        description="Put a Failed or Blocked node back to Pending; the coordinator starts it "
        "again from the check step, and a failure no longer counts against the budget.",
    )
    retry.add_argument("node", metavar="NODE", help="the node to retry")
    add_kube_flags(retry)
    retry.set_defaults(run=run_retry)


def _add_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", metavar="NAME", help="the GPUDriver (default: the only one)"
    )
    add_kube_flags(parser)


def _api(args: argparse.Namespace) -> GpuDriverApi:
    return GpuDriverApi(load_api_client(args.kubeconfig, args.context))


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
    view = _rollout_of(obj, name)
    if args.watch:
        return _watch(api, name, args.timeout, out, clock)
    out.write(render_status(view, clock()))
    code = exit_code(view)
    return EXIT_NOT_DONE if code is None else code


def _watch(api: GpuDriverApi, name: str, timeout: float | None, out: TextIO, clock: Clock) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    previous: RolloutView | None = None
    while True:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            out.write(f"gave up waiting after {timeout:g}s\n")
            return EXIT_NOT_DONE
        for obj in api.changes(name, remaining):
            view = _rollout_of(obj, name)
            if previous is None or summary_line(view, clock()) != summary_line(previous, clock()):
                out.write(summary_line(view, clock()) + "\n")
            for node in node_changes(previous, view):
                out.write(
                    f"  {node.name}: {node.phase}"
                    + (f" ({node.reason})" if node.reason else "")
                    + "\n"
                )
            out.flush()
            previous = view
            code = exit_code(view)
            if code is not None:
                return code


def run_plan(args: argparse.Namespace, out: TextIO = sys.stdout, clock: Clock = utc_now) -> int:
    api_client = load_api_client(args.kubeconfig, args.context)
    driver = GpuDriverApi(api_client).resolve(args.name)
    name = str(driver["metadata"]["name"])
    target = str((driver.get("spec", {}).get("kernelModule") or {}).get("version") or "")
    if not target:
        raise CommandError(
            f'GPUDriver "{name}" has no kernelModule.version: without one KMM reloads every '
            "node at once and there is no rollout to plan"
        )
    facts = gather_facts(api_client, module_selector(api_client, driver), clock)
    out.write(render_plan(name, target, plan_rollout(target, plan_settings(driver), facts)))
    return 0


def run_pause(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    api = _api(args)
    name = str(api.resolve(args.name)["metadata"]["name"])
    api.set_paused(name, paused=True, resumed_version=None)
    out.write(f"rollout of {name} paused: nodes mid-step finish their step, no new node starts\n")
    return 0


def run_resume(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    api = _api(args)
    obj = api.resolve(args.name)
    name = str(obj["metadata"]["name"])
    version = (obj.get("spec", {}).get("kernelModule") or {}).get("version")
    api.set_paused(name, paused=False, resumed_version=str(version) if version else None)
    released = f" (hold released for {version})" if version else ""
    out.write(f"rollout of {name} resumed{released}\n")
    return 0


def run_retry(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    was = _api(args).retry_node(args.node)
    out.write(f"node {args.node} was {was}: back to Pending, the coordinator will start it again\n")
    return 0
