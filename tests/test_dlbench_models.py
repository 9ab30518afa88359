"""DLBench (seed 003) with every model of the paper: the translation LSTM (spa_eng) and Faster R-CNN (voc2012)
beside the CNNs and LSTMs. The Pearson correlation of epochs and accuracy the paper ends Sec. 5.5.4 with (pure
functions against hand-built inputs and scipy), each case's accuracy measure, the paper's models a run lacks,
and one report section per case, on fake runs (tests._runs.run_view; no framework runs, no run directory)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from kit.analysis.metrics import VALUE_COLUMNS
from kit.workloads.study_import import import_study_module
from tests._runs import run_view
from tests._studies import study_sections
from tests.test_report_browser import needs_chromium

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "experiments" / "elshawi_dlbench"
ec = import_study_module(STUDY, "epoch_correlation", package="dlbench_study")
an = import_study_module(STUDY, "analysis", package="dlbench_study")
rep = import_study_module(STUDY, "report", package="dlbench_study")

ALL = {"mnist": 15, "cifar10": 100, "cifar100": 200, "svhn": 100, "imdb": 50, "ptb": 50, "spa_eng": 100,
       "voc2012": 100}


def _curve(trial: str, case: str, arm: str, acc: list[float]) -> Any:
    return ec.Curve(trial, case, arm, tuple(acc))


# ------------------------------------------------------------------------------------------ pure functions


def test_pearson_of_a_line_is_one_and_its_fisher_interval_collapses() -> None:
    x = np.arange(1.0, 21.0)
    assert ec.pearson(x, 0.5 + 0.01 * x) == (pytest.approx(1.0), "")
    assert ec.pearson(x, 0.9 - 0.01 * x)[0] == pytest.approx(-1.0)
    assert ec.fisher_ci(1.0, 20) == (1.0, 1.0) and ec.fisher_ci(0.5, 3) is None
    cor = ec.correlate([_curve(f"t{i}", "mnist", "pytorch", list(0.5 + 0.01 * x)) for i in range(5)], "five lines")
    assert cor.r == pytest.approx(1.0) and cor.n_points == 100 and cor.n_runs == 5
    assert cor.bootstrap_ci == (pytest.approx(1.0), pytest.approx(1.0))


def test_a_flat_curve_has_no_correlation_and_says_why() -> None:
    r, why = ec.pearson(np.arange(1.0, 11.0), np.full(10, 0.3))
    assert r is None and "same after every epoch" in why
    assert ec.pearson([1.0, 2.0], [0.1, 0.2]) == (None, "2 points (at least 3 needed)")
    cor = ec.correlate([_curve(f"t{i}", "ptb", "tensorflow", [0.3] * 10) for i in range(6)], "flat runs")
    assert cor.r is None and cor.fisher_ci is None and cor.bootstrap_ci is None and cor.bootstrap_reason == "r undefined"
    with np.errstate(all="raise"):  # scipy says nan with a warning; the kit says why, without one
        assert ec.pearson(np.arange(1.0, 4.0), [0.2, 0.2, 0.2])[0] is None


def test_pearson_and_fisher_agree_with_scipy() -> None:
    rng = np.random.default_rng(3)
    for n in (5, 17, 200):
        x = np.arange(1.0, n + 1)
        y = 0.6 + 0.2 * (1 - np.exp(-x / 7)) + rng.normal(0, 0.05, n)
        got, _ = ec.pearson(x, y)
        ref = sps.pearsonr(x, y)
        assert got == pytest.approx(float(ref.statistic), abs=1e-12)
        lo, hi = ref.confidence_interval(0.95)  # scipy's is Fisher's z interval
        assert ec.fisher_ci(got, n) == (pytest.approx(float(lo), abs=1e-9), pytest.approx(float(hi), abs=1e-9))


def test_summed_statistics_give_the_pooled_r_exactly() -> None:
    """The bootstrap adds each run's sums: over all runs once they must give the pooled coefficient."""
    rng = np.random.default_rng(5)
    curves = [_curve(f"t{i}", c, "pytorch", list(rng.uniform(0.1, 0.9, e))) for i, (c, e) in
              enumerate([("a", 15), ("a", 15), ("b", 200), ("b", 200), ("c", 50)])]
    x, y = ec.points(curves)
    s = ec._sums(curves, float(x.mean()), float(y.mean())).sum(axis=0, keepdims=True)
    assert ec._r_of_sums(s)[0] == pytest.approx(ec.pearson(x, y)[0], abs=1e-12)


def test_pooled_over_datasets_near_zero_while_every_curve_rises() -> None:
    """Why the report gives one coefficient per dataset beside the paper's pooled one: two datasets whose curves
    both rise with the epochs, pooled, give a negative r (the long-trained one sits lower)."""
    mnist = [_curve(f"m{i}", "mnist", "pytorch", list(np.linspace(0.97, 0.99, 15) + 0.001 * i)) for i in range(5)]
    c100 = [_curve(f"c{i}", "cifar100", "pytorch", list(np.linspace(0.30, 0.50, 200) + 0.002 * i)) for i in range(5)]
    out = ec.epoch_accuracy(mnist + c100, {"mnist": "mnist", "cifar100": "cifar100"})
    per = {p["case"]: p["r"] for p in out["per_case_arm"]}
    assert per["mnist"] > 0.9 and per["cifar100"] > 0.9
    assert out["overall"]["r"] < 0 and out["paper_r"] == 0.0005


def test_the_cluster_bootstrap_is_wider_than_fisher_when_runs_differ() -> None:
    """Runs whose slopes differ: 5 x 100 points make Fisher's interval narrow, though there are only 5 runs."""
    x = np.arange(1.0, 101.0)
    rng = np.random.default_rng(11)
    curves = [_curve(f"t{i}", "svhn", "tensorflow", list(np.clip(0.5 + s * x + rng.normal(0, 0.01, 100), 0, 1)))
              for i, s in enumerate([0.004, -0.002, 0.003, -0.003, 0.001])]
    cor = ec.correlate(curves, "five unlike runs")
    assert cor.fisher_ci is not None and cor.bootstrap_ci is not None
    fisher_w = cor.fisher_ci[1] - cor.fisher_ci[0]
    boot_w = cor.bootstrap_ci[1] - cor.bootstrap_ci[0]
    assert boot_w > 2 * fisher_w
    assert ec.correlate(curves, "again").bootstrap_ci == cor.bootstrap_ci  # seeded: the same run, the same interval
    few = ec.correlate(curves[:4], "four runs")
    assert few.bootstrap_ci is None and "at least 5 runs" in few.bootstrap_reason and few.fisher_ci is not None


@pytest.mark.parametrize("raw, why", [
    ("0.9", "not a list"), ([0.5, "0.6"], "epoch 2"), ([0.5, True], "epoch 2"), ([0.5, 94.4], "epoch 2"),
    ([0.5, [0.6]], "epoch 2"), ([0.5, -0.1], "epoch 2"), ([math.nan], "epoch 1"), ([0.5] * 10_001, "at most 10000"),
    ({"1": 0.5}, "not a list"),
])
def test_a_crafted_curve_is_refused_not_pooled(raw: Any, why: str) -> None:
    got = ec.curve_of("t1", "mnist", "pytorch", raw)
    assert isinstance(got, ec.Refused) and why in got.reason


def test_unrecorded_epochs_are_left_out() -> None:
    c = ec.curve_of("t1", "mnist", "pytorch", [0.5, None, 0.7, 0.8])
    assert isinstance(c, ec.Curve) and math.isnan(c.accuracy[1])
    x, y = ec.points([c])
    assert x.tolist() == [1.0, 3.0, 4.0] and y.tolist() == [0.5, 0.7, 0.8]


# --------------------------------------------------------------------------------------- fake DLBench runs


def _run(cases: dict[str, int], reps: int = 5, results: dict[str, dict[str, Any]] | None = None,
         curve_of: Any = None) -> Any:
    """A finished DLBench run of ``cases`` (case id = dataset name -> epochs), both frameworks, ``reps`` runs
    each; accuracy and training time in its value table; ``results``: extra result keys per case."""
    spec = {"design": {"alpha": 0.05, "repetitions": reps}, "workload": {"name": "dlbench", "epochs": 2},
            "cases": {c: {"title": c, "dataset": {"name": c, "source": "full"}, "workload": {"epochs": e}}
                      for c, e in cases.items()}}
    configs = {f"c{i:02d}": {"case": c} for i, c in enumerate(cases)}
    trials, values = [], []
    for i, (cid, cfg) in enumerate(configs.items()):
        case, epochs = cfg["case"], cases[cfg["case"]]
        for rep_ in range(reps):
            for arm in ("tensorflow", "pytorch"):
                tid = f"{cid}-{arm}-{rep_}"
                lift = 0.02 if arm == "pytorch" else 0.0
                curve = (curve_of(case, arm, rep_) if curve_of else
                         [round(min(0.99, 0.3 + 0.1 * i / 8 + lift + 0.4 * (1 - math.exp(-e / 10)) + 0.003 * rep_), 6)
                          for e in range(1, epochs + 1)])
                res = {"test_accuracy": curve[-1] if isinstance(curve, list) and curve else 0.5,
                       "epoch_test_accuracy": curve, **(results or {}).get(case, {})}
                trials.append({"trial_id": tid, "arm": arm, "config_id": cid, "repetition": rep_, "results": res})
                for metric, phase, v in (("accuracy", "infer", res["test_accuracy"]),
                                         ("time_s", "train", 10.0 + epochs * (1.5 if lift else 1.0) + rep_)):
                    values.append({"trial_id": tid, "arm": arm, "framework": arm, "config_id": cid, "block": rep_,
                                   "repetition": rep_, "position": len(values), "warmup": False, "status": "ok",
                                   "phase": phase, "metric": metric, "value": v, "unit": "", "n_samples": 1,
                                   "bound": None})
    man = {"spec": spec, "plan": {"arms": ["tensorflow", "pytorch"], "configs": configs}}
    return run_view(man, trials, pd.DataFrame(values, columns=VALUE_COLUMNS))


def test_every_paper_model_in_the_run_leaves_nothing_not_reproduced() -> None:
    d = an.analyse(_run(ALL, results={"voc2012": {"accuracy_metric": "map50"}})).to_json()
    assert d["not_reproduced"] == []
    assert an.PAPER_EPOCHS["spa_eng"] == 100 and an.PAPER_EPOCHS["voc2012"] == 100
    labels = {i["case"]: i["accuracy_label"]["label"] for i in d["cases"].values()}
    assert labels["voc2012"] == "mAP@0.5" and labels["spa_eng"] == "per-token accuracy (teacher forcing)"
    assert labels["mnist"] == "test accuracy"
    src = {i["case"]: i["accuracy_label"]["source"] for i in d["cases"].values()}
    assert src["voc2012"].startswith("results.accuracy_metric") and src["spa_eng"] == "the kit's word for this dataset"
    ea = d["epoch_accuracy"]
    assert ea["overall"]["n_runs"] == 8 * 2 * 5 and ea["overall"]["n_points"] == sum(ALL.values()) * 2 * 5
    assert {(p["case"], p["arm"]) for p in ea["per_case_arm"]} == {(c, a) for c in ALL for a in ("tensorflow", "pytorch")}
    assert all(p["r"] > 0.5 and p["bootstrap_ci"] is not None for p in ea["per_case_arm"])  # rising curves
    assert ea["refused"] == []


def test_a_run_without_the_new_models_says_which_and_why() -> None:
    d = an.analyse(_run({c: ALL[c] for c in ("mnist", "ptb", "voc2012")}, reps=2)).to_json()
    missing = {x["model"].split(",")[0] for x in d["not_reproduced"]}
    assert "LSTM encoder-decoder" in missing and len(d["not_reproduced"]) == 5
    spa = next(x for x in d["not_reproduced"] if x["model"].startswith("LSTM encoder-decoder"))
    assert "Fig. 3c" in spa["paper"] and "19c" in spa["paper"] and "no case for this model" in spa["why"]
    # 2 runs per framework: Fisher's interval is there, the bootstrap over runs is not, and says why
    o = d["epoch_accuracy"]["overall"]
    assert o["fisher_ci"] is not None and o["bootstrap_ci"] is None and "at least 5" in o["bootstrap_reason"]


def test_accuracy_metric_from_trial_files_is_checked() -> None:
    run = _run({"voc2012": 4, "spa_eng": 4}, reps=1, results={
        "voc2012": {"accuracy_metric": "x" * 500}, "spa_eng": {"accuracy_metric": {"label": "<b>"}}})
    d = an.analyse(run).to_json()
    acc = {i["case"]: i["accuracy_label"] for i in d["cases"].values()}
    assert acc["voc2012"]["label"] == "mAP@0.5" and acc["voc2012"]["ignored"] == 2
    assert acc["spa_eng"]["label"] == "per-token accuracy (teacher forcing)" and acc["spa_eng"]["ignored"] == 2


def test_crafted_curves_are_left_out_and_named() -> None:
    def curve(case: str, arm: str, r: int) -> Any:
        return "1e308" if (arm, r) == ("pytorch", 0) else [0.5, 0.6, 0.7]
    d = an.analyse(_run({"mnist": 3}, reps=2, curve_of=curve)).to_json()
    assert d["epoch_accuracy"]["refused"] == [{"trial_id": "c00-pytorch-0", "reason": "epoch_test_accuracy is str, "
                                                                                     "not a list"}]
    conv = {c["arm"]: c for c in d["convergence"]}
    assert len(conv["pytorch"]["runs"]) == 1 and len(conv["tensorflow"]["runs"]) == 2
    assert d["epoch_accuracy"]["overall"]["n_runs"] == 3
    text = _text(study_sections(rep, {"dlbench": d}))
    assert "c00-pytorch-0 (epoch_test_accuracy is str, not a list)" in text
    assert "No cluster bootstrap interval: 1 run(s) in a dataset and framework" in text  # said once, below the table


def _text(sections: list[dict[str, Any]]) -> str:
    parts = []
    for s in sections:
        parts += [s["title"], *s["paragraphs"]]
        for t in s["tables"]:
            parts += [t["caption"], *map(str, t["columns"]), *(str(c) for row in t["rows"] for c in row)]
        parts += [f["title"] for f in s.get("figures") or []]
    return "\n".join(parts)


def test_one_report_section_per_case_with_the_papers_figures_and_pearson() -> None:
    cases = {c: ALL[c] for c in ("mnist", "spa_eng", "voc2012")}
    d = an.analyse(_run({c: min(e, 12) for c, e in cases.items()}, results={"voc2012": {"accuracy_metric": "mAP@0.5"}})).to_json()
    secs = study_sections(rep, {"dlbench": d})
    ids = [s["id"] for s in secs]
    assert [i for i in ids if i.startswith("dlbench-case-")] == ["dlbench-case-mnist", "dlbench-case-spa-eng",
                                                                "dlbench-case-voc2012"]
    by = {s["id"]: s for s in secs}
    voc, spa = by["dlbench-case-voc2012"], by["dlbench-case-spa-eng"]
    assert "Figs. 11 (CPU), 20 (GPU)" in voc["paragraphs"][0] and "Fig. 16a" in voc["paragraphs"][0]
    assert "Figs. 10c (CPU), 19c (GPU)" in spa["paragraphs"][0] and "Fig. 3c" in spa["title"]
    assert "mAP@0.5 (%)" in voc["tables"][0]["columns"]
    assert "per-token accuracy (teacher forcing) (%)" in spa["tables"][0]["columns"]
    assert [f["id"] for f in voc["figures"]] == ["dlbench-case-voc2012-panels", "dlbench-case-voc2012-convergence"]
    assert all(str(f["svg"]).startswith("<svg") for f in voc["figures"])
    pear = voc["tables"][-1]
    assert pear["columns"][0] == "framework" and len(pear["rows"]) == 2
    r_tf = next(p["r"] for p in d["epoch_accuracy"]["per_case_arm"] if (p["case"], p["arm"]) == ("voc2012",
                                                                                                   "tensorflow"))
    assert pear["rows"][0][3] == f"{r_tf:.4f}"
    pooled = by["dlbench-epochs-accuracy"]
    assert pooled["tables"][0]["rows"][0][-1] == "0.0005" and "0.0005 lies" in " ".join(pooled["paragraphs"])
    assert "assumes independent pairs" in pooled["paragraphs"][2] and "too narrow" in pooled["paragraphs"][2]
    nr = by["dlbench-not-reproduced"]
    assert len(nr["tables"][0]["rows"]) == 5 and "Faster R-CNN" not in _text([nr])
    # no table wider than the report's other tables: at most 8 columns, the width rule of tests/test_report_fit.py
    assert max(len(t["columns"]) for s in secs for t in s["tables"]) <= 8


@pytest.mark.slow
@pytest.mark.browser
@needs_chromium
def test_the_dlbench_report_fits_1280_px(tmp_path: Path) -> None:
    """Every table of the DLBench report (a section per case of the bundled spec, Pearson, Wilcoxon) fits its
    container in headless Chromium at 1280 px, as tests/test_report_fit.py requires of the golden report."""
    import dataclasses

    from kit.analysis.analyze import analyze_run
    from kit.plan import make_plan
    from kit.report import write_report
    from kit.spec import load_spec
    from kit.store import RunDir
    from tests._runs import manifest_of, record_of, write_record
    from tests.test_report_fit import WIDTH, measure

    spec = load_spec(STUDY / "experiment.toml")
    spec = dataclasses.replace(spec, design=dataclasses.replace(spec.design, repetitions=5))
    man = manifest_of(spec, collectors=[], host={"cpu_model": "test CPU", "gpus": []},
                      dataset={"name": "mnist", "source": "t10k_split", "origin": "bundled"})
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    for t in make_plan(spec).trials:
        epochs = spec.workload_for(t.config).epochs
        curve = [min(0.99, 0.5 + 0.1 * e + 0.001 * t.repetition) for e in range(epochs)]
        write_record(rd, record_of(t, 1.0e9 + 10 * t.position, 10.0 + t.repetition, 1.0, gap_s=1.0,
                                 results={"test_accuracy": curve[-1], "epoch_test_accuracy": curve},
                                 env={"framework": t.framework, "device": "cpu"}), [])
    page = write_report(rd.path, analyze_run(rd.path), ("html",))[0]
    text = page.read_text(encoding="utf-8")
    assert all(f'id="dlbench-case-{c.replace("_", "-")}"' in text for c in spec.cases)
    got = measure(page, tmp_path)
    assert got["vw"] == WIDTH
    tables = got["tables"]
    assert isinstance(tables, list) and len(tables) > 3 * len(spec.cases)
    assert [t for t in tables if t["scroll"] > t["client"] or t["table"] > t["client"]] == []


def test_a_case_id_makes_a_safe_section_id() -> None:
    """Case ids come from the run's spec; the section id names LaTeX table files and an HTML id."""
    assert rep._section_id("spa_eng") == "dlbench-case-spa-eng"
    assert rep._section_id("../../etc/passwd") == "dlbench-case-etc-passwd"
    assert rep._section_id("<script>") == "dlbench-case-script" and rep._section_id("__") == "dlbench-case-case"
    assert len(rep._section_id("x" * 500)) == len("dlbench-case-") + 40
