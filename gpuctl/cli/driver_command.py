"""`gpuctl driver abandon NAME`: the way out for one GPUDriver when the coordinator is gone for
good — its Module deleted through the guard's audited way out, the GPUDriver released, and only
its own marks taken off the Nodes (gpuctl/cli/abandon_plan.py says which).

It refuses while a coordinator leads in the Module's namespace (a live Lease there): then
deleting the GPUDriver is the safe way, node by node. It changes nothing without `--yes`;
`--dry-run` (client) prints what it would do, and `--dry-run=server` also sends every write with
dryRun=All, so admission, validation and RBAC answer for them (the Module's delete, which its
guard judges by an annotation a dry run does not store, is asked of RBAC).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gpuctl.cli.abandon_api import AbandonApi
from gpuctl.cli.abandon_plan import NodeRelease, live_holder, node_releases
from gpuctl.cli.errors import CommandError
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.rollout_command import add_dry_run
from gpuctl.cli.source_flags import Clock, add_kube_flags, utc_now
from gpuctl.common import names

ABANDON_DESCRIPTION = f"""\
The way out for one GPUDriver when its coordinator is gone for good (the cluster is being
decommissioned, gpuctl cannot run again). In order: annotates each of the GPUDriver's KMM
Modules {names.ALLOW_DELETE_ANNOTATION}=REASON (the delete guard's audited way out) and deletes
it; takes {names.FINALIZER} off the GPUDriver; then, on each Node, removes only what this
GPUDriver's rollout left there: {names.TARGET_LABEL}=NAME, KMM's version label of its Modules,
the rollout's state label and annotations where they are NAME's, and the cordon where the
rollout recorded it as its own. Other GPUDrivers' labels and an admin's cordon stay.

CONSEQUENCE: KMM unloads the driver on every node of this GPUDriver at once, whether or not
its GPUs are in use. While a coordinator runs, delete the GPUDriver instead: it unloads the
nodes one by one, each after its checks."""

ABANDON_EPILOG = """\
exit codes: 0 abandoned (or, with --dry-run, the plan printed, or with --dry-run=server every
write accepted and nothing stored); 1 refused or failed (nothing,
or only what is printed, changed); 2 bad arguments. Host changes of a node the rollout was
preparing (annotation gpuctl.dev/prepare-changes) cannot be undone from the API: they are
printed for you to restore. See docs/uninstall.md."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    driver = commands.add_parser(
        "driver",
        help="a GPUDriver as a whole: abandon it when its coordinator is gone for good",
        description="Act on a GPUDriver as a whole.",
    )
    steps = driver.add_subparsers(title="commands", metavar="COMMAND", required=True)
    abandon = steps.add_parser(
        "abandon",
        help="delete a GPUDriver's Module and marks without a coordinator (unloads at once)",
        description=ABANDON_DESCRIPTION,
        epilog=with_examples(
            ABANDON_EPILOG,
            examples(
                (
                    "gpuctl driver abandon xe-driver --reason 'coordinator uninstalled' --dry-run",
                    "what it would delete and take off, changing nothing",
                ),
                (
                    "gpuctl driver abandon xe-driver --reason 'coordinator uninstalled' "
                    "--dry-run=server",
                    "the same, each write checked by the API server, nothing stored",
                ),
                ("gpuctl driver abandon xe-driver --reason 'coordinator uninstalled' --yes", ""),
            ),
        ),
    )
    abandon.add_argument("name", metavar="NAME", help="the GPUDriver")
    abandon.add_argument(
        "--reason",
        required=True,
        help="why (recorded on each Module and in the API server's audit log)",
    )
    abandon.add_argument(
        "--yes",
        action="store_true",
        help="do it: without --yes nothing is changed (nor with --dry-run, which needs none)",
    )
    add_dry_run(abandon)
    abandon.add_argument(
        "--force",
        action="store_true",
        help="abandon even while a coordinator holds a live Lease in the Module's namespace",
    )
    add_kube_flags(abandon)
    abandon.set_defaults(run=run_abandon)


def _module_name(module: Mapping[str, Any]) -> str:
    meta = module.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _refuse_while_led(
    api: AbandonApi, driver: str, modules: Sequence[Mapping[str, Any]], clock: Clock
) -> None:
    now = clock()
    for namespace in sorted({str(m["metadata"]["namespace"]) for m in modules}):
        for lease in api.leases(namespace):
            holder = live_holder(lease, now)
            if holder is not None:
                name = lease["metadata"]["name"]
                raise CommandError(
                    f"Lease {namespace}/{name} is held by {holder} and renewed: a coordinator "
                    f"is running. Delete GPUDriver {driver} instead (kubectl delete gpudriver "
                    f"{driver}): it unloads the nodes one by one, each after its checks. "
                    "--force abandons anyway"
                )


def _describe(release: NodeRelease) -> str:
    parts = []
    if release.labels:
        parts.append("labels " + ", ".join(release.labels))
    if release.annotations:
        parts.append("annotations " + ", ".join(release.annotations))
    if release.uncordon:
        parts.append("uncordon")
    return "; ".join(parts)


def _plan_lines(
    found: Mapping[str, Any] | None,
    modules: Sequence[Mapping[str, Any]],
    releases: Sequence[NodeRelease],
) -> list[str]:
    unloaded = sum(1 for r in releases if r.unloads)
    lines = [
        f"  Module {_module_name(module)}: annotate {names.ALLOW_DELETE_ANNOTATION}, delete "
        f"(KMM unloads it at once on every node it loaded; {unloaded} carry this GPUDriver's "
        "labels)"
        for module in modules
    ]
    if found is not None and names.FINALIZER in (found["metadata"].get("finalizers") or []):
        lines.append(f"  GPUDriver {found['metadata']['name']}: remove finalizer {names.FINALIZER}")
    lines += [f"  node {r.node}: remove {_describe(r)}" for r in releases]
    return lines


def _leftovers(releases: Sequence[NodeRelease]) -> list[str]:
    return [
        f"node {r.node}: the rollout's prepare step changed the host and cannot be undone "
        f"from the API; restore it by hand: {r.prepare_changes}"
        for r in releases
        if r.prepare_changes
    ]


def run_abandon(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    clock: Clock = utc_now,
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    api = AbandonApi(
        load_api_client(args.kubeconfig, args.context, args.request_timeout),
        server_dry_run=args.dry_run == "server",
    )
    driver = args.name
    if not args.reason.strip():
        raise CommandError("--reason must say why (it is recorded on the Module)")
    found = api.driver(driver)
    modules = api.modules(driver)
    if found is None and not modules:
        raise CommandError(f'no GPUDriver "{driver}" and no KMM Module labelled with it')
    if not args.force:
        _refuse_while_led(api, driver, modules, clock)
    version_labels = [
        names.kmm_version_label(str(m["metadata"]["namespace"]), str(m["metadata"]["name"]))
        for m in modules
    ]
    releases = node_releases(driver, version_labels, api.nodes())
    server_dry_run = args.dry_run == "server"
    doing = (args.yes and args.dry_run == "none") or server_dry_run
    dry = {"client": " (dry run)", "server": " (server dry run)"}.get(args.dry_run, "")
    out.write(f"abandoning GPUDriver {driver}{'' if doing else ' would'}{dry}:\n")
    for line in _plan_lines(found, modules, releases):
        out.write(line + "\n")
    if not doing:
        if args.dry_run == "client":
            return 0
        raise CommandError(
            f"nothing changed: abandoning {driver} unloads the driver on its nodes at once, "
            "busy or not; run again with --yes"
        )
    for module in modules:
        api.delete_module(module, args.reason)
    if found is not None and names.FINALIZER in (found["metadata"].get("finalizers") or []):
        api.release_driver(found)
    for release in releases:
        api.patch_node(release.node, release.patch())
    held = [r.node for r in releases if names.KMM_WORKER_HELD in r.annotations]
    for namespace in sorted({str(m["metadata"]["namespace"]) for m in modules}):
        api.drop_worker_holds(namespace, held)
    for line in [] if server_dry_run else _leftovers(releases):
        err.write(f"warning: {line}\n")
    out.write(
        f"abandoned GPUDriver {driver}{dry}: "
        + json.dumps({"modules": [_module_name(m) for m in modules], "nodes": len(releases)})
        + "\n"
    )
    return 0
