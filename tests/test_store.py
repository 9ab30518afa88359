"""The run directory: atomic, append-only, versioned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.collectors.base import Row
from kit.errors import StoreError
from kit.store import SCHEMA_VERSION, RunDir
from tests._runs import bare_manifest_json, trial, write_record


def test_create_write_read_roundtrip(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", bare_manifest_json(experiment="exp"))
    assert rd.path.name.endswith("-exp") and (rd.path / "trials").is_dir()
    rows = [Row(1.0, "cpu", "total", "util_pct", 50.0, "%"), Row(1.1, "cpu", "total", "util_pct", 60.0, "%")]
    write_record(rd, trial("r000-c00-a", "a"), rows)
    assert rd.finished_ids() == {"r000-c00-a"}
    df = rd.read_samples("r000-c00-a")
    assert list(df["value"]) == [50.0, 60.0] and list(df.columns) == ["t", "source", "device", "metric", "value", "unit"]
    assert rd.read_trial("r000-c00-a")["schema_version"] == SCHEMA_VERSION
    assert not list(rd.path.rglob("*.tmp"))


def test_append_only(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", bare_manifest_json())
    write_record(rd, trial("t1", "a"), [])
    with pytest.raises(StoreError, match="append-only"):
        write_record(rd, trial("t1", "a"), [])


def test_schema_version_checked(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", bare_manifest_json())
    man = json.loads((rd.path / "manifest.json").read_text())
    man["schema_version"] = 999
    (rd.path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError, match="schema version 999"):
        RunDir.open(rd.path)
    with pytest.raises(StoreError, match="not found"):
        RunDir.open(tmp_path / "nope")


def test_empty_samples_are_typed(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", bare_manifest_json())
    write_record(rd, trial("t", "a"), None)
    assert rd.read_samples("t").empty
    assert rd.read_samples("never-written").empty


def test_a_manifest_the_store_would_refuse_is_never_written(tmp_path: Path) -> None:
    """The kit writes only what its readers accept: a malformed manifest is refused before any directory exists."""
    with pytest.raises(StoreError, match=r"plan\.arms"):
        RunDir.create(tmp_path / "runs", "exp", bare_manifest_json(plan={"arms": []}))
    assert not (tmp_path / "runs").exists()


def test_the_typed_manifest_reads_back_what_was_written(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", bare_manifest_json(
        experiment="exp", executor={"name": "local"}, dataset=None, command=["kit", "run", "x.toml"],
        spec_source={"path": "x.toml", "text": "[experiment]", "sha256": "ab"}))
    man = RunDir.open(rd.path).manifest()
    assert (man.experiment, man.executor.name, man.dataset, man.command) == ("exp", "local", None,
                                                                            ("kit", "run", "x.toml"))
    assert man.spec_source is not None and man.spec_source.text == "[experiment]" and man.arms == ("pytorch",)
    assert man.to_json() == json.loads((rd.path / "manifest.json").read_text())
    rd.update_manifest(status="complete")
    assert rd.manifest().status == "complete"
