"""Germino et al. (seed 002): the paper's Tables I–VI and per-run series from a finished run.

Pure: the run (kit.study_api.RunView, STUDY_API 3) in, a :class:`GerminoExtras` record out (its JSON is
``analysis["extras"]["germino"]``, which report.py reads back). Every row keeps the trial ids it
summarises. The k-NN baseline (scikit-learn, no framework) runs as one case
in both framework arms' environments: its two arms run identical code, so
their difference is an A/A control of the environment, not a framework
effect, and the tables show it as the paper's framework-independent baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import numpy as np
import pandas as pd

from kit import stats
from kit.study_api import ExtrasRecord, RunView

STUDY_API = 3

MODEL_ORDER = ("knn", "mlp", "cnn")
MODEL_LABEL = {"knn": "k-NN (scikit-learn, k = 5)", "mlp": "simple neural network", "cnn": "convolutional network"}
ENERGY_METRICS = {"cpu_energy_j": "rapl", "gpu_energy_j": "nvml"}
# Gross energy (the counter's difference: idle draw included) and the same net of the run's idle power
# (kit.analysis.energy); each gross value has a worst-case bound from the counter's sampling at the phase's
# boundaries (the value table's ``bound``), summarised per cell by its median and largest.
NET_OF = {"cpu_energy_j": "cpu_energy_net_j", "gpu_energy_j": "gpu_energy_net_j"}


class Summary(TypedDict, total=False):
    """One cell (model, arm, metric) over its counted runs; only ``n`` (0) when the cell has none."""

    model: str
    arm: str
    n: int
    mean: float
    sd: float
    q1: float
    median: float
    q3: float
    min: float
    max: float
    trial_ids: list[str]


class Bound(TypedDict):
    """Median and largest worst-case ± bound of a cell's energy values over its runs."""

    median: float
    max: float
    n: int


class Sensor(TypedDict):
    ok: bool
    detail: str | None
    fix: str | None


class Ratio(TypedDict):
    model: str
    arm_a: str
    arm_b: str
    mean_ratio: float
    median_ratio: float
    aa_control: bool


class PerRun(TypedDict):
    """One counted run: its values of the paper's measures (None: not measured)."""

    trial_id: str
    model: str
    arm: str
    repetition: int
    position: int
    train_time_s: float | None
    accuracy: float | None
    cpu_energy_j: float | None
    gpu_energy_j: float | None
    cpu_energy_net_j: float | None
    gpu_energy_net_j: float | None
    device: Any  # what the trial's environment reported (a name, or nothing)


class EnergyRow(TypedDict):
    """One cell (model, arm) of Table VI: per energy counter its gross summary, net of idle, and sampling bound."""

    model: str
    arm: str
    cpu_energy_j: Summary | None
    cpu_energy_net_j: Summary | None
    cpu_energy_j_bound: Bound | None
    gpu_energy_j: Summary | None
    gpu_energy_net_j: Summary | None
    gpu_energy_j_bound: Bound | None


PerRunKey = Literal["train_time_s", "accuracy", "cpu_energy_j", "gpu_energy_j", "cpu_energy_net_j",
                    "gpu_energy_net_j"]  # the measures of a PerRun a figure draws


@dataclass(frozen=True)
class GerminoExtras(ExtrasRecord):
    """The paper's tables and per-run series (analysis.json's ``extras.germino``; fields in its key order)."""

    models: list[str]
    model_labels: dict[str, str]
    arms: list[str]
    time_train: list[Summary]
    accuracy_pct: list[Summary]
    energy_train: list[EnergyRow]
    ratios: list[Ratio]
    per_run: list[PerRun]
    sensors: dict[str, Sensor]
    energy_measured: dict[str, bool]
    knn_accuracy_identical: bool | None
    devices: list[str]


def models_of(manifest: Mapping[str, Any]) -> dict[str, str]:
    """config id -> model (knn, mlp, cnn) from the stored spec and plan."""
    spec = manifest["spec"]
    base = spec["workload"].get("params", {}).get("model", "mlp")
    out = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = (spec.get("cases") or {}).get(cfg.get("case"), {}) if cfg.get("case") else {}
        out[cid] = str(cfg.get("model") or (case.get("workload") or {}).get("model") or base)
    return out


def _summary(g: pd.DataFrame) -> Summary | None:
    if g.empty:
        return None
    g = g.sort_values("position")
    d = stats.describe(g["value"].to_numpy(float))
    return Summary(n=d.n, mean=d.mean, sd=d.sd, q1=d.q1, median=d.median, q3=d.q3, min=d.min, max=d.max,
                   trial_ids=g["trial_id"].tolist())


def _scaled(s: Summary, scale: float) -> Summary:
    """The summary of the values times ``scale`` (a fraction as a percentage): every float of it, not n."""
    return Summary(n=s["n"], mean=s["mean"] * scale, sd=s["sd"] * scale, q1=s["q1"] * scale,
                   median=s["median"] * scale, q3=s["q3"] * scale, min=s["min"] * scale, max=s["max"] * scale,
                   trial_ids=s["trial_ids"])


def _bounds(g: pd.DataFrame) -> Bound | None:
    """Median and largest ± bound of a cell's energy values (None: none known, e.g. an older analysis)."""
    if "bound" not in g or g["bound"].notna().sum() == 0:
        return None
    b = g["bound"].dropna().astype(float)
    return Bound(median=float(b.median()), max=float(b.max()), n=int(b.size))


def _sensor(run: RunView, name: str) -> Sensor:
    for c in run.record.collectors:
        if c["name"] == name:
            return Sensor(ok=bool(c["ok"]), detail=c.get("detail"), fix=c.get("fix"))
    return Sensor(ok=False, detail="collector not enabled in this run", fix=f"add {name!r} to telemetry.collectors")


def analyse(run: RunView) -> GerminoExtras:
    arms = list(run.arms)
    model_of = models_of(run.manifest)
    use = run.measured_values()
    use = use.assign(model=use["config_id"].map(model_of))
    models = [m for m in MODEL_ORDER if m in set(model_of.values())]

    def cell(model: str, arm: str, metric: str, phase: str, scale: float = 1.0) -> Summary | None:
        g = use[(use["model"] == model) & (use["arm"] == arm) & (use["metric"] == metric) & (use["phase"] == phase)]
        s = _summary(g)
        return _scaled(s, scale) if s is not None and scale != 1.0 else s

    def summary_row(model: str, arm: str, s: Summary | None) -> Summary:
        return Summary(model=model, arm=arm, **(s or Summary(n=0)))

    time_rows: list[Summary] = []
    acc_rows: list[Summary] = []
    energy_rows: list[EnergyRow] = []
    for m in models:
        for a in arms:
            time_rows.append(summary_row(m, a, cell(m, a, "time_s", "train")))
            acc_rows.append(summary_row(m, a, cell(m, a, "accuracy", "infer", 100.0)))

            def bound(metric: str, m: str = m, a: str = a) -> Bound | None:
                return _bounds(use[(use["model"] == m) & (use["arm"] == a) & (use["metric"] == metric)
                                   & (use["phase"] == "train")])

            energy_rows.append(EnergyRow(
                model=m, arm=a,
                cpu_energy_j=cell(m, a, "cpu_energy_j", "train"),
                cpu_energy_net_j=cell(m, a, "cpu_energy_net_j", "train"), cpu_energy_j_bound=bound("cpu_energy_j"),
                gpu_energy_j=cell(m, a, "gpu_energy_j", "train"),
                gpu_energy_net_j=cell(m, a, "gpu_energy_net_j", "train"), gpu_energy_j_bound=bound("gpu_energy_j")))

    ratios: list[Ratio] = []
    for m in models:
        by = {r["arm"]: r for r in time_rows if r["model"] == m and r.get("n")}
        if len(by) >= 2 and all(by[a].get("mean") for a in arms[:2]):
            a, b = arms[0], arms[1]
            ratios.append(Ratio(model=m, arm_a=a, arm_b=b, mean_ratio=by[a]["mean"] / by[b]["mean"],
                                median_ratio=by[a]["median"] / by[b]["median"], aa_control=m == "knn"))

    per_run: list[PerRun] = []
    for t in sorted(run.measured(), key=lambda r: r.position):
        rows = use[use["trial_id"] == t.trial_id]

        def val(metric: str, phase: str, rows: pd.DataFrame = rows) -> float | None:
            v = rows[(rows["metric"] == metric) & (rows["phase"] == phase)]["value"]
            return float(v.iloc[0]) if len(v) else None

        per_run.append(PerRun(trial_id=t.trial_id, model=model_of[t.config_id], arm=t.arm,
                              repetition=t.repetition, position=t.position,
                              train_time_s=val("time_s", "train"), accuracy=val("accuracy", "infer"),
                              cpu_energy_j=val("cpu_energy_j", "train"), gpu_energy_j=val("gpu_energy_j", "train"),
                              cpu_energy_net_j=val("cpu_energy_net_j", "train"),
                              gpu_energy_net_j=val("gpu_energy_net_j", "train"),
                              device=t.env.get("device")))

    knn_same = None
    knn_acc = [acc for r in per_run if r["model"] == "knn" and (acc := r["accuracy"]) is not None]
    if knn_acc:
        knn_same = bool(np.ptp(knn_acc) == 0)
    return GerminoExtras(
        models=models,
        model_labels={m: MODEL_LABEL.get(m, m) for m in models},
        arms=arms,
        time_train=time_rows,
        accuracy_pct=acc_rows,
        energy_train=energy_rows,
        ratios=ratios,
        per_run=per_run,
        sensors={src: _sensor(run, src) for src in ("rapl", "nvml")},
        energy_measured={k: bool(use[use["metric"] == k]["value"].notna().any())
                         for k in (*ENERGY_METRICS, *NET_OF.values())},
        knn_accuracy_identical=knn_same,
        devices=sorted({str(r["device"]) for r in per_run if r["device"]}),
    )
