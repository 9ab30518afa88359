"""How busy other work keeps the host's CPUs, and waiting (bounded) for a quiet window: `kit run --wait-for-quiet`.

The figure is the one kit.disturbance judges a trial's timed phase by: the host's busy CPU time (steal included)
minus the kit process's own, per second of wall time, i.e. the mean number of CPUs something else kept busy. It is
measured here between two readings of the cumulative counters, with nothing of the kit's running but itself
(before the first trial, or between trials), so no trial's CPU time needs subtracting. For a pinned run (issue 43)
it is read on the trials' CPUs and their SMT siblings only (:class:`LoadScope`), as the phases are judged: a hog on
the kit's own CPU does not make a host busy for trials that never run there.

The wait checks windows of :data:`QUIET_WINDOW_S` (the default idle baseline's span) and pauses between checks with
a growing back-off (:data:`BACKOFF_S`): a load that has lasted a minute is unlikely to end in the next five
seconds, and each check is itself a few seconds of the kit watching the host. It never waits past its duration
and then goes on either way; the caller says which. Clock, sleep and counters are injected for tests.
"""

from __future__ import annotations

import itertools
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from kit.collectors.cpu import _idle_s, _total_s, busy_s, cpu_ids
from kit.errors import KitError

QUIET_WINDOW_S = 5.0  # a quiet window must last this long (the default telemetry.baseline_s)
BACKOFF_S = (0.0, 5.0, 10.0, 20.0, 40.0, 60.0)  # pause before each further check; the last repeats
TICK_S = 1.0  # how often the countdown is told
MAX_WAIT_S = 24 * 3600.0


@dataclass(frozen=True)
class LoadReading:
    """Cumulative CPU counters at one instant: the host's busy CPU-seconds and the kit process's own."""

    t_s: float  # monotonic
    busy_cpu_s: float
    own_cpu_s: float


@dataclass(frozen=True)
class LoadScope:
    """Where other work is counted: ``cpus`` (the pinned trials' CPUs and their SMT siblings; () the whole host),
    and whether the kit itself may run there (its CPU time is then subtracted)."""

    cpus: tuple[int, ...] = ()
    kit_shares: bool = True

    @property
    def where(self) -> str:
        """How a message names the scope: "of N CPUs" host-wide, "on the trials' CPU(s) 1" pinned."""
        return f"on the trials' CPU(s) {','.join(map(str, self.cpus))}" if self.cpus else ""


HOST = LoadScope()


def read_load(clock: Callable[[], float] = time.monotonic, scope: LoadScope = HOST) -> LoadReading:
    own = os.times()
    own_s = float(own.user + own.system) if scope.kit_shares else 0.0
    if not scope.cpus:
        total = psutil.cpu_times()
        return LoadReading(clock(), _total_s(total) - _idle_s(total), own_s)
    per = list(psutil.cpu_times(percpu=True))
    by_id = dict(zip(cpu_ids(len(per)), per, strict=True))
    # a scope CPU /proc/stat does not list is offline: it runs nothing
    return LoadReading(clock(), sum(busy_s(by_id[c]) for c in scope.cpus if c in by_id), own_s)


def foreign_cpu(before: LoadReading, after: LoadReading) -> float | None:
    """Mean CPUs busy with other work between two readings (None: no time between them)."""
    dt = after.t_s - before.t_s
    if dt <= 0:
        return None
    return max(0.0, ((after.busy_cpu_s - before.busy_cpu_s) - (after.own_cpu_s - before.own_cpu_s)) / dt)


@dataclass(frozen=True)
class QuietWait:
    """How a wait for a quiet window ended."""

    quiet: bool  # a window at or below the limit came; False: the duration ran out first
    waited_s: float
    duration_s: float
    limit_cpu: float
    foreign_cpu: float | None  # the last window's figure (None: no window measured)
    checks: int

    def as_dict(self) -> dict[str, Any]:
        return {"quiet": self.quiet, "waited_s": round(self.waited_s, 3), "duration_s": self.duration_s,
                "limit_cpu": self.limit_cpu, "foreign_cpu": None if self.foreign_cpu is None else
                round(self.foreign_cpu, 3), "checks": self.checks}


def wait_for_quiet(duration_s: float, limit_cpu: float, *, read: Callable[[], LoadReading] = read_load,
                   sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                   tick: Callable[[float, float | None], None] | None = None,
                   window_s: float = QUIET_WINDOW_S) -> QuietWait:
    """Wait until other work keeps at most ``limit_cpu`` CPUs busy over a window, or ``duration_s`` has passed.

    ``tick(left_s, last_foreign_cpu)`` is called about every second (the countdown). ``read`` must use the same
    clock as ``clock``. A limit of 0 (the CPU check turned off) has nothing to wait for.
    """
    if not 0 < duration_s <= MAX_WAIT_S or window_s <= 0:
        raise ValueError("duration_s must be in (0, 1 day], window_s > 0")
    t0 = clock()
    if limit_cpu <= 0:
        return QuietWait(True, 0.0, duration_s, limit_cpu, None, 0)
    deadline = t0 + duration_s
    window = min(window_s, duration_s)
    last: float | None = None

    def pause(secs: float) -> None:
        end = clock() + secs
        while (now := clock()) < end:
            if tick is not None:
                tick(max(0.0, deadline - now), last)
            sleep(min(TICK_S, end - now))

    for checks in itertools.count(1):
        # the back-off, cut short so that a last window still fits before the deadline
        gap = min(BACKOFF_S[min(checks - 1, len(BACKOFF_S) - 1)], deadline - clock() - window)
        if checks > 1 and gap < 0:
            return QuietWait(False, clock() - t0, duration_s, limit_cpu, last, checks - 1)
        pause(max(gap, 0.0))
        before = read()
        pause(window)
        last = foreign_cpu(before, read())
        if last is not None and last <= limit_cpu:
            return QuietWait(True, clock() - t0, duration_s, limit_cpu, last, checks)
    raise AssertionError("unreachable")  # pragma: no cover


def parse_wait(text: str) -> float:
    """``10m``, ``1h30m``, ``90s`` or plain seconds -> seconds (KitError naming --wait-for-quiet otherwise)."""
    t = text.strip().lower()
    m = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?", t)
    if not t or not m or not any(m.groups()):
        raise KitError(f"cannot read the duration {text!r}", where="--wait-for-quiet", fix="e.g. 10m, 1h, 90s or 90")
    h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    total = h * 3600 + mi * 60 + s
    if not 1 <= total <= MAX_WAIT_S:
        raise KitError(f"the duration {text!r} is not between 1 s and 24 h", where="--wait-for-quiet",
                       fix="e.g. --wait-for-quiet 10m")
    return total
