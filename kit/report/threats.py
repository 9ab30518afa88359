"""The threats table a reader sees: one row per fact, ranked by what it could do to this run's result.

The validity rules (kit.analysis.validity and friends) each report what they see, so one fact can come
back several times (a host without sensors: "Not measured: CPU temperature", "Not measured: GPU
temperature", "Sensors unavailable", "No temperature control"), and their severities are fixed per
rule (a 2× slowdown from load and a 5.5 % CV were both "medium"). analysis.json keeps every rule's
row as it was found; this module merges the rows of one fact and, where the run's own numbers give
one, estimates the effect on the result (a relative change of the compared times) and derives the
severity from it: >= 25 % high, >= 5 % medium, below low. Rows without an estimate keep the rule's
severity. Order: open threats before mitigated ones, severity, then the estimated effect.

The reduced profile's row and its consequence (a small n) are not rows here: the profile banner says
them (``folded``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}
HIGH, MEDIUM = 0.25, 0.05
LONG = 240  # evidence longer than this shows its first sentence and the rest on request


def _severity_of(effect: float) -> str:
    return "high" if effect >= HIGH else "medium" if effect >= MEDIUM else "low"


def _merge(rows: Sequence[Mapping[str, Any]], title: str, evidence: str, mitigation: str, severity: str,
           category: str) -> dict[str, Any]:
    return {"rule": rows[0]["rule"], "rules": sorted({r["rule"] for r in rows}), "category": category,
            "severity": severity, "title": title, "evidence": evidence, "mitigation": mitigation,
            "status": "threat", "numbers": {}, "merged": len(rows)}


def _worst(rows: Sequence[Mapping[str, Any]]) -> str:
    return min((r["severity"] for r in rows), key=lambda s: SEVERITY_RANK.get(s, 9))


def _sensors(rows: Sequence[Mapping[str, Any]], analysis: Mapping[str, Any]) -> dict[str, Any]:
    """"Not measured: X" (one per hypothesis metric), "Sensors unavailable", "No temperature control": one fact."""
    missing = [r["title"].split(": ", 1)[1] for r in rows if r["rule"] == "sensor" and ": " in r["title"]]
    probes = [r for r in rows if r["title"] == "Sensors unavailable"]
    no_temp = [r for r in rows if r["title"] == "No temperature control"]
    bits = []
    if missing:
        bits.append(f"not measured here: {', '.join(missing)} (their hypotheses are not tested)")
    if no_temp:
        n = (no_temp[0].get("numbers") or {}).get("trials_without_sensor")
        bits.append(f"no temperature sensor to cool down against{f' ({n} trials)' if n else ''}: starting "
                    "temperatures are neither controlled nor compared")
    if probes:
        bits.append(f"unavailable collectors: {probes[0]['evidence']}")
    row = _merge(rows, "Sensors missing on this host", "; ".join(bits),
                 "run on a host that exposes them (see `kit doctor`): hwmon for temperatures, NVML for the GPU, "
                 "RAPL for energy", "medium" if missing else _worst(rows), "construct")
    row["effect_text"] = "no effect on the compared times; the hypotheses on these metrics are not testable here"
    return row


def _high_cv(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    nums = [r.get("numbers") or {} for r in rows]
    cvs = sorted(((float(n["cv"]), f"{n.get('arm')} {n.get('phase')}") for n in nums if n.get("cv") is not None),
                 reverse=True)
    ns = {n.get("n") for n in nums if n.get("n")}
    evidence = ("coefficient of variation " + ", ".join(f"{cv:.1%} {what}" for cv, what in cvs)
                + (f" over {ns.pop()} trials each" if len(ns) == 1 else "") + " (> 5 %)")
    row = _merge(rows, "Unstable timing", evidence, rows[0]["mitigation"], _worst(rows), rows[0]["category"])
    if cvs:
        row["effect"] = cvs[0][0]
        row["effect_text"] = f"trial-to-trial spread up to {cvs[0][0]:.1%} of the median"
    return row


def _estimate(t: dict[str, Any], analysis: Mapping[str, Any]) -> None:
    """``effect`` (a relative change of the compared times, 1.0 = 2×) and its text, where the run shows one."""
    nums = t.get("numbers") or {}
    rule = t["rule"]
    if t.get("effect") is not None or t.get("status") == "mitigated":
        return
    if rule == "disturbed" and isinstance(nums.get("effect_ratio_median"), int | float):
        r = float(nums["effect_ratio_median"])
        t["effect"], t["effect_text"] = abs(r - 1), f"the disturbed trials took {r:.2g}× the quiet ones' time"
    elif rule == "foreign_cpu" and t["severity"] != "info":
        load, cores, util = nums.get("load1_median"), nums.get("cpu_logical"), nums.get("cpu_util_mean_pct")
        if isinstance(load, int | float) and isinstance(cores, int | float) and cores:
            slow = max(1.0, (float(load) + 1) / float(cores))
        elif isinstance(util, int | float):
            slow = 1 + float(util) / 100
        else:
            return
        t["effect"] = slow - 1
        t["effect_text"] = (f"a trial sharing the CPUs with this load gets about 1/{slow:.1f} of them: up to "
                            f"{slow:.1f}× slower while it lasts")
    elif rule == "small_n":
        mdes: list[float] = [float(m) for h in analysis.get("hypotheses") or [] if h.get("tested")
                             if isinstance(m := (h.get("detectable") or {}).get("mde"), int | float)]
        if mdes:
            t["effect"] = max(mdes)
            t["effect_text"] = f"differences under {max(mdes):.1%} could go unseen"
    elif rule == "drift":
        m = re.search(r"by ([+-]?\d+(?:\.\d+)?)%", t.get("evidence") or "")
        if m:
            t["effect"] = abs(float(m.group(1))) / 100
            t["effect_text"] = f"the median moves {m.group(1)} % over the run"
    elif rule == "gpu_clocks":
        lo, hi, med = nums.get("sm_clock_min_mhz"), nums.get("sm_clock_max_mhz"), nums.get("sm_clock_median_mhz")
        if isinstance(lo, int | float) and isinstance(hi, int | float) and isinstance(med, int | float) and med:
            t["effect"] = (float(hi) - float(lo)) / float(med)
            t["effect_text"] = f"SM clock varied by {t['effect']:.0%} of its median"


def ranked(analysis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The threats of ``analysis["validity"]``, one row per fact, ranked (see the module docstring). Each row:
    the rule's fields plus ``effect`` (None where unknown), ``effect_text``, ``folded`` (said by the banner
    instead), ``summary`` and ``detail`` (the evidence split for a narrow column)."""
    rows = [dict(r) for r in analysis.get("validity") or []]
    reduced = (analysis.get("profile") or "paper") != "paper"
    sensors = [r for r in rows if r["rule"] in ("sensor", "sensors")]
    cvs = [r for r in rows if r["rule"] == "high_cv"]
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        if r["rule"] in ("sensor", "sensors"):
            if sensors and r is sensors[0]:
                out.append(_sensors(sensors, analysis))
            continue
        if r["rule"] == "high_cv":
            if r is cvs[0]:
                out.append(_high_cv(cvs))
            continue
        key = (r["rule"], r["title"], r["evidence"])
        if key in seen:
            continue
        seen.add(key)
        r.setdefault("rules", [r["rule"]])
        out.append(r)
    for t in out:
        t.setdefault("effect", None)
        t.setdefault("effect_text", None)
        _estimate(t, analysis)
        if t["effect"] is not None and t.get("status") != "mitigated":
            t["severity"] = _severity_of(float(t["effect"]))
        t["folded"] = reduced and t["rule"] in ("profile", "small_n")
        ev = str(t.get("evidence") or "")
        cut = ev.find("; ", 0, LONG) if len(ev) > LONG else -1
        if len(ev) > LONG:
            cut = cut if cut > 40 else ev.rfind(" ", 0, LONG - 20)
            t["summary"], t["detail"] = ev[:cut].rstrip(" ;,") + " …", ev[cut:].lstrip(" ;")
        else:
            t["summary"], t["detail"] = ev, None
    out.sort(key=lambda t: (t.get("status") == "mitigated", SEVERITY_RANK.get(t["severity"], 9),
                            -(float(t["effect"]) if t["effect"] is not None else -1.0)))
    return out


def shown(analysis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows the threats table shows: :func:`ranked` less those the profile banner carries."""
    return [t for t in ranked(analysis) if not t["folded"]]


def effect_label(t: Mapping[str, Any]) -> str:
    """The effect column's text: the estimate or "not estimated"."""
    if t.get("effect_text"):
        return str(t["effect_text"])
    return "mitigated" if t.get("status") == "mitigated" else "not estimated from this run"

