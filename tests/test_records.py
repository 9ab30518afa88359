"""The typed records at the store's edge (kit.manifest.Manifest, kit.analysis_record.Analysis): a crafted file is a
StoreError naming the key path, never an "internal error" further in, and what is typed reads back as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kit.analysis_record import Analysis
from kit.errors import StoreError
from kit.records import counts
from tests._runs import bare_analysis, bare_manifest, bare_manifest_json

ROW = {"trial_id": "t", "arm": "pytorch", "config_id": "c00", "metric": "time_s", "phase": "train", "status": "ok",
       "warmup": False, "value": 1.5}


@pytest.mark.parametrize(("fields", "key"), [
    ({"experiment": 3}, "experiment"),
    ({"plan": {"seed": "1"}}, r"plan\.seed"),
    ({"plan": {"trials": [{"trial_id": "x"}]}}, r"plan\.trials\[0\]"),
    ({"executor": {"name": 7}}, r"executor\.name"),
    ({"datasets": ["mnist"]}, "datasets"),
    ({"spec": {"design": {"alpha": 2}}}, r"spec\.design\.alpha"),
    ({"schema_version": 2}, "schema version 2"),
])
def test_a_crafted_manifest_is_refused_naming_the_key(fields: dict[str, Any], key: str) -> None:
    with pytest.raises(StoreError, match=key):
        bare_manifest(**fields)


def test_the_manifest_types_what_readers_ask() -> None:
    man = bare_manifest(executor={"name": "slurm", "options": {"partition": "p"}, "chunks": [[0]]},
                        collectors=[{"name": "cpu", "ok": True}], command=["kit", "run"], started=10, ended=70.5,
                        spec={"workload": {"name": "lenet5"}, "telemetry": {"collectors": ["nvml"]},
                              "hypotheses": [{"id": "H1", "metric": "time_s", "phases": ["train"], "question": "q"}]})
    assert man.executor.name == "slurm" and man.executor.as_dict()["chunks"] == [[0]]
    assert (man.workload, man.alpha, man.telemetry_collectors, man.started, man.ended) == (
        "lenet5", 0.05, ["nvml"], 10.0, 70.5)
    assert [h["id"] for h in man.hypotheses] == ["H1"] and man.command == ("kit", "run")
    assert bare_manifest().executor.name == "local"  # a run without an executor record ran here


@pytest.mark.parametrize(("fields", "key"), [
    ({"schema_version": 9}, "schema_version"),
    ({"alpha": 0}, "alpha"),
    ({"arms": "pytorch"}, "arms"),
    ({"values": [ROW, "x"]}, "values"),
    ({"values": [{**ROW, "value": "1.5"}]}, r"values\[0\]\.value"),
    ({"values": [{**ROW, "arm": None}]}, r"values\[0\]\.arm"),
    ({"values": [{**ROW, "warmup": "no"}]}, r"values\[0\]\.warmup"),
    ({"trial_env": [{"arm": 1}]}, r"trial_env\[0\]\.arm"),
    ({"extras": []}, "extras"),
])
def test_a_crafted_analysis_is_refused_naming_the_key(fields: dict[str, Any], key: str) -> None:
    with pytest.raises(StoreError, match=key):
        bare_analysis(**fields)
    with pytest.raises(StoreError, match=r"analysis\.json"):
        Analysis.from_json([1, 2], "analysis.json")


def test_the_analysis_applies_the_one_rule_of_what_counts() -> None:
    rows = [ROW, {**ROW, "trial_id": "w", "warmup": True, "value": 9.0}, {**ROW, "trial_id": "e", "status": "error"},
            {**ROW, "trial_id": "n", "value": None}, {**ROW, "trial_id": "t2", "value": 2.5},
            {**ROW, "trial_id": "tf", "arm": "tensorflow", "value": 4.0}]
    an = bare_analysis(values=rows, arms=["pytorch", "tensorflow"], configs={"c00": {"batch_size": 8}})
    assert an.values_of("time_s", "train", "pytorch") == [1.5, 2.5]
    assert [v.trial_id for v in an.counted_values()] == [r["trial_id"] for r in rows
                                                            if counts(r) and r["value"] is not None]
    assert an.config_label("c00") == "batch_size=8" and an.config_label("nope") == "default"
    # the typed rows write every column of the value table: the ones this crafted table lacks as null
    assert [{k: v[k] for k in r} for v, r in zip(an.to_json()["values"], rows, strict=True)] == rows


def test_a_manifest_written_by_the_kit_round_trips(tmp_path: Path) -> None:
    from kit.store import RunDir

    rd = RunDir.create(tmp_path, "t", bare_manifest_json(dataset={"name": "mnist", "source": "t10k_split",
                                                                   "directory": "/d", "origin": "bundled",
                                                                   "sha256": {"a": "b"}}))
    man = rd.manifest()
    assert man.dataset is not None and man.dataset.files == {"a": "b"} and man.dataset.directory == Path("/d")
    assert man.to_json() == json.loads((rd.path / "manifest.json").read_text())
