"""Report sections of the data-parallel study (``analysis["extras"]["zoo_distributed"]`` in)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from kit.analysis_record import Analysis
from kit.fmt import fmt_num
from kit.report.figures import arm_color, to_svg
from kit.study_api import Cell, Figure, RunView, Section, Table

from .analysis import DistributedExtras, Row, ScalingRow, Winner

STUDY_API = 3  # sections(run, analysis) -> list[Section] (kit.study_api)


def _g(x: Any, fmt: str = ".3g", scale: float = 1.0) -> str:
    """The kit's number formatter with this report's default layout (three significant digits)."""
    return fmt_num(x, fmt=fmt, scale=scale)


STRATEGY = {"single": "one device", "dp": "DataParallel / MirroredStrategy", "ddp": "DistributedDataParallel"}


def speedup_figure(rows: list[Row]) -> str | None:
    """Speed-up over one device per framework and strategy; the ideal (linear) speed-up as a line."""
    rs = [r for r in rows if r["strategy"] != "single"]
    if not any(r.get("speedup") for r in rs):
        return None
    fig, ax = plt.subplots(figsize=(5.6, 3.0))
    for i, r in enumerate(rs):
        label = f"{r['arm']}\n{r['strategy']} ×{r['devices']}"
        if speedup := r.get("speedup"):
            ax.bar(i, speedup, 0.6, color=arm_color(r["arm"], i),
                   alpha=0.85)
            ax.hlines(r["devices"], i - 0.35, i + 0.35, colors="k", linestyles="--", lw=0.8)
        else:
            ax.text(i, 0.05, r["status"], rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
        ax.text(i, -0.02, label, ha="center", va="top", fontsize=6, transform=ax.get_xaxis_transform())
    ax.set_xticks([])
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_ylabel("speed-up over one device")
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig)


def strategy_name(arm: str, strategy: str) -> str:
    """The strategy as the framework calls it: dp is DataParallel in PyTorch, MirroredStrategy in TensorFlow."""
    if strategy == "dp":
        return "MirroredStrategy" if arm.split("@")[0] == "tensorflow" else "DataParallel"
    return STRATEGY.get(strategy, strategy)


def efficiency_figure(effs: list[ScalingRow], threshold: float) -> str | None:
    """Scaling efficiency against the device count, one line per framework and strategy, with the CI as whiskers."""
    lines: dict[tuple[str, str], list[ScalingRow]] = {}
    for e in effs:
        if e.get("efficiency") is not None:
            lines.setdefault((e["arm"], e["strategy"]), []).append(e)
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    for j, ((arm, strategy), es) in enumerate(sorted(lines.items())):
        es = sorted(es, key=lambda e: e["devices"])
        pts = [(e["devices"], y, e["low"], e["high"]) for e in es if (y := e["efficiency"]) is not None]
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        err = [[y - (lo if lo is not None else y) for _, y, lo, _ in pts],
               [(hi if hi is not None else y) - y for _, y, _, hi in pts]]
        ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, lw=1, capsize=3, color=arm_color(arm, j),
                    linestyle="-" if strategy == "ddp" else "--", label=f"{arm} {strategy_name(arm, strategy)}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(threshold, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices N")
    ax.set_ylabel("throughput(N) / (N × throughput(1))")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return to_svg(fig)


def scaling_section(d: DistributedExtras) -> Section | None:
    """The scaling-efficiency table and figure: every framework, strategy and device count the run planned."""
    effs = d.scaling_efficiency
    if not effs:
        return None
    thr = float(d.near_linear_threshold or 0.9)
    conf = effs[0].get("conf") or 0.95
    rows: list[list[Cell]] = [[e["arm"], strategy_name(e["arm"], e["strategy"]), e["devices"], e.get("device_kind") or "–",
             e["status"], f"{e['n_multi']}/{e['n_single']}", _g(e.get("speedup"), ".3f"), _g(e.get("efficiency"), ".3f"),
             f"[{_g(e.get('low'), '.3f')}, {_g(e.get('high'), '.3f')}]", e["verdict"], e.get("reason") or ""]
            for e in effs]
    def named(es: list[ScalingRow]) -> str:
        return ", ".join(f"{e['arm']} {strategy_name(e['arm'], e['strategy'])} on {e['devices']}" for e in es)

    measured = [e for e in effs if e.get("efficiency") is not None]
    missing = [e for e in effs if e.get("efficiency") is None]
    return Section(id="zoo-dist-scaling",
                   title="Scaling efficiency per framework, strategy and device count",
                   paragraphs=[
                "Scaling efficiency = throughput(N) / (N × throughput(1)): the ratio of the mean training throughput "
                "of the N-device trials to the mean of the same framework's one-device trials, divided by N "
                f"(1 = linear). Interval: {conf * 100:.0f} % delta-method CI on the log of the ratio of means (trials as "
                "independent processes, Welch degrees of freedom). The verdict reads the interval against "
                f"{thr:g}, the kit's reading of the paper's 'near-linear' (the paper gives no figure): 'near-linear' "
                "when the whole interval lies at or above it, 'below near-linear' when wholly below, else 'undecided'.",
                ("Measured here: " + named(measured) + "." if measured else
                 "No strategy beyond one device was measured here.")
                + (" Not measured (skipped or failed, the reason in the table): " + named(missing) + "."
                   if missing else "")],
                   tables=[Table(caption="Scaling efficiency (trials N-device / one-device)",
                             columns=[
                "framework", "strategy", "devices", "device", "status", "trials", "speed-up", "efficiency",
                f"{conf * 100:.0f} % CI", "verdict", "why"],
                             rows=rows)],
                   figures=[f for f in (Figure(id="zoo-dist-efficiency",
                                           title="Scaling efficiency against the device "
                                     "count (dotted: the near-linear threshold; whiskers: CI)",
                                           svg=efficiency_figure(effs, thr)),) if f.svg])


NAME = {"tensorflow": "TensorFlow", "pytorch": "PyTorch"}


def winners_section(d: DistributedExtras) -> Section | None:
    """Which framework trained faster per strategy and device count (the strategies both frameworks run)."""
    ws = d.framework_winners
    if not ws:
        return None

    def setting(w: Winner) -> str:
        if w["strategy"] == "single":
            return "on one device"
        return f"with DataParallel vs MirroredStrategy on {w['devices']} devices"

    def sentence(w: Winner) -> str:
        other = "pytorch" if w["leader"] == "tensorflow" else "tensorflow"
        lo, hi = w.get("low"), w.get("high")
        f_lo, f_hi = ((lo, hi) if w["leader"] == "tensorflow" else (1 / hi, 1 / lo)) if lo and hi else (None, None)
        ci = (f"[{w['conf'] * 100:.0f} % CI {_g(f_lo, '.2f')}–{_g(f_hi, '.2f')}]" if f_lo is not None else
              f"[no interval: {w.get('reason')}]")
        lead = f"{NAME[w['leader']]} trained {_g(w['factor'], '.2f')}× faster than {NAME[other]}"
        tail = f"({w['n_tf']}/{w['n_pt']} trials, p (Holm) = {_g(w.get('p_holm'))})"
        return (f"{lead} {setting(w)} {ci} {tail}." if w["decided"] else
                f"{setting(w).capitalize()}: no winner (undecided); as measured {lead} {ci} {tail}.")

    rows: list[list[Cell]] = [[STRATEGY.get(w["strategy"], w["strategy"]), w["devices"], w["model"],
             NAME.get(w["faster"] or "", "no winner (undecided)"), _g(w["ratio_tf_over_pt"], ".3f"),
             f"[{_g(w.get('low'), '.3f')}, {_g(w.get('high'), '.3f')}]", f"{w['n_tf']}/{w['n_pt']}",
             _g(w.get("p_holm"))] for w in ws]
    return Section(id="zoo-dist-winners",
                   title="Which framework trained faster, per strategy and device count",
                   paragraphs=[" ".join(sentence(w) for w in ws),
                           "TensorFlow/PyTorch training throughput (global images per second) as a ratio of trial "
                           "means with a delta-method interval on its log (Welch degrees of freedom); a winner only "
                           "when its p, Holm-adjusted over these rows, is below α. DataParallel (PyTorch) is paired "
                           "with MirroredStrategy (TensorFlow): both are one process with a replica per device. "
                           "DistributedDataParallel has no TensorFlow counterpart here."],
                   tables=[Table(caption="Framework winner per strategy and device count (throughput TF/PT > 1: TensorFlow "
                                   "faster)",
                             columns=["strategy", "devices", "model", "winner", "TF/PT",
                                                          f"{ws[0]['conf'] * 100:.0f} % CI", "trials TF/PT",
                                                          "p (Holm)"],
                             rows=rows)])


def sections(run: RunView, analysis: Analysis) -> list[Section]:
    raw = analysis.extras.get("zoo_distributed")
    if not isinstance(raw, dict) or not raw:
        return []
    d = DistributedExtras.from_json(raw)  # the study's record (analysis.py), read back from analysis.json
    rows: list[list[Cell]] = [[r["case"], r["arm"], STRATEGY.get(r["strategy"], r["strategy"]), r["devices"], r.get("device_kind") or "–",
             r.get("dist_backend") or "–", r["batch_size"], r["status"], _g(r.get("ips_mean"), ".4g"),
             _g(r.get("speedup"), ".2f"), _g(r.get("efficiency"), ".2f")] for r in d.rows]
    claim = d.ddp_vs_dp
    paras = ["Weak scaling: each device trains on batch_size images per step; throughput is global images per "
             "second over the timed steps (mean over trials); speed-up is over the same framework on one device, "
             "scaling efficiency = speed-up ÷ devices (1 = linear). DataParallel is one process replicating the "
             "model over CUDA devices; DistributedDataParallel runs one process per device (torchrun; NCCL on GPUs, "
             "gloo on CPUs); TensorFlow's MirroredStrategy is one process with a replica per device (logical CPU "
             "devices on a CPU host). On a CPU host one device is one core."]
    scaling = d.ddp_scaling
    if claim:
        ci = (f"{claim['ratio_ddp_over_dp']:.3f} [{claim['low']:.3f}, {claim['high']:.3f}] ({claim['conf']:.0%} CI, "
              f"{claim['n_pairs']} repetitions paired)" if claim.get("tested") else "not estimated")
        paras.append(f"The paper: DDP performs better than DataParallel, near-linearly. Tested within PyTorch: "
                     f"DDP/DataParallel throughput ratio {ci}; verdict: {claim['verdict']} "
                     f"({claim['method']}). Speed-ups over one device: DDP {claim['ddp_speedup']:.2f}, "
                     f"DataParallel {claim['dp_speedup']:.2f}.")
    if scaling:
        eff = (f"{scaling['efficiency']:.2f} [{scaling['efficiency_low']:.2f}, {scaling['efficiency_high']:.2f}]"
               if scaling.get("tested") else "not estimated")
        paras.append(f"DDP scaling efficiency on {scaling['devices']} {scaling.get('device_kind') or ''} devices: {eff} "
                     f"against the near-linear threshold {scaling['near_linear_threshold']:g} (the kit's reading; the "
                     f"paper gives no figure): {scaling['verdict']}.")
    if not claim:
        paras.append("The paper's DDP vs DataParallel comparison needs both on GPUs; it is not available from this "
                     "run (see the skipped strategies and their reasons below).")
    win = winners_section(d)
    out = [win] if win else []
    out += [Section(id="zoo-dist",
                    title="Distributed training: DataParallel vs DistributedDataParallel vs "
            "MirroredStrategy (Section VI-E)",
                    paragraphs=paras,
                    tables=[Table(caption="Throughput, speed-up and scaling efficiency",
                             columns=[
                "case", "framework", "strategy", "devices", "device", "collective", "batch/device", "status",
                "images/s", "speed-up", "efficiency"],
                             rows=rows)],
                    figures=[f for f in (Figure(id="zoo-dist-speedup",
                                           title="Speed-up over one device (dashed: linear)",
                                           svg=speedup_figure(d.rows)),) if f.svg])]
    sc = scaling_section(d)
    if sc:
        out.append(sc)
    if d.skipped:
        out.append(Section(id="zoo-dist-skipped",
                           title="Distributed training: strategies not run here",
                           tables=[Table(caption="Skipped or failed, with the reason",
                                     columns=[
                        "case", "framework", "strategy", "status", "reason"],
                                     rows=[[s["case"], s["arm"], s["strategy"], s["status"], s["reason"]] for s in d.skipped])]))
    return out
