"""Screen trial files before analysis: impossible numbers exclude a trial, loudly.

A trial file is written by the kit from what the harness reported, and the
harness runs code that may be wrong or hostile; a run directory can also be
edited. A negative time or a NaN must not be analysed (a NaN would silently
drop its block from a paired test). Every number in ``results`` and in the
phase table must be finite, and those with a physical unit (times,
throughputs, energies, sizes, counts, accuracies) must be >= 0. A trial that
fails is kept in the run directory, analysed as status ``invalid`` (never
used by a test) and listed in ``analysis["excluded_trials"]`` with its file
and reason, beside every other trial excluded for its status.

A trial run again by ``kit run --resume --retry-failed`` has its failed
records kept under attempts/; ``retried_trials`` lists each of them (status,
signal, reason, file) for ``analysis["retried_trials"]`` and the report.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from kit.records import SCREENED_INVALID, JsonTable, TrialRecord
from kit.store import AttemptRecord

# Result keys with a physical, non-negative quantity (by their unit suffix or name).
NONNEGATIVE = re.compile(r"(_s|_ms|_ips|_j|_w|_bytes|_b|_mb|_hz|_pct|_count|_passes|_steps)$|"
                         r"(^|_)(time|times|throughput|accuracy|images|passes|params|param_count|flops|epochs?)(_|$)")
MAX_DEPTH = 4


def _numbers(obj: Any, key: str, depth: int = 0) -> list[tuple[str, float]]:
    """(key path, number) of every number in ``obj`` (bools are not numbers)."""
    if depth > MAX_DEPTH:
        return []
    if isinstance(obj, bool) or obj is None:
        return []
    if isinstance(obj, (int, float)):
        return [(key, float(obj))]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _numbers(v, f"{key}.{k}" if key else str(k), depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in _numbers(v, f"{key}[{i}]", depth + 1)]
    return []


def _leaf(path: str) -> str:
    return re.sub(r"\[\d+\]", "", path.rsplit(".", 1)[-1])


# The longest phase the kit accepts when the trial's own wall time is not known (about 115 days).
MAX_PHASE_S = 1e7


def _result_rules() -> dict[str, tuple[str, str]]:
    """Result key -> (metric, rule) for the metrics measured by the harness (one validator per metric)."""
    from kit.analysis.metrics import METRICS

    rules = {"time_s": "positive_time", "throughput_ips": "positive", "accuracy": "fraction", "train_loss": "finite"}
    out: dict[str, tuple[str, str]] = {}
    for m in METRICS.values():
        if m.kind == "result":
            for _phase, key in m.result_keys:
                out[key] = (m.name, rules.get(m.name, "finite"))
    return out


def metric_value_problem(key: str, value: Any, metric: str, rule: str, max_time_s: float) -> str | None:
    """Why ``value`` cannot be ``metric``'s value (type, finite, range in the metric's unit), None when it can."""
    if value is None:
        return None  # not measured: the metric is missing for this trial, not impossible
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"results.{key} = {value!r} is not a number ({metric})"
    v = float(value)
    if not math.isfinite(v):
        return f"results.{key} = {value!r} (not finite)"
    if rule == "positive_time" and not 0 < v <= max_time_s:
        return f"results.{key} = {value!r} s is not a time in (0, {max_time_s:.6g}] s (the trial's wall time bounds it)"
    if rule == "positive" and v <= 0:
        return f"results.{key} = {value!r} is not positive ({metric})"
    if rule == "fraction" and not 0 <= v <= 1:
        return f"results.{key} = {value!r} is not a fraction in [0, 1] ({metric})"
    return None


def problems(record: TrialRecord) -> list[str]:
    """Why the numbers of one finished trial are impossible ([] when they are not)."""
    out: list[str] = []
    results = record.results
    wall = record.wall_s  # typed: a finite number or None
    max_time = float(wall) + 1.0 if wall is not None and wall > 0 else MAX_PHASE_S
    for key, (metric, rule) in _result_rules().items():
        found = metric_value_problem(key, results.get(key), metric, rule, min(max_time, MAX_PHASE_S))
        if found:
            out.append(found)
    for path, v in _numbers(results, "results"):
        if not math.isfinite(v):
            out.append(f"{path} = {v!r} (not finite)")
        elif v < 0 and NONNEGATIVE.search(_leaf(path)):
            out.append(f"{path} = {v!r} (negative)")
    # the phase table as written: the typed one holds None for a non-number, which is what is screened here
    for name, ph in (record.to_json().get("phases") or {}).items():
        if not isinstance(ph, dict):
            out.append(f"phases.{name} is not a table")
            continue
        for key in ("start", "end", "duration_s"):
            val = ph.get(key)
            if val is not None and (isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val)):
                out.append(f"phases.{name}.{key} = {val!r} (not a finite number)")
        d, a, b = ph.get("duration_s"), ph.get("start"), ph.get("end")
        if isinstance(d, (int, float)) and math.isfinite(d) and d < 0:
            out.append(f"phases.{name}.duration_s = {d!r} (negative)")
        if (isinstance(a, (int, float)) and math.isfinite(a) and isinstance(b, (int, float)) and math.isfinite(b)
                and b < a):
            out.append(f"phases.{name} ends before it starts ({a!r} > {b!r})")
    return out


def screen_trials(trials: Sequence[TrialRecord]) -> tuple[list[TrialRecord], list[JsonTable]]:
    """(trials with impossible ones marked ``invalid``, every excluded trial with its file and reason).

    A screened record is the trial's record with status ``invalid`` and the reason as its error, in its typed fields
    and in what it gives back as JSON (a study's ``analyse()`` reads it so)."""
    screened: list[TrialRecord] = []
    excluded: list[JsonTable] = []
    for rec in trials:
        tid = rec.trial_id
        entry: JsonTable = {"trial_id": tid, "file": f"trials/{tid}.json", "arm": rec.arm or rec.framework,
                            "config_id": rec.config_id, "block": rec.block, "warmup": rec.warmup}
        status = rec.status
        if status == "ok":
            found = problems(rec)
            if found:
                reason = "impossible value(s): " + "; ".join(found[:5]) + (f"; and {len(found) - 5} more"
                                                                           if len(found) > 5 else "")
                rec = dataclasses.replace(rec, status=SCREENED_INVALID, error=reason,
                                          raw={**rec.to_json(), "status": SCREENED_INVALID, "error": reason})
                excluded.append({**entry, "status": SCREENED_INVALID, "reason": reason})
        else:
            why = str(rec.reason or rec.error or "").strip().splitlines()
            excluded.append({**entry, "status": status, "reason": f"{status}: {why[0][:300] if why else 'no message'}"})
        screened.append(rec)
    return screened, excluded


def retried_trials(attempts: Sequence[AttemptRecord], current: Sequence[TrialRecord]) -> list[JsonTable]:
    """Every failed attempt a retry set aside, with its status, signal, reason, file and what replaced it.

    ``attempts`` come from ``RunDir.checked_attempts``, ``current`` are the
    trial records on disk. An archive with the same content as the trial's
    current file is a retry killed before it removed the failed record (the
    failed record still counts, see ``RunDir.archive_trial``): not listed.
    """
    now = {r.trial_id: r for r in current}
    out: list[JsonTable] = []
    for a in attempts:
        rec, tid = a.record, a.trial_id
        cur = now.get(tid)
        if cur is not None and _same(cur, rec):
            continue
        status = rec.status
        why = str(rec.error or "").strip().splitlines()
        d = rec.disturbance
        shaken = bool(d and isinstance(d.get("phases"), Mapping) and d.get("disturbed") is True)  # is_disturbed
        if shaken and status == "ok":  # re-run by the runner: its timed phase shared the host (kit.disturbance)
            status = "disturbed"
            why = [str(d.get("cause") or "disturbed") if d else "disturbed"]
        signal = rec.signal or rec.backend.get("signal")
        out.append({"trial_id": tid, "attempt": a.attempt, "file": a.file, "arm": rec.arm or rec.framework,
                    "config_id": rec.config_id, "block": rec.block, "position": rec.position, "warmup": rec.warmup,
                    "status": status, "disturbed": shaken, "signal": signal,
                    "reason": f"{status}: {why[0][:300] if why else 'no message'}",
                    "replaced_by": f"trials/{tid}.json" if cur is not None else None,
                    "status_now": cur.status if cur is not None else "missing"})
    return out


def _same(a: TrialRecord, b: TrialRecord) -> bool:
    return json.dumps(a.to_json(), sort_keys=True, default=str) == json.dumps(b.to_json(), sort_keys=True, default=str)
