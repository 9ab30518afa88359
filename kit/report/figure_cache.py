"""The kit's own report figures kept between processes, addressed by what they draw (issue 44).

Drawing the nine figures of a LeNet report costs more than a second of matplotlib, plus half a second to import
it, though re-rendering a report (a stored analysis, a template change) or recomputing an analysis from the same
files draws exactly the same figures again. So each figure is kept as the bytes :func:`kit.report.figures.to_svg`
made of it, under a key that is the SHA-256 of a canonical encoding (:func:`canonical`: every number exactly, as
its IEEE-754 bytes or its decimal integer; every string, list and missing value tagged and length-prefixed) of

- exactly the inputs the figure function draws (the rows it plots, its labels and options: each function in
  :mod:`kit.report.figures` names them beside its drawing code),
- the function's name, the digest of the drawing code's sources (:mod:`kit.report.figures` and this module) and
  the kit's version,
- the versions of matplotlib and numpy (the jitter's random stream), the Python it runs on, and the matplotlibrc
  files matplotlib would read (``$MATPLOTLIBRC``, ``./matplotlibrc``, ``$MPLCONFIGDIR`` or the XDG config one),
- the output format (an SVG entry and a PDF entry per figure: an HTML report needs the SVG alone).

A hit returns the stored bytes without importing matplotlib; a miss draws as before and stores what it drew. A
process that changed matplotlib's rcParams (study code's style) draws without the cache. The fonts are
matplotlib's own DejaVu Sans, which ship with its version.

Where: ``$KIT_FIGURE_CACHE`` ("off": never), else ``$XDG_CACHE_HOME/kit/figures`` (an absolute XDG_CACHE_HOME) or
``~/.cache/kit/figures``, as the power and history caches: never a run directory (whoever hands over a run could
plant an SVG that the page would embed). The cache is hostile input too (issue 37's rules,
:mod:`kit.private_files`): the directory must be a real directory of this user that group and others cannot write
(else it is not used); an entry is opened without following a link and without blocking, must be this user's
regular file within :data:`MAX_ENTRY_BYTES`, and carries an HMAC under the user's seal key (domain
``figure-cache``) over its key, its format and its exact bytes; an SVG entry must also look like one (``<svg`` ...
``</svg>``) and a PDF one like a PDF. Anything else (edited bytes, a MAC of another key or another entry's name, a
planted link, a FIFO, a truncated or oversized file) is drawn again and rewritten, never embedded; without a usable
key the cache is neither read nor written. Writes go through a temporary file created O_EXCL|O_NOFOLLOW and a
rename, so concurrent reports never see half an entry; after a write the oldest entries beyond
:data:`MAX_TOTAL_BYTES` are removed (a hit refreshes an entry's mtime: least recently used goes first). Whatever
comes out of the cache is still sanitised like every figure (:func:`kit.report.sections.kit_figure`).

``--redraw`` (and ``--reanalyse``) of ``kit report`` draw every figure afresh (:func:`redrawing`) and store the new
drawings.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeAlias

from kit.private_files import PrivateDir, UnsafeFileError, open_blob, open_dir, sealed_blob

ENV = "KIT_FIGURE_CACHE"
ENTRY_SUFFIX = ".kfig"
KEY_VERSION = b"kit-figure/1\0"
MAX_ENTRY_BYTES = 16 << 20  # an SVG is capped at 8 MiB where it is embedded (kit.report.svg_safe); PDFs are smaller
MAX_TOTAL_BYTES = 200 << 20  # the oldest entries beyond this are removed after each write
STALE_TEMP_S = 3600.0  # a temporary file this old was left by a killed writer
MAX_RC_BYTES = 1 << 20

# None | bool | int | float | str | bytes, and tuples or lists of them: what canonical() encodes
Canon: TypeAlias = "bool | int | float | str | bytes | Sequence[Canon] | None"

_REDRAW: ContextVar[bool] = ContextVar("kit_figure_redraw", default=False)


@dataclass(frozen=True, slots=True)
class Drawn:
    """A figure as :func:`kit.report.figures.to_svg` returns it: the SVG text and, when asked for, the PDF."""

    svg: str
    pdf: bytes | None


@contextmanager
def redrawing(redraw: bool) -> Iterator[None]:
    """Within this block, with ``redraw``, every figure is drawn afresh (the cache is not read) and stored."""
    token = _REDRAW.set(redraw)
    try:
        yield
    finally:
        _REDRAW.reset(token)


# -- the key ------------------------------------------------------------------------------------------------------

def canonical(obj: Canon) -> bytes:
    """``obj`` as bytes that no other value shares: a tag per type, lengths before contents, floats as their
    big-endian IEEE-754 bytes (-0.0 and 0.0, 0.1 and the next float up, NaN payloads all stay apart), ints in decimal,
    strings in UTF-8. A list of nothing but floats is packed at once (the telemetry's thousands of points).
    TypeError for anything else (a dict's order, a numpy scalar: the caller draws without the cache)."""
    out = bytearray()
    _put(out, obj)
    return bytes(out)


def _put(out: bytearray, x: Canon) -> None:
    if x is None:
        out += b"N"
    elif x is True or x is False:
        out += b"T" if x else b"F"
    elif isinstance(x, int):
        raw = str(int(x)).encode()
        out += b"I" + len(raw).to_bytes(8, "big") + raw
    elif isinstance(x, float):
        out += b"D" + struct.pack(">d", x)
    elif isinstance(x, str):
        raw = x.encode("utf-8", "surrogatepass")
        out += b"S" + len(raw).to_bytes(8, "big") + raw
    elif isinstance(x, bytes):
        out += b"B" + len(x).to_bytes(8, "big") + x
    elif isinstance(x, tuple | list):
        n = len(x).to_bytes(8, "big")
        if x and all(type(v) is float for v in x):
            out += b"A" + n + struct.pack(f">{len(x)}d", *x)
        else:
            out += b"L" + n
            for v in x:
                _put(out, v)
    else:
        raise TypeError(f"no canonical encoding for {type(x).__name__}")


def _digest_file(path: Path, cap: int) -> str:
    """SHA-256 of a regular file (opened without blocking: a FIFO is never waited on), "absent" when there is
    none, "unreadable" when it cannot be read within ``cap``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent"
    except OSError:
        return "unreadable"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return "unreadable"
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    except OSError:
        return "unreadable"
    finally:
        os.close(fd)


def _rc_candidates() -> list[Path]:
    """The matplotlibrc files matplotlib.matplotlib_fname() looks at before its own default."""
    out: list[Path] = []
    env = os.environ.get("MATPLOTLIBRC")
    if env:
        out += [Path(env), Path(env) / "matplotlibrc"]
    try:
        out.append(Path.cwd() / "matplotlibrc")
    except OSError:
        pass
    cfg = os.environ.get("MPLCONFIGDIR")
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(cfg) if cfg else (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config") / "matplotlib"
    out.append(base / "matplotlibrc")
    return out


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _code_facts() -> tuple[str, ...] | None:
    """What every drawing depends on besides its inputs and the matplotlibrc files; None when not knowable
    (then nothing is cached)."""
    import kit

    here = Path(__file__).resolve()
    sources = [_digest_file(here.with_name("figures.py"), 1 << 22), _digest_file(here, 1 << 22)]
    mpl, np = _version("matplotlib"), _version("numpy")
    if mpl is None or np is None or any(len(s) != 64 for s in sources):
        return None
    return (kit.__version__, *sources, mpl, np, sys.implementation.name, sys.version.split()[0])


def _facts() -> tuple[str, ...] | None:
    """:func:`_code_facts` and the matplotlibrc files' digests; None when this process changed matplotlib's
    rcParams (a study's style), so that its drawings are never kept as the defaults'."""
    code = _code_facts()
    if code is None or not _rc_pristine():
        return None
    # each candidate's contents, not its path: the same report run from another directory is the same drawing
    return (*code, *(_digest_file(p, MAX_RC_BYTES) for p in _rc_candidates()))


# chosen by the kit itself (kit.report.figures.headless) or a GUI; never seen in a file saved as SVG or PDF. Read
# "backend" and matplotlib resolves it (importing pyplot).
_RC_NOT_DRAWN = frozenset(("backend", "backend_fallback", "interactive"))


def _rc_pristine() -> bool:
    """Whether matplotlib's rcParams are those its matplotlibrc files gave (true while it is not imported)."""
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return True
    try:
        now, orig = mpl.rcParams, mpl.rcParamsOrig
        return set(now.keys()) == set(orig.keys()) and all(now[k] == orig[k] for k in orig.keys()
                                                           if k not in _RC_NOT_DRAWN)
    except Exception:  # a half-imported or patched matplotlib: draw without the cache
        return False


def figure_key(kind: str, inputs: Canon) -> str | None:
    """The hex SHA-256 that names figure ``kind``'s drawing of ``inputs``; None when it cannot be known (an
    input without a canonical encoding, a changed rcParams, matplotlib's version unknown)."""
    facts = _facts()
    if facts is None:
        return None
    try:
        body = canonical((list(facts), kind, inputs))
    except TypeError:
        return None
    return hashlib.sha256(KEY_VERSION + body).hexdigest()


# -- the store ----------------------------------------------------------------------------------------------------

def cache_dir() -> Path | None:
    """``$KIT_FIGURE_CACHE`` ("off": none), else ``$XDG_CACHE_HOME/kit/figures`` (an absolute XDG_CACHE_HOME, as
    the XDG spec requires), else ``~/.cache/kit/figures``."""
    value = os.environ.get(ENV)
    if value == "off":
        return None
    if value:
        return Path(value)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "kit" / "figures"


def entry_name(key: str, fmt: str) -> str:
    return f"{key}-{fmt}{ENTRY_SUFFIX}"


def _context(key: str, fmt: str) -> str:
    """What an entry's MAC binds its bytes to: renamed to another key or format, it fails."""
    return f"figure\0{key}\0{fmt}"


def _valid(fmt: str, payload: bytes) -> bool:
    """Whether the bytes look like what :func:`kit.report.figures.to_svg` writes in ``fmt`` (a MAC'd entry of
    this kit always does: this only keeps a bug or a forged key from handing out something else)."""
    if fmt == "pdf":
        return payload.startswith(b"%PDF-") and b"%%EOF" in payload[-64:]
    return payload.startswith(b"<svg") and payload.rstrip().endswith(b"</svg>")


def read_entry(d: PrivateDir, mac_key: bytes, key: str, fmt: str) -> bytes | None:
    """The bytes of entry (``key``, ``fmt``) when it is this user's regular file within the cap whose MAC holds
    and whose bytes look like ``fmt``; None for anything else (missing, a link, a FIFO, foreign, forged)."""
    name = entry_name(key, fmt)
    try:
        blob = d.read(name, MAX_ENTRY_BYTES + 128, what="figure cache entry")
    except UnsafeFileError:
        return None
    payload = open_blob(mac_key, "figure-cache", _context(key, fmt), blob) if blob is not None else None
    if payload is None or not _valid(fmt, payload):
        return None
    try:  # least recently used goes first (evict)
        os.utime(name, dir_fd=d.fd, follow_symlinks=False)
    except OSError:
        pass
    return payload


def write_entry(d: PrivateDir, mac_key: bytes, key: str, fmt: str, payload: bytes) -> bool:
    """Store ``payload`` as entry (``key``, ``fmt``) (temporary file and rename); False when it is over the cap
    or the directory cannot take it (the figure stands, the next report draws it again)."""
    if len(payload) > MAX_ENTRY_BYTES or not _valid(fmt, payload):
        return False
    try:
        d.write(entry_name(key, fmt), sealed_blob(mac_key, "figure-cache", _context(key, fmt), payload))
    except (OSError, ValueError):
        return False
    return True


def evict(d: PrivateDir, max_total_bytes: int = MAX_TOTAL_BYTES, now_s: float | None = None) -> list[str]:
    """Remove the least recently used entries until the cache holds at most ``max_total_bytes``, and temporary
    files of writers gone for an hour; anything at an entry's name that is not a regular file is removed too.
    The names removed."""
    now_s = time.time() if now_s is None else now_s
    kept: list[tuple[float, str, int]] = []
    gone: list[str] = []
    try:
        with os.scandir(d.fd) as it:
            for e in it:
                if not (e.name.endswith(ENTRY_SUFFIX) or e.name.startswith(".tmp-")):
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.startswith(".tmp-"):
                    if now_s - st.st_mtime > STALE_TEMP_S:
                        gone.append(e.name)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    gone.append(e.name)
                    continue
                kept.append((st.st_mtime, e.name, st.st_size))
    except OSError:
        return []
    total = sum(size for _m, _n, size in kept)
    for _mtime, name, size in sorted(kept):
        if total <= max_total_bytes:
            break
        gone.append(name)
        total -= size
    for name in gone:
        try:
            d.unlink(name)
        except OSError:
            pass
    return gone


def _open() -> tuple[PrivateDir, bytes] | None:
    """The checked cache directory and the MAC key; None when the cache may not be used (off, a link, another
    user's or a group-writable directory, no key)."""
    base = cache_dir()
    if base is None:
        return None
    from kit.trust import seal_key

    mac_key = seal_key()
    if mac_key is None:
        return None
    try:
        d = open_dir(base, create=True, what="the figure cache directory")
    except (UnsafeFileError, OSError):
        return None
    return None if d is None else (d, mac_key)


def through_cache(kind: str, inputs: Canon, pdf: bool, draw: Callable[[], Drawn]) -> Drawn:
    """Figure ``kind`` of ``inputs``: the stored SVG (and PDF with ``pdf``) when every entry it needs holds,
    else ``draw()`` (which must draw the PDF too with ``pdf``), stored for the next report."""
    key = figure_key(kind, inputs)
    opened = _open() if key is not None else None
    if key is None or opened is None:
        return draw()
    d, mac_key = opened
    with d:
        if not _REDRAW.get():
            svg = read_entry(d, mac_key, key, "svg")
            pdf_bytes = read_entry(d, mac_key, key, "pdf") if pdf and svg is not None else None
            if svg is not None and (pdf_bytes is not None or not pdf):
                try:
                    return Drawn(svg.decode("utf-8"), pdf_bytes)
                except UnicodeDecodeError:
                    pass
        got = draw()
        try:
            wrote = write_entry(d, mac_key, key, "svg", got.svg.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate in a title: drawn, not kept
            return got
        if got.pdf is not None:
            wrote = write_entry(d, mac_key, key, "pdf", got.pdf) or wrote
        if wrote:
            evict(d)
        return got
