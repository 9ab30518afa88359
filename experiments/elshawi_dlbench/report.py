"""Report sections of Elshawi et al. (DLBench, seed 003), from finished analysis only.

The paper's figures per dataset (accuracy, training time, CPU and memory,
GPU utilisation where measured; Figs. 4–8 and 12–17), its convergence curves
(Figs. 9–10, 18–19), its Wilcoxon signed-rank tests with what five runs can
and cannot show, the models not yet reproduced, and, above everything, which
datasets were synthetic stand-ins.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

from kit.report.figures import arm_color, to_svg

SCALE = {"trial_rss_mean_bytes": (1 / 2**20, "MiB"), "accuracy": (100.0, "%")}


def _label(info: dict[str, Any]) -> str:
    return f"{info['dataset']} (SYNTHETIC)" if info.get("synthetic") else str(info["dataset"])


def _fmt(d: dict[str, Any] | None, metric: str) -> str:
    if not d or not d.get("n"):
        return "–"
    k, _ = SCALE.get(metric, (1.0, ""))
    sd = d.get("sd")
    sd_txt = "–" if sd is None or (isinstance(sd, float) and math.isnan(sd)) else f"{sd * k:.3g}"
    return f"{d['mean'] * k:.4g} ± {sd_txt}"


def _unit(m: dict[str, Any]) -> str:
    return SCALE.get(m["metric"], (1.0, m["unit"]))[1]


def bars(rows: list[dict[str, Any]], cases: list[str], labels: dict[str, str], arms: list[str], metric: str,
         ylabel: str, title: str, log: bool = False) -> str | None:
    """Grouped bars per dataset, one per framework, with ±1 sd whiskers (the paper's per-dataset figures)."""
    k, _ = SCALE.get(metric, (1.0, ""))
    if not any(r.get(metric) for r in rows):
        return None
    fig, ax = plt.subplots(figsize=(6.8, 3.2))
    width = 0.8 / max(len(arms), 1)
    for j, arm in enumerate(arms):
        xs, ys, es = [], [], []
        for i, case in enumerate(cases):
            r = next((r for r in rows if r["case"] == case and r["arm"] == arm), None)
            d = r.get(metric) if r else None
            if d and d.get("n"):
                xs.append(i + (j - (len(arms) - 1) / 2) * width)
                ys.append(d["mean"] * k)
                sd = d.get("sd")
                es.append(0.0 if sd is None or (isinstance(sd, float) and math.isnan(sd)) else sd * k)
        ax.bar(xs, ys, width * 0.95, yerr=es, capsize=2, color=arm_color(arm, j), alpha=0.8, label=arm)
    ax.set_xticks(range(len(cases)), [labels[c] for c in cases], fontsize=7, rotation=15)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return to_svg(fig)


def convergence_plot(conv: list[dict[str, Any]], cases: list[str], labels: dict[str, str], arms: list[str]) -> str:
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
        ax.set_ylabel("test accuracy", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return to_svg(fig)


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"


def reach_text(r: dict[str, Any], kit_min_n: int) -> list[str]:
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


def wilcoxon_section(d: dict[str, Any], labels: dict[str, str], arms: list[str]) -> dict[str, Any]:
    """The paper's paired Wilcoxon tests, Holm over the table's family, and what this n can reach."""
    wd, fam = d["wilcoxon_design"], d.get("wilcoxon_family") or {}
    w_rows = []
    for w in d["wilcoxon"]:
        if not w.get("tested"):
            w_rows.append([labels[w["case"]], w["label"], w["n_pairs"], "–", "–", "–", "–", w.get("reason", "")])
            continue
        verdict = "rejected (Holm p < α)" if w.get("significant") else "not rejected (Holm p ≥ α)"
        if not w["can_reject"]:
            verdict += " (cannot reach α with these pairs)"
        elif not w.get("reaches_first", True):
            verdict += " (cannot reach α/m: only after other rows are rejected)"
        w_rows.append([labels[w["case"]], w["label"], w["n_pairs"], w["statistic"], _p(w["p"]), _p(w.get("p_holm")),
                       _p(w["min_attainable_p"]) + ("" if w["exact"] else " (asymptotic)"), verdict])
    reach = wd.get("reach")  # None: an analysis written before the Holm column (re-analyse the run)
    m = fam.get("size") or (reach or {}).get("m", "?")
    paras = [
        "The paper ran 5 runs per framework and dataset and reports Wilcoxon signed-rank tests \"with more than "
        "95 % confidence\". With n pairs, the exact two-sided signed-rank test cannot give a p-value below "
        f"2/2^n: 0.0625 for the paper's n = 5, so its five pairs can never reject at α = 0.05; at least "
        f"{wd['min_pairs_to_reject']} pairs without ties are needed at this run's α = {d['alpha']} before any "
        "correction for the number of tests. The table below computes the paper's test (paired by block, exact "
        "when there are no ties or zeros, as R's wilcox.test does) so the reader can see what it can and cannot "
        "show.",
        *(reach_text(reach, wd["kit_min_n"]) if reach else []),
    ]
    return {
        "id": "dlbench-wilcoxon",
        "title": "DLBench: the paper's Wilcoxon signed-rank tests between the frameworks",
        "paragraphs": paras,
        "tables": [{"caption": f"Paired Wilcoxon signed-rank, {arms[0]} vs {arms[1]} (two-sided); Holm over the "
                               f"family of the m = {m} tests of this table (every dataset × metric with pairs)",
                    "columns": ["dataset", "metric", "pairs", "statistic", "p (unadjusted)", f"Holm p (m = {m})",
                                "smallest possible p", "decision (Holm)"],
                    "rows": w_rows}],
    }


def sections(manifest: dict[str, Any], analysis: dict[str, Any]) -> list[dict[str, Any]]:
    d = analysis.get("extras", {}).get("dlbench")
    if not d:
        return []
    arms, rows, conv = d["arms"], d["per_dataset"], d["convergence"]
    infos = {i["case"]: i for i in d["cases"].values()}
    cases = list(dict.fromkeys(i["case"] for i in d["cases"].values()))
    labels = {c: _label(infos[c]) for c in cases}
    out: list[dict[str, Any]] = []

    synth = d["synthetic_cases"]
    data_rows = [[c, infos[c]["dataset"], infos[c]["source"], infos[c].get("train_size") or "all",
                  infos[c].get("test_size") or "all", infos[c]["epochs"], d["paper_epochs"].get(infos[c]["dataset"], "–"),
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
    out.append({"id": "dlbench-data", "title": "DLBench: datasets of this run", "paragraphs": paras,
                "tables": [{"caption": "Datasets, sizes and epochs (paper: the epochs of Section 4)",
                            "columns": ["case", "dataset", "source", "train examples", "test examples", "epochs",
                                        "paper epochs", "data"], "rows": data_rows}]})

    metric_cols = [*d["metrics"], *d.get("described_only", [])]
    table_rows = [[labels[r["case"]], r["arm"], *[_fmt(r.get(m["metric"]), m["metric"]) for m in metric_cols]]
                  for r in rows]
    figs = []
    for m in metric_cols:
        svg = bars(rows, cases, labels, arms, m["metric"], f"{m['label']} ({_unit(m)})", f"{m['label']} per dataset",
                   log=m["metric"] == "time_s")
        if svg is not None:
            figs.append({"id": f"dlbench-bars-{m['metric']}", "title": f"{m['label']} per dataset and framework "
                         "(mean of the runs, whiskers ±1 sd)", "svg": svg})
    unmeasured = [m["label"] for m in metric_cols if not any(r.get(m["metric"]) for r in rows)]
    out.append({
        "id": "dlbench-results",
        "title": "DLBench: accuracy, training time, CPU, memory and GPU per dataset (Figs. 4–8, 12–17)",
        "paragraphs": [
            "Training time is the sum of the epochs' training; the test evaluation after each epoch (for the "
            "convergence curves) is timed separately and excluded (the paper's Keras code included it via "
            "validation_data). CPU utilisation, host-wide, is the mean over all cores of the host's 1 s readings "
            "in the training phase (the paper's Eq. 1: every process on the host, 100 % = all cores); the trial's "
            "own CPU utilisation beside it is its process's CPU time (and its finished children's) over the phase, "
            "from the phase markers, in % of one core (exact, other processes excluded; described, not tested); "
            "memory is the mean resident set of the trial's process tree in that phase; GPU utilisation is NVML's.",
            "Not measured on this host: " + (", ".join(unmeasured) if unmeasured else "nothing") + ".",
        ],
        "tables": [{"caption": "Mean ± sd over the runs, per dataset and framework",
                    "columns": ["dataset", "framework", *[f"{m['label']} ({_unit(m)})" for m in metric_cols]],
                    "rows": table_rows}],
        "figures": figs,
    })

    peak_rows = [[labels[c["case"]], c["arm"], len(c["runs"]), c["peak_epoch"], c["peak_accuracy"], c["final_accuracy"]]
                 for c in conv]
    out.append({
        "id": "dlbench-convergence",
        "title": "DLBench: convergence, test accuracy after each epoch (Figs. 9–10, 18–19)",
        "paragraphs": ["Each run's test accuracy after every epoch, stored in its trial file "
                       "(results.epoch_test_accuracy) and as epoch_end markers; the curves are the mean over runs "
                       "with a ±1 sd band."],
        "tables": [{"caption": "Peak of the mean curve", "columns": ["dataset", "framework", "runs", "peak epoch",
                                                                    "peak accuracy", "final accuracy"],
                    "rows": peak_rows}],
        "figures": [{"id": f"dlbench-convergence-{c}", "title": f"{labels[c]}: test accuracy per epoch (mean ± sd "
                     "over runs)", "svg": convergence_plot(conv, [c], labels, arms)}
                    for c in cases if any(x["case"] == c for x in conv)],
    })

    out.append(wilcoxon_section(d, labels, arms))

    out.append({
        "id": "dlbench-not-reproduced",
        "title": "DLBench: not yet reproduced",
        "paragraphs": ["The paper also benchmarks two models this experiment does not run yet; they are listed here "
                       "so the report does not suggest full coverage. The paper's other four frameworks (MXNet, "
                       "Theano, Chainer, and Keras as separate from TensorFlow) are out of scope: the kit compares "
                       "TensorFlow (through Keras, its high-level API) and PyTorch."],
        "tables": [{"caption": "Models of the paper not reproduced", "columns": ["model", "in the paper", "status"],
                    "rows": [[x["model"], x["paper"], x["why"]] for x in d["not_reproduced"]]}],
    })
    return out
