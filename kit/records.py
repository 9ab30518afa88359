"""The shape of the records in a run directory, checked where they are read.

manifest.json and trials/*.json are written by the kit, but a run directory
handed over by someone else may hold anything: a manifest that is a JSON
list, a plan whose trials are strings, a trial whose ``phases`` is a list or
whose ``block`` is not its plan's. Readers index these records in hundreds of
places, so each is checked once, at the edge (``RunDir.manifest`` and
``RunDir.checked_trials``), and a malformed one is a :class:`StoreError`
naming the file and the key path, never an "internal error" further in.

What is checked is what the analysis, the report and the comparisons rely
on: types of the plan and its trials, the spec's design, workload and
hypotheses, and that a trial file repeats its planned identity (arm,
framework, configuration, block, position, repetition, warm-up, seed). The
values of a trial's results are screened by metric later
(``kit.analysis.screen``): an impossible number excludes one trial, a
malformed record refuses the run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kit.errors import PlanError, StoreError

FIX_MANIFEST = "restore manifest.json from a copy of the run (a bundle holds one), or start a new run"
FIX_TRIAL = "remove the file (kit run --resume re-runs a missing planned trial)"
TRIAL_STATUSES = ("ok", "oom", "skipped", "error", "timeout")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need(ok: bool, where: str, key: str, expected: str, got: Any, fix: str) -> None:
    if not ok:
        shown = repr(got)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise StoreError(f"{key} must be {expected} (got {shown})", where=where, fix=fix)


def check_manifest(man: Any, where: str) -> dict[str, Any]:
    """``man`` if it has the shape the kit's readers rely on; StoreError naming the key otherwise."""
    f = FIX_MANIFEST
    _need(isinstance(man, dict), where, "manifest.json", "a JSON object", type(man).__name__, f)
    exp = man.get("experiment")
    _need(isinstance(exp, str) and 0 < len(exp) <= 200, where, "experiment", "a name", exp, f)
    for key in ("title", "profile", "status", "label", "profile_description"):
        _need(man.get(key) is None or isinstance(man[key], str), where, key, "a string", man.get(key), f)
    for key in ("started", "ended"):
        _need(man.get(key) is None or _is_num(man[key]), where, key, "a finite number (UNIX time)", man.get(key), f)
    for key in ("host", "kit", "backend", "dataset", "devices", "executor", "baseline", "selftest", "study"):
        _need(man.get(key) is None or isinstance(man[key], dict), where, key, "a table", man.get(key), f)
    _need(man.get("collectors") is None or (isinstance(man["collectors"], list)
          and all(isinstance(c, dict) for c in man["collectors"])), where, "collectors", "a list of tables",
          man.get("collectors"), f)
    _check_spec(man.get("spec"), where)
    _check_plan(man.get("plan"), where)
    return man


def counts(rec: Mapping[str, Any]) -> bool:
    """The one rule for which trials, and which of their values, enter statistics: a measured trial (not a
    warm-up) that finished ok. ``rec`` is a trial record, a row of the value table or a per-trial fact
    (anything with ``status`` and ``warmup``); every reader asks this, none writes its own filter."""
    return rec.get("status") == "ok" and not rec.get("warmup")


def counted(values: Any) -> Any:
    """The rows of a value table (a pandas DataFrame with ``status`` and ``warmup`` columns) that :func:`counts`
    admits: the same rule, applied to a whole column at once."""
    return values[(values["status"] == "ok") & ~values["warmup"].astype(bool)]


def _check_spec(spec: Any, where: str) -> None:
    f = FIX_MANIFEST
    _need(isinstance(spec, dict), where, "spec", "a table", spec, f)
    design = spec.get("design")
    _need(isinstance(design, dict), where, "spec.design", "a table", design, f)
    alpha = design.get("alpha")
    _need(_is_num(alpha) and 0 < alpha < 1, where, "spec.design.alpha", "a number in (0, 1)", alpha, f)
    wl = spec.get("workload")
    _need(isinstance(wl, dict) and isinstance(wl.get("name"), str), where, "spec.workload.name", "a workload name",
          (wl or {}).get("name") if isinstance(wl, dict) else wl, f)
    for key in ("telemetry", "dataset", "container"):
        _need(spec.get(key) is None or isinstance(spec[key], dict), where, f"spec.{key}", "a table", spec.get(key), f)
    hyps = spec.get("hypotheses", [])
    _need(isinstance(hyps, list), where, "spec.hypotheses", "a list of tables", hyps, f)
    for i, h in enumerate(hyps):
        k = f"spec.hypotheses[{i}]"
        _need(isinstance(h, dict), where, k, "a table", h, f)
        for field in ("id", "metric", "question"):
            _need(isinstance(h.get(field), str), where, f"{k}.{field}", "a string", h.get(field), f)
        phases = h.get("phases")
        _need(isinstance(phases, list) and all(isinstance(p, str) for p in phases), where, f"{k}.phases",
              "a list of phase names", phases, f)


def _check_plan(plan: Any, where: str) -> None:
    f = FIX_MANIFEST
    _need(isinstance(plan, dict), where, "plan", "a table", plan, f)
    _need(_is_int(plan.get("seed")), where, "plan.seed", "an integer", plan.get("seed"), f)
    _need(isinstance(plan.get("blocking"), str), where, "plan.blocking", "a string", plan.get("blocking"), f)
    arms = plan.get("arms")
    _need(isinstance(arms, list) and bool(arms) and all(isinstance(a, str) and a for a in arms)
          and len(set(arms)) == len(arms), where, "plan.arms", "a list of distinct arm names", arms, f)
    configs = plan.get("configs")
    _need(isinstance(configs, dict) and all(isinstance(v, dict) for v in configs.values()), where, "plan.configs",
          "a table of configuration tables", configs, f)
    trials = plan.get("trials")
    _need(isinstance(trials, list), where, "plan.trials", "a list of planned trials", trials, f)
    seen: set[str] = set()
    for i, t in enumerate(trials):
        k = f"plan.trials[{i}]"
        _need(isinstance(t, dict), where, k, "a table", t, f)
        tid = t.get("trial_id")
        _need(isinstance(tid, str) and bool(tid) and tid not in seen, where, f"{k}.trial_id", "a distinct trial id",
              tid, f)
        seen.add(tid)
        for field in ("position", "block", "repetition", "seed"):
            _need(_is_int(t.get(field)), where, f"{k}.{field}", "an integer", t.get(field), f)
        _need(isinstance(t.get("warmup"), bool), where, f"{k}.warmup", "true or false", t.get("warmup"), f)
        _need(t.get("arm") in arms, where, f"{k}.arm", f"one of plan.arms {arms}", t.get("arm"), f)
        _need(isinstance(t.get("framework"), str), where, f"{k}.framework", "a string", t.get("framework"), f)
        _need(t.get("config_id") in configs, where, f"{k}.config_id", "a key of plan.configs", t.get("config_id"), f)
        _need(isinstance(t.get("config", {}), dict), where, f"{k}.config", "a table", t.get("config"), f)


# What a trial file must repeat from its plan entry (a crafted file cannot move a trial to another arm or block).
PLANNED_FIELDS = ("arm", "framework", "config_id", "block", "position", "repetition", "warmup", "seed")


def check_trial(rec: dict[str, Any], planned: dict[str, Any] | None, where: str,
                statuses: tuple[str, ...] = TRIAL_STATUSES) -> dict[str, Any]:
    """A trial record's identity and the types every reader indexes; StoreError naming the key otherwise.

    ``planned`` is the plan's entry of the record's trial id (None: the plan does not constrain it).
    """
    f = FIX_TRIAL
    status = rec.get("status")
    _need(status in statuses, where, "status", f"one of {', '.join(statuses)}", status, f)
    for field in PLANNED_FIELDS:
        if planned is not None and field in planned:
            _need(rec.get(field) == planned[field] and type(rec.get(field)) is type(planned[field]), where, field,
                  f"the planned value {planned[field]!r}", rec.get(field), f)
    for field, kind, word in (("results", dict, "a table"), ("phases", dict, "a table"), ("env", dict, "a table"),
                              ("markers", list, "a list"), ("backend", dict, "a table"),
                              ("collectors", list, "a list"), ("cooldown", dict, "a table"),
                              ("ambient", dict, "a table")):
        v = rec.get(field)
        _need(v is None or isinstance(v, kind), where, field, word, v, f)
    _need(all(isinstance(m, dict) for m in rec.get("markers") or []), where, "markers", "a list of tables",
          rec.get("markers"), f)
    _need(all(isinstance(p, dict) for p in (rec.get("phases") or {}).values()), where, "phases", "a table of tables",
          rec.get("phases"), f)
    for field in ("wall_s", "started", "ended"):
        v = rec.get(field)
        _need(v is None or _is_num(v), where, field, "a finite number", v, f)
    for field in ("error", "stderr_tail", "traceback_tail", "signal", "host", "reason"):
        v = rec.get(field)
        _need(v is None or isinstance(v, str), where, field, "a string", v, f)
    return rec


# -- typed records ----------------------------------------------------------------------------------------------------

TRIAL_SCHEMA = 1  # the trial file's schema_version this kit writes and reads
# The status the analysis gives a trial whose record is impossible (kit.analysis.screen): never written by a trial,
# but a screened record carries it into what a study's analyse() reads.
SCREENED_INVALID = "invalid"


def _floats(d: Any) -> dict[str, float | None]:
    return {str(k): (float(v) if _is_num(v) else None) for k, v in (d or {}).items()}


@dataclass(frozen=True)
class TrialRecord:
    """One trial file (``trials/<id>.json``), validated at the edge (:func:`check_trial`) and typed.

    Identity and placement repeat the plan's entry; ``results`` holds what the workload measured (numbers,
    strings, flags), ``phases`` the harness's phase table (start, end, duration_s, ...), ``env`` what the trial
    reported about itself. :attr:`counts` is the one rule for which trials enter statistics. ``raw`` keeps the
    whole file for the fields not typed here (markers, collectors, backend, cool-down), read-only.
    """

    trial_id: str
    arm: str
    framework: str
    config_id: str
    config: Mapping[str, Any]
    block: int
    repetition: int
    position: int
    seed: int | None
    warmup: bool
    status: str
    results: Mapping[str, Any]
    phases: Mapping[str, Mapping[str, float | None]]
    env: Mapping[str, Any]
    gpus: tuple[int, ...]
    device: str | None
    error: str | None
    wall_s: float | None
    schema_version: int
    raw: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @property
    def counts(self) -> bool:
        """Enters statistics: a measured trial (not a warm-up) that finished ok (see :func:`counts`)."""
        return counts(self.raw)

    @classmethod
    def from_json(cls, rec: Any, where: str, planned: dict[str, Any] | None = None) -> TrialRecord:
        """A trial file's JSON object, checked (StoreError naming the key) and typed."""
        _need(isinstance(rec, dict), where, "trial file", "a JSON object", type(rec).__name__, FIX_TRIAL)
        check_trial(rec, planned, where, (*TRIAL_STATUSES, SCREENED_INVALID))
        for key in ("trial_id", "arm", "framework", "config_id"):
            _need(isinstance(rec.get(key), str), where, key, "a string", rec.get(key), FIX_TRIAL)
        for key in ("block", "repetition", "position"):
            _need(_is_int(rec.get(key)), where, key, "an integer", rec.get(key), FIX_TRIAL)
        _need(isinstance(rec.get("warmup", False), bool), where, "warmup", "true or false", rec.get("warmup"), FIX_TRIAL)
        # The runner records each GPU as a table ({"index", "uuid", "name"}, kit.gpus); plain indices are read too.
        gpus = rec.get("gpus") or []
        indices = [g.get("index") if isinstance(g, dict) else g for g in gpus] if isinstance(gpus, list) else None
        _need(indices is not None and all(_is_int(i) for i in indices), where, "gpus",
              "a list of GPUs (tables with an integer index)", gpus, FIX_TRIAL)
        version = rec.get("schema_version", TRIAL_SCHEMA)
        _need(_is_int(version) and 1 <= version <= TRIAL_SCHEMA, where, "schema_version",
              f"at most {TRIAL_SCHEMA} (this kit's trial format)", version, "upgrade the kit to read this run")
        return cls(
            trial_id=rec["trial_id"], arm=rec["arm"], framework=rec["framework"], config_id=rec["config_id"],
            config=dict(rec.get("config") or {}), block=rec["block"], repetition=rec["repetition"],
            position=rec["position"], seed=rec.get("seed") if _is_int(rec.get("seed")) else None,
            warmup=bool(rec.get("warmup", False)), status=rec["status"], results=dict(rec.get("results") or {}),
            phases={str(k): _floats(v) for k, v in (rec.get("phases") or {}).items()}, env=dict(rec.get("env") or {}),
            gpus=tuple(i for i in indices or () if isinstance(i, int)), device=rec.get("device") if isinstance(rec.get("device"), str) else None,
            error=rec.get("error"), wall_s=float(rec["wall_s"]) if _is_num(rec.get("wall_s")) else None,
            schema_version=int(version), raw=rec)

    def to_json(self) -> dict[str, Any]:
        """The trial file's content (what was read, unchanged)."""
        return dict(self.raw)


# -- the plan ---------------------------------------------------------------------------------------------------------
# The plan's record format lives here, with the other records of a run directory; kit.plan draws plans.

@dataclass(frozen=True)
class Trial:
    """One unit of work: an arm in a configuration at one repetition."""

    trial_id: str
    position: int
    block: int
    repetition: int
    warmup: bool
    arm: str
    framework: str
    config_id: str
    config: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trial:
        try:
            return cls(**d)
        except TypeError as exc:
            raise PlanError(f"a planned trial does not match this kit's plan format ({exc})",
                            fix="re-run with the kit version that made the run, or start a new run") from None


@dataclass(frozen=True)
class Plan:
    """The ordered trials and how they were drawn."""

    seed: int
    blocking: str
    arms: tuple[str, ...]
    configs: dict[str, dict[str, Any]]
    trials: tuple[Trial, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "blocking": self.blocking,
            "arms": list(self.arms),
            "configs": self.configs,
            "trials": [t.as_dict() for t in self.trials],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(
            seed=int(d["seed"]),
            blocking=str(d["blocking"]),
            arms=tuple(d["arms"]),
            configs=dict(d["configs"]),
            trials=tuple(Trial.from_dict(t) for t in d["trials"]),
        )

    def digest(self) -> str:
        """A short hash of the plan, to tell two plans apart at a glance."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:12]


# -- the analysis -----------------------------------------------------------------------------------------------------

ANALYSIS_SCHEMA = 1  # analysis.json's schema_version this kit writes and reads
FIX_ANALYSIS = "delete analysis.json: `kit report RUN` recomputes it from the raw data"
# The columns of a value row every reader indexes, and what each must hold.
_VALUE_ROW = (("trial_id", str), ("arm", str), ("config_id", str), ("metric", str), ("phase", str),
              ("status", str))


@dataclass(frozen=True)
class Analysis:
    """analysis.json, the derived record of one run, checked at the top level and typed.

    The analysis layer writes it (``kit.analysis.analyze.compute_analysis``, plain JSON, sealed by
    kit.freshness); readers (compare, history, pack, the CLI) get it through
    ``kit.analysis.analyze.current_analysis`` as this record, whose :meth:`values_of` applies the one rule of
    which values count. Nested tables (hypotheses, validity, devices) keep their JSON shape, read-only; ``raw``
    is the whole object for the report templates and for the seal.
    """

    schema_version: int
    kit_version: str | None
    experiment: str
    profile: str | None
    alpha: float
    arms: tuple[str, ...]
    configs: Mapping[str, Mapping[str, Any]]
    values: tuple[Mapping[str, Any], ...]  # the long value table, one row per trial, metric and phase
    hypotheses: tuple[Mapping[str, Any], ...]
    validity: tuple[Mapping[str, Any], ...]  # threats to validity, one table per rule outcome
    trial_env: tuple[Mapping[str, Any], ...]  # what the first finished trial of each arm reported from inside
    extras: Mapping[str, Any]  # the study's own analysis, under its workload name
    study_code: Mapping[str, Any]  # whose analysis.py/report.py ran, or why none did
    disturbance: Mapping[str, Any]  # what ran beside each counted trial's timed phases (kit.analysis.host_state)
    raw: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Analysis:
        """An analysis.json object, checked (StoreError naming the key) and typed."""
        f = FIX_ANALYSIS
        _need(isinstance(obj, dict), where, "analysis.json", "a JSON object", type(obj).__name__, f)
        version = obj.get("schema_version")
        _need(_is_int(version) and 1 <= version <= ANALYSIS_SCHEMA, where, "schema_version",
              f"at most {ANALYSIS_SCHEMA} (this kit's analysis format)", version, f)
        _need(isinstance(obj.get("experiment"), str), where, "experiment", "a name", obj.get("experiment"), f)
        alpha = obj.get("alpha")
        _need(_is_num(alpha) and 0 < alpha < 1, where, "alpha", "a number in (0, 1)", alpha, f)
        arms = obj.get("arms")
        _need(isinstance(arms, list) and all(isinstance(a, str) for a in arms), where, "arms", "a list of arm names",
              arms, f)
        configs = obj.get("configs", {})
        _need(isinstance(configs, dict) and all(isinstance(v, dict) for v in configs.values()), where, "configs",
              "a table of configuration tables", configs, f)
        tables: dict[str, tuple[Mapping[str, Any], ...]] = {}
        for key in ("values", "hypotheses", "validity", "trial_env"):
            rows = obj.get(key, [])
            ok = isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
            _need(ok, where, key, "a list of tables", rows if not isinstance(rows, list) else
                  [r for r in rows if not isinstance(r, dict)][:1], f)
            tables[key] = tuple(rows)
        for i, row in enumerate(tables["values"]):
            for col, kind in _VALUE_ROW:
                _need(isinstance(row.get(col), kind), where, f"values[{i}].{col}", "a string", row.get(col), f)
            _need(row.get("value") is None or _is_num(row["value"]), where, f"values[{i}].value",
                  "a finite number or null", row.get("value"), f)
            _need(isinstance(row.get("warmup", False), bool), where, f"values[{i}].warmup", "true or false",
                  row.get("warmup"), f)
        for i, env in enumerate(tables["trial_env"]):
            _need(isinstance(env.get("arm"), str), where, f"trial_env[{i}].arm", "an arm name", env.get("arm"), f)
        for key in ("extras", "study_code", "disturbance"):
            _need(isinstance(obj.get(key, {}), dict), where, key, "a table", obj.get(key), f)
        shaken = obj.get("disturbance") or {}
        _need(isinstance(shaken.get("phases", []), list) and all(isinstance(r, dict) for r in shaken.get("phases", [])),
              where, "disturbance.phases", "a list of tables", shaken.get("phases"), f)
        for key in ("kit_version", "profile"):
            _need(obj.get(key) is None or isinstance(obj[key], str), where, key, "a string", obj.get(key), f)
        return cls(schema_version=version, kit_version=obj.get("kit_version"), experiment=obj["experiment"],
                   profile=obj.get("profile"), alpha=float(alpha), arms=tuple(arms), configs=configs,
                   values=tables["values"], hypotheses=tables["hypotheses"], validity=tables["validity"],
                   trial_env=tables["trial_env"], extras=obj.get("extras") or {},
                   study_code=obj.get("study_code") or {}, disturbance=shaken, raw=obj)

    def to_json(self) -> dict[str, Any]:
        """analysis.json's content (what was read or computed, unchanged)."""
        return dict(self.raw)

    def config_label(self, config_id: str) -> str:
        """A configuration's settings as one ``k=v,...`` label ("default" for the single configuration)."""
        cfg = self.configs.get(config_id) or {}
        return ",".join(f"{k}={v}" for k, v in sorted(cfg.items())) or "default"

    def counted_values(self) -> list[Mapping[str, Any]]:
        """The value rows that enter statistics (:func:`counts`), with a value."""
        return [v for v in self.values if v.get("value") is not None and counts(v)]

    def values_of(self, metric: str, phase: str, arm: str) -> list[float]:
        """The values of one metric, phase and arm that count, in schedule order."""
        return [float(v["value"]) for v in self.counted_values()
                if v["metric"] == metric and v["phase"] == phase and v["arm"] == arm]
