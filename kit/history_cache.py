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
whoever hands over runs cannot plant entries. It is read with a size cap and
validated; anything unexpected is ignored (it is only a cache) and rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.store import ANALYSIS, ATTEMPTS, MANIFEST, TRIALS, atomic_write_bytes

ENV = "KIT_HISTORY_CACHE"
VERSION = 1
MAX_BYTES = 256 << 20
RACY_S = 2.0  # entries of runs changed this recently are not kept


def cache_path(runs_dir: Path, key: str) -> Path:
    base = Path(os.environ.get(ENV) or Path.home() / ".cache" / "kit" / "history")
    name = hashlib.sha256(f"{Path(runs_dir).resolve()}\0{key}".encode()).hexdigest()[:32]
    return base / f"{name}.json"


def fingerprint(run_dir: Path) -> tuple[str, float]:
    """(digest of the lstat of every file that decides the run's values, newest ctime among them)."""
    h = hashlib.sha256()
    newest = 0.0

    def add(rel: str, st: os.stat_result) -> None:
        nonlocal newest
        h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}:{st.st_mode}\n".encode())
        newest = max(newest, st.st_ctime_ns / 1e9, st.st_mtime_ns / 1e9)

    for name in (MANIFEST, ANALYSIS):
        try:
            add(name, os.lstat(run_dir / name))
        except OSError:
            h.update(f"{name}:absent\n".encode())
    for sub in (TRIALS, "samples", ATTEMPTS):
        try:
            st = os.lstat(run_dir / sub)
            add(sub, st)
            if not stat.S_ISDIR(st.st_mode):  # a link planted in the run is recorded, never followed
                continue
            with os.scandir(run_dir / sub) as it:
                entries = sorted(it, key=lambda e: e.name)
            for e in entries:
                add(f"{sub}/{e.name}", e.stat(follow_symlinks=False))
        except OSError:  # absent, unreadable or changing: a fingerprint no cache entry has
            h.update(f"{sub}:absent-or-unreadable\n".encode())
    return h.hexdigest(), newest


def _valid_entry(e: Any) -> bool:
    if not isinstance(e, dict) or not isinstance(e.get("fp"), str):
        return False
    if e.get("skip") is True:
        return isinstance(e.get("experiment"), str)
    vals = e.get("values")
    return (isinstance(e.get("experiment"), str) and isinstance(e.get("label"), str) and isinstance(e.get("arm"), str)
            and isinstance(e.get("started"), int | float) and math.isfinite(e["started"]) and isinstance(vals, list)
            and all(isinstance(v, int | float) and math.isfinite(v) for v in vals))


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Entries by run directory name; {} when the cache is absent, too large, not ours or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("version") != VERSION or not isinstance(doc.get("runs"), dict):
        return {}
    return {k: v for k, v in doc["runs"].items() if isinstance(k, str) and _valid_entry(v)}


def save(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Best effort: a cache that cannot be written costs time, never the answer."""
    now = time.time()
    keep = {k: {f: v for f, v in e.items() if f != "newest"} for k, e in entries.items()
            if now - float(e.get("newest", 0.0)) > RACY_S}
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write_bytes(path, json.dumps({"version": VERSION, "runs": keep}, separators=(",", ":")).encode())
    except (OSError, KitError):  # a read-only home or a full disk costs time, never the answer
        return
