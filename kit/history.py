"""`kit history RUNS_DIR --metric …`: a metric over many runs of successive versions, and its steps.

Runs are ordered by their start time (or by label) and labelled by ``kit run
--label`` (else the framework versions reported from inside the trials).
Step detection: binary segmentation (L1 cost, robust to outliers; ruptures' Binseg, O(n log n))
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
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit import history_cache, stats
from kit.errors import AnalysisError
from kit.history_cache import CachedRun
from kit.metric_catalog import METRICS  # (kit.analysis.metrics: pandas, which a cached call never needs)

if TYPE_CHECKING:  # a cached call reads no run: numpy, kit.store and kit.manifest load only to read or test one
    import numpy as np

    from kit.analysis_record import Analysis
    from kit.manifest import Manifest

# kit.stats.MIN_N_FOR_TESTS, without importing numpy for a cached call (tests/test_history_speed_read.py)
MIN_N_FOR_TESTS = 10


def _quantile(ordered: Sequence[float], q: float) -> float:
    """numpy's default (linear) quantile of sorted values, bit for bit, in pure Python: a run has a dozen values,
    and numpy's per-call overhead made the quartiles of 10,000 runs cost a second."""
    n = len(ordered)
    if n == 0:
        return math.nan
    if q == 0.5 and n % 2 == 0:  # np.median: the mean of the two middle values
        return (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0
    pos = q * (n - 1)
    lo = min(math.floor(pos), n - 1)
    hi = min(lo + 1, n - 1)
    t = pos - lo
    a, b = ordered[lo], ordered[hi]
    diff = b - a
    return b - diff * (1.0 - t) if t >= 0.5 else a + diff * t  # numpy's _lerp


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
        ordered = sorted(float(v) for v in values)
        return cls(run_dir=run_dir, started=started, label=label, arm=arm, version=version, values=tuple(values),
                   median=_quantile(ordered, 0.5), q1=_quantile(ordered, 0.25), q3=_quantile(ordered, 0.75))

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

    @classmethod
    def from_json(cls, r: object) -> HistoryStep | None:
        """A step as :meth:`to_json` wrote it (the steps cache), checked; None for anything else."""
        if not isinstance(r, dict):
            return None
        ints = ("index", "n_before", "n_after", "runs_before", "runs_after")
        nums = ("ratio", "ratio_low", "ratio_high", "p", "p_adj")
        if not (all(type(r.get(k)) is int for k in ints) and isinstance(r.get("from"), str)
                and isinstance(r.get("to"), str) and isinstance(r.get("verdict"), str)
                and all(r.get(k) is None or (type(r.get(k)) is float and math.isfinite(r[k])) for k in nums)):
            return None
        return cls(index=r["index"], from_label=r["from"], to_label=r["to"], ratio=r["ratio"],
                   ratio_low=r["ratio_low"], ratio_high=r["ratio_high"], p=r["p"], n_before=r["n_before"],
                   n_after=r["n_after"], runs_before=r["runs_before"], runs_after=r["runs_after"],
                   p_adj=r["p_adj"], verdict=r["verdict"])

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


def _extract(path: Path, metric: str, phase: str, arm: str | None, verify_all: bool = False) -> tuple[CachedRun, bool]:
    """What history needs of one run, from its (fresh) analysis: experiment, label, arm, start, trial values; and
    whether the analysis was recomputed (analysis.json rewritten: the caller fingerprints the run again)."""
    from kit.freshness import stored_analysis
    from kit.history_read import sealed_series
    from kit.store import RunDir

    rd, man = RunDir.open_with_manifest(path)
    skipped = CachedRun(experiment=man.experiment, skip=True)
    if not _any_trial(path):
        return skipped, False
    # values only (no study code), and of a text-sealed file only the members history reads (kit.history_read);
    # the analysis code (pandas, scipy) is imported only for a run to recompute
    stored = sealed_series(path, metric, phase, verify_all) or stored_analysis(
        path, rd, need_study=False, verify_all=verify_all, series=(metric, phase))
    recomputed = stored is None
    if stored is None:
        from kit.analysis.analyze import analyze_run

        stored = analyze_run(path, write="if-possible")
    analysis = stored
    chosen = arm or analysis.arms[0]
    vals = analysis.values_of(metric, phase, chosen)
    started = man.started
    if not vals:
        return skipped, recomputed
    return CachedRun(experiment=man.experiment, label=_label(man, analysis, chosen, rd.path.name), arm=str(chosen),
                     version=arm_version(analysis, chosen),
                     started=started if started is not None and math.isfinite(started) else 0.0,
                     values=tuple(float(v) for v in vals)), recomputed


def _any_trial(run_dir: Path) -> bool:
    """Whether ``RunDir.finished_ids()`` is non-empty (a ``trials/*.json``), without pathlib's glob: a third of a
    millisecond a run, a thousand times in a first call."""
    try:
        return any(n.endswith(".json") and not n.startswith(".") for n in os.listdir(run_dir / history_cache.TRIALS))
    except OSError:  # absent, not a directory, unreadable: what the glob finds there, nothing
        return False


# Runs read in worker processes when at least this many are not in the cache (parsing each analysis.json and
# hashing its raw files costs milliseconds per run; a first call over 1,000 runs is CPU-bound).
PARALLEL_MIN_RUNS = 64


def _read_run(path: Path, seen: tuple[str, float] | None, metric: str, phase: str, arm: str | None,
              use_cache: bool, verify_all: bool = False) -> CachedRun:
    """One run for the cache: its fingerprint (taken before reading, unless the caller has it) and ``_extract``.

    A change made while the run is read moves the fingerprint, so the run is read again next time; when the
    analysis had to be recomputed (analysis.json rewritten) the run is fingerprinted again after it.
    """
    fp, newest = seen or (history_cache.fingerprint(path) if use_cache else ("", 0.0))
    entry, recomputed = _extract(path, metric, phase, arm, verify_all)
    if recomputed and use_cache:
        fp, newest = history_cache.fingerprint(path)
    return dataclasses.replace(entry, fp=fp, newest=newest)


def _read_all(todo: list[tuple[Path, tuple[str, float] | None]], metric: str, phase: str, arm: str | None,
              use_cache: bool, verify_all: bool = False) -> Iterator[CachedRun]:
    """``_read_run`` of each run, in order; in a process pool (one worker per CPU, at most 8) for many runs."""
    workers = min(8, os.cpu_count() or 1, len(todo))
    args = [(p, fp, metric, phase, arm, use_cache, verify_all) for p, fp in todo]
    if len(todo) < PARALLEL_MIN_RUNS or workers < 2:
        for a in args:
            yield _read_run(*a)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        # (every worker is started by map, before the thread: a fork never copies a half-done import)
        results = pool.map(_read_run, *zip(*args, strict=True), chunksize=max(1, min(32, len(todo) // (4 * workers))))
        warm = threading.Thread(target=_import_step_code, name="kit-history-imports")
        warm.start()
        yield from results
    warm.join()


def _import_step_code() -> None:
    """Import what :func:`detect_steps` runs (scipy.stats through kit.stats, kit.compare) while the workers read
    the runs: the main process only waits for them then, and these imports were a fifth of a first call over
    1,000 runs (a call with new runs detects its steps anew). Any failure is left to the real import."""
    try:
        import kit.compare
        import kit.stats.comparison
        import kit.stats.descriptive
        import kit.stats.multiplicity  # noqa: F401
    except Exception:  # raised again, with its cause, where the steps are detected
        pass


def collect(runs_dir: Path, metric: str, phase: str, arm: str | None, experiment: str | None, *,
            use_cache: bool = True, on_run: Callable[[int, int], None] | None = None,
            verify_all: bool = False) -> list[HistoryPoint]:
    """Per run (in start order): label and the measured values of ``metric`` in ``phase`` for ``arm``.

    ``verify_all`` (``--verify-all``): no entry of the cache is believed and every run's seal is checked by
    re-hashing all its input files (kit.freshness), not only those whose size or mtime moved.

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
    if verify_all:
        cached = {}  # nothing believed; what is read now is saved
    in_cache = [path for path in found if path.name in cached]
    seen_fp = dict(zip((p.name for p in in_cache), history_cache.fingerprints(in_cache), strict=True))
    for path in found:
        entry = cached.get(path.name)
        if entry is None:  # not in the cache: fingerprinted where it is read (in a worker)
            todo.append((path, None))
            continue
        seen = seen_fp[path.name]
        if entry.fp == seen[0]:
            entries[path.name] = entry
        else:
            todo.append((path, seen))
    done = len(entries)
    if on_run:
        on_run(done, len(found))
    for (path, _), entry in zip(todo, _read_all(todo, metric, phase, arm, use_cache, verify_all), strict=True):
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


# The between-run noise is estimated from the successive differences of the run medians only when there are at
# least this many runs (3 differences): a step is one large difference, and the MAD ignores one of three but not
# one of two (with 3 runs, a 15x step in the newest run was its own noise estimate and went unseen).
MIN_RUNS_BETWEEN = 4


def _noise_scale(med: np.ndarray, runs: Sequence[HistoryPoint]) -> float:
    """Noise of the run medians: the sampling noise of a median (within-run MAD / sqrt(trials)) and, from
    MIN_RUNS_BETWEEN runs on, the larger of it and the between-run scale (MAD of successive differences /
    sqrt(2), insensitive to one step among them).
    """
    import numpy as np

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
    if len(med) < 2:
        return []
    pen = 2.0 * math.log(len(med)) * _noise_scale(med, runs)
    return binseg_l1([float(m) for m in med], pen)


def _l1_prefix_costs(x: Sequence[float]) -> list[float]:
    """``out[k]`` = sum |x_i - median(x[:k+1])| for each prefix, in O(n log n): a running median in two heaps
    with their sums (for an even count any point between the middle two gives the same sum, their mean too)."""
    import heapq

    low: list[float] = []  # max-heap (negated): the smaller half, one more when the count is odd
    high: list[float] = []
    s_low = s_high = 0.0
    out = []
    for v in x:
        if low and v > -low[0]:
            heapq.heappush(high, v)
            s_high += v
        else:
            heapq.heappush(low, -v)
            s_low += v
        if len(low) > len(high) + 1:
            m = -heapq.heappop(low)
            s_low -= m
            heapq.heappush(high, m)
            s_high += m
        elif len(high) > len(low):
            m = heapq.heappop(high)
            s_high -= m
            heapq.heappush(low, -m)
            s_low += m
        cost = s_high - s_low + (-low[0] if len(low) > len(high) else 0.0)
        out.append(max(cost, 0.0))
    return out


def binseg_l1(x: Sequence[float], pen: float) -> list[int]:
    """Binary segmentation of ``x`` under the L1 cost (sum of absolute deviations from the segment's median),
    one-point segments allowed, stopped when the best split gains no more than ``pen``: what ruptures' Binseg
    with CostL1 (min_size 1, jump 1) returns, the break points without the final ``len(x)``.

    ruptures evaluates each candidate split with two medians, O(n) each: O(n^2) per segment, 3 s per series
    of 10,000 runs. Here each segment's split costs come from one running median forwards and one backwards
    (:func:`_l1_prefix_costs`), O(n log n); ties go to the later split, as ruptures' ``max`` of (gain, index).
    """
    n = len(x)
    best: dict[tuple[int, int], tuple[int | None, float]] = {}

    def split(start: int, end: int) -> tuple[int | None, float]:
        if (start, end) not in best:
            seg = x[start:end]
            if len(seg) < 2:
                best[(start, end)] = (None, 0.0)
            else:
                left = _l1_prefix_costs(seg)
                right = _l1_prefix_costs(seg[::-1])[::-1]  # right[k]: cost of seg[k:]
                total = left[-1]
                gains = [total - left[k - 1] - right[k] for k in range(1, len(seg))]
                top = max(gains)
                tie = top - 1e-9 * max(abs(total), 1e-300)  # gains equal but for rounding: the later split
                k = max(k for k, g in enumerate(gains, 1) if g >= tie)
                best[(start, end)] = (start + k, gains[k - 1])
        return best[(start, end)]

    bkps = [n]
    while True:
        cands = [split(a, b) for a, b in zip([0, *bkps[:-1]], bkps, strict=True)]
        bkp, gain = max(cands, key=lambda c: c[1])
        if bkp is None or not gain > pen:
            break
        bkps = sorted([*bkps, bkp])
    return bkps[:-1]


# Each candidate is validated on the trials of at most this many runs on either side (bounded by the
# neighbouring candidates): a step is a local change, and the test's cost stays bounded per step.
WINDOW_RUNS = 10


def detect_steps(runs: Sequence[HistoryPoint], *, threshold: float = 0.05, alpha: float = 0.05,
                 lower_is_better: bool | None = True) -> list[HistoryStep]:
    """Validated steps between runs: index of the first run after the step, ratio, p, verdict."""
    if len(runs) < 2:
        return []
    import numpy as np

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


def _in_range(x: object, high: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < high


def _steps_key(runs: Sequence[HistoryPoint], threshold: float, alpha: float, lower_is_better: bool | None) -> str:
    """What the steps of a series depend on: each run's label and values in order, the options and the kit build
    (its statistics code). A cached call whose runs are all unchanged reuses them: no test is run again and
    scipy is never imported (that import was most of a cached call)."""
    import hashlib
    import json

    from kit.build_id import kit_build

    doc = {"build": kit_build(), "threshold": threshold, "alpha": alpha, "lower": lower_is_better,
           "runs": [[r.label, list(r.values)] for r in runs]}
    return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()


def _steps_of(rows: list[Any] | None) -> list[HistoryStep] | None:
    """Steps from the steps cache, checked (None for anything malformed: they are detected again)."""
    if rows is None:
        return None
    out = []
    for r in rows:
        step = HistoryStep.from_json(r)
        if step is None:
            return None
        out.append(step)
    return out


def _finite(x: float | None) -> float | None:
    """A statistic as the JSON has it: a Python float, None where it is not finite (kit.stats.common)."""
    return None if x is None or not math.isfinite(x) else float(x)


def history(runs_dir: Path, metric: str, phase: str = "train", arm: str | None = None, experiment: str | None = None,
            threshold: float = 0.05, alpha: float = 0.05, *, use_cache: bool = True,
            on_run: Callable[[int, int], None] | None = None, verify_all: bool = False) -> HistorySeries:
    """``metric`` in ``phase`` across the runs under ``runs_dir`` (one arm, one experiment), with its steps."""
    if not (_in_range(threshold, 10) and _in_range(alpha, 1)):  # kit.compare's checks say what is wrong
        from kit.compare import check_alpha, check_threshold

        check_threshold(threshold)
        check_alpha(alpha)
    runs = collect(runs_dir, metric, phase, arm, experiment, use_cache=use_cache, on_run=on_run,
                   verify_all=verify_all)
    if not runs:
        raise AnalysisError(f"no run has measured {metric} in the {phase} phase", where=str(runs_dir),
                            fix="check --metric, --phase and --arm against the runs' analysis.json")
    lower = METRICS[metric].lower_is_better
    spath = history_cache.cache_path(runs_dir, f"steps|{metric}|{phase}|{arm or ''}|{experiment or ''}")
    key = _steps_key(runs, threshold, alpha, lower)
    steps = _steps_of(history_cache.load_steps(spath, key)) if use_cache else None
    if steps is None:
        steps = detect_steps(runs, threshold=threshold, alpha=alpha, lower_is_better=lower)
        if use_cache:
            history_cache.save_steps(spath, key, [s.to_json() for s in steps])
    caveats = []
    if len(runs) < MIN_RUNS_BETWEEN:
        caveats.append(f"{len(runs)} runs: the run-to-run noise of the host needs {MIN_RUNS_BETWEEN} runs to be "
                       "estimated, so a step is judged against the trials' own noise only (a busy host between "
                       "runs can read as a step)")
    small = [r.label for r in runs if r.n < MIN_N_FOR_TESTS]
    if small:
        caveats.append(f"{len(small)} run(s) have fewer than {MIN_N_FOR_TESTS} measured trials (e.g. "
                       f"{small[0]}): a step right before such a run (the newest, say) cannot be tested")
    return HistorySeries(
        runs_dir=str(runs_dir), metric=metric, unit=METRICS[metric].unit, phase=phase, arm=runs[0].arm,
        threshold=threshold, alpha=alpha, runs=tuple(runs), steps=tuple(steps), caveats=tuple(caveats),
        method=history_method())


# The terminal lists every run up to this many; beyond, the first and newest runs and those around each step
# (rich lays a table out cell by cell: 10,000 rows took 6 s, longer than the rest of a cached call).
TABLE_MAX_RUNS = 60
TABLE_HEAD, TABLE_TAIL, TABLE_AROUND_STEP = 5, 20, 3


def shown_runs(result: HistorySeries, most: int = TABLE_MAX_RUNS) -> list[int]:
    """Indices (ascending) of the runs the terminal table lists: all of them when there are at most ``most``,
    else the oldest TABLE_HEAD, the newest TABLE_TAIL and TABLE_AROUND_STEP on either side of each step (--json,
    --html, --markdown and --publish keep every run)."""
    n = len(result.runs)
    if n <= most:
        return list(range(n))
    keep = set(range(min(TABLE_HEAD, n))) | set(range(max(0, n - TABLE_TAIL), n))
    for s in result.steps:
        keep |= set(range(max(0, s.index - TABLE_AROUND_STEP), min(n, s.index + TABLE_AROUND_STEP)))
    return sorted(keep)


def history_method() -> str:
    """How the steps were found, as pages and JSON say it."""
    return ("binary segmentation (L1 cost, penalty 2 log(n) sigma) of the run medians; each candidate step "
            f"validated on the trials of up to {WINDOW_RUNS} runs on either side by Mann-Whitney/Brunner-Munzel "
            "with Holm and the practical threshold")


def render_html(result: HistorySeries) -> str:
    """The history page (``--html``): the series page of ``kit history --publish`` (kit.history_pages: the
    report's Jinja2 environment, autoescaped; the plot an image the kit's SVG sanitiser wrote; the kit's
    Content-Security-Policy)."""
    from kit.history_pages import render_series

    verdict = result.steps[-1].verdict if result.steps else "no change"
    return render_series(result, experiment="", verdict=verdict)
