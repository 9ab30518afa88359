"""The run directory: atomic, append-only, versioned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.collectors.base import Row
from kit.errors import StoreError
from kit.store import SCHEMA_VERSION, RunDir


def test_create_write_read_roundtrip(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", {"experiment": "exp"})
    assert rd.path.name.endswith("-exp") and (rd.path / "trials").is_dir()
    rows = [Row(1.0, "cpu", "total", "util_pct", 50.0, "%"), Row(1.1, "cpu", "total", "util_pct", 60.0, "%")]
    rd.write_trial({"trial_id": "r000-c00-a", "position": 0}, rows)
    assert rd.finished_ids() == {"r000-c00-a"}
    df = rd.read_samples("r000-c00-a")
    assert list(df["value"]) == [50.0, 60.0] and list(df.columns) == ["t", "source", "device", "metric", "value", "unit"]
    assert rd.read_trial("r000-c00-a")["schema_version"] == SCHEMA_VERSION
    assert not list(rd.path.rglob("*.tmp"))


def test_append_only(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", {})
    rd.write_trial({"trial_id": "t1"}, [])
    with pytest.raises(StoreError, match="append-only"):
        rd.write_trial({"trial_id": "t1"}, [])


def test_schema_version_checked(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", {})
    man = json.loads((rd.path / "manifest.json").read_text())
    man["schema_version"] = 999
    (rd.path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(StoreError, match="schema version 999"):
        RunDir.open(rd.path)
    with pytest.raises(StoreError, match="not found"):
        RunDir.open(tmp_path / "nope")


def test_empty_samples_are_typed(tmp_path: Path) -> None:
    rd = RunDir.create(tmp_path, "exp", {})
    rd.write_trial({"trial_id": "t"}, None)
    assert rd.read_samples("t").empty
    assert rd.read_samples("never-written").empty
