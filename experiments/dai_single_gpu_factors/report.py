"""Report sections of the Dai et al. factor study (finished ``analysis["extras"]["dai_factors"]`` in)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from kit.analysis_record import Analysis
from kit.fmt import fmt_num
from kit.report.figures import arm_color, to_svg
from kit.study_api import Cell, Figure, RunView, Section, Table

from .analysis import DaiExtras, FactorEntry, FactorFit, Row, num
from .kernel_report import kernel_sections

STUDY_API = 3  # sections(run, analysis) -> list[Section] (kit.study_api)


def _g(x: Any, fmt: str = ".3g", scale: float = 1.0) -> str:
    """The kit's number formatter with this report's default layout (three significant digits)."""
    return fmt_num(x, fmt=fmt, scale=scale)


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def _estimated(gap: FactorFit) -> list[tuple[FactorEntry, float]]:
    """The factors of a fit with an effect and a share, each with its share."""
    return [(f, share) for f in gap.get("factors", []) if f.get("status") == "estimated"
            and (share := f.get("share")) is not None]


def effects_figure(gap: FactorFit) -> str | None:
    """Share of the TF/PT gap's variation explained by each factor, the networks and the residual."""
    est = _estimated(gap)
    if not est:
        return None
    network = gap.get("network_share")
    labels = [f["label"] for f, _ in est] + (["network"] if network is not None else []) + ["residual"]
    vals = [share for _, share in est] + ([network] if network is not None else []) + \
        [gap.get("residual_share") or 0.0]
    fig, ax = plt.subplots(figsize=(6.0, 0.4 * len(labels) + 1.0))
    ax.barh(range(len(labels)), [v * 100 for v in vals], color="#1f77b4", alpha=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the variation of log(TF/PT) (%)")
    ax.grid(axis="x", alpha=0.3)
    return to_svg(fig)


def throughput_figure(rows: list[Row], arms: list[str]) -> str | None:
    """Training throughput per network and design run, one bar per framework."""
    rs = [r for r in rows if any(r.get(f"{a}_items_per_s") for a in arms)]
    if not rs:
        return None
    fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * len(rs) + 1.5), 3.2))
    w = 0.8 / len(arms)
    for j, arm in enumerate(arms):
        xs = [i + (j - (len(arms) - 1) / 2) * w for i, r in enumerate(rs) if r.get(f"{arm}_items_per_s")]
        ys = [y for r in rs if (y := num(r, f"{arm}_items_per_s"))]
        ax.bar(xs, ys, w * 0.95, label=arm, color=arm_color(arm, j))
    ax.set_xticks(range(len(rs)), [f"{r['model']} {r['case']}" for r in rs], fontsize=6, rotation=90)
    ax.set_yscale("log")
    ax.set_ylabel("training items/s")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig)


def _effect_rows(res: FactorFit) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for f in res.get("factors", []):
        if f["status"] != "estimated":
            rows.append([f["label"], f"{f['low']} → {f['high']}", f["status"] + (f" (held at {f.get('level')})"
                         if "level" in f else ""), "–", "–", "–"])
            continue
        rows.append([f["label"], f"{f['low']} → {f['high']}", "estimated", _g(f["ratio_multiplier"], ".3f"),
                     _share(f.get("share")), _g(f.get("p"))])
    return rows


def failed_section(d: DaiExtras) -> Section:
    """The design cells whose every trial failed, with the first error of each: an error of the run."""
    failed = d.failed_cells
    rows: list[list[Cell]] = [[f.get("model"), f.get("case"), f["arm"], f["status"], f["trials"], f.get("trial_id") or "–",
             (str(f.get("error") or "").strip().splitlines() or ["–"])[-1][:200]] for f in failed]
    return Section(id="dai-failed",
                   title="Dai et al.: failed design cells (the factor analysis is not computed)",
                   paragraphs=[
                f"{len(failed)} design cell(s) failed in every trial. A failed cell is an error of the run, not "
                "missing data: fitting the factors on the rest of the design would attribute the failure's "
                "pattern to a factor, so no factor effect is reported. Fix the failing workload (each trial's "
                "record has the full error and stderr) and re-run the cells."],
                   tables=[Table(caption="Failed design cells and the first error of each",
                             columns=["network", "run", "framework", "status", "trials", "first failed trial",
                                    "first error (last line)"],
                             rows=rows)])


def sections(run: RunView, analysis: Analysis) -> list[Section]:
    raw = analysis.extras.get("dai_factors")
    if not isinstance(raw, dict) or not raw:
        return []
    d = DaiExtras.from_json(raw)  # the study's record (analysis.py), read back from analysis.json
    arms, gap, out = d.arms, d.gap_effects, []
    if d.failed_cells:
        out.append(failed_section(d))
    est = sorted(_estimated(gap), key=lambda fs: -fs[1])
    if gap.get("not_computed"):
        verdict = "The factor analysis is not computed: " + str(gap.get("note") or "design cells failed") + "."
    elif est:
        words = "; ".join(f"{f['label']}: {_share(share)} (TF/PT × {f['ratio_multiplier']:.3f} from "
                          f"{f['low']} to {f['high']}{', p = ' + format(p, '.3g') if (p := f.get('p')) is not None else ''})"
                          for f, share in est)
        verdict = (f"Of the variation of the TF/PT gap across the {gap['n']} configurations (repetitions averaged), the factors explain: "
                   f"{words}; " + (f"the networks explain {_share(gap.get('network_share'))} and "
                                   if gap.get("network_share") is not None else "(one network: no network term) ")
                   + f"{_share(gap.get('residual_share'))} is left unexplained.")
    else:
        verdict = "No factor effect could be estimated from this run: " + (gap.get("note") or "every factor was "
                                                                              "held constant or aliased") + "."
    not_varied = [f["label"] for f in gap.get("factors", []) if f["status"] == "not varied"]
    aliased = [f["label"] for f in gap.get("factors", []) if f["status"] == "aliased"]
    paras = [
        "Response: log of the TF/PT ratio of mean training-step time per configuration (network × design run), "
        "the mean over its repetitions (the two frameworks' trials of one block); 0 means no gap. OLS on the "
        "factors coded −1/+1 plus the network as a block; 'TF/PT ×' is the factor by which the ratio "
        "changes from the low to the high level (exp(2b)); the share is the factor's Type II sum of squares over "
        "the total (how much of the gap's variation it explains). p: the network is a random factor, so each "
        "factor's effect is estimated within every network and t-tested across the networks (df = networks − 1): "
        "significant means it holds beyond these networks' own gaps; with one network, the test is against the "
        "repetitions and speaks for that network only.",
        verdict,
    ]
    if gap.get("df_resid") == 0:
        paras.append("No residual degrees of freedom: effects are exact fits of this design, without p-values.")
    if not_varied:
        paras.append("Not varied in this run: " + ", ".join(not_varied) + ".")
    if aliased:
        paras.append("Aliased (confounded) in this design, not separable: " + ", ".join(aliased) + ".")
    fig = effects_figure(gap)
    out.append(Section(id="dai-gap",
                       title="Dai et al.: which factors explain the TensorFlow/PyTorch gap",
                       paragraphs=paras,
                       tables=[Table(caption="Factor effects on the TF/PT training-time ratio",
                                 columns=["factor", "levels", "status", "TF/PT ×", "share of gap variation", "p"],
                                 rows=_effect_rows(gap))],
                       figures=[Figure(id="dai-gap-shares",
                                   title="Share of the gap's variation per factor",
                                   svg=fig)]
                if fig else []))

    fw_tables = [Table(caption=f"{arm}: factor effects on its own training-step time (× step time from low to high)",
                       columns=["factor", "levels", "status", "step time ×", "share of variation", "p"],
                       rows=_effect_rows(res)) for arm, res in d.framework_effects.items()]
    out.append(Section(id="dai-frameworks",
                       title="Dai et al.: factor effects on each framework's training time",
                       paragraphs=["The same fit on each framework's log step time: a factor that speeds up one "
                               "framework more than the other moves the gap."],
                       tables=fw_tables))

    rows: list[list[Cell]] = [[r["model"], r["case"], *[str(r[f]) for f in d.factors],
             *[_g(r.get(f"{a}_items_per_s"), ".4g") + ("" if r.get(f"{a}_status") == "ok" else f" ({r.get(f'{a}_status')})")
               for a in arms], _g(r.get("ratio"), ".3f")] for r in d.rows]
    tfig = throughput_figure(d.rows, arms)
    out.append(Section(id="dai-throughput",
                       title="Dai et al.: training throughput per network and design run",
                       paragraphs=["Items per second of the timed training steps (images; tokens for the language model), "
                               "mean over trials. A configuration without a ratio lacks a framework (skipped, "
                               "out of memory or failed; the status says which)."],
                       tables=[Table(caption="Throughput and TF/PT step-time ratio",
                                 columns=[
                    "network", "run", *d.factors, *[f"{a} items/s" for a in arms], "TF/PT"],
                                 rows=rows),
                    Table(caption="Gap per network over the design runs",
                          columns=["network", "geometric mean TF/PT",
                                                                                   "min", "max", "runs"],
                          rows=[[m["model"], _g(m["geomean_ratio"], ".3f"), _g(m["min_ratio"], ".3f"),
                               _g(m["max_ratio"], ".3f"), m["n"]] for m in d.per_model])],
                       figures=[Figure(id="dai-throughput-fig", title="Training throughput", svg=tfig)] if tfig else []))
    out += kernel_sections({"arms": d.arms, "kernels": d.kernels, "gap_effects": d.gap_effects})
    return out
