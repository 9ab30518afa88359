"""Thermal control: temperatures from fake sysfs / NVML, idle baseline and the bounded cool-down."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from kit.collectors.thermal import (
    NO_SENSOR_NOTE,
    TemperatureReader,
    idle_baseline,
    read_temperatures,
    wait_for_cooldown,
)
from tests._fake_nvml import FakeGpu, FakeNvml, install
from tests._sysfs import hwmon_chip, intel_server_tree, set_temp


class FakeTime:
    """A clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        assert s > 0
        self.sleeps.append(s)
        self.now += s


def cooling(start: dict[str, float], rate_per_read: dict[str, float]) -> Iterator[dict[str, float]]:
    temps = dict(start)
    while True:
        yield dict(temps)
        for k, r in rate_per_read.items():
            temps[k] -= r


def test_read_temperatures_cpu_from_sysfs(tmp_path: Path) -> None:
    chips = intel_server_tree(tmp_path)
    assert read_temperatures(tmp_path, nvml=False) == {"cpu": 57.0}
    set_temp(chips["core0"], 1, 66000)
    assert read_temperatures(tmp_path, nvml=False) == {"cpu": 66.0}  # re-read, not cached


def test_reader_with_gpus_keeps_nvml_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hwmon_chip(tmp_path, 0, "k10temp", {1: ("Tctl", 48000)})
    fake = FakeNvml([FakeGpu(temp_c=41), FakeGpu(temp_c=45)])
    install(monkeypatch, fake)
    reader = TemperatureReader(tmp_path)
    assert reader() == {"cpu": 48.0, "gpu0": 41.0, "gpu1": 45.0}
    fake.gpus[1].lost = True
    assert reader() == {"cpu": 48.0, "gpu0": 41.0}  # a lost GPU is left out, not fatal
    assert fake.inits == 1
    reader.close()
    assert fake.shutdowns == 1


def test_reader_without_nvml_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    install(monkeypatch, fake)
    reader = TemperatureReader(tmp_path)
    assert reader() == {} and reader() == {}
    reader.close()
    assert fake.shutdowns == 0


def test_idle_baseline_is_the_median() -> None:
    ft = FakeTime()
    seq = iter([{"cpu": 40.0, "gpu0": 30.0}, {"cpu": 90.0, "gpu0": 31.0}, {"cpu": 41.0, "gpu0": 32.0},
                {"cpu": 42.0}, {"cpu": 99.0}])
    base = idle_baseline(4.0, 1.0, read=lambda: next(seq), sleep=ft.sleep, clock=ft.clock)
    assert base == {"cpu": 42.0, "gpu0": 31.0}  # spikes (90, 99) do not move the median
    assert sum(ft.sleeps) == pytest.approx(4.0)


def test_cooldown_waits_until_within_band() -> None:
    ft = FakeTime()
    temps = cooling({"cpu": 60.0, "gpu0": 75.0}, {"cpu": 2.0, "gpu0": 5.0})
    res = wait_for_cooldown({"cpu": 45.0, "gpu0": 40.0}, 3.0, 60.0, poll_s=1.0,
                            read=lambda: next(temps), sleep=ft.sleep, clock=ft.clock)
    # gpu0 needs 75 - 5k <= 43: k = 7 reads after the first; cpu is within (60 - 14 = 46 <= 48) by then
    assert res.reached and res.waited_s == pytest.approx(7.0)
    assert res.initial_temps == {"cpu": 60.0, "gpu0": 75.0}
    assert res.start_temps == {"cpu": 46.0, "gpu0": 40.0}
    assert res.baseline == {"cpu": 45.0, "gpu0": 40.0} and res.band_c == 3.0 and res.note == ""
    assert set(res.as_dict()) >= {"waited_s", "reached", "start_temps", "baseline", "band_c"}


def test_cooldown_is_bounded() -> None:
    ft = FakeTime()
    res = wait_for_cooldown({"gpu0": 40.0}, 2.0, 10.0, poll_s=3.0,
                            read=lambda: {"gpu0": 80.0}, sleep=ft.sleep, clock=ft.clock)
    assert not res.reached and res.waited_s == pytest.approx(10.0)
    assert ft.sleeps == [3.0, 3.0, 3.0, 1.0]  # the last sleep is cut to the bound
    assert "gpu0 80.0" in res.note and res.start_temps == {"gpu0": 80.0}


def test_cooldown_already_cool_and_zero_wait() -> None:
    ft = FakeTime()
    res = wait_for_cooldown({"cpu": 40.0}, 3.0, 0.0, read=lambda: {"cpu": 42.0}, sleep=ft.sleep, clock=ft.clock)
    assert res.reached and res.waited_s == 0.0 and ft.sleeps == []
    res = wait_for_cooldown({"cpu": 40.0}, 3.0, 0.0, read=lambda: {"cpu": 50.0}, sleep=ft.sleep, clock=ft.clock)
    assert not res.reached and ft.sleeps == []


def test_cooldown_without_sensors_returns_at_once() -> None:
    ft = FakeTime()
    for baseline, current in (({}, {}), ({}, {"cpu": 50.0}), ({"gpu0": 40.0}, {})):
        res = wait_for_cooldown(baseline, 3.0, 60.0, read=lambda c=current: c, sleep=ft.sleep, clock=ft.clock)
        assert res.reached and res.waited_s == 0.0 and res.note == NO_SENSOR_NOTE
    assert ft.sleeps == []


def test_cooldown_ignores_a_sensor_gone_since_the_baseline() -> None:
    ft = FakeTime()
    res = wait_for_cooldown({"cpu": 40.0, "gpu1": 30.0}, 3.0, 60.0,
                            read=lambda: {"cpu": 41.0}, sleep=ft.sleep, clock=ft.clock)
    assert res.reached and res.waited_s == 0.0


def test_cooldown_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        wait_for_cooldown({"cpu": 40.0}, -1.0, 10.0, read=dict)
    with pytest.raises(ValueError):
        idle_baseline(-1.0, 1.0, read=dict)


def test_real_host_reading_does_not_raise() -> None:
    temps = read_temperatures()
    assert all(isinstance(v, float) for v in temps.values())
