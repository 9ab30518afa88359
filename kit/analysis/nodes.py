"""Runs that span several machines: per-node results, a node-effect test, heterogeneity.

A cluster run executes whole blocks on one node, so the paired difference of a
block (arm A minus arm B) is measured on a single machine; a node effect is a
difference of those paired differences between nodes (Kruskal–Wallis over
nodes). Node hardware comes from ``nodes/<host>.json`` (written by each job).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from scipy import stats as sps

from kit.analysis.threats import Ctx, Threat, rule
from kit.manifest import Manifest
from kit.records import TrialRecord

PROVENANCE_KEYS = ("cpu_model", "os", "kernel", "memory_total_bytes")


def _node_signature(p: Mapping[str, Any]) -> dict[str, Any]:
    sig = {k: p.get(k) for k in PROVENANCE_KEYS}
    gpus = p.get("gpus") or []
    sig["gpus"] = sorted(f"{g.get('name')} (driver {g.get('driver_version')})" for g in gpus)
    return sig


def node_analysis(manifest: Manifest, trials: Sequence[TrialRecord], use: pd.DataFrame,
                  arms: list[str]) -> dict[str, Any]:
    """Per-node trial counts and, with several nodes, a node-effect test per hypothesis."""
    host_of = {t.trial_id: "?" if t.host is None else t.host for t in trials}
    hosts = sorted(set(host_of.values()))
    provenance = manifest.nodes
    out: dict[str, Any] = {
        "hosts": [{"host": h, "trials": sum(1 for v in host_of.values() if v == h),
                   "provenance": _node_signature(provenance[h]) if h in provenance else None} for h in hosts],
        "effects": [],
    }
    if len(hosts) < 2 or len(arms) < 2 or use.empty:
        return out
    a, b = arms[0], arms[1]
    u = use.assign(host=use["trial_id"].map(host_of))
    from kit.analysis.metrics import AVERAGED_POWER_METRIC, preferred_power_metric

    power = preferred_power_metric(use)  # as the hypotheses: energy-counter phase power where it exists
    for h in manifest.hypotheses:
        metric = power if h["metric"] == AVERAGED_POWER_METRIC else h["metric"]
        for phase in h["phases"]:
            for cid, g in u[(u["metric"] == metric) & (u["phase"] == phase)].groupby("config_id"):
                wide = g.pivot_table(index=["block", "host"], columns="arm", values="value", aggfunc="first")
                if a not in wide or b not in wide:
                    continue
                diff = (wide[a] - wide[b]).dropna().reset_index()
                groups = [grp[0].to_numpy(float) for _, grp in diff.groupby("host")]
                groups = [x for x in groups if len(x) >= 2]
                if len(groups) < 2:
                    continue
                res = sps.kruskal(*groups)
                out["effects"].append({"id": h["id"], "metric": metric, "phase": phase, "config_id": cid,
                                       "method": "Kruskal-Wallis on per-block differences by node",
                                       "statistic": float(res.statistic), "p": float(res.pvalue),
                                       "nodes": len(groups), "n": int(sum(len(x) for x in groups))})
    return out


@rule
def heterogeneous_nodes(c: Ctx) -> list[Threat]:
    nodes = c.analysis.get("nodes") or {}
    hosts = nodes.get("hosts", [])
    if len(hosts) < 2:
        return []
    out: list[Threat] = []
    sigs = {h["host"]: h["provenance"] for h in hosts if h["provenance"] is not None}
    distinct = {repr(s) for s in sigs.values()}
    if len(distinct) > 1:
        diffs = sorted({k for s in sigs.values() for k, v in s.items() if any(o.get(k) != v for o in sigs.values())})
        out.append(Threat("nodes", "internal", "medium", "Heterogeneous nodes",
                          f"{len(hosts)} nodes differ in {', '.join(diffs)}",
                          "blocks never span nodes (node is a blocking factor); compare per node, or constrain "
                          "the partition to one hardware model (sbatch --constraint)",
                          numbers={"hosts": [h["host"] for h in hosts]}))
    alpha = c.manifest.alpha
    for e in nodes.get("effects", []):
        if e["p"] < alpha:
            out.append(Threat("node_effect", "conclusion", "medium", f"Node effect on {e['metric']} ({e['phase']})",
                              f"{e['method']}: H={e['statistic']:.3g}, p={e['p']:.3g} over {e['nodes']} nodes",
                              "report per node; the pooled paired test mixes machines", numbers=e))
    if not out:
        out.append(Threat("nodes", "internal", "info", "Several nodes",
                          f"{len(hosts)} nodes with the same hardware provenance; no node effect at α={alpha}",
                          "whole blocks per node", status="mitigated"))
    return out
