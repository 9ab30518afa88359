"""Issue 15 item 5: the cross-framework loss agreement's tolerance follows the recorded precision. Issue 25 item 7:
the check applies only to a model with parameters whose training loss moves, says "consistent with the same model"
and names what agreement cannot detect.

Figures (derivation in kit/analysis/equivalence.py next to LOSS_EPS, measured by
benchmarks/loss_tolerance_emulation.py): fp32 1e-3 (the old fixed figure); TF32 8 x 2^-10 = 7.8e-3;
fp16 4 x 2^-10 = 3.9e-3; bf16 4 x 2^-7 = 3.1e-2.
"""

from __future__ import annotations

import pytest

from kit.analysis import equivalence
from tests._runs import records_of

CPU = {"device_kind": "cpu", "precision": "fp32", "tf32": {"mode": "off", "matmul": None, "conv": None}}
H100_TF32 = {"device_kind": "gpu", "precision": "tf32", "compute_capability": [9, 0],
             "tf32": {"mode": "on", "matmul": True, "conv": True}}
H100_FP32 = {"device_kind": "gpu", "precision": "fp32", "compute_capability": [9, 0],
             "tf32": {"mode": "off", "matmul": False, "conv": False}}


def _trials(gap: float, env_a: dict, env_b: dict, blocks: int = 3, initial: float | None = 2.3,
            params: int = 61706) -> list[dict]:
    """Blocks of two arms from the same initial weights (loss ``initial`` on the first batch) whose final losses
    are 1.0 and 1.0 + gap."""
    out = []
    for b in range(blocks):
        for arm, loss, env in (("tensorflow", 1.0, env_a), ("pytorch", 1.0 + gap, env_b)):
            res = {"train_loss": loss, "param_count": params, "test_accuracy": 0.9}
            if initial is not None:
                res["train_loss_initial"] = initial
            out.append({"trial_id": f"r{b}-{arm}", "arm": arm, "block": b, "config_id": "c00", "status": "ok",
                        "warmup": False, "env": env, "results": res})
    return out


def _check(trials: list[dict], arms: list[str]) -> dict:
    """check_equivalence of hand-written trials, typed as the store reads them."""
    return equivalence.check_equivalence(records_of(trials), arms)


def test_fp32_figure_covers_a_model_that_learns() -> None:
    """1e-2 since issue 25: the LeNet quick profile's two frameworks differed by up to 4.3e-3 on the CPU (1e-3, the
    old figure, called 5 of 13 blocks "not the same model"); a different initialisation (8.0e-2) is still caught."""
    t = equivalence.loss_tolerance(CPU, CPU)
    assert (t["tolerance"], t["format"]) == (1e-2, "fp32")
    assert "deterministic" in t["determinism"]
    eq = _check(_trials(4.3e-3, CPU, CPU), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["consistent"] and eq["loss_tolerance"] == 1e-2
    assert not _check(_trials(8e-2, CPU, CPU), ["tensorflow", "pytorch"])["loss_agrees"]
    gpu = equivalence.loss_tolerance(H100_FP32, H100_FP32)  # TF32 off: fp32 on the GPU, non-determinism covered
    assert gpu["tolerance"] == 1e-2 and "not recorded" in gpu["determinism"]


def test_tf32_widens_the_tolerance_and_says_why() -> None:
    # 3e-3: the largest gap of the truncating-TF32 emulation (one arm fp32, the other TF32) - an equivalent model
    eq = _check(_trials(3e-3, H100_FP32, H100_TF32), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["consistent"]  # the fixed 1e-3 called this pair "not verified equivalent"
    assert eq["loss_tolerance"] == pytest.approx(1e-2)  # 8 eps = 7.8e-3 is below the fp32 floor, which applies
    (basis,) = eq["loss_tolerance_basis"]
    assert basis["rule"].startswith("tf32: 8 x eps 2^-10") and "fp32 floor" in basis["rule"]
    assert "assumed non-deterministic" in basis["determinism"]
    assert eq["loss_tolerance_formats"] == ["fp32 on the GPU (TF32 off or not supported)",
                                            "precision tf32 recorded (the dominant op class ran in TF32) on the gpu"]
    # a gap of 5e-2 (about the median a different initialisation caused in the emulation, 5.2e-2) is still caught
    assert not _check(_trials(5e-2, H100_TF32, H100_TF32), ["tensorflow", "pytorch"])["loss_agrees"]


def test_tf32_of_the_minor_op_class_counts() -> None:
    # an LSTM (matmul-dominant) with TF32 convolutions only: precision says fp32, the convolutions ran in TF32
    env = dict(H100_FP32, tf32={"mode": "native", "matmul": False, "conv": True})
    t = equivalence.loss_tolerance(env, H100_FP32)
    assert t["format"] == "tf32" and t["formats"][0] == "TF32 on for conv on a GPU of compute capability [9, 0]"
    turing = dict(env, compute_capability=[7, 5])  # no TF32 hardware before Ampere
    assert equivalence.loss_tolerance(turing, H100_FP32)["format"] == "fp32"


@pytest.mark.parametrize(("precision", "tol"), [("bf16", 4 * 2**-7), ("fp16", 1e-2)])  # fp16's 3.9e-3: the floor
def test_half_precisions(precision: str, tol: float) -> None:
    env = dict(H100_TF32, precision=precision)
    t = equivalence.loss_tolerance(env, H100_FP32)
    assert (t["format"], t["tolerance"]) == (precision, pytest.approx(tol))
    assert "round to nearest" in t["rule"]


def test_unrecorded_precision_is_fp32_and_says_so() -> None:
    t = equivalence.loss_tolerance({}, {})
    assert t["tolerance"] == 1e-2 and t["formats"] == ["precision not recorded: fp32 assumed"] * 2
    eq = _check(_trials(1e-4, {}, {}), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["loss_tolerance_formats"] == ["precision not recorded: fp32 assumed"]
    none = _check([], ["tensorflow", "pytorch"])
    assert none["loss_tolerance"] is None and not none["loss_agrees"] and not none["consistent"]
    assert none["not_applicable"] == "whether the training loss moves cannot be told (no trial records a training loss)"


# -- issue 25 item 7: a model with parameters and a loss that moves, and what agreement cannot detect ---------------

def test_a_model_without_parameters_and_a_constant_loss_is_not_called_the_same_model() -> None:
    """The golden run's calibrated workload: 0 parameters, loss 0.0 in every trial. It used to be "verified"."""
    eq = _check(_trials(0.0, CPU, CPU, initial=None, params=0), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and eq["param_counts_equal"]  # agreement, trivially
    assert not eq["applicable"] and not eq["consistent"]
    assert eq["not_applicable"] == "the workload has no parameters (param_count 0): there is no model to compare"


def test_a_loss_that_does_not_move_makes_the_check_vacuous() -> None:
    # 61,706 parameters but the loss stays at its initial value (no optimiser step took effect in either arm)
    eq = _check(_trials(0.0, CPU, CPU, initial=1.0), ["tensorflow", "pytorch"])
    assert eq["loss_agrees"] and not eq["applicable"] and not eq["consistent"]
    assert eq["not_applicable"].startswith("the training loss does not move (initial loss (shared weights, first "
                                           "batch) to the final mean loss")
    assert eq["loss_moves"]["moved"] is False and eq["loss_moves"]["min_rel_change"] == 0.0
    # moved, but by less than LOSS_MOVE_FACTOR x the tolerance: still vacuous
    small = _check(_trials(0.0, CPU, CPU, initial=1.005), ["tensorflow", "pytorch"])
    assert small["loss_moves"]["required_rel_change"] == pytest.approx(10 * 1e-2) and not small["applicable"]
    # no initial loss, one epoch, the same loss in every block: the loss depends on nothing
    const = _check(_trials(0.0, CPU, CPU, initial=None), ["tensorflow", "pytorch"])
    assert not const["applicable"] and "differs between blocks" in const["loss_moves"]["basis"]


def test_the_loss_moves_by_the_best_record_the_trials_have() -> None:
    moved = _check(_trials(1e-4, CPU, CPU), ["tensorflow", "pytorch"])
    assert moved["applicable"] and moved["consistent"] and moved["not_applicable"] is None
    assert moved["loss_moves"]["min_rel_change"] == pytest.approx((2.3 - 1.0001) / 2.3)  # the arm that moved least
    epochs = _trials(1e-4, CPU, CPU, initial=None)
    for t in epochs:
        t["results"]["epoch_train_loss"] = [1.8, t["results"]["train_loss"]]
    eq = _check(epochs, ["tensorflow", "pytorch"])
    assert eq["consistent"] and eq["loss_moves"]["basis"].startswith("first to last epoch's mean loss")
    # older trials without either record: the final loss differs between blocks (seeds), so it depends on the model
    varied = _trials(1e-4, CPU, CPU, initial=None)
    for t in varied:
        t["results"]["train_loss"] *= 1 + 0.2 * t["block"]
    eq = _check(varied, ["tensorflow", "pytorch"])
    assert eq["consistent"] and "how far training moved it is not known" in eq["loss_moves"]["basis"]


def test_agreement_names_what_it_cannot_detect() -> None:
    """From the emulation's figures (benchmarks/loss_tolerance_emulation.py): a different batch order caused gaps from
    below fp32's 1e-3 to above TF32's 7.8e-3; a different initialisation one of 1.6e-3 (plain SGD, one block)."""
    lo, hi = equivalence.BATCH_ORDER_GAP
    assert lo < 1e-3 < 8 * 2**-10 < hi < 4 * 2**-7  # the figures the texts below rest on
    fp32 = equivalence.cannot_detect(1e-3)
    assert fp32.startswith(f"a different batch order (relative loss gap {lo:.1e} to {hi:.1e}) is partly within the "
                           "tolerance 1.0e-03, so it cannot always be told from rounding")
    assert fp32.endswith("(gaps measured by benchmarks/loss_tolerance_emulation.py)")
    tf32 = equivalence.cannot_detect(8 * 2**-10)
    assert "batch order (relative loss gap" in tf32 and "partly within the tolerance 7.8e-03" in tf32
    assert "is within the tolerance 3.1e-02, so it cannot be told from rounding" in equivalence.cannot_detect(4 * 2**-7)
    assert "a different initialisation (relative loss gap" in tf32
    # a tolerance far below every alternative's gaps lists only what lies outside the loss
    assert equivalence.cannot_detect(1e-5).startswith("a difference outside the training loss (the inference pass, "
                                                      "the accuracy) is not compared at all")
    assert equivalence._overlap((5e-3, 1e-1), 1e-3) is None and "near the tolerance" in str(
        equivalence._overlap((2e-3, 1e-1), 1e-3))
    eq = _check(_trials(1e-4, CPU, CPU), ["tensorflow", "pytorch"])
    assert eq["cannot_detect"] == equivalence.cannot_detect(1e-2)  # the CPU pair's tolerance, fp32's 1e-2
    assert "partly within the tolerance 1.0e-02" in eq["cannot_detect"]


def test_the_threat_says_consistent_with_and_why_not_applicable() -> None:
    import pandas as pd

    from kit.analysis.validity import Ctx
    from kit.analysis.validity import equivalence as rule
    from tests._runs import bare_manifest

    def threat(trials: list[dict]) -> tuple[str, str, str]:
        eq = _check(trials, ["tensorflow", "pytorch"])
        (t,) = rule(Ctx(bare_manifest(), records_of(trials), pd.DataFrame(), {"equivalence": eq}))
        return t.severity, t.title, t.evidence

    sev, title, text = threat(_trials(1e-4, CPU, CPU))
    assert (sev, title) == ("info", "Consistent with the same model in both frameworks")
    assert "verified" not in text and "What it cannot detect: a different batch order" in text
    assert "the loss moved (initial loss" in text
    assert threat(_trials(0.0, CPU, CPU, initial=None, params=0))[:2] == ("info", "No trained model to compare")
    sev, title, text = threat(_trials(0.0, CPU, CPU, initial=1.0))
    assert (sev, title) == ("medium", "Same model not checked") and "the training loss does not move" in text
    assert threat(_trials(5e-2, CPU, CPU))[:2] == ("high", "Models not verified equivalent")


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
