"""`gpuctl preflight --kernel K [NAME...]`: would each GPUDriver's driver load on that kernel?

For kernel upgrades ahead of time: before nodes reboot into K, check that a kernel mapping
serves K, that the image for K exists (KMM's own PreflightValidation pulls it the way a node
would: gpuctl/cli/kmm_preflight.py) and how its modules get signed. The verdict is pure
(gpuctl/cli/preflight_verdict.py); this file reads the GPUDrivers and asks KMM.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from gpuctl.cli.gpudriver_api import GpuDriverApi
from gpuctl.cli.help_format import examples, with_examples
from gpuctl.cli.kmm_preflight import add_timeout_flag, check_images
from gpuctl.cli.kmm_touch import module_ref
from gpuctl.cli.kube_client import load_api_client
from gpuctl.cli.object_output import add_output, render_document
from gpuctl.cli.preflight_verdict import ImageCheck, exit_code, render, verdict
from gpuctl.cli.source_flags import add_kube_flags
from gpuctl.gpudriver.targeting import mapping_for

DESCRIPTION = """\
Would each GPUDriver's driver load on KERNEL? Checks, for every GPUDriver (or those named):
that one of its kernel mappings matches KERNEL (the first that matches is the one KMM uses),
that the image for KERNEL exists (KMM's PreflightValidation pulls it, or builds and signs it,
the way a node would; the PreflightValidation is deleted afterwards), and whether KMM signs
its modules (nodes with Secure Boot refuse unsigned ones). Run it before nodes reboot into a
new kernel. Creating a PreflightValidation needs the right to create
preflightvalidations.kmm.sigs.x-k8s.io."""

EPILOG = """\
exit codes: 0 every GPUDriver would load on KERNEL; 1 one would not (no mapping, image
missing) or the API could not be read; 2 bad arguments; 3 none fails but an image could not
be checked (KMM without PreflightValidation v1beta2, or no answer within --timeout)."""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "preflight",
        help="check a kernel before nodes boot it: mapping, image, signing",
        description=DESCRIPTION,
        epilog=with_examples(
            EPILOG,
            examples(
                ("gpuctl preflight --kernel 6.8.0-63-generic", "every GPUDriver"),
                ("gpuctl preflight --kernel 6.8.0-63-generic xe-driver -o json", ""),
            ),
        ),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="GPUDrivers (default: all)")
    parser.add_argument(
        "--kernel", required=True, metavar="KERNEL", help="the kernel release, as `uname -r`"
    )
    add_output(
        parser,
        ("table", "json", "yaml"),
        "table (default) for people; json or yaml: a verdict per GPUDriver as data",
    )
    add_timeout_flag(parser)
    add_kube_flags(parser)
    parser.set_defaults(run=run)


def run(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    api_client = load_api_client(args.kubeconfig, args.context, args.request_timeout)
    drivers_api = GpuDriverApi(api_client)
    drivers = (
        [drivers_api.get(name) for name in args.names] if args.names else drivers_api.list_all()
    )
    drivers = [d for d in drivers if (d.get("spec") or {}).get("kernelModule")]
    asked = {str(d["metadata"]["name"]): module_ref(d) for d in drivers if _mapped(d, args.kernel)}
    found = check_images(
        api_client,
        args.kernel,
        [ref for ref in asked.values() if ref is not None],
        timeout=args.timeout,
        now=now,
        sleep=sleep,
    )
    no_module = ImageCheck(None, "the GPUDriver has no Module yet (status.module): not checked")
    verdicts = [
        verdict(
            d,
            args.kernel,
            found.get(asked.get(str(d["metadata"]["name"])) or ("", ""), no_module),
        )
        for d in sorted(drivers, key=lambda d: str(d["metadata"]["name"]))
    ]
    if args.output == "table":
        out.write(render(verdicts))
    else:
        out.write(render_document([v.as_json() for v in verdicts], args.output))
    return exit_code(verdicts)


def _mapped(driver: Mapping[str, Any], kernel: str) -> bool:
    kernel_module = (driver.get("spec") or {}).get("kernelModule") or {}
    return mapping_for(kernel, kernel_module.get("kernelMappings") or []) is not None
