"""Whose code may run: the user's trust in study code, and the key that seals this kit's analyses.

A run directory or bundle made by someone else is data. Its ``study/`` copy
holds Python (``analysis.py``, ``report.py``) that the study's author wrote,
and the manifest's digest of it is written by that author too, so neither
proves anything to the reader. Readers (``kit report``, ``compare``,
``history``, ``pack``, ``verify``) therefore run a run's study code only
when the user trusts it, by one of:

- it is the kit's own bundled study of that experiment, byte for byte (the
  digest is computed by the reader over both folders);
- the user names a study folder on the command line (``--study DIR``): that
  folder's code is used instead of the run's copy;
- the user trusts the copy for one command (``--trust-study-code``) or for
  good (``kit trust RUN``, an allow-list of digests in the user's config
  directory, never in a run directory). ``kit run`` of a study folder adds
  the folder's digest: the user ran that code.

Everything else gets the generic analysis and one line saying what was left
out and how to include it. The same config directory holds the per-user key
that seals the analyses this kit wrote (:mod:`kit.freshness`).

The config directory is ``$KIT_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/kit``,
else ``~/.config/kit``; files in it are created 0600 and read only when they
are regular files owned by this user and not writable by others.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.safeio import create_exclusive

CONFIG_ENV = "KIT_CONFIG_DIR"
TRUST_FILE = "trusted-studies.json"
KEY_FILE = "analysis-seal.key"
MAX_TRUST_BYTES = 4 << 20
MAX_TRUSTED = 10_000


@dataclass(frozen=True)
class StudyTrust:
    """What the user allowed for one command: run the run's own copy (``--trust-study-code``) or use a folder
    they name (``--study DIR``); the default trusts only the kit's bundled studies and the allow-list."""

    trust_run_copy: bool = False
    study_dir: Path | None = None
    allow_list: bool = True  # False: the user's allow-list is not consulted (kit verify's re-analysis of a bundle)


def config_dir() -> Path:
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kit"


def _private_bytes(path: Path, max_bytes: int) -> bytes | None:
    """The file's bytes if it is a regular file of this user, not writable by group or others; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_size > max_bytes:
            return None
        return os.read(fd, max_bytes + 1)[:max_bytes]
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (0600) through a fresh temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = create_exclusive(tmp, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


# -- the allow-list of trusted study digests ---------------------------------------------------------------------

def trusted() -> dict[str, dict[str, Any]]:
    """digest -> what the user trusted (when, from where, which files); {} when there is no valid list."""
    raw = _private_bytes(config_dir() / TRUST_FILE, MAX_TRUST_BYTES)
    if raw is None:
        return {}
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    entries = doc.get("studies") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(k, str) and len(k) == 64 and isinstance(v, dict)}


def is_trusted(digest: str | None) -> bool:
    return bool(digest) and digest in trusted()


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One writer of the allow-list at a time (several `kit run` may finish together)."""
    import fcntl

    d = config_dir()
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(d / f"{TRUST_FILE}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _save(entries: dict[str, dict[str, Any]]) -> None:
    _write_private(config_dir() / TRUST_FILE, (json.dumps({"version": 1, "studies": entries}, indent=1) + "\n").encode())


def trust(digest: str, source: str, files: list[str]) -> None:
    """Add a study digest to the user's allow-list (idempotent); OSError when the config directory is not
    writable."""
    if not (isinstance(digest, str) and len(digest) == 64):
        raise KitError(f"not a study digest: {digest!r}", where="kit trust", fix="give a run directory with a study")
    with _locked():
        entries = trusted()
        if digest in entries:
            return
        if len(entries) >= MAX_TRUSTED:
            raise KitError(f"the allow-list holds {len(entries)} studies already",
                           where=str(config_dir() / TRUST_FILE), fix="remove some with `kit trust --remove DIGEST`")
        entries[digest] = {"trusted": time.time(), "source": source, "files": files[:64]}
        _save(entries)


def untrust(digest: str) -> bool:
    """Remove a digest from the allow-list; whether it was there."""
    with _locked():
        entries = trusted()
        if entries.pop(digest, None) is None:
            return False
        _save(entries)
        return True


# -- the key that seals this kit's analyses -----------------------------------------------------------------------

def seal_key(create: bool = True) -> bytes | None:
    """This user's 32-byte key for sealing analysis.json (made on first use); None when it cannot be had
    (then every analysis is recomputed: nothing stored is ever trusted)."""
    path = config_dir() / KEY_FILE
    raw = _private_bytes(path, 256)
    if raw is None and create and not os.path.lexists(path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, secrets.token_hex(32).encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            pass  # another process made it meanwhile, or the directory is not writable
        raw = _private_bytes(path, 256)
    if raw is None:
        return None
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return key if len(key) == 32 else None
