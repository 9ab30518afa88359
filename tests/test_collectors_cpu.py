"""CPU collector with real psutil, and the utilisation rule on made-up cpu_times."""

from __future__ import annotations

import time
from collections import namedtuple

import psutil
import pytest

from kit.collectors.cpu import CpuCollector, busy_pct

Times = namedtuple("Times", "user nice system idle iowait irq softirq steal guest guest_nice")


def times(user: float = 0, system: float = 0, idle: float = 0, iowait: float = 0, guest: float = 0) -> Times:
    return Times(user, 0.0, system, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


def test_busy_rule_like_psutil() -> None:
    before = times(user=10, system=5, idle=100, iowait=5)
    # +3 s user (of which 1 s guest, already inside user), +1 s system, +4 s idle, +2 s iowait
    after = times(user=13, system=6, idle=104, iowait=7, guest=1)
    assert busy_pct(before, after) == pytest.approx(100 * 4 / 10)


def test_no_tick_gives_none_not_zero() -> None:
    t = times(user=1, idle=1)
    assert busy_pct(t, t) is None


def test_busy_is_clamped() -> None:
    # counters that go backwards (a hypervisor quirk) must not give a negative share
    assert busy_pct(times(user=5, idle=5), times(user=4, idle=7)) == 0.0


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_reading_with_real_psutil() -> None:
    c = CpuCollector()
    assert c.available().ok
    c._open()
    spin(0.3)
    rows = c.read()
    by = {(r.device, r.metric): r for r in rows}
    n = psutil.cpu_count()
    assert {d for d, m in by if m == "util_pct"} == {"total", *(f"cpu{i}" for i in range(n))}
    assert all(0 <= r.value <= 100 and r.unit == "%" for r in rows if r.metric == "util_pct")
    assert by[("total", "util_pct")].value > 0  # we just kept one CPU busy for 0.3 s
    assert max(by[(f"cpu{i}", "util_pct")].value for i in range(n)) > 0
    assert by[("total", "load1")].unit == "1" and by[("total", "load1")].value >= 0
    if psutil.cpu_freq() and psutil.cpu_freq().current:
        assert by[("total", "freq_mhz")].unit == "MHz" and by[("total", "freq_mhz")].value > 0
    assert len({r.t for r in rows}) == 1 and {r.source for r in rows} == {"cpu"}


def test_state_is_per_collector_not_global(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scripted CPU times: 10 s busy between a's and b's opening, then 10 s idle. a's window holds both (50 %),
    b's only the idle part (0 %). Were the previous reading shared (psutil's module-global cpu_percent state,
    which the second open or any other psutil user resets), a would read 0 % as well."""
    real = psutil.cpu_times()
    zero = real._replace(**dict.fromkeys(real._fields, 0.0))
    clock = {"user": 0.0, "idle": 0.0}
    n = psutil.cpu_count() or 1

    def fake_cpu_times(percpu: bool = False) -> object:
        t = zero._replace(**clock)
        return [t] * n if percpu else t

    monkeypatch.setattr(psutil, "cpu_times", fake_cpu_times)
    a, b = CpuCollector(), CpuCollector()
    a._open()
    clock["user"] += 10.0
    b._open()  # would reset a's window if the state were psutil's module-global one
    psutil.cpu_percent(interval=None)  # another user of psutil's global state
    clock["idle"] += 10.0
    ua = {r.device: r.value for r in a.read() if r.metric == "util_pct"}
    ub = {r.device: r.value for r in b.read() if r.metric == "util_pct"}
    assert ua["total"] == pytest.approx(50.0) and ua["cpu0"] == pytest.approx(50.0)
    assert ub["total"] == pytest.approx(0.0)


def test_background_sampling() -> None:
    with CpuCollector(period_s=0.02) as c:
        spin(0.25)
    rows = c.take_rows()
    ts = sorted({r.t for r in rows if r.metric == "load1"})
    assert len(ts) >= 4 and ts == sorted(ts)
    assert c.errors == [] and not c.running
    assert c.take_rows() == []  # taken
