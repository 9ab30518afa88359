"""The collector contract (base class) and the registry."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from kit.collectors import COLLECTORS, make_collectors, probe_all
from kit.collectors.base import Collector, Probe, Row, TrialTarget
from kit.collectors.memory import MemoryCollector
from kit.collectors.nvml import NvmlCollector
from kit.errors import CollectorError
from tests._sysfs import intel_server_tree


class Toy(Collector):
    name = "toy"
    stop_timeout_s: ClassVar[float] = 0.05

    def __init__(self, period_s: float = 0.01, *, fail_open: bool = False, fail_every: int = 0) -> None:
        super().__init__(period_s)
        self.fail_open = fail_open
        self.fail_every = fail_every
        self.n = 0
        self.closed = 0
        self.block = threading.Event()
        self.blocking = False
        self.in_read = threading.Event()  # set once a blocking read() has begun

    def probe(self) -> Probe:
        return Probe(True, "toy")

    def _open(self) -> None:
        if self.fail_open:
            raise OSError("device busy")

    def read(self) -> list[Row]:
        self.n += 1
        if self.blocking:
            self.in_read.set()
            self.block.wait(5)
        if self.fail_every and self.n % self.fail_every == 0:
            raise ValueError(f"bad reading {self.n % 2}")
        return [Row(time.time(), "toy", "0", "x", float(self.n), "1")]

    def _close(self) -> None:
        self.closed += 1


def test_errors_are_deduplicated_and_counted() -> None:
    c = Toy(fail_every=2)
    c._open()
    for _ in range(10):
        c._sample_once()
    assert c.errors == ["ValueError: bad reading 0"] and c.n_errors == 5
    assert len(c.take_rows()) == 5
    report = c.report(5).as_dict()
    assert report["errors"][0] == "ValueError: bad reading 0" and "5 errors in all" in report["errors"][1]


def test_open_failure_is_recorded_not_raised() -> None:
    with Toy(fail_open=True) as c:
        assert not c.running
    assert c.errors == ["open failed: OSError: device busy"] and c.closed == 1 and c.take_rows() == []


def test_a_hung_reading_does_not_hang_exit() -> None:
    """``__exit__`` gives up on a reading in flight after ``stop_timeout_s``: it returns while the sampler thread is
    still inside ``read()`` (no clock asserted: the thread's state says whether exit waited for the reading)."""
    c = Toy()
    c.__enter__()
    c.blocking = True
    assert c.in_read.wait(5), "the sampler never entered read()"  # hang guard; the thread is now stuck in read()
    sampler = c._thread
    assert sampler is not None
    c.__exit__(None, None, None)
    assert sampler.is_alive() and not c.block.is_set()  # exit returned with the reading still blocked
    assert c.closed == 0 and "still busy" in c.errors[-1]
    c.block.set()
    sampler.join(5)


def test_rows_are_kept_in_order_and_exit_reads_once_more() -> None:
    with Toy() as c:
        time.sleep(0.05)
    values = [r.value for r in c.take_rows()]
    assert values == sorted(values) and values[0] == 1.0 and len(values) >= 3 and c.closed == 1


def test_registry_builds_without_work(tmp_path: Path) -> None:
    target = TrialTarget()
    cs = make_collectors(list(COLLECTORS), 0.5, target, sysfs_root=tmp_path, gpu_indices=[0])
    assert [c.name for c in cs] == ["cpu", "memory", "hwmon", "nvml", "rapl"]
    assert all(c.period_s == 0.5 and c._probe is None for c in cs)  # nothing probed yet
    mem = next(c for c in cs if isinstance(c, MemoryCollector))
    nv = next(c for c in cs if isinstance(c, NvmlCollector))
    assert mem.target is target and nv.target is target and nv.gpu_indices == [0]
    with pytest.raises(CollectorError, match="unknown collector 'gpu'"):
        make_collectors(["cpu", "gpu"])


def test_probe_all_on_a_fake_tree(tmp_path: Path) -> None:
    intel_server_tree(tmp_path)
    got = {p["name"]: p for p in probe_all(("cpu", "hwmon", "rapl"), sysfs_root=tmp_path)}
    assert set(got) == {"cpu", "hwmon", "rapl"}
    assert all(p["ok"] and set(p) == {"name", "ok", "detail", "fix"} for p in got.values())
    empty = {p["name"]: p for p in probe_all(("hwmon", "rapl"), sysfs_root=tmp_path / "none")}
    assert not empty["hwmon"]["ok"] and empty["rapl"]["fix"]
