"""The kernel view of the Dai et al. study: op-type matching, both profilers' parsers on captured output, the
profile trial's plumbing, the host's validation of its (untrusted) tables, and the report section.

Fixtures (tests/data/kernel_profiles/, made by its capture.py on this CPU host with the real profilers):
names.json holds the kernel_profile of seven profile trials (PyTorch eager / torch.compile aot_eager /
resnet18; TensorFlow tf.function / eager / XLA / resnet18); the two .xplane.pb.gz are TensorFlow's own
XSpace files of two of them. GPU kernel names cannot be captured here: the GPU rows below are names as
cuDNN, cuBLAS, CUTLASS and PyTorch's CUDA kernels spell them, marked as such, not captured output.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kit.analysis.design import config_phases
from kit.workloads import kernel_profile as kp
from kit.workloads import kernel_profile_torch as kpt
from kit.workloads import kernel_profile_xplane as xp
from kit.workloads.common import SkipTrial, WorkloadError

DATA = Path(__file__).resolve().parent / "data" / "kernel_profiles"
NAMES = json.loads((DATA / "names.json").read_text(encoding="utf-8"))
STUDY = "dai_single_gpu_factors"


def _fixture_names() -> set[str]:
    return {r["name"] for prof in NAMES.values() for t in prof["tables"] for r in t["rows"]}


# -- op types -------------------------------------------------------------------------------------------------------

CAPTURED = {  # name (captured on this host) -> op type
    "aten::convolution_backward": "conv_bwd", "autograd::engine::evaluate_function: ConvolutionBackward0": "conv_bwd",
    "_MklNativeConv2DBackpropFilter": "conv_bwd", "_MklNativeConv2DBackpropInput": "conv_bwd",
    "aten::mkldnn_convolution": "conv_fwd", "_MklNativeConv2D": "conv_fwd",
    "aten::mm": "matmul", "aten::addmm": "matmul", "AddmmBackward0": "matmul", "_MklBatchMatMulV2": "matmul",
    "_MklEinsum": "matmul", "MatMul": "matmul", "dot": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "matmul",
    "aten::native_batch_norm": "norm", "aten::native_layer_norm_backward": "norm",
    "aten::max_pool2d_with_indices": "pooling", "_MklNativeMaxPool": "pooling", "_MklNativeMaxPoolGrad": "pooling",
    "aten::sum": "reduction", "Sum": "reduction", "BiasAddGrad": "reduction", "_MklSoftmax": "reduction",
    "SparseSoftmaxCrossEntropyWithLogits": "reduction", "multiply_reduce_fusion": "reduction",
    "aten::copy_": "layout", "aten::clone": "layout", "Tile": "layout", "transpose_copy_fusion": "layout",
    "copy": "layout", "ConcatV2": "layout",
    "Optimizer.step#SGD.step": "optimizer", "Optimizer.step/aten::add_": "optimizer", "sgd/Mul": "optimizer",
    "sgd/AssignAddVariableOp": "optimizer",
    "Mul": "elementwise", "aten::gelu": "elementwise", "aten::add_": "elementwise", "ReluGrad": "elementwise",
    "multiply_subtract_fusion": "elementwise", "wrapped_add": "elementwise",
    "torch::autograd::AccumulateGrad": "elementwise",
    "aten::view": "other", "aten::transpose": "other", "aten::select": "other", "aten::index_select": "other",
    "ReadVariableOp": "other", "ExpandDims": "other", "BroadcastGradientArgs": "other",
    "TorchDynamo Cache Lookup": "other", "AOTDispatcher Runtime Wrapper Prologue": "other",
    "CompiledFunctionBackward": "other",
}
GPU_SPELLINGS = {  # NOT captured here (no GPU): names as the vendors' and PyTorch's CUDA kernels spell them
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16": "conv_fwd",
    "sm80_xmma_dgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw": "conv_bwd",
    "sm80_xmma_wgrad_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw": "conv_bwd",
    "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>": "conv_fwd",
    "ampere_sgemm_128x64_nn": "matmul", "volta_sgemm_128x64_tn": "matmul",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>": "matmul",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>": "norm",
    "void at::native::(anonymous namespace)::max_pool_forward_nhwc<float, float>": "pooling",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>": "reduction",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>": "elementwise",
    "void cudnn::ops::nchwToNhwcKernel<float, float, float, true, false>": "layout",
    "Memcpy HtoD (Pageable -> Device)": "layout", "Memset (Device)": "layout",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<TensorListMetadata<3>>": "optimizer",
    "void LSTM_elementWise_fp<float, float, float>": "rnn",
}


@pytest.mark.parametrize("table", [CAPTURED, GPU_SPELLINGS], ids=["captured", "gpu-spellings"])
def test_op_type_of_real_names(table: dict[str, str]) -> None:
    wrong = {n: (kp.op_type(n), want) for n, want in table.items() if kp.op_type(n) != want}
    assert not wrong


def test_captured_names_are_in_the_fixture_and_every_name_has_a_known_type() -> None:
    names = _fixture_names()
    assert set(CAPTURED) <= names, sorted(set(CAPTURED) - names)  # the table above is real output
    assert {kp.op_type(n) for n in names} <= set(kp.OP_TYPES)
    # the frameworks' views overlap in every major type: the matching is not one framework's vocabulary
    for fw in ("pytorch", "tensorflow"):
        kinds = {kp.op_type(r["name"]) for k, p in NAMES.items() if k.startswith(fw) for t in p["tables"]
                 for r in t["rows"]}
        assert {"conv_fwd", "conv_bwd", "matmul", "optimizer", "elementwise", "layout", "reduction"} <= kinds, fw


def test_rule_table_is_data() -> None:
    assert list(kp.OP_TYPES)[-1] == "other" and all(kind in kp.OP_TYPES for kind, _ in kp.RULES)
    assert kp.op_type("") == "other" and kp.op_type("some_unknown_thing") == "other"


# -- the typed table -------------------------------------------------------------------------------------------------


def test_build_table_caps_rows_and_keeps_totals() -> None:
    totals = [kp.OpTotal(f"aten::op{i}", 0.001 * (i + 1), i + 1) for i in range(60)] + [
        kp.OpTotal("aten::op0", 0.5, 1), kp.OpTotal("bad\nname\x00" + "x" * 500, 0.3, 1)]
    t = kp.build_table("cpu", "test", 3, totals)
    assert len(t.rows) == kp.MAX_ROWS and t.n_names == 61
    assert t.rows[0].name == "aten::op0" and t.rows[0].self_s == pytest.approx(0.501)  # merged by name
    assert math.isclose(sum(t.by_type_s.values()), t.total_s)
    assert math.isclose(t.other_s + sum(r.self_s for r in t.rows), t.total_s)
    kept = t.rows[1]  # the second largest: kept, cleaned to one printable line, cut
    assert kept.name.startswith("bad?name?x") and len(kept.name) == kp.MAX_NAME_CHARS and kept.name.isprintable()
    for bad in (kp.OpTotal("a", float("nan"), 1), kp.OpTotal("a", -1.0, 1), kp.OpTotal("a", 1.0, -1)):
        with pytest.raises(ValueError):
            kp.build_table("cpu", "test", 1, [bad])
    with pytest.raises(ValueError):
        kp.build_table("tpu", "test", 1, [])


# -- TensorFlow: the XSpace parser ----------------------------------------------------------------------------------


def _xplane_pb2() -> Any:
    """TensorFlow's generated xplane_pb2, loaded from its file alone (importing the tensorflow package would
    take seconds): the same module the profile trial parses with."""
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("tensorflow is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    mod_spec = importlib.util.spec_from_file_location("_kit_test_xplane_pb2", path)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


def _ev(name: str, off: int, dur: int, display: str = "") -> xp.Event:
    return xp.Event(name, display, off, dur)


def test_xspace_self_times_nesting_thunks_and_calls() -> None:
    events = [
        _ev("ExecutorState::Process", 0, 1000),  # runtime, not an op
        _ev("model/while:While", 10, 500, "While"),  # an op with ops nested in it
        _ev("model/while/body/MatMul:MatMul", 20, 200, "MatMul"),
        _ev("sgd/Mul_3:Mul", 600, 100, "Mul"),
        _ev("__inference_step_9:__inference_step_9", 700, 300, "__inference_step_9"),  # a function call
        _ev(xp.THUNK_PARENT, 710, 200),
        _ev("multiply_reduce_fusion.3", 720, 50),
        _ev("end: multiply_reduce_fusion.3", 770, 0),
        _ev("MatMul_1.2", 780, 40),
        _ev("EagerLocalExecute: Conv2D", 2000, 80),
        _ev("EagerLocalExecute: __inference_f_1", 3000, 80),
        _ev("ThreadpoolListener::Record", 3100, 0),
    ]
    got = xp.line_self_times(events)
    assert got == [("While", 300e-12), ("MatMul", 200e-12), ("sgd/Mul", 100e-12), ("multiply_reduce_fusion", 50e-12),
                   ("MatMul", 40e-12), ("Conv2D", 80e-12)]
    planes = [("/host:CPU", [("python", events)]),
              ("/device:GPU:0", [("Stream #7(Compute)", [_ev("ampere_sgemm_128x64_nn", 0, 5000)]),
                                 ("XLA Ops", [_ev("dot.1", 0, 5000)])])]  # a derived line: not counted twice
    tot = xp.space_totals(planes)
    assert {t.name: t.calls for t in tot["cpu"]}["MatMul"] == 2
    assert [(t.name, t.self_s) for t in tot["gpu"]] == [("ampere_sgemm_128x64_nn", 5000e-12)]


@pytest.mark.parametrize("key,fixture", [("tensorflow/transformer/default", "transformer_graph.xplane.pb.gz"),
                                         ("tensorflow/transformer/compiled", "transformer_xla.xplane.pb.gz")])
def test_xspace_fixture_reproduces_the_trials_table(key: str, fixture: str) -> None:
    """TensorFlow 2.21's own XSpace of a real profile trial, parsed again, gives the table the trial returned."""
    planes = xp.parse_xspace(gzip.decompress((DATA / fixture).read_bytes()), _xplane_pb2())
    tot = xp.space_totals(planes)
    assert tot["gpu"] == [] and tot["cpu"]
    (stored,) = NAMES[key]["tables"]
    table = kp.build_table("cpu", stored["source"], stored["steps"], tot["cpu"])
    assert table.n_names == stored["n_names"] and table.total_s == pytest.approx(stored["total_s"])
    assert [(r.name, r.calls) for r in table.rows] == [(r["name"], r["calls"]) for r in stored["rows"]]
    names = {t.name for t in tot["cpu"]}
    assert not any(n.startswith(("__", "end: ", "ThreadpoolListener", "ExecutorState")) for n in names)
    if "xla" in fixture:
        assert "dot" in names and not any(n[-1].isdigit() for n in names)  # HLO names without their suffixes
    else:
        assert any(n.startswith("sgd/") for n in names) and "_MklBatchMatMulV2" in names


def test_xspace_refuses_garbage_links_and_oversize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(WorkloadError, match="not an XSpace"):
        xp.parse_xspace(b"\xff\xff\xff\xff garbage", _xplane_pb2())
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (tmp_path / "secret").write_bytes(b"x")
    (run / "host.xplane.pb").symlink_to(tmp_path / "secret")
    assert xp.find_xplanes(tmp_path) == []  # a link is never followed
    (run / "host.xplane.pb").unlink()
    big = run / "host.xplane.pb"
    big.write_bytes(b"\0" * 64)
    monkeypatch.setattr(xp, "MAX_XPLANE_BYTES", 16)
    with pytest.raises(WorkloadError, match="at most 16 bytes"):
        xp.read_xspace(xp.find_xplanes(tmp_path)[0])


# -- PyTorch: the profiler's events ---------------------------------------------------------------------------------


@dataclass
class _FE:
    name: str
    self_cpu_time_total: float
    cpu_parent: Any = None
    device_type: str = "DeviceType.CPU"
    key: str = ""
    count: int = 1
    self_device_time_total: float = 0.0

    def __post_init__(self) -> None:
        self.key = self.key or self.name


def test_torch_cpu_totals_key_the_optimizer_update() -> None:
    step = _FE("Optimizer.step#SGD.step", 50.0)
    add = _FE("aten::add_", 20.0, cpu_parent=_FE("aten::_foreach_add_", 0.0, cpu_parent=step))
    events = [step, add, _FE("aten::add_", 5.0), _FE("sgemm", 99.0, device_type="DeviceType.CUDA")]
    got = {t.name: (round(t.self_s * 1e6, 9), t.calls) for t in kpt.cpu_totals(events)}
    assert got == {"Optimizer.step#SGD.step": (50, 1), "Optimizer.step/aten::add_": (20, 1), "aten::add_": (5, 1)}
    dev = kpt.device_totals([_FE("sgemm", 0, device_type="DeviceType.CUDA", count=3, self_device_time_total=30.0),
                             _FE("aten::mm", 9.0)])
    assert [(t.name, t.calls) for t in dev] == [("sgemm", 3)] and dev[0].self_s == pytest.approx(30e-6)


@pytest.mark.slow  # imports torch and starts its profiler: 13 s on the loaded 2-core machine
def test_torch_profiler_live_totals_match_key_averages() -> None:
    """The real profiler on a tiny model: re-keying under Optimizer.step loses no time and no call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 5))
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 2])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
    tot = kpt.cpu_totals(prof.events())
    ka = prof.key_averages()
    assert sum(t.self_s for t in tot) == pytest.approx(sum(e.self_cpu_time_total for e in ka) * 1e-6, rel=1e-9)
    assert sum(t.calls for t in tot) == sum(e.count for e in ka)
    kinds = {kp.op_type(t.name) for t in tot}
    assert {"conv_fwd", "conv_bwd", "norm", "matmul", "optimizer"} <= kinds


# -- the profile trial's plumbing -----------------------------------------------------------------------------------


@dataclass
class _Inner:
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    sync: Any = None

    def event(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def test_profile_markers_profile_the_train_phase_only_and_record_no_phase() -> None:
    inner, calls = _Inner(sync=lambda: None), []
    pm = kp.ProfileMarkers(inner, on_start=lambda: calls.append("start"), on_end=lambda: calls.append("stop"))
    for phase in ("warmup", "train", "infer"):
        pm.start(phase)
        assert pm.end(phase, images=4) >= 0
    assert calls == ["start", "stop"] and pm.profiled
    assert {e for e, _ in inner.events} == {"profile_phase_start", "profile_phase_end"}  # no phase_start: no phase
    pm.sync = print
    assert inner.sync is print


def test_profile_request_skips_later_repetitions_and_checks_steps() -> None:
    wl: dict[str, Any] = {"mode": "profile", "profile_steps": 3, "repeats": 100, "min_phase_s": 1.0}
    req: dict[str, Any] = {"trial_id": "r000-c04-pytorch", "workload": wl}
    sub = kp.profile_request(req)
    assert sub["workload"] == {"mode": "train_infer", "profile_steps": 3, "repeats": 3, "min_phase_s": 0.0}
    with pytest.raises(SkipTrial, match="repetition 0 only"):
        kp.profile_request({**req, "trial_id": "r002-c04-pytorch"})
    with pytest.raises(WorkloadError, match="profile_steps"):
        kp.profile_request({**req, "workload": {**wl, "profile_steps": 0}})
    with pytest.raises(WorkloadError, match="mode"):
        kp.profile_request({**req, "workload": {**wl, "mode": "train_infer"}})


def test_a_profile_configuration_measures_no_phase() -> None:
    spec = {"cases": {"kernels": {"workload": {"mode": "profile"}}}, "workload": {"params": {"mode": "train_infer"}}}
    assert config_phases(spec, {"case": "kernels", "model": "vgg16"}) == ()
    assert config_phases(spec, {"model": "vgg16"}) == ("train", "infer")


def test_a_skipped_repetition_imports_no_framework() -> None:
    """The study's workload modules skip a later repetition of the profile configuration before any framework
    import (the quick profile's budget): run as the harness imports them, in a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path\n"
        "from kit.workloads.study_import import import_study_module\n"
        "from kit.workloads.common import SkipTrial\n"
        "for name in ('workload_torch', 'workload_keras'):\n"
        "    mod = import_study_module(Path('experiments/dai_single_gpu_factors'), name)\n"
        "    try:\n"
        "        mod.run({'trial_id': 'r001-c04-x', 'workload': {'mode': 'profile'}}, Path('.'), None)\n"
        "    except SkipTrial:\n"
        "        pass\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))\n")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
