"""`kit selftest` and host_selftest(): the CPU path for real, the NVML paths on a fake 8-GPU host, the CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest
from typer.testing import CliRunner

from kit import selftest as st
from kit.cli import app
from kit.errors import KitError
from tests._fake_nvml import FakeGpu, FakeNvml, install


class EightGpuNvml(FakeNvml):
    """The shared fake plus what the self-test asks beyond the collector: MIG mode and a moving energy counter."""

    def __init__(self, gpus: list[FakeGpu], energy_step_s: float = 0.02) -> None:
        super().__init__(gpus)
        self.energy_step_s = energy_step_s
        self.t0 = time.perf_counter()

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        return [0, 0]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeGpu) -> int:
        steps = int((time.perf_counter() - self.t0) / self.energy_step_s)
        return self._gpu(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj + 7_000 * steps


def eight_gpus() -> list[FakeGpu]:
    """Two models, a different temperature each, a foreign process on GPU 5 only."""
    gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3" if i < 4 else "NVIDIA A100-SXM4-40GB", temp_c=40 + i) for i in range(8)]
    gpus[5].procs = [(424242, 2 * 2**30)]
    return gpus


@pytest.fixture
def fake8(monkeypatch: pytest.MonkeyPatch) -> EightGpuNvml:
    fake = EightGpuNvml(eight_gpus())
    install(monkeypatch, fake)
    return fake


def _by_name(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in rec["checks"]}


# -- the CPU path, for real ---------------------------------------------------------------------------------------------

def test_host_selftest_cpu_path_for_real_is_fast_and_skips_gpu_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fast by construction, not by a clock: it waits only the windows it is given (the timer's busy-wait, one
    sampling window), starts no child process and imports no framework (what would make it slow)."""
    import builtins
    import subprocess

    imported: list[str] = []
    real_import = builtins.__import__

    def spy_import(name: str, *args: Any, **kwargs: Any) -> Any:
        imported.append(name)
        return real_import(name, *args, **kwargs)

    def no_child(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"the CPU path started a child process: {args[:1]}")

    with monkeypatch.context() as mp:
        mp.setattr(builtins, "__import__", spy_import)
        mp.setattr(subprocess, "Popen", no_child)
        rec = st.host_selftest([], 0.1)
    assert not {n.split(".")[0] for n in imported} & {"torch", "tensorflow", "keras", "jax"}, sorted(set(imported))
    assert rec["schema"] == 1 and rec["gpu"] is False
    checks = _by_name(rec)
    assert checks["CPU timer"]["status"] == "pass" and checks["CPU timer"]["numbers"]["target_s"] == st.CPU_BUSY_S
    assert {checks[f"sampler {n}"]["numbers"]["window_s"] for n in ("cpu", "memory")} == {1.0}  # one window, 1 s
    assert checks["CPU timer"]["numbers"]["deviation"] < 0.01
    for name in ("sampler cpu", "sampler memory"):  # the samplers really ran (the rate they reach is the host's:
        n = checks[name]["numbers"]  # a busy host may fail the check, so the test asserts the rule, not the rate)
        assert n["readings"] >= 3, checks[name]  # the one at start, the one at stop, and the thread's own
        assert checks[name]["status"] == ("pass" if n["rate_hz"] >= st.RATE_FRACTION * n["target_hz"] else "fail")
        assert n["target_hz"] == pytest.approx(10.0), checks[name]
    assert checks["GPU checks"]["status"] == "skip" and "skipped" in checks["GPU checks"]["detail"]
    assert "sampler nvml" not in checks
    assert rec["ok"] is (not any(c["status"] == "fail" for c in rec["checks"]))
    assert set(rec) == {"schema", "ok", "gpu", "checks"}
    for c in rec["checks"]:
        assert set(c) == {"name", "status", "detail", "numbers"} and c["status"] in ("pass", "fail", "skip", "info")
    json.dumps(rec)  # plain data: goes into the manifest as is


def test_cpu_timer_check_fails_when_clocks_disagree(monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.perf_counter
    monkeypatch.setattr(st.time, "perf_counter", lambda: real() * 1.05)  # a timer running 5 % fast
    c = st.cpu_timer_check(0.05)
    assert c["status"] == "fail" and c["numbers"]["deviation"] > 0.01


def test_sampling_rate_leaves_out_the_stop_reading() -> None:
    class R:
        def __init__(self, t: float) -> None:
            self.t, self.device = t, "0"

    rows = [R(i * 0.1) for i in range(11)] + [R(1.01)]  # ten periods, then the reading taken at stop
    n, rate = st.sampling_rate(rows)
    assert n == 11 and rate == pytest.approx(10.0)
    assert st.sampling_rate([]) == (0, None)


# -- NVML paths (fake host: 8 GPUs of two models) -------------------------------------------------------------------------

def test_host_selftest_checks_only_the_given_gpu(fake8: EightGpuNvml) -> None:
    rec = st.host_selftest([2], 0.1, window_s=0.5)
    checks = _by_name(rec)
    assert rec["gpu"] is True and rec["ok"] is True, [c for c in rec["checks"] if c["status"] == "fail"]
    assert checks["GPU 2 identity"]["numbers"]["uuid"] == "GPU-00000002-fake"
    assert not any(name.startswith(("GPU 0 ", "GPU 5 ")) for name in checks)
    assert checks["sampler nvml"]["status"] == "pass"
    assert checks["GPU 2 foreign processes"]["numbers"]["foreign_pids"] == []  # GPU 5's process is not ours to see
    assert checks["NVIDIA driver"]["numbers"] == {"driver": "550.54.15", "cuda": "12.4"}
    energy = checks["GPU 2 energy counter"]
    assert energy["numbers"]["median_interval_s"] == pytest.approx(0.02, rel=0.5)
    assert checks["GPU 2 MIG"]["numbers"]["mig_current"] is False
    assert checks["GPU 2 persistence mode"]["numbers"]["persistence"] is True
    clocks = checks["GPU 2 clocks"]["numbers"]
    assert clocks["app_sm_mhz"] == 1755 and clocks["max_sm_mhz"] == 1980 and clocks["locked"] is True


def test_foreign_process_reported_on_the_trial_gpu(fake8: EightGpuNvml) -> None:
    rec = st.host_selftest([5], 0.1, window_s=0.3)
    c = _by_name(rec)["GPU 5 foreign processes"]
    assert c["numbers"]["foreign_pids"] == [424242] and "stop them" in c["detail"]


def test_unknown_gpu_index_is_a_kit_error(fake8: EightGpuNvml) -> None:
    with pytest.raises(KitError, match="GPU index 9 not present"):
        st.host_selftest([9], 0.1, window_s=0.2)


def test_no_nvml_library_means_skip_not_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    rec = st.host_selftest(None, 0.1, window_s=0.3)
    assert rec["gpu"] is False and _by_name(rec)["GPU checks"]["status"] == "skip"


def test_energy_counter_unsupported_is_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = eight_gpus()
    gpus[1].unsupported = {"nvmlDeviceGetTotalEnergyConsumption"}
    install(monkeypatch, EightGpuNvml(gpus))
    rec = st.host_selftest([1], 0.1, window_s=0.3)
    assert _by_name(rec)["GPU 1 energy counter"]["status"] == "skip"


def test_clock_event_reasons_are_decoded() -> None:
    assert st.decode_reasons(0x1 | 0x4 | 0x40) == ["GPU idle", "software power cap", "hardware thermal slowdown"]
    assert st.decode_reasons(0) == []


# -- frameworks: fake reports of the children ------------------------------------------------------------------------------

def _report(uuid: str | None, n: int = 1, cuda: str | None = "12.6", busy: dict[str, Any] | None = None,
            tf32: dict[str, Any] | None = None) -> dict[str, Any]:
    sel: dict[str, Any] = {"cuda_build": cuda, "device_count": n, "uuid": uuid, "device_name": "NVIDIA H100 80GB HBM3",
                           "tf32": tf32 or {"matmul": False, "conv": True}}
    if busy:
        sel["busy_wait"] = busy
    return {"framework_version": "x", "cuda": cuda, "gpus": ["g"] * n, "selftest": sel}


def _busy(harness: float, event: float, target: float = 0.5) -> dict[str, Any]:
    return {"target_s": target, "cycles": 900_000_000, "cycles_per_s": 1.8e9, "harness_s": [harness] * 3,
            "event_s": [event] * 3}


def test_a_framework_on_the_cpu_fails_with_the_driver_reason() -> None:
    reports = {"pytorch": _report(None, n=0, cuda="13.0"), "tensorflow": _report("GPU-00000002-fake", cuda="12.5.1")}
    checks = _by_name(st.record(st.framework_checks(reports, "GPU-00000002-fake", "550.54.15", 2), True))
    assert checks["framework pytorch"]["status"] == "fail"
    assert "would run on the CPU" in checks["framework pytorch"]["detail"]
    assert "needs a driver >= 580" in checks["framework pytorch"]["detail"]
    assert checks["framework tensorflow"]["status"] == "pass"


def test_same_kind_different_uuids_fails() -> None:
    reports = {"pytorch": _report("GPU-00000002-fake"), "tensorflow": _report("GPU-00000003-fake")}
    checks = _by_name(st.record(st.framework_checks(reports, "GPU-00000002-fake", "580.65.06", 2), True))
    assert checks["framework pytorch"]["status"] == "pass"
    assert checks["framework tensorflow"]["status"] == "fail" and "another GPU" in checks["framework tensorflow"]["detail"]


def test_uuid_forms_compare_equal() -> None:
    from kit.images.probe import uuid_text

    raw = bytes(range(16))
    assert uuid_text(raw) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert st._same_uuid(uuid_text(raw), "00010203-0405-0607-0809-0A0B0C0D0E0F")
    assert not st._same_uuid(None, None)


def test_busy_wait_within_and_outside_one_percent() -> None:
    ok = st.busy_wait_check("pytorch", _busy(0.5021, 0.5000))
    assert ok["status"] == "pass" and ok["numbers"]["deviation_vs_event"] < 0.01
    bad = st.busy_wait_check("pytorch", _busy(0.5150, 0.5000))
    assert bad["status"] == "fail"
    drift = st.busy_wait_check("pytorch", _busy(0.5500, 0.5480))
    assert drift["status"] == "pass" and "clocks not locked" in drift["detail"]


def test_tf32_defaults_reported_and_difference_named() -> None:
    reports = {"pytorch": _report("GPU-00000000-fake", tf32={"matmul": False, "conv": True}),
               "tensorflow": _report("GPU-00000000-fake", tf32={"matmul": True, "conv": True})}
    c = _by_name(st.record(st.framework_checks(reports, "GPU-00000000-fake", "580.65.06", 0), True))["TF32 defaults"]
    assert c["status"] == "info" and "differ" in c["detail"]
    assert c["numbers"]["pytorch"] == {"matmul": False, "conv": True}


def test_cpu_host_framework_seeing_a_gpu_fails() -> None:
    checks = _by_name(st.record(st.framework_checks({"pytorch": _report("GPU-x", n=1)}, None, None, None), False))
    assert checks["framework pytorch"]["status"] == "fail"
    assert checks["GPU busy-wait"]["status"] == "skip"


def test_run_selftest_on_fake_gpu_host(fake8: EightGpuNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int | None]] = []

    def child(fw: str, gpu: int | None, busy_s: float) -> dict[str, Any]:
        seen.append((fw, gpu))
        env = st.child_env(gpu)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == str(gpu)
        if fw == "pytorch":
            return _report("GPU-00000003-fake", cuda="12.6", busy=_busy(0.5004, 0.5001))
        return _report("GPU-00000004-fake", cuda="12.5.1")  # a different GPU than the one sampled

    monkeypatch.setattr(st, "run_local_child", child)
    rec = st.run_selftest(gpu=3, window_s=0.3)
    checks = _by_name(rec)
    assert seen == [("pytorch", 3), ("tensorflow", 3)]
    assert rec["ok"] is False and rec["gpu_index"] == 3
    assert checks["same GPU in every framework"]["status"] == "fail"
    assert checks["framework pytorch"]["status"] == "pass"
    assert checks["GPU busy-wait"]["status"] == "pass"
    assert checks["pytorch CUDA vs driver"]["status"] == "pass"  # 12.6 on 550 through minor-version compatibility


def test_run_selftest_rejects_bad_arguments(fake8: EightGpuNvml) -> None:
    with pytest.raises(KitError, match="GPU 8 is not on this host"):
        st.run_selftest(gpu=8)
    with pytest.raises(KitError, match="--images needs --backend docker"):
        st.run_selftest(images=["pytorch-2.14-cu130"])
    with pytest.raises(KitError, match="not supported"):
        st.run_selftest(backend="apptainer")


def test_docker_backend_probes_each_row_with_only_the_gpu(fake8: EightGpuNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int | None]] = []

    def image_child(row: Any, gpu: int | None, busy_s: float) -> dict[str, Any]:
        calls.append((row.name, gpu))
        return _report("GPU-00000001-fake", cuda=row.cuda)

    monkeypatch.setattr(st, "run_image_child", image_child)
    rec = st.run_selftest(gpu=1, backend="docker", images=["pytorch-2.14-cu130", "tensorflow-2.21-cu125"], window_s=0.3)
    assert calls == [("pytorch-2.14-cu130", 1), ("tensorflow-2.21-cu125", 1)]
    checks = _by_name(rec)
    assert checks["same GPU in every framework"]["status"] == "pass"
    assert checks["pytorch-2.14-cu130 CUDA vs driver"]["status"] == "fail"  # CUDA 13.0 on driver 550
    assert rec["ok"] is False


# -- CLI ---------------------------------------------------------------------------------------------------------------------

def _fake_run(ok: bool) -> Any:
    def run(**kwargs: Any) -> dict[str, Any]:
        checks = [st.check("CPU timer", "pass", "fine"), st.check("GPU checks", "skip", "skipped: no GPU")]
        if not ok:
            checks.append(st.check("framework pytorch", "fail", "sees no GPU"))
        return {**st.record(checks, False), "backend": "local", "gpu_index": None}

    return run


def test_cli_prints_a_table_and_exits_nonzero_on_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(st, "run_selftest", _fake_run(False))
    res = CliRunner().invoke(app, ["selftest", "--json-file", str(tmp_path / "st.json")])
    assert res.exit_code == 1
    assert "framework pytorch" in res.output and "FAIL" in res.output
    assert json.loads((tmp_path / "st.json").read_text())["ok"] is False


def test_cli_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "run_selftest", _fake_run(True))
    res = CliRunner().invoke(app, ["selftest"])
    assert res.exit_code == 0, res.output
    assert "self-test passed" in res.output and "GPU checks skipped" in res.output


def test_cli_argument_error_is_a_kit_error() -> None:
    res = CliRunner().invoke(app, ["selftest", "--images", "pytorch-2.14-cu130"])
    assert isinstance(res.exception, KitError)


@pytest.mark.slow
def test_cli_selftest_for_real_on_this_host(tmp_path: Path) -> None:
    """Both frameworks' children really run; on a CPU host they must report no GPU."""
    res = CliRunner().invoke(app, ["selftest", "--json-file", str(tmp_path / "st.json")])
    rec = json.loads((tmp_path / "st.json").read_text())
    checks = _by_name(rec)
    if not rec["gpu"]:
        assert res.exit_code == 0, res.output
        assert checks["framework pytorch"]["status"] == "pass"
        assert checks["framework tensorflow"]["status"] == "pass"
        assert checks["GPU busy-wait"]["status"] == "skip"


def test_an_nvml_init_error_outside_the_nvml_tree_means_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("Driver/library version mismatch")

    monkeypatch.setattr(pynvml, "nvmlInit", boom)
    rec = st.host_selftest(None, 0.1, window_s=0.3)
    assert rec["gpu"] is False and "version mismatch" in _by_name(rec)["GPU checks"]["detail"]
