"""kit compare's suspect rule compares load, not trial counts (issue 39): a significant change is suspect only when
the disturbed data could explain it. Fake runs from the shared record builder (tests/_runs.py), every trial's
disturbance as the runner records it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.compare import CompareOptions, compare_runs
from kit.plan import make_plan
from kit.spec import load_spec
from kit.store import RunDir
from tests._runs import manifest_of, record_of, write_record

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"
LIMIT = 0.25  # kit.disturbance.DEFAULT_FOREIGN_CPU


def disturbance(train_s: float, infer_s: float, train_cpus: float, infer_cpus: float = 0.02) -> dict[str, Any]:
    """A trial's ``disturbance`` as kit.disturbance.TrialDisturbance.as_dict writes it."""
    def phase(name: str, dur: float, cpus: float) -> dict[str, Any]:
        bad = cpus > LIMIT
        return {"phase": name, "duration_s": dur, "judged": True, "foreign_cpu": cpus, "trial_cpu": 1.0,
                "disturbed": bad, "causes": [f"foreign CPU {cpus:.2f} CPUs (limit {LIMIT:g})"] if bad else []}
    ph = {"train": phase("train", train_s, train_cpus), "infer": phase("infer", infer_s, infer_cpus)}
    return {"schema": 1, "disturbed": any(p["disturbed"] for p in ph.values()), "phases": ph}


def load_run(tmp: Path, name: str, *, factor: float = 1.0, seed: int = 0, reps: int = 12,
             train_cpus: Any = None, slower: Any = None) -> Path:
    """A run of tests/data/calibrated.toml: train 1 s and inference 0.5 s (1 % noise) times ``factor``;
    ``train_cpus(trial)`` -> the foreign CPUs beside its train phase (default 0.02: quiet); ``slower(trial)`` ->
    an extra factor on its times (what a load did to it)."""
    spec_path = tmp / f"{name}.toml"
    spec_path.write_text(CALIBRATED.read_text().replace("repetitions = 12", f"repetitions = {reps}"))
    spec = load_spec(spec_path)
    rd = RunDir.create(tmp / name, spec.experiment.id, manifest_of(spec))
    rng = np.random.default_rng(seed)
    for t in make_plan(spec).trials:
        f = factor * (slower(t) if slower else 1.0)
        train_s, infer_s = (s * f * (1 + 0.01 * rng.standard_normal()) for s in (1.0, 0.5))
        cpus = train_cpus(t) if train_cpus else 0.02
        write_record(rd, record_of(t, 1.0e9 + 10.0 * t.position, train_s, infer_s,
                                 disturbance=disturbance(train_s, infer_s, cpus)), None)
    return rd.path


def _row(res: dict[str, Any], arm: str = "pytorch", phase: str = "train") -> dict[str, Any]:
    (row,) = [r for r in res["rows"] if r["metric"] == "time_s" and r["arm"] == arm and r["phase"] == phase]
    return row


OPTS = CompareOptions(n_boot=200, metrics=("time_s",), phases=("train",))
BOTH = CompareOptions(n_boot=200, metrics=("time_s",))


def test_a_true_regression_with_one_mildly_disturbed_trial_stays_a_regression(tmp_path: Path) -> None:
    """+10 % everywhere; one trial of B ran beside 0.3 foreign CPUs. Before issue 39 every such row was
    "suspect" (one side disturbed, the other not): the verdict re-judged on the undisturbed trials is the same,
    so it stands, with the load named."""
    a = load_run(tmp_path, "a", seed=1)
    b = load_run(tmp_path, "b", seed=2, factor=1.10,
                 train_cpus=lambda t: 0.3 if (t.framework, t.repetition) == ("pytorch", 3) else 0.02)
    compared = compare_runs(a, b, OPTS)
    res = compared.to_json()
    row = _row(res)
    assert row["verdict"] == "regression", row.get("suspect_cause")
    assert "measured under load" in row["load_note"] and "B: 1 of 12 trials disturbed in train" in row["load_note"]
    assert "holds on the undisturbed trials alone (12 of 12 A and 11 of 12 B" in row["load_note"]
    assert row["load"]["quiet_verdict"] == "regression" and row["load"]["b"]["disturbed"] == 1
    assert res["counts"]["suspect"] == 0 and res["counts"]["regression"] == 2  # both arms' train phase
    from kit.report.answer import compare_answer

    said = compare_answer(compared)
    assert any("regression (measured under load" in line for line in said["changed"])


@pytest.mark.slow
def test_twelve_of_twelve_at_very_different_loads_is_suspect(tmp_path: Path) -> None:
    """Every train phase disturbed on both sides, at 0.3 CPUs in A and 1.5 in B: no undisturbed trial is left
    to re-judge on, and the loads differ, so the regression is suspect. At like loads it stands, with the note."""
    a = load_run(tmp_path, "a", seed=1, train_cpus=lambda t: 0.3)
    b = load_run(tmp_path, "b", seed=2, factor=1.10, train_cpus=lambda t: 1.5)
    row = _row(compare_runs(a, b, OPTS).to_json())
    assert row["verdict"] == "suspect" and row["was"] == "regression"
    cause = row["suspect_cause"]
    assert "too few undisturbed trials" in cause and "0 of 12 A and 0 of 12 B undisturbed trials" in cause
    assert "A: 12 of 12 trials disturbed in train" in cause and "about 1.5 foreign CPUs while disturbed" in cause
    assert _row(compare_runs(a, b, BOTH).to_json(), phase="infer")["verdict"] == "regression"  # its phases were quiet
    like = load_run(tmp_path, "like", seed=3, factor=1.10, train_cpus=lambda t: 0.35)
    row = _row(compare_runs(a, like, OPTS).to_json())
    assert row["verdict"] == "regression" and "like load on both sides" in row["load_note"]


@pytest.mark.slow
def test_a_disturbance_that_cannot_explain_the_regression_leaves_it_a_regression(tmp_path: Path) -> None:
    """Two of B's trials ran beside 1.5 foreign CPUs (a load the old count called different conditions): the
    verdict on B's 10 undisturbed trials is still a regression, so the disturbance cannot explain it."""
    a = load_run(tmp_path, "a", seed=1)
    heavy = {2, 7}
    b = load_run(tmp_path, "b", seed=2, factor=1.10,
                 train_cpus=lambda t: 1.5 if t.framework == "pytorch" and t.repetition in heavy else 0.02,
                 slower=lambda t: 1.3 if t.framework == "pytorch" and t.repetition in heavy else 1.0)
    row = _row(compare_runs(a, b, OPTS).to_json())
    assert row["verdict"] == "regression" and row["load"]["quiet_verdict"] == "regression"
    assert "B: 2 of 12 trials disturbed in train" in row["load_note"]


@pytest.mark.slow
def test_a_change_the_disturbed_trials_make_is_suspect(tmp_path: Path) -> None:
    """No true change; half of B's trials ran beside 1.5 foreign CPUs and were 30 % slower. All trials together
    say "regression"; the undisturbed half alone does not, so the change is suspect."""
    a = load_run(tmp_path, "a", seed=1, reps=24)
    b = load_run(tmp_path, "b", seed=2, reps=24,
                 train_cpus=lambda t: 1.5 if t.framework == "pytorch" and t.repetition % 2 else 0.02,
                 slower=lambda t: 1.3 if t.framework == "pytorch" and t.repetition % 2 else 1.0)
    row = _row(compare_runs(a, b, OPTS).to_json())
    assert row["verdict"] == "suspect" and row["was"] == "regression", row
    assert "on the undisturbed trials alone" in row["suspect_cause"]
    assert row["load"]["quiet_verdict"] != "regression"
