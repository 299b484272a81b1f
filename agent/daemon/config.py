"""Everything `gpuctl-agent run` is told, as one immutable value.

Intervals that the coordinator decides (heartbeat, rescan, report rate) arrive in Welcome;
the `default_*` ones here apply until the first Welcome and while disconnected (the loop
keeps inspecting then, so health stays truthful).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.daemon.backoff import Backoff
from gpuctl.common.client_transport import ClientTransport

DEFAULT_TOKEN_FILE = Path("/var/run/secrets/gpuctl/token")
DEFAULT_HEALTH_PORT = 9460
DEFAULT_GRPC_HEALTH_PORT = 9461


@dataclass(frozen=True)
class DaemonConfig:
    host_root: Path
    node_name: str
    transport: ClientTransport
    token_file: Path = DEFAULT_TOKEN_FILE
    health_address: str = "0.0.0.0"  # noqa: S104 - kubelet probes the pod (node) IP
    health_port: int = DEFAULT_HEALTH_PORT
    grpc_health_port: int = DEFAULT_GRPC_HEALTH_PORT
    backoff: Backoff = field(default_factory=lambda: Backoff(initial=1.0, cap=60.0))
    # How long to wait for Welcome after Hello.
    welcome_timeout: float = 30.0
    default_heartbeat_interval: float = 30.0
    default_rescan_interval: float = 300.0
    # udev bursts: fire after this much quiet, at most this long after the first event.
    debounce_quiet: float = 0.2
    debounce_max: float = 2.0
    udev: bool = True
    # Serve PrepareRequest/RestoreRequest by writing the host's sysfs (--allow-node-changes).
    allow_node_changes: bool = False
    # Healthy while the last successful inspection is at most this many rescan intervals old.
    stale_rescans: float = 3.0
    # ... and never judged stale sooner than this many seconds.
    stale_floor: float = 60.0

    def stale_after(self, rescan_interval: float) -> float:
        return max(self.stale_floor, self.stale_rescans * rescan_interval)
