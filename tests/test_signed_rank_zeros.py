"""Issue 15 item 4: one rule for zero differences in the signed-rank test and the Hodges–Lehmann interval.

The references are computed here, independently of kit.analysis and of scipy's rank code:
Walsh averages by double loops, average ranks by hand, the exact null distribution by
enumerating every sign assignment, and the interval by inverting the test the way R's
``wilcox.test(conf.int=TRUE)`` documents it (zeros dropped first; between Walsh averages the
statistic is constant, so evaluating it at every Walsh average and between neighbours finds
the ends). No R output is quoted: R is not installed here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from kit import stats as S

# Integer temperatures (deg C) of two arms in 12 blocks: d = a - b holds two zeros and many ties.
TIE_A = [101, 104, 98, 100, 103, 102, 106, 99, 105, 102, 107, 101]
TIE_B = [100, 104, 99, 98, 101, 100, 103, 99, 102, 103, 104, 100]
Z975 = 1.959963984540054  # Phi^-1(0.975)


def avg_ranks(v: list[float]) -> list[float]:
    """Ranks 1..n with ties given their average rank, written out."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    ranks = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j + 2) / 2.0
        i = j + 1
    return ranks


def z_stat(nz: list[float], shift: float) -> float:
    """R's W(d): zeros of nz - shift dropped, average ranks, tie-corrected sd, continuity 0.5 toward 0."""
    xd = [v - shift for v in nz if v - shift != 0]
    nx = len(xd)
    if nx == 0:
        return 0.0
    r = avg_ranks([abs(v) for v in xd])
    t_plus = sum(ri for ri, v in zip(r, xd, strict=True) if v > 0)
    groups: dict[float, int] = {}
    for ri in r:
        groups[ri] = groups.get(ri, 0) + 1  # equal |x| share one average rank
    var = nx * (nx + 1) * (2 * nx + 1) / 24 - sum(t**3 - t for t in groups.values()) / 48
    dz = t_plus - nx * (nx + 1) / 4
    corr = 0.5 if dz > 0 else -0.5 if dz < 0 else 0.0
    return (dz - corr) / math.sqrt(var) if var > 0 else 0.0


def walsh(nz: list[float]) -> list[float]:
    return sorted((nz[i] + nz[j]) / 2 for i in range(len(nz)) for j in range(i, len(nz)))


def inverted_interval(a: list[float], b: list[float]) -> dict[str, object]:
    """The shifts the normal-approximation test does not reject at 0.05, by brute force over Walsh averages."""
    nz = [x - y for x, y in zip(a, b, strict=True) if x != y]
    w = walsh(nz)
    pts = sorted(set(w))
    probes = [pts[0] - 1.0] + [q for p0, p1 in itertools.pairwise(pts) for q in (p0, (p0 + p1) / 2)]
    probes += [pts[-1], pts[-1] + 1.0]
    ok = [s for s in probes if abs(z_stat(nz, s)) <= Z975]
    low, high = min(ok), max(ok)
    # the ends of the closure are Walsh averages; an end not itself accepted is open
    low_end = max((p for p in pts if p <= low), default=low)
    high_end = min((p for p in pts if p >= high), default=high)
    m = len(w)
    return {"estimate": (w[(m - 1) // 2] + w[m // 2]) / 2, "low": low_end, "high": high_end,
            "low_open": low_end not in ok, "high_open": high_end not in ok,
            "p": math.erfc(abs(z_stat(nz, 0.0)) / math.sqrt(2))}


def contains_zero(s: S.Shift) -> bool:
    lo_ok = s.low < 0 or (s.low == 0 and not getattr(s, "low_open", False))
    hi_ok = s.high > 0 or (s.high == 0 and not getattr(s, "high_open", False))
    return lo_ok and hi_ok


def test_integer_temperatures_interval_and_test_agree() -> None:
    # d = 1 0 -1 2 2 2 3 0 3 -1 3 1: the non-zero ten are 1 -1 2 2 2 3 3 -1 3 1.
    # By hand: 55 Walsh averages; the median (28th) is 1.5. T+ at 0 on the ten: |d| ranks
    # 1 (x4, avg 2.5), 2 (x3, avg 6), 3 (x3, avg 9): T+ = 2*2.5 + 3*6 + 3*9 = 50, E = 27.5,
    # var = 10*11*21/24 - (60 + 24 + 24)/48 = 96.25 - 2.25 = 94, z = (22.5 - 0.5)/sqrt(94) = 2.269,
    # p = 0.0233 < 0.05: the test rejects, so the interval must exclude 0 (it ends at 0.5).
    ref = inverted_interval(TIE_A, TIE_B)
    assert ref["p"] == pytest.approx(math.erfc(22 / math.sqrt(94) / math.sqrt(2)), rel=1e-12)
    assert (ref["estimate"], ref["low"], ref["high"]) == (1.5, 0.5, 2.5)
    test = S.wilcoxon_paired(TIE_A, TIE_B)
    shift = S.hodges_lehmann(TIE_A, TIE_B, paired=True)
    assert test.p == pytest.approx(ref["p"], rel=1e-10) and test.n_used == 10
    # before issue 15: zeros kept in the Walsh averages -> 1.25 [0.0, 2.5], which holds 0 while p = 0.023
    assert (shift.estimate, shift.low, shift.high) == (1.5, 0.5, 2.5)
    assert shift.zeros == 2 and not contains_zero(shift) and test.p < 0.05
    assert "zero differences dropped" in shift.definition and "zero differences dropped" in (test.zero_method or "")
    assert shift.method == "normal approximation (inverted test)"  # as the test: ties and zeros


def test_open_end_at_zero_when_the_test_rejects_it() -> None:
    # d = 2 1 1 0 2 0 0 2 0 0 -1 2; the non-zero seven are 2 1 1 2 2 -1 2. By hand: |d| ranks 1 (x3,
    # avg 2) and 2 (x4, avg 5.5), T+ = 2*2 + 4*5.5 = 26, E = 14, var = 7*8*15/24 - (24 + 60)/48 = 33.25,
    # z = (12 - 0.5)/sqrt(33.25) = 1.994 > 1.960: p = 0.046, the test rejects shift 0. Yet 0 = (1 + -1)/2
    # is a Walsh average and the lower end: just above it T+ counts every Walsh average but the one
    # at -1 and z < 1.96. The interval is (0, 2], open at 0, so it excludes 0 as the test does.
    a = [60, 61, 64, 63, 63, 59, 58, 64, 62, 60, 57, 61]
    b = [58, 60, 63, 63, 61, 59, 58, 62, 62, 60, 58, 59]
    ref = inverted_interval(a, b)
    shift = S.hodges_lehmann(a, b, paired=True)
    p = S.wilcoxon_paired(a, b).p
    assert p == pytest.approx(ref["p"], rel=1e-10) == pytest.approx(math.erfc(11.5 / math.sqrt(33.25 * 2)))
    assert p < 0.05
    assert (shift.low, shift.high, shift.low_open, shift.high_open) == (
        ref["low"], ref["high"], ref["low_open"], ref["high_open"])
    assert shift.low == 0.0 and shift.low_open and not contains_zero(shift)
    assert "open there" in (shift.note or "")


def test_interval_is_the_inverted_test_on_random_integer_data() -> None:
    """400 samples of integer differences with zeros and ties: ends, openness, estimate and p by brute force."""
    rng = np.random.default_rng(15)
    checked = 0
    for _ in range(400):
        n = int(rng.integers(8, 21))
        b = rng.integers(55, 70, size=n)
        a = b + rng.integers(-2, 4, size=n)
        if np.count_nonzero(a - b) < 2:
            continue
        shift = S.hodges_lehmann(a, b, paired=True)
        test = S.wilcoxon_paired(a, b)
        ref = inverted_interval(a.tolist(), b.tolist())
        assert shift.estimate == ref["estimate"]
        if not math.isnan(shift.achieved_conf):  # even [min, max] is below 95 %: R lowers the level too
            assert shift.achieved_conf < 0.95 and "not achievable" in (shift.note or "")
            continue
        assert (shift.low, shift.high, shift.low_open, shift.high_open) == (
            ref["low"], ref["high"], ref["low_open"], ref["high_open"]), (a - b).tolist()
        assert test.p == pytest.approx(ref["p"], rel=1e-9)
        assert (test.p < 0.05) == (not contains_zero(shift)), (a - b).tolist()
        checked += 1
    assert checked > 350


def test_zeros_without_ties_use_the_normal_approximation_like_the_test() -> None:
    d = [0.0, 1.3, 2.9, -0.4, 3.1, 0.0, 2.2, 1.7, -1.1, 0.8, 2.6, 1.9]
    b = [10.0] * len(d)
    a = [10.0 + v for v in d]
    test = S.wilcoxon_paired(a, b)
    shift = S.hodges_lehmann(a, b, paired=True)
    assert not test.exact and shift.method.startswith("normal")  # zeros: R and the kit go asymptotic
    ref = inverted_interval(a, b)
    assert (shift.estimate, shift.low, shift.high) == pytest.approx((ref["estimate"], ref["low"], ref["high"]),
                                                                    abs=1e-12)
    assert test.p == pytest.approx(ref["p"], rel=1e-10)


def test_exact_case_by_enumerating_every_sign() -> None:
    """No zeros, no ties: exact test and exact interval; both from the 2^n sign assignments, enumerated."""
    rng = np.random.default_rng(4)
    for n in (6, 9, 12):
        d = np.round(rng.normal(0.8, 1.0, size=n), 3)
        assert np.unique(np.abs(d)).size == n and np.all(d != 0)
        ranks = avg_ranks([abs(v) for v in d.tolist()])
        t_obs = sum(r for r, v in zip(ranks, d, strict=True) if v > 0)
        dist = [sum(k + 1 for k in range(n) if (mask >> k) & 1) for mask in range(2**n)]
        m = n * (n + 1) // 2
        lo_tail = sum(t <= min(t_obs, m - t_obs) for t in dist) / 2**n
        p_ref = min(1.0, 2 * lo_tail)
        cdf = [sum(t <= q for t in dist) / 2**n for q in range(m + 1)]
        k = max(1, next(q for q in range(m + 1) if cdf[q] >= 0.025))
        w = walsh(d.tolist())
        test = S.wilcoxon_paired(d, np.zeros(n))
        shift = S.hodges_lehmann(d, np.zeros(n), paired=True)
        assert test.exact and shift.method == "exact"
        assert test.p == pytest.approx(p_ref, rel=1e-12)
        assert (shift.low, shift.high) == (w[k - 1], w[m - k])
        assert shift.achieved_conf == pytest.approx(1 - 2 * cdf[k - 1], rel=1e-12)
        if shift.achieved_conf >= 0.95:
            assert (test.p < 0.05) == (not contains_zero(shift))


def test_all_zero_differences() -> None:
    s = S.hodges_lehmann([3.0, 4.0, 5.0], [3.0, 4.0, 5.0], paired=True)
    assert (s.estimate, s.low, s.high, s.zeros, s.method) == (0.0, 0.0, 0.0, 3, "degenerate")
    assert S.wilcoxon_paired([3.0, 4.0, 5.0], [3.0, 4.0, 5.0]).p == 1.0


def test_compare_two_uses_the_one_rule() -> None:
    comp = S.compare_two(TIE_A, TIE_B, paired=True, n_boot=200).as_dict()
    assert comp["test"]["p"] < 0.05
    assert (comp["shift"]["low"], comp["shift"]["high"], comp["shift"]["low_open"]) == (0.5, 2.5, False)
    assert comp["shift"]["zeros"] == 2


@pytest.mark.slow
def test_the_report_marks_an_open_end_of_the_interval(tmp_path) -> None:
    """An open end (the test rejects that shift itself) is shown with a round bracket in HTML and LaTeX."""
    import json
    import shutil
    from pathlib import Path

    from kit.analysis.analyze import analyze_run
    from kit.analysis_record import Analysis
    from kit.report.context import build_context
    from kit.report.html import render_html
    from kit.report.latex import render_latex
    from kit.store import RunDir

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "golden" / "run", run)
    analysis = json.loads(json.dumps(analyze_run(run).to_json()))
    h = next(h for h in analysis["hypotheses"] if h.get("tested") and h["comparison"].get("shift"))
    shift = h["comparison"]["shift"]
    shift.update(low=0.0, high=0.25, low_open=True, high_open=False)
    ctx = build_context(RunDir.open(run).manifest(), Analysis.from_json(analysis, "analysis.json"), run)
    html = render_html(ctx, tmp_path / "html").read_text(encoding="utf-8")
    assert "(0, 0.25]" in html and "round bracket marks an open end" in html
    render_latex(ctx, tmp_path / "report")
    tex = (tmp_path / "report" / "latex" / "tables" / "hypotheses.tex").read_text(encoding="utf-8")
    assert "(0, 0.25]" in tex
    shift.update(low_open=False)  # closed again: square brackets
    html = render_html(build_context(RunDir.open(run).manifest(), Analysis.from_json(analysis, "analysis.json"), run),
                       tmp_path / "html2").read_text(
        encoding="utf-8")
    assert "[0, 0.25]" in html and "(0, 0.25]" not in html
