"""Answer a PrepareRequest: inspect afresh, plan, change what may be changed, inspect again.

The flow around the pure planner (agent.prepare_plan) and the executor
(agent.apply_changes): a request that names another module or carries no id is answered
with an error and changes nothing; a refused plan changes nothing and answers the blockers
with the report it was decided on; otherwise the changes are made (up to the first failed
write) and the node is inspected again, so `ready` and `blockers` describe the node after.
The agent keeps no state: what it changed travels back in `changes`. The inspection and the
writer are parameters. A holder module blocks, even one the request says the unload removes
too (`unloaded_with`): KMM removes the module first.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.apply_changes import apply_changes
from agent.prepare_plan import plan_preparation, remaining_blockers
from agent.sysfs_write import SysfsWriter
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb

Inspect = Callable[[], pb.NodeReport]


def request_problem(request_id: str, module_name: str, inspected_module: str) -> str:
    """Why a PrepareRequest cannot be served, in words ("" when it can)."""
    if not request_id:
        return "the PrepareRequest has no request_id: its answer could not be matched"
    if not module_name:
        return "the PrepareRequest names no module"
    if module_name != inspected_module:
        return (
            f"this agent manages the {inspected_module} module; it cannot prepare an unload "
            f"of {module_name!r}"
        )
    return ""


def prepare_node(
    request: api.PrepareRequest,
    *,
    inspected_module: str,
    inspect: Inspect,
    writer: SysfsWriter,
) -> api.PrepareResult:
    result = api.PrepareResult(request_id=request.request_id)
    problem = request_problem(request.request_id, request.module_name, inspected_module)
    if problem:
        result.error = problem
        return result
    before = inspect()
    unloaded = tuple(request.unloaded_with)
    # The module's PCI driver carries the module's name (xe).
    plan = plan_preparation(
        before,
        driver=request.module_name,
        allow_unbind=request.allow_unbind,
        allow_disable_vfs=request.allow_disable_vfs,
        unloaded_with=unloaded,
    )
    if plan.refused or not plan.changes:
        blockers = plan.refusals if plan.refused else tuple(remaining_blockers(before, unloaded))
        result.ready = not blockers
        result.blockers.extend(blockers)
        result.report.CopyFrom(before)
        return result
    applied = apply_changes(plan.changes, writer)
    result.changes.extend(applied.done)
    result.error = applied.error
    try:
        after = inspect()
    except Exception as error:  # the changes made must reach the coordinator whatever happens
        afterwards = f"the node could not be inspected afterwards: {error}"
        result.error = "; ".join(e for e in (applied.error, afterwards) if e)
        return result
    result.report.CopyFrom(after)
    left = remaining_blockers(after, unloaded)
    result.blockers.extend(left)
    result.ready = not applied.error and not left
    return result
