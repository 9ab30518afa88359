"""Report sections of the data-parallel study (``analysis["extras"]["zoo_distributed"]`` in)."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt

from kit.fmt import fmt_num
from kit.report.figures import arm_color, to_svg


def _g(x: Any, fmt: str = ".3g", scale: float = 1.0) -> str:
    """The kit's number formatter with this report's default layout (three significant digits)."""
    return fmt_num(x, fmt=fmt, scale=scale)


STRATEGY = {"single": "one device", "dp": "DataParallel / MirroredStrategy", "ddp": "DistributedDataParallel"}


def speedup_figure(rows: list[dict[str, Any]]) -> str | None:
    """Speed-up over one device per framework and strategy; the ideal (linear) speed-up as a line."""
    rs = [r for r in rows if r["strategy"] != "single"]
    if not any(r.get("speedup") for r in rs):
        return None
    fig, ax = plt.subplots(figsize=(5.6, 3.0))
    for i, r in enumerate(rs):
        label = f"{r['arm']}\n{r['strategy']} ×{r['devices']}"
        if r.get("speedup"):
            ax.bar(i, r["speedup"], 0.6, color=arm_color(r["arm"], i),
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


def sections(manifest: dict[str, Any], analysis: dict[str, Any]) -> list[dict[str, Any]]:
    d = analysis.get("extras", {}).get("zoo_distributed")
    if not d:
        return []
    rows = [[r["case"], r["arm"], STRATEGY.get(r["strategy"], r["strategy"]), r["devices"], r.get("device_kind") or "–",
             r.get("dist_backend") or "–", r["batch_size"], r["status"], _g(r.get("ips_mean"), ".4g"),
             _g(r.get("speedup"), ".2f"), _g(r.get("efficiency"), ".2f")] for r in d["rows"]]
    claim = d.get("ddp_vs_dp")
    paras = ["Weak scaling: each device trains on batch_size images per step; throughput is global images per "
             "second over the timed steps (mean over trials); speed-up is over the same framework on one device, "
             "scaling efficiency = speed-up ÷ devices (1 = linear). DataParallel is one process replicating the "
             "model over CUDA devices; DistributedDataParallel runs one process per device (torchrun; NCCL on GPUs, "
             "gloo on CPUs); TensorFlow's MirroredStrategy is one process with a replica per device (logical CPU "
             "devices on a CPU host). On a CPU host one device is one core."]
    scaling = d.get("ddp_scaling")
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
    out = [{"id": "zoo-dist", "title": "Distributed training: DataParallel vs DistributedDataParallel vs "
            "MirroredStrategy (Section VI-E)", "paragraphs": paras,
            "tables": [{"caption": "Throughput, speed-up and scaling efficiency", "columns": [
                "case", "framework", "strategy", "devices", "device", "collective", "batch/device", "status",
                "images/s", "speed-up", "efficiency"], "rows": rows}],
            "figures": [f for f in ({"id": "zoo-dist-speedup", "title": "Speed-up over one device (dashed: linear)",
                                     "svg": speedup_figure(d["rows"])},) if f["svg"]]}]
    if d["skipped"]:
        out.append({"id": "zoo-dist-skipped", "title": "Distributed training: strategies not run here",
                    "tables": [{"caption": "Skipped or failed, with the reason", "columns": [
                        "case", "framework", "strategy", "status", "reason"],
                        "rows": [[s["case"], s["arm"], s["strategy"], s["status"], s["reason"]] for s in d["skipped"]]}]})
    return out
