"""Is a run's analysis.json still the analysis of what is on disk?

``kit compare``, ``kit history`` and ``kit pack`` read analysis.json instead
of recomputing it. An analysis made while the run was incomplete (or before a
trial file was added, removed or edited) would silently answer for data that
is no longer there. The analysis records ``raw_digest`` (trial files and
telemetry samples, name and content); a reader recomputes the analysis when
the digest on disk differs or is missing (analyses made before it existed).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from kit.store import ANALYSIS, ATTEMPTS, TRIALS, RunDir

DIGEST_KEY = "raw_digest"


def raw_digest(run_dir: Path) -> str:
    """sha256 over the names and contents of trials/*.json, samples/* and attempts/* (links are not followed).

    Per file ``sub/name:size`` and the content, in name order; a link or anything but a regular file
    counts as ``sub/name:not-a-regular-file``. Read through descriptors (O_NOFOLLOW): `kit history`
    checks a thousand runs per call.
    """
    root = os.fspath(run_dir)
    h = hashlib.sha256()
    for sub in (TRIALS, "samples", ATTEMPTS):
        d = os.path.join(root, sub)
        try:
            if not stat.S_ISDIR(os.lstat(d).st_mode):
                continue
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            if not e.is_file(follow_symlinks=False):
                h.update(f"{sub}/{e.name}:not-a-regular-file\n".encode())
                continue
            try:
                h.update(f"{sub}/{e.name}:{e.stat(follow_symlinks=False).st_size}\n".encode())
                fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as fh:
                    for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                        h.update(chunk)
            except OSError:  # replaced by a link or made unreadable since the listing: never the stored digest
                h.update(f"{sub}/{e.name}:unreadable\n".encode())
    return h.hexdigest()


def current_analysis(run_dir: Path, rd: RunDir | None = None) -> tuple[dict[str, Any], bool]:
    """(analysis of the run as it is on disk, whether it had to be recomputed); ``rd``: the run already opened."""
    from kit.analysis.analyze import analyze_run

    rd = rd or RunDir.open(run_dir)
    path = rd.path / ANALYSIS
    if path.is_file() and not path.is_symlink():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get(DIGEST_KEY) == raw_digest(rd.path):
            return stored, False
    return analyze_run(rd.path), True
