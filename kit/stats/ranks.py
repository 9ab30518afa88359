"""Null distributions of the rank statistics, written out where scipy has none public.

The exact signed-rank and Mann–Whitney distributions serve the tests' intervals (R's ``qsignrank``/``qwilcox``
rule), the power simulation's critical counts and the attainable coverage of a rank interval; the tie sum and
the superiority counts are the pieces the tests' variances and the effect sizes share.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def superiority_counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    """Pairs (a_i, b_j) with a_i > b_j, a_i < b_j and a_i = b_j.

    Written here (neither scipy nor statsmodels counts the three separately):
    sort b once and binary-search every a_i, O((m + n) log n) instead of the
    O(m·n) pairwise table, so 10^4 trials per arm stay instant.
    """
    sb = np.sort(b)
    below = np.searchsorted(sb, a, side="left")  # b_j < a_i
    not_above = np.searchsorted(sb, a, side="right")  # b_j <= a_i
    greater = int(below.sum())
    equal = int((not_above - below).sum())
    return greater, a.size * b.size - greater - equal, equal


def signed_rank_pmf(n: int) -> np.ndarray:
    """Null distribution of the signed-rank sum T+ for n untied, non-zero differences.

    Written here because scipy has no public signed-rank distribution (only the
    private ``scipy.stats._hypotests._get_wilcoxon_distr``): every rank k joins
    T+ with probability ½, so the pmf is the product of the polynomials (1 + x^k)/2.
    """
    pmf = np.ones(1)
    for k in range(1, n + 1):
        nxt = np.zeros(pmf.size + k)
        nxt[: pmf.size] += 0.5 * pmf
        nxt[k:] += 0.5 * pmf
        pmf = nxt
    return pmf


def rank_sum_pmf(m: int, n: int) -> np.ndarray:
    """Null distribution of the Mann–Whitney U = #{a_i > b_j} for m and n untied values.

    Written here for the same reason as :func:`signed_rank_pmf`. Recursion on the
    largest of the m + n values: it is an a (probability m/(m+n)) and then beats
    all n b's, or it is a b and adds nothing.
    """
    prev = [np.ones(1) for _ in range(n + 1)]  # i = 0 a's: U = 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # j = 0 b's: U = 0
        for j in range(1, n + 1):
            pmf = np.zeros(i * j + 1)
            pmf[j:] += i / (i + j) * prev[j]
            pmf[: i * (j - 1) + 1] += j / (i + j) * cur[j - 1]
            cur.append(pmf)
        prev = cur
    return prev[n]


def exact_rank(pmf: np.ndarray, alpha: float) -> tuple[int, float]:
    """R's ``qsignrank``/``qwilcox`` rule: smallest k with P(T <= k) >= alpha/2 (at least 1), and its coverage."""
    cdf = np.cumsum(pmf)
    k = int(np.searchsorted(cdf, alpha / 2 - 10 * np.finfo(float).eps, side="left"))
    k = max(k, 1)
    return k, 1.0 - 2.0 * float(cdf[k - 1])


def tie_sum(v: np.ndarray) -> float:
    """Σ(t³ − t) over groups of equal values: the tie term of rank-test variances."""
    t = np.unique(v, return_counts=True)[1].astype(float)
    return float(np.sum(t**3 - t))


@lru_cache(maxsize=256)
def signed_rank_cdf(n: int) -> np.ndarray:
    """Cumulative :func:`signed_rank_pmf`, cached: the power tables and the claims' p-values read it per n."""
    return np.cumsum(signed_rank_pmf(n))


@lru_cache(maxsize=256)
def rank_sum_cdf(n_a: int, n_b: int) -> np.ndarray:
    """Null cdf of the Mann-Whitney U for samples of n_a and n_b untied values (counts of subsets)."""
    # c[m][u]: ways to choose m of the first j positions with rank-sum offset u; grown column by column
    ways = [np.zeros(1, dtype=float) for _ in range(n_a + 1)]
    ways[0][0] = 1.0
    for j in range(1, n_a + n_b + 1):
        for m in range(min(j, n_a), 0, -1):
            # adding position j as a member shifts U by the number of non-members before it: j - m
            shift = j - m
            prev = ways[m - 1]
            cur = ways[m]
            size = max(cur.size, prev.size + shift)
            nxt = np.zeros(size)
            nxt[: cur.size] += cur
            nxt[shift: shift + prev.size] += prev
            ways[m] = nxt
    pmf = ways[n_a][: n_a * n_b + 1]
    pmf = np.pad(pmf, (0, n_a * n_b + 1 - pmf.size))
    return np.cumsum(pmf / pmf.sum())
