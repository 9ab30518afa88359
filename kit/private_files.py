"""Files only this user can have written: the kit's caches, keys and state files (issue 37).

The kit keeps a few files of its own outside every run directory: the key that seals its analyses and the
allow-list of trusted study code (config directory), the simulated power figures and ``kit history``'s
per-run cache (cache directory), and ``kit tune``'s record of what it changed (/run/kit). What they hold is
believed, so each is only as trustworthy as the way it is opened:

- a read never follows a link and never blocks: ``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` of the opened
  descriptor (a FIFO, a device or a directory at the name is refused, never waited on), a size cap, and the
  owner and mode of that descriptor (another user's file, or one others may write, is not this user's);
- the directory is opened the same way (``O_DIRECTORY | O_NOFOLLOW``: a planted link is refused, not
  followed) and checked once (a real directory of this user, not writable by group or others; for secrets
  not readable either), and every file operation afterwards is relative to that descriptor (``dir_fd``), so
  the directory cannot be swapped between the check and the use;
- a write goes through a fresh temporary file created ``O_CREAT | O_EXCL | O_NOFOLLOW`` in that directory,
  fsynced, then renamed over the name (a rename replaces a link or FIFO planted there, never writes through
  it); a first write that must not clobber (a new key, a state file) is a ``link`` instead of a rename;
- what a cache holds is authenticated: :func:`mac` is an HMAC-SHA256 under the user's key with a domain
  (the analysis seal, the power cache, the history cache) and length-prefixed parts, so a MAC made for one
  purpose can never be replayed as another's, and an entry someone else wrote or edited is recomputed,
  never believed. Access checks alone cannot give that: a file with the right owner and mode can still hold
  numbers the user never computed (copied from elsewhere, restored from a backup of another version).

This module is the kit's base layer: it imports only the standard library, :mod:`kit.errors` and
:mod:`kit.safeio`. Policies (which owners, what a refusal means, when to repair) are its callers'.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kit.errors import KitError
from kit.safeio import kind_of

Domain = Literal["analysis-seal", "power-cache", "history-cache", "figure-cache"]
DOMAINS: frozenset[str] = frozenset(("analysis-seal", "power-cache", "history-cache", "figure-cache"))
BLOB_MAGIC = b"KITMAC1 "  # the first line of a MAC'd blob: magic, 64 hex digits, newline
_BLOB_HEAD = len(BLOB_MAGIC) + 64 + 1
GROUP_OTHER_WRITE = 0o022
GROUP_OTHER_ANY = 0o077
FIX_LINK = "remove the link (rm it) and let the kit create a real directory there, or point the setting elsewhere"


class UnsafeFileError(KitError):
    """A cache, key or state file, or its directory, that is not a private regular file (or directory) of this
    user: a link, a FIFO, a device, another user's, one others may write, one over its size cap."""


def me() -> int:
    """The uid whose files the kit trusts: the effective one (files it creates get that owner)."""
    return os.geteuid()


def _plain_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    return name


def _owner_problem(uid: int, owners: Collection[int]) -> str | None:
    if uid not in owners:
        return f"is owned by uid {uid}, not by " + " or ".join(f"uid {u}" for u in sorted(set(owners)))
    return None


@dataclass(frozen=True)
class FileRead:
    """A regular file's bytes and the owner and permission bits of the descriptor they were read from."""

    data: bytes
    uid: int
    mode: int  # permission bits (stat.S_IMODE)


@dataclass(frozen=True)
class PrivateDir:
    """A checked directory, held open: every read and write inside it is relative to ``fd``.

    ``mode`` is its permission bits as found; ``repaired`` whether :func:`open_dir` had to take group's and
    others' access away (the caller decides what that means: for the seal key, a new key)."""

    path: Path
    fd: int
    mode: int
    repaired: bool

    def __enter__(self) -> PrivateDir:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass

    def where(self, name: str) -> str:
        return str(self.path / name)

    def lstat(self, name: str) -> os.stat_result | None:
        """What is at ``name`` (a link is described, never followed); None when nothing is."""
        try:
            return os.stat(_plain_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read_raw(self, name: str, max_bytes: int, what: str = "file") -> FileRead | None:
        """The bytes of the regular file ``name`` (at most ``max_bytes``) with its owner and mode; None when it is
        missing; UnsafeFileError for a link, a FIFO, a device, a directory or a file over the cap."""
        where = self.where(name)
        try:
            fd = os.open(_plain_name(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            st = self.lstat(name) if exc.errno in (errno.ELOOP, errno.EMLINK) else None
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UnsafeFileError(f"{what} is a symbolic link; refused (never followed)", where=where,
                                      fix=f"remove it (rm {where}); the kit writes a regular file there") from None
            raise UnsafeFileError(f"{what} cannot be opened ({exc.strerror or exc})", where=where,
                                  fix=f"remove it (rm {where})") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeFileError(f"{what} is {kind_of(st.st_mode)}, not a regular file; refused", where=where,
                                      fix=f"remove it (rm -r {where}); the kit writes a regular file there")
            if st.st_size > max_bytes:
                raise UnsafeFileError(f"{what} is {st.st_size} bytes, over its {max_bytes}-byte limit; refused",
                                      where=where, fix=f"remove it (rm {where})")
            chunks: list[bytes] = []
            total = 0
            while chunk := os.read(fd, min(1 << 20, max_bytes + 1 - total)):
                chunks.append(chunk)
                total += len(chunk)
                if total > max_bytes:
                    raise UnsafeFileError(f"{what} grew over its {max_bytes}-byte limit while read; refused",
                                          where=where, fix=f"remove it (rm {where})")
            return FileRead(b"".join(chunks), st.st_uid, stat.S_IMODE(st.st_mode))
        except OSError as exc:
            raise UnsafeFileError(f"{what} cannot be read ({exc.strerror or exc})", where=where,
                                  fix=f"remove it (rm {where})") from None
        finally:
            os.close(fd)

    def read(self, name: str, max_bytes: int, *, secret: bool = False, owners: Collection[int] | None = None,
             what: str = "file") -> bytes | None:
        """:meth:`read_raw`, and refused (UnsafeFileError) unless the file is one of ``owners``' (default: this
        user) and not writable by group or others (with ``secret``: not readable by them either)."""
        got = self.read_raw(name, max_bytes, what)
        if got is None:
            return None
        where = self.where(name)
        owner = _owner_problem(got.uid, owners or (me(),))
        if owner:
            raise UnsafeFileError(f"{what} {owner}; refused (only your own files are trusted)", where=where,
                                  fix=f"remove it (rm {where}); the kit writes its own")
        bad = got.mode & (GROUP_OTHER_ANY if secret else GROUP_OTHER_WRITE)
        if bad:
            raise UnsafeFileError(f"{what} has mode {got.mode:04o}: group or others may "
                                  f"{'read or write' if secret else 'write'} it; refused", where=where,
                                  fix=f"remove it (rm {where}); the kit writes it 0600")
        return got.data

    def write(self, name: str, data: bytes, mode: int = 0o600) -> None:
        """Replace ``name`` with ``data``: a temporary file created O_EXCL|O_NOFOLLOW in this directory, fsynced,
        renamed over the name (whatever was planted there, a link included, is replaced, never written through).
        OSError when the directory is not writable, full, or a directory sits at the name."""
        tmp = self._temp_with(data, mode)
        try:
            os.replace(tmp, _plain_name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError:
            self._unlink_quietly(tmp)
            raise
        self._sync()

    def create_new(self, name: str, data: bytes, mode: int = 0o600) -> bool:
        """Write ``name`` only when nothing is there (a hard link of a complete temporary file: readers never see
        it half-written); False when something already was."""
        tmp = self._temp_with(data, mode)
        try:
            os.link(tmp, _plain_name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            return False
        finally:
            self._unlink_quietly(tmp)
        self._sync()
        return True

    def unlink(self, name: str) -> bool:
        """Remove whatever is at ``name`` (by name, never followed); whether something was there."""
        try:
            os.unlink(_plain_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True

    def open_lock(self, name: str, what: str = "lock file") -> int:
        """A descriptor of the lock file ``name`` for flock: created 0600 when missing, never a link's target,
        never a FIFO (never blocking), this user's."""
        where = self.where(name)
        try:
            fd = os.open(_plain_name(name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o600, dir_fd=self.fd)
        except OSError as exc:
            raise UnsafeFileError(f"{what} cannot be opened ({exc.strerror or exc}); refused", where=where,
                                  fix=f"remove it (rm {where})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != me():
            os.close(fd)
            raise UnsafeFileError(f"{what} is {kind_of(st.st_mode)} of uid {st.st_uid}, not your regular file; "
                                  "refused", where=where, fix=f"remove it (rm {where})")
        return fd

    def _temp_with(self, data: bytes, mode: int) -> str:
        tmp = f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)
        try:
            os.fchmod(fd, mode)  # whatever the umask: the mode asked for, no more
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.close(fd)
            self._unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def _unlink_quietly(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass

    def _sync(self) -> None:
        try:
            os.fsync(self.fd)
        except OSError:
            pass  # some file systems cannot fsync a directory: the rename stands, its durability is theirs


def open_dir(path: Path, *, create: bool = False, secret: bool = False, owners: Collection[int] | None = None,
             repair: bool = False, create_mode: int = 0o700, what: str = "directory") -> PrivateDir | None:
    """``path`` opened as a checked directory; None when it is missing (and not ``create``\\ d).

    Refused (UnsafeFileError) when the name is a link, not a directory, not owned by one of ``owners`` (default
    this user), or writable by group or others (with ``secret``: any access by group or others). With
    ``repair``, a directory of this user that is too open is made 0700 instead (``repaired`` says so). Missing
    with ``create``: made ``create_mode`` (its parents with the usual mode; only the last component is the
    kit's). The directories above it are the user's environment: they are not checked (a home directory
    reached through a link is common and harmless).
    """
    owners = tuple(owners or (me(),))
    where = str(path)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if not create:
            return None
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, create_mode)
        except FileExistsError:
            pass  # made meanwhile (or a link appeared): checked below like any other
        fd = _open_dir_fd(path, flags, what)
    except OSError as exc:
        raise _dir_refusal(path, exc, what) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):  # cannot happen with O_DIRECTORY; kept as the invariant this relies on
            raise UnsafeFileError(f"{what} is {kind_of(st.st_mode)}, not a directory; refused", where=where,
                                  fix=FIX_LINK)
        owner = _owner_problem(st.st_uid, owners)
        if owner:
            raise UnsafeFileError(f"{what} {owner}; refused (whoever owns it can change what the kit reads from it)",
                                  where=where, fix="point the setting at a directory of your own (mkdir -m 700 DIR)")
        mode = stat.S_IMODE(st.st_mode)
        too_open = mode & (GROUP_OTHER_ANY if secret else GROUP_OTHER_WRITE)
        if not too_open:
            return PrivateDir(Path(path), fd, mode, False)
        if not (repair and st.st_uid == me()):
            raise UnsafeFileError(f"{what} has mode {mode:04o}: group or others may "
                                  f"{'use' if secret else 'write into'} it; refused", where=where,
                                  fix=f"chmod {'700' if secret else 'go-w'} {where}")
        os.fchmod(fd, 0o700 if secret else mode & ~GROUP_OTHER_WRITE)
        if stat.S_IMODE(os.fstat(fd).st_mode) & (GROUP_OTHER_ANY if secret else GROUP_OTHER_WRITE):
            raise UnsafeFileError(f"{what} stays mode {mode:04o} after chmod (a file system that keeps no "
                                  "permissions); refused", where=where, fix="use a directory on a POSIX file system")
        return PrivateDir(Path(path), fd, mode, True)
    except BaseException:
        os.close(fd)
        raise


def _open_dir_fd(path: Path, flags: int, what: str) -> int:
    try:
        return os.open(path, flags)
    except OSError as exc:
        raise _dir_refusal(path, exc, what) from None


def _dir_refusal(path: Path, exc: OSError, what: str) -> UnsafeFileError:
    where = str(path)
    try:
        st = os.lstat(path)
        kind = kind_of(st.st_mode)
    except OSError:
        kind = None
    if kind == "a symbolic link":
        return UnsafeFileError(f"{what} is a symbolic link (to {_target(path)}); refused (the kit never follows a "
                               "link where it keeps its own files)", where=where, fix=FIX_LINK)
    if kind is not None and kind != "a directory":
        return UnsafeFileError(f"{what} is {kind}, not a directory; refused", where=where,
                               fix=f"remove it (rm {where}) or point the setting elsewhere")
    return UnsafeFileError(f"{what} cannot be opened ({exc.strerror or exc})", where=where,
                           fix=f"check it (ls -ld {where})")


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


# -- MACs ---------------------------------------------------------------------------------------------------------

def mac(key: bytes, domain: Domain, *parts: bytes | str) -> str:
    """HMAC-SHA256 (hex) under ``key`` of ``parts`` in ``domain``.

    The message is ``kit-mac/1 NUL domain NUL`` then each part as its 8-byte length and its bytes: two calls
    with different domains or a different split of the same bytes into parts never sign the same message, so
    a MAC from the power cache can never pass for an analysis seal or a history-cache MAC.
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown MAC domain {domain!r}")
    h = hmac.new(key, b"kit-mac/1\0" + domain.encode() + b"\0", hashlib.sha256)
    for part in parts:
        raw = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


def mac_holds(key: bytes, domain: Domain, tag: object, *parts: bytes | str) -> bool:
    """Whether ``tag`` is :func:`mac` of ``parts`` (constant-time; anything but a 64-digit hex string fails)."""
    if not isinstance(tag, str) or len(tag) != 64:
        return False
    return hmac.compare_digest(mac(key, domain, *parts).encode(), tag.encode("utf-8", "replace"))


def sealed_blob(key: bytes, domain: Domain, context: str, payload: bytes) -> bytes:
    """``payload`` behind one line ``KITMAC1 <mac>``: the MAC covers ``context`` (what the entry is for: its
    kind and arguments) and the exact payload bytes, so an entry copied to another name fails too."""
    return BLOB_MAGIC + mac(key, domain, context, payload).encode() + b"\n" + payload


def open_blob(key: bytes, domain: Domain, context: str, blob: bytes) -> bytes | None:
    """The payload of a :func:`sealed_blob` whose MAC holds under ``key`` for ``context``; None otherwise."""
    if len(blob) < _BLOB_HEAD or not blob.startswith(BLOB_MAGIC) or blob[_BLOB_HEAD - 1:_BLOB_HEAD] != b"\n":
        return None
    try:
        tag = blob[len(BLOB_MAGIC):_BLOB_HEAD - 1].decode("ascii")
    except UnicodeDecodeError:
        return None
    payload = blob[_BLOB_HEAD:]
    return payload if mac_holds(key, domain, tag, context, payload) else None
