"""The kit's build: its version and a digest of its Python sources.

Another build may analyse differently, so kit.freshness seals each analysis with it and kit.history keys its
cached steps with it. It lives apart from kit.freshness (which re-exports it) because a cached `kit history`
needs only this, and importing kit.freshness brings kit.store, its collectors and the spec model: a third of
that call's time.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path


@functools.cache
def kit_build() -> str:
    """The kit's version and a digest of its Python sources: another build may analyse differently."""
    from kit import __version__

    root = Path(__file__).resolve().parent
    h = hashlib.sha256(__version__.encode())
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(p.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"
