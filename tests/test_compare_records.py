"""The typed records of `kit compare` (kit.compare_records): their JSON is the one `kit compare --json` writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from kit.analysis.host_state import SideState
from kit.compare import CompareOptions, judge, mark_suspects
from kit.compare_records import CompareRow, Comparison, ProvenanceDiff

SCHEMA = json.loads((Path(__file__).parent.parent / "kit" / "schemas" / "compare.schema.json").read_text())


def bare_row(**kw: Any) -> CompareRow:
    """A row with the given fields and neutral values elsewhere (for the verdict and load logic alone)."""
    base: dict[str, Any] = dict(config="c", metric="time_s", phase="train", arm="a", unit="s", n_a=10, n_b=10,
                                median_a=1.0, median_b=1.0, ratio=1.0, ratio_low=0.9, ratio_high=1.1,
                                ratio_estimator="", ratio_of_medians=1.0, test=None, p=None, cliffs_delta=None,
                                magnitude=None, reason=None, lower_is_better=True, paired=True)
    return CompareRow(**{**base, **kw})


def test_a_judged_row_keeps_the_json_keys_in_their_order() -> None:
    rng = np.random.default_rng(0)
    a = rng.lognormal(0.0, 0.05, 12)
    res = judge([("c", "time_s", "train", "b vs a", a, a * 1.2)], paired=True, opts=CompareOptions(n_boot=200))
    row = res.rows[0]
    doc = row.to_json()
    assert list(doc)[:21] == ["config", "metric", "phase", "arm", "unit", "n_a", "n_b", "median_a", "median_b",
                              "ratio", "ratio_low", "ratio_high", "ratio_estimator", "ratio_of_medians", "test", "p",
                              "cliffs_delta", "magnitude", "reason", "lower_is_better", "paired"]
    assert list(doc)[-2:] == ["p_adj", "verdict"] and doc["verdict"] == row.verdict == "regression"
    assert doc["mde"] == row.mde and doc["n_needed"] == row.n_needed and "load" not in doc
    assert res.counts["regression"] == 1 and sum(res.counts.values()) == 1
    assert json.loads(json.dumps(res.to_json())) == res.to_json()


def test_a_suspect_row_carries_its_load_and_the_verdict_it_was() -> None:
    quiet, shaken = SideState(12, 0), SideState(12, 6)
    (row,) = mark_suspects([bare_row(verdict="regression")], lambda r: (quiet, shaken), "A", "B")
    doc = row.to_json()
    assert row.verdict == "suspect" and row.was == "regression" and row.suspect_cause
    assert row.load is not None and row.load.b.disturbed == 6
    assert list(doc)[-3:] == ["load", "was", "suspect_cause"] and doc["load"]["b"]["disturbed"] == 6


def test_the_comparison_json_has_the_keys_its_schema_requires() -> None:
    cmp = Comparison(rows=(bare_row(),), threshold=0.05, alpha=0.05, run_a="a", run_b="b", experiment_a="x",
                     experiment_b="x", provenance_differences=(ProvenanceDiff("host.kernel", "5", "6", "OS"),),
                     claims_changed=())
    doc = cmp.to_json()
    required = set(SCHEMA["required"]) - {"schema", "kit_version"}
    assert required <= set(doc) and doc["claims_changed"] == [] and "arms" not in doc
    assert doc["provenance_differences"] == [{"key": "host.kernel", "a": "5", "b": "6", "may_explain": "OS"}]
    assert "arms" in dataclasses.replace(cmp, arms=("a", "b"), claims_changed=None).to_json()
