"""Holm's step-down correction of a family of p-values."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from kit.errors import AnalysisError


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, the arithmetic of statsmodels ``multipletests(method='holm')`` (and R's
    ``p.adjust(method = "holm")``): sorted ascending, the i-th (from 0) times m - i, made monotone by a running
    maximum, capped at 1. Written out here because ``multipletests`` runs ``gc.collect()`` on every call (23 ms
    in a small process, far more in a large one), which made the sequential-stopping simulation, tens of
    thousands of calls, take over ten minutes; tests/test_stats.py checks it equals statsmodels.

    None (and NaN) entries mean "no test" and pass through as None without
    counting towards the family size.
    """
    where = "stats.holm"
    values = list(pvalues)
    keep = [i for i, p in enumerate(values) if p is not None and not math.isnan(float(p))]
    raw = [float(values[i]) for i in keep]  # type: ignore[arg-type]
    if any(not 0.0 <= p <= 1.0 for p in raw):
        raise AnalysisError("p-values must lie in [0, 1]", where=where, fix="pass raw p-values, not scores or logs")
    out: list[float | None] = [None] * len(values)
    if raw:
        arr = np.asarray(raw, dtype=float)
        order = np.argsort(arr, kind="mergesort")
        stepped = np.minimum(np.maximum.accumulate(arr[order] * np.arange(arr.size, 0, -1)), 1.0)
        adjusted = np.empty_like(stepped)
        adjusted[order] = stepped
        for i, p in zip(keep, adjusted, strict=True):
            out[i] = float(p)
    return out
