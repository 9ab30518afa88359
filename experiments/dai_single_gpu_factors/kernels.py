"""The kernel view of the Dai et al. study, host side: profile trials' tables, validated, matched by op type.

A profile trial (the ``kernels`` case, ``mode = "profile"``; kit.workloads.kernel_profile) returns its
tables inside result.json's ``results["kernel_profile"]``: the kit keeps no other file of a trial (its work
directory is removed after it; result.json is read capped at 16 MiB, never through a link, by
kit.backends.base.read_trial_file). The trial's output is untrusted, so every table is checked here before
any of it is shown: known structure only, at most MAX_TABLES tables of at most MAX_ROWS rows, names of at most
MAX_NAME_CHARS printable characters (shown as text, never used as a path or markup), every number finite and
in range, shares and op types recomputed from the times and names (the trial's own are not trusted), the op
type totals summing to the table's total. A table that fails is refused with the reason; the rest stands.

Matching: every name gets its common op type from ``kit.workloads.kernel_profile.op_type`` (the same pure table
both profilers' names are tested against); per network the two frameworks' time per step by op type and its
difference (TF - PT, the direction of the study's TF/PT ratio).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from kit.errors import AnalysisError
from kit.workloads import kernel_profile as kp

MAX_TABLES = 2
MAX_ROWS = 200  # the trial keeps kp.MAX_ROWS (40); a table with more rows was not written by it
MAX_NAME_CHARS = kp.MAX_NAME_CHARS
MAX_SECONDS = 1e7  # no profile of a few steps spends more than this in one name
MAX_CALLS = 10**9
MAX_STEPS = 1000
TOP_N = 10  # rows per framework in the report's side-by-side table
if TYPE_CHECKING:
    from kit.study_api import RunView

FIX = "re-run the profile trial (kit run --resume re-runs a missing trial); a table the kit wrote passes"


class KernelTableError(AnalysisError):
    """A profile trial's kernel table the host refuses (malformed, oversized, impossible numbers)."""


@dataclass(frozen=True)
class Table:
    """One validated table: what kit.workloads.kernel_profile.KernelTable holds, re-derived where it can be."""

    domain: str
    source: str
    steps: int
    total_s: float
    n_names: int
    rows: tuple[kp.KernelRow, ...]
    other_s: float
    by_type_s: Mapping[str, float]


def _fail(trial: str, what: str) -> KernelTableError:
    return KernelTableError(what, where=f"trial {trial}: results.kernel_profile", fix=FIX)


def _num(x: Any, trial: str, what: str, hi: float = MAX_SECONDS) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 <= x <= hi:
        raise _fail(trial, f"{what} is {str(x)[:40]!r}, not a number in [0, {hi:g}]")
    return float(x)


def _int(x: Any, trial: str, what: str, hi: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= hi:
        raise _fail(trial, f"{what} is {str(x)[:40]!r}, not an integer in [0, {hi}]")
    return x


def _name(x: Any, trial: str) -> str:
    if not isinstance(x, str) or not x or len(x) > MAX_NAME_CHARS or not x.isprintable():
        raise _fail(trial, f"a row name is not a printable string of 1-{MAX_NAME_CHARS} characters "
                           f"({str(x)[:40]!r})")
    return x


def _keys(d: Any, allowed: set[str], trial: str, what: str) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise _fail(trial, f"{what} is a {type(d).__name__}, not a table")
    unknown = set(d) - allowed
    if unknown:
        raise _fail(trial, f"{what} has unknown key(s) {sorted(map(str, unknown))[:3]}")
    return d


def read_table(raw: Any, trial: str) -> Table:
    """One table, validated (KernelTableError otherwise); shares and op types recomputed."""
    t = _keys(raw, {"domain", "source", "steps", "total_s", "n_names", "rows", "other_s", "by_type_s"}, trial,
              "a table")
    domain = t.get("domain")
    if domain not in kp.DOMAINS:
        raise _fail(trial, f"domain {str(domain)[:20]!r} is not one of {kp.DOMAINS}")
    source = t.get("source")
    if not isinstance(source, str) or len(source) > 200 or not source.isprintable():
        raise _fail(trial, "source is not a printable string of at most 200 characters")
    steps = _int(t.get("steps"), trial, "steps", MAX_STEPS)
    if steps < 1:
        raise _fail(trial, "steps is 0")
    total = _num(t.get("total_s"), trial, "total_s")
    n_names = _int(t.get("n_names"), trial, "n_names", kp.MAX_NAMES)
    rows_raw = t.get("rows")
    if not isinstance(rows_raw, list) or len(rows_raw) > MAX_ROWS:
        raise _fail(trial, f"rows is not a list of at most {MAX_ROWS} rows")
    rows, seen = [], set()
    for r in rows_raw:
        r = _keys(r, {"name", "op_type", "self_s", "calls", "share"}, trial, "a row")
        name = _name(r.get("name"), trial)
        if name in seen:
            raise _fail(trial, f"row {name!r} appears twice")
        seen.add(name)
        s = _num(r.get("self_s"), trial, f"row {name!r} self_s")
        rows.append(kp.KernelRow(name, kp.op_type(name), s, _int(r.get("calls"), trial, f"row {name!r} calls",
                                                                  MAX_CALLS), s / total if total > 0 else 0.0))
    by_raw = _keys(t.get("by_type_s"), set(kp.OP_TYPES), trial, "by_type_s")
    by_type = {k: _num(by_raw.get(k, 0.0), trial, f"by_type_s.{k}") for k in kp.OP_TYPES}
    kept = sum(r.self_s for r in rows)
    tol = 1e-6 * max(1.0, total)
    if len(rows) > n_names or kept > total + tol or abs(sum(by_type.values()) - total) > tol:
        raise _fail(trial, "its totals disagree (rows over the total, or op types not summing to it)")
    for kind in kp.OP_TYPES:  # every kept row's time is inside its own type's total
        if sum(r.self_s for r in rows if r.op_type == kind) > by_type[kind] + tol:
            raise _fail(trial, f"the rows of op type {kind} hold more time than its total")
    rows.sort(key=lambda r: (-r.self_s, r.name))
    return Table(str(domain), source, steps, total, n_names, tuple(rows), max(0.0, total - kept), by_type)


def read_profile(results: Mapping[str, Any], trial: str) -> dict[str, Table]:
    """domain -> table of one trial's ``kernel_profile`` (KernelTableError for anything malformed)."""
    prof = _keys(results.get("kernel_profile"), {"schema", "framework", "note", "tables"}, trial, "kernel_profile")
    if prof.get("schema") != kp.SCHEMA:
        raise _fail(trial, f"schema {str(prof.get('schema'))[:20]!r} is not {kp.SCHEMA}")
    tables = prof.get("tables")
    if not isinstance(tables, list) or not 1 <= len(tables) <= MAX_TABLES:
        raise _fail(trial, f"tables is not a list of 1-{MAX_TABLES} tables")
    out: dict[str, Table] = {}
    for raw in tables:
        tab = read_table(raw, trial)
        if tab.domain in out:
            raise _fail(trial, f"two {tab.domain} tables")
        out[tab.domain] = tab
    return out


class KernelRowJson(TypedDict):
    name: str
    op_type: str
    self_s: float
    calls: int
    share: float


class TableJson(TypedDict):
    """A validated :class:`Table` as analysis.json keeps it."""

    domain: str
    source: str
    steps: int
    total_s: float
    n_names: int
    other_s: float
    by_type_s: dict[str, float]
    rows: list[KernelRowJson]


OpTypeRow = dict[str, str | float]  # op_type, label, then "<arm>_s_per_step" and "<arm>_share" per arm, diff_s_per_step


class OpTypes(TypedDict):
    """Per op type each framework's time per step and share, and their difference (:func:`compare`)."""

    rows: list[OpTypeRow]
    totals_s_per_step: dict[str, float]


class KernelArm(TypedDict):
    trial_id: str
    table: NotRequired[TableJson]


class KernelEntry(TypedDict):
    """The kernel view of one profile configuration (:func:`kernel_view`)."""

    config_id: str
    model: str | None
    problems: list[str]
    arms: dict[str, KernelArm]
    domain: NotRequired[str]
    by_type: NotRequired[OpTypes]


class ProfileConfig(TypedDict):
    """A profile configuration (mode = "profile", one per network): its case and network."""

    config_id: str
    case: str
    model: str | None


def _table_json(tab: Table) -> TableJson:
    return {"domain": tab.domain, "source": tab.source, "steps": tab.steps, "total_s": tab.total_s,
            "n_names": tab.n_names, "other_s": tab.other_s, "by_type_s": dict(tab.by_type_s),
            "rows": [{"name": r.name, "op_type": r.op_type, "self_s": r.self_s, "calls": r.calls, "share": r.share}
                     for r in tab.rows]}


def _float(row: OpTypeRow, key: str) -> float:
    v = row[key]
    assert not isinstance(v, str)  # the numeric columns of compare()'s rows
    return v


def compare(tables: Mapping[str, Table], arms: list[str]) -> OpTypes:
    """Per op type: each arm's time per step and share, and the difference (first arm - last arm) per step:
    TF - PT with the study's arms (tensorflow, pytorch), the direction of its TF/PT ratio."""
    rows = []
    for kind, label in kp.OP_TYPES.items():
        row: OpTypeRow = {"op_type": kind, "label": label}
        per_step = {arm: tables[arm].by_type_s[kind] / tables[arm].steps for arm in arms}
        for arm in arms:
            tab = tables[arm]
            row[f"{arm}_s_per_step"] = per_step[arm]
            row[f"{arm}_share"] = tab.by_type_s[kind] / tab.total_s if tab.total_s > 0 else 0.0
        row["diff_s_per_step"] = per_step[arms[0]] - per_step[arms[-1]]
        if any(per_step[a] > 0 for a in arms):
            rows.append(row)
    rows.sort(key=lambda r: -abs(_float(r, "diff_s_per_step")))
    return {"rows": rows, "totals_s_per_step": {a: tables[a].total_s / tables[a].steps for a in arms}}


def kernel_view(run: RunView, configs: Mapping[str, ProfileConfig]) -> list[KernelEntry]:
    """Per profile configuration (network): each framework's validated table of one domain, and the op-type
    comparison. The domain is "gpu" (device kernels) where every framework has one, else "cpu" (host ops).
    The profile is the ok trial of the lowest repetition (only repetition 0 profiles; warm-ups count: the
    profile is no timed measurement). ``configs``: config id -> {"model": ...} of the profile configurations."""
    arms = list(run.arms)
    out = []
    for cid, cfg in configs.items():
        entry = KernelEntry(config_id=cid, model=cfg.get("model"), problems=[], arms={})
        found: dict[str, dict[str, Table]] = {}
        for arm in arms:
            ok = sorted((t for t in run.finished(arm=arm, config=cid) if t.status == "ok"),
                        key=lambda t: t.repetition)
            if not ok:
                states = sorted({t.status for t in run.finished(arm=arm, config=cid)})
                entry["problems"].append(f"{arm}: no profile ({', '.join(states) or 'no trial'})")
                continue
            try:
                found[arm] = read_profile(ok[0].results, ok[0].trial_id)
                entry["arms"][arm] = {"trial_id": ok[0].trial_id}
            except KernelTableError as exc:
                entry["problems"].append(f"{arm}: refused: {exc.one_line()}")
        if found:
            domain = "gpu" if all("gpu" in found.get(a, {}) for a in arms) else "cpu"
            with_gpu = sorted(a for a, tabs in found.items() if "gpu" in tabs)
            if domain == "cpu" and with_gpu:
                entry["problems"].append(f"GPU kernels only for {', '.join(with_gpu)}: the frameworks are compared "
                                         "on their CPU ops")
            entry["domain"] = domain
            for arm, tabs in found.items():
                if domain in tabs:
                    entry["arms"][arm]["table"] = _table_json(tabs[domain])
            if len(found) == len(arms) and all(domain in found[a] for a in arms):
                entry["by_type"] = compare({a: found[a][domain] for a in arms}, arms)
        out.append(entry)
    return out
