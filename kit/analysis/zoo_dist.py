"""Patel et al. VI-E: data-parallel speed-up over one device and scaling efficiency (pure).

Per framework and strategy: training throughput (global images per second,
mean over trials), speed-up = throughput on N devices / throughput of the
same framework's ``single`` strategy, and scaling efficiency = speed-up / N.
Weak scaling: every device keeps ``batch_size`` images per step. Skipped
strategies are listed with their reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def scaling(single_ips: list[float], multi_ips: list[float], devices: int) -> dict[str, Any]:
    """Speed-up and efficiency from per-trial throughputs (means), with the spread of the trial ratios."""
    if not single_ips or not multi_ips or devices < 1:
        return {"speedup": None, "efficiency": None}
    s = float(np.mean(multi_ips) / np.mean(single_ips))
    ratios = [m / float(np.mean(single_ips)) for m in multi_ips]
    return {"speedup": s, "efficiency": s / devices, "speedup_min": min(ratios), "speedup_max": max(ratios)}


def analyse(manifest: dict[str, Any], trials: list[dict[str, Any]], values: pd.DataFrame) -> dict[str, Any]:
    arms = list(manifest["plan"]["arms"])
    spec = manifest["spec"]
    wl = {**spec["workload"], **(spec["workload"].get("params") or {})}
    rows = []
    for cid, cfg in manifest["plan"]["configs"].items():
        case = cfg.get("case") or cid
        over = ((spec.get("cases") or {}).get(case) or {}).get("workload") or {}
        m = {**wl, **over, **{k: v for k, v in cfg.items() if k != "case"}}
        for arm in arms:
            ts = [t for t in trials if t["config_id"] == cid and t["arm"] == arm and not t.get("warmup")]
            ok = [t for t in ts if t["status"] == "ok"]
            statuses = sorted({t["status"] for t in ts})
            rows.append({"config_id": cid, "case": case, "arm": arm, "model": m.get("model"),
                         "strategy": m.get("strategy"), "devices": int(ok[0]["results"]["devices"]) if ok else
                         (1 if m.get("strategy") == "single" else int(m.get("devices", 1))),
                         "batch_size": int(m["batch_size"]), "status": "ok" if ok else "/".join(statuses) or "missing",
                         "reason": next((t.get("error") for t in ts if t["status"] != "ok"), None),
                         "ips": [float(t["results"]["train_throughput_ips"]) for t in ok],
                         "device_kind": ok[0]["results"].get("device_kind") if ok else None,
                         "dist_backend": (ok[0].get("env") or {}).get("dist_backend") if ok else None})
    for r in rows:
        r["ips_mean"] = float(np.mean(r["ips"])) if r["ips"] else None
        base = next((b for b in rows if b["arm"] == r["arm"] and b["strategy"] == "single" and b["model"] == r["model"]
                     and b["batch_size"] == r["batch_size"] and b["ips"]), None)
        r.update(scaling(base["ips"] if base else [], r["ips"], r["devices"]) if r["strategy"] != "single"
                 else {"speedup": 1.0 if r["ips"] else None, "efficiency": 1.0 if r["ips"] else None})
    ddp = next((r for r in rows if r["strategy"] == "ddp" and r["speedup"]), None)
    dp = next((r for r in rows if r["strategy"] == "dp" and r["arm"] == "pytorch" and r["speedup"]), None)
    claim = None
    if ddp and dp:
        claim = {"ddp_speedup": ddp["speedup"], "dp_speedup": dp["speedup"], "ddp_better": ddp["speedup"] > dp["speedup"]}
    return {"arms": arms, "rows": rows, "ddp_vs_dp": claim,
            "skipped": [{k: r[k] for k in ("case", "arm", "strategy", "status", "reason")} for r in rows
                        if r["status"] != "ok"]}
