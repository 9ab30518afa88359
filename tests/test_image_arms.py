"""`kit run --images ROW,ROW`: one arm per image version, interleaved in one plan.

The end-to-end path through a real engine is in test_container_integration.py;
these check the mapping, the plan and the refusals without an engine.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.backends.container import choose_rows, image_arms, trial_container
from kit.cli import app
from kit.errors import ImageError, KitError, PlanError
from kit.images.matrix import load_matrix
from kit.plan import arm_framework, make_plan
from kit.run import RunOptions, start_run
from kit.spec import Container, load_spec

ROOT = Path(__file__).resolve().parents[1]
CALIBRATED = ROOT / "tests" / "data" / "calibrated.toml"
LENET = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"


def test_rows_become_arms_named_by_version() -> None:
    arms, rows = image_arms(["pytorch-2.6-cu124", "pytorch-2.7-cu126"], ("tensorflow", "pytorch"))
    assert arms == ("pytorch@2.6-cu124", "pytorch@2.7-cu126")
    assert rows == {"pytorch@2.6-cu124": "pytorch-2.6-cu124", "pytorch@2.7-cu126": "pytorch-2.7-cu126"}
    assert {arm_framework(a) for a in arms} == {"pytorch"}
    # each arm gets its own row, and a plain framework arm still gets the default row
    m = load_matrix()
    chosen = choose_rows((*arms, "tensorflow"), "cuda", rows, m)
    assert {a: r.name for a, r in chosen.items()} == {**rows, "tensorflow": m.default_for("tensorflow", "cuda").name}
    assert chosen["pytorch@2.6-cu124"].cuda != chosen["pytorch@2.7-cu126"].cuda


@pytest.mark.parametrize(("names", "match"), [
    (["pytorch-2.6-cu124"], "two or more different"),
    (["pytorch-2.6-cu124", "pytorch-2.6-cu124"], "two or more different"),
    (["pytorch-2.6-cu124", "no-such-row"], "no image 'no-such-row'"),
])
def test_bad_image_lists_are_refused(names: list[str], match: str) -> None:
    with pytest.raises(ImageError, match=match):
        image_arms(names, ("tensorflow", "pytorch"))


def test_a_row_of_a_framework_the_experiment_does_not_run_is_refused() -> None:
    with pytest.raises(ImageError, match="tensorflow image; the experiment runs pytorch") as e:
        image_arms(["pytorch-2.6-cu124", "tensorflow-2.19-cu125"], ("pytorch",))
    assert e.value.where == "--images tensorflow-2.19-cu125"


def test_version_arms_interleave_in_every_block() -> None:
    spec = load_spec(CALIBRATED)
    arms = ("pytorch@2.6-cu124", "pytorch@2.7-cu126")
    plan = make_plan(spec, arms=arms)
    assert plan.arms == arms
    assert {t.framework for t in plan.trials} == {"pytorch"}
    per_block = Counter((t.block, t.arm) for t in plan.trials)
    assert set(per_block.values()) == {1} and len(per_block) == len(plan.trials)  # each block holds both arms once
    firsts = {next(t.arm for t in plan.trials if t.block == b) for b in {t.block for t in plan.trials}}
    assert firsts == set(arms)  # randomised order within blocks: both arms lead some block


def test_trial_container_runs_the_arms_framework(tmp_path: Path) -> None:
    tc = trial_container("pytorch@2.6-cu124", tmp_path, tmp_path, Container(), "img:tag", False)
    assert tc.env["KIT_FRAMEWORK"] == "pytorch"
    assert tc.labels["io.kit.framework"] == "pytorch" and tc.labels["io.kit.arm"] == "pytorch@2.6-cu124"


def test_local_backend_refuses_image_arms_and_writes_nothing(tmp_path: Path) -> None:
    spec = load_spec(CALIBRATED)
    opts = RunOptions(runs_root=tmp_path / "runs", arms=("pytorch@2.6-cu124", "pytorch@2.7-cu126"))
    with pytest.raises(KitError, match="need a container backend"):
        start_run(spec, opts)
    assert not (tmp_path / "runs").exists()


def test_arm_of_another_framework_is_refused(tmp_path: Path) -> None:
    spec = load_spec(CALIBRATED)
    opts = RunOptions(runs_root=tmp_path / "runs", backend="docker", arms=("jax@0.4", "pytorch@2.7-cu126"))
    with pytest.raises(PlanError, match="runs jax"):
        start_run(spec, opts)
    assert not (tmp_path / "runs").exists()


def test_cli_images_option(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(LENET), "--profile", "quick", "--runs-dir", str(runs),
                                   "--images", "pytorch-2.6-cu124,pytorch-2.7-cu126"])
    assert isinstance(res.exception, KitError) and "need a container backend" in str(res.exception)
    assert "--backend docker" in str(res.exception)
    res = CliRunner().invoke(app, ["run", str(LENET), "--runs-dir", str(runs), "--backend", "docker",
                                   "--images", "pytorch-2.6-cu124,pytorch-2.7-cu126", "--image", "pytorch=pytorch-2.6-cu124"])
    assert isinstance(res.exception, KitError) and "not both" in str(res.exception)
    assert not runs.exists()


def test_three_arms_each_tested_against_the_first_in_one_holm_family() -> None:
    import numpy as np
    import pandas as pd

    from kit.analysis.hypotheses import hypothesis_rows as _hypotheses

    rng = np.random.default_rng(3)
    arms = ["pytorch@2.6-cu124", "pytorch@2.7-cu126", "pytorch@2.8-cu128"]
    factor = {arms[0]: 1.0, arms[1]: 1.0, arms[2]: 1.10}  # the third version is 10 % slower
    rows = [{"config_id": "c0", "metric": "time_s", "phase": "train", "arm": arm, "block": b,
             "value": factor[arm] * (1.0 + 0.005 * rng.standard_normal())} for b in range(12) for arm in arms]
    spec = {"hypotheses": [{"id": "H1", "question": "q", "metric": "time_s", "phases": ["train"], "h0": "", "h1": ""}]}
    out = _hypotheses(spec, pd.DataFrame(rows), arms, {"c0": {}}, 0.05)
    assert [(r["arm_a"], r["arm_b"]) for r in out] == [(arms[0], arms[1]), (arms[0], arms[2])]
    assert out[1]["rejected"] is True and out[0]["rejected"] is False
    # Holm over both rows: the smaller p is doubled, the larger kept (but never below the first)
    assert out[1]["p"] < out[0]["p"]
    assert out[1]["p_adj"] == pytest.approx(min(1.0, 2 * out[1]["p"]))
    assert out[0]["p_adj"] == pytest.approx(max(out[1]["p_adj"], out[0]["p"]))

