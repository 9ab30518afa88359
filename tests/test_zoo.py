"""Model-zoo studies (Patel et al. sweep and distributed training, Dai et al. factors).

Hardware-free unit tests of the analysis functions first; then (slow) the
model pairs' parameter counts, a forced out-of-memory trial, a skipped trial,
and the three quick profiles end to end with their reports.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kit.backends.base import status_from
from kit.workloads import zoo as zoo_models
from tests._studies import study_module

dai = study_module("dai_single_gpu_factors", "analysis")
zoo = study_module("patel_models_sweep", "analysis")
zoo_dist = study_module("patel_distributed", "analysis")

ROOT = Path(__file__).resolve().parents[1]


# -- pure analysis ------------------------------------------------------------------------------------------------

def test_time_ratio_and_interval() -> None:
    r = zoo.time_ratio([2.0, 2.2, 1.8], [1.0, 1.1, 0.9])
    assert r["ratio"] == pytest.approx(2.0)
    assert r["lo"] < 2.0 < r["hi"] and r["p"] < 0.01
    assert zoo.time_ratio([], [1.0])["ratio"] is None
    assert zoo.time_ratio([2.0], [1.0])["lo"] is None  # one trial: no interval


def test_mfu_counts_training_as_three_forwards() -> None:
    assert zoo.mfu(1e9, 100.0, 1e12, train=False) == pytest.approx(0.1)
    assert zoo.mfu(1e9, 100.0, 1e12, train=True) == pytest.approx(0.3)
    assert zoo.mfu(1e9, 100.0, None, train=True) is None  # unknown peak: n/a, not 0


def test_peak_flops_tables() -> None:
    peak, src = zoo_models.gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak == 989.4e12 and "H100" in src
    assert zoo_models.gpu_peak_flops("NVIDIA H100 PCIe", "tf32")[0] == 378e12  # TF32 tensor cores (fp32 with TF32 on)
    assert zoo_models.gpu_peak_flops("Tesla V100-SXM2-16GB", "fp32")[0] == 15.7e12  # no TF32 on Volta
    assert zoo_models.gpu_peak_flops("Mystery GPU", "fp32")[0] is None
    cpu, why = zoo_models.cpu_peak_flops(2)
    assert why  # a nominal figure says so, and an unknown CPU says why there is none
    if cpu is not None:
        assert cpu > 0 and "NOMINAL" in why


def test_decrease_up_to_a_limit_verdicts() -> None:
    rng = np.random.default_rng(0)

    def curve(levels: list[float]) -> list[tuple[int, list[float]]]:
        return [(2**i, list(v * (1 + 0.01 * rng.standard_normal(20)))) for i, v in enumerate(levels)]

    t = zoo.decreasing_to_limit(curve([1.0, 0.5, 0.3, 0.3, 0.3]), 0.05)
    assert t["verdict"] == "supported" and t["limit"] == 4
    assert zoo.decreasing_to_limit(curve([1.0, 0.5, 0.25, 0.12]), 0.05)["verdict"] == "no limit reached"
    assert zoo.decreasing_to_limit(curve([1.0, 1.0, 1.2]), 0.05)["verdict"] == "not supported"
    assert zoo.decreasing_to_limit(curve([1.0]), 0.05)["verdict"] == "too few points"


def test_param_pairs_flag_different_definitions() -> None:
    cells = [{"model": "a", "arm": "pytorch", "param_count": 1000}, {"model": "a", "arm": "tensorflow",
                                                                     "param_count": 1005},
             {"model": "b", "arm": "pytorch", "param_count": 1000}, {"model": "b", "arm": "tensorflow",
                                                                     "param_count": 1100}]
    pairs = {p["model"]: p for p in zoo.param_pairs(cells, ["tensorflow", "pytorch"])}
    assert not pairs["a"]["differ"] and pairs["b"]["differ"] and pairs["b"]["diff_pct"] == pytest.approx(10.0)


def _design_rows(effects: dict[str, float], noise: float = 0.01) -> list[dict]:
    """A 2^3 full factorial in execution, precision, pipeline over two networks, with planted effects on log(TF/PT)."""
    rng = np.random.default_rng(1)
    rows = []
    for model, base in (("m1", 0.2), ("m2", -0.1)):
        for c in (-1, 1):
            for d in (-1, 1):
                for e in (-1, 1):
                    y = base + effects["execution"] * c + effects["precision"] * d + effects["input_pipeline"] * e
                    rows.append({"model": model, "cudnn_autotune": "off", "layout": "nhwc",
                                 "execution": "compiled" if c > 0 else "eager", "precision": "bf16" if d > 0 else "fp32",
                                 "input_pipeline": e > 0, "log_ratio": y + noise * rng.standard_normal()})
    return rows


def test_factor_effects_recover_planted_effects() -> None:
    res = dai.factor_effects(_design_rows({"execution": 0.3, "precision": 0.0, "input_pipeline": -0.1}), "log_ratio")
    by = {f["factor"]: f for f in res["factors"]}
    assert by["cudnn_autotune"]["status"] == by["layout"]["status"] == "not varied"
    assert by["execution"]["coef"] == pytest.approx(0.3, abs=0.02)
    assert by["execution"]["ratio_multiplier"] == pytest.approx(math.exp(0.6), rel=0.05)
    assert by["input_pipeline"]["coef"] == pytest.approx(-0.1, abs=0.02)
    assert by["execution"]["share"] > by["input_pipeline"]["share"] > by["precision"]["share"]
    assert by["execution"]["significant"] and not by["precision"]["significant"]
    total = sum(f["share"] for f in by.values() if f.get("share") is not None) + res["network_share"] + \
        res["residual_share"]
    assert total == pytest.approx(1.0, abs=1e-6)  # orthogonal design: the shares add up


def test_factor_effects_detect_aliasing() -> None:
    rows = _design_rows({"execution": 0.3, "precision": 0.1, "input_pipeline": 0.0})
    for r in rows:  # make the pipeline follow execution exactly: the two cannot be told apart
        r["input_pipeline"] = r["execution"] == "compiled"
    by = {f["factor"]: f for f in dai.factor_effects(rows, "log_ratio")["factors"]}
    assert by["execution"]["status"] == "estimated" and by["input_pipeline"]["status"] == "aliased"


def test_scaling_efficiency() -> None:
    s = zoo_dist.scaling([100.0, 100.0], [180.0, 190.0], 2)
    assert s["speedup"] == pytest.approx(1.85) and s["efficiency"] == pytest.approx(0.925)
    assert zoo_dist.scaling([], [1.0], 2)["speedup"] is None


def test_skipped_is_a_recognised_status() -> None:
    assert status_from(5, None, False) == "skipped"
    assert status_from(5, {"status": "skipped"}, False) == "skipped"
    assert status_from(1, None, False) == "error"


def test_dai_design_is_the_resolution_v_half_fraction() -> None:
    from kit.spec import load_spec

    spec = load_spec(ROOT / "experiments" / "dai_single_gpu_factors" / "experiment.toml")
    coded = []
    design = {cid: c for cid, c in spec.cases.items() if c.workload.get("mode") != "profile"}
    assert set(spec.cases) - set(design) == {"kernels"}  # the kernel view's profile configuration: no design run
    for case in design.values():
        w = case.workload
        levels = [w["cudnn_autotune"] == "on", w["layout"] == "nhwc", w["execution"] == "compiled", w["precision"] == "bf16",
                  w["input_pipeline"]]
        coded.append([1 if v else -1 for v in levels])
    x = np.array(coded)
    assert len({tuple(r) for r in coded}) == 16
    assert (x.prod(axis=1) == 1).all()  # I = ABCDE
    assert len(spec.grid["model"]) == 7


# -- real frameworks (slow) -----------------------------------------------------------------------------------------

def _harness(tmp_path: Path, workload: str, framework: str, **wl: object) -> tuple[int, dict]:
    """One trial through the harness; a workload a study folder defines runs from that folder (--study), as the
    runner runs it."""
    from kit.spec import load_spec
    from kit.workloads import MOVED_TO_STUDIES, WORKLOADS

    folder = ROOT / "experiments" / MOVED_TO_STUDIES[workload] if workload in MOVED_TO_STUDIES else None
    info = load_spec(folder).workload_info if folder is not None else WORKLOADS[workload]
    params = {k: p.default for k, p in info.params.items()}
    study = {"study": {"workload": workload, "module": info.modules[framework]}} if folder is not None else {}
    req = {"schema": 1, "trial_id": "t", "framework": framework, "seed": 3, "device": "cpu", "threads": 1, **study,
           "dataset": None, "workload": {**params, "name": workload, "batch_size": 4, "epochs": 1,
                                         "learning_rate": 0.01, "momentum": 0.9, "warmup_steps": 1, "device": "cpu",
                                         "threads": 1, "image_size": 32, "num_classes": 10, "repeats": 2, **wl}}
    (tmp_path / "request.json").write_text(json.dumps(req))
    cmd = [sys.executable, "-m", "kit.harness", "--out", str(tmp_path), "--data", str(tmp_path)]
    proc = subprocess.run(cmd + (["--study", str(folder)] if folder is not None else []),
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    return proc.returncode, json.loads((tmp_path / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.torchvision  # resnet18 from torchvision.models
def test_forced_out_of_memory_is_recorded_as_oom(tmp_path: Path) -> None:
    rc, res = _harness(tmp_path, "zoo", "pytorch", model="resnet18", memory_cap_mb=16)
    assert rc == 3 and res["status"] == "oom", res
    assert "allocate" in res["error"].lower()


def test_onednn_primitive_failure_is_oom_only_under_the_memory_cap() -> None:
    # CI saw 1 of 6 oom-probe trials end "error: RuntimeError: could not create a primitive": oneDNN failing
    # to allocate under RLIMIT_DATA (1 of 48 in a local repeat). Under the cap that is the out-of-memory
    # the probe forces; without a cap the same text stays an error. In a child: the cap is process-wide.
    code = (
        "from kit.workloads import common\n"
        "exc = RuntimeError('could not create a primitive')\n"
        "before = common.oom_text(exc)\n"
        "common.apply_memory_cap(4096)\n"
        "print(before, common.oom_text(exc), common.oom_text(RuntimeError('shape mismatch')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "False"]


@pytest.mark.slow
def test_data_parallel_without_gpus_is_skipped_with_reason(tmp_path: Path) -> None:
    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("this host has 2+ GPUs: DataParallel runs")
    rc, res = _harness(tmp_path, "zoo_distributed", "pytorch", strategy="dp", dist_device="auto")
    assert rc == 5 and res["status"] == "skipped" and "CUDA" in res["reason"]


# (model, input side, the libraries' definitions agree at that side)
TV = pytest.mark.torchvision  # the vision models' PyTorch side is torchvision.models
PAIRS = [pytest.param("resnet18", 32, True, marks=TV), pytest.param("mobilenet_v2", 32, True, marks=TV),
         pytest.param("resnet50", 32, True, marks=TV), pytest.param("resnet152", 32, True, marks=TV),
         pytest.param("efficientnet_b4", 32, True, marks=TV), pytest.param("inception_v3", 75, True, marks=TV),
         ("transformer", 32, True), ("speech_crnn", 32, True),
         # torchvision's VGG16 pools adaptively to 7x7 before its classifier, Keras flattens the real feature map:
         # the same network at 224 px, a 4x smaller classifier in Keras at 32 px (the report flags it)
         pytest.param("vgg16", 224, True, marks=TV), pytest.param("vgg16", 32, False, marks=TV),
         ("lstm_lm", 32, True)]  # torch.nn.LSTM has two bias vectors per gate, Keras one: within 1 % here


# One process per framework builds every model the session's parameter-count tests ask for (TensorFlow and
# torchvision in one process can crash): starting the framework once, not once per model, saves about ten seconds a
# model on a 2-core host. Each model is built and counted on its own: one that fails is that test's failure, with
# its traceback, and leaves the others' counts standing.
_COUNT_TORCH = """
import json, sys, traceback
from kit.workloads import zoo_torch
for model in json.loads(sys.argv[1]):
    try:
        print(json.dumps({"key": model, "count": zoo_torch.param_count(zoo_torch.build(model, 10, True, 16))}))
    except Exception:
        print(json.dumps({"key": model, "error": traceback.format_exc()[-2000:]}))
    sys.stdout.flush()
"""
_COUNT_KERAS = """
import gc, json, os, sys, traceback
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras, numpy as np
from kit.workloads import zoo_keras
for model, size in json.loads(sys.argv[1]):
    try:
        m = zoo_keras.build(keras, model, 10, True, 16, size)
        print(json.dumps({"key": [model, size], "count": sum(int(np.prod(w.shape)) for w in m.trainable_weights)}))
        del m
    except Exception:
        print(json.dumps({"key": [model, size], "error": traceback.format_exc()[-2000:]}))
    sys.stdout.flush()
    keras.backend.clear_session()
    gc.collect()
"""


@pytest.fixture(scope="module")
def param_counts(request: pytest.FixtureRequest) -> dict[str, dict[object, object]]:
    """{"pytorch": {model: count or error}, "tensorflow": {(model, size): count or error}} for the pairs that run."""
    wanted = sorted({(it.callspec.params["model"], it.callspec.params["size"]) for it in request.session.items
                     if getattr(it, "originalname", None) == "test_model_pairs_parameter_counts"
                     and it.get_closest_marker("skip") is None and hasattr(it, "callspec")})
    out: dict[str, dict[object, object]] = {}
    for arm, code, keys in (("pytorch", _COUNT_TORCH, sorted({m for m, _ in wanted})), ("tensorflow", _COUNT_KERAS,
                                                                                       wanted)):
        proc = subprocess.run([sys.executable, "-c", code, json.dumps(keys)], capture_output=True, text=True,
                              timeout=600 + 120 * len(keys), cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"key"')]
        got = {(r["key"] if isinstance(r["key"], str) else tuple(r["key"])): r.get("count", r.get("error"))
               for r in rows}
        for key in keys:  # a process that died mid-way: the models it did not reach fail with its stderr
            got.setdefault(key, f"{arm} process exited {proc.returncode} before this model:\n{proc.stderr[-2000:]}")
        out[arm] = got
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("model", "size", "same"), PAIRS)
def test_model_pairs_parameter_counts(model: str, size: int, same: bool,
                                      param_counts: dict[str, dict[object, object]]) -> None:
    """Both frameworks build every model; the libraries' definitions agree where the report says 'same'."""
    pt, tf = param_counts["pytorch"][model], param_counts["tensorflow"][(model, size)]
    assert isinstance(pt, int), pt
    assert isinstance(tf, int), tf
    diff = abs(pt - tf) / pt * 100
    print(f"{model} at {size} px: pytorch {pt:,} tensorflow {tf:,} ({diff:.2f} %)")
    assert (diff <= zoo.PARAM_DIFF_PCT) == same, (pt, tf)


# -- quick profiles end to end (slow) -------------------------------------------------------------------------------

SPECS = {"patel": ROOT / "experiments" / "patel_models_sweep" / "experiment.toml",
         "dist": ROOT / "experiments" / "patel_distributed" / "experiment.toml",
         "dai": ROOT / "experiments" / "dai_single_gpu_factors" / "experiment.toml"}


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            root = tmp_path_factory.mktemp(f"zoo-{name}")
            t0 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "kit", "run", str(SPECS[name]), "-p", "quick", "--backend",
                                   "local", "--runs-dir", str(root / "runs")], capture_output=True, text=True,
                                  timeout=2400, cwd=ROOT, env={**os.environ, "KIT_CACHE_DIR": str(root / "cache")})
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            (run_dir,) = (root / "runs").iterdir()
            print(f"\nquick profile {name}: {time.monotonic() - t0:.0f} s wall")
            done[name] = run_dir
        return done[name]

    return get


def _load(run_dir: Path) -> tuple[dict, list[dict], dict, str]:
    man = json.loads((run_dir / "manifest.json").read_text())
    trials = [json.loads(p.read_text()) for p in (run_dir / "trials").glob("*.json")]
    analysis = json.loads((run_dir / "analysis.json").read_text())
    s = re.sub(r"<svg.*?</svg>", "[SVG]", (run_dir / "report" / "index.html").read_text(), flags=re.S)
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", s)))
    assert man["status"] == "complete"
    return man, trials, analysis, text


@pytest.mark.slow
@pytest.mark.torchvision  # the sweep's PyTorch arm: resnet18, mobilenet_v2 from torchvision.models
def test_patel_quick_profile(quick) -> None:  # type: ignore[no-untyped-def]
    man, trials, analysis, text = _load(quick("patel"))
    by_status: dict[str, list[str]] = {}
    for t in trials:
        by_status.setdefault(t["status"], []).append(t["config_id"] + "-" + t["arm"])
    assert set(by_status) <= {"ok", "oom", "skipped"}, by_status
    oom = [t for t in trials if t["status"] == "oom"]
    assert oom and all(t["arm"] == "pytorch" and t["exit_code"] == 3 for t in oom)  # the probe, and it did not stop the run
    z = analysis["extras"]["zoo"]
    assert {m["status"] for m in z["missing"]} == {"oom", "skipped"}
    assert any(p["model"] == "mobilenet_v2" and not p["differ"] for p in z["param_pairs"])
    assert all(r["ratio"] and r["ratio"] > 0 for r in z["ratios"] if r["case"] != "oom_probe")
    assert {c["decrease_test"]["verdict"] for c in z["curves"] if c["case"] != "oom_probe"} <= {
        "supported", "no limit reached", "not supported", "not testable"}  # 2 trials per point: not testable
    assert {t["unit"] for t in z["decrease_across_curves"].values()} == {"curve"}
    assert all(c.get("mfu_train") is not None for c in z["cells"] if c["status"] == "ok" and c["mode"] == "train_infer")
    for part in ("parameter counts", "Figs. 1–3", "decreases up to a limit", "NOT MEASURED", "model FLOP utilisation",
                 "out of memory", "QUICK PROFILE", "Which framework was faster, per model and phase"):
        assert part in text, part
    # issue 28: CPU inference on the paper's one core, pinned and checked in every trial; the winner table
    cpu_cfgs = {cid for cid, cfg in man["plan"]["configs"].items() if cfg.get("case") == "cpu_mobilenet_v2"}
    pinned = [t["env"].get("cpu_pinning") for t in trials if t["config_id"] in cpu_cfgs and t["status"] == "ok"]
    assert pinned and all(p and len(p["cpus_pinned"]) == 1 and p["intra_op_threads"] == p["inter_op_threads"] == 1
                          for p in pinned)
    labels = {(w["model"], w["label"]) for w in z["winners"]}
    assert ("mobilenet_v2", "inference (CPU, 1 core)") in labels and ("resnet18", "training (CPU)") in labels
    assert all(w["decided"] == (w["p_holm"] < z["alpha"]) for w in z["winners"])


@pytest.mark.slow
@pytest.mark.torchvision  # every strategy trains resnet18 from torchvision.models
def test_distributed_quick_profile(quick) -> None:  # type: ignore[no-untyped-def]
    _man, trials, analysis, text = _load(quick("dist"))
    st = {(t["config_id"], t["arm"]): t["status"] for t in trials}
    d = analysis["extras"]["zoo_distributed"]
    rows = {(r["case"], r["arm"]): r for r in d["rows"]}
    assert rows[("ddp", "pytorch")]["status"] == "ok" and rows[("ddp", "pytorch")]["dist_backend"] == "gloo"
    assert rows[("dp", "tensorflow")]["status"] == "ok" and rows[("dp", "tensorflow")]["devices"] == 2
    assert rows[("dp", "pytorch")]["status"] == "skipped" and "CUDA" in rows[("dp", "pytorch")]["reason"]
    assert rows[("ddp", "tensorflow")]["status"] == "skipped"
    for key in (("ddp", "pytorch"), ("dp", "tensorflow")):
        assert rows[key]["speedup"] > 0 and rows[key]["efficiency"] == pytest.approx(rows[key]["speedup"] / 2)
    assert "error" not in st.values()
    assert "scaling efficiency" in text and "DataParallel replicates over CUDA devices only" in text
    # issue 28: the scaling-efficiency table (N = 2 against one device on CPU devices; 4 and 8 need GPUs)
    eff = {(e["arm"], e["strategy"], e["devices"]): e for e in d["scaling_efficiency"]}
    for key, row in ((("pytorch", "ddp", 2), ("ddp", "pytorch")), (("tensorflow", "dp", 2), ("dp", "tensorflow"))):
        assert eff[key]["efficiency"] == pytest.approx(rows[row]["efficiency"])
        assert eff[key]["low"] is not None and eff[key]["low"] <= eff[key]["efficiency"] <= eff[key]["high"]
    assert eff[("pytorch", "dp", 2)]["efficiency"] is None and "CUDA" in eff[("pytorch", "dp", 2)]["reason"]
    assert "Scaling efficiency per framework, strategy and device count" in text


@pytest.mark.slow
def test_dai_quick_profile(quick) -> None:  # type: ignore[no-untyped-def]
    _man, trials, analysis, text = _load(quick("dai"))
    # the kernels case profiles in repetition 0 only: its later repetition is skipped by design
    bad = [(t["trial_id"], t["error"]) for t in trials if t["status"] != "ok"
           and not (t["status"] == "skipped" and "repetition 0 only" in str(t["error"]))]
    assert not bad and any(t["status"] == "skipped" for t in trials)
    d = analysis["extras"]["dai_factors"]
    (view,) = d["kernels"]
    assert view["model"] == "transformer" and view["domain"] == "cpu" and not view["problems"]
    assert {r["op_type"] for r in view["by_type"]["rows"]} >= {"matmul", "optimizer", "elementwise"}
    assert "which kernels differ" in text.lower()
    by = {f["factor"]: f for f in d["gap_effects"]["factors"]}
    assert by["cudnn_autotune"]["status"] == "not varied" and by["layout"]["status"] == "not varied"
    for f in ("execution", "precision", "input_pipeline"):
        assert by[f]["status"] == "estimated" and by[f]["share"] is not None
    assert all(r["ratio"] for r in d["rows"])
    assert "which factors explain" in text.lower() and "Not varied in this run" in text


def test_registry_model_choices_match_the_workload_models() -> None:
    """kit.workloads lists the zoo models by hand (it must not import numpy); keep it in step with zoo.MODELS."""
    from kit.workloads import ZOO_PARAMS

    assert set(ZOO_PARAMS["model"].choices) == set(zoo_models.MODELS)
