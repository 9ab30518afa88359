"""`kit history RUNS_DIR --metric …`: a metric over many runs of successive versions, and its steps.

Runs are ordered by their start time (or by label) and labelled by ``kit run
--label`` (else the framework versions reported from inside the trials).
Step detection: binary segmentation (ruptures, L1 cost, robust to outliers)
of the run medians in run order (the run is the unit a step sits between;
O(n log n), so 1,000 nightly runs take seconds); each candidate step is then
validated like a comparison on trial-level values (Mann–Whitney between the
trials of the runs before and after it, up to the neighbouring steps and at
most WINDOW_RUNS runs each side; Holm; and the practical threshold on the
ratio of medians), so a step is reported only where a change is both
significant and large enough to matter.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kit import history_cache, stats
from kit.analysis.metrics import METRICS
from kit.analysis_record import Analysis
from kit.errors import AnalysisError
from kit.history_cache import CachedRun
from kit.manifest import Manifest
from kit.store import RunDir


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One run of the series: where it is, when it started, its label and arm, and its measured values."""

    run_dir: str
    started: float
    label: str
    arm: str
    version: str | None  # the arm's own framework version, as its trials reported it
    values: tuple[float, ...]
    median: float
    q1: float
    q3: float

    @property
    def n(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, run_dir: str, started: float, label: str, arm: str, version: str | None,
           values: Sequence[float]) -> HistoryPoint:
        """The point with its median and quartiles computed from ``values``."""
        return cls(run_dir=run_dir, started=started, label=label, arm=arm, version=version, values=tuple(values),
                   median=float(np.median(values)), q1=float(np.percentile(values, 25)),
                   q3=float(np.percentile(values, 75)))

    def to_json(self) -> dict[str, Any]:
        """The run as ``kit history --json`` lists it (without its values)."""
        return {"run_dir": self.run_dir, "started": self.started, "label": self.label, "arm": self.arm,
                "version": self.version, "median": self.median, "q1": self.q1, "q3": self.q3, "n": self.n}


@dataclass(frozen=True, slots=True)
class HistoryStep:
    """A validated step: the first run after it (``index``), the labels either side, the ratio after/before of
    the trials' medians with its interval, the test and the verdict."""

    index: int
    from_label: str
    to_label: str
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    p: float | None
    n_before: int
    n_after: int
    runs_before: int
    runs_after: int
    p_adj: float | None = None
    verdict: str = "not tested"

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "from": self.from_label, "to": self.to_label, "ratio": self.ratio,
                "ratio_low": self.ratio_low, "ratio_high": self.ratio_high, "p": self.p, "n_before": self.n_before,
                "n_after": self.n_after, "runs_before": self.runs_before, "runs_after": self.runs_after,
                "p_adj": self.p_adj, "verdict": self.verdict}


@dataclass(frozen=True, slots=True)
class HistorySeries:
    """A metric across runs in start order, with its validated steps and what limits them."""

    runs_dir: str
    metric: str
    unit: str
    phase: str
    arm: str
    threshold: float
    alpha: float
    runs: tuple[HistoryPoint, ...]
    steps: tuple[HistoryStep, ...]
    caveats: tuple[str, ...]
    method: str

    def to_json(self) -> dict[str, Any]:
        """``kit history --json`` (kit/schemas/history.schema.json)."""
        return {"runs_dir": self.runs_dir, "metric": self.metric, "unit": self.unit, "phase": self.phase,
                "arm": self.arm, "threshold": self.threshold, "alpha": self.alpha,
                "runs": [r.to_json() for r in self.runs], "steps": [s.to_json() for s in self.steps],
                "caveats": list(self.caveats), "method": self.method}


def arm_version(analysis: Analysis, arm: str) -> str | None:
    """``"ARM VERSION"``: the framework version the arm's own trials reported from inside (kit.analysis's
    trial_env, one entry per arm), None when none did. Never another arm's: a run's label (kit run --label) names
    the run, and the two arms of one run run two frameworks."""
    for env in analysis.trial_env:
        if env.get("arm") == arm and env.get("framework_version"):
            return f"{arm} {env['framework_version']}"
    return None


def _label(man: Manifest, analysis: Analysis, arm: str, run_name: str) -> str:
    return man.label or arm_version(analysis, arm) or run_name  # (the manifest has no run_dir key)


def _extract(path: Path, metric: str, phase: str, arm: str | None) -> tuple[CachedRun, bool]:
    """What history needs of one run, from its (fresh) analysis: experiment, label, arm, start, trial values; and
    whether the analysis was recomputed (analysis.json rewritten: the caller fingerprints the run again)."""
    rd = RunDir.open(path)
    man = rd.manifest()
    skipped = CachedRun(experiment=man.experiment, skip=True)
    if not rd.finished_ids():
        return skipped, False
    from kit.analysis.analyze import current_analysis

    analysis, recomputed = current_analysis(path, rd, need_study=False)  # history reads values only
    chosen = arm or analysis.arms[0]
    vals = analysis.values_of(metric, phase, chosen)
    started = man.started
    if not vals:
        return skipped, recomputed
    return CachedRun(experiment=man.experiment, label=_label(man, analysis, chosen, rd.path.name), arm=str(chosen),
                     version=arm_version(analysis, chosen),
                     started=started if started is not None and math.isfinite(started) else 0.0,
                     values=tuple(float(v) for v in vals)), recomputed


# Runs read in worker processes when at least this many are not in the cache (parsing each analysis.json and
# hashing its raw files costs milliseconds per run; a first call over 1,000 runs is CPU-bound).
PARALLEL_MIN_RUNS = 64


def _read_run(path: Path, seen: tuple[str, float] | None, metric: str, phase: str, arm: str | None,
              use_cache: bool) -> CachedRun:
    """One run for the cache: its fingerprint (taken before reading, unless the caller has it) and ``_extract``.

    A change made while the run is read moves the fingerprint, so the run is read again next time; when the
    analysis had to be recomputed (analysis.json rewritten) the run is fingerprinted again after it.
    """
    fp, newest = seen or (history_cache.fingerprint(path) if use_cache else ("", 0.0))
    entry, recomputed = _extract(path, metric, phase, arm)
    if recomputed and use_cache:
        fp, newest = history_cache.fingerprint(path)
    return dataclasses.replace(entry, fp=fp, newest=newest)


def _read_all(todo: list[tuple[Path, tuple[str, float] | None]], metric: str, phase: str, arm: str | None,
              use_cache: bool) -> Iterator[CachedRun]:
    """``_read_run`` of each run, in order; in a process pool (one worker per CPU, at most 8) for many runs."""
    workers = min(8, os.cpu_count() or 1, len(todo))
    args = [(p, fp, metric, phase, arm, use_cache) for p, fp in todo]
    if len(todo) < PARALLEL_MIN_RUNS or workers < 2:
        for a in args:
            yield _read_run(*a)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(_read_run, *zip(*args, strict=True), chunksize=max(1, min(32, len(todo) // (4 * workers))))


def collect(runs_dir: Path, metric: str, phase: str, arm: str | None, experiment: str | None, *,
            use_cache: bool = True, on_run: Callable[[int, int], None] | None = None) -> list[HistoryPoint]:
    """Per run (in start order): label and the measured values of ``metric`` in ``phase`` for ``arm``.

    Runs whose files are unchanged since the last call come from the user's history cache (kit/history_cache.py);
    the others are read from their analysis, recomputed when stale. ``on_run(done, total)`` reports progress.
    """
    if metric not in METRICS:
        raise AnalysisError(f"unknown metric {metric!r}", where="--metric", fix=f"use one of {', '.join(sorted(METRICS))}")
    found = sorted(p.parent for p in Path(runs_dir).glob("*/manifest.json"))
    if not found:
        raise AnalysisError("no run directories found", where=str(runs_dir), fix="give the directory that holds runs/<time>-<experiment>/")
    cpath = history_cache.cache_path(runs_dir, f"{metric}|{phase}|{arm or ''}")
    cached = history_cache.load(cpath) if use_cache else {}
    entries: dict[str, CachedRun] = {}
    todo: list[tuple[Path, tuple[str, float] | None]] = []
    for path in found:
        entry = cached.get(path.name)
        if entry is None:  # not in the cache: fingerprinted where it is read (in a worker)
            todo.append((path, None))
            continue
        seen = history_cache.fingerprint(path)
        if entry.fp == seen[0]:
            entries[path.name] = entry
        else:
            todo.append((path, seen))
    done = len(entries)
    if on_run:
        on_run(done, len(found))
    for (path, _), entry in zip(todo, _read_all(todo, metric, phase, arm, use_cache), strict=True):
        entries[path.name] = entry
        done += 1
        if on_run:
            on_run(done, len(found))
    runs = []
    experiments = set()
    for path in found:
        entry = entries[path.name]
        if experiment and entry.experiment != experiment:
            continue
        experiments.add(entry.experiment)
        if entry.skip:
            continue
        runs.append(HistoryPoint.of(str(path), entry.started, entry.label, entry.arm, entry.version, entry.values))
    if use_cache and entries != cached:
        history_cache.save(cpath, entries)
    if len(experiments) > 1 and not experiment:
        raise AnalysisError(f"runs of several experiments ({', '.join(sorted(experiments))})", where=str(runs_dir),
                            fix="pick one with --experiment")
    runs.sort(key=lambda r: r.started)
    return runs


def _l1_cost() -> Any:
    """ruptures' L1 cost allowing one-run segments (a regression in the newest run alone must be findable)."""
    from ruptures.costs import CostL1

    cost = CostL1()
    cost.min_size = 1
    return cost


# The between-run noise is estimated from the successive differences of the run medians only when there are at
# least this many runs (3 differences): a step is one large difference, and the MAD ignores one of three but not
# one of two (with 3 runs, a 15x step in the newest run was its own noise estimate and went unseen).
MIN_RUNS_BETWEEN = 4


def _noise_scale(med: np.ndarray, runs: Sequence[HistoryPoint]) -> float:
    """Noise of the run medians: the sampling noise of a median (within-run MAD / sqrt(trials)) and, from
    MIN_RUNS_BETWEEN runs on, the larger of it and the between-run scale (MAD of successive differences /
    sqrt(2), insensitive to one step among them).
    """
    resid = np.concatenate([np.asarray(r.values, float) - r.median for r in runs])
    within = float(stats.describe(resid).mad_normal) or float(np.std(resid))
    n = float(np.median([len(r.values) for r in runs]))
    sigma = within / math.sqrt(max(n, 1.0))
    if len(med) >= MIN_RUNS_BETWEEN:
        sigma = max(sigma, float(stats.describe(np.diff(med)).mad_normal) / math.sqrt(2.0))
    return sigma or 1e-12 * (float(np.max(np.abs(med))) or 1.0)


def candidate_steps(med: np.ndarray, runs: Sequence[HistoryPoint]) -> list[int]:
    """Run indices after each candidate step: binary segmentation (ruptures) of the run medians, L1 cost.

    The run is the unit of a step (steps sit between runs), so the series is one median per run: O(n log n)
    in the number of runs, where PELT over every trial value was quadratic (1,000 nightly runs took minutes).
    Penalty 2 log(n) sigma on the L1 scale (BIC-like), sigma the robust between-run noise of the medians.
    """
    import ruptures as rpt

    if len(med) < 2:
        return []
    pen = 2.0 * math.log(len(med)) * _noise_scale(med, runs)
    algo = rpt.Binseg(custom_cost=_l1_cost(), min_size=1, jump=1).fit(med.reshape(-1, 1))
    return sorted(int(b) for b in algo.predict(pen=pen)[:-1])


# Each candidate is validated on the trials of at most this many runs on either side (bounded by the
# neighbouring candidates): a step is a local change, and the test's cost stays bounded per step.
WINDOW_RUNS = 10


def detect_steps(runs: Sequence[HistoryPoint], *, threshold: float = 0.05, alpha: float = 0.05,
                 lower_is_better: bool | None = True) -> list[HistoryStep]:
    """Validated steps between runs: index of the first run after the step, ratio, p, verdict."""
    if len(runs) < 2:
        return []
    med = np.asarray([r.median for r in runs], float)
    cand = candidate_steps(med, runs)
    steps = []
    edges = [0, *cand, len(runs)]
    for k, i in enumerate(cand):
        lo, hi = max(edges[k], i - WINDOW_RUNS), min(edges[k + 2], i + WINDOW_RUNS)
        before = np.concatenate([runs[j].values for j in range(lo, i)])
        after = np.concatenate([runs[j].values for j in range(i, hi)])
        comp = stats.compare_two(after, before, paired=False, alpha=alpha)
        ratio = comp.ratio
        steps.append(HistoryStep(
            index=i, from_label=runs[i - 1].label, to_label=runs[i].label,
            ratio=_finite(ratio.estimate) if ratio is not None else None,
            ratio_low=_finite(ratio.low) if ratio is not None else None,
            ratio_high=_finite(ratio.high) if ratio is not None else None,
            p=_finite(comp.test.p) if comp.test is not None else None, n_before=len(before), n_after=len(after),
            runs_before=i - lo, runs_after=hi - i))
    from kit.compare import verdict

    judged = [dataclasses.replace(s, p_adj=p_adj, verdict=verdict(s.ratio, p_adj, lower_is_better, threshold, alpha,
                                                                  mde=None))  # steps only
              for s, p_adj in zip(steps, stats.holm([s.p for s in steps]), strict=True)]
    return [s for s in judged if s.verdict in ("regression", "improvement")]


def _finite(x: float | None) -> float | None:
    """A statistic as the JSON has it: a Python float, None where it is not finite (kit.stats.common)."""
    return None if x is None or not math.isfinite(x) else float(x)


def history(runs_dir: Path, metric: str, phase: str = "train", arm: str | None = None, experiment: str | None = None,
            threshold: float = 0.05, alpha: float = 0.05, *, use_cache: bool = True,
            on_run: Callable[[int, int], None] | None = None) -> HistorySeries:
    """``metric`` in ``phase`` across the runs under ``runs_dir`` (one arm, one experiment), with its steps."""
    from kit.compare import check_alpha, check_threshold

    check_threshold(threshold)
    check_alpha(alpha)
    runs = collect(runs_dir, metric, phase, arm, experiment, use_cache=use_cache, on_run=on_run)
    if not runs:
        raise AnalysisError(f"no run has measured {metric} in the {phase} phase", where=str(runs_dir),
                            fix="check --metric, --phase and --arm against the runs' analysis.json")
    steps = detect_steps(runs, threshold=threshold, alpha=alpha, lower_is_better=METRICS[metric].lower_is_better)
    caveats = []
    if len(runs) < MIN_RUNS_BETWEEN:
        caveats.append(f"{len(runs)} runs: the run-to-run noise of the host needs {MIN_RUNS_BETWEEN} runs to be "
                       "estimated, so a step is judged against the trials' own noise only (a busy host between "
                       "runs can read as a step)")
    small = [r.label for r in runs if r.n < stats.MIN_N_FOR_TESTS]
    if small:
        caveats.append(f"{len(small)} run(s) have fewer than {stats.MIN_N_FOR_TESTS} measured trials (e.g. "
                       f"{small[0]}): a step right before such a run (the newest, say) cannot be tested")
    return HistorySeries(
        runs_dir=str(runs_dir), metric=metric, unit=METRICS[metric].unit, phase=phase, arm=runs[0].arm,
        threshold=threshold, alpha=alpha, runs=tuple(runs), steps=tuple(steps), caveats=tuple(caveats),
        method="binary segmentation (ruptures, L1 cost, penalty 2 log(n) sigma) of the run medians; each "
                      f"candidate step validated on the trials of up to {WINDOW_RUNS} runs on either side by "
               "Mann-Whitney/Brunner-Munzel with Holm and the practical threshold")


def plot_svg(result: HistorySeries) -> str:
    import matplotlib.pyplot as plt

    from kit.report.figures import to_svg

    runs = result.runs
    x = np.arange(len(runs))
    med = np.array([r.median for r in runs])
    lo = med - np.array([r.q1 for r in runs])
    hi = np.array([r.q3 for r in runs]) - med
    fig, ax = plt.subplots(figsize=(max(5.0, 0.6 * len(runs)), 3.2))
    ax.errorbar(x, med, yerr=[lo, hi], fmt="o-", ms=4, capsize=3)
    for s in result.steps:
        ax.axvline(s.index - 0.5, color="red" if s.verdict == "regression" else "green", ls="--", lw=1)
        ax.annotate(f"{s.ratio:.2f}×", (s.index - 0.5, float(med.max())), color="red", fontsize=8, ha="center")
    # labels and arm come from run directories: shown literally (parse_math=False: a '$' is not mathtext)
    ax.set_xticks(x, [r.label for r in runs], rotation=30, ha="right", fontsize=8, parse_math=False)
    ax.set_ylabel(f"{METRICS[result.metric].label} ({result.unit})", parse_math=False)
    ax.set_title(f"{result.metric} ({result.phase}, {result.arm}): median and IQR per run", fontsize=10,
                 parse_math=False)
    ax.grid(alpha=0.3)
    return to_svg(fig)


HISTORY_STYLE = ("body { font-family: system-ui, sans-serif; max-width: 70rem; margin: auto; } "
                 "img.plot { display: block; max-width: 100%; height: auto; }")


def render_html(result: HistorySeries) -> str:
    """The history page: plot and step table. Every string from the runs (labels, arm) is HTML-escaped; the plot
    is an image the kit encoded (kit.report.svg_safe), and the page carries the kit's Content-Security-Policy."""
    from html import escape

    from kit.errors import ReportError
    from kit.report.html import csp_meta
    from kit.report.svg_safe import sanitize_svg

    def e(v: object) -> str:
        return escape(str(v), quote=True)

    rows = "".join(f"<tr><td>{e(s.verdict)}</td><td>{e(s.from_label)}</td><td>{e(s.to_label)}</td>"
                   f"<td>{s.ratio:.3f} [{s.ratio_low:.3f}, {s.ratio_high:.3f}]</td><td>{s.p_adj:.3g}</td></tr>"
                   for s in result.steps) or "<tr><td colspan=5>no step</td></tr>"
    runs = "".join(f"<tr><td>{i}</td><td>{e(r.label)}</td><td>{r.n}</td><td>{r.median:.4g}</td>"
                   f"<td>{r.q1:.4g}–{r.q3:.4g}</td></tr>" for i, r in enumerate(result.runs))
    head = f"{e(result.metric)} ({e(result.phase)}, {e(result.arm)})"
    try:
        plot = f"<img class=plot src=\"{sanitize_svg(plot_svg(result), 'history plot').data_url()}\" alt=\"{head}\">"
    except ReportError as exc:
        plot = f"<p>Plot not shown: {e(exc.cause)}</p>"
    return ("<!DOCTYPE html><html lang=en><head>" + str(csp_meta(HISTORY_STYLE)) + "<meta charset=utf-8>"
            "<meta name=viewport content='width=device-width'>"
            f"<title>kit history {head}</title><style>{HISTORY_STYLE}</style></head><body>"
            f"<h1>{head}</h1>{plot}<h2>Steps</h2><table><tr><th>verdict</th><th>from</th><th>to</th>"
            f"<th>ratio [CI]</th><th>p (Holm)</th></tr>{rows}</table><p>{e(result.method)}</p>"
            f"<h2>Runs</h2><table><tr><th>#</th><th>label</th><th>n</th><th>median ({e(result.unit)})</th>"
            f"<th>IQR</th></tr>{runs}</table></body></html>")
