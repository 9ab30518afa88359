"""Report sections of the Patel et al. model sweep (finished ``analysis["extras"]["zoo"]`` in, sections out)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from kit.analysis_record import Analysis
from kit.fmt import fmt_num
from kit.report.figures import PALETTE, arm_color, finish_lines, to_svg
from kit.study_api import Figure, RunView, Section, Table

STUDY_API = 3  # sections(run, analysis) -> list[Section] (kit.study_api)


def _g(x: Any, fmt: str = ".3g", scale: float = 1.0) -> str:
    """The kit's number formatter with this report's default layout (three significant digits)."""
    return fmt_num(x, fmt=fmt, scale=scale)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f} %"


def ratio_figure(ratios: list[dict[str, Any]], title: str) -> str | None:
    """TF/PT time ratio per model x batch x shape (the paper's Figs. 1-3); > 1: PyTorch faster. OOM: no bar, 'oom'."""
    if not ratios:
        return None
    labels = [f"{r['model']}\nb{r['batch_size']} {r['image_size']}px" for r in ratios]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(ratios) + 1.5), 3.4))
    for i, r in enumerate(ratios):
        if r["ratio"] is None:
            ax.text(i, 1.0, "/".join(sorted({s for s in r["status"].values() if s != "ok"})) or "–", rotation=90,
                    ha="center", va="bottom", fontsize=6, color="grey")
            continue
        ax.bar(i, r["ratio"], 0.7, color=PALETTE["tensorflow" if r["ratio"] > 1 else "pytorch"], alpha=0.85)
        if r.get("lo") is not None:
            ax.errorbar(i, r["ratio"], yerr=[[r["ratio"] - r["lo"]], [r["hi"] - r["ratio"]]], color="k", lw=0.8,
                        capsize=2)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(ratios)), labels, fontsize=6, rotation=90)
    ax.set_ylabel("time TF / time PT")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig)


def batch_figure(curves: list[dict[str, Any]], key: str, ylabel: str, title: str, logy: bool = True) -> str | None:
    """One line per model, shape and framework against batch size; oom/skipped points missing, marked x at the axis."""
    if not any(p.get(key) is not None for c in curves for p in c["points"]):
        return None
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    styles = ["-", "--", ":", "-."]
    models = sorted({(c["case"], c["image_size"]) for c in curves}, key=str)
    for j, c in enumerate(curves):
        xs = [p["batch_size"] for p in c["points"]]
        ys = [np.nan if p.get(key) is None else p[key] for p in c["points"]]
        k = models.index((c["case"], c["image_size"]))
        ax.plot(xs, ys, styles[k % len(styles)], marker="o", ms=3, lw=1, color=arm_color(c["arm"], j),
                label=f"{c['case']} {c['image_size']}px {c['arm']}")
        bad = [p["batch_size"] for p in c["points"] if p.get(key) is None]
        if bad:
            ax.plot(bad, [0.02] * len(bad), "x", color=arm_color(c["arm"], j), transform=ax.get_xaxis_transform(),
                    ms=6)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    return finish_lines(fig, ax, "batch size", ylabel, title, 9)


NAME = {"tensorflow": "TensorFlow", "pytorch": "PyTorch"}
MODEL_NAME = {"resnet18": "ResNet18", "resnet152": "ResNet152", "vgg16": "VGG16", "mobilenet_v2": "MobileNetV2",
              "efficientnet_b4": "EfficientNetB4"}


def winner_sentence(w: dict[str, Any]) -> str:
    """"PyTorch was 1.28x faster than TensorFlow at ResNet18 training (GPU) [95 % CI 1.10-1.49] ...", or undecided."""
    what = f"{MODEL_NAME.get(w['model'], w['model'])} {w['label']}"
    ci = (f"[{w['conf'] * 100:.0f} % CI {_g(w.get('factor_low'), '.2f')}–{_g(w.get('factor_high'), '.2f')}]"
          if w.get("factor_low") is not None else "[no interval: " + (w.get("reason") or "one configuration") + "]")
    tail = (f"geometric mean over {w['n_configs']} configuration{'s' if w['n_configs'] != 1 else ''}, "
            f"p (Holm) = {_g(w.get('p_holm'))}")
    lead = (f"{NAME.get(w['leader'], w['leader'])} was {_g(w['factor'], '.2f')}× faster than "
            f"{NAME.get(w['slower'], w['slower'])}")
    paper = ("" if w.get("paper") is None else
             f"; the paper: {NAME.get(w['paper'], w['paper'])} faster" + (
                 "" if w.get("agrees_with_paper") is None else " (agrees)" if w["agrees_with_paper"] else " (disagrees)"))
    if w["decided"]:
        return f"{lead} at {what} {ci} ({tail}){paper}."
    marginal = (w.get("factor_low") is not None and w["factor_low"] > 1 and w.get("p_holm") is not None)
    why = (f"; the interval alone excludes 1, but Holm's adjustment over the table's rows leaves p above "
           f"α = {1 - w['conf']:.2g}" if marginal else "")
    return f"{what}: no winner (undecided); as measured {lead} {ci} ({tail}){paper}{why}."


def winners_section(d: dict[str, Any]) -> Section | None:
    """The per-model winner table, first in the study's report: who was faster, by how much, decided or not."""
    ws = d.get("winners") or []
    if not ws:
        return None
    alpha = d.get("alpha", 0.05)
    rows = [[MODEL_NAME.get(w["model"], w["model"]), w["label"], NAME.get(w["faster"], "no winner (undecided)")
             if w["decided"] else "no winner (undecided)", _g(w["factor"], ".2f"),
             f"[{_g(w.get('factor_low'), '.2f')}, {_g(w.get('factor_high'), '.2f')}]", NAME.get(w["leader"], "–"),
             w["n_configs"], _g(w.get("p_holm")), NAME.get(w.get("paper") or "", "–")] for w in ws]
    pins = sorted({(tuple(p.get("cpus_pinned") or ()), p.get("intra_op_threads"), p.get("inter_op_threads"))
                   for c in d.get("cells") or [] for p in c.get("cpu_pinning") or []}, key=str)
    paras = [" ".join(winner_sentence(w) for w in ws),
             "Per model and phase, the geometric mean over its configurations (batch size × input side) of the "
             "TF/PT ratio of trial medians, with the t interval over the configurations at "
             f"{(1 - alpha) * 100:.0f} % (kit.analysis.across, the interval the claims ledger uses for the paper's per-model "
             f"findings). A row names a winner only when its p, Holm-adjusted over the table's {len(ws)} rows, is "
             f"below α = {alpha}; 'faster by' is the leader's time ratio (≥ 1) with its interval. Phases as the "
             "paper's Figs. 1–3 split them: training, inference on the GPU, inference on the CPU (with the cores a "
             "pinned trial was given)."]
    if pins:
        paras.append("Pinned CPU trials ran on CPU(s) " + "; ".join(
            f"{','.join(map(str, cpus))} with {intra} intra-op / {inter} inter-op thread(s)" for cpus, intra, inter
            in pins) + " (every thread's affinity and the framework's thread counts read back and checked in each "
            "trial; kit.workloads.zoo_pin).")
    return Section(id="zoo-winners",
                   title="Which framework was faster, per model and phase",
                   paragraphs=paras,
                   tables=[Table(caption="Per-model winner (TF/PT geometric mean over configurations; decided at alpha "
                                   "after Holm)",
                             columns=[
                "model", "phase", "winner", "faster by", f"{(1 - alpha) * 100:.0f} % CI", "leader as measured",
                "configurations", "p (Holm)", "paper"],
                             rows=rows)])


def sections(run: RunView, analysis: Analysis) -> list[Section]:
    raw = analysis.extras.get("zoo")
    if not isinstance(raw, dict) or not raw:
        return []
    d: dict[str, Any] = raw  # the JSON of the study's extras record (analysis.py), read by key
    arms, out = d["arms"], []
    win = winners_section(d)
    if win:
        out.append(win)

    pair_rows = [[p["model"], p.get("image_size") or "–", *[_g(p["counts"].get(a), ",.0f") for a in arms], _g(p["diff_pct"], ".2f"),
                  "DIFFERENT definitions" if p["differ"] else "same"] for p in d["param_pairs"]]
    differ = sorted({f"{p['model']} ({p.get('image_size')} px)" for p in d["param_pairs"] if p["differ"]})
    out.append(Section(id="zoo-params",
                       title="Model pairs: parameter counts per framework",
                       paragraphs=["Trainable parameters of each model as built by torchvision.models and "
                               "keras.applications with random weights and the same number of classes (Keras' "
                               "batch-norm moving statistics are not parameters in either library). keras.applications "
                               "has no ResNet18: the kit builds it from Keras layers as torchvision defines it.",
                               ("The libraries' definitions differ (> 1 % in parameters) for: " + ", ".join(differ)
                                + "; their time ratios compare different networks as much as frameworks.")
                               if differ else "Every pair has the same parameter count (within 1 %)."],
                       tables=[Table(caption="Parameter counts",
                                 columns=["model", "side (px)", *arms, "difference (%)",
                                                                   "definitions"],
                                 rows=pair_rows)]))

    figs = []
    for phase, where, title in (("train", "train_infer", "training step"), ("infer", "train_infer", "GPU/default-"
                                "device inference"), ("infer", "infer", "CPU inference")):
        rs = [r for r in d["ratios"] if r["phase"] == phase and r["mode"] == where]
        svg = ratio_figure(rs, f"Relative {title} time TF/PT (> 1: PyTorch faster)")
        if svg:
            figs.append(Figure(id=f"zoo-ratio-{phase}-{where}",
                               title=f"Relative {title} time, TF/PT, per model, "
                         "batch size and input side (Figs. 1–3); whiskers: 95 % interval over trials",
                               svg=svg))
    rows = [[r["case"], r["batch_size"], r["image_size"], r["phase"], _g(r["ratio"]),
             f"[{_g(r.get('lo'))}, {_g(r.get('hi'))}]", _g(r.get("p")), "/".join(f"{k}:{v}" for k, v in
                                                                                   r["status"].items())]
            for r in d["ratios"]]
    out.append(Section(id="zoo-ratios",
                       title="Relative time TensorFlow / PyTorch per configuration (Figs. 1–3)",
                       paragraphs=["Ratio of the mean step time over trials (each trial: the mean of its timed steps), "
                               "TensorFlow over PyTorch; the interval and p are Welch's on log step times over trials. "
                               "Configurations that ran out of memory (or were skipped) have no ratio."],
                       tables=[Table(caption="TF/PT time ratios",
                                 columns=["case", "batch", "side (px)", "phase",
                                                                       "TF/PT", "95 % interval", "p", "status"],
                                 rows=rows)],
                       figures=figs))

    curves = d["curves"]
    figs = [f for f in (
        Figure(id="zoo-batch-time",
               title="Inference time per batch against batch size (Fig. 4)",
               svg=batch_figure(curves, "infer_step_s", "inference time per batch (s)", "Inference time vs batch size")),
        Figure(id="zoo-batch-latency",
               title="Per-image inference latency against batch size",
               svg=batch_figure(curves, "latency_per_image_s", "latency per image (s)", "Per-image latency vs batch")),
        Figure(id="zoo-batch-throughput",
               title="Inference throughput against batch size",
               svg=batch_figure(curves, "throughput_ips", "images/s", "Throughput vs batch size")),
    ) if f.svg]
    def step_text(t: dict[str, Any]) -> str:
        return "; ".join(f"{s['from']}→{s['to']}: −{s['rel_decrease'] * 100:.0f} % p={_g(s.get('p_holm'))}"
                         for s in t["steps"]) or t.get("reason") or "–"

    test_rows = [[c["case"], c["image_size"], c["arm"], c["decrease_test"]["verdict"],
                  _g(c["decrease_test"].get("limit")), step_text(c["decrease_test"])] for c in curves]
    across = d.get("decrease_across_curves") or {}
    across_rows = [[arm, t["verdict"], _g(t.get("limit")), step_text(t)] for arm, t in sorted(across.items())]
    summary = ", ".join(f"{k}: {v}" for k, v in d["decrease_summary"].items())
    out.append(Section(id="zoo-batch",
                       title="Inference time against batch size: \"decreases up to a limit\" (Fig. 4)",
                       paragraphs=[
                    "The paper: \"as the batch size increases, the inference time decreases up to a limit ... verified "
                    "statistically\". The unit is the trial (a process): the timed steps inside a trial are summarised "
                    "into its mean before any test, because steps of one process are not independent. Per curve: "
                    "one-sided Mann-Whitney tests on the trials' per-image latencies between neighbouring batch sizes "
                    f"(larger batch faster per image), Holm-corrected along the curve at α = {d['alpha']}; with 3 trials "
                    "per point the smallest attainable p is 0.05, so a single curve is 'not testable' and the claim is "
                    "decided across curves: per framework, a one-sided Wilcoxon signed-rank test over the curves "
                    "(models × input sides) of the log ratio of trial medians between neighbouring batch sizes, Holm "
                    "over the pairs. A fall counts when significant and larger than 5 %. 'supported': falls, then "
                    "levels off inside the grid (the limit is the batch size where it stops); 'no limit reached': "
                    "falls over the whole grid; 'not supported': no significant fall at the smallest batch sizes.",
                    f"Verdicts over {len(curves)} curves: {summary or 'none'}. Out-of-memory points are missing "
                    "(marked × on the axis)."],
                       tables=[Table(caption="Decrease-to-a-limit test across curves (unit: curve)",
                                 columns=[
                    "framework", "verdict", "limit (batch)", "neighbouring batch sizes"],
                                 rows=across_rows),
                           Table(caption="Decrease-to-a-limit test per curve (unit: trial)",
                                 columns=[
                    "case", "side (px)", "framework", "verdict", "limit (batch)", "neighbouring steps"],
                                 rows=test_rows)],
                       figures=figs))

    power_rows = [[c["case"], c["image_size"], c["arm"], *[_g(p.get("power_w"), ".1f") for p in c["points"]],
                   _g(c.get("power_kruskal_p")), _g(c.get("power_kruskal_p_holm"))]
                  for c in curves if any(p.get("power_w") for p in c["points"])]
    batches = sorted({p["batch_size"] for c in curves for p in c["points"]})
    # Q4 as tested: the stratified trend of trial-level power with batch size (kit.analysis.zoo.power_trend)
    trend_rows = [[t["arm"], t["phase"], t.get("n_trials") or "–", t.get("strata") or "–",
                   _g(t.get("concordance"), ".3f"), _g(t.get("p")), _g(t.get("p_holm")),
                   t.get("decision") or "–", t.get("reason") or ""] for t in d.get("power_trend") or []]
    pfig = batch_figure(curves, "power_w", "mean GPU power (W)", "GPU power vs batch size", logy=False)
    efig = batch_figure(curves, "energy_j", "GPU energy of the training phase (J)", "GPU energy vs batch size")
    out.append(Section(id="zoo-power",
                       title="GPU power and energy against batch size (Fig. 5)",
                       paragraphs=[f"GPU power over the training phase (inference phase for inference-only cases), "
                               f"{d.get('power_source') or 'NVML 1-s moving average'}, "
                               "and the GPU energy counter of the training phase. The paper found that batch size "
                               "did not significantly affect power; the Kruskal-Wallis test across batch sizes "
                               "(trial means; R's kruskal.test, chi-square approximation, poor with fewer than 5 "
                               "trials per batch size) checks that per curve, Holm-adjusted over the curves. Q4's "
                               "trend test: a non-rejection says no monotone trend was detected, with the smallest "
                               "trend per batch-size step it would have detected with power 0.8 (seeded simulation "
                               "at the run's strata and observed noise, level α/m); it is not evidence of no "
                               "effect below that size." if d["power_measured"] else
                               "NOT MEASURED on this host: no NVIDIA GPU/NVML, so power and energy against batch "
                               "size (the paper's Fig. 5) are absent from this run."],
                       tables=([Table(caption="Q4: does GPU power change with batch size? Stratified "
                             "Jonckheere-Terpstra trend test per framework and phase (unit: trial; strata: model, "
                             "input side, repetition; Holm over the rows)",
                                  columns=[
                    "framework", "phase", "trials", "strata", "concordance", "p", "p (Holm)", "decision", "why"],
                                  rows=trend_rows)] if trend_rows else []) + ([Table(caption="Mean GPU power (W) per batch size",
                                                                          columns=[
                    "case", "side (px)", "framework", *[f"b{b}" for b in batches], "Kruskal-Wallis p",
                    "p (Holm over the curves)"],
                                                                          rows=power_rows)] if power_rows else []),
                       figures=[f for f in (Figure(id="zoo-power-fig", title="GPU power vs batch size", svg=pfig),
                                        Figure(id="zoo-energy-fig", title="GPU energy vs batch size", svg=efig))
                            if f.svg]))

    peak_src = sorted({c.get("peak_source") for c in d["cells"] if c.get("peak_source")})
    mfu_rows = [[c["case"], c["batch_size"], c["image_size"], c["arm"], c["status"],
                 _g(c.get("flops_per_example_fwd"), ".3g", 1e-9), _g(c.get("train_throughput_ips"), ".4g"),
                 _pct(c.get("mfu_train")), _g(c.get("infer_throughput_ips"), ".4g"), _pct(c.get("mfu_infer"))]
                for c in d["cells"]]
    out.append(Section(id="zoo-mfu",
                       title="Throughput and model FLOP utilisation per configuration",
                       paragraphs=["FLOPs per image: the forward pass counted by torch.utils.flop_counter on the PyTorch "
                               "model for the input side (the same count serves the TensorFlow twin); a training step "
                               "counts 3× forward. MFU = achieved FLOP/s ÷ the device's peak; n/a where the peak is "
                               "unknown. Peaks used: " + ("; ".join(peak_src) or "none") + "."],
                       tables=[Table(caption="Throughput and MFU",
                                 columns=[
                    "case", "batch", "side (px)", "framework", "status", "GFLOP/image (fwd)", "train images/s",
                    "train MFU", "infer images/s", "infer MFU"],
                                 rows=mfu_rows)]))

    if d["missing"]:
        out.append(Section(id="zoo-missing",
                           title="Configurations without a measurement (out of memory, skipped, failed)",
                           paragraphs=["These configurations are recorded with their status and drawn as missing "
                                   "points; they did not stop the run."],
                           tables=[Table(caption="Missing points",
                                     columns=["case", "batch", "side (px)", "framework",
                                                                         "status", "reason"],
                                     rows=[[m["case"], m["batch_size"], m["image_size"], m["arm"], m["status"],
                                          m["reason"]] for m in d["missing"]])]))
    return out
