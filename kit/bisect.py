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
from typing import TYPE_CHECKING, Any

from packaging.version import InvalidVersion, Version

from kit.compare_records import CompareRow, ProvenanceDiff
from kit.errors import KitError
from kit.records import JsonTable

if TYPE_CHECKING:
    from kit.images.arms import ImageProgress

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

    def to_json(self) -> JsonTable:
        out: JsonTable = {
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
    visited: tuple[str, ...] = ()  # the releases compared, in the order first visited (the rest were never run)
    added: tuple[str, ...] = ()  # run_bisect: rows a release spec added to the user matrix (kit.images.arms)
    built: tuple[str, ...] = ()  # run_bisect: rows whose image was built for a comparison

    @property
    def n_comparisons(self) -> int:
        return len(self.comparisons)

    def message(self) -> str:
        """The answer as a short message for an issue or a chat (:func:`message`)."""
        return message(self)

    def to_json(self) -> JsonTable:
        out: JsonTable = {"status": self.status, "answer": self.answer, "releases": list(self.releases),
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
        if self.visited:  # results saved before these fields read back without them
            out.update(visited=list(self.visited), added=list(self.added), built=list(self.built),
                       message=self.message())
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
                            comparisons=tuple(done), between=between,
                            visited=tuple(dict.fromkeys([good, *(c.candidate for c in done)])))

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


def _version(text: str, where: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise KitError(f"{text!r} is not a release version", where=where,
                       fix="give releases such as tensorflow==2.19.1 (PEP 440 versions)") from None


@dataclass(frozen=True)
class _Release:
    item: str  # as given: a row name or a release spec
    framework: str
    version: Version
    device: str | None  # a row's; None for a release spec (the run's device decides)
    paper_era: bool = False


def _release(item: str, matrix: Any) -> _Release:
    from kit.images.arms import is_release

    if is_release(item):
        from kit.images.add import parse_release_spec

        try:
            spec = parse_release_spec(item)
        except KitError as err:
            raise type(err)(err.cause, where=f"--images {item}", fix=err.fix) from None
        return _Release(item, spec.framework, _version(spec.version, f"--images {item}"), None)
    row = matrix.get(item)
    return _Release(item, row.framework, _version(row.version.split("+")[0], f"--images {item}"), row.device,
                    row.paper_era)


def check_releases(rows: list[str], frameworks: tuple[str, ...], matrix: Any = None,
                   device: str | None = None) -> list[str]:
    """Releases of one framework the experiment runs, in strictly increasing version order (the bisection's order).

    Each is a matrix row or a release spec (``tensorflow==2.20.0``, added and built only when visited); a spec runs
    on ``device`` (the run's, kit.images.arms.run_device), which every row given must match too."""
    from kit.images.matrix import load_matrix

    matrix = matrix or load_matrix()
    found = [_release(r.strip(), matrix) for r in rows if r.strip()]
    era = [r.item for r in found if r.paper_era]
    if era:
        raise KitError(f"{', '.join(era)} {'is a paper-era row' if len(era) == 1 else 'are paper-era rows'}: the "
                       "stack a paper ran, not a release in a version-to-version series (and the kit's harness "
                       "cannot run trials there)", where="--images",
                       fix="bisect between current rows, e.g. tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu")
    kinds = {(r.framework, r.device or device or "the run's device") for r in found}
    devices = {r.device or device for r in found} - {None}
    if len({r.framework for r in found}) != 1 or len(devices) > 1:
        raise KitError("bisection compares releases of one framework on one device, got "
                       + ", ".join(sorted(f"{f} ({d})" for f, d in kinds)), where="--images",
                       fix="e.g. --images tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu")
    if found and found[0].framework not in frameworks:
        raise KitError(f"the experiment runs {', '.join(frameworks)}, not {found[0].framework}", where="--images",
                       fix="give rows of a framework the experiment runs (kit images list)")
    if any(b.version <= a.version for a, b in itertools.pairwise(found)):
        raise KitError("the releases are not in increasing version order: "
                       + ", ".join(f"{r.item} ({r.version})" for r in found), where="--images",
                       fix="list them oldest (known good) first, newest (known bad) last")
    return [r.item for r in found]


def releases_between(spec: Any, low: str, high: str, *, pre: bool = False, device: str | None = None) -> list[str]:
    """``--between LOW HIGH``: every release on the index from LOW to HIGH (both release specs), as release specs.

    Only releases with a wheel for the rows' Python and not yanked are listed (kit.images.index); pre-releases only
    with ``pre``. Nothing is added or built here: the bisection adds the rows it visits."""
    from kit.images.add import is_release_spec, parse_release_spec
    from kit.images.arms import run_device
    from kit.images.index import releases_between as on_index
    from kit.images.matrix import load_matrix

    for text in (low, high):
        if not is_release_spec(text.strip()):
            raise KitError(f"{text!r} is not a release", where="--between",
                           fix="give two releases of one framework, e.g. --between tensorflow==2.17.1 tensorflow==2.21.0")
    try:
        lo, hi = (parse_release_spec(t.strip()) for t in (low, high))
    except KitError as err:
        raise type(err)(err.cause, where="--between", fix=err.fix) from None
    if lo.framework != hi.framework:
        raise KitError(f"{low} and {high} are releases of two frameworks", where="--between",
                       fix=f"give two releases of {lo.framework}")
    if lo.framework not in spec.experiment.frameworks:
        raise KitError(f"the experiment runs {', '.join(spec.experiment.frameworks)}, not {lo.framework}",
                       where="--between", fix="give releases of a framework the experiment runs")
    if _version(lo.version, "--between") >= _version(hi.version, "--between"):
        raise KitError(f"{low} is not older than {high}", where="--between",
                       fix="the known good (older) release first, the known bad (newer) second")
    device = device or run_device(spec)
    python = load_matrix().defaults.python
    versions = on_index(lo.framework, device, lo.version, hi.version, python=python, index_url=lo.index_url, pre=pre)
    listed = {Version(v) for v in versions}
    missing = [t for t, v in ((low, lo.version), (high, hi.version)) if Version(v) not in listed]
    if missing:
        raise KitError(f"{missing[0]} is not among the releases on the index with a wheel for Python {python} "
                       f"({device}){' (pre-releases are left out without --pre)' if not pre else ''}",
                       where="--between", fix="pick a release `kit images add` accepts (a yanked release or one "
                                              "without a wheel cannot be a row), or add --pre for a pre-release")
    package = lo.text.partition("==")[0].strip()
    return [f"{package}=={v}" for v in versions]


def run_bisect(spec: Any, rows: list[str], opts: BisectOptions, run_opts: Any, events: Any = None,
               on_compare: Callable[[str, str], None] | None = None,
               progress: ImageProgress | None = None) -> BisectResult:
    """Bisect for real: each comparison is a `kit run --images BASELINE,CANDIDATE` plus `kit compare --arms`.

    A release spec among ``rows`` becomes its row (added to the user matrix, built for Docker/Podman) only when the
    bisection compares it: the result lists the rows added and built."""
    from kit.analysis.metrics import METRICS
    from kit.backends.container import image_arms
    from kit.compare import CompareOptions, check_options, compare_arms
    from kit.images.arms import ResolvedRelease, is_release, resolve_release, run_device
    from kit.run import start_run

    if opts.metric not in METRICS:
        raise KitError(f"unknown metric {opts.metric!r}", where="--metric", fix=f"use one of: {', '.join(sorted(METRICS))}")
    device = run_device(spec) if any(is_release(r) for r in rows if r.strip()) else None
    releases = check_releases(rows, spec.experiment.frameworks, device=device)
    copts = CompareOptions(threshold=opts.threshold, alpha=opts.alpha, metrics=(opts.metric,), phases=(opts.phase,))
    check_options(copts)  # before any run: a threshold of -1 or nan decides nothing
    resolved: dict[str, ResolvedRelease] = {}

    def row_of(item: str) -> str:
        if device is None or not is_release(item):
            return item
        if item not in resolved:
            resolved[item] = resolve_release(item, device, build=run_opts.backend == "docker", progress=progress)
        return resolved[item].row

    def compare_pair(baseline: str, candidate: str) -> PairVerdict:
        if on_compare:
            on_compare(baseline, candidate)
        arms, images = image_arms([row_of(baseline), row_of(candidate)], spec.experiment.frameworks)
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
                               alpha=opts.alpha, experiment=spec.experiment.id, profile=spec.profile,
                               added=tuple(r.row for r in resolved.values() if r.added),
                               built=tuple(r.row for r in resolved.values() if r.built))


def _named(item: str) -> str:
    """``tensorflow==2.20.0`` as "tensorflow 2.20.0"; a row name as it is."""
    package, sep, version = item.partition("==")
    return f"{package.strip()} {version.strip()}" if sep else item


def _stats(c: PairVerdict, mde: bool = True) -> str:
    seen = "" if c.mde is None or not mde else f", detectable change {c.mde:.1%}"
    return ("no ratio" if c.ratio is None else f"{c.ratio:.3f}x" + (
        "" if c.ratio_low is None else f" [95 % CI {c.ratio_low:.3f}, {c.ratio_high:.3f}]")) + seen


def message(res: BisectResult) -> str:
    """The bisection's answer in a few lines, as TorchBench's bot posts it: the release, the numbers, the runs."""
    what = f"{res.metric} ({res.phase})" if res.metric else "the metric"
    good, last = _named(res.baseline), _named(res.releases[-1]) if res.releases else "?"
    end = res.comparisons[0] if res.comparisons else None
    final = res.comparisons[-1] if res.comparisons else None
    if res.status == "located" and res.first_changed is not None:
        first = next(c for c in res.comparisons if c.candidate == res.first_changed)
        head = (f"first release with the {res.direction}: {_named(res.first_changed)} -- {what} {_stats(first, mde=False)} "
                f"against {good} (last release like it: {_named(res.last_unchanged or res.baseline)})")
    elif res.status == "no change" and end is not None:
        thr = "the threshold" if res.threshold is None else f"the {res.threshold:.0%} threshold"
        head = (f"no change: {what} of {last} against {good} is {_stats(end)}, within {thr}; no release between "
                "them changed it net by more than that (a change and its reversal in between would cancel out)")
    elif res.status == "non-monotonic" and end is not None and final is not None:
        lo, hi = res.between or (res.baseline, res.releases[-1])
        head = (f"non-monotonic: {what} of {_named(final.candidate)} against {good} is a {final.verdict} "
                f"({_stats(final)}) while {last} is a {end.verdict} ({_stats(end)}): it moved both ways between "
                f"{_named(lo)} and {_named(hi)}; to decide, compare neighbouring releases with kit run --images")
    elif final is not None:
        where = "" if res.between is None else (f"the {end.verdict if end else 'change'} lies after "
                                                f"{_named(res.between[0])} and at or before {_named(res.between[1])}; ")
        head = (f"inconclusive: {where}{what} of {_named(final.candidate)} against {good} is {_stats(final)}, "
                f"neither a change nor within the threshold; to decide: {_need(final)}")
    else:
        head = f"{res.status}: {res.answer}"
    runs = ", ".join(c.run for c in res.comparisons if c.run) or "none recorded"
    visited = res.visited or tuple(dict.fromkeys([res.baseline, *(c.candidate for c in res.comparisons)]))
    tail = f"; runs: {runs}; releases visited: {', '.join(_named(v) for v in visited)} " \
           f"({len(visited)} of {len(res.releases)})"
    if res.added or res.built:
        tail += (f"; rows added: {', '.join(res.added) or 'none'}; images built: {', '.join(res.built) or 'none'}")
    return head + tail


def markdown(res: BisectResult) -> str:
    """The message and the comparisons as a compact Markdown table (verdict first), for an issue or a pull request."""
    def cell(text: str) -> str:
        return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    what = f"{res.metric} ({res.phase})" if res.metric else "metric"
    lines = [f"**kit bisect{' ' + cell(res.experiment) if res.experiment else ''}**: {cell(res.message())}", "",
             f"| verdict | candidate | baseline | {cell(what)} B/A [95 % CI] | detectable | run |",
             "|---|---|---|---|---|---|"]
    for c in res.comparisons:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}" + (
            "" if c.ratio_low is None else f" [{c.ratio_low:.3f}, {c.ratio_high:.3f}]")
        lines.append(f"| {cell(c.verdict)} | {cell(_named(c.candidate))} | {cell(_named(c.baseline))} | {ratio} | "
                     f"{'unknown' if c.mde is None else f'{c.mde:.1%}'} | {cell(c.run) or '-'} |")
    return "\n".join(lines) + "\n"


def save(result: BisectResult, path: Path) -> None:
    import json

    from kit.store import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(result.to_json(), indent=1, default=str) + "\n").encode())
