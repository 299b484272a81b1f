"""Answer a RestoreRequest: undo the recorded changes, then inspect the node.

Around agent.restore_changes: a request without an id changes nothing (its answer could not
be matched, and an unmatched restore could run twice); otherwise every change is undone in
reverse order, each failure an entry in `errors`, and the report shows the node after. The
reader, writer and inspection are parameters.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.hostfs import HostFiles
from agent.restore_changes import restore_changes
from agent.sysfs_write import SysfsWriter
from gpuctl.api.v1alpha1 import agent_service_pb2 as api
from gpuctl.api.v1alpha1 import node_report_pb2 as pb


def restore_node(
    request: api.RestoreRequest,
    *,
    inspect: Callable[[], pb.NodeReport],
    files: HostFiles,
    writer: SysfsWriter,
) -> api.RestoreResult:
    result = api.RestoreResult(request_id=request.request_id)
    if not request.request_id:
        result.errors.append(
            "the RestoreRequest has no request_id: nothing was changed (its answer could not "
            "be matched)"
        )
        return result
    done = restore_changes(request.changes, files=files, writer=writer)
    result.restored.extend(done.restored)
    result.errors.extend(done.errors)
    try:
        result.report.CopyFrom(inspect())
    except Exception as error:  # what was restored must reach the coordinator regardless
        result.errors.append(f"the node could not be inspected afterwards: {error}")
    return result
