"""Collector registry: name -> class, plus building and probing them for a run or ``kit doctor``."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kit.collectors.base import DEFAULT_PERIOD_S, Collector, TrialTarget
from kit.collectors.cpu import CpuCollector
from kit.collectors.hwmon import HwmonCollector
from kit.collectors.memory import MemoryCollector
from kit.collectors.nvml import NvmlCollector
from kit.collectors.rapl import RaplCollector
from kit.errors import CollectorError

COLLECTORS: dict[str, type[Collector]] = {
    "cpu": CpuCollector,
    "memory": MemoryCollector,
    "hwmon": HwmonCollector,
    "nvml": NvmlCollector,
    "rapl": RaplCollector,
}


def _classes(names: Iterable[str]) -> list[tuple[str, type[Collector]]]:
    out = []
    for name in names:
        if name not in COLLECTORS:
            raise CollectorError(f"unknown collector {name!r}", where="telemetry.collectors",
                                 fix=f"use some of: {', '.join(COLLECTORS)}")
        out.append((name, COLLECTORS[name]))
    return out


def make_collectors(
    names: Iterable[str],
    period_s: float = DEFAULT_PERIOD_S,
    target: TrialTarget | None = None,
    *,
    sysfs_root: Path = Path("/sys"),
    gpu_indices: list[int] | None = None,
) -> list[Collector]:
    """Instantiate the named collectors (no work done: probing is ``available()``).

    ``target`` is shared, not copied: the backend fills it once the trial has
    started and the memory and NVML collectors see it at their next reading.
    Unknown names raise :class:`CollectorError`.
    """
    shared = target if target is not None else TrialTarget()
    options: dict[str, Any] = {"gpu_indices": gpu_indices}
    return [cls.build(period_s, shared, sysfs_root, **options) for _, cls in _classes(names)]


def probe_all(
    names: Iterable[str] = tuple(COLLECTORS), *, sysfs_root: Path = Path("/sys"), gpu_indices: list[int] | None = None
) -> list[dict[str, Any]]:
    """One dict per collector (name, ok, detail, fix), for ``kit doctor`` and the manifest."""
    out = []
    for c in make_collectors(names, target=TrialTarget(), sysfs_root=sysfs_root, gpu_indices=gpu_indices):
        probe = c.available()
        out.append({"name": c.name, "ok": probe.ok, "detail": probe.detail, "fix": probe.fix})
    return out


__all__ = ["COLLECTORS", "Collector", "TrialTarget", "make_collectors", "probe_all"]
