"""Per-(configuration, arm) summaries of sweep studies: the shared analysis library of the model-zoo studies.

Patel et al.'s sweep and Dai et al.'s factorial both summarise each cell of
their grid (one configuration, one framework) the same way; the function lives
here, in the kit's library, and each study's analysis.py imports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kit.records import TrialRecord


def cell_stats(trials: Sequence[TrialRecord]) -> dict[str, Any]:
    """One (configuration, framework) cell: status and timing from its measured trials."""
    measured = [t for t in trials if not t.warmup]
    ok = [t for t in measured if t.status == "ok"]
    statuses = sorted({t.status for t in measured})
    status = "ok" if ok else (statuses[0] if len(statuses) == 1 else "/".join(statuses)) if statuses else "missing"
    cell: dict[str, Any] = {"status": status, "n_ok": len(ok), "n": len(measured),
                            "reason": next((t.error for t in measured if t.status != "ok"), None)}
    if not ok:
        return cell
    r0 = ok[0].results
    bs = int(r0.get("batch_size") or r0.get("global_batch") or 1)
    for phase in ("train", "infer"):
        per_trial = [float(np.mean(t.results[f"{phase}_step_s"])) for t in ok if t.results.get(f"{phase}_step_s")]
        if not per_trial:
            continue
        cell[f"{phase}_step_s"] = float(np.mean(per_trial))
        cell[f"{phase}_trial_means_s"] = per_trial
        cell[f"{phase}_throughput_ips"] = bs / cell[f"{phase}_step_s"]
        cell[f"{phase}_latency_per_image_s"] = cell[f"{phase}_step_s"] / bs
    cell["param_count"] = r0.get("param_count")
    cell["flops_per_example_fwd"] = next((t.results.get("flops_per_example_fwd") for t in ok
                                          if t.results.get("flops_per_example_fwd")), None)
    cell["peak_flops"], cell["peak_source"] = r0.get("peak_flops"), r0.get("peak_source")
    cell["device_name"] = ok[0].env.get("device_name")
    return cell
