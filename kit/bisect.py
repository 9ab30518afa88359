"""From which release on did a metric change? Bisection across framework releases.

Given releases in order (image rows of one framework: the first known good, the
last known bad), ``kit bisect`` runs the fewest paired comparisons that locate
the first release with the change:

1. the last release against the first, in one interleaved run (two arms, paired
   by block). A conclusive "no change" ends it: no release between them changed
   the metric by more than the threshold *net* (the run says how small a change
   it could see). "Inconclusive" ends it with the repetitions that would decide.
2. otherwise, classic bisection: a release in the middle is compared with the
   first (the known good); the same change (same direction, conclusive) makes
   it bad, a conclusive "no change" good; ceil(log2(n - 1)) further comparisons.
   An opposite change (the metric went back) or an inconclusive comparison stops
   the search and says between which releases the change lies.

Every comparison is a real run directory (``kit compare --arms`` reproduces its
verdict); the verdict rule is :func:`kit.compare.judge`'s three-way rule. The
search itself is pure over a ``compare_pair`` function, so it is tested on
synthetic arms with a planted step and run for real through a container engine.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.compare_records import CompareRow, ProvenanceDiff
from kit.errors import KitError

CHANGES = ("regression", "improvement")


@dataclass(frozen=True)
class BisectOptions:
    metric: str = "time_s"
    phase: str = "train"
    threshold: float = 0.05
    alpha: float = 0.05


@dataclass(frozen=True, slots=True)
class PairVerdict:
    """One comparison of a candidate release against the baseline: one verdict from its rows (:func:`summarize`),
    the row that leads it (largest change), and the run that measured it."""

    verdict: str  # regression, improvement, mixed, no change, inconclusive
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    p_adj: float | None
    mde: float | None  # the largest minimum detectable change over the rows (None: one is unknown)
    n_needed: int | None  # repetitions that would decide the inconclusive rows (None: unknown)
    rows: tuple[CompareRow, ...]
    run: str = ""  # the comparison's run directory
    arms: tuple[str, ...] | None = None
    provenance_differences: tuple[ProvenanceDiff, ...] | None = None
    baseline: str = ""
    candidate: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "baseline": self.baseline, "candidate": self.candidate, "verdict": self.verdict, "ratio": self.ratio,
            "ratio_low": self.ratio_low, "ratio_high": self.ratio_high, "p_adj": self.p_adj, "mde": self.mde,
            "n_needed": self.n_needed, "rows": [r.to_json() for r in self.rows], "run": self.run}
        if self.arms is not None:
            out["arms"] = list(self.arms)
        if self.provenance_differences is not None:
            out["provenance_differences"] = [d.to_json() for d in self.provenance_differences]
        return out


@dataclass(frozen=True, slots=True)
class BisectResult:
    """Where the change lies (``status``: located, no change, inconclusive, non-monotonic), in words and as the
    releases around it, with every comparison made; :func:`run_bisect` adds what was bisected."""

    status: str
    answer: str
    releases: tuple[str, ...]
    baseline: str
    comparisons: tuple[PairVerdict, ...]
    between: tuple[str, str] | None = None  # stopped early: the change lies after the first, at or before the second
    first_changed: str | None = None  # located
    last_unchanged: str | None = None
    direction: str | None = None
    ratio: float | None = None
    ratio_low: float | None = None
    ratio_high: float | None = None
    metric: str | None = None  # run_bisect: the metric, phase, levels, experiment and profile bisected
    phase: str | None = None
    threshold: float | None = None
    alpha: float | None = None
    experiment: str | None = None
    profile: str | None = None

    @property
    def n_comparisons(self) -> int:
        return len(self.comparisons)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "answer": self.answer, "releases": list(self.releases),
                               "baseline": self.baseline, "comparisons": [c.to_json() for c in self.comparisons],
                               "n_comparisons": self.n_comparisons}
        if self.between is not None:
            out["between"] = list(self.between)
        if self.first_changed is not None:
            out.update(first_changed=self.first_changed, last_unchanged=self.last_unchanged,
                       direction=self.direction, ratio=self.ratio, ratio_low=self.ratio_low,
                       ratio_high=self.ratio_high)
        if self.metric is not None:
            out.update(metric=self.metric, phase=self.phase, threshold=self.threshold, alpha=self.alpha,
                       experiment=self.experiment, profile=self.profile)
        return out


# compare_pair(baseline_row, candidate_row) -> the comparison's verdict (summarize) and its run
ComparePair = Callable[[str, str], PairVerdict]


def summarize(rows: Sequence[CompareRow]) -> PairVerdict:
    """One verdict for a comparison from its rows (one per configuration): a change when some row changed
    and all changed rows agree; "no change" when every row says so; otherwise inconclusive."""
    changed = {r.verdict for r in rows if r.verdict in CHANGES}
    if len(changed) > 1:
        verdict = "mixed"
    elif changed:
        verdict = changed.pop()
    elif rows and all(r.verdict == "no change" for r in rows):
        verdict = "no change"
    else:
        verdict = "inconclusive"
    lead = max(rows, key=lambda r: abs(math.log(r.ratio)) if r.ratio else 0.0) if rows else None
    mdes = [r.mde for r in rows]
    needs = [r.n_needed for r in rows if r.verdict == "inconclusive"]
    return PairVerdict(
        verdict=verdict, ratio=lead.ratio if lead else None, ratio_low=lead.ratio_low if lead else None,
        ratio_high=lead.ratio_high if lead else None, p_adj=lead.p_adj if lead else None,
        mde=None if any(m is None for m in mdes) else max((m for m in mdes if m is not None), default=None),
        n_needed=None if not needs or any(n is None for n in needs) else max(n for n in needs if n is not None),
        rows=tuple(rows))


def bisect_releases(releases: list[str], compare_pair: ComparePair) -> BisectResult:
    """Locate the first release whose metric differs from the first release's (see the module docstring)."""
    if len(releases) < 2 or len(set(releases)) != len(releases):
        raise KitError(f"bisection needs two or more different releases, got {', '.join(releases) or 'none'}",
                       where="--images", fix="give the image rows in release order: GOOD,...,BAD")
    good = releases[0]
    done: list[PairVerdict] = []

    def compare(cand: str) -> PairVerdict:
        c = dataclasses.replace(compare_pair(good, cand), baseline=good, candidate=cand)
        done.append(c)
        return c

    def result(status: str, text: str, between: tuple[str, str] | None = None) -> BisectResult:
        return BisectResult(status=status, answer=text, releases=tuple(releases), baseline=good,
                            comparisons=tuple(done), between=between)

    end = compare(releases[-1])
    if end.verdict == "no change":
        return result("no change", f"no release from {good} to {releases[-1]} changed the metric by more than the "
                      f"threshold net of the first ({_seen(end)}); a change and its reversal in between would "
                      "cancel out")
    if end.verdict not in CHANGES:
        return result("inconclusive", f"{releases[-1]} vs {good} is {end.verdict}: {_need(end)}")
    direction = end.verdict
    lo, hi = 0, len(releases) - 1  # releases[lo] like the first; releases[hi] changed
    while hi - lo > 1:
        mid = (lo + hi) // 2
        c = compare(releases[mid])
        if c.verdict == direction:
            hi = mid
        elif c.verdict == "no change":
            lo = mid
        elif c.verdict in CHANGES or c.verdict == "mixed":
            return result("non-monotonic", f"{releases[mid]} vs {good} is {c.verdict} while {releases[-1]} is a "
                          f"{direction}: the metric moved both ways between {releases[lo]} and {releases[hi]}; "
                          "compare neighbouring releases with kit run --images",
                          between=(releases[lo], releases[hi]))
        else:
            return result("inconclusive", f"the {direction} lies after {releases[lo]} and at or before "
                          f"{releases[hi]}; {releases[mid]} vs {good} is inconclusive: {_need(c)}",
                          between=(releases[lo], releases[hi]))
    first = next(c for c in done if c.candidate == releases[hi])
    return dataclasses.replace(
        result("located", f"first release with the {direction}: {releases[hi]} (last like {good}: "
               f"{releases[lo]}); {releases[hi]}/{good} = {_ratio(first)}"),
        first_changed=releases[hi], last_unchanged=releases[lo], direction=direction, ratio=first.ratio,
        ratio_low=first.ratio_low, ratio_high=first.ratio_high)


def _ratio(c: PairVerdict) -> str:
    if c.ratio is None:
        return "-"
    ci = "" if c.ratio_low is None else f" [95 % CI {c.ratio_low:.3f}, {c.ratio_high:.3f}]"
    return f"{c.ratio:.3f}{ci}"


def _seen(c: PairVerdict) -> str:
    return "a smaller change was not detectable" if c.mde is None else \
        f"it would have seen a change of {c.mde:.1%} or more"


def _need(c: PairVerdict) -> str:
    if c.n_needed:
        return (f"{c.n_needed} repetitions per arm would make it conclusive: set [design] repetitions "
                "(or a profile with them) and bisect again")
    return "the noise is unknown or too large for any practical number of repetitions: reduce it (kit doctor)"


def check_releases(rows: list[str], frameworks: tuple[str, ...], matrix: Any = None) -> list[str]:
    """Rows of one framework the experiment runs, in strictly increasing version order (the bisection's order)."""
    from kit.images.matrix import load_matrix

    matrix = matrix or load_matrix()
    found = [matrix.get(r.strip()) for r in rows if r.strip()]
    era = [r.name for r in found if r.paper_era]
    if era:
        raise KitError(f"{', '.join(era)} {'is a paper-era row' if len(era) == 1 else 'are paper-era rows'}: the "
                       "stack a paper ran, not a release in a version-to-version series (and the kit's harness "
                       "cannot run trials there)", where="--images",
                       fix="bisect between current rows, e.g. tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu")
    kinds = {(r.framework, r.device) for r in found}
    if len(kinds) != 1:
        raise KitError("bisection compares releases of one framework on one device, got "
                       + ", ".join(sorted(f"{f} ({d})" for f, d in kinds)), where="--images",
                       fix="e.g. --images tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu")
    if found[0].framework not in frameworks:
        raise KitError(f"the experiment runs {', '.join(frameworks)}, not {found[0].framework}", where="--images",
                       fix="give rows of a framework the experiment runs (kit images list)")
    versions = [tuple(int(x) for x in r.version.split("+")[0].split(".") if x.isdigit()) for r in found]
    if any(b <= a for a, b in itertools.pairwise(versions)):
        raise KitError("the releases are not in increasing version order: "
                       + ", ".join(f"{r.name} ({r.version})" for r in found), where="--images",
                       fix="list them oldest (known good) first, newest (known bad) last")
    return [r.name for r in found]


def run_bisect(spec: Any, rows: list[str], opts: BisectOptions, run_opts: Any, events: Any = None,
               on_compare: Callable[[str, str], None] | None = None) -> BisectResult:
    """Bisect for real: each comparison is a `kit run --images BASELINE,CANDIDATE` plus `kit compare --arms`."""
    from kit.analysis.metrics import METRICS
    from kit.backends.container import image_arms
    from kit.compare import CompareOptions, check_options, compare_arms
    from kit.run import start_run

    if opts.metric not in METRICS:
        raise KitError(f"unknown metric {opts.metric!r}", where="--metric", fix=f"use one of: {', '.join(sorted(METRICS))}")
    releases = check_releases(rows, spec.experiment.frameworks)
    copts = CompareOptions(threshold=opts.threshold, alpha=opts.alpha, metrics=(opts.metric,), phases=(opts.phase,))
    check_options(copts)  # before any run: a threshold of -1 or nan decides nothing

    def compare_pair(baseline: str, candidate: str) -> PairVerdict:
        if on_compare:
            on_compare(baseline, candidate)
        arms, images = image_arms([baseline, candidate], spec.experiment.frameworks)
        ro = dataclasses.replace(run_opts, arms=arms, label=f"bisect {candidate} vs {baseline}",
                                 backend_options={**run_opts.backend_options, "images": images})
        rd = start_run(spec, ro, events) if events is not None else start_run(spec, ro)
        status = rd.manifest().status
        if status != "complete":
            raise KitError(f"the comparison run of {candidate} vs {baseline} is {status}", where=str(rd.path),
                           fix=f"kit status {rd.path}; finish it with kit run --resume {rd.path}, then bisect again")
        res = compare_arms(rd.path, arms[0], arms[1], copts)
        return dataclasses.replace(summarize(res.rows), run=str(rd.path), arms=tuple(arms),
                                   provenance_differences=res.provenance_differences)

    out = bisect_releases(releases, compare_pair)
    return dataclasses.replace(out, metric=opts.metric, phase=opts.phase, threshold=opts.threshold,
                               alpha=opts.alpha, experiment=spec.experiment.id, profile=spec.profile)


def save(result: BisectResult, path: Path) -> None:
    import json

    from kit.store import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(result.to_json(), indent=1, default=str) + "\n").encode())
