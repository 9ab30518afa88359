"""Memory collector: host RAM and the trial's resident memory.

Host rows always: ``memory/host/used_bytes`` (psutil's ``used``) and
``memory/host/available_bytes``. Trial rows once the backend has filled the
shared :class:`TrialTarget` (it is read at every reading, since the trial starts
after the collectors): with a cgroup, ``memory/trial/cgroup_bytes`` from
``memory.current`` (v2) or ``memory.usage_in_bytes`` (v1), plus the kernel's
own high-water mark ``cgroup_peak_bytes`` (``memory.peak`` / ``memory.max_usage_in_bytes``)
where the kernel offers it, which catches peaks between two readings;
otherwise ``memory/trial/rss_bytes``, the RSS summed over ``target.pid`` and
its descendants (the tree re-listed every second, see ``TreeCache``). Shared pages count once per process, so the sum can exceed
what the tree really holds; for a container the cgroup figure is the one to trust,
but it also counts the page cache charged to the cgroup (the dataset files it
read), so it exceeds the processes' RSS.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psutil

from kit.collectors._sysfs import read_int
from kit.collectors.base import DEFAULT_PERIOD_S, Collector, Probe, Row, TrialTarget

SOURCE = "memory"
CGROUP_USAGE = ("memory.current", "memory.usage_in_bytes")  # v2, v1
CGROUP_PEAK = ("memory.peak", "memory.max_usage_in_bytes")  # v2 (Linux 5.19+), v1


def process_tree(pid: int) -> list[psutil.Process]:
    """``pid`` and all its descendants; [] when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def tree_pids(pid: int | None) -> set[int]:
    """PIDs of ``pid``'s process tree (empty for None or a gone process)."""
    if pid is None:
        return set()
    return {p.pid for p in process_tree(pid)}


def tree_rss_bytes(pid: int) -> int | None:
    """Summed RSS of ``pid``'s tree; None when the root process is gone."""
    return rss_bytes(process_tree(pid))


def rss_bytes(procs: list[psutil.Process]) -> int | None:
    """Summed RSS of ``procs`` (the root first); None when the root is gone."""
    if not procs:
        return None
    total = 0
    for i, p in enumerate(procs):
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            if i == 0:
                return None
            continue  # a child that exited between the listing and now
    return total


class TreeCache:
    """A process tree re-listed at most every ``refresh_s`` seconds.

    Listing descendants means reading every process's ``/proc/<pid>/stat``
    (psutil has no cheaper way): about 4 ms with 120 processes, tens of ms on
    a busy server, too much for every 100 ms reading. Between listings the
    known processes are re-read; a child started since is picked up at the
    next listing (within ``refresh_s``).
    """

    def __init__(self, refresh_s: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self.clock = clock
        self._pid: int | None = None
        self._t = float("-inf")
        self._procs: list[psutil.Process] = []

    def processes(self, pid: int | None) -> list[psutil.Process]:
        """The tree of ``pid`` (root first), from the cache when it is fresh."""
        if pid is None:
            return []
        now = self.clock()
        if pid != self._pid or now - self._t >= self.refresh_s:
            self._pid, self._t, self._procs = pid, now, process_tree(pid)
        return self._procs

    def pids(self, pid: int | None) -> set[int]:
        return {p.pid for p in self.processes(pid)}


def cgroup_bytes(cgroup: Path) -> tuple[int | None, int | None]:
    """(usage, peak) of a cgroup directory in bytes, v2 names first; None where absent."""
    usage = next((v for f in CGROUP_USAGE if (v := read_int(cgroup / f)) is not None), None)
    peak = next((v for f in CGROUP_PEAK if (v := read_int(cgroup / f)) is not None), None)
    return usage, peak


class MemoryCollector(Collector):
    """Rows: ``memory/host/{used,available}_bytes`` and ``memory/trial/{rss,cgroup,cgroup_peak}_bytes``."""

    name = "memory"

    def __init__(self, period_s: float = DEFAULT_PERIOD_S, target: TrialTarget | None = None) -> None:
        super().__init__(period_s)
        self.target = target if target is not None else TrialTarget()
        self.tree = TreeCache()
        self._cgroup_warned = False

    @classmethod
    def build(cls, period_s: float, target: TrialTarget, sysfs_root: Path, **options: object) -> MemoryCollector:
        return cls(period_s, target)

    def probe(self) -> Probe:
        vm = psutil.virtual_memory()
        return Probe(True, f"psutil {psutil.__version__}: {vm.total / 2**30:.1f} GiB host RAM")

    def read(self) -> list[Row]:
        vm = psutil.virtual_memory()
        t = time.time()
        rows = [
            Row(t, SOURCE, "host", "used_bytes", float(vm.used), "B"),
            Row(t, SOURCE, "host", "available_bytes", float(vm.available), "B"),
        ]
        cgroup, pid = self.target.cgroup, self.target.pid
        if cgroup is not None:
            usage, peak = cgroup_bytes(Path(cgroup))
            if usage is None:
                # a cgroup that no longer exists went away with its container (the trial ended): not an error
                if Path(cgroup).exists() and not self._cgroup_warned:  # the cgroup goes away with its container: say it once
                    self._cgroup_warned = True
                    self.note_error(f"{cgroup}: no readable {' or '.join(CGROUP_USAGE)}")
            else:
                rows.append(Row(t, SOURCE, "trial", "cgroup_bytes", float(usage), "B"))
                if peak is not None:
                    rows.append(Row(t, SOURCE, "trial", "cgroup_peak_bytes", float(peak), "B"))
        elif pid is not None:
            rss = rss_bytes(self.tree.processes(pid))
            if rss is not None:  # None: the trial has ended; not an error
                rows.append(Row(t, SOURCE, "trial", "rss_bytes", float(rss), "B"))
        return rows
