"""Images for today's releases: the CUDA rows, TensorFlow's run-time CUDA environment, verify's GPU checks."""

from __future__ import annotations

from typing import Any

import pytest

from kit.images import verify as vf
from kit.images.lock import parse_lock
from kit.images.matrix import load_matrix
from kit.images.render import cuda_env, render


def test_cuda_rows_for_the_current_releases() -> None:
    m = load_matrix()
    torch = m.get("pytorch-2.14-cu130")
    tf = m.get("tensorflow-2.21-cu125")
    assert (torch.version, torch.device, torch.cuda) == ("2.14.1", "cuda", "13.0")
    assert (tf.version, tf.device, tf.cuda) == ("2.21.0", "cuda", "12.5.1")
    assert any(r.startswith("tensorflow[and-cuda]==2.21") for r in tf.requirements)
    assert m.default_for("tensorflow", "cuda").name == "tensorflow-2.21-cu125"
    for row in (torch, tf):
        pins = {p.key: p.version for p in parse_lock(row.lock_text(), row.lock)}
        assert pins.get(row.framework if row.framework == "tensorflow" else "torch") == row.version
    tf_pins = {p.key for p in parse_lock(tf.lock_text(), tf.lock)}
    assert {"nvidia-cudnn-cu12", "nvidia-cuda-nvcc-cu12", "nvidia-cublas-cu12"} <= tf_pins


def test_tensorflow_cuda_dockerfile_finds_its_pip_cuda_and_xla_tools() -> None:
    text = render(load_matrix().get("tensorflow-2.21-cu125"), "dockerfile").text
    nv = "/opt/venv/lib/python3.11/site-packages/nvidia"
    env_line = next(ln for ln in text.splitlines() if ln.startswith("ENV LD_LIBRARY_PATH="))
    for lib in ("cudnn", "cublas", "cuda_runtime", "cufft", "cusparse", "nvjitlink", "nccl"):
        assert f"{nv}/{lib}/lib" in env_line
    assert f'XLA_FLAGS="--xla_gpu_cuda_data_dir={nv}/cuda_nvcc"' in text  # libdevice under nvvm/libdevice there
    assert f'PATH="{nv}/cuda_nvcc/bin:${{PATH}}"' in text  # ptxas
    assert text.index("ENV LD_LIBRARY_PATH") > text.index("FROM ", text.index("AS install") + 1)  # in the run stage


def test_apptainer_definition_of_a_tf_cuda_row_exports_the_same() -> None:
    text = render(load_matrix().get("tensorflow-2.21-cu125"), "apptainer").text
    assert "export XLA_FLAGS=\"--xla_gpu_cuda_data_dir=" in text
    assert "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}" in text  # keeps the host driver libraries Apptainer adds


@pytest.mark.parametrize("name", ["pytorch-2.14-cu130", "pytorch-2.13-cpu", "tensorflow-2.21-cpu"])
def test_other_rows_get_no_cuda_environment(name: str) -> None:
    row = load_matrix().get(name)
    assert cuda_env(row, row.lock_text()) == {}
    assert "XLA_FLAGS" not in render(row, "dockerfile").text


# -- verify ------------------------------------------------------------------------------------------------------------

def _reported(row_name: str, gpus: list[str], ops: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    row = load_matrix().get(row_name)
    rep: dict[str, Any] = {"framework": row.framework, "python": "3.11.15", "framework_version": row.version,
                           "cuda": row.cuda or None, "cudnn": row.cudnn or None, "uid": 1000, "gpus": gpus}
    if ops is not None:
        rep["gpu_ops"] = ops
    return rep


def test_cuda_row_whose_probe_sees_no_gpu_fails() -> None:
    row = load_matrix().get("tensorflow-2.21-cu125")
    bad, _ = vf.compare(row, _reported(row.name, []))
    assert [m.key for m in bad] == ["gpu"]


def test_cuda_row_with_gpu_and_working_ops_passes() -> None:
    row = load_matrix().get("tensorflow-2.21-cu125")
    ops = [{"op": "tf matmul GPU:0", "ok": True, "detail": "ok"}, {"op": "tf XLA jit_compile GPU:0", "ok": True,
                                                                   "detail": "ok"}]
    bad, _ = vf.compare(row, _reported(row.name, ["/physical_device:GPU:0"], ops))
    assert bad == []


def test_a_failing_xla_op_is_a_mismatch() -> None:
    row = load_matrix().get("tensorflow-2.21-cu125")
    ops = [{"op": "tf matmul GPU:0", "ok": True, "detail": "ok"},
           {"op": "tf XLA jit_compile GPU:0", "ok": False, "detail": "InternalError: libdevice not found at ./libdevice.10.bc"}]
    v = vf.Verification(row.name, "t", "i", _reported(row.name, ["/physical_device:GPU:0"], ops))
    v.mismatches, v.notes = vf.compare(row, v.reported)
    assert [m.key for m in v.mismatches] == ["gpu op: tf XLA jit_compile GPU:0"]
    err = vf.mismatch_error([v])
    assert err is not None and "libdevice" in err.cause
    rows = vf.table_rows(v, row)
    assert ("gpu op: tf XLA jit_compile GPU:0", "runs on the GPU",
            "InternalError: libdevice not found at ./libdevice.10.bc", False) in rows
    assert ("gpu", "a GPU visible", "/physical_device:GPU:0", True) in rows


def test_cpu_rows_need_no_gpu() -> None:
    row = load_matrix().get("pytorch-2.13-cpu")
    bad, _ = vf.compare(row, _reported(row.name, []))
    assert bad == []


def test_verify_row_attaches_gpus_and_asks_for_gpu_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(vf, "find_built", lambda eng, row: {"tag": f"localhost/kit/{row.name}:x", "id": "sha256:1"})
    monkeypatch.setattr(vf, "record", lambda *a, **k: None)
    monkeypatch.setattr(vf, "gpu_requests", lambda eng: (["all-gpus"], ""))

    def probe(eng: Any, tag: str, fw: str, reqs: Any = None, args: tuple[str, ...] = ()) -> dict[str, Any]:
        calls.append((tag, fw, reqs, args))
        name = tag.split("/")[-1].split(":")[0]
        ops = [{"op": "o", "ok": True, "detail": "ok"}] if "--gpu-ops" in args else None
        return _reported(name, ["GPU 0"] if reqs else [], ops)

    monkeypatch.setattr(vf, "run_probe", probe)
    m = load_matrix()
    assert vf.verify_row(object(), m.get("pytorch-2.14-cu130")).ok  # type: ignore[arg-type]
    assert vf.verify_row(object(), m.get("pytorch-2.13-cpu")).ok  # type: ignore[arg-type]
    assert calls[0][2:] == (["all-gpus"], ("--gpu-ops",))
    assert calls[1][2:] == (None, ())


def test_verify_row_without_a_gpu_fails_the_cuda_row_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vf, "find_built", lambda eng, row: {"tag": "t", "id": "i"})
    monkeypatch.setattr(vf, "record", lambda *a, **k: None)
    monkeypatch.setattr(vf, "gpu_requests", lambda eng: (None, "this host has no NVIDIA GPU (NVML sees none)"))
    monkeypatch.setattr(vf, "run_probe", lambda eng, tag, fw, reqs=None, args=(): _reported("tensorflow-2.21-cu125", []))
    v = vf.verify_row(object(), load_matrix().get("tensorflow-2.21-cu125"))  # type: ignore[arg-type]
    assert not v.ok and any("no NVIDIA GPU" in n for n in v.notes)


def test_probe_reports_no_gpu_ops_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.images import probe

    monkeypatch.setattr(probe, "probe", lambda fw: {"framework": fw, "gpus": []})
    assert "gpu_ops" not in probe.main(["pytorch", "--gpu-ops"])
    monkeypatch.setattr(probe, "probe", lambda fw: {"framework": fw, "gpus": ["cuda:0"]})
    monkeypatch.setattr(probe, "torch_gpu_ops", lambda: [{"op": "torch matmul cuda:0", "ok": True, "detail": "ok"}])
    assert probe.main(["pytorch", "--gpu-ops"])["gpu_ops"][0]["ok"] is True
