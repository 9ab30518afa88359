"""Golden analysis: a stored run directory (a real quick run of the calibrated workload, made from
tests/data/golden/golden.toml) analysed afresh must give tests/data/golden/analysis.json, number
for number (floats within a relative 1e-6: BLAS and library builds may differ in the last digits).

Regenerate after an intended change of the analysis with ``KIT_REGEN_GOLDEN=1 pytest
tests/test_analysis_golden.py`` and review the diff of analysis.json in the commit.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kit.analysis.analyze import analyze_run

GOLDEN = Path(__file__).parent / "data" / "golden"
VOLATILE = {"kit_version", "seal"}  # change with every release (and the seal with the user's key), not with the numbers
REL = 1e-6


def _diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if len(out) > 20:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k in VOLATILE:
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'fresh' if k in a else 'golden'}")
            else:
                _diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} items, golden {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool) and not isinstance(b, bool):
        if not math.isclose(a, b, rel_tol=REL, abs_tol=1e-12):
            out.append(f"{path}: {a!r} != golden {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} != golden {b!r}")


@pytest.fixture
def fresh(tmp_path: Path) -> dict[str, Any]:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "run", run)  # analyze_run writes analysis.json into the run directory
    analysis = analyze_run(run)
    return json.loads(json.dumps(analysis.to_json()))  # as stored: tuples -> lists, keys -> str


def test_fresh_analysis_matches_the_golden_one(fresh: dict[str, Any]) -> None:
    target = GOLDEN / "analysis.json"
    if os.environ.get("KIT_REGEN_GOLDEN") == "1":
        stored = {k: v for k, v in fresh.items() if k != "seal"}  # the seal depends on the key of whoever ran it
        target.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    golden = json.loads(target.read_text(encoding="utf-8"))
    problems: list[str] = []
    _diff(fresh, golden, "analysis", problems)
    assert not problems, "analysis differs from the golden one:\n" + "\n".join(problems)


def test_golden_statistics_carry_what_recomputing_needs() -> None:
    """Every test in the golden analysis names its method, alternative, n and exact/asymptotic."""
    golden = json.loads((GOLDEN / "analysis.json").read_text(encoding="utf-8"))
    tested = [h for h in golden["hypotheses"] if h["tested"]]
    assert len(tested) == 2
    for h in tested:
        t = h["comparison"]["test"]
        assert t["method"] == "wilcoxon signed-rank" and t["alternative"] == "two-sided"
        assert t["n_pairs"] == h["n_pairs"] == 10 and t["n_a"] == t["n_b"] == 10
        assert isinstance(t["exact"], bool) and t["method_detail"] in ("exact", "asymptotic")
        assert t["call"].startswith("scipy.stats.wilcoxon(")
        assert h["p_adjust"] == {"method": "holm", "family": "primary", "family_size": 2}
        ratio = h["comparison"]["ratio"]
        assert ratio["n_boot"] > 0 and "BCa" in ratio["method"] and ratio["seed"] == 0
        assert [v for v in golden["values"] if v["trial_id"] and v["metric"] == "time_s"]


def test_golden_threats_see_the_idle_baseline() -> None:
    golden = json.loads((GOLDEN / "analysis.json").read_text(encoding="utf-8"))
    assert golden["baseline"]["recorded"] and golden["baseline"]["cpu_util_mean_pct"] is not None
    assert {"order", "warmup", "foreign_cpu", "external"} <= {t["rule"] for t in golden["validity"]}


def test_the_golden_run_reads_as_typed_records(tmp_path: Path) -> None:
    """A run directory written by an older kit (the golden run: the stand-in dataset entry, no schema_version in
    its trial files' shape beyond 1) opens as the typed records every reader gets: Manifest (its stand-in dataset
    read as "no dataset"), TrialRecord, and the Analysis of analysis.json."""
    from kit.analysis.analyze import current_analysis
    from kit.analysis_record import Analysis
    from kit.store import RunDir

    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "run", run)
    rd = RunDir.open(run)
    man = rd.manifest()
    stored = json.loads((run / "manifest.json").read_text())
    assert stored["dataset"]["name"] == "none" and man.dataset is None and man.used_datasets() == []
    assert man.experiment == stored["experiment"] and man.plan_digest == man.plan.digest() == stored["plan_digest"]
    assert [t.trial_id for t in man.plan.trials] == [t["trial_id"] for t in stored["plan"]["trials"]]
    assert man.executor.name == "local" and man.to_json() == stored
    recs = rd.trial_records()
    assert len(recs) == len(man.plan.trials) and sum(r.counts for r in recs) == sum(
        1 for t in man.plan.trials if not t.warmup)
    analysis, _ = current_analysis(run)
    golden = Analysis.from_json(json.loads((GOLDEN / "analysis.json").read_text()), "golden analysis.json")
    assert isinstance(analysis, Analysis) and analysis.arms == golden.arms and len(analysis.values) == len(golden.values)
    for arm in analysis.arms:
        assert analysis.values_of("time_s", "train", arm) == pytest.approx(golden.values_of("time_s", "train", arm))
