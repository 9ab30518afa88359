"""Which datasets a run used (kit.records.run_datasets) and the synthetic-data threat built on it: a workload
without a dataset is not "synthetic data" (the false threat every dataset-less run used to carry)."""

from __future__ import annotations

import pandas as pd

from kit.analysis.validity import Ctx, synthetic_data
from kit.records import run_datasets

MNIST = {"name": "mnist", "source": "t10k_split", "directory": "/d", "origin": "bundled", "sha256": {}}
LEGACY = {"name": "none", "source": "synthetic", "directory": "/tmp/kit-no-dataset",
          "origin": "synthetic inputs, no dataset", "sha256": {}}


def _threats(man: dict) -> list[str]:
    return [t.title for t in synthetic_data(Ctx(man, [], pd.DataFrame(), {}))]


def test_no_dataset_is_not_synthetic_data_old_runs_included() -> None:
    assert run_datasets({"dataset": None}) == [] and _threats({"dataset": None}) == []
    assert run_datasets({"dataset": LEGACY}) == [] and _threats({"dataset": LEGACY}) == []  # written before the fix
    assert run_datasets({"dataset": MNIST}) == [MNIST] and _threats({"dataset": MNIST}) == []


def test_synthetic_stand_ins_are_still_a_threat() -> None:
    man = {"dataset": MNIST, "datasets": {"a": {**MNIST, "name": "imdb", "source": "synthetic"}, "b": MNIST}}
    assert [d["name"] for d in run_datasets(man)] == ["imdb", "mnist"]
    assert _threats(man) == ["Synthetic data: imdb"]
