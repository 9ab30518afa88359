"""May a run's analysis.json be reused, or must it be recomputed?

``kit compare``, ``kit history`` and ``kit pack`` read analysis.json instead
of recomputing it, which is only right when this kit made that file from the
run's inputs as they are now. Two ways it can be wrong:

- stale: made before a trial file was added, removed or edited, before the
  manifest, nodes/ or the study copy changed, or by another build of the kit;
- forged: written by whoever handed over the run directory (an edited ratio
  turns identical raw data into a "3x regression").

A digest stored inside analysis.json cannot tell a forged file from a real
one (its author recomputes it), so the kit *seals* each analysis it writes:
an HMAC-SHA256, under a per-user key kept outside every run directory
(:func:`kit.trust.seal_key`), over the digest of every input the analysis
depends on (:func:`inputs_digest`: trials, samples, attempts, manifest.json,
nodes/, the study copy, the kit build), the study code it ran (``Hooks.state``)
and the analysis's own content. A reader reuses analysis.json only when the
seal verifies under its own key (``kit.analysis.analyze.current_analysis``);
anything else (a file from another user or host, a forged or stale one, a
missing key) is recomputed.
``benchmarks/analysis_seal_bench.py`` measures what reuse saves over
recomputing every time.

The HMAC is :func:`kit.private_files.mac` in its own domain (``analysis-seal``), so nothing the kit MACs
elsewhere under the same key (the power and history caches) can pass for a seal. A key that others could
read is replaced before it is used (:mod:`kit.trust`): a seal made with a stolen key stops verifying.

The owner of a key can always re-seal their own files: the seal defends
readers against run directories made by others and against accidents, not a
user against themselves (README, *Security*).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any

from kit.private_files import mac, mac_holds
from kit.records import JsonTable
from kit.store import ATTEMPTS, MANIFEST, NODES, TRIALS

DIGEST_KEY = "raw_digest"
SEAL_KEY = "seal"
SEAL_VERSION = 2  # 2: the MAC of kit.private_files (domain-separated); version-1 seals are recomputed


def _hash_tree(h: Any, root: str, sub: str, recursive: bool = False, depth: int = 0) -> None:
    """Names, sizes and contents of the regular files under ``root/sub`` (links and special files count by name)."""
    d = os.path.join(root, sub)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            if os.path.lexists(d):
                h.update(f"{sub}:not-a-directory\n".encode())
            return
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        rel = f"{sub}/{e.name}"
        if recursive and e.is_dir(follow_symlinks=False) and depth < 16:
            _hash_tree(h, root, rel, True, depth + 1)
            continue
        if not e.is_file(follow_symlinks=False):
            h.update(f"{rel}:not-a-regular-file\n".encode())
            continue
        try:
            h.update(f"{rel}:{e.stat(follow_symlinks=False).st_size}\n".encode())
            fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError:  # replaced by a link or made unreadable since the listing: never the stored digest
            h.update(f"{rel}:unreadable\n".encode())


def raw_digest(run_dir: Path) -> str:
    """sha256 over the names and contents of trials/*.json, samples/* and attempts/* (links are not followed).

    Per file ``sub/name:size`` and the content, in name order; a link or anything but a regular file
    counts as ``sub/name:not-a-regular-file``. Read through descriptors (O_NOFOLLOW): `kit history`
    checks a thousand runs per call.
    """
    h = hashlib.sha256()
    for sub in (TRIALS, "samples", ATTEMPTS):
        _hash_tree(h, os.fspath(run_dir), sub)
    return h.hexdigest()


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


def inputs_digest(run_dir: Path, raw: str | None = None) -> str:
    """sha256 over every input an analysis depends on: the raw files (:func:`raw_digest`, or ``raw`` when the
    caller has it), manifest.json, nodes/*, the study copy (study/, recursively) and the kit build."""
    root = os.fspath(run_dir)
    h = hashlib.sha256((raw or raw_digest(run_dir)).encode())
    h.update(kit_build().encode())
    try:
        fd = os.open(os.path.join(root, MANIFEST), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise OSError("not a regular file")
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        h.update(b"manifest:unreadable")
    _hash_tree(h, root, NODES)
    _hash_tree(h, root, "study", recursive=True)
    return h.hexdigest()


def _content_digest(content: JsonTable, parsed: bool = False) -> str:
    """sha256 of analysis.json's content less its seal, canonical (sorted keys, no spaces): what the seal signs.

    The record's JSON (tuples, numpy scalars) is first made plain by a round trip through JSON; content
    ``parsed`` from the file is plain already (the round trip is the identity on it), so a reader skips it:
    it was a third of what checking one run's seal costs, which `kit history --publish` does for every run."""
    body = {k: v for k, v in content.items() if k != SEAL_KEY}
    plain = body if parsed else json.loads(json.dumps(body, default=str))
    canon = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def _parts(inputs: str, hooks: str, digest: str) -> tuple[str, ...]:
    return (str(SEAL_VERSION), inputs, hooks, digest)


def seal(content: JsonTable, inputs: str, hooks: str, key: bytes | None = None) -> JsonTable | None:
    """The seal of an analysis this kit just computed (None when the user has no key: it will be recomputed).

    ``content`` is analysis.json's JSON as it is written (``Analysis.to_json()``): the seal signs what the
    file says, not the typed record, so a reader checks it on the file before typing it.
    ``key``: seal under this key instead of the user's (what a holder of a stolen key could do; tests)."""
    if key is None:
        from kit.trust import seal_key

        key = seal_key()
    if key is None:
        return None
    return {"version": SEAL_VERSION, "inputs": inputs, "hooks": hooks,
            "hmac": mac(key, "analysis-seal", *_parts(inputs, hooks, _content_digest(content)))}


def seal_holds(content: JsonTable, run_dir: Path, hooks: str | None) -> bool:
    """Whether this user's kit made analysis.json's ``content`` from the run's inputs as they are now (and, with
    ``hooks``, with that study code)."""
    from kit.trust import seal_key

    s = content.get(SEAL_KEY)
    if not isinstance(s, dict) or s.get("version") != SEAL_VERSION:
        return False
    key = seal_key(create=False)
    if key is None:
        return False
    inputs, state, tag = s.get("inputs"), s.get("hooks"), s.get("hmac")
    if not (isinstance(inputs, str) and isinstance(state, str) and isinstance(tag, str)):
        return False
    if hooks is not None and state != hooks:
        return False
    if not mac_holds(key, "analysis-seal", tag, *_parts(inputs, state, _content_digest(content, parsed=True))):
        return False
    return hmac.compare_digest(inputs.encode(), inputs_digest(run_dir).encode())
