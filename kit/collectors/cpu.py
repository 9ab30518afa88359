"""CPU collector: utilisation (total and per core), frequency, load and cumulative busy time (psutil).

Utilisation has ``psutil.cpu_percent(interval=None)`` semantics: the busy
share of CPU time since the previous reading. It is computed here from
``psutil.cpu_times`` with state kept in the collector, not through
``cpu_percent`` itself, whose "previous reading" is module-global and would be
shared with any other caller in the process (another collector, a test).
``_open`` primes the state so that the first row already covers a real window.

Per-CPU rows are named by the kernel's CPU number (``cpu<N>``), not by the
position in psutil's list: ``/proc/stat`` lists only online CPUs, so with one
offline the positions shift, and a pinned trial's foreign load is read on its
CPUs by number (kit.disturbance_cpus).
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

from kit.collectors.base import DEFAULT_PERIOD_S, Collector, Probe, Row
from kit.workloads.zoo_pin import parse_cpu_list

SOURCE = "cpu"
ONLINE = "/sys/devices/system/cpu/online"


def _total_s(t: Any) -> float:
    """All CPU time in a ``cpu_times`` tuple; guest time is already inside user/nice on Linux."""
    total = float(sum(t))
    for field in ("guest", "guest_nice"):
        total -= float(getattr(t, field, 0.0))
    return total


def _idle_s(t: Any) -> float:
    """Idle time as psutil counts it: idle plus iowait (waiting on I/O is not busy)."""
    return float(t.idle) + float(getattr(t, "iowait", 0.0))


def busy_s(t: Any) -> float:
    """Busy CPU seconds in a ``cpu_times`` tuple: all time but idle and iowait (steal counts: a VM's neighbours)."""
    return _total_s(t) - _idle_s(t)


def cpu_ids(n: int, online: str = ONLINE) -> tuple[int, ...]:
    """The kernel's numbers of the ``n`` CPUs psutil lists per CPU (``/proc/stat`` order: the online CPUs
    ascending); 0..n-1 where the online list cannot be read or does not match ``n``."""
    try:
        with open(online, encoding="ascii", errors="replace") as fh:
            ids = parse_cpu_list(fh.read(4096))
    except (OSError, ValueError):
        ids = ()
    return ids if len(ids) == n else tuple(range(n))


def busy_pct(before: Any, after: Any) -> float | None:
    """Busy share (%) of the CPU time between two ``cpu_times`` readings, in [0, 100].

    Same rule as ``psutil.cpu_percent``, except that two readings within one
    clock tick (no CPU time accounted in between) give None, not a made-up 0 %.
    """
    total = _total_s(after) - _total_s(before)
    if total <= 0:
        return None
    busy = total - (_idle_s(after) - _idle_s(before))
    return max(0.0, min(100.0, 100.0 * busy / total))


class CpuCollector(Collector):
    """Rows: ``cpu/total/util_pct``, ``cpu/total/freq_mhz``, ``cpu/total/load1``, ``cpu/cpu<N>/util_pct``, and the
    cumulative counters ``cpu/total/busy_cpu_s`` (host), ``cpu/cpu<N>/busy_cpu_s`` (each CPU) and ``cpu/kit/cpu_s``
    (the kit process)."""

    name = "cpu"

    def __init__(self, period_s: float = DEFAULT_PERIOD_S) -> None:
        super().__init__(period_s)
        self._prev_total: Any = None
        self._prev_cores: list[Any] = []
        self._ids: tuple[int, ...] = ()
        self._has_freq = False

    def probe(self) -> Probe:
        n = psutil.cpu_count() or 0
        freq = _freq_mhz()
        extra = f", frequency {freq:.0f} MHz" if freq else ", no frequency reading"
        return Probe(True, f"psutil {psutil.__version__}: {n} logical CPUs{extra}")

    def _open(self) -> None:
        self._prev_total = psutil.cpu_times()
        self._prev_cores = list(psutil.cpu_times(percpu=True))
        self._ids = cpu_ids(len(self._prev_cores))
        self._has_freq = _freq_mhz() is not None

    def read(self) -> list[Row]:
        total = psutil.cpu_times()
        cores = list(psutil.cpu_times(percpu=True))
        t = time.time()
        rows = []
        util = busy_pct(self._prev_total, total)
        if util is not None:  # None: no tick since the last reading (e.g. the first, right after priming)
            rows.append(Row(t, SOURCE, "total", "util_pct", util, "%"))
            self._prev_total = total
        if len(cores) != len(self._prev_cores):  # a CPU hot-plugged: skip one reading, re-prime
            self._prev_cores = cores
            self._ids = cpu_ids(len(cores))
        else:
            for i, (before, after) in enumerate(zip(self._prev_cores, cores, strict=True)):
                core = busy_pct(before, after)
                if core is not None:
                    rows.append(Row(t, SOURCE, f"cpu{self._ids[i]}", "util_pct", core, "%"))
                    self._prev_cores[i] = after
        if self._has_freq:
            freq = _freq_mhz()
            if freq is not None:
                rows.append(Row(t, SOURCE, "total", "freq_mhz", freq, "MHz"))
        rows.append(Row(t, SOURCE, "total", "load1", os.getloadavg()[0], "1"))
        # Cumulative counters, read at the same instant: the host's busy CPU time (steal included: a VM's
        # neighbours) and this kit process's own. With the trial's CPU time in its phase markers they give
        # the CPU time of everything else during each phase (kit.disturbance).
        rows.append(Row(t, SOURCE, "total", "busy_cpu_s", busy_s(total), "s"))
        # Each CPU's own (issue 43): a pinned trial is judged on its CPUs only. Read with the total, same instant.
        if len(self._ids) == len(cores):
            rows.extend(Row(t, SOURCE, f"cpu{cpu}", "busy_cpu_s", busy_s(c), "s") for cpu, c in zip(self._ids, cores,
                                                                                                  strict=True))
        own = os.times()
        rows.append(Row(t, SOURCE, "kit", "cpu_s", float(own.user + own.system), "s"))
        return rows


def _freq_mhz() -> float | None:
    """Current mean frequency over CPUs, or None where the platform reports none (or 0)."""
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        return None
    if freq is None or not freq.current:
        return None
    return float(freq.current)
