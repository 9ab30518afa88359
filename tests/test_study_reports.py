"""Germino's and DLBench's analyses and report sections on recorded run directories
(no framework runs here): energy per training run from RAPL counters read through
the real collector over a fake powercap tree, Tables I–VI, convergence, the
paper's Wilcoxon tests with what five pairs can show, and synthetic data labelled."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kit.analysis.analyze import analyze_run
from kit.analysis_record import Analysis
from kit.collectors.base import Row
from kit.collectors.rapl import RaplCollector
from kit.plan import make_plan
from kit.report import write_report
from kit.spec import load_spec
from kit.store import RunDir
from kit.workloads.study_import import import_study_module
from tests._runs import manifest_of, record_of, write_record
from tests._sysfs import rapl_zone, set_energy

ROOT = Path(__file__).resolve().parents[1]
# DLBench's own statistics live in its study folder (issue 17), imported the way the kit imports them
_dlbench = import_study_module(ROOT / "experiments" / "elshawi_dlbench", "analysis", package="dlbench_study")
min_exact_p, min_pairs_for = _dlbench.min_exact_p, _dlbench.min_pairs_for


def _manifest(spec: Any, collectors: list[dict[str, Any]], datasets: dict[str, Any] | None = None) -> dict[str, Any]:
    return manifest_of(spec, collectors=collectors, host={"cpu_model": "test CPU", "gpus": []},
                       dataset={"name": "mnist", "source": "t10k_split", "origin": "bundled"},
                       **({"datasets": datasets} if datasets else {}))


def _record(t: Any, start: float, train_s: float, results: dict[str, Any]) -> dict[str, Any]:
    return record_of(t, start, train_s, 1.0, gap_s=1.0, results=results, env={"framework": t.framework, "device": "cpu"})


def _html_text(path: Path) -> str:
    s = re.sub(r"<svg.*?</svg>", "[SVG]", path.read_text(), flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", s)))


@pytest.mark.slow
def test_germino_tables_with_rapl_energy_per_training_run(tmp_path: Path) -> None:
    """RAPL counter rows from the real collector over a fake powercap tree -> joules per run -> Table VI."""
    spec = load_spec(ROOT / "experiments" / "germino_mnist_energy" / "experiment.toml", "quick")
    zone = rapl_zone(tmp_path / "sys", "intel-rapl:0", "package-0", 1_000_000)
    rapl = RaplCollector(sysfs_root=tmp_path / "sys")
    assert rapl.available().ok
    man = _manifest(spec, [{"name": "rapl", "ok": True, "detail": "fake powercap tree", "fix": None},
                           {"name": "nvml", "ok": False, "detail": "NVML: no library", "fix": "install the driver"}])
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    models = {cid: cfg["case"] for cid, cfg in man["plan"]["configs"].items()}
    time_of = {("knn", "pytorch"): 0.5, ("knn", "tensorflow"): 0.5, ("mlp", "pytorch"): 8.0,
               ("mlp", "tensorflow"): 4.0, ("cnn", "pytorch"): 20.0, ("cnn", "tensorflow"): 10.0}
    watts, idle_w = 30.0, 5.0
    rapl._open()
    try:
        # the idle baseline before the trials: 10 s at 5 W (net of idle = gross - 5 W x training time)
        base: list[Row] = []
        for at in (0.9e9, 0.9e9 + 10):
            set_energy(zone, 1_000_000 + int(idle_w * (at - 0.9e9) * 1e6))
            base += [r._replace(t=at) for r in rapl.read()]
        rd.write_samples("_baseline", base)
        energy_uj = 1_000_000
        for t in make_plan(spec).trials:
            start = 1.0e9 + 100 * t.position
            train_s = time_of[(models[t.config_id], t.framework)] * (1 + 0.01 * t.repetition)
            rows: list[Row] = []
            # counter readings 1 s before, inside and 1 s after the training phase; constant power
            for at in (start - 1, start + train_s / 2, start + train_s + 1):
                set_energy(zone, energy_uj + int(watts * (at - (start - 1)) * 1e6))
                rows += [r._replace(t=at) for r in rapl.read()]
            energy_uj += int(watts * (train_s + 2) * 1e6)
            acc = {"knn": 0.9688, "mlp": 0.975, "cnn": 0.985}[models[t.config_id]]
            write_record(rd, _record(t, start, train_s, {"test_accuracy": acc, "train_loss": 0.1,
                                                       "param_count": 1}), rows)
    finally:
        rapl._close()
    analysis = analyze_run(rd.path)
    g = analysis.extras["germino"]
    energy = {(r["model"], r["arm"]): r["cpu_energy_j"] for r in g["energy_train"]}
    # joules of a training run = 30 W x its training time
    assert energy[("cnn", "pytorch")]["mean"] == pytest.approx(30 * 20.0 * 1.01, rel=1e-3)
    assert energy[("mlp", "tensorflow")]["mean"] == pytest.approx(30 * 4.0 * 1.01, rel=1e-3)
    assert energy[("cnn", "pytorch")]["n"] == 3 and g["energy_measured"] == {
        "cpu_energy_j": True, "gpu_energy_j": False, "cpu_energy_net_j": True, "gpu_energy_net_j": False}
    net = {(r["model"], r["arm"]): r["cpu_energy_net_j"] for r in g["energy_train"]}
    assert net[("cnn", "pytorch")]["mean"] == pytest.approx((30 - 5) * 20.0 * 1.01, rel=1e-3)
    # readings 1 s before, in the middle of and 1 s after the phase: each boundary's interval holds
    # 30 W x (1 s + half the phase), all of which could lie on either side of it
    bound = {(r["model"], r["arm"]): r["cpu_energy_j_bound"] for r in g["energy_train"]}
    assert bound[("cnn", "pytorch")]["median"] == pytest.approx(30 * (2 + 20.0 * 1.01), rel=1e-3)
    times = {(r["model"], r["arm"]): r for r in g["time_train"]}
    assert times[("cnn", "tensorflow")]["median"] == pytest.approx(10.1)
    assert times[("cnn", "tensorflow")]["q1"] == pytest.approx(10.05)  # R type 7 quantile of 10.0, 10.1, 10.2
    ratio = next(r for r in g["ratios"] if r["model"] == "cnn")
    assert ratio["mean_ratio"] == pytest.approx(0.5) and ratio["arm_a"] == "tensorflow"
    assert next(r for r in g["ratios"] if r["model"] == "knn")["aa_control"]
    assert g["knn_accuracy_identical"] is True

    html = write_report(rd.path, analysis)[0]
    text = _html_text(html)
    assert "Table VI" in text and "energy per model" in text
    assert "606 ± " in text  # 30 W x 20.2 s, the CNN's mean CPU energy in PyTorch
    assert "505 ± " in text and "± 666" in text  # net of 5 W idle; the sampling bound 30 W x 22.2 s
    assert "CPU energy, net of idle (J)" in text and "worst-case bound, not a standard error" in text
    # the kit's own sections: net rows among the descriptives, the bound table, the note on gross and net
    assert "CPU package energy (RAPL), net of idle (J)" in text and "CPU package energy (RAPL, gross) (J)" in text
    assert "Energy: sampling bound at the phase boundaries" in text and "'net of idle' subtracts" in text
    assert "GPU (NVML) energy could not be measured on this host: NVML: no library" in text
    assert "A/A control" in text and "Tables II and IV" in text
    _check_latex_sections(rd.path, analysis)


def test_germino_says_why_cpu_energy_is_missing(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "experiments" / "germino_mnist_energy" / "experiment.toml", "quick")
    man = _manifest(spec, [{"name": "rapl", "ok": False, "detail": "no RAPL zone under /sys/class/powercap",
                            "fix": "load the driver"}])
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    for t in make_plan(spec).trials:
        write_record(rd, _record(t, 1.0e9 + 10 * t.position, 2.0, {"test_accuracy": 0.9}), [])
    text = _html_text(write_report(rd.path, analyze_run(rd.path))[0])
    assert "CPU (RAPL) energy could not be measured on this host: no RAPL zone under /sys/class/powercap" in text


@pytest.mark.slow
def test_dlbench_convergence_wilcoxon_and_synthetic_labels(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "experiments" / "elshawi_dlbench" / "experiment.toml")
    spec = dataclasses.replace(spec, design=dataclasses.replace(spec.design, repetitions=5))  # the paper's 5 runs
    datasets = {f"{d.name}:{d.source}": {"name": d.name, "source": d.source, "origin": "--data-dir",
                                         "directory": "/data", "sha256": {}} for d in spec.datasets()}
    datasets["imdb:aclImdb"] = {"name": "imdb", "source": "synthetic", "origin": "synthetic stand-in",
                                "directory": "/cache", "sha256": {}}
    man = _manifest(spec, [], datasets)
    man["spec"]["cases"]["imdb"]["dataset"]["source"] = "synthetic"
    rd = RunDir.create(tmp_path / "runs", spec.experiment.id, man)
    for t in make_plan(spec).trials:
        fast = t.framework == "pytorch"
        epochs = spec.workload_for(t.config).epochs
        curve = [min(0.99, 0.5 + 0.1 * e + (0.05 if fast else 0.0) + 0.001 * t.repetition) for e in range(epochs)]
        write_record(rd, _record(t, 1.0e9 + 10 * t.position, 10.0 + 0.3 * t.repetition if fast else 20.0 + 0.7 * t.repetition,
                               {"test_accuracy": curve[-1], "epoch_test_accuracy": curve,
                                "epoch_train_s": [1.0] * epochs}), [])
    analysis = analyze_run(rd.path)
    d = analysis.extras["dlbench"]
    conv = {(c["case"], c["arm"]): c for c in d["convergence"]}
    assert len(conv[("mnist", "pytorch")]["mean"]) == 15 and len(conv[("cifar100", "tensorflow")]["mean"]) == 200
    assert conv[("mnist", "pytorch")]["mean"][0] == pytest.approx(0.552)  # 0.5 + 0.05 + mean(0..4) x 0.001
    assert conv[("mnist", "tensorflow")]["peak_epoch"] == 6  # 0.5 + 0.1 x 5 is capped at 0.99 from epoch 6 on
    w = next(x for x in d["wilcoxon"] if x["case"] == "svhn" and x["metric"] == "time_s")
    # every pytorch run is faster: the most extreme data five pairs can have, and still p = 0.0625
    assert w["n_pairs"] == 5 and w["exact"] and w["p"] == pytest.approx(0.0625)
    assert w["min_attainable_p"] == pytest.approx(0.0625) and not w["can_reject"] and not w["significant"]
    assert min_exact_p(5) == 0.0625 and min_pairs_for(0.05) == 6 and min_exact_p(6) < 0.05
    # one Holm family over the table's tests (6 datasets x 5 metrics with pairs, GPU utilisation unmeasured here)
    fam = d["wilcoxon_family"]
    tested = [x for x in d["wilcoxon"] if x["tested"]]
    assert fam["size"] == len(tested) and fam["method"] == "holm"
    assert all(x["p_holm"] >= x["p"] and x["significant"] == (x["p_holm"] < 0.05) for x in tested)
    assert d["wilcoxon_design"]["reach"]["reaches_alpha"] is False
    assert d["synthetic_cases"] == ["imdb"]
    hyp = [h for h in analysis.hypotheses if h.metric == "time_s"]
    assert hyp and all(not h.tested and "fewer than 10" in (h.reason or "") for h in hyp)
    assert any(t.rule == "synthetic_data" and "imdb" in t.title for t in analysis.validity)

    text = _html_text(write_report(rd.path, analysis)[0])
    assert "SYNTHETIC DATA: the numbers of imdb" in text and "imdb (SYNTHETIC)" in text
    assert "0.0625 for the paper's n = 5" in text and "at least 6 pairs" in text
    m = fam["size"]
    assert "This run has n = 5 runs per arm" in text and f"Holm p (m = {m})" in text
    assert "With 5 pairs no row can reject even unadjusted" in text and "design.repetitions >= 10" not in text
    assert f"Run at least {min_pairs_for(0.05 / m)} repetitions" in text
    # the paper's models the bundled spec has no case for are listed, the others not (issue 28: all eight)
    missing = [m for k, m in _dlbench.PAPER_MODELS.items() if k not in spec.cases]
    assert [x["model"] for x in d["not_reproduced"]] == [m["model"] for m in missing]
    assert ("Every one of the paper's eight models is in this run" in text) == (not missing)
    for case in spec.cases:  # one section per case, its convergence curve and its Pearson r per framework
        label = f"{case} (SYNTHETIC)" if case == "imdb" else case
        assert f"{label}: peak of the mean curve" in text and f"{label}: Pearson r between epoch number" in text
    assert "Pearson correlation of epochs and accuracy (Sec. 5.5.4)" in text and "0.0005" in text
    _check_latex_sections(rd.path, analysis)


def test_dlbench_text_follows_n_and_the_holm_family() -> None:
    """What n pairs can show in a Holm family of m exact signed-rank tests, and the words the report uses."""
    rep = import_study_module(ROOT / "experiments" / "elshawi_dlbench", "report", package="dlbench_study")
    paper = _dlbench.reach(11, 0.05, 30)  # the paper profile: 6 datasets x 5 metrics, 11 repetitions
    assert paper["reaches_family"] and paper["first_threshold"] == pytest.approx(0.05 / 30)
    assert paper["max_minority_rank_sum"] == 0  # 2/2^11 = 0.00098 < 0.00167 < 4/2^11: only all one sign
    words = " ".join(rep.reach_text(paper, 10))
    assert "all 11 differences share a sign" in words and "α/m = 0.05/30 = 0.00167" in words
    assert "Run at least" not in words and "hypotheses section above tests" in words
    ten = _dlbench.reach(10, 0.05, 30)
    assert ten["reaches_alpha"] and not ten["reaches_family"] and ten["pairs_for_family"] == 11
    assert "no row of this family can be rejected" in " ".join(rep.reach_text(ten, 10))
    assert _dlbench.reach(20, 0.05, 30)["max_minority_rank_sum"] > 0
    # one tie at n = 11: asymptotic, and its smallest p cannot pass alpha/30 (R: wilcox.test(1:11 with a tie))
    tied = np.array([1.0, 1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert _dlbench.min_attainable_p(tied) == pytest.approx(0.0038398, rel=1e-4)
    assert _dlbench.min_attainable_p(np.arange(1.0, 12.0)) == pytest.approx(2 / 2**11)
    # the decision reads the Holm-adjusted p: 0.03 < alpha unadjusted, but 0.06 after Holm over 3
    rows = [{"tested": True, "p": p, "n_used": 11, "min_attainable_p": 2 / 2**11} for p in (0.004, 0.03, 0.5)]
    fam = _dlbench.holm_family([*rows, {"tested": False}], 0.05)
    assert fam["size"] == 3 and [r["p_holm"] for r in rows] == pytest.approx([0.012, 0.06, 0.5])
    assert [r["significant"] for r in rows] == [True, False, False]


def _check_latex_sections(run: Path, analysis: Analysis) -> None:
    """Study sections appear in the LaTeX article: their tables as fragments, their figures as PDFs;
    with TeX installed the article compiles."""
    import shutil

    from kit.report.context import extra_sections

    formats = ("latex", "pdf") if shutil.which("latexmk") else ("latex",)
    paths = write_report(run, analysis, formats)
    tex = paths[0].read_text(encoding="utf-8")
    from kit.studies import resolve_hooks

    man = RunDir.open(run).manifest()
    sections = extra_sections(man, analysis, resolve_hooks(run, man))
    assert sections
    for s in sections:
        assert "\\section{" in tex
        for k, _t in enumerate(s["tables"]):
            frag = paths[0].parent / "tables" / f"section-{s['id']}-{k + 1}.tex"
            assert "\\toprule" in frag.read_text(encoding="utf-8") and f"\\input{{tables/{frag.stem}}}" in tex
    if "pdf" in formats:
        assert paths[-1].suffix == ".pdf" and paths[-1].exists()
