"""Reads and writes inside a run directory that never follow what its author planted.

A run directory or bundle made by someone else is data, and so is whatever a
trial leaves behind: any name in it may be a symbolic link (to a host file,
``/dev/zero``), a FIFO (which blocks an ``open`` for reading until a writer
comes), a device, or a file of any size. Every read of a run's file goes
through :func:`read_capped` (``O_NOFOLLOW | O_NONBLOCK``, a regular file by
``fstat`` of the opened descriptor, at most ``max_bytes``), every JSON file
through :func:`load_json` (also: valid UTF-8 JSON, not nested beyond what the
parser can take, the expected top-level type), and every write through a
descriptor created with ``O_EXCL | O_NOFOLLOW`` or opened with
``O_NOFOLLOW`` (:func:`create_exclusive`, :func:`open_append`,
:func:`open_lock`) in a directory checked by :func:`real_dir`. Refusals are
:class:`StoreError`\\ s naming the file and the fix, never a hang, a traceback
or a write somewhere else.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from kit.errors import StoreError

FIX_PLANTED = "remove it: the kit writes only regular files and directories into a run directory"


def kind_of(mode: int) -> str:
    """A file type in words (for messages)."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return f"file type {stat.S_IFMT(mode):o}"


def read_capped(path: Path, max_bytes: int, what: str = "file", *, missing_ok: bool = False,
                fix: str = FIX_PLANTED, link_note: str = "the kit never follows a link in a run directory"
                ) -> bytes | None:
    """The bytes of ``path``: a regular file (never through a link, never blocking on a FIFO), at most
    ``max_bytes``; StoreError otherwise (None for a missing file with ``missing_ok``)."""
    where = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise StoreError(f"{what} is missing", where=where, fix=fix) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{what} is a symbolic link; refused ({link_note})", where=where, fix=fix) from None
        raise StoreError(f"{what} cannot be opened ({exc.strerror or exc})", where=where, fix=fix) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StoreError(f"{what} is {kind_of(st.st_mode)}, not a regular file; refused", where=where, fix=fix)
        if st.st_size > max_bytes:
            raise StoreError(f"{what} is {st.st_size} bytes, over the {max_bytes}-byte limit; refused", where=where,
                             fix=fix)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise StoreError(f"{what} grew over the {max_bytes}-byte limit while read; refused", where=where,
                                 fix=fix)
        return b"".join(chunks)
    except OSError as exc:
        raise StoreError(f"{what} cannot be read ({exc.strerror or exc})", where=where, fix=fix) from None
    finally:
        os.close(fd)


def parse_json(data: bytes, where: str, what: str = "file", expect: type | None = dict,
               fix: str = FIX_PLANTED) -> Any:
    """JSON from bytes, with the malformations a crafted file can hold turned into one-line errors."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise StoreError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})", where=where, fix=fix) from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})", where=where,
                         fix=fix) from None
    except RecursionError:
        raise StoreError(f"{what} is nested too deeply to be a record the kit wrote", where=where, fix=fix) from None
    if expect is not None and not isinstance(obj, expect):
        raise StoreError(f"{what} holds a JSON {type(obj).__name__}, not a JSON "
                         f"{'object' if expect is dict else expect.__name__}", where=where, fix=fix)
    return obj


def load_json(path: Path, max_bytes: int, what: str = "file", *, expect: type | None = dict,
              missing_ok: bool = False, fix: str = FIX_PLANTED) -> Any:
    """:func:`read_capped` then :func:`parse_json` (None for a missing file with ``missing_ok``)."""
    data = read_capped(path, max_bytes, what, missing_ok=missing_ok, fix=fix)
    if data is None:
        return None
    return parse_json(data, str(path), what, expect, fix)


def real_dir(path: Path, create: bool = False, what: str = "directory") -> Path:
    """``path`` itself, refused when it is a link or not a directory (created when missing with ``create``)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            raise StoreError(f"{what} is missing", where=str(path), fix="give the directory `kit run` created") from None
        try:
            os.mkdir(path)
        except FileExistsError:
            pass  # made meanwhile by another writer: checked below
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{what} is {kind_of(st.st_mode)}, not a directory; refused (the kit never writes "
                         "through a link planted in a run directory)", where=str(path), fix=FIX_PLANTED)
    return path


def create_exclusive(path: Path, mode: int = 0o644) -> int:
    """A new file at ``path`` for writing; whatever was at that name (a link, a FIFO, a stale file) is unlinked
    first, by name, never followed; OSError if the name cannot be freed or something reappears."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise OSError(errno.EISDIR, "a directory is in the way", str(path)) from None
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def _regular_fd(fd: int, path: Path, what: str) -> int:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise StoreError(f"{what} is {kind_of(st.st_mode)}, not a regular file; refused", where=str(path),
                         fix=FIX_PLANTED)
    return fd


def open_append(path: Path, what: str = "log") -> int:
    """A descriptor appending to ``path`` (created when missing): never through a link, never a FIFO or device."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError(f"{what} is a symbolic link; refused (the kit never writes through a link planted in "
                             "a run directory)", where=str(path), fix=FIX_PLANTED) from None
        raise
    return _regular_fd(fd, path, what)


def open_lock(path: Path) -> int:
    """A descriptor of the lock file ``path`` for flock: created when missing, never truncated, never a link's
    target."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreError("the run's lock file is a symbolic link; refused (the kit never writes through a link "
                             "planted in a run directory)", where=str(path), fix=FIX_PLANTED) from None
        raise
    return _regular_fd(fd, path, "the run's lock file")
