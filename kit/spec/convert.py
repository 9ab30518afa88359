"""TOML tables to the spec's dataclasses, typed by their annotations: every value is checked against its field's
type (bounds included) and every error names the key path, what is expected and what was found."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from kit.records import JsonValue
from kit.spec.limits import MAX_INT
from kit.spec.workload import WORKLOAD_FIELDS, SpecValue, Workload, known_workloads, unknown_workload
from kit.spec_invalid import Invalid
from kit.workloads import WorkloadInfo


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if tp is bool:
        return "true or false"
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args)
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if dataclasses.is_dataclass(tp):
        return "a table"
    return str(tp)


def convert_value(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):  # a manifest's copy writes unset options as null
            return None
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:  # Optional[X]: X's own error is the useful one
            return convert_value(args[0], value, path)
        for a in args:
            try:
                return convert_value(a, value, path)
            except Invalid:
                continue
        raise Invalid(path, _type_name(tp), value)
    if tp is bool:
        if not isinstance(value, bool):
            raise Invalid(path, "true or false", value)
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(path, "an integer", value)
        if abs(value) > MAX_INT:
            raise Invalid(path, f"an integer of magnitude at most {MAX_INT}", value)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Invalid(path, "a number", value)
        if not math.isfinite(value) or abs(value) > MAX_INT:
            raise Invalid(path, f"a finite number of magnitude at most {MAX_INT} (not nan or inf)", value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise Invalid(path, "a string", value)
        return value
    if origin is tuple:
        (elem,) = typing.get_args(tp)[:1]
        if not isinstance(value, list):
            raise Invalid(path, _type_name(tp), value)
        return tuple(convert_value(elem, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict and path.endswith(".params"):
        return dict(value)
    if origin is dict and typing.get_args(tp)[1] is Any:  # a free table (checked by its owner)
        if not isinstance(value, dict):
            raise Invalid(path, "a table", value)
        return dict(value)
    if origin is dict and typing.get_args(tp)[1] is str:  # a table of strings (a claim's versions)
        if not isinstance(value, dict):
            raise Invalid(path, "a table of strings", value)
        for k, v in value.items():
            if not isinstance(v, str):
                raise Invalid(f"{path}.{k}", "a string", v)
        return dict(value)
    if origin is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):  # a table of tables
        if not isinstance(value, dict):
            raise Invalid(path, "a table of tables", value)
        return {k: build_section(typing.get_args(tp)[1], v, f"{path}.{k}") for k, v in value.items()}
    if origin is dict:
        if not isinstance(value, dict):
            raise Invalid(path, "a table", value)
        out = {}
        for k, v in value.items():
            if not isinstance(v, list):
                raise Invalid(f"{path}.{k}", "a list of values", v)
            out[k] = tuple(v)
        return out
    if dataclasses.is_dataclass(tp):
        return build_section(tp, value, path)
    return value


def case_overrides(info: WorkloadInfo, raw: Mapping[str, JsonValue], path: str) -> dict[str, SpecValue]:
    """A case's workload keys, type-checked like [workload] (common keys and the workload's own)."""
    hints = field_types(Workload)
    out: dict[str, SpecValue] = {}
    for key, val in raw.items():
        if key in WORKLOAD_FIELDS - {"name", "params"}:
            out[key] = convert_value(hints[key], val, f"{path}.{key}")
        elif key in info.params:
            out[key] = convert_value(info.params[key].type, val, f"{path}.{key}")
        else:
            known = sorted((WORKLOAD_FIELDS - {"params", "name"}) | set(info.params))
            raise Invalid(f"{path}.{key}", f"one of the keys of workload {info.name} ({', '.join(known)}); unknown key")
    return out


def convert_params(info: WorkloadInfo, raw: Mapping[str, SpecValue], path: str) -> dict[str, SpecValue]:
    """Check a workload's own keys against its declared ``Param``s; fill defaults."""
    out: dict[str, SpecValue] = {}
    for key, val in raw.items():
        if key not in info.params:
            known = sorted((WORKLOAD_FIELDS - {"params"}) | set(info.params))
            raise Invalid(f"{path}.{key}", f"one of the keys of workload {info.name} ({', '.join(known)}); unknown key")
        out[key] = convert_value(info.params[key].type, val, f"{path}.{key}")
    for key, prm in info.params.items():
        out.setdefault(key, prm.default)
    return out


@functools.cache
def field_types(cls: Any) -> dict[str, Any]:
    """A dataclass' resolved field types (resolving them is most of a spec's load time: computed once per class)."""
    return typing.get_type_hints(cls)


# Fields the loader fills, never the file: a key of that name in a table is unknown.
LOADER_FIELDS = ("path", "profile", "profile_description", "profile_estimate_s", "profiles")


def build_section(cls: Any, data: Any, path: str, loader_fields: tuple[str, ...] = ()) -> Any:
    """``cls`` built from the table ``data`` (at key path ``path``), each value converted to its field's type, then
    checked (its ``check``); ``loader_fields``: more fields the loader fills (the top level's study and info)."""
    if not isinstance(data, dict):
        raise Invalid(path, "a table", data)
    hints = field_types(cls)
    loader_set = LOADER_FIELDS + loader_fields
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in loader_set}
    if cls is Workload:
        if "params" in data:
            raise Invalid(f"{path}.params", "workload keys written directly in [workload]; unknown key")
        name = data.get("name")
        if not isinstance(name, str) or name not in known_workloads():
            raise unknown_workload(f"{path}.name", name)
        extra = {k: v for k, v in data.items() if k not in fields}
        data = {k: v for k, v in data.items() if k in fields}
        data["params"] = convert_params(known_workloads()[name], extra, path)
    for key in data:
        if key not in fields:
            where = f"{path}.{key}" if path else key
            raise Invalid(where, f"one of the known keys ({', '.join(sorted(fields))}); unknown key")
    kwargs = {}
    for name, f in fields.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise Invalid(where, f"{_type_name(hints[name])} (required key is missing)")
            continue
        kwargs[name] = convert_value(hints[name], data[name], where)
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        check(path)
    return obj


def deep_merge(base: dict[str, JsonValue], over: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """``over`` merged into a copy of ``base``, table by table (a profile over the spec); other values replaced."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        below = out.get(k)
        if isinstance(v, dict) and isinstance(below, dict):
            out[k] = deep_merge(below, v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def got_text(got: object) -> str:
    if got is dataclasses.MISSING:
        return ""
    return f", got {got!r}"
