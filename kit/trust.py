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
else ``~/.config/kit``. Everything in it is opened through :mod:`kit.private_files`:
the directory must be a real directory of this user that group and others can
neither read nor write (a key whose directory others could list or write into
may have been read or swapped), its files regular files of this user (never a
link, never a FIFO: nothing blocks), read with a size cap and written through a
temporary file and a rename.

The seal key is a secret: it must also be unreadable by group and others. A
key that others could read or write (or whose directory they could) is not
repaired in place but *replaced*: whoever read it could seal forged analyses
that this kit would then trust, so the old key must stop verifying anything.
Every old seal fails, so analyses are recomputed (costly once, never wrong), a
note (``analysis-seal.key.replaced``) records why, and ``kit doctor`` (and
``--strict``) says so until the user has looked and removed the note. When the
kit cannot fix it (the directory is a link, or another user's), no key is used
at all: nothing stored is trusted, everything is recomputed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kit.errors import KitError
from kit.private_files import PrivateDir, UnsafeFileError, me, open_dir

CONFIG_ENV = "KIT_CONFIG_DIR"
TRUST_FILE = "trusted-studies.json"
KEY_FILE = "analysis-seal.key"
KEY_NOTE = "analysis-seal.key.replaced"
MAX_TRUST_BYTES = 4 << 20
MAX_TRUSTED = 10_000
MAX_KEY_BYTES = 256
MAX_NOTE_BYTES = 64 << 10


@dataclass(frozen=True)
class StudyTrust:
    """What the user allowed for one command: run the run's own copy (``--trust-study-code``) or use a folder
    they name (``--study DIR``); the default trusts only the kit's bundled studies and the allow-list."""

    trust_run_copy: bool = False
    study_dir: Path | None = None
    allow_list: bool = True  # False: the user's allow-list is not consulted (kit verify's re-analysis of a bundle)


@dataclass(frozen=True)
class KeyStatus:
    """The seal key as ``kit doctor`` reports it.

    ``ok``: private (or not made yet); ``replaced``: it was readable or writable by others, or not a key, and a
    new one took its place (old seals no longer verify; the note stays until the user removes it);
    ``unusable``: the kit cannot keep a private key where it is told to (nothing stored is trusted)."""

    state: Literal["ok", "replaced", "unusable"]
    path: Path
    reason: str
    fix: str


def config_dir() -> Path:
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kit"


def _open_config(create: bool) -> PrivateDir | None:
    """The config directory, checked (None: missing and not created). A directory of this user that group or
    others could read or write is made 0700 and the key in it, if any, replaced: it may have been read or swapped
    (a fresh directory made with the usual 0755 and no key yet is only made private).
    UnsafeFileError when it cannot be used (a link, another user's); OSError when it cannot be made."""
    d = open_dir(config_dir(), create=create, secret=True, repair=True, what="the kit's config directory")
    if d is not None and d.repaired and d.lstat(KEY_FILE) is not None:  # no key yet: nothing was exposed
        why = f"its directory {d.path} was mode {d.mode:04o}: group or others could read or write in it (now 0700)"
        also = _key_problem(d)[1]
        try:
            _replace_key(d, f"{why}; and {also}" if also else why)
        except OSError as exc:
            d.close()
            raise UnsafeFileError(f"the config directory was mode {d.mode:04o} (open to others) and its key could "
                                  f"not be replaced ({exc.strerror or exc})", where=str(d.path),
                                  fix=f"remove {d.path / KEY_FILE} yourself; the kit makes a new one") from None
        except BaseException:
            d.close()
            raise
    return d


# -- the allow-list of trusted study digests ---------------------------------------------------------------------

def trusted() -> dict[str, dict[str, Any]]:
    """digest -> what the user trusted (when, from where, which files); {} when there is no valid list (also when
    the list or its directory is not this user's private file: then nothing is trusted)."""
    try:
        d = _open_config(create=False)
        if d is None:
            return {}
        with d:
            raw = d.read(TRUST_FILE, MAX_TRUST_BYTES, what="the trusted-study list")
    except (UnsafeFileError, OSError):
        return {}
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
def _locked() -> Iterator[PrivateDir]:
    """One writer of the allow-list at a time (several `kit run` may finish together): the checked config
    directory, its lock held."""
    import fcntl

    d = _open_config(create=True)
    if d is None:  # cannot happen with create=True; kept for the type
        raise KitError("the kit's config directory is missing", where=str(config_dir()), fix="create it")
    with d:
        fd = d.open_lock(f"{TRUST_FILE}.lock", what="the trusted-study list's lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield d
        finally:
            os.close(fd)


def _save(d: PrivateDir, entries: dict[str, dict[str, Any]]) -> None:
    d.write(TRUST_FILE, (json.dumps({"version": 1, "studies": entries}, indent=1) + "\n").encode())


def trust(digest: str, source: str, files: list[str]) -> None:
    """Add a study digest to the user's allow-list (idempotent); OSError when the config directory is not
    writable, KitError (UnsafeFileError) when it is not this user's private directory."""
    if not (isinstance(digest, str) and len(digest) == 64):
        raise KitError(f"not a study digest: {digest!r}", where="kit trust", fix="give a run directory with a study")
    with _locked() as d:
        entries = trusted()
        if digest in entries:
            return
        if len(entries) >= MAX_TRUSTED:
            raise KitError(f"the allow-list holds {len(entries)} studies already",
                           where=str(config_dir() / TRUST_FILE), fix="remove some with `kit trust --remove DIGEST`")
        entries[digest] = {"trusted": time.time(), "source": source, "files": files[:64]}
        _save(d, entries)


def untrust(digest: str) -> bool:
    """Remove a digest from the allow-list; whether it was there."""
    with _locked() as d:
        entries = trusted()
        if entries.pop(digest, None) is None:
            return False
        _save(d, entries)
        return True


# -- the key that seals this kit's analyses -----------------------------------------------------------------------

def _new_key() -> bytes:
    return secrets.token_hex(32).encode()


def _parse_key(raw: bytes) -> bytes | None:
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return key if len(key) == 32 else None


def _replace_key(d: PrivateDir, reason: str) -> bytes:
    """A fresh key in place of the old one (which stops verifying anything), and the note saying why.

    When the new key cannot be written the old one is removed all the same (an exposed key must never be used
    again); OSError when even that fails."""
    note = {"replaced": time.time(), "reason": reason}
    try:
        d.write(KEY_NOTE, (json.dumps(note) + "\n").encode())
        fresh = _new_key()
        d.write(KEY_FILE, fresh)
    except OSError:
        d.unlink(KEY_FILE)
        raise
    key = _parse_key(fresh)
    assert key is not None
    return key


def _key_problem(d: PrivateDir) -> tuple[bytes | None, str | None]:
    """(the key, None) when the key file is this user's private 32-byte key; (None, None) when there is none;
    (None, why) when it must be replaced."""
    try:
        got = d.read_raw(KEY_FILE, MAX_KEY_BYTES, what="the seal key")
    except UnsafeFileError as err:
        return None, err.cause
    if got is None:
        return None, None
    if got.uid != me():
        return None, f"the key file was owned by uid {got.uid}, not by you"
    if got.mode & 0o077:
        return None, f"the key file was mode {got.mode:04o}: group or others could read or write it"
    key = _parse_key(got.data)
    return (key, None) if key is not None else (None, "the key file did not hold a 32-byte key")


def _key(create: bool) -> tuple[bytes | None, KeyStatus]:
    path = config_dir() / KEY_FILE
    try:
        d = _open_config(create)
    except UnsafeFileError as err:
        return None, KeyStatus("unusable", path, err.cause, err.fix or "")
    except OSError as exc:
        return None, KeyStatus("unusable", path, f"the config directory cannot be made ({exc.strerror or exc})",
                               f"make {config_dir()} a directory of yours (mkdir -m 700) or set {CONFIG_ENV}")
    if d is None:
        return None, KeyStatus("ok", path, "no key yet: made when this kit first seals an analysis", "")
    with d:
        key, problem = _key_problem(d)
        if problem is not None:
            try:
                key = _replace_key(d, problem)
            except OSError as exc:
                return None, KeyStatus("unusable", path, f"{problem}, and no new key could be written "
                                       f"({exc.strerror or exc})", f"make {d.path} writable by you")
        elif key is None and create:
            fresh = _new_key()
            try:
                made = d.create_new(KEY_FILE, fresh)
            except OSError as exc:
                return None, KeyStatus("unusable", path, f"no key could be written ({exc.strerror or exc})",
                                       f"make {d.path} writable by you")
            key = _parse_key(fresh) if made else _key_problem(d)[0]  # lost a race: the other process's key
        return key, _with_note(d, path)


def _with_note(d: PrivateDir, path: Path) -> KeyStatus:
    """``replaced`` while the note of a replacement is there, else ``ok``."""
    try:
        raw = d.read(KEY_NOTE, MAX_NOTE_BYTES, what="the key's replacement note")
    except UnsafeFileError as err:
        raw = json.dumps({"reason": f"(the note itself was unsafe: {err.cause})"}).encode()
    if raw is None:
        return KeyStatus("ok", path, "private to you (0600 in a 0700 directory)", "")
    try:
        note = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        note = {}
    why = str(note.get("reason") if isinstance(note, dict) else "")[:400] or "reason not recorded"
    when = note.get("replaced") if isinstance(note, dict) else None
    stamp = (time.strftime(" on %Y-%m-%d %H:%M", time.localtime(when))
             if isinstance(when, int | float) and 0 < when < 1e11 else "")
    where = d.path / KEY_NOTE
    return KeyStatus("replaced", path, f"the seal key was replaced{stamp} because {why}",
                     "nothing to redo: analyses sealed with the old key are recomputed when next read. But whoever "
                     "could read the old key could seal forged analyses that this kit trusted until then: re-check "
                     f"results read from run directories others gave you; then acknowledge with: rm {where}")


def seal_key(create: bool = True) -> bytes | None:
    """This user's 32-byte key for sealing analysis.json (made on first use with ``create``); None when it cannot
    be had (then every analysis is recomputed: nothing stored is ever trusted). A key others could read or write
    is replaced here (see the module's docstring), whether or not ``create``."""
    return _key(create)[0]


def seal_key_status() -> KeyStatus:
    """What ``kit doctor`` reports about the key, after the same checks (and repairs) as :func:`seal_key`."""
    return _key(create=False)[1]
