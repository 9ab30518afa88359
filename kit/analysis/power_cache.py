"""The disk cache of the simulated power figures, and the power and detectability functions bound to it.

:mod:`kit.stats.power` and :mod:`kit.stats.detectability` are pure: the order statistics they simulate are
handed out by a ``keep`` store, by default none. Simulating them again costs seconds of every ``kit run``'s
analysis and every ``kit compare``, so the kit keeps them on disk between processes (``$KIT_POWER_CACHE`` or
``$XDG_CACHE_HOME/kit/power`` or ``~/.cache/kit/power``; ``KIT_POWER_CACHE=off``: never), keyed by their kind, arguments and a digest of
:func:`kit.stats.power.simulation_facts` (the simulation's code, sizes, seed and numpy version). The functions
below under their old names (``mde_paired_sd``, ``detectability``, ...) are the pure ones with ``keep``
= :func:`on_disk`: what the analysis, the design table and ``kit compare`` call.

Each entry is data someone else could have written, so (issue 37): the cache directory must be a real
directory of this user that group and others cannot write (else the disk cache is not used at all); an entry
is opened without following a link and without blocking (a FIFO or device there is refused, not waited on),
must be this user's regular file, is size-capped, and carries an HMAC under the user's seal key
(:func:`kit.private_files.mac`, domain ``power-cache``) over the entry's kind, arguments, shape, the
simulation's version digest and the exact array bytes. An entry without a valid MAC (a valid ``.npy`` with
other numbers, one signed with another key, one copied from another entry's name) is ignored, simulated again
and rewritten, never believed: a poisoned entry would otherwise change every printed MDE and power. Without a
usable key the disk cache is not read at all (the draws are simulated in memory). Writes go through a
temporary file created O_EXCL|O_NOFOLLOW in the checked directory and a rename. Entry names and MACs are those
the kit wrote before the statistics moved to :mod:`kit.stats`: a cache written then is still found.
"""

from __future__ import annotations

import hashlib
import io
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from kit.private_files import PrivateDir, UnsafeFileError, open_blob, open_dir, sealed_blob
from kit.stats import detectability as sd
from kit.stats import power as sp
from kit.stats.power import POWER, Simulate

ENV_CACHE = "KIT_POWER_CACHE"
ENTRY_SUFFIX = ".kpow"  # not .npy: an entry is a MAC line followed by the .npy bytes


def _cache_dir() -> Path | None:
    """``$KIT_POWER_CACHE`` ("off": none), else ``$XDG_CACHE_HOME/kit/power`` (an absolute XDG_CACHE_HOME, as the
    XDG spec requires), else ``~/.cache/kit/power``."""
    value = os.environ.get(ENV_CACHE)
    if value == "off":
        return None
    if value:
        return Path(value)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "kit" / "power"


@lru_cache(maxsize=1)
def _sim_version() -> str | None:
    """The digest of what the draws depend on besides their arguments (None: not knowable, no disk cache)."""
    facts = sp.simulation_facts()
    return None if facts is None else hashlib.sha256(facts.encode()).hexdigest()


def _entry_name(kind: str, args: tuple[int, ...], version: str) -> str:
    digest = hashlib.sha256(f"{kind}\0{args}\0{version}".encode()).hexdigest()[:40]
    return f"{kind}-{digest}{ENTRY_SUFFIX}"


def _context(kind: str, args: tuple[int, ...], shape: tuple[int, int], version: str) -> str:
    """What an entry's MAC binds its bytes to: copied under another entry's name it fails."""
    return f"{kind}\0{args}\0{shape}\0{version}"


def entry_path(kind: str, args: tuple[int, ...]) -> Path | None:
    """Where the entry of ``kind`` ("paired", "unpaired") and ``args`` lives (None: no disk cache)."""
    base, version = _cache_dir(), _sim_version()
    return None if base is None or version is None else base / _entry_name(kind, args, version)


def _cap(shape: tuple[int, int]) -> int:
    return 8 * shape[0] * shape[1] + 4096 + 128  # the values, the .npy header and the MAC line


def _read_entry(d: PrivateDir, name: str, key: bytes, context: str, shape: tuple[int, int]) -> np.ndarray | None:
    """The array of entry ``name`` when it is this user's regular file whose MAC holds and whose array has
    ``shape`` and finite float64 values; None for anything else (missing, a link, a FIFO, foreign, forged)."""
    try:
        blob = d.read(name, _cap(shape), what="power cache entry")
    except UnsafeFileError:
        return None
    payload = open_blob(key, "power-cache", context, blob) if blob is not None else None
    if payload is None:
        return None
    try:
        got = np.load(io.BytesIO(payload), allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == shape and bool(np.isfinite(got).all()):
        return got
    return None


def _key() -> bytes | None:
    from kit.trust import seal_key

    return seal_key()


def _open_cache(base: Path) -> PrivateDir | None:
    """The cache directory, checked (created 0700 when missing); None when it may not be used."""
    try:
        return open_dir(base, create=True, what="the power cache directory")
    except (UnsafeFileError, OSError):
        return None


def cached_entry(kind: str, args: tuple[int, ...], shape: tuple[int, int]) -> np.ndarray | None:
    """The entry's array as a reader would believe it (its MAC holds under the user's key), else None; never
    simulates (for tests and ``kit doctor``-like checks)."""
    base, version, key = _cache_dir(), _sim_version(), _key()
    if base is None or version is None or key is None:
        return None
    d = _open_cache(base)
    if d is None:
        return None
    with d:
        return _read_entry(d, _entry_name(kind, args, version), key, _context(kind, args, shape, version), shape)


def on_disk(kind: str, args: tuple[int, ...], shape: tuple[int, int], simulate: Simulate) -> np.ndarray:
    """The :data:`kit.stats.power.Keep` store of the kit: ``simulate()`` (a float64 array of ``shape``), kept in
    the power cache between processes."""
    base, version = _cache_dir(), _sim_version()
    key = _key() if base is not None and version is not None else None
    if base is None or version is None or key is None:
        return simulate()
    d = _open_cache(base)
    if d is None:  # a link, another user's or a group-writable directory: never read, never written
        return simulate()
    with d:
        name, context = _entry_name(kind, args, version), _context(kind, args, shape, version)
        got = _read_entry(d, name, key, context, shape)
        if got is not None:
            return got
        out = simulate()
        buf = io.BytesIO()
        np.save(buf, out, allow_pickle=False)
        try:
            d.write(name, sealed_blob(key, "power-cache", context, buf.getvalue()))
        except OSError:  # a read-only or full cache: the figures stand, the next process simulates again
            pass
        return out


# --------------------------------------------------------------------------- the pure functions, kept on disk


def mde_paired_sd(n: int, level: float, power: float = POWER, ties: bool = False,
                  step_sd: float | None = None) -> float:
    """:func:`kit.stats.power.mde_paired_sd` with the draws kept on disk."""
    return sp.mde_paired_sd(n, level, power, ties, step_sd, keep=on_disk)


def power_paired(delta_sd: float, n: int, level: float, ties: bool = False) -> float:
    """:func:`kit.stats.power.power_paired` with the draws kept on disk."""
    return sp.power_paired(delta_sd, n, level, ties, keep=on_disk)


def mde_unpaired_sd(n_a: int, n_b: int, level: float, power: float = POWER, ties: bool = False,
                    step_sd: float | None = None) -> float:
    """:func:`kit.stats.power.mde_unpaired_sd` with the draws kept on disk."""
    return sp.mde_unpaired_sd(n_a, n_b, level, power, ties, step_sd, keep=on_disk)


def power_unpaired(delta_sd: float, n_a: int, n_b: int, level: float, ties: bool = False) -> float:
    """:func:`kit.stats.power.power_unpaired` with the draws kept on disk."""
    return sp.power_unpaired(delta_sd, n_a, n_b, level, ties, keep=on_disk)


def equivalence_margin_sd(n_a: int, n_b: int, paired: bool, alpha: float, power: float = POWER) -> float:
    """:func:`kit.stats.power.equivalence_margin_sd` with the draws kept on disk."""
    return sp.equivalence_margin_sd(n_a, n_b, paired, alpha, power, keep=on_disk)


def n_for(target_sd: float, measure: str, *, paired: bool, level: float, power: float = POWER,
          n_min: int = 2, n_max: int = 100_000) -> int | None:
    """:func:`kit.stats.power.n_for` with the draws kept on disk."""
    return sp.n_for(target_sd, measure, paired=paired, level=level, power=power, n_min=n_min, n_max=n_max,
                    keep=on_disk)


def mde_of(noise: float, n_a: int, n_b: int, paired: bool, level: float, power: float = POWER,
           ties: bool = False, step_sd: float | None = None) -> float:
    """:func:`kit.stats.detectability.mde_of` with the draws kept on disk."""
    return sd.mde_of(noise, n_a, n_b, paired, level, power, ties, step_sd, keep=on_disk)


def n_needed(noise: float, threshold: float, paired: bool, level: float, power: float = POWER) -> int | None:
    """:func:`kit.stats.detectability.n_needed` with the draws kept on disk."""
    return sd.n_needed(noise, threshold, paired, level, power, keep=on_disk)


def n_to_detect(noise: float, threshold: float, paired: bool, level: float, power: float = POWER) -> int | None:
    """:func:`kit.stats.detectability.n_to_detect` with the draws kept on disk."""
    return sd.n_to_detect(noise, threshold, paired, level, power, keep=on_disk)


def detectability(a: np.ndarray, b: np.ndarray, *, paired: bool, level: float, threshold: float,
                  power: float = POWER, alpha: float | None = None) -> sd.Detectability:
    """:func:`kit.stats.detectability.detectability` with the draws kept on disk."""
    return sd.detectability(a, b, paired=paired, level=level, threshold=threshold, power=power, alpha=alpha,
                            keep=on_disk)
