"""analysis.json as a record: :class:`Analysis`, built by the analysis layer and read by everything after it.

The analysis layer returns it (``kit.analysis.analyze.compute_analysis``/``analyze_run``); readers (the report,
compare, history, pack, the CLI) get a stored one through ``kit.analysis.analyze.current_analysis``. Its rows
are typed (:mod:`kit.analysis_rows`), and :meth:`Analysis.to_json` is the one place analysis.json's content is
produced: the file, the seal (kit.freshness) and a study's report plug-in all get that. :meth:`Analysis.from_json`
reads a stored one, checked at the edge (a malformed file is a StoreError naming the key, never an internal
error further in); an older kit's file reads with what it lacks as None or empty.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kit.analysis_rows import (
    Descriptive,
    Design,
    Disturbance,
    HypothesisResult,
    Measured,
    RunSummary,
    ThreatRow,
    ValueRow,
)
from kit.errors import StoreError
from kit.records import JsonTable, JsonValue

ANALYSIS_SCHEMA = 1  # analysis.json's schema_version this kit writes and reads
FIX_ANALYSIS = "delete analysis.json: `kit report RUN` recomputes it from the raw data"
DIGEST_KEY = "raw_digest"  # kit.freshness: the raw data's digest the analysis was made from
SEAL_KEY = "seal"  # kit.freshness: who made it, from what
# The columns of a value row every reader indexes, and what each must hold.
_VALUE_ROW = ("trial_id", "arm", "config_id", "metric", "phase", "status")
# analysis.json's top-level keys, in the order the kit writes them.
_KEYS = ("schema_version", "kit_version", "experiment", "title", "profile", "profile_description", "alpha", "arms",
         "configs", "run", "descriptives", "hypotheses", "design", "equivalence", "measured", "trial_env", "devices",
         "trial_telemetry", "baseline", "disturbance", "values", "nodes", "extras", "study_code", "validity", "claims",
         "sequential", "excluded_trials", "retried_trials", DIGEST_KEY, SEAL_KEY)


@dataclass(frozen=True, slots=True)
class TrialSeries:
    """One trial's readings of one telemetry panel against the time since its training started, thinned."""

    arm: str
    trial_id: str
    metric: str  # the panel's key (kit.analysis.telemetry_series.PANELS)
    t_s: tuple[float, ...]
    value: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class TelemetrySeries:
    """The telemetry the report draws: an even selection of measured trials per arm, a line per panel each.

    Computed in the analysis step from the samples it reads anyway (kit.analysis.telemetry_series), kept in
    memory only: analysis.json does not hold it, so an analysis read back from disk has none and the report
    computes it from the run directory."""

    series: tuple[TrialSeries, ...]
    total: int  # the measured trials the selection was made from


@dataclass(frozen=True, slots=True)
class AnalysisSoFar:
    """What the validity rules and the claims read of an analysis still being computed (kit.analysis.analyze):
    the typed tables computed before them, so that they do not read back a half-built analysis.json by key.

    The JSON-valued pieces are the same JSON tables :class:`Analysis` keeps (their own modules compute and read
    them); :meth:`rule_tables` is the view the rules' context (kit.analysis.threats.Ctx) still takes.
    """

    hypotheses: tuple[HypothesisResult, ...] = ()
    descriptives: tuple[Descriptive, ...] = ()
    measured: tuple[Measured, ...] = ()
    equivalence: JsonTable = field(default_factory=dict)
    trial_env: tuple[JsonTable, ...] = ()
    devices: JsonTable = field(default_factory=dict)
    trial_telemetry: tuple[JsonTable, ...] = ()
    baseline: JsonTable = field(default_factory=dict)
    disturbance: Disturbance = field(default_factory=Disturbance)
    nodes: JsonTable = field(default_factory=dict)
    extras: JsonTable = field(default_factory=dict)

    def rule_tables(self) -> dict[str, Any]:
        """The tables as analysis.json writes them: what the rules of kit.analysis.threats index (the hypothesis
        rows as well; kit.analysis.validity.few_networks types them back for kit.analysis.across)."""
        return {"hypotheses": [h.to_json() for h in self.hypotheses],
                "descriptives": [d.to_json() for d in self.descriptives], "equivalence": self.equivalence,
                "measured": [m.to_json() for m in self.measured], "trial_env": list(self.trial_env),
                "devices": self.devices, "trial_telemetry": list(self.trial_telemetry), "baseline": self.baseline,
                "disturbance": self.disturbance.to_json(), "nodes": self.nodes, "extras": self.extras}


def _need(ok: bool, where: str, key: str, expected: str, got: object) -> None:
    if not ok:
        shown = repr(got)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise StoreError(f"{key} must be {expected} (got {shown})", where=where, fix=FIX_ANALYSIS)


def _value_rows(rows: tuple[JsonTable, ...], where: str) -> tuple[ValueRow, ...]:
    """The value table, each row checked and typed in one pass (the table is most of analysis.json: 770 rows for a
    quick LeNet run, read for every run by `kit history --publish`); a bad row is named by its index and column."""
    out = []
    for i, row in enumerate(rows):
        get = row.get
        value, warmup = get("value"), get("warmup", False)
        if not (all(isinstance(get(col), str) for col in _VALUE_ROW) and isinstance(warmup, bool)
                and (value is None or _is_num(value))):
            for col in _VALUE_ROW:
                _need(isinstance(get(col), str), where, f"values[{i}].{col}", "a string", get(col))
            _need(value is None or _is_num(value), where, f"values[{i}].value", "a finite number or null", value)
            _need(isinstance(warmup, bool), where, f"values[{i}].warmup", "true or false", warmup)
        out.append(ValueRow.from_json(row))
    return tuple(out)


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _table(obj: Mapping[str, JsonValue], key: str, where: str) -> JsonTable:
    v = obj.get(key)
    _need(v is None or isinstance(v, dict), where, key, "a table", v)
    return v if isinstance(v, dict) else {}


def _rows(obj: Mapping[str, JsonValue], key: str, where: str,
          keep: Callable[[JsonTable], bool] | None = None) -> tuple[JsonTable, ...]:
    """``obj[key]`` checked to be a list of tables (one pass: `kit history` reads a thousand of them); with
    ``keep``, only the rows it keeps."""
    rows = obj.get(key, [])
    if not isinstance(rows, list):
        _need(False, where, key, "a list of tables", rows)
        return ()
    out = tuple(r for r in rows if isinstance(r, dict) and (keep is None or keep(r)))
    if (keep is None and len(out) != len(rows)) or (keep is not None and not all(isinstance(r, dict) for r in rows)):
        _need(False, where, key, "a list of tables", [r for r in rows if not isinstance(r, dict)][:1])
    return out


@dataclass(frozen=True)
class Analysis:
    """analysis.json, the derived record of one run.

    ``extras`` (the study's own analysis), ``equivalence``, ``devices``, ``nodes``, ``baseline``,
    ``trial_telemetry``, ``claims`` and ``sequential`` are still JSON tables, typed as JSON (their own modules
    compute and read them); everything else is a typed row.
    """

    schema_version: int
    kit_version: str | None
    experiment: str
    title: str | None
    profile: str | None
    profile_description: str | None
    alpha: float
    arms: tuple[str, ...]
    configs: dict[str, JsonTable]
    run: RunSummary
    descriptives: tuple[Descriptive, ...]
    hypotheses: tuple[HypothesisResult, ...]
    design: Design | None
    equivalence: JsonTable
    measured: tuple[Measured, ...]
    trial_env: tuple[JsonTable, ...]  # what the first finished trial of each arm reported from inside
    devices: JsonTable
    trial_telemetry: tuple[JsonTable, ...]
    baseline: JsonTable
    disturbance: Disturbance  # what ran beside each counted trial's timed phases (kit.analysis.host_state)
    values: tuple[ValueRow, ...]  # the long value table, one row per trial, metric and phase
    nodes: JsonTable
    extras: JsonTable  # the study's own analysis, under its workload name
    study_code: JsonTable  # whose analysis.py/report.py ran, or why none did
    validity: tuple[ThreatRow, ...]  # threats to validity, one per rule outcome
    claims: JsonTable | None  # the paper's claims judged on this run (kit.analysis.claims.Ledger's JSON)
    sequential: JsonTable | None = None  # a run made with --until-conclusive: its looks
    excluded_trials: tuple[JsonTable, ...] = ()
    retried_trials: tuple[JsonTable, ...] = ()
    raw_digest: str | None = None
    seal: JsonTable | None = None
    more: JsonTable = field(default_factory=dict)  # keys a newer kit wrote, kept as they were
    telemetry: TelemetrySeries | None = field(default=None, compare=False, repr=False)  # in memory only

    @classmethod
    def from_json(cls, obj: Any, where: str, series: tuple[str, str] | None = None) -> Analysis:
        """An analysis.json object, checked (StoreError naming the key) and typed.

        ``series`` (metric, phase): keep and type only that series' value rows, for a reader that needs one
        series of many runs (`kit history`: typing the 770 rows of a LeNet run was two thirds of reading it);
        such a record's ``values`` hold only those rows."""
        _need(isinstance(obj, dict), where, "analysis.json", "a JSON object", type(obj).__name__)
        version = obj.get("schema_version")
        _need(isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= ANALYSIS_SCHEMA, where,
              "schema_version", f"at most {ANALYSIS_SCHEMA} (this kit's analysis format)", version)
        _need(isinstance(obj.get("experiment"), str), where, "experiment", "a name", obj.get("experiment"))
        alpha = obj.get("alpha")
        _need(_is_num(alpha) and 0 < alpha < 1, where, "alpha", "a number in (0, 1)", alpha)
        arms = obj.get("arms")
        _need(isinstance(arms, list) and all(isinstance(a, str) for a in arms), where, "arms", "a list of arm names",
              arms)
        configs = obj.get("configs", {})
        _need(isinstance(configs, dict) and all(isinstance(v, dict) for v in configs.values()), where, "configs",
              "a table of configuration tables", configs)
        metric, phase = series or ("", "")
        rows = _rows(obj, "values", where, None if series is None else
                     lambda r: r.get("metric") == metric and r.get("phase") == phase)
        values = _value_rows(rows, where)
        trial_env = _rows(obj, "trial_env", where)
        for i, env in enumerate(trial_env):
            _need(isinstance(env.get("arm"), str), where, f"trial_env[{i}].arm", "an arm name", env.get("arm"))
        shaken = _table(obj, "disturbance", where)
        phases = shaken.get("phases", [])
        _need(isinstance(phases, list) and all(isinstance(r, dict) for r in phases), where, "disturbance.phases",
              "a list of tables", phases)
        for key in ("kit_version", "profile", "title", "profile_description", DIGEST_KEY):
            _need(obj.get(key) is None or isinstance(obj[key], str), where, key, "a string", obj.get(key))
        design, claims, seq, sealed = (obj.get(k) for k in ("design", "claims", "sequential", SEAL_KEY))
        for key, v in (("design", design), ("claims", claims), ("sequential", seq), (SEAL_KEY, sealed)):
            _need(v is None or isinstance(v, dict), where, key, "a table", v)
        return cls(
            schema_version=version, kit_version=obj.get("kit_version"), experiment=obj["experiment"],
            title=obj.get("title"), profile=obj.get("profile"), profile_description=obj.get("profile_description"),
            alpha=alpha, arms=tuple(arms), configs=configs, run=RunSummary.from_json(_table(obj, "run", where)),
            descriptives=tuple(Descriptive.from_json(r) for r in _rows(obj, "descriptives", where)),
            hypotheses=tuple(HypothesisResult.from_json(r) for r in _rows(obj, "hypotheses", where)),
            design=Design.from_json(design) if isinstance(design, dict) and design else None,
            equivalence=_table(obj, "equivalence", where),
            measured=tuple(Measured.from_json(r) for r in _rows(obj, "measured", where)), trial_env=trial_env,
            devices=_table(obj, "devices", where), trial_telemetry=_rows(obj, "trial_telemetry", where),
            baseline=_table(obj, "baseline", where), disturbance=Disturbance.from_json(shaken),
            values=values, nodes=_table(obj, "nodes", where),
            extras=_table(obj, "extras", where), study_code=_table(obj, "study_code", where),
            validity=tuple(ThreatRow.from_json(r) for r in _rows(obj, "validity", where)),
            claims=claims if isinstance(claims, dict) else None, sequential=seq if isinstance(seq, dict) else None,
            excluded_trials=_rows(obj, "excluded_trials", where), retried_trials=_rows(obj, "retried_trials", where),
            raw_digest=obj.get(DIGEST_KEY), seal=sealed if isinstance(sealed, dict) else None,
            more={k: v for k, v in obj.items() if k not in _KEYS})

    def to_json(self) -> dict[str, Any]:
        """analysis.json's content: the one place it is produced from the record."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version, "kit_version": self.kit_version, "experiment": self.experiment,
            "title": self.title, "profile": self.profile, "profile_description": self.profile_description,
            "alpha": self.alpha, "arms": list(self.arms), "configs": self.configs, "run": self.run.to_json(),
            "descriptives": [d.to_json() for d in self.descriptives],
            "hypotheses": [h.to_json() for h in self.hypotheses]}
        if self.design is not None:
            out["design"] = self.design.to_json()
        out.update({
            "equivalence": self.equivalence, "measured": [m.to_json() for m in self.measured],
            "trial_env": list(self.trial_env), "devices": self.devices, "trial_telemetry": list(self.trial_telemetry),
            "baseline": self.baseline, "disturbance": self.disturbance.to_json(),
            "values": [v.to_json() for v in self.values], "nodes": self.nodes, "extras": self.extras,
            "study_code": self.study_code, "validity": [t.to_json() for t in self.validity]})
        for key, v in (("claims", self.claims), ("sequential", self.sequential)):
            if v is not None:
                out[key] = v
        out["excluded_trials"] = list(self.excluded_trials)
        out["retried_trials"] = list(self.retried_trials)
        if self.raw_digest is not None:
            out[DIGEST_KEY] = self.raw_digest
        if self.seal is not None:
            out[SEAL_KEY] = self.seal
        out.update(self.more)
        return out

    def config_label(self, config_id: str) -> str:
        """A configuration's settings as one ``k=v,...`` label ("default" for the single configuration)."""
        cfg = self.configs.get(config_id) or {}
        return ",".join(f"{k}={v}" for k, v in sorted(cfg.items())) or "default"

    def counted_values(self) -> list[ValueRow]:
        """The value rows that enter statistics (kit.records.counts: a measured trial that finished ok), with a
        value."""
        return [v for v in self.values if v.value is not None and v.counts]

    def values_of(self, metric: str, phase: str, arm: str) -> list[float]:
        """The values of one metric, phase and arm that count, in schedule order."""
        return [float(v.value) for v in self.counted_values()
                if v.value is not None and v.metric == metric and v.phase == phase and v.arm == arm]

    def value_rows(self) -> list[JsonTable]:
        """The value table as JSON rows (for a DataFrame: ``pd.DataFrame(analysis.value_rows())``)."""
        return [v.to_json() for v in self.values]
