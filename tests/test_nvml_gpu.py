"""Real NVML on a real GPU (marked gpu: skipped where NVML sees none). Run by benchmarks/gpu_evidence.sh.

What the fake NVML of the other tests cannot show: that the kit's session opens the real library, that the
collector reaches the sampling rate it is asked for, that the energy counter only grows and agrees with
power x time over a second, and that every session the kit opens is closed again."""

from __future__ import annotations

import itertools
import os
import time

import pytest

from kit.collectors.base import TrialTarget
from kit.collectors.nvml import NvmlCollector, gpu_inventory, nvml_probe
from kit.collectors.thermal import TemperatureReader
from kit.errors import NVMLError
from kit.gpus import nvml_inventory
from kit.nvml import nvml_session


def _gpu_count() -> int:
    try:
        with nvml_session() as nv:
            return int(nv.nvmlDeviceGetCount())
    except NVMLError:
        return 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_count() == 0, reason="NVML sees no GPU on this host")]


def test_inventory_and_probe_agree() -> None:
    inv = nvml_inventory()
    rich = gpu_inventory()
    assert inv.gpus and len(inv.gpus) == len(rich) == _gpu_count()
    assert [g.uuid for g in inv.gpus] == [r["uuid"] for r in rich]
    assert rich[0]["driver_version"] and rich[0]["memory_total_bytes"] > 0
    assert nvml_probe([0]).ok


def test_collector_rate_energy_and_power_agree() -> None:
    period = 0.1
    with NvmlCollector(period_s=period, target=TrialTarget(pid=os.getpid(), gpu_indices=[0])) as c:
        time.sleep(2.0)
    rows = c.take_rows()
    assert c.errors == [], c.errors
    power = sorted((r.t, r.value) for r in rows if r.metric == "power_w")
    energy = sorted((r.t, r.value) for r in rows if r.metric == "energy_j")
    span = power[-1][0] - power[0][0]
    rate = (len(power) - 1) / span
    print(f"NVML power_w rows: {len(power)} over {span:.2f} s = {rate:.1f}/s (asked {1 / period:g}/s)")
    assert rate > 0.7 / period
    assert energy, "no energy_j rows (Volta or newer has the counter)"
    values = [v for _, v in energy]
    assert all(b >= a for a, b in itertools.pairwise(values)), "the energy counter went backwards"
    counter_j = values[-1] - values[0]
    integral_j = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(power))
    print(f"energy counter {counter_j:.2f} J vs power integral {integral_j:.2f} J over {span:.2f} s")
    assert counter_j > 0 and 0.5 < counter_j / integral_j < 2


def test_temperature_reader_and_sessions_close() -> None:
    reader = TemperatureReader()
    temps = reader()
    reader.close()
    assert 10 < temps["gpu0"] < 110
    # Every session above was closed: one more open/close cycle works and sees the same GPUs.
    with nvml_session() as nv:
        assert nv.nvmlDeviceGetCount() == _gpu_count()
