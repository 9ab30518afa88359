"""kit.stats.normal gives scipy.stats.norm's and scipy.stats.t's floats bit for bit (it exists only to spare the
daily commands the 0.75 s import of scipy.stats; a last-bit difference would change a stored analysis)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kit.stats.normal import norm_cdf, norm_isf, norm_ppf, norm_sf, t_ppf, t_sf

XS = np.concatenate([np.linspace(-40, 40, 4001), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 8.3, -37.5]])
QS = np.concatenate([np.linspace(0, 1, 4001), [0.0, 1.0, -0.1, 1.1, np.nan, 1e-300, 1 - 1e-16, 0.5, 5e-324]])


def _same(a: object, b: object) -> bool:
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both_nan = np.isnan(x) & np.isnan(y)
    return bool(np.all(both_nan | ((x == y) & (np.signbit(x) == np.signbit(y)))))


@pytest.mark.parametrize(("ours", "theirs", "grid"), [
    (norm_cdf, stats.norm.cdf, XS), (norm_sf, stats.norm.sf, XS),
    (norm_ppf, stats.norm.ppf, QS), (norm_isf, stats.norm.isf, QS)])
def test_normal_matches_scipy_stats_bit_for_bit(ours, theirs, grid) -> None:  # type: ignore[no-untyped-def]
    assert _same(ours(grid), theirs(grid))
    scalars = [ours(float(v)) for v in grid[::37]]
    assert all(isinstance(s, float) for s in scalars)
    assert _same(scalars, [theirs(float(v)) for v in grid[::37]])


@pytest.mark.parametrize("df", [1, 2, 3.5, 7, 30, 1000])
def test_student_t_matches_scipy_stats_bit_for_bit(df: float) -> None:
    assert _same([t_sf(float(x), df) for x in XS[::41]], [stats.t.sf(float(x), df) for x in XS[::41]])
    assert _same([t_ppf(float(q), df) for q in QS[::41]], [stats.t.ppf(float(q), df) for q in QS[::41]])
    assert t_ppf(0.0, df) == -np.inf and t_ppf(1.0, df) == np.inf


def test_bad_degrees_of_freedom_give_nan_as_scipy_does() -> None:
    for df in (0.0, -1.0, float("nan")):
        assert np.isnan(t_sf(1.0, df)) and np.isnan(t_ppf(0.3, df))
        assert np.isnan(stats.t.sf(1.0, df)) and np.isnan(stats.t.ppf(0.3, df))


@pytest.mark.parametrize("df", [1, 2, 4, 9, 29])
def test_t_isf_and_noncentral_t_sf_match_scipy_stats_bit_for_bit(df: int) -> None:
    from kit.stats.normal import nct_sf, t_isf

    assert _same([t_isf(float(q), df) for q in QS[::41]], [stats.t.isf(float(q), df) for q in QS[::41]])
    for nc in (-60.0, -7.5, -1.0, 0.0, 0.3, 2.0, 11.0, 80.0):
        xs = [float(x) for x in XS[::53]]
        assert _same([nct_sf(x, df, nc) for x in xs], [stats.nct.sf(x, df, nc) for x in xs]), nc
