"""The Helm chart and the coordinator agree: its flags exist, its values parse."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from agent.__main__ import build_parser as build_agent_parser
from coordinator.main import parse_args
from gpuctl.common.names import SERVING_LABEL

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpuctl"
GRPC_FLAG_VALUES = {
    "--grpc-port": "port",
    "--agent-audience": "agentAudience",
    "--heartbeat-interval": "heartbeatSeconds",
    "--rescan-interval": "rescanSeconds",
    "--report-freshness": "reportFreshnessSeconds",
    "--max-reports-per-minute": "maxReportsPerMinute",
    "--max-message-bytes": "maxMessageBytes",
    "--inspect-timeout": "inspectTimeoutSeconds",
}


def test_chart_metadata_and_values_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["name"] == "gpuctl"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["openshift"]["enabled"] is False
    assert values["coordinator"]["replicas"] >= 2


def test_every_flag_the_deployment_passes_exists(tmp_path: Path) -> None:
    template = (CHART / "templates" / "coordinator-deployment.yaml").read_text()
    flags = re.findall(r"- (--[a-z-]+)=", template)
    assert "--namespace" in flags
    assert "--module-loader-service-account" in flags
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    values, kured = chart_values["coordinator"], chart_values["kured"]
    sample = {
        "--lease-duration": values["leaderElection"]["leaseDuration"],
        "--renew-deadline": values["leaderElection"]["renewDeadline"],
        "--retry-period": values["leaderElection"]["retryPeriod"],
        "--log-level": values["logLevel"],
        "--tls-cert-file": tmp_path / "tls.crt",
        "--tls-key-file": tmp_path / "tls.key",
        **{flag: values["grpc"][key] for flag, key in GRPC_FLAG_VALUES.items()},
        "--metrics-port": values["metricsPort"],
        "--rollout-blocked-recheck": values["rolloutBlockedRecheckSeconds"],
        "--kured-lock": "kube-system/kured",
        "--kured-concurrency": kured["concurrency"],
    }
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("mounted from the Secret")
    # The TLS flags of one mode at a time: the coordinator's own Secret (selfSigned), or files.
    own = {"--tls-secret", "--tls-ca-configmap", "--tls-service"}
    files = {"--tls-cert-file", "--tls-key-file"}
    assert own | files <= set(flags)
    self_signed = parse_args([f"{f}={sample.get(f, 'x')}" for f in flags if f not in files])
    assert self_signed.live_nodes.server.managed_tls is not None
    assert self_signed.live_nodes.server.tls is None
    args = parse_args([f"{flag}={sample.get(flag, 'x')}" for flag in flags if flag not in own])
    assert args.lease_duration == 15
    assert args.namespace == "x"
    assert args.live_nodes.server.port == values["grpc"]["port"]
    assert args.live_nodes.server.tls is not None
    assert args.metrics_port == values["metricsPort"]
    assert args.rollout_blocked_recheck == values["rolloutBlockedRecheckSeconds"]


def test_the_agent_daemonset_matches_the_coordinator() -> None:
    """Same audience on both sides, the token and CA where the agent reads them, and the
    host access the agent needs (and no more)."""
    daemonset = (CHART / "templates" / "agent-daemonset.yaml").read_text()
    deployment = (CHART / "templates" / "coordinator-deployment.yaml").read_text()
    assert "audience: {{ $c.grpc.agentAudience }}" in daemonset
    assert "--agent-audience={{ $c.grpc.agentAudience }}" in deployment
    assert "- --token-file=/var/run/secrets/gpuctl/token" in daemonset
    assert "{name: token, mountPath: /var/run/secrets/gpuctl, readOnly: true}" in daemonset
    assert "path: token" in daemonset
    assert "- --ca-file=/etc/gpuctl/ca/ca.crt" in daemonset
    assert '{{- include "gpuctl.agentCaVolume" . | nindent 8 }}' in daemonset
    tls = (CHART / "templates" / "_tls.tpl").read_text()
    agent_volume = tls.split('{{- define "gpuctl.agentCaVolume" -}}', 1)[1]
    assert "- {key: ca.crt, path: ca.crt}" in agent_volume  # the TLS Secret's CA only
    assert "tls.key" not in daemonset + agent_volume
    for needed in (
        "hostPID: true",
        "hostNetwork: true",
        "- --host-root=/host",
        "mountPath: /host{{ .path }}",  # each host path the agent reads (test_agent_host_mounts)
        "add: [SYS_PTRACE, DAC_READ_SEARCH]",
        "drop: [ALL]",
        "name: NODE_NAME",
    ):
        assert needed in daemonset
    username = "--agent-service-account=system:serviceaccount:{{ .Release.Namespace }}:"
    assert f'{username}{{{{ include "gpuctl.fullname" . }}}}-agent' in deployment
    assert "serviceAccountName: {{ $fullname }}-agent" in daemonset


def test_every_flag_the_daemonset_passes_exists() -> None:
    daemonset = (CHART / "templates" / "agent-daemonset.yaml").read_text()
    passed = re.findall(r"- (--[a-z-]+)=(\S+)", daemonset)
    assert "--coordinator" in dict(passed)
    sample = {"--health-port": "9460", "--grpc-health-port": "9461", "--log-level": "info"}
    argv = [f"{flag}={sample.get(flag, value)}" for flag, value in passed]
    args = build_agent_parser().parse_args(["run", *argv])
    assert str(args.token_file) == "/var/run/secrets/gpuctl/token"
    assert str(args.host_root) == "/host"
    assert str(args.ca_file) == "/etc/gpuctl/ca/ca.crt"


def test_the_grpc_service_selects_the_serving_leader_only() -> None:
    service = (CHART / "templates" / "coordinator-grpc.yaml").read_text()
    deployment = (CHART / "templates" / "coordinator-deployment.yaml").read_text()
    assert f'{SERVING_LABEL}: "true"' in service
    assert "name: POD_NAME" in deployment  # the Pod the leader labels is its own


def test_probes_ask_the_ports_and_paths_the_processes_serve() -> None:
    """The coordinator answers /healthz and /readyz on --metrics-port (the port named
    `metrics`; a standby is ready, so the Deployment's rollout never stalls on it); the agent
    on --health-port (named `health`), with its gRPC health port declared too."""
    deployment = (CHART / "templates" / "coordinator-deployment.yaml").read_text()
    assert "- --metrics-port={{ $c.metricsPort }}" in deployment
    assert "containerPort: {{ $c.metricsPort }}" in deployment
    assert "httpGet: {path: /healthz, port: metrics}" in deployment
    assert "httpGet: {path: /readyz, port: metrics}" in deployment
    daemonset = (CHART / "templates" / "agent-daemonset.yaml").read_text()
    assert "- {name: health, containerPort: {{ $a.healthPort }}}" in daemonset
    assert "- {name: grpc-health, containerPort: {{ $a.grpcHealthPort }}}" in daemonset
    assert "- --health-port={{ $a.healthPort }}" in daemonset
    assert "- --grpc-health-port={{ $a.grpcHealthPort }}" in daemonset
    assert "httpGet: {path: /healthz, port: health}" in daemonset
    assert "httpGet: {path: /readyz, port: health}" in daemonset
