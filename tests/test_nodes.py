"""Several nodes: node effect on paired differences, and heterogeneous hardware flagged."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kit.analysis.nodes import heterogeneous_nodes, node_analysis
from kit.analysis.validity import Ctx
from kit.records import TrialRecord
from tests._runs import bare_manifest, records_of


def _data(shift_on_n2: float) -> tuple[dict, list[TrialRecord], pd.DataFrame]:
    rng = np.random.default_rng(1)
    trials, rows = [], []
    for block in range(24):
        host = "n1" if block < 12 else "n2"
        for arm, base in (("tensorflow", 2.0), ("pytorch", 1.0)):
            tid = f"r{block:03d}-c00-{arm}"
            value = base + rng.normal(0, 0.01) + (shift_on_n2 if host == "n2" and arm == "tensorflow" else 0.0)
            trials.append({"trial_id": tid, "host": host, "block": block, "arm": arm})
            rows.append({"trial_id": tid, "arm": arm, "config_id": "c00", "block": block, "metric": "time_s",
                         "phase": "train", "value": value})
    manifest = {"spec": {"design": {"alpha": 0.05},
                         "hypotheses": [{"id": "H1", "metric": "time_s", "phases": ["train"], "question": "q"}]},
                "nodes": {"n1": {"cpu_model": "X", "gpus": [{"name": "H100", "driver_version": "580"}]},
                          "n2": {"cpu_model": "X", "gpus": [{"name": "A100", "driver_version": "580"}]}}}
    return manifest, records_of(trials), pd.DataFrame(rows)


def test_node_effect_detected_and_heterogeneity_flagged() -> None:
    manifest, trials, use = _data(shift_on_n2=0.5)
    res = node_analysis(bare_manifest(**manifest), trials, use, ["tensorflow", "pytorch"])
    assert [h["host"] for h in res["hosts"]] == ["n1", "n2"]
    (effect,) = res["effects"]
    assert effect["p"] < 0.001 and effect["nodes"] == 2 and effect["n"] == 24
    threats = heterogeneous_nodes(Ctx(bare_manifest(**manifest), trials, use, {"nodes": res}))
    rules = {t.rule for t in threats}
    assert rules == {"nodes", "node_effect"}
    assert any("gpus" in t.evidence for t in threats if t.rule == "nodes")


def test_same_nodes_without_effect_stay_quiet() -> None:
    manifest, trials, use = _data(shift_on_n2=0.0)
    manifest["nodes"]["n2"] = manifest["nodes"]["n1"]
    res = node_analysis(bare_manifest(**manifest), trials, use, ["tensorflow", "pytorch"])
    assert res["effects"][0]["p"] > 0.05
    threats = heterogeneous_nodes(Ctx(bare_manifest(**manifest), trials, use, {"nodes": res}))
    assert [t.status for t in threats] == ["mitigated"]
