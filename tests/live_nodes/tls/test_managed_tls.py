"""The coordinator's own TLS Secret and CA ConfigMap (`--tls-secret`) against the in-memory
API server: made once, renewed under the same CA when due, taken from a replica that wrote first,
and never a key outside the Secret."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509

from coordinator.kube.client import KubeError
from coordinator.live_nodes.tls.managed_tls import ManagedTls, ManagedTlsConfig, service_names
from coordinator.live_nodes.tls.tls_reload import MemoryCertificate
from coordinator.main import parse_args
from tests.support.clock import ManualClock
from tests.support.memory_api import MemoryApi

SECRETS = "/api/v1/namespaces/ns/secrets"
SECRET = f"{SECRETS}/coordinator-tls"
CONFIGMAPS = "/api/v1/namespaces/ns/configmaps"
CONFIGMAP = f"{CONFIGMAPS}/coordinator-ca"
NAMES = service_names("gpuctl-coordinator", "ns")
DAY = 86400.0


def managed(api: MemoryApi, clock: ManualClock, names: tuple[str, ...] = NAMES) -> ManagedTls:
    config = ManagedTlsConfig("ns", "coordinator-tls", "coordinator-ca", names)
    return ManagedTls(api, config, clock.wall)


def stored(api: MemoryApi) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in api.objects[SECRET]["data"].items()}


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_a_missing_secret_is_made_and_the_ca_published_without_a_key() -> None:
    api, clock = MemoryApi(), ManualClock()
    pem = managed(api, clock).ensure()
    assert api.writes == [("POST", SECRETS), ("POST", CONFIGMAPS)]
    data = stored(api)
    assert api.objects[SECRET]["type"] == "kubernetes.io/tls"
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert (pem.cert, pem.key) == (data["tls.crt"], data["tls.key"])
    serving, ca = cert(pem.cert), cert(data["ca.crt"])
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == list(NAMES)
    assert "gpuctl-coordinator.ns.svc" in NAMES
    published = api.objects[CONFIGMAP]["data"]
    assert published == {"ca.crt": data["ca.crt"].decode()}
    assert "PRIVATE KEY" not in published["ca.crt"]


def test_a_good_secret_is_used_as_it_is() -> None:
    api, clock = MemoryApi(), ManualClock()
    first = managed(api, clock).ensure()
    clock.advance(300 * DAY)
    writes = len(api.writes)
    assert managed(api, clock).ensure() == first
    assert len(api.writes) == writes


def test_a_certificate_due_is_renewed_under_the_same_ca_and_the_configmap_kept() -> None:
    api, clock = MemoryApi(), ManualClock()
    tls = managed(api, clock)
    first = tls.ensure()
    ca_before = stored(api)["ca.crt"]
    clock.advance(340 * DAY)  # 25 days left: due (30 days before)
    renewed = tls.ensure()
    assert renewed != first
    assert api.writes[-1] == ("PUT", SECRET)  # the ConfigMap is right already: not written
    assert stored(api)["ca.crt"] == ca_before
    cert(renewed.cert).verify_directly_issued_by(cert(ca_before))
    assert tls.issued == 2


def test_changed_service_names_make_a_new_certificate() -> None:
    api, clock = MemoryApi(), ManualClock()
    managed(api, clock).ensure()
    renamed = service_names("other", "ns")
    pem = managed(api, clock, renamed).ensure()
    names = cert(pem.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.value.get_values_for_type(x509.DNSName) == list(renamed)


def test_a_broken_secret_gets_a_new_ca_and_a_stale_configmap_is_corrected() -> None:
    api, clock = MemoryApi(), ManualClock()
    api.store(SECRET, {"metadata": {"name": "coordinator-tls"}, "data": {"tls.crt": "eA=="}})
    api.store(CONFIGMAP, {"metadata": {"name": "coordinator-ca"}, "data": {"ca.crt": "old"}})
    managed(api, clock).ensure()
    assert api.writes == [("PUT", SECRET), ("PUT", CONFIGMAP)]
    assert api.objects[CONFIGMAP]["data"]["ca.crt"] == stored(api)["ca.crt"].decode()


def test_a_replica_that_wrote_first_wins_and_its_certificate_is_used() -> None:
    api, other_api, clock = MemoryApi(), MemoryApi(), ManualClock()
    their_pem = managed(other_api, clock).ensure()
    api.store(SECRET, other_api.objects[SECRET])
    # We read before they wrote, then after.
    api.answer("GET", SECRET, KubeError(404, "NotFound"), api.objects[SECRET])
    assert managed(api, clock).ensure() == their_pem
    assert ("POST", SECRETS) in api.writes  # refused: 409


def test_a_replaced_pair_is_served_at_the_next_handshake_once() -> None:
    certificate = MemoryCertificate(b"key-1", b"cert-1")
    assert certificate.fetch() is None
    certificate.replace(b"key-1", b"cert-1")
    assert certificate.fetch() is None  # the same pair: nothing new
    certificate.replace(b"key-2", b"cert-2")
    assert certificate.pair == (b"key-2", b"cert-2")
    assert certificate.fetch() is not None
    assert certificate.fetch() is None
    assert certificate.reloads == 1


def test_tls_secret_flags() -> None:
    args = parse_args(["--namespace=ns", "--grpc-port=9443", "--tls-secret=s", "--tls-service=svc"])
    managed_tls = args.live_nodes.server.managed_tls
    assert managed_tls is not None
    assert (managed_tls.secret, managed_tls.ca_configmap) == ("s", "s-ca")
    assert managed_tls.dns_names[0] == "svc.ns.svc"
    assert args.live_nodes.server.tls is None


@pytest.mark.parametrize(
    "extra",
    [["--tls-secret=s", "--insecure-grpc"], ["--tls-ca-configmap=c"], ["--tls-service=x"]],
)
def test_tls_secret_flags_that_cannot_work_are_refused(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--namespace=ns", "--grpc-port=9443", *extra])
    assert "--tls-" in capsys.readouterr().err
