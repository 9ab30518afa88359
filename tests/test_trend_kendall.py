"""Kendall's S, its tie-corrected variance and the pair count against a pair-by-pair count (kit.stats.trends)."""

from __future__ import annotations

import numpy as np

from kit.stats.trends import _kendall_s_var


def _by_pairs(x: np.ndarray, y: np.ndarray) -> tuple[float, float, int]:
    n, s, pairs = x.size, 0.0, 0
    for i in range(n):
        for j in range(i + 1, n):
            s += float(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]))
            pairs += int(x[i] != x[j])
    t = np.array([np.sum(x == v) for v in np.unique(x)], dtype=float)
    u = np.array([np.sum(y == v) for v in np.unique(y)], dtype=float)
    var = (n * (n - 1) * (2 * n + 5) - np.sum(t * (t - 1) * (2 * t + 5)) - np.sum(u * (u - 1) * (2 * u + 5))) / 18.0
    if n > 2:
        var += np.sum(t * (t - 1) * (t - 2)) * np.sum(u * (u - 1) * (u - 2)) / (9.0 * n * (n - 1) * (n - 2))
    var += np.sum(t * (t - 1)) * np.sum(u * (u - 1)) / (2.0 * n * (n - 1))
    return s, float(var), pairs


def test_kendall_s_variance_and_pairs_equal_the_pairwise_count_with_ties() -> None:
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 30))
        x = rng.integers(0, 4, n).astype(float)
        y = np.round(rng.normal(size=n), int(rng.integers(0, 3)))
        assert _kendall_s_var(x, y) == _by_pairs(x, y), (x, y)
    x = np.array([0.0, -0.0, 1.0, 1.0])  # -0.0 and 0.0 are one level, as np.unique counts them
    assert _kendall_s_var(x, np.array([1.0, 2.0, 3.0, 3.0])) == _by_pairs(x, np.array([1.0, 2.0, 3.0, 3.0]))
