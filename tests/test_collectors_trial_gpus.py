"""Issue 13 (H): telemetry of the trial's GPUs only, instantaneous power, and NVML's library mismatch,
on a fake 8-GPU node (tests/_fake_nvml.py: two models, a foreign process on GPU 5, a temperature per GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pynvml
import pytest

import kit.collectors.nvml as nvml_module
from kit.collectors import make_collectors
from kit.collectors.base import TrialTarget
from kit.collectors.nvml import NvmlCollector, gpu_inventory, nvml_probe
from kit.collectors.thermal import TemperatureReader, wait_for_cooldown
from kit.nvml import MISMATCH_FIX
from tests._fake_nvml import FOREIGN_PID, FakeGpu, FakeNvml, eight_gpu_host, install

MISMATCH = pynvml.NVMLLibraryMismatchError(
    "Unversioned function called and the pyNVML version does not match the NVML lib version.")


def _sample(target: TrialTarget) -> tuple[NvmlCollector, list]:
    (c,) = make_collectors(["nvml"], 0.05, target)
    assert isinstance(c, NvmlCollector)
    with c:
        pass
    return c, c.take_rows()


def test_collector_samples_only_the_trials_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, eight_gpu_host())
    c, rows = _sample(TrialTarget(gpu_indices=[2]))
    assert rows and {r.device for r in rows} == {"2"}
    temps = {r.value for r in rows if r.metric == "temp_c"}
    assert temps == {40.0}  # GPU 2's own temperature, not another GPU's or a mean over eight
    assert c.available().ok and "1 GPU(s): 2: NVIDIA H100" in c.available().detail
    _, two = _sample(TrialTarget(gpu_indices=[3, 4]))  # a data-parallel trial: its GPUs, both models
    assert {r.device for r in two} == {"3", "4"}


def test_cpu_trial_samples_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, eight_gpu_host())
    c, rows = _sample(TrialTarget(gpu_indices=[]))
    assert rows == [] and not c.available().ok and "no GPU" in c.available().detail


def test_foreign_process_on_a_gpu_the_trial_does_not_use_is_not_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, eight_gpu_host())
    _, rows = _sample(TrialTarget(pid=os.getpid(), gpu_indices=[0]))
    foreign = [r for r in rows if r.metric == "foreign_procs"]
    assert foreign and {r.device for r in foreign} == {"0"} and all(r.value == 0 for r in foreign)
    # the same process counts where the trial does run on its GPU
    _, on5 = _sample(TrialTarget(pid=os.getpid(), gpu_indices=[5]))
    assert FOREIGN_PID != os.getpid() and {r.value for r in on5 if r.metric == "foreign_procs"} == {1.0}


def test_power_instant_rows_where_the_driver_has_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, eight_gpu_host())
    c, rows = _sample(TrialTarget(gpu_indices=[1, 6]))
    inst = {r.device: r for r in rows if r.metric == "power_instant_w"}
    assert set(inst) == {"1"}  # the H100 has NVML_FI_DEV_POWER_INSTANT, the L40S here does not
    assert inst["1"].value == pytest.approx(160.0) and inst["1"].unit == "W"
    avg = {r.device: r.value for r in rows if r.metric == "power_w"}
    assert avg == {"1": pytest.approx(110.0), "6": pytest.approx(160.0)}  # the ~1 s average is kept beside it
    assert c.missing_fields == {1: [], 6: ["power_instant"]} and c.errors == []
    assert "moving average" in (nvml_module.__doc__ or "")  # power_w is labelled as the driver's ~1 s average


def test_library_mismatch_does_not_kill_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    """An old driver under a new nvidia-ml-py: the process queries raise NVMLLibraryMismatchError (not an NVMLError)."""
    gpu = FakeGpu(raises={"nvmlDeviceGetComputeRunningProcesses": MISMATCH})
    install(monkeypatch, FakeNvml([gpu]))
    c, rows = _sample(TrialTarget(pid=os.getpid()))
    metrics = {r.metric for r in rows}
    assert {"temp_c", "power_w", "gpu_util_pct", "energy_j"} <= metrics and "foreign_procs" not in metrics
    assert "processes" in c.unsupported[0]
    assert any("mismatch" in e.lower() and "nvidia-ml-py" in e for e in c.errors), c.errors


def test_library_mismatch_in_the_middle_of_a_run_is_recorded_and_sampling_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    install(monkeypatch, FakeNvml([gpu]))
    c = NvmlCollector(target=TrialTarget(pid=os.getpid()))
    c._open()
    gpu.raises["nvmlDeviceGetComputeRunningProcesses"] = MISMATCH
    gpu.raises["nvmlDeviceGetTemperature"] = MISMATCH
    rows = c.read()  # no exception
    metrics = {r.metric for r in rows}
    assert "power_w" in metrics and "temp_c" not in metrics and "foreign_procs" not in metrics
    assert any("mismatch" in e.lower() for e in c.errors)
    c._close()


def test_library_mismatch_does_not_kill_probe_or_inventory(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([FakeGpu()], init_exc=MISMATCH))
    probe = nvml_probe()
    assert not probe.ok and "mismatch" in probe.detail.lower() and probe.fix == MISMATCH_FIX
    assert gpu_inventory() == []
    # one getter mismatched: the inventory keeps everything else
    gpu = FakeGpu(raises={"nvmlDeviceGetEccMode": MISMATCH, "nvmlDeviceGetName": MISMATCH})
    install(monkeypatch, FakeNvml([gpu, FakeGpu(temp_c=50)]))
    inv = gpu_inventory()
    assert [g["index"] for g in inv] == [0, 1] and inv[0]["ecc_mode_current"] is None and inv[0]["name"] is None
    assert inv[0]["uuid"] == "GPU-00000000-fake" and inv[1]["name"] == "NVIDIA H100 80GB HBM3"
    assert nvml_probe().ok


def test_cooldown_waits_only_on_the_cpu_and_the_trials_gpus() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    baseline = {"cpu": 40.0, "gpu0": 30.0, "gpu5": 30.0}
    hot5 = {"cpu": 41.0, "gpu0": 31.0, "gpu5": 85.0}  # another user's job heats GPU 5
    res = wait_for_cooldown(baseline, 3.0, 60.0, read=lambda: dict(hot5), sleep=sleep, clock=lambda: now[0],
                            sensors=["cpu", "gpu0"])
    assert res.reached and res.waited_s == 0.0 and "gpu5" not in res.start_temps and "gpu5" not in res.baseline
    res5 = wait_for_cooldown(baseline, 3.0, 60.0, read=lambda: dict(hot5), sleep=sleep, clock=lambda: now[0],
                             sensors=["cpu", "gpu5"])
    assert not res5.reached and "gpu5 85.0 C" in res5.note  # the trial on GPU 5 does wait for it


def test_temperature_reader_survives_a_library_mismatch_and_a_lost_gpu(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    """The cool-down's reader must not take the run down on an old driver (or one lost GPU)."""
    install(monkeypatch, FakeNvml([FakeGpu()], init_exc=MISMATCH))
    assert TemperatureReader(tmp_path)() == {}
    install(monkeypatch, FakeNvml([FakeGpu(raises={"nvmlDeviceGetHandleByIndex": MISMATCH}), FakeGpu(temp_c=44)]))
    assert TemperatureReader(tmp_path)() == {"gpu1": 44.0}
