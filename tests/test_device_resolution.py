"""Issue 13 (H): the host resolves device "auto" (GPU iff NVML sees an allowed GPU), gives each trial its
GPU(s), tells the trial (request.json) and records it; "gpu" without one is refused before anything is written.
Runs go through the real runner, local backend and harness with the fake NVML patched into this process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from kit.backends.local import LocalBackend
from kit.errors import KitError
from kit.harness import REQUEST_FILE
from kit.plan import Trial
from kit.run import RunEvents, RunOptions, start_run
from kit.spec import load_spec
from tests._fake_nvml import H100, L40S, FakeGpu, FakeNvml, eight_gpu_host, install

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _spec(tmp_path: Path, device: str, extra: str = "", **telemetry: Any) -> Any:
    text = CALIBRATED.read_text(encoding="utf-8").replace('device = "cpu"', f'device = "{device}"')
    for key, val in telemetry.items():
        text = text.replace(f"{key} = ", f"# {key} = ").replace("[telemetry]\n", f"[telemetry]\n{key} = {val}\n")
    path = tmp_path / "spec.toml"
    path.write_text(text + extra, encoding="utf-8")
    return load_spec(path, None)


# -- the resolution itself ------------------------------------------------------------

def test_auto_resolves_to_gpu_on_the_eight_gpu_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.gpus import DevicePlan, gpus_per_trial, nvml_inventory

    install(monkeypatch, eight_gpu_host())
    inv = nvml_inventory()
    assert [g.name for g in inv.gpus] == [H100] * 4 + [L40S] * 4 and inv.gpus[3].uuid.startswith("GPU-00000003-")
    dev = DevicePlan.build("all").resolve({"device": "auto"})
    assert dev.device == "gpu" and dev.indices == [0] and dev.uuids == [inv.gpus[0].uuid]
    assert dev.request_fields() == {"device": "gpu", "device_requested": "auto", "gpu_indices": [0],
                                    "gpu_uuids": [inv.gpus[0].uuid]}
    assert dev.record_fields()["gpus"] == [{"index": 0, "uuid": inv.gpus[0].uuid, "name": H100}]
    # container.gpus picks which; the first allowed one in the order given
    assert DevicePlan.build("5,3").resolve({"device": "auto"}).indices == [5]
    assert DevicePlan.build("none").resolve({"device": "auto"}).device == "cpu"
    assert DevicePlan.build("all").resolve({"device": "cpu"}).request_fields()["gpu_indices"] == []
    # data-parallel strategies get `devices` GPUs; the one-device baseline one
    dp = {"device": "auto", "strategy": "dp", "devices": 2, "dist_device": "auto"}
    assert DevicePlan.build("4,6,7").resolve(dp).indices == [4, 6]
    assert DevicePlan.build("4,6,7").resolve({**dp, "strategy": "single"}).indices == [4]
    assert gpus_per_trial({"strategy": "ddp", "devices": 4}) == 4 and gpus_per_trial({"device": "gpu"}) == 1
    # dist_device auto on too few GPUs: every strategy on the CPU (like with like)
    assert DevicePlan.build("4").resolve({**dp, "strategy": "single"}).device == "cpu"


def test_auto_is_cpu_and_gpu_is_refused_without_an_allowed_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.gpus import DevicePlan, Inventory, allowed_gpus, nvml_inventory

    install(monkeypatch, FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    plan = DevicePlan.build("all")
    assert plan.resolve({"device": "auto"}).device == "cpu"
    with pytest.raises(KitError) as e:
        plan.resolve({"device": "gpu"})
    assert e.value.where == "workload.device" and "NVML sees no GPU" in e.value.cause and "nvidia-smi" in e.value.fix
    install(monkeypatch, eight_gpu_host())
    with pytest.raises(KitError, match=r'container\.gpus = "none"'):
        DevicePlan.build("none").resolve({"device": "gpu"})
    with pytest.raises(KitError, match="GPU 9, which NVML does not see"):
        allowed_gpus(nvml_inventory(), "0,9")
    assert allowed_gpus(Inventory(()), "0,9") == []  # a CPU host: nothing to check the indices against


def test_inventory_survives_a_lost_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.gpus import DevicePlan, nvml_inventory

    install(monkeypatch, FakeNvml([FakeGpu(lost=True), FakeGpu(temp_c=20)]))
    inv = nvml_inventory()
    assert [g.index for g in inv.gpus] == [1] and "GPU 0 left out" in inv.note
    assert DevicePlan.build("all", inv).resolve({"device": "auto"}).indices == [1]


# -- through the runner ------------------------------------------------------------------

class _Heat(RunEvents):
    """Another user's job heats GPU 5 after the idle baseline, before the first trial."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake

    def trial_started(self, trial: Trial, index: int, total: int) -> None:
        self.fake.gpus[5].temp_c = 95


def test_run_on_the_eight_gpu_host_gives_each_trial_one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = eight_gpu_host()
    install(monkeypatch, fake)
    seen: list[tuple[dict[str, Any], dict[str, str]]] = []
    real_run = LocalBackend.run_trial

    def spy(self: LocalBackend, arm: str, work: Path, data_dir: Path, timeout_s: float, target: Any,
            on_start: Any = None) -> Any:
        env = self.trial_env(target.gpu_indices) if hasattr(self, "trial_env") else {}
        seen.append((json.loads((work / REQUEST_FILE).read_text()), env))
        return real_run(self, arm, work, data_dir, timeout_s, target, on_start)

    monkeypatch.setattr(LocalBackend, "run_trial", spy)
    spec = _spec(tmp_path, "auto", baseline_s=0.3, cooldown_max_s=2.0)
    rd = start_run(spec, RunOptions(runs_root=tmp_path / "runs", collectors=("nvml",), max_trials=2), _Heat(fake))

    uuid0 = "GPU-00000000-0000-4000-8000-abababababab"
    recs = [r.to_json() for r in rd.trial_records()]
    assert len(recs) == 2
    for rec in recs:
        # telemetry of the trial's GPU only: not the mean of eight, no foreign process of GPU 5
        samples = rd.read_samples(rec["trial_id"])
        nvml = samples[samples["source"] == "nvml"]
        assert len(nvml) and set(nvml["device"]) == {"0"}
        assert set(nvml[nvml["metric"] == "foreign_procs"]["value"]) == {0.0}
        # the cool-down did not wait for the hot GPU 5, which the trial does not use
        assert rec["cooldown"]["reached"] and rec["cooldown"]["waited_s"] < 1.0
        assert "gpu5" not in rec["cooldown"]["start_temps"] and "gpu0" in rec["cooldown"]["start_temps"]
        assert rec["device"] == "gpu" and rec["gpus"] == [{"index": 0, "uuid": uuid0, "name": H100}]
    req, env = seen[0]
    assert req["device"] == "gpu" and req["device_requested"] == "auto"
    assert req["gpu_indices"] == [0] and req["gpu_uuids"] == [uuid0]
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    man = rd.manifest()
    assert man.devices["resolved"] == ["gpu"] and man.devices["allowed"] == list(range(8))
    assert len(man.devices["host_gpus"]) == 8
    assert man.baseline["gpu_indices"] == list(range(8))  # the baseline samples every allowed GPU, and says so


def test_gpu_on_a_gpu_less_host_is_refused_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    spec = _spec(tmp_path, "gpu")
    runs = tmp_path / "runs"
    with pytest.raises(KitError) as e:
        start_run(spec, RunOptions(runs_root=runs))
    assert e.value.where == "workload.device" and 'device "gpu"' in e.value.cause
    assert not runs.exists() or not any(runs.iterdir())


def test_cpu_run_on_the_gpu_host_tells_the_trial_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, eight_gpu_host())
    envs: list[dict[str, str]] = []
    real_run = LocalBackend.run_trial

    def spy(self: LocalBackend, arm: str, work: Path, data_dir: Path, timeout_s: float, target: Any,
            on_start: Any = None) -> Any:
        envs.append(self.trial_env(target.gpu_indices) if hasattr(self, "trial_env") else {})
        return real_run(self, arm, work, data_dir, timeout_s, target, on_start)

    monkeypatch.setattr(LocalBackend, "run_trial", spy)
    rd = start_run(_spec(tmp_path, "cpu"), RunOptions(runs_root=tmp_path / "runs", collectors=("nvml",), max_trials=1))
    (rec,) = [r.to_json() for r in rd.trial_records()]
    assert rec["status"] == "ok", rec.get("error")
    assert len(rd.read_samples(rec["trial_id"])) == 0  # a CPU trial: no GPU rows
    assert rec["device"] == "cpu" and rec["gpus"] == [] and envs[0]["CUDA_VISIBLE_DEVICES"] == ""
