"""What every test and estimate of kit.stats shares: input checks, size limits, and results as JSON.

The checks raise :class:`kit.errors.AnalysisError` saying what to fix rather than let numpy or scipy
return NaN from a NaN, an empty arm or a mismatched pair: the statistics never drop a value silently.
The limits are R's (exact rank distributions below 50) so that any number can be checked in R.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from kit.errors import AnalysisError

ALTERNATIVES: tuple[str, ...] = ("two-sided", "less", "greater")
# Hodges–Lehmann materialises all pairwise differences (or Walsh averages);
# past this many (160 MB of float64) it refuses rather than exhaust memory.
MAX_PAIRWISE = 20_000_000
# R's exact-distribution cut-off for wilcox.test (n < 50), kept so results can be checked in R.
EXACT_MAX_N = 49
# Fewer values per arm than this: descriptives only, no test (kit.stats.comparison, sequential, detectability).
MIN_N_FOR_TESTS = 10


def plain(value: Any) -> Any:
    """JSON-safe plain data: numpy scalars to Python, non-finite floats (NaN, ±inf) to None."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [plain(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


class AsDict:
    """Mixin for the result dataclasses: ``as_dict()`` gives JSON-safe plain data."""

    def as_dict(self) -> dict[str, Any]:
        return plain(self)


def check_sample(x: ArrayLike, *, name: str, where: str, min_n: int = 1) -> np.ndarray:
    """A 1-D float array of finite values, or an AnalysisError saying what to fix."""
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise AnalysisError(
            f"{name} is not numeric ({exc})", where=where, fix="pass a 1-D sequence of numbers"
        ) from exc
    if arr.ndim != 1:
        raise AnalysisError(
            f"{name} must be 1-D, got shape {arr.shape}", where=where, fix="pass one arm as a flat sequence"
        )
    if arr.size < min_n:
        raise AnalysisError(
            f"{name} has {arr.size} value(s), needs at least {min_n}",
            where=where,
            fix="collect more trials for this arm",
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        first = np.flatnonzero(bad)[:5].tolist()
        raise AnalysisError(
            f"{name} holds {int(bad.sum())} NaN or infinite value(s) (at index {first})",
            where=where,
            fix="drop or mark failed trials explicitly before analysis; the statistics never drop them silently",
        )
    return arr


def check_pair(a: ArrayLike, b: ArrayLike, *, where: str, min_n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Two arms of a paired design: same length, position i of a pairs with position i of b."""
    x = check_sample(a, name="a", where=where, min_n=min_n)
    y = check_sample(b, name="b", where=where, min_n=min_n)
    if x.size != y.size:
        raise AnalysisError(
            f"paired arms differ in length ({x.size} vs {y.size})",
            where=where,
            fix="pair trials by block so both arms have one value per block, or use paired=False",
        )
    return x, y


def check_alternative(alternative: str, where: str) -> str:
    if alternative not in ALTERNATIVES:
        raise AnalysisError(f"alternative {alternative!r} is unknown", where=where, fix=f"use one of {ALTERNATIVES}")
    return alternative


def check_level(value: float, name: str, where: str) -> float:
    if not 0.0 < float(value) < 1.0:
        raise AnalysisError(f"{name} must lie strictly between 0 and 1, got {value}", where=where)
    return float(value)



def check_pairwise_size(total: int, where: str) -> None:
    if total > MAX_PAIRWISE:
        raise AnalysisError(
            f"Hodges-Lehmann needs {total} pairwise values (limit {MAX_PAIRWISE})",
            where=where,
            fix="summarise fewer trials (e.g. per block) or rely on the ratio of medians",
        )
