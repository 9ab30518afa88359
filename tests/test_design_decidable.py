"""Issue 15, item 1: hypotheses that can never be decided.

The Patel, Dai, distributed and DLBench paper profiles ran 3-5 trials per cell, below the kit's
minimum of 10 for a test, so their hypotheses were never tested and nothing said so. Each test
below fails on the code before the issue (no kit/analysis/design.py, no ``unit`` key, paper
profiles with 3-5 repetitions per tested cell):

1. the design function's figures against values computed by hand;
2. every paper profile's hypotheses are decidable by its design;
3. the across-configuration test runs on trial-level summaries (per-configuration medians, never
   steps): n_pairs = configurations, p = scipy.stats.wilcoxon on the medians;
4. ``kit list`` and the report say per hypothesis whether the profile can decide it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from typer.testing import CliRunner

from kit.analysis.across import mde_networks_sd
from kit.analysis.analyze import analyze_run
from kit.analysis.design import (
    design_summary,
    design_table,
    mde_ratio,
    mde_sd,
    mde_sd_asymptotic,
)
from kit.collectors.base import SAMPLE_COLUMNS
from kit.errors import SpecError
from kit.plan import make_plan
from kit.spec import load_spec
from kit.stats.power import min_p, min_p_asymptotic, min_p_exact
from kit.store import RunDir
from tests._runs import manifest_of, record_of, write_record

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"

# -- 1. the design function's figures, by hand ------------------------------------------------

Z975 = 1.959963984540054  # z(1 - 0.05/2)
Z80 = 0.8416212335729143  # z(0.8)


def test_smallest_attainable_p_by_hand() -> None:
    assert min_p_exact(5) == 0.0625  # 2 / 2^5: the issue's figure, no result significant at 0.05
    assert min_p_exact(3) == 0.25
    assert min_p_exact(10) == 2 / 1024
    assert min_p_exact(11) == 2 / 2048
    assert min_p(10) == min_p_exact(10)
    # normal approximation with continuity correction at R+ = 0, n = 11:
    # mean 11*12/4 = 33, var 11*12*23/24 = 126.5, z = 32.5/sqrt(126.5) = 2.88963...
    z = 32.5 / math.sqrt(126.5)
    assert min_p_asymptotic(11) == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert min_p_asymptotic(11) == pytest.approx(0.003858, abs=5e-6)


def test_minimum_detectable_effect_by_hand() -> None:
    # the old normal-theory figure, kept beside the simulated one: (1.95996 + 0.84162) / sqrt(10 * 3/pi)
    assert mde_sd_asymptotic(10, 0.05) == pytest.approx((Z975 + Z80) / math.sqrt(30 / math.pi), rel=1e-12)
    assert mde_sd_asymptotic(10, 0.05 / 3) == pytest.approx((2.393979 + Z80) / math.sqrt(30 / math.pi), abs=1e-6)
    # the exact test at n = 10 needs more than the formula said (issue 25: real power there was 0.58-0.7)
    assert mde_sd(10, 0.05) > mde_sd_asymptotic(10, 0.05) + 0.05
    # n = 11 at 0.05/30 rejects only when all 11 differences share a sign: about 2.05 SD for power 0.8
    assert mde_sd(11, 0.05 / 30) == pytest.approx(2.05, abs=0.05)
    assert mde_sd(5, 0.05) == math.inf and mde_sd(0, 0.05) is None  # 2/2^5 = 0.0625: nothing is detectable
    # as a ratio given a between-trial CV of 5 % in each arm: exp(delta * sqrt(2 ln(1.0025)))
    assert mde_ratio(1.0, 0.05) == pytest.approx(math.exp(math.sqrt(2 * math.log(1.0025))), rel=1e-12)
    assert mde_ratio(1.0, 0.05) == pytest.approx(1.073223, abs=1e-6)  # sqrt(0.0049938) = 0.0706665
    assert mde_ratio(math.inf, 0.05) is None


def _spec(reps: int, unit: str | None = None, modes: dict[str, str] | None = None) -> dict[str, Any]:
    h = [{"id": "H1", "metric": "time_s", "phases": ["train", "infer"]}]
    if unit:
        h[0]["unit"] = unit
    return {"design": {"repetitions": reps, "alpha": 0.05}, "hypotheses": h,
            "workload": {"params": {"mode": "train_infer"}},
            "cases": {c: {"workload": {"mode": m}} for c, m in (modes or {}).items()}}


def test_design_table_per_configuration_by_hand() -> None:
    """Patel-like: 3 configurations (one inference-only), 5 repetitions: 3 + ... tests, nothing decidable."""
    configs = {"c00": {"case": "gpu", "b": 1}, "c01": {"case": "gpu", "b": 2}, "c02": {"case": "cpu", "b": 1}}
    t = design_table(_spec(5, modes={"gpu": "train_infer", "cpu": "infer"}), configs, ["tensorflow", "pytorch"])
    train, infer = t["rows"]
    assert (train["unit"], train["n"], train["comparisons"]) == ("trial", 5, 2)  # the cpu case has no train phase
    assert (infer["n"], infer["comparisons"]) == (5, 3)
    assert t["family_size"] == 5 and train["holm_first_threshold"] == pytest.approx(0.01)
    assert train["min_p"] == 0.0625 and not train["decidable"] and not t["all_decidable"]
    assert "n = 5 < 10" in train["reason"] and "0.0625" in train["reason"] and "0.05/5" in train["reason"]
    assert train["mde_sd"] is None  # n = 5: no test, no MDE
    assert "NOT testable" in design_summary(train)


def test_design_table_across_configurations_by_hand() -> None:
    configs = {f"c{i:02d}": {"b": i} for i in range(12)}
    t = design_table(_spec(3, unit="configuration"), configs, ["tensorflow", "pytorch"], cv=0.1)
    assert t["family_size"] == 2 and t["all_decidable"]
    for r in t["rows"]:
        assert (r["unit"], r["n"], r["comparisons"], r["min_p"]) == ("configuration", 12, 1, 2 / 4096)
        assert r["decidable"] and r["reason"] is None
        # no network named: each configuration is its own unit of the t test across units (issue 25, item 3)
        assert r["mde_sd"] == pytest.approx(mde_networks_sd(12, 0.025), abs=1e-12)
        assert r["mde_ratio"] is None and r["cv"] is None  # differences across configurations: no CV ratio
    # the same 12 configurations tested one by one with 3 trials: 24 tests, none decidable
    per = design_table(_spec(3), configs, ["tensorflow", "pytorch"])
    assert per["family_size"] == 24 and not any(r["decidable"] for r in per["rows"])


def test_ten_pairs_are_not_enough_in_a_large_family() -> None:
    """n = 10 meets the minimum, but 2/2^10 = 0.00195 is not below 0.05/30: Holm's first threshold."""
    configs = {f"c{i}": {"d": i} for i in range(15)}
    t = design_table(_spec(10), configs, ["a", "b"])
    assert t["family_size"] == 30 and not t["all_decidable"]
    assert "n =" not in t["rows"][0]["reason"] and "0.05/30" in t["rows"][0]["reason"]
    assert design_table(_spec(11), configs, ["a", "b"])["all_decidable"]


def test_unit_is_validated(tmp_path: Path) -> None:
    text = (EXPERIMENTS / "dai_single_gpu_factors" / "experiment.toml").read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('unit = "configuration"     #', 'unit = "steps"     #'), encoding="utf-8")
    with pytest.raises(SpecError, match="unit"):
        load_spec(bad)


# -- 2. every paper profile can decide its hypotheses -----------------------------------------

PAPER = sorted(EXPERIMENTS.glob("*/experiment.toml"))


@pytest.mark.parametrize("path", PAPER, ids=[p.parent.name for p in PAPER])
def test_every_paper_profile_decides_its_hypotheses(path: Path) -> None:
    spec = load_spec(path)
    plan = make_plan(spec)
    t = design_table(spec.to_dict(), plan.configs, list(plan.arms))
    # Patel's sweep has 5 networks per device: its rows across configurations are descriptive by design
    # (issue 25, item 3; test_the_issue_s_profiles_use_the_alternatives_chosen checks they say so)
    undecidable = [f"{r['id']} {r['phase']}: {r['reason']}" for r in t["rows"] if not r["decidable"]
                   and not (path.parent.name == "patel_models_sweep" and r["unit"] == "configuration")]
    assert t["rows"] and not undecidable
    # decidable means a finite MDE at power 0.8 on the test's real rejection region; accuracy moves in steps
    # (ties): it must stay decidable under the normal-approximation test that ties get
    assert all(r["mde_sd"] is not None and math.isfinite(r["mde_sd"]) for r in t["rows"])
    tied = [r for r in t["rows"] if r["metric"] == "accuracy" and r["unit"] == "trial"]
    assert all(r["mde_sd_with_ties"] is not None for r in tied), [(r["id"], r["n"], r["holm_first_threshold"]) for r in tied]


def test_the_issue_s_profiles_use_the_alternatives_chosen() -> None:
    """Patel sweep and Dai across configurations (3 trials each), distributed and DLBench more runs."""
    def table(name: str) -> dict[str, Any]:
        spec = load_spec(EXPERIMENTS / name / "experiment.toml")
        plan = make_plan(spec)
        return design_table(spec.to_dict(), plan.configs, list(plan.arms))

    patel = table("patel_models_sweep")  # issue 25, item 3: networks per device are the n, GPU and CPU apart
    assert {(r["id"], r["unit"], r["n"], r["device"]) for r in patel["rows"]} == {
        ("H1", "configuration", 5, "auto"), ("H2", "configuration", 5, "auto"), ("H2", "configuration", 5, "cpu"),
        ("H3", "configuration", 5, "auto")}
    assert patel["family_size"] == 4
    assert not any(r["decidable"] for r in patel["rows"])
    assert all("population-level p" in r["reason"] and "0.0625" in r["reason"] for r in patel["rows"])
    dai = table("dai_single_gpu_factors")
    assert [(r["unit"], r["n"], r["decidable"]) for r in dai["rows"]] == [("configuration", 7, True)]
    dist = table("patel_distributed")
    assert [(r["unit"], r["n"]) for r in dist["rows"]] == [("trial", 10)]
    dl = table("elshawi_dlbench")
    cases = len(load_spec(EXPERIMENTS / "elshawi_dlbench" / "experiment.toml").cases)
    assert {(r["unit"], r["n"]) for r in dl["rows"]} == {("trial", 12)} and dl["family_size"] == 5 * cases
    # two Holm families stated in the spec: accuracy and time (the paper's Q1, Q2); resources (Q3), per case
    assert dl["family_sizes"] == {"primary": 2 * cases, "secondary": 3 * cases}
    assert {r["id"] for r in dl["rows"] if r["family"] == "secondary"} == {"H3", "H4", "H5"}
    for name in ("patel_distributed", "elshawi_dlbench"):  # the change of repetitions is a listed deviation
        spec = load_spec(EXPERIMENTS / name / "experiment.toml")
        assert any(d.aspect == "repetitions" and str(spec.design.repetitions) in d.kit for d in spec.deviations)


# -- 3. the across-configuration test on trial-level summaries --------------------------------

SPEC = """
schema = 1
[experiment]
id = "i15d"
title = "issue 15 across-configuration test"
study = "none"
citation = "test"
reproduces = "nothing"
frameworks = ["tensorflow", "pytorch"]
seed = 15
[goal]
analyse = "a"
purpose = "b"
quality_focus = "c"
viewpoint = "d"
context = "e"
[workload]
name = "calibrated"
batch_size = 1
epochs = 1
steps_per_epoch = 1
learning_rate = 0.01
warmup_steps = 0
device = "cpu"
[grid]
train_s = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]
[design]
repetitions = 3
warmup_repetitions = 0
timeout_s = 120
{unit}
[telemetry]
collectors = ["cpu"]
[[hypotheses]]
id = "H1"
question = "Q1"
metric = "time_s"
phases = ["train"]
h0 = "no difference"
h1 = "a difference"
"""


def _time(t: Any) -> float:
    """A known trial-level value: configuration's base x framework factor x a per-trial wobble."""
    base = float(t.config["train_s"])
    fw = 1.0 + 0.013 * (int(t.config_id[1:]) - 4.5) if t.framework == "tensorflow" else 1.0  # no zero, no tie
    return base * fw * (1.0 + 0.01 * (t.repetition - 1) * (1 if t.framework == "pytorch" else -1))


def _make_run(tmp_path: Path, unit_line: str) -> RunDir:
    path = tmp_path / "i15d.toml"
    path.write_text(SPEC.replace("{unit}", unit_line), encoding="utf-8")
    spec = load_spec(path)
    plan = make_plan(spec)
    man = manifest_of(spec, dataset={"name": "synthetic", "source": "generated", "origin": "test"})
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    for t in plan.trials:
        start = 1.0e9 + 10.0 * t.position
        write_record(rd, record_of(t, start, _time(t), 0.1), pd.DataFrame(columns=SAMPLE_COLUMNS))
    return rd


def test_across_configurations_pairs_the_configurations_medians(tmp_path: Path) -> None:
    rd = _make_run(tmp_path, 'unit = "configuration"')
    a = analyze_run(rd.path).to_json()
    (h,) = a["hypotheses"]
    plan = make_plan(load_spec(tmp_path / "i15d.toml"))
    assert h["test_unit"] == "configuration" and h["config_id"] is None
    assert h["n_pairs"] == len(plan.configs) == 12 and h["tested"]  # no network named: each configuration a unit
    # the reference: per configuration and arm, the median of its 3 trials' values
    med = {(cid, arm): float(np.median([_time(t) for t in plan.trials if t.config_id == cid and t.arm == arm]))
           for cid in plan.configs for arm in plan.arms}
    tf = [med[(cid, "tensorflow")] for cid in plan.configs]
    pt = [med[(cid, "pytorch")] for cid in plan.configs]
    ref = sps.ttest_1samp(np.log(np.divide(tf, pt)), 0.0)  # issue 25, item 3: log ratios, t test across units
    assert h["p"] == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert [(c["config_id"], c["a"], c["b"]) for c in h["per_config"]] == \
        [(cid, pytest.approx(med[(cid, "tensorflow")]), pytest.approx(med[(cid, "pytorch")])) for cid in plan.configs]
    assert all(c["n_a"] == 3 and c["n_b"] == 3 and len(c["trial_ids"]) == 6 for c in h["per_config"])
    assert h["p_adjust"]["family_size"] == 1 and "t test across the 12" in h["comparison"]["reason"]
    d = a["design"]
    assert d["all_decidable"] and d["rows"][0]["unit"] == "configuration" and d["rows"][0]["n"] == 12


def test_per_configuration_default_cannot_test_three_trials(tmp_path: Path) -> None:
    """The old way on the same data: 12 tests of 3 pairs, none tested, and the design table says why."""
    a = analyze_run(_make_run(tmp_path, "").path).to_json()
    assert len(a["hypotheses"]) == 12 and not any(h["tested"] for h in a["hypotheses"])
    assert all(h["test_unit"] == "trial" and h["n_pairs"] == 3 for h in a["hypotheses"])
    (row,) = a["design"]["rows"]
    assert not row["decidable"] and "n = 3 < 10" in row["reason"]


# -- 4. kit list and the report ---------------------------------------------------------------


def test_kit_list_states_per_hypothesis_whether_the_profile_can_test_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from kit.catalog import list_experiments
    from kit.cli import app, output

    monkeypatch.setattr(output, "terminal_console", lambda stderr=False: Console(width=600, stderr=stderr))
    found = {e["id"]: e for e in list_experiments(EXPERIMENTS)}
    paper = {p["name"]: p for p in found["patel_models_sweep"]["profiles"]}
    assert not paper["paper"]["design"]["all_decidable"]  # 5 networks per device: descriptive (issue 25, item 3)
    assert not paper["quick"]["design"]["all_decidable"]
    assert {p["name"]: p for p in found["dai_single_gpu_factors"]["profiles"]}["paper"]["design"]["all_decidable"]
    res = CliRunner().invoke(app, ["list", "--experiments-dir", str(EXPERIMENTS)])
    assert res.exit_code == 0, res.output
    rows = {tuple(line.split()[:2]): line.split() for line in res.output.splitlines() if line.strip()}
    assert rows[("dai_single_gpu_factors", "paper")][-2] == "yes"  # the compact view: decidable yes/no per profile
    assert rows[("patel_models_sweep", "paper")][-2] == "no" and rows[("patel_models_sweep", "quick")][-2] == "no"
    flat = ""
    for experiment in ("dai_single_gpu_factors", "patel_models_sweep"):  # the details: kit show ID
        res = CliRunner().invoke(app, ["show", experiment, "--experiments-dir", str(EXPERIMENTS)])
        assert res.exit_code == 0, res.output
        flat += " ".join(res.output.split())
    assert "configuration unit, across 7 network(s) on device auto (the GPU where the host has one); testable; MDE" in flat
    assert "across 5 network(s) on the CPU; NOT testable: 5 networks on the CPU cannot support a population-level p" in flat
    assert "NOT testable" in flat  # the quick profiles' 2 trials per cell


@pytest.mark.slow
def test_report_shows_the_design_table(tmp_path: Path) -> None:
    from kit.report.context import build_context
    from kit.report.latex import render_latex

    rd = _make_run(tmp_path, 'unit = "configuration"')
    analysis = analyze_run(rd.path)
    ctx = build_context(rd.manifest(), analysis, rd.path)
    assert ctx["design"]["rows"][0]["decidable"]
    old = dataclasses.replace(analysis, design=None)  # an analysis.json written before issue 15
    assert build_context(rd.manifest(), old, rd.path)["design"]["rows"][0]["n"] == 12
    render_latex(ctx, tmp_path / "report")
    tex = (tmp_path / "report" / "latex" / "tables" / "design.tex").read_text(encoding="utf-8")
    assert "Can this profile decide its hypotheses?" in tex and "configuration" in tex
    assert "\\input{tables/design}" in (tmp_path / "report" / "latex" / "report.tex").read_text(encoding="utf-8")
    from kit.report.html import render_html

    html = render_html(ctx, tmp_path).read_text(encoding="utf-8")
    assert "Can this profile decide its hypotheses?" in html and "across 12 configurations" in html
