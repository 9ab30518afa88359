"""Elshawi et al., DLBench (seed 003): per-dataset results, convergence and the paper's Wilcoxon tests.

Pure: the run (kit.study_api.RunView, STUDY_API 3) in, a :class:`DlbenchExtras` record out
(``analysis["extras"]["dlbench"]``). Per dataset (one ``[cases]`` entry
each) and framework: accuracy, training time, CPU utilisation (host-wide, 1 s
samples, the paper's measure; and the trial's own, from its markers), mean resident memory and GPU utilisation of the training phase; the test
accuracy after every epoch (convergence); and the paired Wilcoxon
signed-rank test the paper used, with the smallest p-value its number of
pairs can reach, because with 5 runs an exact two-sided test can never
reject at α = 0.05 (smallest p = 2/2⁵ = 0.0625).

The paper's tests form one family, every dataset × metric tested in the
table, and are decided by Holm's step-down over it (the decision column
reads the Holm-adjusted p, never the raw one): a table of 30 tests at
α = 0.05 would otherwise show about 1.5 false "differences" by chance. Holm's
first threshold is α/m, so what the run can show depends on n twice: the
smallest exact two-sided p is 2/2ⁿ, and it must fall below α/m
(:func:`reach`, which the report words).

Beside them: each case's accuracy measure (:func:`accuracy_label`: mAP@0.5 for Faster R-CNN, per-token
accuracy for the translation model, from the trials' ``accuracy_metric``), the paper's Pearson correlation of
epochs and accuracy (:mod:`epoch_correlation`, from the runs' per-epoch accuracies, checked before use),
and the paper's models no case of the run is (:func:`not_reproduced`), so a copy of the spec that leaves
one out says so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from kit import stats
from kit.records import TrialRecord
from kit.stats.ranks import signed_rank_pmf as _signed_rank_pmf
from kit.study_api import ExtrasRecord, RunView

from .epoch_correlation import Curve, EpochAccuracy, Refused, curve_of, epoch_accuracy

STUDY_API = 3

MetricName = Literal["accuracy", "time_s", "cpu_util_pct", "trial_rss_mean_bytes", "gpu_util_pct",
                     "trial_cpu_util_pct"]
PER_DATASET: tuple[tuple[MetricName, str, str, str], ...] = (  # (metric, phase, label, unit): the paper's measures, described and tested (its Wilcoxon tests)
    ("accuracy", "infer", "test accuracy", "fraction"),
    ("time_s", "train", "training time", "s"),
    ("cpu_util_pct", "train", "CPU utilisation, host-wide (the paper's Eq. 1)", "%"),
    ("trial_rss_mean_bytes", "train", "memory (mean RSS of the trial)", "B"),
    ("gpu_util_pct", "train", "GPU utilisation", "%"),
)
# Described beside them, not added to the paper's family of tests: the trial's own CPU utilisation (its process
# and waited-for children, from the CPU times in its phase markers; % of one CPU), which other processes on
# the host never enter, where the paper's host-wide figure counts them.
DESCRIBED_ONLY: tuple[tuple[MetricName, str, str, str], ...] = (
    ("trial_cpu_util_pct", "train", "CPU utilisation of the trial's process (% of one CPU)", "%"),
)
# The paper's models, one per dataset: keyed by the bundled [cases] id (also the dataset's name), with where
# the paper shows each of its panels (CPU environment, Sec. 5.1-5.4; GPU environment, Sec. 5.5), its epochs
# (Sec. 4), and why a run may lack it. A run's models are its cases; the report lists the paper's models a run
# did not include (a user's copy of the spec or a profile that leaves one out) so it never suggests coverage.
_CNN = {"accuracy": "Figs. 4a (CPU), 12a (GPU)", "time_s": "Figs. 5a (CPU), 13a (GPU)",
        "cpu_util_pct": "Figs. 6a (CPU), 15a (GPU)", "trial_rss_mean_bytes": "Figs. 8a (CPU), 17a (GPU)",
        "gpu_util_pct": "Fig. 14a"}
_LSTM = {"accuracy": "Figs. 4b (CPU), 12b (GPU)", "time_s": "Figs. 5b (CPU), 13b (GPU)",
         "cpu_util_pct": "Figs. 6b (CPU), 15b (GPU)", "trial_rss_mean_bytes": "Figs. 8b (CPU), 17b (GPU)",
         "gpu_util_pct": "Fig. 14b"}
PAPER_MODELS: dict[str, dict[str, str | int]] = {
    "mnist": {"model": "CNN on MNIST", "architecture": "Fig. 2a", "epochs": 15, **_CNN,
              "convergence": "Figs. 9 (CPU), 18a (GPU)"},
    "cifar10": {"model": "CNN on CIFAR-10", "architecture": "Fig. 2b", "epochs": 100, **_CNN,
                "convergence": "Figs. 9 (CPU), 18b (GPU)"},
    "cifar100": {"model": "CNN on CIFAR-100", "architecture": "Fig. 2c", "epochs": 200, **_CNN,
                 "convergence": "Figs. 9 (CPU), 18 (GPU)"},
    "svhn": {"model": "CNN on SVHN (GPU only in the paper: over 24 h on its CPU)", "architecture": "Fig. 2d",
             "epochs": 100, "accuracy": "Fig. 12a (GPU)", "time_s": "Fig. 13a (GPU)",
             "cpu_util_pct": "Fig. 15a (GPU)", "trial_rss_mean_bytes": "Fig. 17a (GPU)", "gpu_util_pct": "Fig. 14a",
             "convergence": "Fig. 18 (GPU)"},
    "imdb": {"model": "LSTM on IMDB Reviews", "architecture": "Fig. 3a", "epochs": 50, **_LSTM,
             "convergence": "Figs. 10a (CPU), 19a (GPU)"},
    "ptb": {"model": "LSTM language model on Penn Treebank", "architecture": "Fig. 3b", "epochs": 50, **_LSTM,
            "convergence": "Figs. 10b (CPU), 19b (GPU)"},
    "spa_eng": {"model": "LSTM encoder-decoder, English to Spanish (Many things / Tatoeba, 100,000 sentence pairs)",
                "architecture": "Fig. 3c", "epochs": 100, **_LSTM, "convergence": "Figs. 10c (CPU), 19c (GPU)"},
    "voc2012": {"model": "Faster R-CNN with a ResNet-50 backbone on PASCAL VOC2012", "architecture": "Sec. 4.3",
                "epochs": 100, "accuracy": "Sec. 5.1 (CPU), Sec. 5.5.1 (GPU); values in the text only",
                "time_s": "Sec. 5.2 (CPU), Sec. 5.5.2 (GPU); values in the text only",
                "cpu_util_pct": "Figs. 7a (CPU), 16b (GPU)", "trial_rss_mean_bytes": "Figs. 7b (CPU), 16c (GPU)",
                "gpu_util_pct": "Fig. 16a", "convergence": "Figs. 11 (CPU), 20 (GPU)"},
}
PAPER_EPOCHS = {k: int(v["epochs"]) for k, v in PAPER_MODELS.items()}
MISSING_WHY = ("not in this run: its spec has no case for this model (a copy of experiment.toml or a profile "
               "without it); the bundled experiment.toml runs it")
# What "accuracy" is per dataset where a trial does not say (results.accuracy_metric): detection's mean
# average precision at IoU 0.5, the translation model's next-token accuracy with the reference fed back in.
ACCURACY_LABELS = {"voc2012": "mAP@0.5", "spa_eng": "per-token accuracy (teacher forcing)"}
DEFAULT_ACCURACY_LABEL = "test accuracy"
# results.accuracy_metric as the workloads may spell it -> the report's words (any other short text is shown as is)
ACCURACY_ALIASES = {"map50": "mAP@0.5", "map@0.5": "mAP@0.5", "map_50": "mAP@0.5", "map_0.5": "mAP@0.5",
                    "token_accuracy": "per-token accuracy (teacher forcing)",
                    "token_accuracy_teacher_forcing": "per-token accuracy (teacher forcing)",
                    "per_token_accuracy": "per-token accuracy (teacher forcing)", "accuracy": "test accuracy",
                    "test_accuracy": "test accuracy"}
MAX_LABEL_CHARS = 80


class Measure(TypedDict):
    metric: MetricName
    phase: str
    label: str
    unit: str


class Reach(TypedDict):
    """What n untied pairs can show in a Holm family of m signed-rank tests (:func:`reach`)."""

    n: int
    m: int
    alpha: float
    first_threshold: float
    min_exact_p: float
    reaches_alpha: bool
    reaches_family: bool
    pairs_for_alpha: int
    pairs_for_family: int
    max_minority_rank_sum: int | None


class HolmFamily(TypedDict):
    method: str
    size: int
    alpha: float
    first_threshold: float | None
    members: str
    rejected: int


class WilcoxonDesign(TypedDict):
    """What the run's repetitions allow the paper's Wilcoxon tests to show."""

    repetitions: int
    min_attainable_p: float
    min_pairs_to_reject: int
    reach: Reach
    planned_tests: int
    kit_rule: str
    kit_min_n: int


class Convergence(TypedDict):
    """Mean and sd over runs of the test accuracy after each epoch, and its peak (:func:`_convergence`)."""

    epochs: list[int]
    mean: list[float]
    sd: list[float]
    runs: list[dict[str, str | list[float | None]]]
    peak_epoch: int | None
    peak_accuracy: float | None
    final_accuracy: float


class AccuracyLabel(TypedDict):
    """What a case's accuracy is (:func:`accuracy_label`)."""

    label: str
    source: str
    consistent: bool
    ignored: int


class CaseInfo(TypedDict):
    """A configuration's case and dataset (:func:`cases_of`), with its accuracy's name and paper model (analyse)."""

    case: str
    title: str
    dataset: str | None
    source: str | None
    train_size: int | None
    test_size: int | None
    synthetic: bool
    origin: str | None
    epochs: int
    accuracy_label: NotRequired[AccuracyLabel]
    paper_key: NotRequired[str | None]


class Described(TypedDict):
    """One measure of a configuration and arm over its runs."""

    n: int
    mean: float
    sd: float
    median: float
    trial_ids: list[str]


class PerDataset(CaseInfo):
    """One configuration and arm: its case, then each measure's summary (None: not measured)."""

    config_id: str
    arm: str
    accuracy: NotRequired[Described | None]
    time_s: NotRequired[Described | None]
    cpu_util_pct: NotRequired[Described | None]
    trial_rss_mean_bytes: NotRequired[Described | None]
    gpu_util_pct: NotRequired[Described | None]
    trial_cpu_util_pct: NotRequired[Described | None]


class ConvergenceRow(Convergence):
    config_id: str
    case: str
    dataset: str | None
    synthetic: bool
    arm: str


class WilcoxonRow(TypedDict):
    """The paper's paired test of one case and measure, and its Holm reading (:func:`holm_family`)."""

    config_id: str
    case: str
    dataset: str | None
    metric: MetricName
    label: str
    unit: str
    phase: str
    arm_a: str
    arm_b: str
    n_pairs: int
    blocks: list[Any]  # kit.analysis.hypotheses.paired_arrays' block keys (repetitions), as it gives them
    tested: NotRequired[bool]
    reason: NotRequired[str]
    statistic: NotRequired[float | None]
    p: NotRequired[float | None]
    exact: NotRequired[bool]
    n_used: NotRequired[int]
    method: NotRequired[str]
    call: NotRequired[str]
    note: NotRequired[str | None]
    min_attainable_p: NotRequired[float]
    p_unadjusted_below_alpha: NotRequired[bool]
    median_a: NotRequired[float]
    median_b: NotRequired[float]
    p_holm: NotRequired[float | None]
    significant: NotRequired[bool]
    can_reject: NotRequired[bool]
    reaches_first: NotRequired[bool]


@dataclass(frozen=True)
class DlbenchExtras(ExtrasRecord):
    """analysis.json's ``extras.dlbench`` (fields in its key order). The report reads it back with
    ``from_json``; the fields an older analysis may lack have defaults (the rest it always had)."""

    arms: list[str]
    alpha: float
    cases: dict[str, CaseInfo]  # config id -> the case's dataset, model, labels (:func:`cases_of`)
    metrics: list[Measure]
    described_only: list[Measure] = field(default_factory=list)
    per_dataset: list[PerDataset] = field(default_factory=list)  # per configuration and arm: each measure
    convergence: list[ConvergenceRow] = field(default_factory=list)  # per case and arm: a Convergence
    wilcoxon: list[WilcoxonRow] = field(default_factory=list)  # per case and measure: the test, its Holm reading
    wilcoxon_family: HolmFamily | None = None
    wilcoxon_design: WilcoxonDesign | None = None
    synthetic_cases: list[str] = field(default_factory=list)
    paper_epochs: dict[str, int] = field(default_factory=dict)
    paper_models: dict[str, dict[str, str | int]] = field(default_factory=dict)
    not_reproduced: list[dict[str, str]] = field(default_factory=list)
    epoch_accuracy: EpochAccuracy | None = None  # epochs vs accuracy per case (epoch_correlation.py), and the refused curves


def min_exact_p(n: int) -> float:
    """Smallest two-sided p-value of the exact Wilcoxon signed-rank test with n non-zero pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2**n) if n > 0 else 1.0


def min_pairs_for(alpha: float) -> int:
    """Fewest pairs with which an exact two-sided signed-rank test can reject at ``alpha``."""
    return math.floor(math.log2(2.0 / alpha)) + 1  # 2 / 2^n < alpha


def min_attainable_p(d: np.ndarray) -> float:
    """The smallest two-sided p the kit's signed-rank test can give with these differences' pattern.

    The same zeros and the same ties of |d|, every non-zero difference moved to one side: the most
    extreme data of this shape. Exact (no ties, no zeros, R's rule) it is 2/2^n; with a tie or a zero
    R's wilcox.test, and the kit, switch to the normal approximation, whose smallest p depends on the
    tie pattern and at small n is far larger (n = 11: 0.0039 with one tie against 2/2^11 = 0.00098).
    """
    return float(stats.wilcoxon_paired(np.abs(d), np.zeros_like(d)).p)


def max_minority_rank_sum(n: int, level: float) -> int | None:
    """Largest sum of the ranks on the minority sign that still gives an exact two-sided p < ``level``.

    0: the test rejects only when all n differences share a sign. None: not even that suffices (2/2^n
    >= level). Exact null distribution of the signed-rank sum (no ties, no zeros).
    """
    if n <= 0:
        return None
    cdf = np.cumsum(_signed_rank_pmf(n))
    ok = np.flatnonzero(np.minimum(1.0, 2.0 * cdf) < level)
    return int(ok[-1]) if ok.size else None


def reach(n: int, alpha: float, m: int) -> Reach:
    """What n untied pairs can show in a Holm family of m two-sided signed-rank tests at ``alpha``.

    Holm rejects nothing unless the family's smallest p is below alpha/m, so the family can reject
    only if 2/2^n < alpha/m; a row whose smallest p lies between alpha/m and alpha can be rejected
    only after the others. ``pairs_for_alpha`` / ``pairs_for_family``: the n each bar needs.
    """
    first = alpha / max(m, 1)
    return Reach(n=n, m=m, alpha=alpha, first_threshold=first, min_exact_p=min_exact_p(n),
                 reaches_alpha=min_exact_p(n) < alpha, reaches_family=min_exact_p(n) < first,
                 pairs_for_alpha=min_pairs_for(alpha), pairs_for_family=min_pairs_for(first),
                 max_minority_rank_sum=max_minority_rank_sum(n, first))


def cases_of(manifest: Mapping[str, Any]) -> dict[str, CaseInfo]:
    """config id -> {case, dataset name, source, real/synthetic origin} from the manifest."""
    spec = manifest["spec"]
    datasets = manifest.get("datasets") or {}
    out: dict[str, CaseInfo] = {}
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        c = (spec.get("cases") or {}).get(case, {})
        ds = c.get("dataset") or spec.get("dataset") or {}
        resolved = datasets.get(f"{ds.get('name')}:{ds.get('source')}") or manifest.get("dataset") or {}
        out[cid] = {"case": case, "title": c.get("title") or case, "dataset": ds.get("name"),
                    "source": ds.get("source"), "train_size": ds.get("train_size"), "test_size": ds.get("test_size"),
                    "synthetic": ds.get("source") == "synthetic", "origin": resolved.get("origin"),
                    "epochs": (c.get("workload") or {}).get("epochs", spec["workload"]["epochs"])}
    return out


def paper_key(info: CaseInfo) -> str | None:
    """The paper model a case of the run is (its case id, else its dataset's name, in PAPER_MODELS), or None."""
    for k in (info.get("case"), info.get("dataset")):
        if isinstance(k, str) and k in PAPER_MODELS:
            return k
    return None


def not_reproduced(cases: Mapping[str, CaseInfo]) -> list[dict[str, str]]:
    """The paper's models no case of this run is, each with where the paper shows it and why it is missing."""
    have = {paper_key(i) for i in cases.values()}
    return [{"model": str(m["model"]), "paper": f"{m['architecture']}; convergence {m['convergence']}", "why": MISSING_WHY}
            for k, m in PAPER_MODELS.items() if k not in have]


def accuracy_label(info: CaseInfo, trials: list[TrialRecord]) -> AccuracyLabel:
    """What this case's accuracy is: the trials' ``results.accuracy_metric`` where they state it, else the kit's
    words for the dataset (ACCURACY_LABELS), else "test accuracy".

    The key comes from trial files, so it is checked: a short printable string (at most MAX_LABEL_CHARS); any
    other value is ignored and said so. Runs that disagree give every label, joined, and ``consistent`` False.
    """
    stated: list[str] = []
    ignored = 0
    for t in trials:
        v = t.results.get("accuracy_metric")
        if v is None:
            continue
        if isinstance(v, str) and 0 < len(v) <= MAX_LABEL_CHARS and v.isprintable() and v.strip():
            stated.append(ACCURACY_ALIASES.get(v.strip().lower(), v.strip()))
        else:
            ignored += 1
    distinct = list(dict.fromkeys(stated))
    key = paper_key(info)
    default = ACCURACY_LABELS.get(key or "", DEFAULT_ACCURACY_LABEL)
    return {"label": " / ".join(distinct) if distinct else default,
            "source": "results.accuracy_metric of the trials" if distinct else "the kit's word for this dataset",
            "consistent": len(distinct) <= 1, "ignored": ignored}


def epoch_curves(run: RunView, cases: Mapping[str, CaseInfo]) -> tuple[list[Curve], list[Refused]]:
    """Every measured run's per-epoch test accuracies, checked (:func:`epoch_correlation.curve_of`)."""
    curves: list[Curve] = []
    refused: list[Refused] = []
    for cid, info in cases.items():
        for t in run.measured(config=cid):
            if "epoch_test_accuracy" not in t.results:
                continue
            c = curve_of(t.trial_id, str(info["case"]), t.arm, t.results["epoch_test_accuracy"])
            if isinstance(c, Curve):
                curves.append(c)
            else:
                refused.append(c)
    return curves, refused


def _convergence(curves: list[Curve]) -> Convergence | None:
    """Mean and sd over runs of the test accuracy after each epoch (the runs' common length), and its peak."""
    if not curves:
        return None
    length = min(len(c.accuracy) for c in curves)
    if length == 0:
        return None
    mat = np.array([c.accuracy[:length] for c in curves], dtype=float)
    with warnings.catch_warnings():  # an epoch no run recorded is nan, said as such (no RuntimeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(mat, axis=0)
        sd = np.nanstd(mat, axis=0, ddof=1) if len(curves) > 1 else np.full(length, np.nan)
    peak = int(np.nanargmax(mean)) if np.isfinite(mean).any() else None
    return Convergence(
        epochs=list(range(1, length + 1)), mean=mean.tolist(), sd=sd.tolist(),
        runs=[{"trial_id": c.trial_id, "accuracy": [None if math.isnan(v) else v for v in c.accuracy[:length]]}
              for c in curves],
        peak_epoch=None if peak is None else peak + 1, peak_accuracy=None if peak is None else float(mean[peak]),
        final_accuracy=float(mean[-1]))


def holm_family(rows: list[WilcoxonRow], alpha: float) -> HolmFamily:
    """Holm over the table's tested rows (in place: ``p_holm``, ``significant``, ``can_reject``, ``reaches_first``).

    The family is every dataset × metric test of the table that has pairs; ``significant`` reads the
    Holm-adjusted p. ``can_reject``: the row's smallest attainable p is below alpha (necessary for any
    rejection); ``reaches_first``: below alpha/m, the threshold the family's first rejection must pass.
    """
    tested = [r for r in rows if r.get("tested")]
    adjusted = stats.holm([r.get("p") for r in tested])
    m = len(tested)
    for r, p_adj in zip(tested, adjusted, strict=True):
        r["p_holm"] = p_adj
        r["significant"] = p_adj is not None and p_adj < alpha
        r["can_reject"] = r["n_used"] > 0 and r["min_attainable_p"] < alpha
        r["reaches_first"] = r["n_used"] > 0 and r["min_attainable_p"] < alpha / m
    return HolmFamily(method="holm", size=m, alpha=alpha, first_threshold=alpha / m if m else None,
                      members="every dataset x metric of this table with paired values (the paper's tests)",
                      rejected=sum(1 for r in tested if r.get("significant")))


def analyse(run: RunView) -> DlbenchExtras:
    from kit.analysis.hypotheses import paired_arrays

    arms = list(run.arms)
    alpha = float(run.spec["design"]["alpha"])
    cases = cases_of(run.manifest)
    use = run.measured_values()
    for cid, info in cases.items():
        info["accuracy_label"] = accuracy_label(info, run.measured(config=cid))
        info["paper_key"] = paper_key(info)

    per_dataset: list[PerDataset] = []
    for cid, info in cases.items():
        for arm in arms:
            row: PerDataset = {"config_id": cid, **info, "arm": arm}
            for metric, phase, _, _ in (*PER_DATASET, *DESCRIBED_ONLY):
                g = use[(use["config_id"] == cid) & (use["arm"] == arm) & (use["metric"] == metric)
                        & (use["phase"] == phase)].sort_values("position")
                if g.empty:
                    row[metric] = None
                    continue
                d = stats.describe(g["value"].to_numpy(float))
                row[metric] = Described(n=d.n, mean=d.mean, sd=d.sd, median=d.median,
                                        trial_ids=g["trial_id"].tolist())
            per_dataset.append(row)

    curves, refused = epoch_curves(run, cases)
    convergence: list[ConvergenceRow] = []
    per_case: dict[str, tuple[str, CaseInfo]] = {}  # each case once (its first configuration)
    for cid, info in cases.items():
        per_case.setdefault(info["case"], (cid, info))
    for cid, info in per_case.values():
        for arm in arms:
            c = _convergence([x for x in curves if x.case == info["case"] and x.arm == arm])
            if c is not None:
                convergence.append({"config_id": cid, "case": info["case"], "dataset": info["dataset"],
                                    "synthetic": info["synthetic"], "arm": arm, **c})

    wilcoxon: list[WilcoxonRow] = []
    a, b = arms[0], arms[1]
    for cid, info in cases.items():
        for metric, phase, label, unit in PER_DATASET:
            xa, xb, blocks = paired_arrays(use, cid, metric, phase, a, b)
            w = WilcoxonRow(config_id=cid, case=info["case"], dataset=info["dataset"], metric=metric, label=label,
                            unit=unit, phase=phase, arm_a=a, arm_b=b, n_pairs=len(blocks), blocks=blocks)
            if len(blocks) == 0:
                w["tested"], w["reason"] = False, f"no paired values of {label}"
            else:
                t = stats.wilcoxon_paired(xa, xb)
                d = np.asarray(xa, float) - np.asarray(xb, float)
                w["tested"], w["statistic"], w["p"], w["exact"], w["n_used"] = True, t.statistic, t.p, t.exact, t.n_used
                w["method"], w["call"], w["note"] = t.method_detail, t.call, t.note
                w["min_attainable_p"], w["p_unadjusted_below_alpha"] = min_attainable_p(d), t.p < alpha
                w["median_a"], w["median_b"] = float(np.median(xa)), float(np.median(xb))
            wilcoxon.append(w)
    family = holm_family(wilcoxon, alpha)

    reps = int(run.spec["design"]["repetitions"])
    planned = len(cases) * len(PER_DATASET)
    return DlbenchExtras(
        arms=arms,
        alpha=alpha,
        cases=cases,
        metrics=[Measure(metric=m, phase=p, label=lab, unit=u) for m, p, lab, u in PER_DATASET],
        described_only=[Measure(metric=m, phase=p, label=lab, unit=u) for m, p, lab, u in DESCRIBED_ONLY],
        per_dataset=per_dataset,
        convergence=convergence,
        wilcoxon=wilcoxon,
        wilcoxon_family=family,
        wilcoxon_design=WilcoxonDesign(
            repetitions=reps,
            min_attainable_p=min_exact_p(reps),
            min_pairs_to_reject=min_pairs_for(alpha),
            reach=reach(reps, alpha, family["size"] or planned),
            planned_tests=planned,
            kit_rule=stats.NO_TEST_REASON,
            kit_min_n=stats.MIN_N_FOR_TESTS,
        ),
        synthetic_cases=sorted(i["case"] for i in cases.values() if i["synthetic"]),
        paper_epochs=PAPER_EPOCHS,
        paper_models=PAPER_MODELS,
        not_reproduced=not_reproduced(cases),
        epoch_accuracy={**epoch_accuracy(curves, {i["case"]: str(i["dataset"]) for i in cases.values()}),
                        "refused": [{"trial_id": r.trial_id, "reason": r.reason} for r in refused]},
    )
