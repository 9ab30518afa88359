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
from pathlib import Path
from typing import Any

from kit.store import ANALYSIS, ATTEMPTS, TRIALS, RunDir

DIGEST_KEY = "raw_digest"


def raw_digest(run_dir: Path) -> str:
    """sha256 over the names and contents of trials/*.json, samples/* and attempts/* (links are not followed)."""
    root = Path(run_dir)
    h = hashlib.sha256()
    for sub in (TRIALS, "samples", ATTEMPTS):
        d = root / sub
        if not d.is_dir() or d.is_symlink():
            continue
        for p in sorted(d.iterdir()):
            if p.is_symlink() or not p.is_file():
                h.update(f"{sub}/{p.name}:not-a-regular-file\n".encode())
                continue
            h.update(f"{sub}/{p.name}:{p.stat().st_size}\n".encode())
            with p.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
    return h.hexdigest()


def current_analysis(run_dir: Path) -> tuple[dict[str, Any], bool]:
    """(analysis of the run as it is on disk, whether it had to be recomputed)."""
    from kit.analysis.analyze import analyze_run

    rd = RunDir.open(run_dir)
    path = rd.path / ANALYSIS
    if path.is_file() and not path.is_symlink():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = None
        if isinstance(stored, dict) and stored.get(DIGEST_KEY) == raw_digest(rd.path):
            return stored, False
    return analyze_run(rd.path), True
