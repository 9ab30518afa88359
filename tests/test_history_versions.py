"""`kit history` labels each arm with its own framework version (issue 39, item 8): the version the arm's own trials
reported from inside, never the other arm's, also for a run that carries a label (kit run --label)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.history import history

GOLDEN = Path(__file__).parent / "data" / "golden" / "run"
VERSIONS = {"pytorch": ["2.13.0+cpu", "2.14.1+cpu"], "tensorflow": ["2.21.0", "2.21.1"]}


def _runs(tmp_path: Path, labels: list[str | None]) -> Path:
    """Copies of the golden run (real trial records) whose trials report per-arm framework versions."""
    runs = tmp_path / "runs"
    for i, label in enumerate(labels):
        dest = runs / f"r{i}"
        shutil.copytree(GOLDEN, dest)
        for trial in (dest / "trials").glob("*.json"):
            rec = json.loads(trial.read_text())
            rec["env"]["framework_version"] = VERSIONS[rec["env"]["framework"]][i]
            trial.write_text(json.dumps(rec))
        man = json.loads((dest / "manifest.json").read_text())
        man.update(label=label, started=1_790_000_000.0 + i)
        (dest / "manifest.json").write_text(json.dumps(man))
    return runs


def test_the_label_of_an_arm_is_its_own_version() -> None:
    """The rule (tests/_runs.py's builders): each arm its own entry of trial_env; a run label stays the run's."""
    from kit.history import _label, arm_version
    from tests._runs import bare_analysis, bare_manifest

    analysis = bare_analysis(arms=["tensorflow", "pytorch"], trial_env=[
        {"arm": "tensorflow", "framework": "tensorflow", "framework_version": "2.21.0"},
        {"arm": "pytorch", "framework": "pytorch", "framework_version": "2.14.1+cpu"}])
    assert arm_version(analysis, "pytorch") == "pytorch 2.14.1+cpu"
    assert arm_version(analysis, "tensorflow") == "tensorflow 2.21.0"
    assert arm_version(bare_analysis(trial_env=[{"arm": "tensorflow", "framework_version": "2.21.0"}]),
                       "pytorch") is None  # never the other arm's
    assert _label(bare_manifest(), analysis, "pytorch", "r0") == "pytorch 2.14.1+cpu"
    assert _label(bare_manifest(label="torch 2.14"), analysis, "tensorflow", "r0") == "torch 2.14"


@pytest.mark.slow
def test_each_arm_is_labelled_with_its_own_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kit import history_cache

    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "cache"))
    runs = _runs(tmp_path, [None, "torch 2.14"])  # the second run's label names one framework's version
    for arm in ("pytorch", "tensorflow"):
        res = history(runs, "time_s", "train", arm).to_json()
        want = [f"{arm} {v}" for v in VERSIONS[arm]]
        assert [r["version"] for r in res["runs"]] == want
        assert [r["label"] for r in res["runs"]] == [want[0], "torch 2.14"]  # unlabelled: the arm's own version
        assert history(runs, "time_s", "train", arm).to_json()["runs"] == res["runs"]  # the same from the cache
