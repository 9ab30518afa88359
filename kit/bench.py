"""Collector overhead, measured: the same trial with collectors off and on, interleaved.

``overhead`` runs ``n_pairs`` pairs; each pair runs the trial once with the
collectors off and once on, in a random order (seeded) so that neither arm
always runs first (warm caches, turbo budget, thermal drift). The figure is
the ratio of median trial times, on / off, with a bootstrap confidence
interval that resamples whole pairs (``paired=True``), so that drift shared
by both runs of a pair cancels. The interval is BCa; where BCa degenerates
(medians of few distinct values make its jackknife flat) the percentile
interval is given instead, and ``ci_method`` says which.

The CLI (``kit bench overhead``) passes a ``run_trial`` that runs the real
harness; ``cpu_workload`` and ``in_process_trial`` are a small self-contained
default for tests and a quick look. In-process they are a pessimistic bound:
the sampler threads then compete with the workload for the GIL, which a
trial in its own process (the real harness) never does.
"""

from __future__ import annotations

import inspect
import math
import random
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from scipy import stats

from kit.collectors import make_collectors
from kit.collectors.base import DEFAULT_PERIOD_S, TrialTarget

TARGET_OVERHEAD = 0.01  # the target: under 1 % at 100 ms


@dataclass
class OverheadResult:
    """Ratio of median trial times (collectors on / off) with its bootstrap CI and the raw times."""

    ratio: float
    ci_low: float
    ci_high: float
    ci_method: str  # "BCa" | "percentile" | "degenerate" (no variation at all: the interval is the point)
    confidence: float
    n_pairs: int
    seed: int
    times_off_s: list[float]
    times_on_s: list[float]
    order: list[str] = field(default_factory=list)  # per pair: "off-on" or "on-off"

    @property
    def overhead_pct(self) -> float:
        return 100.0 * (self.ratio - 1.0)

    def meets_target(self, target: float = TARGET_OVERHEAD) -> bool:
        """True when the whole interval lies below 1 + target."""
        return self.ci_high < 1.0 + target

    def summary(self) -> str:
        return (
            f"median trial time on/off = {self.ratio:.4f} ({self.overhead_pct:+.2f} %), "
            f"{self.confidence:.0%} CI [{self.ci_low:.4f}, {self.ci_high:.4f}] ({self.ci_method} bootstrap, "
            f"{self.n_pairs} interleaved pairs)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "overhead_pct": self.overhead_pct}


def _ratio_of_medians(off: np.ndarray, on: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(on, axis=axis) / np.median(off, axis=axis)


def ratio_ci(
    off: Iterable[float], on: Iterable[float], *, confidence: float = 0.95, n_resamples: int = 9999, seed: int = 0
) -> tuple[float, float, str]:
    """Paired bootstrap CI of median(on) / median(off): (low, high, method)."""
    x, y = np.asarray(list(off), float), np.asarray(list(on), float)
    rng = np.random.default_rng(seed)
    seed_kw = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"  # SciPy < 1.15
    if np.all(x == x[0]) and np.all(y == y[0]):  # no variation at all: the interval is the point
        r = float(y[0] / x[0])
        return r, r, "degenerate"
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning: handled by the fallback below
            res = stats.bootstrap((x, y), _ratio_of_medians, paired=True, vectorized=True,
                                  confidence_level=confidence, n_resamples=n_resamples, method=method,
                                  **{seed_kw: rng})
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return lo, hi, method
    return float("nan"), float("nan"), "percentile"


def overhead(
    run_trial: Callable[[bool], float],
    n_pairs: int,
    seed: int,
    *,
    warmup_pairs: int = 1,
    confidence: float = 0.95,
    n_resamples: int = 9999,
) -> OverheadResult:
    """Run ``n_pairs`` interleaved off/on pairs (order random within each pair) and compare medians.

    ``run_trial(collectors_on)`` runs one trial and returns its measured time
    in seconds. ``warmup_pairs`` pairs are run first and discarded (one-time
    costs: imports, page cache).
    """
    if n_pairs < 2:
        raise ValueError("n_pairs must be >= 2 (a bootstrap needs at least two pairs)")
    if warmup_pairs < 0:
        raise ValueError("warmup_pairs must be >= 0")
    rng = random.Random(seed)
    off: list[float] = []
    on: list[float] = []
    order: list[str] = []
    for i in range(warmup_pairs + n_pairs):
        first_on = rng.random() < 0.5
        times = {}
        for flag in (first_on, not first_on):
            dt = float(run_trial(flag))
            if not (math.isfinite(dt) and dt > 0):
                raise ValueError(f"run_trial returned {dt!r}; expected a positive time in seconds")
            times[flag] = dt
        if i >= warmup_pairs:
            off.append(times[False])
            on.append(times[True])
            order.append("on-off" if first_on else "off-on")
    lo, hi, method = ratio_ci(off, on, confidence=confidence, n_resamples=n_resamples, seed=seed)
    ratio = float(np.median(on) / np.median(off))
    return OverheadResult(ratio, lo, hi, method, confidence, n_pairs, seed, off, on, order)


def cpu_workload(n: int = 300_000) -> float:
    """A small CPU-bound pure-Python loop; returns its wall time in seconds."""
    t0 = time.perf_counter()
    acc = 0
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
    dt = time.perf_counter() - t0
    if acc < 0:  # never true; keeps the loop from looking dead
        raise AssertionError
    return dt


def in_process_trial(
    names: Iterable[str] = ("cpu", "memory", "hwmon", "rapl", "nvml"),
    period_s: float = DEFAULT_PERIOD_S,
    *,
    workload: Callable[[], float] = cpu_workload,
    sysfs_root: Path = Path("/sys"),
) -> Callable[[bool], float]:
    """A ``run_trial`` for ``overhead``: the workload timed alone, or while the collectors sample.

    The collectors start before and stop after the timed region, so what is
    measured is their interference with the work, not their start-up.
    Collectors not available here are skipped (they would do nothing anyway).
    """
    wanted = tuple(names)

    def run(collectors_on: bool) -> float:
        if not collectors_on:
            return workload()
        target = TrialTarget()
        cols = [c for c in make_collectors(wanted, period_s, target, sysfs_root=sysfs_root) if c.available().ok]
        for c in cols:
            c.__enter__()
        try:
            return workload()
        finally:
            for c in cols:
                c.__exit__(None, None, None)

    return run


def harness_trial(
    spec_path: Path,
    profile: str | None,
    framework: str,
    names: Iterable[str],
    period_s: float = DEFAULT_PERIOD_S,
    metric: str = "train_time_s",
    data_dir: Path | None = None,
) -> Callable[[bool], float]:
    """A ``run_trial`` for ``overhead`` that runs the real harness (local backend).

    Each call runs one trial of the spec's workload in a fresh process, with
    the collectors sampling around it when ``collectors_on``, and returns the
    trial's own measured ``metric`` (by default the timed training phase),
    so start-up and import time do not dilute the overhead.
    """
    import json
    import tempfile

    from kit.backends.local import LocalBackend
    from kit.datasets import resolve
    from kit.errors import BackendError
    from kit.harness import REQUEST_FILE
    from kit.plan import make_plan
    from kit.run.prepare import resolve_devices, trial_request
    from kit.spec import load_spec

    spec = load_spec(spec_path, profile)
    plan = make_plan(spec)
    trial = next(t for t in plan.trials if t.framework == framework and not t.warmup)
    devices, _ = resolve_devices(spec, plan)  # the same resolution as `kit run`: GPU where NVML sees one
    device = devices.resolve(spec.workload_for(trial.config).flat())
    request = trial_request(spec, trial, device)
    data = (resolve(spec.dataset.name, spec.dataset.source, data_dir=data_dir, download=False).directory
            if spec.dataset is not None else Path(tempfile.mkdtemp()))
    backend = LocalBackend()
    names = tuple(names)

    def run(collectors_on: bool) -> float:
        with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
            work = Path(tmp)
            (work / REQUEST_FILE).write_text(json.dumps(request), encoding="utf-8")
            target = TrialTarget(gpu_indices=list(device.indices))  # only the trial's GPUs, as in `kit run`
            collectors = make_collectors(names, period_s, target) if collectors_on else []
            for c in collectors:
                c.__enter__()
            try:
                outcome = backend.run_trial(framework, work, data, spec.design.timeout_s, target)
            finally:
                for c in collectors:
                    c.__exit__(None, None, None)
        if outcome.status != "ok" or outcome.result is None:
            raise BackendError(f"benchmark trial failed ({outcome.status}): {outcome.stderr_tail[-300:]}",
                               fix="run the same spec with `kit run` to see the trial's error")
        return float(cast(float, outcome.result["results"][metric]))

    return run
