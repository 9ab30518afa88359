"""Report sections of Elshawi et al. (DLBench, seed 003), from finished analysis only.

One section per case of the run (every model it ran, whatever the spec names): the paper's figure numbers
for that model, its accuracy (in the case's own measure: mAP@0.5 for Faster R-CNN, per-token accuracy for the
translation model), training time, CPU, memory and GPU panels, its convergence curve and the Pearson
correlation of epochs and accuracy per framework. Around them: which datasets were synthetic stand-ins, an
overview table, the paper's pooled Pearson coefficient (0.0005) beside the run's with both intervals, its
Wilcoxon signed-rank tests with what five runs can and cannot show, and the paper's models this run lacks.
"""

from __future__ import annotations

import math
import re

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from kit.analysis_record import Analysis
from kit.report.figures import arm_color, to_svg
from kit.study_api import Cell, Figure, RunView, Section, Table

from .analysis import CaseInfo, ConvergenceRow, Described, DlbenchExtras, Measure, PerDataset, Reach
from .epoch_correlation import CorrelationJson

SCALE = {"trial_rss_mean_bytes": (1 / 2**20, "MiB"), "accuracy": (100.0, "%")}

STUDY_API = 3  # sections(run, analysis) -> list[Section] (kit.study_api)


def _label(info: CaseInfo) -> str:
    return f"{info['dataset']} (SYNTHETIC)" if info.get("synthetic") else str(info["dataset"])


def _fmt(d: Described | None, metric: str) -> str:
    if not d or not d.get("n"):
        return "–"
    k, _ = SCALE.get(metric, (1.0, ""))
    sd = d.get("sd")
    sd_txt = "–" if sd is None or (isinstance(sd, float) and math.isnan(sd)) else f"{sd * k:.3g}"
    return f"{d['mean'] * k:.4g} ± {sd_txt}"


def _unit(m: Measure) -> str:
    return SCALE.get(m["metric"], (1.0, m["unit"]))[1]


def convergence_plot(conv: list[ConvergenceRow], cases: list[str], labels: dict[str, str], arms: list[str],
                     ylabel: str = "test accuracy") -> str:
    """Test accuracy after each epoch, mean over runs with a ±1 sd band, one panel per dataset."""
    present = [c for c in cases if any(x["case"] == c for x in conv)]
    cols = min(3, max(len(present), 1))
    rows_n = max(1, math.ceil(len(present) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.2 * cols, 3.0 * rows_n), squeeze=False)
    for ax in axes.flat[len(present):]:
        ax.set_visible(False)
    for ax, case in zip(axes.flat, present, strict=False):
        for j, arm in enumerate(arms):
            c = next((x for x in conv if x["case"] == case and x["arm"] == arm), None)
            if c is None:
                continue
            ep, mean = np.array(c["epochs"]), np.array(c["mean"], dtype=float)
            sd = np.nan_to_num(np.array(c["sd"], dtype=float))
            ax.plot(ep, mean, "o-", ms=3, lw=1, color=arm_color(arm, j), label=arm)
            ax.fill_between(ep, mean - sd, mean + sd, color=arm_color(arm, j), alpha=0.15)
        ax.set_title(labels[case], fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return to_svg(fig)


def panels(rows: list[PerDataset], arms: list[str], metrics: list[Measure], acc_label: str) -> str | None:
    """One case's measures side by side, a small panel each (mean of the runs per framework, whiskers ±1 sd);
    only the measures this run has values of. None when it has none."""
    shown = [m for m in metrics if any((d := r.get(m["metric"])) and d.get("n") for r in rows)]
    if not shown:
        return None
    cols = len(shown) if len(shown) <= 3 else math.ceil(len(shown) / 2)  # two rows from four panels on
    rows_n = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(2.3 * cols + 0.4, 2.5 * rows_n), squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, m in zip(axes.flat, shown, strict=False):
        k, unit = SCALE.get(m["metric"], (1.0, m["unit"]))
        for j, arm in enumerate(arms):
            d = next((r.get(m["metric"]) for r in rows if r["arm"] == arm), None)
            if not d or not d.get("n"):
                continue
            sd = d.get("sd")
            err = 0.0 if sd is None or (isinstance(sd, float) and math.isnan(sd)) else sd * k
            ax.bar([j], [d["mean"] * k], 0.7, yerr=[err], capsize=2, color=arm_color(arm, j), alpha=0.8)
        ax.set_xticks(range(len(arms)), arms, fontsize=7, rotation=15)
        title = acc_label if m["metric"] == "accuracy" else m["label"]
        ax.set_title(_wrap(f"{title} ({unit})", 24), fontsize=7.5)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return to_svg(fig)


def _wrap(text: str, width: int) -> str:
    out, line = [], ""
    for w in text.split():
        if line and len(line) + 1 + len(w) > width:
            out.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join([*out, line])


def _r(v: float | None) -> str:
    return "–" if v is None else f"{v:.4f}"


def _ci(ci: list[float] | None) -> str:
    return f"{ci[0]:.4f} to {ci[1]:.4f}" if ci else "–"


def pearson_row(first: str, c: CorrelationJson) -> list[Cell]:
    """One table row of a Pearson result: what, runs, points, r, Fisher's interval, the cluster bootstrap's
    (why a value is missing goes below the table, :func:`pearson_notes`, so that the columns stay narrow)."""
    r = _r(c["r"]) if c["r"] is not None else "undefined"
    return [first, c["n_runs"], c["n_points"], r, _ci(c["fisher_ci"]), _ci(c["bootstrap_ci"])]


def pearson_notes(results: list[CorrelationJson]) -> list[str]:
    """Why r or an interval is missing, each reason once: r undefined; no Fisher interval (n < 4); no bootstrap."""
    notes: list[str] = []
    for c in results:
        if c["r"] is None:
            notes.append(f"r undefined: {c['reason']}.")
        elif c["fisher_ci"] is None:
            notes.append("No Fisher interval: fewer than 4 points.")
        if c["r"] is not None and c["bootstrap_ci"] is None and c["bootstrap_reason"]:
            notes.append(f"No cluster bootstrap interval: {c['bootstrap_reason']}.")
    return list(dict.fromkeys(notes))


PEARSON_COLUMNS = ["pooled", "runs", "points", "Pearson r", "95 % CI, Fisher z", "95 % CI, cluster bootstrap"]


def _section_id(case: str) -> str:
    """The case's section id: letters, digits and '-' only (the LaTeX report names its table files after it)."""
    return "dlbench-case-" + (re.sub(r"[^A-Za-z0-9-]+", "-", case)[:40].strip("-") or "case")


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def reach_text(r: Reach, kit_min_n: int) -> list[str]:
    """What this run's n can and cannot show in the table's Holm family, in words (from ``analysis.reach``)."""
    n, m, alpha, first = r["n"], r["m"], r["alpha"], r["first_threshold"]
    head = (f"This run has n = {n} runs per arm, so the smallest two-sided p of an exact signed-rank test is "
            f"2/2^{n} = {r['min_exact_p']:.3g}. The table's {m} tests are one family, decided by Holm's "
            f"step-down: the first rejection needs p < α/m = {alpha:g}/{m} = {first:.3g}, and the decision "
            "column reads the Holm-adjusted p.")
    if not r["reaches_alpha"]:
        can = (f"With {n} pairs no row can reject even unadjusted (smallest p {r['min_exact_p']:.3g} ≥ α = {alpha:g}); "
               f"{r['pairs_for_alpha']} pairs without ties reach α, {r['pairs_for_family']} reach α/m.")
    elif not r["reaches_family"]:
        can = (f"{n} pairs can reach α = {alpha:g} but not α/m = {first:.3g}, so no row of this family can be "
               f"rejected whatever the data: at least {r['pairs_for_family']} pairs without ties are needed.")
    else:
        w = r["max_minority_rank_sum"]
        how = (f"all {n} differences share a sign" if w == 0 else
               f"the ranks of the differences of the minority sign sum to at most {w}")
        can = (f"With n = {n}, a row passes α/m only when {how}, with no tie and no zero difference: a tie or a "
               "zero makes the test asymptotic (R's rule), whose smallest p is far larger (the 'smallest possible "
               "p' column gives each row's own, from its tie pattern). Which change the design can detect with "
               "power 0.8 is in the design table.")
    if n < kit_min_n:
        kit = (f"The kit's hypotheses section does not test with fewer than {kit_min_n} runs per arm (descriptives "
               "only); this table computes the paper's test anyway.")
    else:
        kit = ("The hypotheses section above tests the same comparisons with the kit's own rule, in its own Holm "
               "family over every hypothesis row of the run.")
    advice = ("" if r["reaches_family"] else
              f" Run at least {r['pairs_for_family']} repetitions (design.repetitions) for this family to be able "
              "to reject anything; detecting a given change with power 0.8 needs more.")
    return [head, can, kit + advice]


def wilcoxon_section(d: DlbenchExtras, labels: dict[str, str], arms: list[str],
                     acc_labels: dict[str, str] | None = None) -> Section:
    """The paper's paired Wilcoxon tests, Holm over the table's family, and what this n can reach."""
    wd, fam = d.wilcoxon_design, d.wilcoxon_family
    assert wd is not None  # every analysis of this study has written it
    acc = acc_labels or {}
    w_rows: list[list[Cell]] = []
    for w in d.wilcoxon:
        what = acc.get(w["case"], w["label"]) if w["metric"] == "accuracy" else w["label"]
        if not w.get("tested"):
            w_rows.append([labels[w["case"]], what, w["n_pairs"], "–", "–", "–", "–", w.get("reason", "")])
            continue
        verdict = "rejected (Holm p < α)" if w.get("significant") else "not rejected (Holm p ≥ α)"
        if not w.get("can_reject"):
            verdict += " (cannot reach α with these pairs)"
        elif not w.get("reaches_first", True):
            verdict += " (cannot reach α/m: only after other rows are rejected)"
        w_rows.append([labels[w["case"]], what, w["n_pairs"], w.get("statistic"), _p(w.get("p")), _p(w.get("p_holm")),
                       _p(w.get("min_attainable_p")) + ("" if w.get("exact") else " (asymptotic)"), verdict])
    reach = wd.get("reach")  # None: an analysis written before the Holm column (re-analyse the run)
    m = (fam["size"] if fam else None) or (reach["m"] if reach else "?")
    paras = [
        "The paper ran 5 runs per framework and dataset and reports Wilcoxon signed-rank tests \"with more than "
        "95 % confidence\". With n pairs, the exact two-sided signed-rank test cannot give a p-value below "
        f"2/2^n: 0.0625 for the paper's n = 5, so its five pairs can never reject at α = 0.05; at least "
        f"{wd['min_pairs_to_reject']} pairs without ties are needed at this run's α = {d.alpha} before any "
        "correction for the number of tests. The table below computes the paper's test (paired by block, exact "
        "when there are no ties or zeros, as R's wilcox.test does) so the reader can see what it can and cannot "
        "show.",
        *(reach_text(reach, wd["kit_min_n"]) if reach else []),
    ]
    return Section(id="dlbench-wilcoxon",
                   title="DLBench: the paper's Wilcoxon signed-rank tests between the frameworks",
                   paragraphs=paras,
                   tables=[Table(caption=f"Paired Wilcoxon signed-rank, {arms[0]} vs {arms[1]} (two-sided); Holm over the "
                               f"family of the m = {m} tests of this table (every dataset × metric with pairs)",
                         columns=["dataset", "metric", "pairs", "statistic", "p (unadjusted)", f"Holm p (m = {m})",
                                "smallest possible p", "decision (Holm)"],
                         rows=w_rows)])


def _acc_label(info: CaseInfo) -> str:
    acc = info.get("accuracy_label")
    return str((acc["label"] if acc else None) or "test accuracy")


def case_section(case: str, info: CaseInfo, label: str, d: DlbenchExtras, metric_cols: list[Measure],
                 arms: list[str]) -> Section:
    """One model of the run: the paper's figures for it, its measures, convergence and epochs-vs-accuracy r."""
    paper = (d.paper_models or {}).get(info.get("paper_key") or "")
    acc = info.get("accuracy_label")
    acc_label = _acc_label(info)
    rows = [r for r in d.per_dataset if r["case"] == case]
    conv = [c for c in d.convergence if c["case"] == case]
    if paper:
        where = "; ".join(f"{what} {paper[key]}" for key, what in (
            ("accuracy", "accuracy"), ("time_s", "training time"), ("cpu_util_pct", "CPU"),
            ("trial_rss_mean_bytes", "memory"), ("gpu_util_pct", "GPU"), ("convergence", "convergence")))
        head = f"The paper's {paper['model']} ({paper['architecture']}, {paper['epochs']} epochs). In the paper: {where}."
    else:
        head = f"Case {case} is not one of the paper's models: no figure of the paper to compare with."
    note = (f"Accuracy here is {acc_label} (from {acc['source'] if acc else 'the kit'})"
            + ("" if not acc or acc["consistent"] else ": the runs name different measures, so their values are not "
               "one quantity") + (f"; {acc['ignored']} run(s) gave an accuracy_metric that is not a short text, "
                                  "ignored" if acc and acc["ignored"] else "") + ".")
    measures: list[list[Cell]] = [[r["arm"], *[_fmt(r.get(m["metric"]), m["metric"]) for m in metric_cols]] for r in rows]
    cols = ["framework", *[f"{acc_label if m['metric'] == 'accuracy' else m['label']} ({_unit(m)})"
                           for m in metric_cols]]
    peak: list[list[Cell]] = [[c["arm"], len(c["runs"]), c["peak_epoch"], c["peak_accuracy"], c["final_accuracy"]]
                              for c in conv]
    ea = d.epoch_accuracy
    per_case_arm = ea["per_case_arm"] if ea else []
    pear = [pearson_row(p["arm"], p) for p in per_case_arm if p["case"] == case]
    tables = [Table(caption=f"{label}: mean ± sd over the runs", columns=cols, rows=measures)]
    if peak:
        tables.append(Table(caption=f"{label}: peak of the mean curve ({acc_label})",
                            columns=["framework", "runs", "peak epoch", "peak (fraction)", "final (fraction)"],
                            rows=peak))
    if pear:
        tables.append(Table(caption=f"{label}: Pearson r between epoch number and {acc_label}, per framework (the "
                                  f"paper printed one pooled value, {ea['paper_r'] if ea else None}; Fisher's interval assumes independent "
                                  "pairs and is too narrow for a curve's points, the cluster bootstrap resamples "
                                  "whole runs: see the pooled section)",
                            columns=["framework", *PEARSON_COLUMNS[1:]],
                            rows=pear))
    figs = []
    svg = panels(rows, arms, metric_cols, acc_label)
    if svg is not None:
        figs.append(Figure(id=f"{_section_id(case)}-panels",
                           title=f"{label}: accuracy, training time, CPU, memory "
                     "and GPU per framework (mean of the runs, whiskers ±1 sd; only what was measured)",
                           svg=svg))
    if conv:
        figs.append(Figure(id=f"{_section_id(case)}-convergence",
                           title=f"{label}: {acc_label} after each epoch "
                     "(mean ± sd over runs)",
                           svg=convergence_plot(conv, [case], {case: label}, arms, acc_label)))
    title = f"DLBench: {label}" + (f" ({paper['model']}; paper {paper['architecture']})" if paper else "")
    pear_notes = pearson_notes([p for p in per_case_arm if p["case"] == case])
    return Section(id=_section_id(case),
                   title=title,
                   paragraphs=[head, note, *pear_notes],
                   tables=tables,
                   figures=figs)


def pearson_section(d: DlbenchExtras) -> Section | None:
    """The paper's pooled Pearson coefficient of epochs and accuracy beside the run's, with what it pools."""
    ea = d.epoch_accuracy
    if not ea:
        return None
    o, paper_r = ea["overall"], ea["paper_r"]
    boot = ea["bootstrap"]
    inside = ""
    if o["bootstrap_ci"]:
        lo, hi = o["bootstrap_ci"]
        inside = (f" The paper's {paper_r} lies {'inside' if lo <= paper_r <= hi else 'outside'} this run's cluster "
                  "bootstrap interval; the pools differ (the paper's held six frameworks, this run's two, and the "
                  "datasets this run has), so this is a comparison of two pools, not a test of the paper's number.")
    paras = [
        f"The paper ends its convergence results (Sec. 5.5.4) with one number: the Pearson correlation coefficient "
        f"between the number of epochs and the accuracy is {paper_r}, read there as no linear relationship. It does "
        "not say what it pooled; the kit reads it as every point of its convergence curves (Figs. 9-11, 18-20), all "
        "frameworks and datasets together, and computes the same here: " + o["pooled"] + ", "
        f"{o['n_points']} points from {o['n_runs']} runs.",
        "Pooled over datasets the coefficient mixes how accuracy moves with epochs inside a curve with how the "
        "datasets differ (MNIST's 15 epochs near 99 %, CIFAR-100's 200 near 50 %, Penn Treebank's near 20 %): it "
        "can be near 0 while every curve rises. The coefficient of each dataset and framework, in the dataset's own "
        "section, says how accuracy follows the epochs inside one model.",
        "Fisher's z interval assumes independent pairs from a bivariate normal distribution. The points of a "
        "convergence curve are neither: consecutive accuracies of one run are correlated and the epoch number is a "
        "fixed design variable, so that interval is too narrow and is shown only for comparison. The cluster "
        f"bootstrap resamples whole runs (the independent units) within each {boot['strata']}, {boot['resamples']} "
        f"times with seed {boot['seed']}, and takes the 2.5 and 97.5 percentiles of r; it needs at least "
        f"{boot['min_runs']} runs per dataset and framework." + inside,
    ]
    paras += pearson_notes([o])
    if refused := ea.get("refused"):
        paras.append("Left out, their per-epoch accuracies unusable: " + "; ".join(
            f"{x['trial_id']} ({x['reason']})" for x in refused[:20])
            + (f"; and {len(refused) - 20} more" if len(refused) > 20 else "") + ".")
    rows = [[*pearson_row("every curve of the run", o), str(paper_r)]]
    return Section(id="dlbench-epochs-accuracy",
                   title="DLBench: Pearson correlation of epochs and accuracy "
            "(Sec. 5.5.4)",
                   paragraphs=paras,
                   tables=[Table(caption="Pearson r between epoch number and accuracy, pooled as the paper did, beside the "
                                   "paper's value",
                             columns=[*PEARSON_COLUMNS, "paper"],
                             rows=rows)],
                   figures=[])


def sections(run: RunView, analysis: Analysis) -> list[Section]:
    raw = analysis.extras.get("dlbench")
    if not isinstance(raw, dict) or not raw:
        return []
    d = DlbenchExtras.from_json(raw)  # the study's record (analysis.py), read back from analysis.json
    arms, rows = d.arms, d.per_dataset
    infos = {i["case"]: i for i in d.cases.values()}
    cases = list(dict.fromkeys(i["case"] for i in d.cases.values()))
    labels = {c: _label(infos[c]) for c in cases}
    out: list[Section] = []

    synth = d.synthetic_cases
    epochs = d.paper_epochs
    data_rows: list[list[Cell]] = [[c, infos[c]["dataset"], infos[c]["source"], infos[c].get("train_size") or "all",
                  infos[c].get("test_size") or "all", infos[c]["epochs"],
                  epochs.get(infos[c].get("paper_key") or "", epochs.get(str(infos[c]["dataset"]), "–")),
                  "SYNTHETIC stand-in (not the real data)" if infos[c]["synthetic"] else (infos[c].get("origin") or "real")]
                 for c in cases]
    paras = []
    if synth:
        paras.append(f"SYNTHETIC DATA: the numbers of {', '.join(synth)} come from small synthetic stand-ins written by "
                     "the kit in each dataset's real file format (the real files were not available on this host). "
                     "They exercise the real parsers, models, training loops and telemetry; their accuracy, time, "
                     "CPU and memory figures say nothing about the paper's question and are labelled SYNTHETIC "
                     "in every table and figure below.")
    else:
        paras.append("Every dataset is the publisher's file, verified against its pinned SHA-256.")
    out.append(Section(id="dlbench-data",
                       title="DLBench: datasets of this run",
                       paragraphs=paras,
                       tables=[Table(caption="Datasets, sizes and epochs (paper: the epochs of Section 4)",
                                 columns=["case", "dataset", "source", "train examples", "test examples", "epochs",
                                        "paper epochs", "data"],
                                 rows=data_rows)]))

    metric_cols = [*d.metrics, *d.described_only]
    table_rows: list[list[Cell]] = [[f"{labels[r['case']]}: {_acc_label(infos[r['case']])}", r["arm"],
                   *[_fmt(r.get(m["metric"]), m["metric"]) for m in metric_cols]] for r in rows]
    unmeasured = [m["label"] for m in metric_cols if not any(r.get(m["metric"]) for r in rows)]
    out.append(Section(id="dlbench-results",
                       title="DLBench: accuracy, training time, CPU, memory and GPU, every model (Figs. 4-8, 12-17)",
                       paragraphs=[
            "Training time is the sum of the epochs' training; the test evaluation after each epoch (for the "
            "convergence curves) is timed separately and excluded (the paper's Keras code included it via "
            "validation_data). CPU utilisation, host-wide, is the mean over all cores of the host's 1 s readings "
            "in the training phase (the paper's Eq. 1: every process on the host, 100 % = all cores); the trial's "
            "own CPU utilisation beside it is its process's CPU time (and its finished children's) over the phase, "
            "from the phase markers, in % of one core (exact, other processes excluded; described, not tested); "
            "memory is the mean resident set of the trial's process tree in that phase; GPU utilisation is NVML's.",
            "Accuracy is each model's own measure, named beside the dataset: test accuracy for the CNNs and the "
            "IMDB and Penn Treebank LSTMs, mAP@0.5 for Faster R-CNN, per-token accuracy with teacher forcing for "
            "the translation model. Each model's section below has its panels and convergence curve.",
            "Not measured on this host: " + (", ".join(unmeasured) if unmeasured else "nothing") + ".",
        ],
                       tables=[Table(caption="Mean ± sd over the runs, per dataset and framework",
                         columns=["dataset: accuracy measure", "framework",
                                *[f"{'accuracy' if m['metric'] == 'accuracy' else m['label']} ({_unit(m)})"
                                  for m in metric_cols]],
                         rows=table_rows)],
                       figures=[]))

    out.extend(case_section(c, infos[c], labels[c], d, metric_cols, arms) for c in cases)
    pear = pearson_section(d)
    if pear is not None:
        out.append(pear)

    acc_labels = {c: _acc_label(infos[c]) for c in cases}
    out.append(wilcoxon_section(d, labels, arms, acc_labels))

    missing = d.not_reproduced
    out.append(Section(id="dlbench-not-reproduced",
                       title="DLBench: the paper's models not in this run",
                       paragraphs=[("The paper also benchmarks models this run does not include; they are listed here so the "
                        "report does not suggest full coverage." if missing else
                        "Every one of the paper's eight models is in this run.")
                       + " The paper's other four frameworks (MXNet, Theano, Chainer, and Keras as separate from "
                       "TensorFlow) are out of scope: the kit compares TensorFlow (through Keras, its high-level "
                       "API) and PyTorch."],
                       tables=[Table(caption="Models of the paper not in this run",
                         columns=["model", "in the paper", "status"],
                         rows=[[x["model"], x["paper"], x["why"]] for x in missing])] if missing else []))
    return out
