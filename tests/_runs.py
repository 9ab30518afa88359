"""One builder for the records of fake runs: trial records with every field the store's typed record needs,
and the RunView a study's analyse() receives. Tests state only what their case is about."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from kit.analysis.metrics import VALUE_COLUMNS
from kit.analysis_record import Analysis
from kit.manifest import Manifest
from kit.records import TrialRecord
from kit.study_api import RunView


def trial(trial_id: str, arm: str, config_id: str = "c00", *, repetition: int = 0, position: int = 0,
          status: str = "ok", warmup: bool = False, **fields: Any) -> dict[str, Any]:
    """A trial record as the runner writes it (trials/<id>.json), with what the test does not care about filled in."""
    return {"schema_version": 1, "trial_id": trial_id, "arm": arm, "framework": arm.split("@")[0],
            "config_id": config_id, "config": {}, "block": repetition, "repetition": repetition,
            "position": position, "seed": 0, "warmup": warmup, "status": status, "results": {}, "phases": {},
            "env": {}, "gpus": [], **fields}


def completed(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hand-written trial dicts completed to full records (positions in list order)."""
    out = []
    for i, t in enumerate(trials):
        rest = {k: v for k, v in t.items() if k not in ("trial_id", "arm", "config_id", "repetition", "status",
                                                          "warmup")}
        out.append(trial(t["trial_id"], t["arm"], t.get("config_id", "c00"), repetition=int(t.get("repetition", 0)),
                         position=i, status=t.get("status", "ok"), warmup=bool(t.get("warmup", False)), **rest))
    return out


def records(trials: Iterable[dict[str, Any]]) -> list[TrialRecord]:
    """Trial files' JSON as the typed records the store's reader gives (each checked as a trial file is)."""
    return [TrialRecord.from_json(t, f"test trial {t.get('trial_id')}") for t in trials]


# What a trial file must hold to be read (kit.records.TrialRecord.from_json); everything else stays as the test
# wrote it (a key left out is a key the trial file lacks: no ``gpus`` means "every GPU in the samples is its").
_IDENTITY = ("trial_id", "arm", "framework", "config_id", "block", "repetition", "position", "status")


def records_of(trials: Iterable[dict[str, Any]]) -> list[TrialRecord]:
    """Hand-written trial dicts (what the test's case is about) given the identity a trial file must have (by
    :func:`trial`) and typed; unlike :func:`completed` they keep the positions and blocks they give."""
    return records({**{k: v for k, v in trial(t["trial_id"], t.get("arm", "pytorch")).items() if k in _IDENTITY},
                    **t} for t in trials)


def run_view(manifest: dict[str, Any], trials: list[dict[str, Any]], values: pd.DataFrame | None = None) -> RunView:
    """What ``analyse(run)`` of a study receives, from (part of) a manifest and trial dicts (completed as above)."""
    frame = values if values is not None else pd.DataFrame(columns=VALUE_COLUMNS)
    return RunView.build(bare_manifest_json(**manifest), records(completed(trials)), frame)


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base`` table by table; a plan's configurations are replaced, never merged."""
    return {**base, **{k: _merged(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict)
                       and k != "configs" else v for k, v in over.items()}}


def bare_manifest_json(**fields: Any) -> dict[str, Any]:
    """The smallest manifest.json the store accepts (one arm, one configuration, no trials) with ``fields`` merged
    in (tables key by key): for rules and studies that read one or two of its facts."""
    base = {"schema_version": 1, "experiment": "t",
            "spec": {"design": {"alpha": 0.05}, "workload": {"name": "w"}},
            "plan": {"seed": 0, "blocking": "interleaved", "arms": ["pytorch"], "configs": {"c00": {}}, "trials": []}}
    return _merged(base, fields)


def bare_manifest(**fields: Any) -> Manifest:
    """:func:`bare_manifest_json`, typed as every reader gets it (``RunDir.manifest``)."""
    return Manifest.from_json(bare_manifest_json(**fields), "test manifest")


def bare_analysis(**fields: Any) -> Analysis:
    """The smallest analysis.json the readers accept (no values), typed, with ``fields`` at the top level."""
    base = {"schema_version": 1, "experiment": "t", "alpha": 0.05, "arms": ["pytorch"], "configs": {"c00": {}}}
    return Analysis.from_json({**base, **fields}, "test analysis")


# -- run directories ----------------------------------------------------------------------------------------------------

def manifest_of(spec: Any, *, collectors: list[dict[str, Any]] | None = None,
                dataset: dict[str, Any] | None = None, host: dict[str, Any] | None = None,
                **extra: Any) -> dict[str, Any]:
    """The manifest the runner would write for ``spec`` (its plan drawn with the spec's seed), finished an hour
    after it started, on a test host, with the local backend; ``extra`` overrides or adds top-level keys."""
    from kit.plan import make_plan

    plan = make_plan(spec)
    man = {"experiment": spec.experiment.id, "title": spec.experiment.title, "profile": spec.profile,
           "profile_description": spec.profile_description, "spec": spec.to_dict(),
           "spec_source": {"path": spec.path, "text": ""}, "host": host or {"cpu_model": "test CPU", "cpu_logical": 2},
           "backend": {"backend": "local"}, "dataset": dataset,
           "collectors": collectors if collectors is not None else [{"name": "cpu", "ok": True, "detail": "",
                                                                      "fix": None}],
           "plan": plan.as_dict(), "plan_digest": plan.digest(), "kit": {}, "started": 1.0e9, "ended": 1.0e9 + 3600,
           "status": "complete"}
    return {**man, **extra}


def phase_markers(start: float, train_s: float, infer_s: float, gap_s: float = 0.0) -> list[dict[str, Any]]:
    """The harness's markers of one trial: train from ``start``, inference ``gap_s`` after it."""
    a = start + train_s + gap_s
    return [{"event": "phase_start", "phase": "train", "t": start},
            {"event": "phase_end", "phase": "train", "t": start + train_s, "duration_s": train_s},
            {"event": "phase_start", "phase": "infer", "t": a},
            {"event": "phase_end", "phase": "infer", "t": a + infer_s, "duration_s": infer_s}]


def write_record(rd: Any, rec: dict[str, Any], rows: Any) -> None:
    """Write a hand-made trial record through the store's one writer (``RunDir.write_trial`` takes the typed record,
    checked here as every reader checks it)."""
    rd.write_trial(TrialRecord.from_json(rec, f"{rd.path}/trials/{rec.get('trial_id')}.json"), rows)


def record_of(t: Any, start: float, train_s: float, infer_s: float, *, results: dict[str, Any] | None = None,
              env: dict[str, Any] | None = None, markers: list[dict[str, Any]] | None = None, gap_s: float = 0.0,
              **extra: Any) -> dict[str, Any]:
    """The trial file of planned trial ``t`` (a kit.plan.Trial), finished ok, with its phase markers and times."""
    end = start + train_s + gap_s + infer_s
    return {**t.as_dict(), "status": "ok", "exit_code": 0, "started": start - 1, "ended": end + 1,
            "wall_s": end + 2 - start, "phases": {},
            "markers": markers if markers is not None else phase_markers(start, train_s, infer_s, gap_s),
            "results": {"train_time_s": train_s, "infer_time_s": infer_s, **(results or {})},
            "env": env if env is not None else {"framework": t.framework}, "error": None, "collectors": [],
            "cooldown": {}, **extra}
