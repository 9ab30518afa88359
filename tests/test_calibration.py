"""Calibrated phases (issue 24, item 3): a timed phase shorter than ``min_phase_s`` repeats its unit until it lasts
that long, every pass timed, the time reported per pass, and a repeated training run is still one protocol run.

The helpers are checked on a fake clock (exact) and on sleeps (the real clock); the LeNet-5 PyTorch workload on a
tiny configuration (slow: it imports torch); and every quick profile, and the `kit new study` template's, asks for
phases of at least 1 s and 10 telemetry periods.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kit.workloads import device as devmod

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    """A clock that moves only when the work under test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_repeat_training_repeats_whole_runs_with_a_reset_outside_each_pass() -> None:
    clock, calls = FakeClock(), []

    def run_pass() -> int:
        calls.append("pass")
        clock.now += 0.3
        return len(calls)

    def reset() -> None:
        calls.append("reset")
        clock.now += 0.01

    done = devmod.repeat_training(run_pass, reset, 1.0, lambda: calls.append("sync"), clock=clock)
    work = [c for c in calls if c != "sync"]
    # 0.3, reset, 0.61, reset, 0.92, reset, 1.23 >= 1.0: four passes, a reset before each but the first
    assert work == ["pass", "reset", "pass", "reset", "pass", "reset", "pass"]
    assert done.passes == 4 and done.pass_times_s == pytest.approx((0.3,) * 4)
    assert done.reset_times_s == pytest.approx((0.01,) * 3)
    assert done.phase_s == pytest.approx(1.23) and done.phase_s >= 1.0
    assert done.result == len(calls) - 1  # the last pass's result (the model the phase leaves behind)
    # per pass: the phase less the resets, over the passes = the mean of the pass times
    assert done.per_pass_s(done.phase_s) == pytest.approx(sum(done.pass_times_s) / done.passes)
    assert calls[calls.index("pass") - 1] == "sync" and calls[calls.index("pass") + 1] == "sync"  # synced both sides


def test_without_min_phase_one_pass_and_no_reset() -> None:
    clock, resets = FakeClock(), []

    def run_pass() -> str:
        clock.now += 0.05
        return "trained"

    done = devmod.repeat_training(run_pass, lambda: resets.append(1), 0.0, lambda: None, clock=clock)
    assert (done.passes, done.result, resets, done.reset_times_s) == (1, "trained", [], ())
    assert done.per_pass_s(0.07) == pytest.approx(0.07)  # one pass: the phase's own duration, as before


def test_repeat_inference_on_the_real_clock() -> None:
    def one() -> int:
        time.sleep(0.02)
        return 7

    t0 = time.perf_counter()
    done = devmod.repeat_inference(one, 0.1, lambda: None)
    phase = time.perf_counter() - t0
    assert done.result == 7 and done.passes >= 2 and done.reset_times_s == ()
    assert done.phase_s >= 0.1 and phase >= 0.1 and len(done.pass_times_s) == done.passes
    assert all(t >= 0.02 for t in done.pass_times_s)
    assert done.per_pass_s(done.phase_s) == pytest.approx(sum(done.pass_times_s) / done.passes, rel=0.05)
    result, passes, total = devmod.repeat_phase(one, 0.05, lambda: None)  # the interface older study folders call
    assert result == 7 and passes >= 2 and total >= 0.05


def test_pass_results_lists_every_pass_and_takes_checks_off_training_passes() -> None:
    trained = devmod.PhasePasses(None, (1.0, 1.5), (0.01,), 2.51)
    inferred = devmod.PhasePasses(None, (0.2, 0.2, 0.2), (), 0.6)
    out = devmod.pass_results(trained, inferred, [0.25, 0.5])
    assert out == {"infer_passes": 3, "infer_pass_times_s": [0.2, 0.2, 0.2], "train_passes": 2,
                   "train_pass_times_s": [0.75, 1.0]}
    assert devmod.pass_results(None, inferred).keys() == {"infer_passes", "infer_pass_times_s"}


# -- the LeNet-5 workload (PyTorch), tiny ------------------------------------------------------------------------------

def _lenet(tmp_path: Path, mnist_dir: Path, min_s: float) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    from kit.workloads import lenet_torch
    from kit.workloads.common import Markers

    req = {"trial_id": "t", "framework": "pytorch", "seed": 11, "device": "cpu", "threads": 1,
           "workload": {"name": "lenet5", "batch_size": 50, "epochs": 1, "steps_per_epoch": 10,
                        "learning_rate": 0.05, "momentum": 0.5, "infer_batch_size": 250, "warmup_steps": 2,
                        "min_phase_s": min_s},
           "dataset": {"name": "mnist", "source": "t10k_split", "train_size": 1000, "test_size": 500}}
    path = tmp_path / f"markers-{min_s}.jsonl"
    markers = Markers(path)
    results, _env = lenet_torch.run(req, mnist_dir, markers)
    markers.close()
    ends = {m["phase"]: m for m in map(json.loads, path.read_text().splitlines()) if m["event"] == "phase_end"}
    return results, ends


@pytest.mark.slow
def test_lenet_phases_shorter_than_min_phase_repeat_and_stay_one_protocol_run(tmp_path: Path,
                                                                            mnist_dir: Path) -> None:
    once, once_ends = _lenet(tmp_path, mnist_dir, 0.0)
    calib, ends = _lenet(tmp_path, mnist_dir, 0.4)
    assert once["train_passes"] == once["infer_passes"] == 1
    assert once["train_time_s"] == once_ends["train"]["duration_s"]  # one pass: the phase, as before
    for phase in ("train", "infer"):
        times = calib[f"{phase}_pass_times_s"]
        assert calib[f"{phase}_passes"] == len(times) == ends[phase]["passes"] >= 2, phase
        assert ends[phase]["duration_s"] >= 0.4, phase
        assert calib[f"{phase}_time_s"] == pytest.approx(sum(times) / len(times), rel=0.05), phase
    assert ends["train"]["images"] == 10 * 50 * calib["train_passes"]
    assert calib["train_images"] == once["train_images"] == 500  # throughput per protocol run
    # every pass starts from the shared weights with a fresh optimizer: the result is one run's, to the bit on a CPU
    assert calib["train_loss"] == once["train_loss"]
    assert calib["test_accuracy"] == once["test_accuracy"]


# -- the profiles ask for calibrated phases ---------------------------------------------------------------------------

def _floor(period_s: float) -> float:
    return max(1.0, 10 * period_s)


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*/experiment.toml")),
                         ids=lambda p: p.parent.name)
def test_every_quick_profile_asks_for_phases_of_1_s_and_10_periods(path: Path) -> None:
    from kit.plan import make_plan
    from kit.spec import load_spec

    spec = load_spec(path)
    if "quick" not in spec.profiles:
        pytest.skip("no quick profile")
    quick = load_spec(path, "quick")
    floor = _floor(quick.telemetry.period_s)
    assert quick.workload.min_phase_s >= floor, (quick.workload.min_phase_s, floor)
    for cid, cfg in make_plan(quick).configs.items():  # a case may override it
        assert float(cfg.get("min_phase_s", quick.workload.min_phase_s)) >= floor, cid


def test_the_new_study_template_calibrates_its_phases(tmp_path: Path) -> None:
    from kit.scaffold import new_study
    from kit.spec import load_spec

    folder = new_study("calib_check", tmp_path)
    for profile in (None, "quick"):
        spec = load_spec(folder, profile)
        assert spec.workload.min_phase_s >= _floor(spec.telemetry.period_s), profile
    for module in ("workload_torch.py", "workload_keras.py"):
        text = (folder / module).read_text()
        assert "repeat_training(" in text and "repeat_inference(" in text and "pass_results(" in text, module
