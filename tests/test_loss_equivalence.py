"""Issue 15 item 5: the cross-framework loss agreement's tolerance follows the recorded precision.

Figures (derivation in kit/analysis/equivalence.py next to LOSS_EPS): fp32 1e-3 (the old fixed figure);
TF32 8 x 2^-10 = 7.8e-3; fp16 4 x 2^-10 = 3.9e-3; bf16 4 x 2^-7 = 3.1e-2.
"""

from __future__ import annotations

import pytest

from kit.analysis import equivalence

CPU = {"device_kind": "cpu", "precision": "fp32", "tf32": {"mode": "off", "matmul": None, "conv": None}}
H100_TF32 = {"device_kind": "gpu", "precision": "tf32", "compute_capability": [9, 0],
             "tf32": {"mode": "on", "matmul": True, "conv": True}}
H100_FP32 = {"device_kind": "gpu", "precision": "fp32", "compute_capability": [9, 0],
             "tf32": {"mode": "off", "matmul": False, "conv": False}}


def _trials(gap: float, env_a: dict, env_b: dict, blocks: int = 3) -> list[dict]:
    out = []
    for b in range(blocks):
        for arm, loss, env in (("tensorflow", 1.0, env_a), ("pytorch", 1.0 + gap, env_b)):
            out.append({"trial_id": f"r{b}-{arm}", "arm": arm, "block": b, "config_id": "c00", "status": "ok",
                        "warmup": False, "env": env, "results": {"train_loss": loss, "param_count": 61706,
                                                                 "test_accuracy": 0.9}})
    return out


def test_fp32_keeps_the_old_figure() -> None:
    t = equivalence.loss_tolerance(CPU, CPU)
    assert (t["tolerance"], t["format"]) == (1e-3, "fp32")
    assert "deterministic" in t["determinism"]
    eq = equivalence.check_equivalence(_trials(5e-4, CPU, CPU), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["verified"] and eq["loss_tolerance"] == 1e-3
    assert not equivalence.check_equivalence(_trials(2e-3, CPU, CPU), ["tensorflow", "pytorch"])["loss_agrees"]
    gpu = equivalence.loss_tolerance(H100_FP32, H100_FP32)  # TF32 off: fp32 on the GPU, non-determinism covered
    assert gpu["tolerance"] == 1e-3 and "not recorded" in gpu["determinism"]


def test_tf32_widens_the_tolerance_and_says_why() -> None:
    # 3e-3: the largest gap of the truncating-TF32 emulation (one arm fp32, the other TF32) - an equivalent model
    eq = equivalence.check_equivalence(_trials(3e-3, H100_FP32, H100_TF32), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["verified"]  # the fixed 1e-3 called this pair "not verified equivalent"
    assert eq["loss_tolerance"] == pytest.approx(8 * 2**-10)
    (basis,) = eq["loss_tolerance_basis"]
    assert basis["rule"].startswith("tf32: 8 x eps 2^-10") and "assumed non-deterministic" in basis["determinism"]
    assert eq["loss_tolerance_formats"] == ["fp32 on the GPU (TF32 off or not supported)",
                                            "precision tf32 recorded (the dominant op class ran in TF32) on the gpu"]
    # a different initialisation moves the loss by 9e-2 or more: still caught
    assert not equivalence.check_equivalence(_trials(5e-2, H100_TF32, H100_TF32), ["tensorflow", "pytorch"])["loss_agrees"]


def test_tf32_of_the_minor_op_class_counts() -> None:
    # an LSTM (matmul-dominant) with TF32 convolutions only: precision says fp32, the convolutions ran in TF32
    env = dict(H100_FP32, tf32={"mode": "native", "matmul": False, "conv": True})
    t = equivalence.loss_tolerance(env, H100_FP32)
    assert t["format"] == "tf32" and t["formats"][0] == "TF32 on for conv on a GPU of compute capability [9, 0]"
    turing = dict(env, compute_capability=[7, 5])  # no TF32 hardware before Ampere
    assert equivalence.loss_tolerance(turing, H100_FP32)["format"] == "fp32"


@pytest.mark.parametrize(("precision", "tol"), [("bf16", 4 * 2**-7), ("fp16", 4 * 2**-10)])
def test_half_precisions(precision: str, tol: float) -> None:
    env = dict(H100_TF32, precision=precision)
    t = equivalence.loss_tolerance(env, H100_FP32)
    assert (t["format"], t["tolerance"]) == (precision, pytest.approx(tol))
    assert "round to nearest" in t["rule"]


def test_unrecorded_precision_is_fp32_and_says_so() -> None:
    t = equivalence.loss_tolerance({}, {})
    assert t["tolerance"] == 1e-3 and t["formats"] == ["precision not recorded: fp32 assumed"] * 2
    eq = equivalence.check_equivalence(_trials(1e-4, {}, {}), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["loss_tolerance_formats"] == ["precision not recorded: fp32 assumed"]
    none = equivalence.check_equivalence([], ["tensorflow", "pytorch"])
    assert none["loss_tolerance"] is None and not none["loss_agrees"] and not none["verified"]


@pytest.mark.slow
def test_each_framework_records_whether_its_kernels_are_deterministic() -> None:
    """The tolerance's determinism line reads the trial's own record (real frameworks, fresh processes)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = {
        "pytorch": ("import json, sys, torch\nfrom kit.workloads.torch_env import torch_env\n"
                    "torch.use_deterministic_algorithms(sys.argv[1] == 'on')\n"
                    "print(json.dumps(torch_env(torch.device('cpu'))['deterministic']))"),
        "tensorflow": ("import json, sys\nfrom kit.workloads.tf_env import tf_env, tf\n"
                       "if sys.argv[1] == 'on':\n    tf.config.experimental.enable_op_determinism()\n"
                       "print(json.dumps(tf_env('/CPU:0')['deterministic']))"),
    }
    for fw, src in code.items():
        for mode, want in (("off", False), ("on", True)):
            out = subprocess.run([sys.executable, "-c", src, mode], capture_output=True, text=True, timeout=300,
                                 cwd=root)
            assert out.returncode == 0, out.stderr[-2000:]
            assert json.loads(out.stdout.strip().splitlines()[-1]) is want, (fw, mode)
    det = {**H100_FP32, "deterministic": True}
    assert equivalence.loss_tolerance(det, det)["determinism"] == "deterministic GPU kernels recorded"
    assert "not deterministic in at least one arm" in equivalence.loss_tolerance(det, {**det, "deterministic": False})[
        "determinism"]
