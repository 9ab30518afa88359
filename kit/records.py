"""The shape of the records in a run directory, checked where they are read.

manifest.json and trials/*.json are written by the kit, but a run directory
handed over by someone else may hold anything: a manifest that is a JSON
list, a plan whose trials are strings, a trial whose ``phases`` is a list or
whose ``block`` is not its plan's. Readers index these records in hundreds of
places, so each is checked once, at the edge (``RunDir.manifest`` and
``RunDir.trial_records``), and a malformed one is a :class:`StoreError`
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
from typing import Any, TypedDict, cast

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


# JSON as it is: the harness's markers, results and environment, a backend's details. A real type (recursive), not a
# rename of Any: a value is a string, a number, a flag, null, or a list or table of such values.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
JsonTable = dict[str, JsonValue]


class AmbientJson(TypedDict):
    """``ambient``: the room's temperature as the trial started (kit.collectors.ambient.AmbientReading)."""

    sensor_c: float | None
    sensor: str | None
    stated_c: float | None
    note: str


class CooldownJson(TypedDict, total=False):
    """``cooldown``: the wait before the trial (kit.collectors.thermal.CooldownResult; a short form without sensors)."""

    waited_s: float
    reached: bool
    start_temps: dict[str, float]
    baseline: dict[str, float]
    band_c: float
    initial_temps: dict[str, float]
    note: str


class CollectorJson(TypedDict):
    """One entry of ``collectors``: what a collector said about itself after the trial (kit.collectors.base)."""

    name: str
    available: bool
    detail: str
    n_rows: int
    errors: list[str]


class PinningJson(TypedDict):
    """``pinning``: the CPUs the trial and the kit ran on (kit.pinning.Pinning), null when unpinned."""

    trial_cpus: list[int]
    kit_cpus: list[int]
    note: str


class ExecutorJson(TypedDict, total=False):
    """``executor``: the cluster job a trial of a shared run ran in (absent for a trial run by `kit run` itself)."""

    name: str
    chunk: int | None
    job_id: str
    array_job_id: str
    task_id: str
    node: str
    partition: str


class DisturbanceJson(TypedDict):
    """``disturbance``: what ran beside the trial's timed phases (kit.disturbance.TrialDisturbance)."""

    schema: int
    disturbed: bool
    cause: str | None
    limits: dict[str, float]
    phases: dict[str, JsonTable]


@dataclass(frozen=True)
class TrialOutcomeFields:
    """What the code that ran a trial hands :meth:`TrialRecord.from_outcome`, besides the planned trial.

    The runner fills it from the harness's outcome and the host's readings around it; the record adds the plan's
    identity and orders the keys as the trial file has always had them.
    """

    status: str
    exit_code: int | None
    started: float
    ended: float
    wall_s: float | None
    phases: dict[str, dict[str, float | None]]
    markers: tuple[JsonTable, ...]
    results: JsonTable
    env: JsonTable
    signal: str | None
    error: str | None
    traceback_tail: str | None
    stderr_tail: str | None
    backend: JsonTable
    collectors: tuple[CollectorJson, ...]
    cooldown: CooldownJson
    host: str
    device: str | None = None  # None: the host did not resolve a device (no ``device``/``gpus`` keys written)
    gpu_tables: tuple[JsonTable, ...] = ()


@dataclass(frozen=True)
class TrialRecord:
    """One trial file (``trials/<id>.json``): built by the code that ran the trial (:meth:`from_outcome`) and written
    by ``RunDir.write_trial``, or read back, validated at the edge (:meth:`from_json`, :func:`check_trial`).

    Identity and placement repeat the plan's entry; ``results`` holds what the workload measured (numbers,
    strings, flags), ``phases`` the harness's phase table (start, end, duration_s, ...), ``env`` what the trial
    reported about itself; the host's readings around it (cool-down, ambient, disturbance), where it ran (backend,
    pinning, executor) and which attempt it is are typed fields too. :attr:`counts` is the one rule for which trials
    enter statistics. ``raw`` is the file as read (empty for a record built here): :meth:`to_json` gives it back
    unchanged, so a run of an older kit is never rewritten with keys it did not have.
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
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    markers: tuple[JsonTable, ...] = ()
    signal: str | None = None
    traceback_tail: str | None = None
    stderr_tail: str | None = None
    backend: JsonTable = dataclasses.field(default_factory=dict)
    pinning: PinningJson | None = None
    collectors: tuple[CollectorJson, ...] = ()
    cooldown: CooldownJson = dataclasses.field(default_factory=lambda: CooldownJson())
    host: str | None = None
    ambient: AmbientJson | None = None
    disturbance: DisturbanceJson | None = None
    executor: ExecutorJson | None = None  # only a trial of a shared run (a cluster job's chunk)
    attempt: int | None = None  # the attempt number of a re-run trial (its earlier attempts are under attempts/)
    previous_attempts: tuple[str, ...] = ()
    gpu_tables: tuple[JsonTable, ...] | None = None  # the GPUs as recorded ({"index", "uuid", "name"}); None: no keys
    reason: str | None = None  # why a trial was skipped, where its file says (never written by this kit's runner)
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def counts(self) -> bool:
        """Enters statistics: a measured trial (not a warm-up) that finished ok (see :func:`counts`)."""
        return self.status == "ok" and not self.warmup

    @classmethod
    def from_outcome(cls, trial: Trial, out: TrialOutcomeFields, *, ambient: AmbientJson,
                     disturbance: DisturbanceJson, pinning: PinningJson | None, executor: ExecutorJson | None = None,
                     previous_attempts: tuple[str, ...] = ()) -> TrialRecord:
        """The record of planned ``trial`` from what running it gave: built once, complete, by the code that ran it.

        ``previous_attempts`` are the archived attempts of a re-run trial (attempts/...); the record then says which
        attempt it is.
        """
        indices = tuple(i for g in out.gpu_tables if isinstance(i := g.get("index"), int))
        return cls(
            trial_id=trial.trial_id, arm=trial.arm, framework=trial.framework, config_id=trial.config_id,
            config=trial.config, block=trial.block, repetition=trial.repetition, position=trial.position,
            seed=trial.seed, warmup=trial.warmup, status=out.status, results=out.results, phases=out.phases,
            env=out.env, gpus=indices, device=out.device, error=out.error, wall_s=out.wall_s,
            schema_version=TRIAL_SCHEMA, exit_code=out.exit_code, started=out.started, ended=out.ended,
            markers=out.markers, signal=out.signal, traceback_tail=out.traceback_tail, stderr_tail=out.stderr_tail,
            backend=out.backend, pinning=pinning, collectors=out.collectors, cooldown=out.cooldown, host=out.host,
            ambient=ambient, disturbance=disturbance, executor=executor,
            attempt=len(previous_attempts) + 1 if previous_attempts else None, previous_attempts=previous_attempts,
            gpu_tables=out.gpu_tables if out.device is not None else None)

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
        attempts = rec.get("previous_attempts")
        return cls(
            trial_id=rec["trial_id"], arm=rec["arm"], framework=rec["framework"], config_id=rec["config_id"],
            config=dict(rec.get("config") or {}), block=rec["block"], repetition=rec["repetition"],
            position=rec["position"], seed=rec.get("seed") if _is_int(rec.get("seed")) else None,
            warmup=bool(rec.get("warmup", False)), status=rec["status"], results=dict(rec.get("results") or {}),
            phases={str(k): _floats(v) for k, v in (rec.get("phases") or {}).items()}, env=dict(rec.get("env") or {}),
            gpus=tuple(i for i in indices or () if isinstance(i, int)),
            device=rec.get("device") if isinstance(rec.get("device"), str) else None,
            error=rec.get("error"), wall_s=float(rec["wall_s"]) if _is_num(rec.get("wall_s")) else None,
            schema_version=int(version), exit_code=rec.get("exit_code") if _is_int(rec.get("exit_code")) else None,
            started=float(rec["started"]) if _is_num(rec.get("started")) else None,
            ended=float(rec["ended"]) if _is_num(rec.get("ended")) else None,
            markers=tuple(rec.get("markers") or ()), signal=rec.get("signal"),
            traceback_tail=rec.get("traceback_tail"), stderr_tail=rec.get("stderr_tail"),
            backend=dict(rec.get("backend") or {}), pinning=_table_or_none(rec.get("pinning")),
            collectors=tuple(rec.get("collectors") or ()), cooldown=cast(CooldownJson, dict(rec.get("cooldown") or {})),
            host=rec.get("host"), ambient=_table_or_none(rec.get("ambient")),
            disturbance=_table_or_none(rec.get("disturbance")), executor=_table_or_none(rec.get("executor")),
            attempt=rec.get("attempt") if _is_int(rec.get("attempt")) else None,
            previous_attempts=tuple(a for a in attempts if isinstance(a, str)) if isinstance(attempts, list) else (),
            gpu_tables=tuple(g for g in gpus if isinstance(g, dict)) if "gpus" in rec else None,
            reason=rec.get("reason"), raw=rec)

    def to_json(self) -> dict[str, Any]:
        """The trial file's content: a record read is given back unchanged; a record built here in the trial file's
        key order (the plan's entry, the device, the outcome, the host's readings, then the optional keys)."""
        if self.raw:
            return dict(self.raw)
        out: dict[str, Any] = {
            "schema_version": self.schema_version, "trial_id": self.trial_id, "position": self.position,
            "block": self.block, "repetition": self.repetition, "warmup": self.warmup, "arm": self.arm,
            "framework": self.framework, "config_id": self.config_id, "config": dict(self.config), "seed": self.seed}
        if self.gpu_tables is not None:
            out.update(device=self.device, gpus=[dict(g) for g in self.gpu_tables])
        out.update(
            status=self.status, exit_code=self.exit_code, started=self.started, ended=self.ended, wall_s=self.wall_s,
            phases={k: dict(v) for k, v in self.phases.items()}, markers=[dict(m) for m in self.markers],
            results=dict(self.results), env=dict(self.env), signal=self.signal, error=self.error,
            traceback_tail=self.traceback_tail, stderr_tail=self.stderr_tail, backend=dict(self.backend),
            pinning=None if self.pinning is None else dict(self.pinning),
            collectors=[dict(c) for c in self.collectors], cooldown=dict(self.cooldown), host=self.host,
            ambient=None if self.ambient is None else dict(self.ambient),
            disturbance=None if self.disturbance is None else dict(self.disturbance))
        if self.executor is not None:
            out["executor"] = dict(self.executor)
        if self.previous_attempts:
            out.update(attempt=self.attempt, previous_attempts=list(self.previous_attempts))
        if self.reason is not None:
            out["reason"] = self.reason
        return out


def _table_or_none(v: Any) -> Any:
    """A sub-table of a trial file as read (its type checked by :func:`check_trial`), None when absent."""
    return dict(v) if isinstance(v, dict) else None


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
    config: dict[str, JsonValue] = dataclasses.field(default_factory=dict)  # the configuration's settings
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
    configs: dict[str, dict[str, JsonValue]]
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
