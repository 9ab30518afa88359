"""`kit history RUNS_DIR --publish DIR`: a static site of every series the runs hold, regenerated from the runs.

Every study × metric × phase × arm the runs measured becomes one series (kit.history's step detection) with its
own page, listed on index.html with a sparkline and its latest verdict; data.json beside them holds every
series for other tools. The site works from file:// (no server, no network, relative links only).

Deterministic: no generation time, no random ids, everything sorted, so the same runs give the same bytes.
Incremental: each run is read once for all its series (one pass over its analysis) and kept in the user's
publish cache (kit.history_cache, fingerprinted like `kit history`'s), so a republish re-reads only new or
changed runs; a page whose bytes are unchanged is not rewritten. The files the site wrote are listed in
``.kit-history-site.json`` in DIR: a series whose runs are gone loses its page, and nothing else in DIR (a file
the user keeps there, a link planted there) is ever deleted or written through.

The metric/phase/arm/experiment options of `kit history` do not restrict a publish: the site is every series.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kit import history_cache
from kit.analysis.metrics import METRICS
from kit.errors import AnalysisError
from kit.history import MIN_RUNS_BETWEEN, PARALLEL_MIN_RUNS, HistoryPoint, HistorySeries, arm_version, detect_steps
from kit.history_cache import CachedRunAll, RunSeries
from kit.store import RunDir, atomic_write_bytes

SITE_MANIFEST = ".kit-history-site.json"
PAGE = re.compile(r"series-[a-z0-9-]{1,80}\.html")
OWN = ("index.html", "data.json")


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What a publish did: series on the site, pages (and data.json) written or left as they were, runs read
    afresh or served from the cache, and the index's path."""

    series: int
    pages_written: int
    pages_unchanged: int
    pages_removed: int
    runs_read: int
    runs_reused: int
    index: Path


def _extract_all(path: Path) -> CachedRunAll:
    """Every (metric, phase, arm) series of one run from its (fresh) analysis, in one pass over its values."""
    from kit.analysis.analyze import current_analysis

    rd = RunDir.open(path)
    man = rd.manifest()
    if not rd.finished_ids():
        return CachedRunAll(experiment=man.experiment, skip=True)
    analysis, _ = current_analysis(path, rd, need_study=False)
    values: dict[tuple[str, str, str], list[float]] = {}
    frameworks: dict[str, str] = {}
    for v in analysis.counted_values():
        if v.value is not None and v.metric in METRICS and math.isfinite(v.value):
            values.setdefault((v.metric, v.phase, v.arm), []).append(float(v.value))
            frameworks.setdefault(v.arm, v.framework or v.arm.split("@")[0])
    if not values:
        return CachedRunAll(experiment=man.experiment, skip=True)
    started = man.started if man.started is not None and math.isfinite(man.started) else 0.0
    series = tuple(RunSeries(m, ph, arm, frameworks[arm], arm_version(analysis, arm), tuple(vals))
                   for (m, ph, arm), vals in sorted(values.items()))
    return CachedRunAll(experiment=man.experiment, label=man.label or "", started=started, series=series)


def _read_run(path: Path, use_cache: bool) -> CachedRunAll:
    """One run for the cache, fingerprinted before it is read and again after (a recomputed analysis is
    rewritten): a run that changed meanwhile is read again next time."""
    entry = _extract_all(path)
    fp, newest = history_cache.fingerprint(path) if use_cache else ("", 0.0)
    return dataclasses.replace(entry, fp=fp, newest=newest)


def _read_all(todo: list[Path], use_cache: bool) -> Iterator[CachedRunAll]:
    workers = min(8, os.cpu_count() or 1, len(todo))
    if len(todo) < PARALLEL_MIN_RUNS or workers < 2:
        for p in todo:
            yield _read_run(p, use_cache)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield from pool.map(_read_run, todo, [use_cache] * len(todo),
                            chunksize=max(1, min(32, len(todo) // (4 * workers))))


def read_runs(runs_dir: Path, *, use_cache: bool = True, on_progress: Callable[[int, int], None] | None = None
              ) -> tuple[list[tuple[Path, CachedRunAll]], int]:
    """(every run in name order with what it measured, how many were read afresh)."""
    found = sorted(p.parent for p in Path(runs_dir).glob("*/manifest.json"))
    if not found:
        raise AnalysisError("no run directories found", where=str(runs_dir),
                            fix="give the directory that holds runs/<time>-<experiment>/")
    cpath = history_cache.cache_path(runs_dir, "publish|all")
    cached = history_cache.load_all(cpath) if use_cache else {}
    entries: dict[str, CachedRunAll] = {}
    todo = []
    in_cache = [path for path in found if path.name in cached]
    seen = dict(zip((p.name for p in in_cache), history_cache.fingerprints(in_cache), strict=True))
    for path in found:
        entry = cached.get(path.name)
        if entry is not None and entry.fp == seen[path.name][0]:
            entries[path.name] = entry
        else:
            todo.append(path)
    done = len(entries)
    if on_progress:
        on_progress(done, len(found))
    for path, entry in zip(todo, _read_all(todo, use_cache), strict=True):
        entries[path.name] = entry
        done += 1
        if on_progress:
            on_progress(done, len(found))
    if use_cache and entries != cached:
        history_cache.save_all(cpath, entries)
    return [(p, entries[p.name]) for p in found], len(todo)


@dataclass(frozen=True, slots=True)
class SiteSeries:
    """One series of the site: its study, framework, page file name and the analysed history."""

    experiment: str
    framework: str
    page: str
    result: HistorySeries
    links: tuple[tuple[str, str], ...]
    verdict: str


def page_name(experiment: str, metric: str, phase: str, arm: str) -> str:
    """A stable file name of the series: a readable slug (letters, digits, '-') and a digest of the four names,
    so no run-controlled text ever chooses a path and two series never share a page."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{experiment}-{metric}-{phase}-{arm}".lower()).strip("-")[:60] or "series"
    digest = hashlib.sha256("\0".join((experiment, metric, phase, arm)).encode()).hexdigest()[:12]
    return f"series-{slug}-{digest}.html"


def _link(out_dir: Path, run: Path) -> tuple[str, str]:
    """The relative link from the site to the run's report, else to its run directory (URL-quoted)."""
    from urllib.parse import quote

    rel = os.path.relpath(run, out_dir)
    report = run / "report" / "index.html"
    try:
        has_report = stat.S_ISREG(os.lstat(report).st_mode)
    except OSError:
        has_report = False
    target = f"{rel}/report/index.html" if has_report else f"{rel}/"
    return quote(target.replace(os.sep, "/"), safe="/"), ("report" if has_report else "run directory")


def build_series(runs: list[tuple[Path, CachedRunAll]], out_dir: Path, threshold: float, alpha: float
                 ) -> list[SiteSeries]:
    """Every series the runs hold, sorted by (experiment, metric, phase, arm), with its steps."""
    from kit.history import history_method

    groups: dict[tuple[str, str, str, str], list[tuple[Path, CachedRunAll, RunSeries]]] = {}
    for path, entry in runs:
        if entry.skip:
            continue
        for x in entry.series:
            groups.setdefault((entry.experiment, x.metric, x.phase, x.arm), []).append((path, entry, x))
    out = []
    linked: dict[Path, tuple[str, str]] = {}  # a run's link is the same in every series it is in (a stat each)
    for (exp, metric, phase, arm), members in sorted(groups.items()):
        members.sort(key=lambda m: (m[1].started, m[0].name))
        points = tuple(HistoryPoint.of(str(p), e.started, e.label or x.version or p.name, arm, x.version, x.values)
                       for p, e, x in members)
        steps = tuple(detect_steps(points, threshold=threshold, alpha=alpha,
                                   lower_is_better=METRICS[metric].lower_is_better))
        result = HistorySeries(runs_dir="", metric=metric, unit=METRICS[metric].unit, phase=phase, arm=arm,
                               threshold=threshold, alpha=alpha, runs=points, steps=steps, caveats=(),
                               method=history_method())
        verdict = steps[-1].verdict if steps else ("too few runs" if len(points) < MIN_RUNS_BETWEEN else "no change")
        out.append(SiteSeries(exp, members[0][2].framework, page_name(exp, metric, phase, arm), result,
                              tuple(linked.get(p) or linked.setdefault(p, _link(out_dir, p)) for p, _, _ in members),
                              verdict))
    return out


def _data_json(series: list[SiteSeries], n_runs: int) -> bytes:
    """data.json: every series with its points and steps (data only: sorted keys, no time but the runs').

    Compact, one line: json's C encoder only serves documents without indentation, and the indented one took
    5 s of a republish of 10,000 runs (10 series: 100,000 points)."""
    doc = {"kind": "kit-history-site", "version": 1, "runs": n_runs, "series": [
        {"experiment": s.experiment, "framework": s.framework, "metric": s.result.metric, "unit": s.result.unit,
         "phase": s.result.phase, "arm": s.result.arm, "page": s.page, "latest_verdict": s.verdict,
         "threshold": s.result.threshold, "alpha": s.result.alpha, "interval": "q1-q3 of the run's trials",
         "points": [{**{k: v for k, v in r.to_json().items() if k != "run_dir"}, "run": Path(r.run_dir).name,
                     "link": link} for r, (link, _) in zip(s.result.runs, s.links, strict=True)],
         "steps": [st.to_json() for st in s.result.steps]} for s in series]}
    return (json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
            + "\n").encode()


def _same_bytes(path: Path, data: bytes) -> bool:
    """Whether ``path`` is a regular file (never a link: not followed) holding exactly ``data``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode) or os.fstat(fh.fileno()).st_size != len(data):
            return False
        return fh.read(len(data) + 1) == data


def _previous_pages(out_dir: Path) -> set[str]:
    """Page names the site wrote last time (its manifest; names it could not have written are ignored)."""
    path = out_dir / SITE_MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return set()
            doc = json.loads(fh.read(16 << 20))
    except (OSError, ValueError, RecursionError):
        return set()
    pages = doc.get("pages") if isinstance(doc, dict) else None
    return {p for p in pages if isinstance(p, str) and PAGE.fullmatch(p)} if isinstance(pages, list) else set()


def publish(runs_dir: Path, out_dir: Path, *, threshold: float = 0.05, alpha: float = 0.05, use_cache: bool = True,
            on_progress: Callable[[int, int], None] | None = None) -> PublishResult:
    """Write (or bring up to date) the history site of the runs under ``runs_dir`` in ``out_dir``."""
    from kit.compare import check_alpha, check_threshold
    from kit.history_pages import IndexRow, render_index, render_series, sparkline

    check_threshold(threshold)
    check_alpha(alpha)
    out_dir = Path(out_dir)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise AnalysisError("the site directory is a link or not a directory", where=str(out_dir),
                            fix="give a directory (new or one an earlier --publish wrote)")
    runs, n_read = read_runs(runs_dir, use_cache=use_cache, on_progress=on_progress)
    series = build_series(runs, out_dir.absolute(), threshold, alpha)
    files: dict[str, bytes] = {}
    rows = []
    for s in series:
        files[s.page] = render_series(s.result, experiment=s.experiment, verdict=s.verdict, framework=s.framework,
                                      links=s.links, index_href="index.html").encode()
        last = s.result.steps[-1] if s.result.steps else None
        latest = "" if last is None else f"{last.from_label} → {last.to_label}" + (
            "" if last.ratio is None else f", ×{last.ratio:.3f}")
        rows.append(IndexRow(s.experiment, s.result.metric, s.result.phase, s.result.arm, s.framework, s.result.unit,
                             len(s.result.runs), s.page, sparkline([r.median for r in s.result.runs]), s.verdict,
                             bool(s.result.steps), latest))
    files["index.html"] = render_index(rows, n_runs=sum(1 for _, e in runs if not e.skip),
                                       frameworks=sorted({s.framework for s in series})).encode()
    files["data.json"] = _data_json(series, sum(1 for _, e in runs if not e.skip))
    out_dir.mkdir(parents=True, exist_ok=True)
    old = _previous_pages(out_dir)
    written = unchanged = removed = 0
    for name in sorted(files):
        if _same_bytes(out_dir / name, files[name]):
            unchanged += 1
        else:
            atomic_write_bytes(out_dir / name, files[name])  # a link at the name is replaced, never followed
            written += 1
    pages = sorted(n for n in files if PAGE.fullmatch(n))
    manifest = (json.dumps({"kind": "kit-history-site", "pages": pages}, indent=1) + "\n").encode()
    if not _same_bytes(out_dir / SITE_MANIFEST, manifest):
        atomic_write_bytes(out_dir / SITE_MANIFEST, manifest)
    for name in sorted(old - set(pages)):
        try:
            if stat.S_ISREG(os.lstat(out_dir / name).st_mode):  # never a link or anything the site did not write
                (out_dir / name).unlink()
                removed += 1
        except OSError:
            continue
    return PublishResult(series=len(series), pages_written=written, pages_unchanged=unchanged,
                         pages_removed=removed, runs_read=n_read, runs_reused=len(runs) - n_read,
                         index=out_dir / "index.html")
