"""Dai et al. (seed 004): single-GPU training throughput of seven networks and the factors behind the gap.

Pure. The design crosses networks (the grid's ``model``) with runs of a
two-level factorial over five factors (the ``[cases]``): cuDNN autotuning,
image layout, execution (eager vs compiled), precision and the input
pipeline. Per configuration and repetition (block) the response is the log
of the TF/PT ratio of mean training-step time (0: no gap). An OLS fit of that response on the
coded factors (-1/+1) plus the network (a block) gives each factor's effect on the gap
(the ratio multiplies by exp(2b) from its low to its high level) and, by
Type II sums of squares, the share of the gap's variation it explains. The
fit is on one value per design cell (its repetitions averaged), and each
factor is tested with the network as a random factor: its effect within
every network, t-tested across the networks (``factor_effects``). The
same fit on each framework's own log step time says which framework a
factor speeds up. Factors held constant are reported as not varied; factors
confounded with others in the design are reported as aliased.

A design cell (configuration x framework) whose every measured trial failed
(status error or timeout) is an error of the run, not missing data: dropping
it would fit the factors on an unbalanced remnant of the design and attribute
the failure's pattern (e.g. every TensorFlow NCHW cell) to a factor. The
factor fits are then not computed; ``failed_cells`` lists each cell with its
first error, and the validity rule ``failed_cells`` reports it as high.
Out-of-memory and skipped cells remain what they are, a result of the design.

The ``kernels`` case (``mode = "profile"``, one configuration per network) is no design run: its trials
profile the training step (kernels.py reads their tables) and enter neither the factor fits nor the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import numpy as np
from scipy import stats as sps

from kit.analysis.cells import cell_stats
from kit.records import TrialRecord
from kit.study_api import ExtrasRecord, RunView

from .kernels import KernelEntry, ProfileConfig, kernel_view

STUDY_API = 3

# factor -> (label, low level, high level)
FactorName = Literal["cudnn_autotune", "layout", "execution", "precision", "input_pipeline"]
Level = str | bool  # a factor's level as the spec writes it
FACTORS: dict[FactorName, tuple[str, Level, Level]] = {
    "cudnn_autotune": ("cuDNN autotuning", "off", "on"),
    "layout": ("data layout NHWC vs NCHW", "nchw", "nhwc"),
    "execution": ("compiled vs eager execution", "eager", "compiled"),
    "precision": ("mixed precision bf16 vs fp32", "fp32", "bf16"),
    "input_pipeline": ("input pipeline on vs off", False, True),
}
# One flat row of analysis.json (a configuration's levels, then per framework its cell, keyed "<arm>_<what>"),
# or one observation of a fit: the columns depend on the run's arms, the values are scalars.
Scalar = str | int | float | bool | None
Row = dict[str, Scalar]


class Config(TypedDict):
    """A design configuration (:func:`factor_configs`): its case, network and the level of every factor."""

    config_id: str
    case: str
    model: str | None
    cudnn_autotune: Level
    layout: Level
    execution: Level
    precision: Level
    input_pipeline: Level


class NetworkEffect(TypedDict):
    model: str
    coef: float
    ratio_multiplier: float


class FactorTest(TypedDict, total=False):
    """A factor's test: across networks (:func:`_across_networks`) or within the one network (:func:`_within_network`)."""

    per_network: list[NetworkEffect]
    n_networks: int
    p: float | None
    significant: bool | None
    ratio_low: float | None
    ratio_high: float | None
    df: int
    t: float | None
    note: str | None


class FactorEntry(FactorTest, total=False):
    """One factor of a fit: its levels and status, and its effect and test where estimated."""

    factor: FactorName
    label: str
    low: Level
    high: Level
    status: str
    level: Level
    coef: float
    ratio_multiplier: float
    ss: float
    share: float | None


class FactorFit(TypedDict, total=False):
    """The factor fit of one response (:func:`factor_effects`); ``not_computed`` with a note when cells failed."""

    n: int
    n_obs: int
    df_resid: int
    ss_total: float
    residual_share: float | None
    network_share: float | None
    factors: list[FactorEntry]  # one entry per factor: its status, and its effect and test where estimated
    models: list[str]
    test: str
    note: str
    not_computed: bool


class FailedCell(TypedDict):
    """A design cell (configuration x framework) whose every measured trial failed."""

    config_id: str
    case: str
    model: str | None
    arm: str
    status: str
    trials: int
    trial_id: str
    error: str


class ModelGap(TypedDict):
    """One network's TF/PT ratio of mean step time over its design cells."""

    model: str | None
    geomean_ratio: float
    min_ratio: float
    max_ratio: float
    n: int


@dataclass(frozen=True)
class DaiExtras(ExtrasRecord):
    """analysis.json's ``extras.dai_factors`` (fields in its key order; the defaults serve a report reading an
    analysis that lacks a field)."""

    arms: list[str] = field(default_factory=list)
    alpha: float = 0.05
    rows: list[Row] = field(default_factory=list)  # per design configuration: its factor levels and each framework's cell
    gap_effects: FactorFit = field(default_factory=FactorFit)
    framework_effects: dict[str, FactorFit] = field(default_factory=dict)
    kernels: list[KernelEntry] = field(default_factory=list)  # the kernel view of the profile configurations
    per_model: list[ModelGap] = field(default_factory=list)
    factors: dict[str, list[Level]] = field(default_factory=dict)
    missing: list[Row] = field(default_factory=list)
    failed_cells: list[FailedCell] = field(default_factory=list)
    error: str | None = None


def num(row: Mapping[str, Scalar], key: str) -> float | None:
    """A numeric column of a row (None when absent, empty or not a number)."""
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _config_workloads(manifest: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """config id -> (case, its workload: [workload], its case's overrides, its grid values)."""
    spec = manifest["spec"]
    wl = {**spec["workload"], **(spec["workload"].get("params") or {})}
    out = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        out[cid] = (case, {**wl, **over, **{k: v for k, v in cfg.items() if k != "case"}})
    return out


def factor_configs(manifest: Mapping[str, Any]) -> dict[str, Config]:
    """config id -> {case, model, and the level of every factor}: the design runs (profile configurations,
    mode = "profile", are not: they time nothing; :func:`profile_configs`)."""
    return {cid: Config(config_id=cid, case=case, model=m.get("model"),
                        cudnn_autotune=m.get("cudnn_autotune", FACTORS["cudnn_autotune"][1]),
                        layout=m.get("layout", FACTORS["layout"][1]),
                        execution=m.get("execution", FACTORS["execution"][1]),
                        precision=m.get("precision", FACTORS["precision"][1]),
                        input_pipeline=m.get("input_pipeline", FACTORS["input_pipeline"][1]))
            for cid, (case, m) in _config_workloads(manifest).items() if m.get("mode") != "profile"}


def profile_configs(manifest: Mapping[str, Any]) -> dict[str, ProfileConfig]:
    """config id -> {case, model} of the profile configurations (the kernel view; kernels.py)."""
    return {cid: ProfileConfig(config_id=cid, case=case, model=m.get("model"))
            for cid, (case, m) in _config_workloads(manifest).items() if m.get("mode") == "profile"}


def _flat(c: Config) -> Row:
    """A configuration as the first columns of a flat row (its keys in their order)."""
    row: Row = {"config_id": c["config_id"], "case": c["case"], "model": c["model"]}
    for f in FACTORS:
        row[f] = c[f]
    return row


def _rss(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    r = y - x @ beta
    return float(r @ r), beta


def cell_means(rows: Sequence[Mapping[str, Scalar]], response: str) -> list[Row]:
    """One observation per design cell (network x factor levels): the mean response over its repetitions.

    The repetitions of a cell replicate that cell, not the factors' effects: fitted as separate observations
    they would make a factor's test count trials as if each were another network and design run.
    """
    groups: dict[tuple[Scalar, ...], list[Mapping[str, Scalar]]] = {}
    for r in rows:
        groups.setdefault((str(r["model"]), *(r[f] for f in FACTORS)), []).append(r)
    return [{**g[0], response: float(np.mean([r[response] for r in g])), "n_obs": len(g)} for g in groups.values()]


def _coded(rows: Sequence[Mapping[str, Scalar]], factor: FactorName) -> np.ndarray:
    return np.array([1.0 if r[factor] == FACTORS[factor][2] else -1.0 for r in rows])


def _network_effects(cells: list[Row], response: str, estimated: list[FactorName]
                     ) -> dict[FactorName, list[tuple[str, float]]]:
    """Per factor: (network, coefficient) from an OLS within each network of its cells on the estimated factors;
    a network in which a factor is not estimable (held, or confounded by missing cells) gives none for it."""
    out: dict[FactorName, list[tuple[str, float]]] = {f: [] for f in estimated}
    for model in sorted({str(c["model"]) for c in cells}):
        cs = [c for c in cells if str(c["model"]) == model]
        y = np.array([c[response] for c in cs], float)
        cols = [np.ones(len(cs))]
        names: list[FactorName] = []
        for f in estimated:
            col = _coded(cs, f)
            if np.linalg.matrix_rank(np.column_stack([*cols, col])) > np.linalg.matrix_rank(np.column_stack(cols)):
                cols.append(col)
                names.append(f)
        _, beta = _rss(np.column_stack(cols), y)
        for f in names:
            out[f].append((model, float(beta[1 + names.index(f)])))
    return out


def factor_effects(rows: Sequence[Mapping[str, Scalar]], response: str, alpha: float = 0.05) -> FactorFit:
    """Effects of the coded factors on ``response``, with the network as a blocking and random factor.

    ``rows``: one per configuration (or per configuration and repetition: averaged per design cell first,
    :func:`cell_means`) with the factor levels, ``model`` and the response.

    * Effects and shares: OLS of the cell means on the coded factors (-1/+1) plus network dummies (the
      network as a block); Type II sums of squares give each factor's share of the variation, and the
      networks' and the residual's.
    * Tests, two or more networks: each factor's effect estimated within every network (OLS of that
      network's cells) and tested across the networks by a one-sample t test of the per-network effects
      (kit.analysis.across.mean_log: df = networks - 1). With the network as a random factor this is the test
      of the factor against its factor x network interaction, the F(1, J - 1) = t^2 of the mixed-model ANOVA
      for a balanced design (tests/test_across.py checks it against statsmodels): an effect is significant
      only if it holds across networks, not merely in the average of these seven. The F test against the
      repetitions' scatter that this replaces called a factor significant when it moved the gap a lot in one
      network and not at all in the others.
    * One network: nothing to generalise over; the test is against the scatter of the cell's repetitions
      (OLS on every repetition), a claim about that network only (``test`` says so).
    """
    from kit.analysis.across import mean_log

    obs = [r for r in rows if (v := num(r, response)) is not None and np.isfinite(v)]
    cells = cell_means(obs, response)
    if len(cells) < 2:
        return FactorFit(n=len(cells), factors=[], note="fewer than two configurations with a response")
    y = np.array([r[response] for r in cells], float)
    cols: list[np.ndarray] = [np.ones(len(cells))]
    names = ["intercept"]
    models = sorted({str(r["model"]) for r in cells})
    for m in models[1:]:
        cols.append(np.array([1.0 if str(r["model"]) == m else 0.0 for r in cells]))
        names.append(f"model={m}")
    info: list[FactorEntry] = []
    estimated: list[FactorName] = []
    for f, (label, lo, hi) in FACTORS.items():
        levels = {r[f] for r in cells}
        entry = FactorEntry(factor=f, label=label, low=lo, high=hi)
        if len(levels) < 2:
            level = next(iter(levels))
            assert isinstance(level, str | bool)  # a factor's level (Config)
            entry["status"], entry["level"] = "not varied", level
            info.append(entry)
            continue
        col = _coded(cells, f)
        if np.linalg.matrix_rank(np.column_stack([*cols, col])) <= np.linalg.matrix_rank(np.column_stack(cols)):
            entry["status"], entry["note"] = "aliased", "confounded with factors or networks before it in this design"
            info.append(entry)
            continue
        cols.append(col)
        names.append(f)
        estimated.append(f)
        entry["status"] = "estimated"
        info.append(entry)
    x = np.column_stack(cols)
    rss_full, beta = _rss(x, y)
    df_resid = len(y) - x.shape[1]
    ss_total = float(((y - y.mean()) ** 2).sum())
    per_net = _network_effects(cells, response, estimated) if len(models) > 1 else {}
    for i, entry in enumerate(info):
        f = entry["factor"]
        if entry["status"] != "estimated":
            continue
        j = names.index(f)
        rss_red, _ = _rss(np.delete(x, j, axis=1), y)
        ss = max(rss_red - rss_full, 0.0)
        b = float(beta[j])
        entry["coef"], entry["ratio_multiplier"], entry["ss"] = b, math.exp(2 * b), ss
        entry["share"] = ss / ss_total if ss_total > 0 else None
        test = (_across_networks(per_net[f], alpha, mean_log) if len(models) > 1
                else _within_network(obs, response, estimated, f, alpha))
        info[i] = {**entry, **test}
    model_ss = None
    if len(models) > 1:
        keep = [i for i, n in enumerate(names) if not n.startswith("model=")]
        rss_red, _ = _rss(x[:, keep], y)
        model_ss = max(rss_red - rss_full, 0.0)
    return FactorFit(n=len(y), n_obs=len(obs), df_resid=df_resid, ss_total=ss_total,
                     residual_share=rss_full / ss_total if ss_total > 0 else None,
                     network_share=None if model_ss is None or ss_total == 0 else model_ss / ss_total,
                     factors=info, models=models,
                     test=("per-network effects, t test across networks (network = random factor)" if len(models) > 1
                           else "one network: F test against the repetitions' scatter (a claim about that network "
                                "only)"))


def _across_networks(effects: list[tuple[str, float]], alpha: float, mean_log: Callable[..., Any]) -> FactorTest:
    """The factor's per-network effects as ratio multipliers exp(2 b_j), and the t test of their mean."""
    per = [NetworkEffect(model=m, coef=b, ratio_multiplier=math.exp(2 * b)) for m, b in effects]
    out = FactorTest(per_network=per, n_networks=len(per), p=None, significant=None, ratio_low=None, ratio_high=None)
    if len(per) < 2:
        out["note"] = "estimable in fewer than two networks: no test across networks"
        return out
    t = mean_log([2 * b for _, b in effects])
    out["p"], out["df"], out["t"], out["ratio_low"], out["ratio_high"] = t.p, t.df, t.t, t.low, t.high
    out["significant"] = None if t.p is None else t.p < alpha
    if t.p is None:
        out["note"] = t.reason
    return out


def _within_network(obs: Sequence[Mapping[str, Scalar]], response: str, estimated: list[FactorName],
                    factor: FactorName, alpha: float) -> FactorTest:
    """One network: the factor's F test in an OLS on every repetition, against the repetitions' scatter."""
    y = np.array([r[response] for r in obs], float)
    x = np.column_stack([np.ones(len(obs)), *[_coded(obs, f) for f in estimated]])
    rss_full, _ = _rss(x, y)
    df_resid = len(y) - x.shape[1]
    if df_resid <= 0 or rss_full <= 0:
        return FactorTest(p=None, significant=None, note="no replication: the effect is an exact fit, without a p")
    rss_red, _ = _rss(np.delete(x, 1 + estimated.index(factor), axis=1), y)
    p = float(sps.f.sf(max(rss_red - rss_full, 0.0) / (rss_full / df_resid), 1, df_resid))
    return FactorTest(p=p, significant=p < alpha, df=df_resid, note="one network: a claim about that network only")


def trial_pairs(confs: dict[str, Config], trials: tuple[TrialRecord, ...], arms: list[str]) -> list[Row]:
    """One observation per configuration and repetition (block): each framework's log mean step time and their
    difference, log(TF/PT). Replicated blocks give the fit its residual degrees of freedom."""
    out = []
    for cid, c in confs.items():
        reps = sorted({t.repetition for t in trials if t.config_id == cid and not t.warmup})
        for rep in reps:
            row = _flat(c)
            row["repetition"] = rep
            for arm in arms:
                t = next((t for t in trials if t.config_id == cid and t.arm == arm and t.repetition == rep
                          and t.status == "ok" and t.results.get("train_step_s")), None)
                row[f"{arm}_log_step"] = math.log(float(np.mean(t.results["train_step_s"]))) if t else None
            tf_log, pt_log = num(row, "tensorflow_log_step"), num(row, "pytorch_log_step")
            if "tensorflow" in arms and "pytorch" in arms and tf_log is not None and pt_log is not None:
                row["log_ratio"] = tf_log - pt_log
            out.append(row)
    return out


FAILED = frozenset({"error", "timeout"})


def failed_cells(confs: dict[str, Config], trials: tuple[TrialRecord, ...], arms: list[str]) -> list[FailedCell]:
    """Design cells whose every measured trial failed: (config, arm, status, trials, first error text)."""
    out: list[FailedCell] = []
    for cid, c in confs.items():
        for arm in arms:
            measured = [t for t in trials if t.config_id == cid and t.arm == arm and not t.warmup]
            if measured and all(t.status in FAILED for t in measured):
                first = next((t for t in measured if t.error), measured[0])
                out.append(FailedCell(config_id=cid, case=c["case"], model=c["model"], arm=arm,
                                      status="/".join(sorted({t.status for t in measured})), trials=len(measured),
                                      trial_id=first.trial_id,
                                      error=str(first.error or first.raw.get("stderr_tail") or "no error text")[:500]))
    return out


def _not_computed(note: str) -> FactorFit:
    return FactorFit(n=0, factors=[], not_computed=True, note=note)


def analyse(run: RunView) -> DaiExtras:
    arms = list(run.arms)
    alpha = float(run.spec["design"]["alpha"])
    confs = factor_configs(run.manifest)
    trials = run.trials
    rows: list[Row] = []
    for cid, c in confs.items():
        row = _flat(c)
        for arm in arms:
            cell = cell_stats(run.finished(arm=arm, config=cid))
            items = [t.results.get("train_items_per_s") for t in run.measured(arm=arm, config=cid)]
            row[f"{arm}_status"] = cell["status"]
            row[f"{arm}_reason"] = cell.get("reason")
            row[f"{arm}_step_s"] = cell.get("train_step_s")
            row[f"{arm}_items_per_s"] = float(np.mean([float(i) for i in items if i])) if items and all(items) else None
        tf_s, pt_s = num(row, "tensorflow_step_s"), num(row, "pytorch_step_s")
        ratio = tf_s / pt_s if tf_s and pt_s else None
        row["ratio"] = ratio
        row["log_ratio"] = math.log(ratio) if ratio else None
        rows.append(row)
    failed = failed_cells(confs, trials, arms)
    error = None
    if failed:
        error = (f"{len(failed)} design cell(s) failed in every trial, so the factor analysis is not computed: "
                 + "; ".join(f"{f['model']} {f['case']} {f['arm']} ({f['status']}: {f['error'].splitlines()[-1] if f['error'].strip() else ''})"
                             for f in failed[:5]) + ("; ..." if len(failed) > 5 else ""))
        gap = _not_computed(error)
        per_fw = {arm: _not_computed(error) for arm in arms}
    else:
        obs = trial_pairs(confs, trials, arms)
        gap = factor_effects(obs, "log_ratio", alpha)
        per_fw = {arm: factor_effects(obs, f"{arm}_log_step", alpha) for arm in arms}
    baseline: list[ModelGap] = []
    for model in sorted({c["model"] for c in confs.values()}, key=str):
        rs = [(ratio, log) for c, r in zip(confs.values(), rows, strict=True)
              if c["model"] == model and (ratio := num(r, "ratio")) and (log := num(r, "log_ratio")) is not None]
        if rs:
            baseline.append(ModelGap(model=model, geomean_ratio=float(np.exp(np.mean([lg for _, lg in rs]))),
                                     min_ratio=min(ra for ra, _ in rs), max_ratio=max(ra for ra, _ in rs),
                                     n=len(rs)))
    return DaiExtras(arms=arms, alpha=alpha, rows=rows, gap_effects=gap, framework_effects=per_fw,
                     kernels=kernel_view(run, profile_configs(run.manifest)),
                     per_model=baseline, factors={f: list(v) for f, v in FACTORS.items()},
                     missing=[r for r in rows if r["ratio"] is None], failed_cells=failed, error=error)
