"""The collector contract: host-side samplers that run while a trial runs.

A collector is a small class with a ``name``, an ``available()`` probe and a
context manager that samples in a background thread. Its constructor does no
work (no NVML init, no file reads), so building the registry is free and a
missing sensor costs nothing until it is asked for.

Samples are rows in the run directory's long format (see ``SAMPLE_COLUMNS``):
``t`` (UNIX seconds), ``source``, ``device``, ``metric``, ``value``, ``unit``.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, NamedTuple

SAMPLE_COLUMNS: tuple[str, ...] = ("t", "source", "device", "metric", "value", "unit")
DEFAULT_PERIOD_S = 0.1


class Row(NamedTuple):
    """One telemetry reading in the long format."""

    t: float
    source: str
    device: str
    metric: str
    value: float
    unit: str


@dataclass(frozen=True)
class Probe:
    """Outcome of ``Collector.available()``: usable or not, why, and the fix."""

    ok: bool
    detail: str
    fix: str = ""


@dataclass
class CollectorReport:
    """What a collector says about itself after a trial (stored in the trial file)."""

    name: str
    available: bool
    detail: str
    n_rows: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "available": self.available,
            "detail": self.detail,
            "n_rows": self.n_rows,
            "errors": list(self.errors),
        }


@dataclass
class TrialTarget:
    """What collectors may watch while a trial runs (set by the backend once started).

    Shared by backends (which fill it) and collectors (which read it).

    ``pid`` is the harness process on this host (local backend) or the
    container's init process; ``cgroup`` the container's cgroup directory
    when the engine reports one. ``gpu_indices`` (set by the runner before the
    trial starts) are the NVML indices of the GPUs the trial is given: the
    backend exposes only these and the NVML collector samples only these
    ([] for a CPU trial; None: not resolved, every GPU).
    """

    pid: int | None = None
    cgroup: Path | None = None
    container_id: str | None = None
    gpu_indices: list[int] | None = None


class Collector(ABC):
    """Base class: subclasses implement ``probe``, ``_open``, ``read`` and ``_close``.

    ``read()`` returns the rows of one reading; the base class calls it every
    ``period_s`` from a daemon thread, timestamps nothing itself (each row
    carries its own ``t``) and keeps every row. An exception in ``read`` (or
    ``_open`` / ``_close``) is recorded in ``errors`` (distinct messages, first
    few kept; ``n_errors`` counts all) and sampling goes on: a sensor that
    fails mid-run is reported, never fatal. ``read`` may also report partial
    failures itself through ``note_error`` and still return what it could read.
    """

    name: ClassVar[str] = "collector"
    max_errors: ClassVar[int] = 20
    stop_timeout_s: ClassVar[float] = 2.0  # how long __exit__ waits for a reading in flight

    def __init__(self, period_s: float = DEFAULT_PERIOD_S) -> None:
        if period_s <= 0:
            raise ValueError("period_s must be > 0")
        self.period_s = period_s
        self.rows: list[Row] = []
        self.errors: list[str] = []
        self.n_errors = 0  # all errors, repeats and those past ``max_errors`` included
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._probe: Probe | None = None

    @classmethod
    def build(cls, period_s: float, target: TrialTarget, sysfs_root: Path, **options: object) -> Collector:
        """Construct from the registry's common arguments (``make_collectors``).

        Subclasses that need the target, the sysfs root or options override
        this; the default ignores them. No work is done here either.
        """
        return cls(period_s)

    # -- probing ---------------------------------------------------------
    @abstractmethod
    def probe(self) -> Probe:
        """Check, cheaply, whether this collector can read anything here."""

    def available(self) -> Probe:
        """Cached ``probe()``: the first call does the work."""
        if self._probe is None:
            try:
                self._probe = self.probe()
            except Exception as exc:  # a probe must never take the run down
                self._probe = Probe(False, f"probe failed: {exc}")
        return self._probe

    # -- lifecycle -------------------------------------------------------
    def _open(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Acquire resources (NVML init, file handles). Default: nothing."""

    def _close(self) -> None:  # noqa: B027 - an optional hook, not abstract
        """Release resources. Default: nothing."""

    @abstractmethod
    def read(self) -> list[Row]:
        """Take one reading now."""

    @property
    def running(self) -> bool:
        """True between a successful ``__enter__`` and ``__exit__``."""
        return self._thread is not None

    def __enter__(self) -> Collector:
        if not self.available().ok:
            return self
        try:
            self._open()
        except Exception as exc:  # a sensor that passed its probe but fails to open: recorded, not fatal
            self.note_error(f"open failed: {type(exc).__name__}: {exc}")
            self._safe_close()
            return self
        self._stop.clear()
        self._sample_once()
        self._thread = threading.Thread(target=self._loop, name=f"kit-{self.name}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        timeout_s = max(self.stop_timeout_s, 5 * self.period_s)
        self._thread.join(timeout=timeout_s)
        stuck = self._thread.is_alive()
        self._thread = None
        if stuck:  # a read hangs (a wedged driver): do not read again nor free what it may be using
            self.note_error(f"sampler thread still busy {timeout_s:.1f} s after stop; last reading and close skipped")
            return
        self._sample_once()
        self._safe_close()

    def _safe_close(self) -> None:
        try:
            self._close()
        except Exception as exc:
            self.note_error(f"close failed: {type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        next_t = time.monotonic() + self.period_s
        while not self._stop.wait(max(0.0, next_t - time.monotonic())):
            self._sample_once()
            next_t += self.period_s
            now = time.monotonic()
            if next_t < now:  # fell behind (slow sensor): skip, do not burst
                next_t = now + self.period_s

    def note_error(self, message: str) -> None:
        """Record a non-fatal error: each distinct message once (up to ``max_errors``), all counted.

        A sensor that fails at every reading would otherwise fill the list with
        one message and hide a second, different failure.
        """
        with self._lock:
            self.n_errors += 1
            if len(self.errors) < self.max_errors and message not in self.errors:
                self.errors.append(message)

    def _sample_once(self) -> None:
        try:
            rows = self.read()
        except Exception as exc:
            self.note_error(f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.rows.extend(rows)

    def take_rows(self) -> list[Row]:
        """Return and forget the rows gathered so far (thread-safe)."""
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def report(self, n_rows: int) -> CollectorReport:
        probe = self.available()
        with self._lock:
            errors = list(self.errors)
            repeats = self.n_errors - len(errors)
        if repeats > 0:
            errors.append(f"({self.n_errors} errors in all: repeats and those past the first {self.max_errors} not listed)")
        return CollectorReport(self.name, probe.ok, probe.detail, n_rows, errors)
