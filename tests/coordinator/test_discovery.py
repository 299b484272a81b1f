"""KMM and DRA detection from discovery, re-checked so a later install is noticed."""

from __future__ import annotations

from coordinator.kube.discovery import Discovery, ServedGroups


class Answers:
    def __init__(self, *answers: ServedGroups | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> ServedGroups:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


KMM = {"kmm.sigs.x-k8s.io": ["v1beta1"]}


def test_kmm_installed_later_is_noticed_after_max_age() -> None:
    now = [0.0]
    discovery = Discovery(Answers({}, KMM), max_age=2.0, clock=lambda: now[0])
    assert not discovery.kmm_installed()
    now[0] = 1.0
    assert not discovery.kmm_installed()  # cached
    now[0] = 2.5
    assert discovery.kmm_installed()


def test_other_kmm_versions_do_not_count() -> None:
    discovery = Discovery(Answers({"kmm.sigs.x-k8s.io": ["v1alpha1"]}))
    assert not discovery.kmm_installed()


def test_failed_discovery_keeps_the_last_answer() -> None:
    answers = Answers(KMM, OSError("connection refused"))
    discovery = Discovery(answers, max_age=0.0)
    assert discovery.kmm_installed()
    assert discovery.kmm_installed()
    assert answers.calls == 2


def test_dra_version_prefers_v1() -> None:
    assert Discovery(Answers({"resource.k8s.io": ["v1beta1", "v1"]})).dra_version() == "v1"
    assert Discovery(Answers({"resource.k8s.io": ["v1beta2"]})).dra_version() == "v1beta2"
    assert Discovery(Answers({})).dra_version() is None
