"""Who applies a GPUDriver's spec.kernelModule from Git: a GitOps field manager owning a field
under it, or the tool's tracking mark; never a person's kubectl or the coordinator."""

from __future__ import annotations

from typing import Any

from gpuctl.gpudriver.gitops import gitops_owner


def managed(manager: str, spec_fields: dict[str, Any], operation: str = "Apply") -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": spec_fields},
    }


def driver(*entries: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "xe", "managedFields": list(entries), **metadata}}


def test_a_gitops_field_manager_owning_the_kernel_module() -> None:
    kernel_module: dict[str, Any] = {"f:kernelModule": {"f:version": {}}}
    assert gitops_owner(driver(managed("argocd-controller", kernel_module))) == (
        "Argo CD (field manager argocd-controller)"
    )
    flux = managed("kustomize-controller", kernel_module, operation="Update")
    assert gitops_owner(driver(flux)) == "Flux (field manager kustomize-controller)"


def test_people_and_other_fields_are_not_gitops() -> None:
    kernel_module: dict[str, Any] = {"f:kernelModule": {"f:version": {}}}
    assert gitops_owner(driver(managed("kubectl-client-side-apply", kernel_module))) == ""
    assert gitops_owner(driver(managed("gpuctl", kernel_module))) == ""
    # Argo CD owning only spec.rollout (say, a pause in Git) leaves kernelModule to people.
    assert gitops_owner(driver(managed("argocd-controller", {"f:rollout": {}}))) == ""
    assert gitops_owner({"metadata": {"name": "xe"}}) == ""
    assert gitops_owner(driver({"manager": "argocd-controller"}, "garbage")) == ""  # type: ignore[arg-type]


def test_a_tracking_mark_without_a_field_manager() -> None:
    tracked = driver(annotations={"argocd.argoproj.io/tracking-id": "gpu:gpuctl.dev/GPUDriver:/xe"})
    assert gitops_owner(tracked) == (
        "Argo CD (argocd.argoproj.io/tracking-id=gpu:gpuctl.dev/GPUDriver:/xe)"
    )
    flux = driver(labels={"kustomize.toolkit.fluxcd.io/name": "gpu-drivers"})
    assert gitops_owner(flux) == "Flux (kustomize.toolkit.fluxcd.io/name=gpu-drivers)"
