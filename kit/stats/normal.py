"""The standard normal's cdf, sf, ppf and isf, and Student's t's sf and ppf, without importing scipy.stats.

Why: ``import scipy.stats`` costs about 0.75 s on a 2-core machine (scipy 1.17 rewrites ~600 docstrings at
import), more than everything else `kit list`, `kit show` and much of `kit compare` do. These functions are the
very ufuncs scipy.stats.norm and scipy.stats.t call (``norm._cdf = ndtr``, ``_sf(x) = ndtr(-x)``,
``_ppf = ndtri``, ``_isf(q) = -ndtri(q)``; ``t._sf(x, df) = stdtr(df, -x)``, ``t._ppf(q, df) = stdtrit(df, q)``),
from scipy.special, whose import is a third of that; for the standard distribution (loc 0, scale 1) the wrapper
adds nothing but argument checks and ``* 1 + 0`` (which turns -0.0 into 0.0, kept here), so the floats are the same bit for bit (tests/test_stats_normal.py holds
that against scipy.stats over a grid with the edges: 0, 1, ±inf, nan, out of range).
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
from scipy import special
from scipy.special import _ufuncs


@overload
def norm_cdf(x: float) -> float: ...
@overload
def norm_cdf(x: np.ndarray) -> np.ndarray: ...
def norm_cdf(x: float | np.ndarray) -> float | np.ndarray:
    """P(Z <= x)."""
    return _out(special.ndtr(x) + 0.0)


@overload
def norm_sf(x: float) -> float: ...
@overload
def norm_sf(x: np.ndarray) -> np.ndarray: ...
def norm_sf(x: float | np.ndarray) -> float | np.ndarray:
    """P(Z > x), computed as ndtr(-x) so that the upper tail keeps its precision."""
    return _out(special.ndtr(-np.asarray(x, dtype=float)) + 0.0)


@overload
def norm_ppf(q: float) -> float: ...
@overload
def norm_ppf(q: np.ndarray) -> np.ndarray: ...
def norm_ppf(q: float | np.ndarray) -> float | np.ndarray:
    """The z with P(Z <= z) = q; nan outside [0, 1]."""
    return _out(_in_unit(q, special.ndtri(q) + 0.0))


@overload
def norm_isf(q: float) -> float: ...
@overload
def norm_isf(q: np.ndarray) -> np.ndarray: ...
def norm_isf(q: float | np.ndarray) -> float | np.ndarray:
    """The z with P(Z > z) = q; nan outside [0, 1]."""
    return _out(_in_unit(q, -special.ndtri(q) + 0.0))


def t_sf(x: float, df: float) -> float:
    """P(T > x) for Student's t with ``df`` degrees of freedom (df > 0, else nan)."""
    return float(special.stdtr(df, -x) + 0.0) if df > 0 else float("nan")


def t_ppf(q: float, df: float) -> float:
    """The t with P(T <= t) = q for ``df`` degrees of freedom (df > 0 and q in [0, 1], else nan); the ends of the
    support at q = 0 and 1, as scipy.stats answers them (stdtrit itself gives +inf at q = 0)."""
    if not df > 0:
        return float("nan")
    if q == 0.0:
        return float("-inf")
    if q == 1.0:
        return float("inf")
    return float(_in_unit(q, special.stdtrit(df, q) + 0.0))


def t_isf(q: float, df: float) -> float:
    """The t with P(T > t) = q for ``df`` degrees of freedom (df > 0 and q in [0, 1], else nan)."""
    if not df > 0:
        return float("nan")
    if q == 0.0:
        return float("inf")
    if q == 1.0:
        return float("-inf")
    return float(_in_unit(q, -special.stdtrit(df, q) + 0.0))


def nct_sf(x: float, df: float, nc: float) -> float:
    """P(T > x) for the noncentral t (``df`` > 0, finite ``nc``), for the t test's power in `kit list`'s design.

    scipy.stats.nct.sf is ``clip(scipy.special._ufuncs._nct_sf(x, df, nc), 0, 1)`` (Boost's complement); that
    ufunc is private, so where a scipy lacks it this asks scipy.stats itself (slower to import, same answer)."""
    if not (df > 0 and math.isfinite(nc)) or math.isnan(x):
        return float("nan")
    if x == math.inf:
        return 0.0
    if x == -math.inf:
        return 1.0
    sf = getattr(_ufuncs, "_nct_sf", None)
    if sf is None:
        from scipy import stats

        return float(stats.nct.sf(x, df, nc))
    with np.errstate(over="ignore"):
        return float(np.clip(sf(x, df, nc), 0, 1))


def _in_unit(q: float | np.ndarray, value: float | np.ndarray) -> float | np.ndarray:
    """scipy.stats answers nan for a probability outside [0, 1] (ndtri does too; this keeps it explicit)."""
    qa = np.asarray(q, dtype=float)
    if qa.ndim == 0:
        return value if 0.0 <= float(qa) <= 1.0 else float("nan")
    return np.where((qa >= 0.0) & (qa <= 1.0), value, np.nan)


def _out(value: float | np.ndarray) -> float | np.ndarray:
    """A 0-d result as a Python float (as scipy.stats.norm's scalar answers, which are numpy float64)."""
    arr = np.asarray(value)
    return float(arr) if arr.ndim == 0 else arr
