"""What `kit history` extracted from each run, kept between calls (users re-run it every night over 1,000 runs).

Without it every call parses each run's analysis.json and re-hashes its raw
files (the freshness check) — milliseconds per run, seconds per thousand. An
entry is reused only while the run's files are exactly as they were: a
fingerprint of (name, size, mtime_ns, ctime_ns, inode, mode) of manifest.json,
analysis.json and every entry of trials/, samples/ and attempts/. Any write,
rename, copy or metadata change moves ctime (which no user can set), so a
changed file is never served from the cache; like git's index, runs touched in
the last seconds are not cached (a second write within one timestamp tick).

The cache lives in the user's cache directory, never in a runs directory:
whoever hands over runs cannot plant entries there. That alone is not enough
(issue 37): the directory must be a real directory of this user that group and
others cannot write (else the cache is not used), a cache file is opened
without following a link and without blocking (a FIFO or device is refused,
never waited on), must be this user's regular file, is size-capped, and the
whole document carries an HMAC under the user's seal key
(:func:`kit.private_files.mac`, domain ``history-cache``) bound to the file's
name (which encodes the runs directory and the query). A document without a
valid MAC (edited values, an old unsigned cache, one copied from another
query's name, one signed with another key) is ignored and rebuilt from the
runs, never believed; without a usable key no cache is read or written. It is
written through a temporary file created O_EXCL|O_NOFOLLOW in the checked
directory and a rename.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.private_files import PrivateDir, UnsafeFileError, open_blob, open_dir, sealed_blob

# kit.store's names of a run's files (tests/test_history_speed_read.py holds them equal): importing kit.store (its
# collectors, the spec model) was a third of a cached `kit history`, which reads no run.
MANIFEST, ANALYSIS, TRIALS, SAMPLES, ATTEMPTS = "manifest.json", "analysis.json", "trials", "samples", "attempts"
NODES, STUDY = "nodes", "study"  # (kit.store.NODES; the study copy, which kit.freshness.scan_inputs also covers)
STUDY_DEPTH = 16  # as deep as kit.freshness looks into study/

ENV = "KIT_HISTORY_CACHE"
VERSION = 3  # 2: the document is MAC'd (kit.private_files.sealed_blob); 3: an entry carries its arm's own version
#              (kit.history.arm_version); older caches are rebuilt
ALL_VERSION = 1  # the publish cache (CachedRunAll): every series of a run in one entry
MAX_BYTES = 256 << 20
RACY_S = 2.0  # entries of runs changed this recently are not kept


@dataclass(frozen=True, slots=True)
class CachedRun:
    """What history keeps of one run: its experiment and, unless it is skipped (unfinished, or without the
    metric), its label, arm, the arm's own version, start time and measured values; ``fp`` is the fingerprint of
    its files when read, ``newest`` their newest ctime (never written: runs changed in the last RACY_S are not
    kept)."""

    experiment: str
    fp: str = ""
    skip: bool = False
    label: str = ""
    arm: str = ""
    version: str | None = None
    started: float = 0.0
    values: tuple[float, ...] = ()
    newest: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The entry as the cache file holds it (without ``newest``)."""
        if self.skip:
            return {"experiment": self.experiment, "skip": True, "fp": self.fp}
        return {"experiment": self.experiment, "label": self.label, "arm": self.arm, "version": self.version,
                "started": self.started, "values": list(self.values), "fp": self.fp}

    @classmethod
    def from_json(cls, e: Any) -> CachedRun | None:
        """A cache entry, checked; None when it is malformed (the run is read again)."""
        if not _valid_entry(e):
            return None
        if e.get("skip") is True:
            return cls(experiment=e["experiment"], fp=e["fp"], skip=True)
        return cls(experiment=e["experiment"], fp=e["fp"], label=e["label"], arm=e["arm"], version=e.get("version"),
                   started=float(e["started"]), values=tuple(float(v) for v in e["values"]))


@dataclass(frozen=True, slots=True)
class RunSeries:
    """One arm's measured values of one metric in one phase of a run, with that arm's label facts."""

    metric: str
    phase: str
    arm: str
    framework: str
    version: str | None  # "ARM VERSION" as the arm's trials reported it (kit.history.arm_version)
    values: tuple[float, ...]

    def to_json(self) -> dict[str, object]:
        return {"metric": self.metric, "phase": self.phase, "arm": self.arm, "framework": self.framework,
                "version": self.version, "values": list(self.values)}


@dataclass(frozen=True, slots=True)
class CachedRunAll:
    """What ``kit history --publish`` keeps of one run: every (metric, phase, arm) it measured, read in one pass
    (``label``: the manifest's own, "" when none; ``skip``: unfinished or nothing measured)."""

    experiment: str
    fp: str = ""
    skip: bool = False
    label: str = ""
    started: float = 0.0
    series: tuple[RunSeries, ...] = ()
    newest: float = 0.0

    def to_json(self) -> dict[str, object]:
        if self.skip:
            return {"experiment": self.experiment, "skip": True, "fp": self.fp}
        return {"experiment": self.experiment, "fp": self.fp, "label": self.label, "started": self.started,
                "series": [x.to_json() for x in self.series]}

    @classmethod
    def from_json(cls, e: Any) -> CachedRunAll | None:
        """A cache entry, checked; None when it is malformed (the run is read again)."""
        if not isinstance(e, dict) or not isinstance(e.get("fp"), str) or not isinstance(e.get("experiment"), str):
            return None
        if e.get("skip") is True:
            return cls(experiment=e["experiment"], fp=e["fp"], skip=True)
        started, label, series = e.get("started"), e.get("label"), e.get("series")
        if not (isinstance(started, int | float) and math.isfinite(started) and isinstance(label, str)
                and isinstance(series, list)):
            return None
        out = []
        for x in series:
            if not (isinstance(x, dict) and all(isinstance(x.get(k), str) for k in ("metric", "phase", "arm",
                                                                                      "framework"))
                    and (x.get("version") is None or isinstance(x.get("version"), str))
                    and isinstance(x.get("values"), list)
                    and all(isinstance(v, int | float) and math.isfinite(v) for v in x["values"])):
                return None
            out.append(RunSeries(x["metric"], x["phase"], x["arm"], x["framework"], x.get("version"),
                                 tuple(float(v) for v in x["values"])))
        return cls(experiment=e["experiment"], fp=e["fp"], label=label, started=float(started), series=tuple(out))


def cache_path(runs_dir: Path, key: str) -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")  # as the XDG spec says: only an absolute path counts
    base = Path(os.environ.get(ENV) or (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "kit" / "history")
    name = hashlib.sha256(f"{Path(runs_dir).resolve()}\0{key}".encode()).hexdigest()[:32]
    return base / f"{name}.json"


def fingerprint(run_dir: Path) -> tuple[str, float]:
    """(digest of the lstat of every file that decides the run's values, newest ctime among them).

    Every input the analysis's seal covers (kit.freshness.scan_inputs: trials/, samples/, attempts/, nodes/, the
    study copy in study/, manifest.json) and analysis.json itself: an entry is served only while a fresh read
    would find them as they were. The lines are gathered and hashed once, the newest time kept in integer
    nanoseconds: a cached `kit history` over 1,000 runs fingerprints 45,000 files, and the per-file Python work
    was most of its time."""
    lines: list[str] = []
    put = lines.append
    newest_ns = 0

    for name in (MANIFEST, ANALYSIS):
        try:
            st = os.lstat(run_dir / name)
        except OSError:
            put(f"{name}:absent\n")
            continue
        put(f"{name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_mode}\n")
        newest_ns = max(newest_ns, st.st_ctime_ns, st.st_mtime_ns)
    for sub in (TRIALS, SAMPLES, ATTEMPTS, NODES, STUDY):
        newest_ns = max(newest_ns, _fingerprint_tree(put, run_dir, sub, recursive=sub == STUDY))
    return hashlib.sha256("".join(lines).encode()).hexdigest(), newest_ns / 1e9


def _fingerprint_tree(put: Callable[[str], None], run_dir: Path, sub: str, recursive: bool, depth: int = 0) -> int:
    """The lines of ``sub`` and of its entries (of its subdirectories too when ``recursive``, as deep as the seal
    looks); the newest of their times. A link is recorded, never followed."""
    newest_ns = 0
    try:
        st = os.lstat(run_dir / sub)
        put(f"{sub}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_mode}\n")
        newest_ns = max(st.st_ctime_ns, st.st_mtime_ns)
        if not stat.S_ISDIR(st.st_mode):
            return newest_ns
        with os.scandir(run_dir / sub) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            st = e.stat(follow_symlinks=False)
            if recursive and stat.S_ISDIR(st.st_mode) and depth < STUDY_DEPTH:
                newest_ns = max(newest_ns, _fingerprint_tree(put, run_dir, f"{sub}/{e.name}", True, depth + 1))
                continue
            put(f"{sub}/{e.name}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_mode}\n")
            newest_ns = max(newest_ns, st.st_ctime_ns, st.st_mtime_ns)
    except OSError:  # absent, unreadable or changing: a fingerprint no cache entry has
        put(f"{sub}:absent-or-unreadable\n")
    return newest_ns


# Runs fingerprinted in worker processes from this many on: ~50 lstat calls a run, so 10,000 runs are half a
# million system calls (3-4 s on one core, a third of `kit history`'s budget at that size). At 1,000 runs two
# workers took 0.16 s where one process took 0.23-0.26 s (2 cores, the other engineers' load ~1.5; at a load
# of 5 neither wins): a cached call over 1,000 runs is ~0.7 s, so that is a tenth of it.
PARALLEL_FINGERPRINTS = 800


def fingerprints(run_dirs: Sequence[Path]) -> list[tuple[str, float]]:
    """:func:`fingerprint` of each run, in order; over a process pool (one worker per CPU, at most 8) for many."""
    workers = min(8, os.cpu_count() or 1)
    if len(run_dirs) < PARALLEL_FINGERPRINTS or workers < 2:
        return [fingerprint(p) for p in run_dirs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fingerprint, run_dirs, chunksize=max(64, len(run_dirs) // (4 * workers))))


def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("fp"), str):
        return False
    if e.get("skip") is True:
        return isinstance(e.get("experiment"), str)
    vals = e.get("values")
    return (isinstance(e.get("experiment"), str) and isinstance(e.get("label"), str) and isinstance(e.get("arm"), str)
            and (e.get("version") is None or isinstance(e.get("version"), str))
            and isinstance(e.get("started"), int | float) and math.isfinite(e["started"]) and isinstance(vals, list)
            and all(isinstance(v, int | float) and math.isfinite(v) for v in vals))


def _key(create: bool) -> bytes | None:
    from kit.trust import seal_key

    return seal_key(create=create)


def _open_dir(path: Path, create: bool) -> PrivateDir | None:
    try:
        return open_dir(path.parent, create=create, what="the history cache directory")
    except (UnsafeFileError, OSError):
        return None


def _load_doc(path: Path, version: int) -> dict[str, Any] | None:
    """A cache document of ``version``; None when the cache is absent, too large, not this user's private regular
    file, not MAC'd under this user's key for this name, or not a JSON object of that version."""
    key = _key(create=False)
    d = _open_dir(path, create=False) if key is not None else None
    if key is None or d is None:
        return None
    with d:
        try:
            blob = d.read(path.name, MAX_BYTES, what="history cache")
        except UnsafeFileError:
            return None
    raw = open_blob(key, "history-cache", path.name, blob) if blob is not None else None
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) and doc.get("version") == version else None


def _load_runs(path: Path, version: int) -> dict[str, Any]:
    """The raw ``runs`` table of a cache document; {} when there is none (:func:`_load_doc`) or it is malformed."""
    doc = _load_doc(path, version)
    if doc is None or not isinstance(doc.get("runs"), dict):
        return {}
    return {k: v for k, v in doc["runs"].items() if isinstance(k, str)}


STEPS_VERSION = 1  # the steps cache: the validated steps of one series, for the runs' values as they were


def load_steps(path: Path, key: str) -> list[Any] | None:
    """The steps stored for ``key`` (a digest of the series' runs, values, options and the kit build: see
    kit.history), as JSON rows for the caller to check; None when absent, stale or not believed."""
    doc = _load_doc(path, STEPS_VERSION)
    if doc is None or doc.get("key") != key or not isinstance(doc.get("steps"), list):
        return None
    return list(doc["steps"])


def save_steps(path: Path, key: str, steps: list[Any]) -> None:
    """Best effort, as :func:`save`: the validated steps of the series ``key`` (a cached `kit history` call then
    needs neither the tests nor scipy)."""
    _save_doc(path, {"version": STEPS_VERSION, "key": key, "steps": steps})


def load(path: Path) -> dict[str, CachedRun]:
    """Entries by run directory name (see :func:`_load_runs` for when there are none)."""
    return {k: e for k, v in _load_runs(path, VERSION).items() if (e := CachedRun.from_json(v)) is not None}


def load_all(path: Path) -> dict[str, CachedRunAll]:
    """The publish cache's entries by run directory name (see :func:`_load_runs`)."""
    return {k: e for k, v in _load_runs(path, ALL_VERSION).items() if (e := CachedRunAll.from_json(v)) is not None}


def _save_runs(path: Path, version: int, keep: dict[str, Any]) -> None:
    _save_doc(path, {"version": version, "runs": keep})


def _save_doc(path: Path, content: dict[str, Any]) -> None:
    key = _key(create=True)
    d = _open_dir(path, create=True) if key is not None else None
    if key is None or d is None:
        return
    doc = json.dumps(content, separators=(",", ":")).encode()
    with d:
        try:
            d.write(path.name, sealed_blob(key, "history-cache", path.name, doc))
        except OSError:
            return


def save(path: Path, entries: dict[str, CachedRun]) -> None:
    """Best effort: a cache that cannot be written (no key, a directory that is not this user's private one, a
    read-only home, a full disk) costs time, never the answer."""
    now = time.time()
    _save_runs(path, VERSION, {k: e.to_json() for k, e in entries.items() if now - e.newest > RACY_S})


def save_all(path: Path, entries: dict[str, CachedRunAll]) -> None:
    """:func:`save` for the publish cache."""
    now = time.time()
    _save_runs(path, ALL_VERSION, {k: e.to_json() for k, e in entries.items() if now - e.newest > RACY_S})
