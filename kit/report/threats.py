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

Reads the typed :class:`kit.analysis_record.Analysis` (its :class:`kit.analysis_rows.ThreatRow` rows); a ranked
row is a :class:`RankedThreat`, the shape the HTML and LaTeX templates lay out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypedDict

from kit.analysis_record import Analysis
from kit.analysis_rows import ThreatRow, number_of, table_of
from kit.records import JsonTable

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2, "info": 3}
HIGH, MEDIUM = 0.25, 0.05
LONG = 240  # evidence longer than this shows its first sentence and the rest on request


class RankedThreat(TypedDict):
    """One row of the threats table: a rule's finding (or the merge of one fact's findings) with its estimated
    effect on this run's result. The templates read these keys."""

    rule: str
    rules: list[str]  # every rule the row stands for
    category: str
    severity: str  # derived from ``effect`` where there is one, else the rule's
    title: str
    evidence: str
    mitigation: str
    status: str  # threat | mitigated
    numbers: JsonTable
    merged: int  # how many of the rules' rows this one stands for
    effect: float | None  # a relative change of the compared times (1.0 = 2×); None where unknown
    effect_text: str | None
    folded: bool  # said by the profile banner instead of a row
    summary: str  # the evidence, cut for a narrow column
    detail: str | None  # the rest of the evidence, shown on request


def _severity_of(effect: float) -> str:
    return "high" if effect >= HIGH else "medium" if effect >= MEDIUM else "low"


def _row(r: ThreatRow) -> RankedThreat:
    return {"rule": r.rule, "rules": [r.rule], "category": r.category, "severity": r.severity, "title": r.title,
            "evidence": r.evidence, "mitigation": r.mitigation, "status": r.status, "numbers": dict(r.numbers),
            "merged": 1, "effect": None, "effect_text": None, "folded": False, "summary": r.evidence,
            "detail": None}


def _merge(rows: Sequence[ThreatRow], title: str, evidence: str, mitigation: str, severity: str,
           category: str) -> RankedThreat:
    return {"rule": rows[0].rule, "rules": sorted({r.rule for r in rows}), "category": category,
            "severity": severity, "title": title, "evidence": evidence, "mitigation": mitigation,
            "status": "threat", "numbers": {}, "merged": len(rows), "effect": None, "effect_text": None,
            "folded": False, "summary": evidence, "detail": None}


def _worst(rows: Sequence[ThreatRow]) -> str:
    return min((r.severity for r in rows), key=lambda s: SEVERITY_RANK.get(s, 9))


def _sensors(rows: Sequence[ThreatRow]) -> RankedThreat:
    """"Not measured: X" (one per hypothesis metric), "Sensors unavailable", "No temperature control": one fact."""
    missing = [r.title.split(": ", 1)[1] for r in rows if r.rule == "sensor" and ": " in r.title]
    probes = [r for r in rows if r.title == "Sensors unavailable"]
    no_temp = [r for r in rows if r.title == "No temperature control"]
    bits = []
    if missing:
        bits.append(f"not measured here: {', '.join(missing)} (their hypotheses are not tested)")
    if no_temp:
        n = no_temp[0].numbers.get("trials_without_sensor")
        bits.append(f"no temperature sensor to cool down against{f' ({n} trials)' if n else ''}: starting "
                    "temperatures are neither controlled nor compared")
    if probes:
        bits.append(f"unavailable collectors: {probes[0].evidence}")
    row = _merge(rows, "Sensors missing on this host", "; ".join(bits),
                 "run on a host that exposes them (see `kit doctor`): hwmon for temperatures, NVML for the GPU, "
                 "RAPL for energy", "medium" if missing else _worst(rows), "construct")
    row["effect_text"] = "no effect on the compared times; the hypotheses on these metrics are not testable here"
    return row


def _high_cv(rows: Sequence[ThreatRow]) -> RankedThreat:
    nums = [r.numbers for r in rows]
    cvs = sorted(((float(cv), f"{n.get('arm')} {n.get('phase')}") for n in nums
                  if (cv := number_of(n.get("cv"))) is not None), reverse=True)
    ns = {n.get("n") for n in nums if n.get("n")}
    evidence = ("coefficient of variation " + ", ".join(f"{cv:.1%} {what}" for cv, what in cvs)
                + (f" over {ns.pop()} trials each" if len(ns) == 1 else "") + " (> 5 %)")
    row = _merge(rows, "Unstable timing", evidence, rows[0].mitigation, _worst(rows), rows[0].category)
    if cvs:
        row["effect"] = cvs[0][0]
        row["effect_text"] = f"trial-to-trial spread up to {cvs[0][0]:.1%} of the median"
    return row


def _estimate(t: RankedThreat, analysis: Analysis) -> None:
    """``effect`` (a relative change of the compared times, 1.0 = 2×) and its text, where the run shows one."""
    nums = t["numbers"]
    rule = t["rule"]
    if t["effect"] is not None or t["status"] == "mitigated":
        return
    ratio = number_of(nums.get("effect_ratio_median"))
    if rule == "disturbed" and ratio is not None:
        r = float(ratio)
        t["effect"], t["effect_text"] = abs(r - 1), f"the disturbed trials took {r:.2g}× the quiet ones' time"
    elif rule == "foreign_cpu" and t["severity"] != "info":
        load, cores = number_of(nums.get("load1_median")), number_of(nums.get("cpu_logical"))
        util = number_of(nums.get("cpu_util_mean_pct"))
        pinned, pinned_n = number_of(nums.get("foreign_cpu_on_cpus")), number_of(nums.get("on_cpus_count"))
        if pinned is not None and pinned_n:  # a pinned run: the load on its own CPUs (kit.run.host.baseline_load)
            slow = max(1.0, (float(pinned) + float(pinned_n)) / float(pinned_n))
        elif load is not None and cores:
            slow = max(1.0, (float(load) + 1) / float(cores))
        elif util is not None:
            slow = 1 + float(util) / 100
        else:
            return
        t["effect"] = slow - 1
        t["effect_text"] = (f"a trial sharing the CPUs with this load gets about 1/{slow:.1f} of them: up to "
                            f"{slow:.1f}× slower while it lasts")
    elif rule == "small_n":
        mdes = [float(m) for h in analysis.hypotheses if h.tested
                if (m := number_of(table_of(h.detectable).get("mde"))) is not None]
        if mdes:
            t["effect"] = max(mdes)
            t["effect_text"] = f"differences under {max(mdes):.1%} could go unseen"
    elif rule == "drift":
        moved = re.search(r"by ([+-]?\d+(?:\.\d+)?)%", t["evidence"] or "")
        if moved:
            t["effect"] = abs(float(moved.group(1))) / 100
            t["effect_text"] = f"the median moves {moved.group(1)} % over the run"
    elif rule == "gpu_clocks":
        lo, hi = number_of(nums.get("sm_clock_min_mhz")), number_of(nums.get("sm_clock_max_mhz"))
        med = number_of(nums.get("sm_clock_median_mhz"))
        if lo is not None and hi is not None and med:
            t["effect"] = (float(hi) - float(lo)) / float(med)
            t["effect_text"] = f"SM clock varied by {t['effect']:.0%} of its median"


def ranked(analysis: Analysis) -> list[RankedThreat]:
    """The threats of ``analysis.validity``, one row per fact, ranked (see the module docstring). Each row:
    the rule's fields plus ``effect`` (None where unknown), ``effect_text``, ``folded`` (said by the banner
    instead), ``summary`` and ``detail`` (the evidence split for a narrow column)."""
    rows = analysis.validity
    reduced = (analysis.profile or "paper") != "paper"
    sensors = [r for r in rows if r.rule in ("sensor", "sensors")]
    cvs = [r for r in rows if r.rule == "high_cv"]
    out: list[RankedThreat] = []
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        if r.rule in ("sensor", "sensors"):
            if r is sensors[0]:
                out.append(_sensors(sensors))
            continue
        if r.rule == "high_cv":
            if r is cvs[0]:
                out.append(_high_cv(cvs))
            continue
        key = (r.rule, r.title, r.evidence)
        if key in seen:
            continue
        seen.add(key)
        out.append(_row(r))
    for t in out:
        _estimate(t, analysis)
        if t["effect"] is not None and t["status"] != "mitigated":
            t["severity"] = _severity_of(float(t["effect"]))
        t["folded"] = reduced and t["rule"] in ("profile", "small_n")
        ev = str(t["evidence"] or "")
        cut = ev.find("; ", 0, LONG) if len(ev) > LONG else -1
        if len(ev) > LONG:
            cut = cut if cut > 40 else ev.rfind(" ", 0, LONG - 20)
            t["summary"], t["detail"] = ev[:cut].rstrip(" ;,") + " …", ev[cut:].lstrip(" ;")
        else:
            t["summary"], t["detail"] = ev, None
    out.sort(key=lambda t: (t["status"] == "mitigated", SEVERITY_RANK.get(t["severity"], 9),
                            -(float(t["effect"]) if t["effect"] is not None else -1.0)))
    return out


def shown(analysis: Analysis) -> list[RankedThreat]:
    """The rows the threats table shows: :func:`ranked` less those the profile banner carries."""
    return [t for t in ranked(analysis) if not t["folded"]]


def effect_label(t: RankedThreat) -> str:
    """The effect column's text: the estimate or "not estimated"."""
    if t["effect_text"]:
        return str(t["effect_text"])
    return "mitigated" if t["status"] == "mitigated" else "not estimated from this run"
