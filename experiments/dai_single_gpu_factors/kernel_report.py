"""Report section of the Dai et al. kernel view: top kernels/ops of each framework per network, side by side,
their time by op type and its difference, beside the factorial's effect shares (``extras.dai_factors``)."""

from __future__ import annotations

from typing import TypedDict

from kit.study_api import Cell, Section, Table
from kit.workloads.kernel_profile import OP_TYPES

from .analysis import FactorFit
from .kernels import KernelEntry, OpTypes, TableJson


class KernelExtras(TypedDict, total=False):
    """What the kernel section reads of the study's extras (DaiExtras): the arms, the views and the gap's fit."""

    arms: list[str]
    kernels: list[KernelEntry]
    gap_effects: FactorFit

# Which op types each factor of the design acts on: what to look at in the per-op-type table next to its share.
FACTOR_OPS: dict[str, str] = {
    "cudnn_autotune": "convolution forward/backward (the algorithm cuDNN picks)",
    "layout": "memcpy / transpose / layout conversion (NCHW<->NHWC), convolutions",
    "execution": "elementwise and other (fusion removes launches and framework overhead)",
    "precision": "matmul / GEMM and convolutions (tensor cores), casts (elementwise)",
    "input_pipeline": "memcpy (host-to-device copies), other (the loader)",
}
DOMAIN_TEXT = {
    "gpu": "GPU kernels (self device time per kernel name, CUPTI)",
    "cpu": "CPU ops (self host time per op; on a CPU host these are the computation, not GPU kernels)",
}


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x * 1e3:.3g}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def _top_rows(arms: list[str], tables: dict[str, TableJson], n: int) -> list[list[Cell]]:
    rows = []
    for i in range(n):
        line: list[Cell] = [i + 1]
        for arm in arms:
            tab = tables.get(arm)
            r = tab["rows"][i] if tab is not None and i < len(tab["rows"]) else None
            line += ([r["name"], r["op_type"], _ms(r["self_s"] / tab["steps"]), _pct(r["share"])] if r is not None
                     and tab is not None else ["", "", "", ""])
        if any(c != "" for c in line[1:]):
            rows.append(line)
    return rows


def _type_rows(arms: list[str], by_type: OpTypes) -> list[list[Cell]]:
    def x(v: str | float) -> float:
        assert not isinstance(v, str)  # kernels.compare's numeric columns
        return v

    return [[OP_TYPES.get(str(r["op_type"]), str(r["op_type"])),
             *[c for a in arms for c in (_ms(x(r[f"{a}_s_per_step"])), _pct(x(r[f"{a}_share"])))],
             _ms(x(r["diff_s_per_step"]))] for r in by_type["rows"]]


def _shares(gap: FactorFit) -> tuple[list[list[Cell]], str]:
    rows: list[list[Cell]] = []
    for f in gap.get("factors", []):
        share = f"{s * 100:.1f} %" if f.get("status") == "estimated" and (s := f.get("share")) is not None else \
            f.get("status", "–")
        mult = f"{m:.3f}" if (m := f.get("ratio_multiplier")) is not None else "–"
        rows.append([f["label"], share, mult, FACTOR_OPS.get(f["factor"], "")])
    note = "" if rows else "The factor analysis has no effects in this run (" + str(gap.get("note") or "none") + ")."
    return rows, note


def kernel_sections(d: KernelExtras, top_n: int = 10) -> list[Section]:
    """The kernel-view section (none when the run has no profile configuration)."""
    views = d.get("kernels") or []
    if not views:
        return []
    arms = list(d.get("arms") or [])
    domains = sorted({dom for v in views if (dom := v.get("domain"))})
    steps = sorted({t["steps"] for v in views for a in v["arms"].values() if (t := a.get("table"))})
    paras = [
        "Which kernels differ between the frameworks (Dai et al. explain the gap by them). ONE configuration per "
        "network, each framework's defaults (native cuDNN autotuning and data layout, default execution: PyTorch "
        "eager, Keras tf.function; fp32; inputs resident), is profiled in SEPARATE trials (the kernels case): the "
        "same training step as the timed trials under torch.profiler / tf.profiler.experimental, "
        f"{'/'.join(map(str, steps)) or '?'} step(s) after the warm-up. No timed trial is profiled (profiling "
        "perturbs timing), and these times are not the timed trials' and enter no test; they show where each "
        "framework's step spends its time, not how long it takes. One profile of a few steps is one sample: "
        "on a busy host a single preempted call can dominate a row (profile trials have no timed phase, so the "
        "kit's disturbance check does not re-run them).",
        "Time domain: " + "; ".join(DOMAIN_TEXT.get(str(x), str(x)) for x in domains) + ". Names are matched by "
        "operation type (kit.workloads.kernel_profile.op_type: a fixed table of name patterns, tested on both "
        "profilers' names); the difference column is "
        f"{arms[0]} − {arms[-1]} in ms per step (positive: {arms[0]} spends more, as a TF/PT ratio above 1 says "
        "of the whole step).",
    ]
    if "cpu" in domains:
        paras.append("On a CPU host the tables are CPU ops (oneDNN/Eigen kernels and framework overhead), not GPU "
                     "kernels: cuDNN autotuning does not exist there, and CPU ops say nothing of a GPU's kernels.")
    rows, note = _shares(d.get("gap_effects") or FactorFit())
    tables: list[Table] = [Table(caption="Beside the factorial: each factor's share of the gap's variation and the op "
                                         "types it acts on",
                                 columns=["factor", "share of gap variation", "TF/PT ×", "op types to look at"],
                                 rows=rows)] if rows else []
    if note:
        paras.append(note)
    for v in views:
        model = v.get("model")
        tabs = {a: x["table"] for a, x in v["arms"].items() if x.get("table")}
        for p in v.get("problems") or []:
            paras.append(f"{model}: {p}")
        if tabs:
            tables.append(Table(caption=f"{model}: top {top_n} by self time ({v.get('domain')}; ms per step, share "
                                      "of the framework's profiled total)",
                                columns=["#", *[c for a in arms for c in (f"{a} name", "type", "ms/step", "share")]],
                                rows=_top_rows(arms, tabs, top_n)))
        if v.get("by_type"):
            tot = v["by_type"]["totals_s_per_step"]
            tables.append(Table(caption=f"{model}: time by op type (ms per step; profiled totals "
                                      + ", ".join(f"{a} {_ms(tot[a])} ms" for a in arms) + ")",
                                columns=["op type", *[c for a in arms for c in (f"{a} ms/step", f"{a} share")],
                                       f"{arms[0]} − {arms[-1]} ms/step"],
                                rows=_type_rows(arms, v["by_type"])))
    return [Section(id="dai-kernels",
                    title="Dai et al.: which kernels differ (one profiled configuration per network)",
                    paragraphs=paras,
                    tables=tables)]
