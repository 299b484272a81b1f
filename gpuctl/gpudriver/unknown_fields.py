"""Fields a stored GPUDriver has and this gpuctl does not know: set apart, never a refusal (pure).

The model refuses unknown fields (`extra="forbid"`): it describes what users write, and the
CRD generated from it prunes anything else. What the coordinator reads back is another
matter: after the chart's CRDs of a newer gpuctl are applied and before the coordinator is
upgraded (or when it is rolled back), stored GPUDrivers may carry fields this coordinator
has never heard of. Refusing them would stop every rollout for the length of an upgrade.
So reads drop what the model does not know (`known_only`) and say which fields they dropped
(`unknown_fields`, dotted paths with list indexes), for a warning; what is known is still
validated in full.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model class an annotation holds, and whether as the items of a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    origin = typing.get_origin(annotation)
    if origin is list:
        inner, _ = _model_in(typing.get_args(annotation)[0])
        return inner, inner is not None
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found, listed = _model_in(arg)
            if found is not None:
                return found, listed
    return None, False


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """The model's fields by their wire name (alias), with their annotations."""
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def _walk(
    model: type[BaseModel], data: Mapping[str, Any], where: str, unknown: list[str]
) -> dict[str, Any]:
    known = _fields(model)
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in known:
            unknown.append(path)
            continue
        inner, listed = _model_in(known[key])
        if inner is not None and listed and isinstance(value, list):
            out[key] = [
                _walk(inner, item, f"{path}[{i}]", unknown) if isinstance(item, Mapping) else item
                for i, item in enumerate(value)
            ]
        elif inner is not None and isinstance(value, Mapping):
            out[key] = _walk(inner, value, path, unknown)
        else:
            out[key] = value
    return out


def known_only(model: type[BaseModel], data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` without the fields `model` does not know, at any depth."""
    return _walk(model, data, "", [])


def unknown_fields(model: type[BaseModel], data: Mapping[str, Any], where: str = "") -> list[str]:
    """The dotted paths (under `where`) of the fields of `data` that `model` does not know."""
    unknown: list[str] = []
    _walk(model, data, where, unknown)
    return unknown
