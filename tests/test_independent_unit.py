"""The independent unit is the trial (issue 15 item 2): Patel's "inference time decreases with batch size up to a
limit" used to feed ~300 timed steps per cell to Mann-Whitney. Steps of one process are not independent; the
analysis now summarises them within each trial before any between-condition test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from tests._runs import run_view
from tests._studies import study_module

zoo = study_module("patel_models_sweep", "analysis")


BATCHES = [1, 2, 4, 8, 16]


def _sweep(n_models: int = 5, sides: tuple[int, ...] = (128, 224, 320), reps: int = 3, steps: int = 300,
           seed: int = 0) -> tuple[dict, list[dict]]:
    """A Patel-like sweep: latency per image falls 40 % per doubling up to batch 4, then flat; each trial has a
    process-level offset (8 %) much larger than the step noise (0.5 %): 300 steps per cell would make any
    difference 'significant' while 3 trials cannot."""
    rng = np.random.default_rng(seed)
    configs, trials = {}, []
    for m in range(n_models):
        for side in sides:
            for b in BATCHES:
                cid = f"m{m}-s{side}-b{b}"
                configs[cid] = {"case": f"model{m}", "batch_size": b, "image_size": side}
                per_image = 1e-3 * (m + 1) * (side / 128) ** 2 * 0.6 ** min(np.log2(b), 2)
                for rep in range(reps):
                    for arm in ("tensorflow", "pytorch"):
                        offset = 1 + 0.08 * rng.standard_normal()
                        step = per_image * b * offset * (1 + 0.005 * rng.standard_normal(steps))
                        trials.append({"trial_id": f"r{rep}-{cid}-{arm}", "config_id": cid, "arm": arm,
                                       "status": "ok", "warmup": False, "env": {},
                                       "results": {"batch_size": b, "infer_step_s": list(step),
                                                   "train_step_s": list(step * 3)}})
    manifest = {"plan": {"arms": ["tensorflow", "pytorch"], "configs": configs},
                "spec": {"design": {"alpha": 0.05}, "workload": {"model": "resnet18", "mode": "train_infer"},
                         "cases": {}}}
    return manifest, trials


def test_no_between_condition_test_ever_sees_within_trial_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spy on every scipy test the zoo analysis calls: no sample may be longer than the trials of its cell
    (3) or, across curves, than the number of curves (15)."""
    seen: list[tuple[str, int]] = []

    def spy(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            seen.extend((name, len(np.atleast_1d(a))) for a in args if hasattr(a, "__len__"))
            return fn(*args, **kwargs)
        return wrapped

    for name in ("mannwhitneyu", "wilcoxon", "kruskal", "ttest_rel", "ttest_ind"):
        monkeypatch.setattr(zoo.sps, name, spy(name, getattr(sps, name)))
    manifest, trials = _sweep()
    out = zoo.analyse(run_view(manifest, trials)).to_json()
    assert seen, "the analysis ran no test at all"
    assert all(n <= 3 for name, n in seen if name == "mannwhitneyu")  # per curve: one value per trial
    assert max(n for _, n in seen) <= 15, seen  # 300 steps never reach a test
    assert all("steps_s" not in k for c in out["cells"] for k in c)  # steps do not even leave the trial records


def test_three_trials_per_point_cannot_decide_a_curve_but_the_curves_together_can() -> None:
    manifest, trials = _sweep()
    out = zoo.analyse(run_view(manifest, trials)).to_json()
    assert {c["decrease_test"]["verdict"] for c in out["curves"]} == {"not testable"}
    assert "0.05" in out["curves"][0]["decrease_test"]["reason"]
    for arm in ("tensorflow", "pytorch"):
        t = out["decrease_across_curves"][arm]
        assert t["unit"] == "curve" and t["verdict"] == "supported" and t["limit"] == 4, t
        assert all(s["n_curves"] == 15 for s in t["steps"])


def test_the_old_step_level_test_was_anti_conservative() -> None:
    """What the old code did: Mann-Whitney on pooled steps of a flat pair of batch sizes where trials differ only
    by their process offset. It 'finds' falls at an alpha far above 5 %; the trial-level test does not."""
    rng = np.random.default_rng(3)
    false_steps = false_trials = 0
    for _ in range(200):
        a = [1 + 0.08 * rng.standard_normal() for _ in range(3)]
        b = [1 + 0.08 * rng.standard_normal() for _ in range(3)]
        sa = np.concatenate([x * (1 + 0.005 * rng.standard_normal(300)) for x in a])
        sb = np.concatenate([x * (1 + 0.005 * rng.standard_normal(300)) for x in b])
        false_steps += sps.mannwhitneyu(sb, sa, alternative="less").pvalue < 0.05
        false_trials += sps.mannwhitneyu(b, a, alternative="less").pvalue < 0.05
    assert false_steps > 60 and false_trials <= 15, (false_steps, false_trials)


def test_trial_level_curve_test_with_enough_trials() -> None:
    rng = np.random.default_rng(1)
    curve = [(b, list(v * (1 + 0.01 * rng.standard_normal(10)))) for b, v in zip(BATCHES, [1.0, 0.5, 0.3, 0.3, 0.3],
                                                                                 strict=True)]
    t = zoo.decreasing_to_limit(curve, 0.05)
    assert t["verdict"] == "supported" and t["limit"] == 4 and t["unit"] == "trial"
