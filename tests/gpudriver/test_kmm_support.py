"""Which KMM gpuctl writes a Module for (gpuctl/gpudriver/kmm_support.py, from KMM's
NodeModulesConfig CRD) and how often it asks (coordinator/drivers/kmm_check.py)."""

from __future__ import annotations

from typing import Any

from coordinator.drivers.kmm_check import CRD_PATH, KmmSupportCheck
from coordinator.kube.client import KubeError
from gpuctl.gpudriver.kmm_support import unsupported_kmm
from gpuctl.gpudriver.module_spec import desired_module
from gpuctl.gpudriver.plan import DriverAction, DriverPlanInput, plan
from tests.support import samples


def test_a_kmm_whose_status_has_a_boot_id_is_supported() -> None:
    assert unsupported_kmm(samples.kmm_node_config_crd()) is None


def test_a_kmm_without_boot_id_is_older_than_2_4_and_refused() -> None:
    reason = unsupported_kmm(samples.kmm_node_config_crd(boot_id=False))
    assert reason is not None
    assert "KMM is older than v2.4.0" in reason
    assert "reloads every loaded node at once" in reason


def test_an_unread_or_unserved_crd_is_unknown_and_refused() -> None:
    assert "could not be read (forbidden)" in str(unsupported_kmm(None, "forbidden"))
    crd = samples.kmm_node_config_crd()
    crd["spec"]["versions"][0]["name"] = "v1"
    assert "does not serve v1beta1" in str(unsupported_kmm(crd))


class FakeKube:
    """Answers GETs of the CRD from a list, counting them."""

    def __init__(self, *answers: dict[str, Any] | KubeError) -> None:
        self.answers = list(answers)
        self.gets = 0

    def request(self, method: str, resource_path: str, **_: Any) -> dict[str, Any]:
        assert (method, resource_path) == ("GET", CRD_PATH)
        self.gets += 1
        answer = self.answers.pop(0)
        if isinstance(answer, KubeError):
            raise answer
        return answer


def test_the_check_reads_at_most_once_per_max_age_and_keeps_its_answer_on_errors() -> None:
    now = [0.0]
    failure = KubeError(503, "unavailable")
    old = samples.kmm_node_config_crd(boot_id=False)
    kube = FakeKube(samples.kmm_node_config_crd(), failure, old)
    check = KmmSupportCheck(kube, max_age=60, clock=lambda: now[0])  # type: ignore[arg-type]
    assert check.problem() is None
    now[0] = 30
    assert check.problem() is None
    assert kube.gets == 1
    now[0] = 61
    assert check.problem() is None  # the read failed: the last answer stands
    assert check.problem() is not None  # read again: an older KMM now
    assert kube.gets == 3


def test_with_no_answer_yet_a_failed_read_refuses() -> None:
    check = KmmSupportCheck(FakeKube(KubeError(403, "forbidden")))  # type: ignore[arg-type]
    assert "could not be read (forbidden)" in str(check.problem())


def test_the_plan_writes_no_module_for_an_unsupported_kmm() -> None:
    driver = samples.driver()
    driver["metadata"]["uid"] = "u1"
    inputs = DriverPlanInput(
        driver=driver,
        module_name="gpu-policy-gpu",
        module=None,
        desired=desired_module(driver, samples.NAMESPACE),
        kmm_installed=True,
        nodes=None,
        kmm_unsupported="KMM is older than v2.4.0",
    )
    decided = plan(inputs)
    assert DriverAction.CREATE not in decided.actions
    assert [p.reason for p in decided.problems] == ["KMMUnsupported"]
    assert "KMMUnsupported" in [e.reason for e in decided.events]
