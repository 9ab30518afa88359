"""Which datasets a run used (``Manifest.dataset`` / ``used_datasets``) and the synthetic-data threat built on it:
a workload without a dataset is not "synthetic data" (the false threat every dataset-less run used to carry)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from kit.analysis.validity import Ctx, synthetic_data
from kit.errors import StoreError
from tests._runs import bare_manifest

MNIST = {"name": "mnist", "source": "t10k_split", "directory": "/d", "origin": "bundled", "sha256": {}}
LEGACY = {"name": "none", "source": "synthetic", "directory": "/tmp/kit-no-dataset",
          "origin": "synthetic inputs, no dataset", "sha256": {}}


def _threats(**fields: Any) -> list[str]:
    return [t.title for t in synthetic_data(Ctx(bare_manifest(**fields), [], pd.DataFrame(), {}))]


def test_no_dataset_is_not_synthetic_data_old_runs_included() -> None:
    assert bare_manifest(dataset=None).dataset is None and _threats(dataset=None) == []
    # the stand-in entry runs wrote before the manifest could say "no dataset" reads as no dataset
    assert bare_manifest(dataset=LEGACY).dataset is None and _threats(dataset=LEGACY) == []
    man = bare_manifest(dataset=MNIST)
    assert man.dataset is not None and man.dataset.name == "mnist" and man.dataset.source == "t10k_split"
    assert [d.name for d in man.used_datasets()] == ["mnist"] and _threats(dataset=MNIST) == []


def test_synthetic_stand_ins_are_still_a_threat() -> None:
    fields = {"dataset": MNIST, "datasets": {"a": {**MNIST, "name": "imdb", "source": "synthetic"}, "b": MNIST}}
    assert [d.name for d in bare_manifest(**fields).used_datasets()] == ["imdb", "mnist"]
    assert _threats(**fields) == ["Synthetic data: imdb"]


@pytest.mark.parametrize("bad", [{"name": 3, "source": "x"}, {**MNIST, "sha256": ["a"]}, {**MNIST, "directory": 1}])
def test_a_crafted_dataset_entry_is_a_store_error_naming_the_key(bad: dict[str, Any]) -> None:
    with pytest.raises(StoreError, match="dataset must be a dataset table"):
        bare_manifest(dataset=bad)
