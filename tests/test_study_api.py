"""kit.study_api: analyse(run) under STUDY_API = 2, the version-1 call for older folders, versions refused."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
import pytest

from kit.errors import StoreError, StudyError
from kit.records import TrialRecord
from kit.study_api import STUDY_API, RunView, invoke
from tests._runs import bare_manifest_json, records, trial

MANIFEST = bare_manifest_json(experiment="x", profile="quick", spec={"workload": {"name": "lenet5"}},
                              plan={"arms": ["tensorflow", "pytorch"], "configs": {"c00": {}, "c01": {"batch_size": 8}}})
TRIALS = [trial("w-tf", "tensorflow", warmup=True), trial("a-tf", "tensorflow", repetition=1, position=1),
          trial("a-pt", "pytorch", repetition=1, position=2, status="oom", error="out of memory"),
          trial("b-pt", "pytorch", "c01", repetition=1, position=3, results={"train_loss": 0.5})]
VALUES = pd.DataFrame([
    {"trial_id": t["trial_id"], "arm": t["arm"], "framework": t["framework"], "config_id": t["config_id"],
     "block": t["block"], "repetition": t["repetition"], "position": t["position"], "warmup": t["warmup"],
     "status": t["status"], "phase": "train", "metric": "time_s", "value": 1.0 + i, "unit": "s", "n_samples": 1}
    for i, t in enumerate(TRIALS)])
RECORDS = records(TRIALS)  # the trials as the analysis hands them to a study (typed, as the store reads them)


def _module(version: object | None) -> types.ModuleType:
    mod = types.ModuleType("study_analysis")
    if version is not None:
        mod.STUDY_API = version  # type: ignore[attr-defined]
    return mod


def test_version_2_gets_one_run_view_with_the_one_rule() -> None:
    got: list[RunView] = []
    invoke(_module(2), got.append, "analyse", (MANIFEST, records(TRIALS), VALUES), "analysis.py")
    run = got[0]
    assert run.arms == ("tensorflow", "pytorch") and set(run.configs) == {"c00", "c01"} and run.workload == "lenet5"
    assert [t.trial_id for t in run.trials] == ["w-tf", "a-tf", "a-pt", "b-pt"]  # every finished trial, in order
    assert [t.trial_id for t in run.measured()] == ["a-tf", "b-pt"]  # not the warm-up, not the oom
    assert [t.trial_id for t in run.measured(arm="pytorch", config="c01")] == ["b-pt"]
    assert [t.status for t in run.finished(arm="pytorch")] == ["oom", "ok"]
    assert run.measured(config="c01")[0].results["train_loss"] == 0.5
    assert list(run.measured_values(metric="time_s", arm="tensorflow")["trial_id"]) == ["a-tf"]


def test_version_1_and_no_version_keep_the_three_argument_call() -> None:
    for version in (None, 1):
        seen: list[tuple[object, ...]] = []
        invoke(_module(version), lambda *a, seen=seen: seen.append(a), "analyse", (MANIFEST, records(TRIALS), VALUES),
               "a.py")
        assert seen[0][0] is MANIFEST and seen[0][1] == TRIALS and seen[0][2] is VALUES  # each trial as its JSON


@pytest.mark.parametrize("version", [STUDY_API + 1, 0, "2", True, 2.0])
def test_a_version_this_kit_does_not_offer_is_refused(version: object) -> None:
    with pytest.raises(StudyError, match="STUDY_API") as info:
        invoke(_module(version), lambda run: run, "analyse", (MANIFEST, records(TRIALS), VALUES),
               "experiments/x/analysis.py")
    assert info.value.where == "experiments/x/analysis.py" and f"STUDY_API = {STUDY_API}" in (info.value.fix or "")


def test_other_hooks_take_their_arguments_as_they_are() -> None:
    assert invoke(_module(2), lambda m, a: (m, a), "sections", ("man", "an"), "report.py") == ("man", "an")


def test_a_malformed_trial_is_refused_at_the_edge() -> None:
    bad = dict(TRIALS[1], block="one")
    with pytest.raises(StoreError, match="block"):  # the trial's record, which RunView.build takes, refuses it
        TrialRecord.from_json(bad, "trial a-tf")


def test_parsing_a_study_spec_leaves_the_kit_workload_table_alone(tmp_path: Path) -> None:
    """Two folders may name the same workload: each spec carries its own description, and the kit's table (kit.workloads.WORKLOADS) is the same object with the same entries before and after."""
    from typer.testing import CliRunner

    from kit.cli import app
    from kit.spec import load_spec
    from kit.workloads import WORKLOADS

    before = dict(WORKLOADS)
    specs = []
    for i in range(2):
        (tmp_path / f"d{i}").mkdir()
        res = CliRunner().invoke(app, ["new", "study", "same_name", "--dir", str(tmp_path / f"d{i}")])
        assert res.exit_code == 0, res.output
        toml = next((tmp_path / f"d{i}").rglob("experiment.toml"))
        text = toml.read_text(encoding="utf-8")
        assert "[study" in text
        specs.append(load_spec(toml.parent))
    assert dict(WORKLOADS) == before and all(s.workload.name not in WORKLOADS for s in specs)
    assert all(s.workload_info.folder and s.workload_info.name == s.workload.name for s in specs)
    assert "info" not in specs[0].to_dict()  # the resolution is the loader's, not part of the recorded spec


def test_gpu_trials_screened_trials_and_the_workload_a_spec_names(tmp_path: Path) -> None:
    """Review findings: a GPU trial records its GPUs as tables; the analysis screens an impossible trial to status
    "invalid"; a folder whose [workload] names a kit workload runs that workload, not the folder's."""
    gpu = trial("g-pt", "pytorch", gpus=[{"index": 3, "uuid": "GPU-3", "name": "NVIDIA H100 80GB HBM3"}])
    bad = trial("x-pt", "pytorch", position=1, status="invalid", error="train_time_s = -5")
    run = RunView.build(MANIFEST, records([gpu, bad]), VALUES)
    assert run.trials[0].gpus == (3,) and run.trials[1].status == "invalid" and run.measured() == [run.trials[0]]
    with pytest.raises(StoreError, match="gpus"):
        RunView.build(MANIFEST, records([trial("h-pt", "pytorch", gpus=[{"uuid": "GPU-3"}])]), VALUES)

    from typer.testing import CliRunner

    from kit.cli import app
    from kit.run.prepare import _study_request
    from kit.spec import load_spec

    assert CliRunner().invoke(app, ["new", "study", "toy", "--dir", str(tmp_path)]).exit_code == 0
    toml = next(tmp_path.rglob("experiment.toml"))
    text = toml.read_text(encoding="utf-8")
    toml.write_text(text.replace('[workload]\nname = "toy"', '[workload]\nname = "lenet5"')
                    .replace("hidden_units = 128\n", ""), encoding="utf-8")
    spec = load_spec(toml.parent)
    assert spec.study is not None and spec.workload.name == "lenet5"
    assert spec.workload_info.name == "lenet5" and not spec.workload_info.folder
    assert _study_request(spec, "pytorch") is None  # the kit's LeNet-5 runs, not the folder's module
