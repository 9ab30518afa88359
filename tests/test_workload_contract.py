"""Issue 13 (worker W): every workload reports the contract's env fields, repeats short phases, and a
device it cannot use is a clear harness error; real (CPU) framework trials."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kit.workloads.common import Markers

CONTRACT_ENV = ("device_kind", "device_name", "gpu_uuid", "gpu_uuids", "tf32", "precision")
LENET = {"name": "lenet5", "batch_size": 50, "epochs": 1, "steps_per_epoch": 10, "learning_rate": 0.05,
         "momentum": 0.5, "infer_batch_size": 250, "warmup_steps": 2, "device": "cpu", "threads": None}
ZOO = {"name": "zoo", "model": "resnet18", "batch_size": 2, "epochs": 1, "learning_rate": 0.01, "momentum": 0.9,
       "warmup_steps": 1, "image_size": 32, "num_classes": 10, "seq_len": 8, "tiny": True, "repeats": 2,
       "mode": "train_infer", "memory_cap_mb": 0, "cudnn_autotune": "native", "layout": "native",
       "execution": "default", "compile_backend": "aot_eager", "precision": "fp32", "input_pipeline": False,
       "device": "cpu", "threads": None}


def _harness(out: Path, req: dict[str, Any], data: Path) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """One trial through the harness; a workload a study folder defines runs from that folder, as the runner
    runs it (``study`` in the request, ``--study``)."""
    from kit.workloads import MOVED_TO_STUDIES

    name = req["workload"].get("name")
    folder = Path(__file__).resolve().parents[1] / "experiments" / MOVED_TO_STUDIES[name] \
        if name in MOVED_TO_STUDIES else None
    if folder is not None:
        req = {**req, "study": {"workload": name, "module": f"workload_{'torch' if req['framework'] == 'pytorch' else 'keras'}"}}
    out.mkdir(parents=True)
    (out / "request.json").write_text(json.dumps(req))
    cmd = [sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(data)]
    proc = subprocess.run(cmd + (["--study", str(folder)] if folder is not None else []),
                          capture_output=True, text=True, timeout=300)
    markers = [json.loads(x) for x in (out / "markers.jsonl").read_text().splitlines()] \
        if (out / "markers.jsonl").exists() else []
    return proc.returncode, json.loads((out / "result.json").read_text()), markers


def _cpu_env_ok(env: dict[str, Any], mode: str = "native") -> None:
    for key in CONTRACT_ENV:
        assert key in env, key
    assert env["device_kind"] == "cpu" and env["device_name"] == "cpu"
    assert env["gpu_uuid"] is None and env["gpu_uuids"] == []
    assert env["tf32"] == {"mode": mode, "matmul": None, "conv": None}


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_lenet_env_tf32_and_min_phase_repeats_inference(tmp_path: Path, mnist_dir: Path, framework: str) -> None:
    """Old code: no device_kind/tf32/precision in env, one inference pass however short."""
    req = {"trial_id": "t", "framework": framework, "seed": 5, "device": "cpu", "threads": None,
           "workload": {**LENET, "tf32": "on", "min_phase_s": 0.4},
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000, "test_size": 500}}
    rc, res, markers = _harness(tmp_path / framework, req, mnist_dir)
    assert rc == 0, res
    _cpu_env_ok(res["env"], "on")
    assert res["env"]["precision"] == "fp32"
    r = res["results"]
    end = next(m for m in markers if m["event"] == "phase_end" and m["phase"] == "infer")
    assert r["infer_passes"] == end["passes"] >= 2
    assert end["duration_s"] >= 0.4
    assert r["infer_time_s"] == pytest.approx(end["duration_s"] / end["passes"])  # per pass, not per phase
    assert r["infer_throughput_ips"] == pytest.approx(500 / r["infer_time_s"])
    assert end["images"] == 500 * end["passes"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_a_gpu_the_trial_cannot_use_is_a_device_error(tmp_path: Path, mnist_dir: Path, framework: str) -> None:
    """This host has no GPU: a trial that asks for one stops with exit 6, the cause and the fix."""
    req = {"trial_id": "t", "framework": framework, "seed": 5, "device": "gpu", "threads": None,
           "gpu_indices": [0], "gpu_uuids": [],
           "workload": {**LENET, "device": "auto"},
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000, "test_size": 500}}
    rc, res, markers = _harness(tmp_path / framework, req, mnist_dir)
    assert rc == 6
    assert res["status"] == "error" and res["error_kind"] == "device"
    assert res["error"].startswith("DeviceUnavailable") and "nvidia-smi" in res["fix"]
    assert "CUDA" in res["cause"] and framework in res["cause"]
    assert not any(m.get("phase") == "train" for m in markers)  # nothing ran on the CPU instead


@pytest.mark.slow
def test_keras_lenet_trains_on_device_tensors_without_fit(tmp_path: Path, mnist_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: Model.fit/predict (a host-side data adapter inside the timed phase)."""
    import keras

    from kit.workloads import lenet_keras

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError("fit/predict route batches through the host-side data adapter")

    for name in ("fit", "predict", "predict_on_batch", "train_on_batch"):
        monkeypatch.setattr(keras.Model, name, refuse)
    req = {"trial_id": "t", "framework": "tensorflow", "seed": 5, "device": "cpu", "threads": None,
           "workload": {**LENET}, "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000,
                                               "test_size": 500}}
    markers = Markers(tmp_path / "m.jsonl")
    results, env = lenet_keras.run(req, mnist_dir, markers)
    assert results["test_accuracy"] > 0.2 and results["infer_passes"] == 1
    _cpu_env_ok(env)


def test_zoo_keras_nchw_builds_channels_first_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: input_shape=(s, s, 3) under channels_first, so every TF trial of the layout factor failed."""
    import keras

    from kit.workloads import zoo_keras

    saved = keras.backend.image_data_format()
    try:
        keras.backend.set_image_data_format("channels_first")
        for model in ("resnet18", "mobilenet_v2"):
            m = zoo_keras.build(keras, model, 10, True, 8, 32)
            assert tuple(m.input_shape) == (None, 3, 32, 32), model
        keras.backend.set_image_data_format("channels_last")
        assert tuple(zoo_keras.build(keras, "resnet18", 10, True, 8, 32).input_shape) == (None, 32, 32, 3)
    finally:
        keras.backend.set_image_data_format(saved)


@pytest.mark.slow
def test_zoo_keras_nchw_trial_runs(tmp_path: Path) -> None:
    """Old code: skipped on the CPU (and failed on a GPU); Keras 3 runs channels_first on the CPU too."""
    req = {"framework": "tensorflow", "seed": 1, "device": "cpu", "workload": {**ZOO, "layout": "nchw"}}
    rc, res, _ = _harness(tmp_path / "out", req, tmp_path)
    assert rc == 0, res
    assert res["results"]["layout"] == "NCHW" and res["results"]["infer_time_s"] > 0
    _cpu_env_ok(res["env"])


@pytest.mark.slow
@pytest.mark.torchvision  # the PyTorch zoo and DDP trials build resnet18 from torchvision.models
def test_zoo_and_distributed_workloads_report_the_env_contract(tmp_path: Path) -> None:
    """Old code: zoo/zoo_dist env had no device_kind, tf32 or precision (zoo_dist_keras: GPU runs as CPU)."""
    from kit.workloads import calibrated

    dist = {**{k: ZOO[k] for k in ("name", "model", "batch_size", "epochs", "learning_rate", "momentum",
                                   "warmup_steps", "image_size", "num_classes", "seq_len", "tiny", "repeats",
                                   "device")},
            "name": "zoo_distributed", "strategy": "single", "devices": 1, "dist_device": "auto"}
    for i, (fw, wl) in enumerate((("pytorch", {**ZOO, "min_phase_s": 0.2}), ("tensorflow", {**ZOO, "min_phase_s": 0.2}),
                                  ("pytorch", dist), ("tensorflow", dist))):
        req = {"framework": fw, "seed": 1, "device": "cpu", "workload": wl}
        rc, res, _ = _harness(tmp_path / str(i), req, tmp_path)
        assert rc == 0, res
        results, env = res["results"], res["env"]
        _cpu_env_ok(env)
        assert env["precision"] == "fp32"
        if "min_phase_s" in wl:
            assert results["infer_passes"] >= 1 and len(results["infer_step_s"]) == 2 * results["infer_passes"]
    req = {"framework": "pytorch", "seed": 1, "workload": {"train_s": 0.0, "infer_s": 0.01, "min_phase_s": 0.05}}
    results, env = calibrated.run(req, tmp_path, Markers(tmp_path / "c.jsonl"))
    assert results["infer_passes"] >= 4 and results["infer_time_s"] == pytest.approx(0.01, rel=0.5)
    _cpu_env_ok(env)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_germino_env_and_min_phase(tmp_path: Path, mnist_dir: Path, framework: str) -> None:
    wl = {"name": "germino", "model": "mlp", "batch_size": 50, "epochs": 1, "steps_per_epoch": 5,
          "learning_rate": 0.001, "optimizer": "adam", "momentum": 0.0, "infer_batch_size": 250,
          "warmup_steps": 2, "device": "cpu", "threads": None, "defaults": "shared", "knn_k": 5,
          "eval_each_epoch": False, "min_phase_s": 0.2, "tf32": "off"}
    req = {"trial_id": "t", "framework": framework, "seed": 3, "device": "cpu", "threads": None, "workload": wl,
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000, "test_size": 500}}
    rc, res, markers = _harness(tmp_path / framework, req, mnist_dir)
    assert rc == 0, res
    _cpu_env_ok(res["env"], "off")
    end = next(m for m in markers if m["event"] == "phase_end" and m["phase"] == "infer")
    assert res["results"]["infer_passes"] == end["passes"] >= 2
    assert res["results"]["infer_time_s"] == pytest.approx(end["duration_s"] / end["passes"])
