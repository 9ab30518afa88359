"""The answer first: one sentence per decided comparison, in the words a reader uses.

hyperfine ends with "A ran 1.28 ± 0.05 times faster than B"; a report that says "ratio of medians
tensorflow/pytorch = 0.78" leaves the reader to invert 0.78. Here every decided comparison names the
faster (or larger) side with a factor r >= 1 and its interval, then what it was decided on:
"TensorFlow was 1.28× faster than PyTorch in training [95 % CI 1.21–1.35], decided (n = 12 pairs,
quick profile, CPU)". Metrics on an interval scale (temperatures, accuracy) are stated as a
difference, not a ratio. The warnings that qualify the sentences (a busy host, a reduced profile)
follow them, and everything this host could not test is one line with its reasons grouped.

Pure functions over the typed analysis (:class:`kit.analysis_record.Analysis`, its
:class:`kit.analysis_rows.HypothesisResult` rows) and over a ``kit compare`` result
(:class:`kit.compare_records.Comparison`): the report's HTML and LaTeX and the command line's summary all print
these same sentences. What they return is a :class:`typing.TypedDict`: the shape the templates lay out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from kit.analysis_record import Analysis
from kit.analysis_rows import HypothesisResult, number_of, table_of
from kit.fmt import fmt_bytes
from kit.metric_catalog import METRICS
from kit.records import JsonTable

if TYPE_CHECKING:  # the comparison's records are a tool's (a higher layer): read here, never imported at run time
    from kit.compare_records import CompareRow, Comparison
    from kit.report.threats import RankedThreat

NAMES = {"tensorflow": "TensorFlow", "pytorch": "PyTorch", "jax": "JAX", "keras": "Keras", "mxnet": "MXNet",
         "onnxruntime": "ONNX Runtime"}
PHASE_IN = {"train": "in training", "infer": "in inference"}
# metric -> what "X used r× more ..." says (ratio metrics that are neither a time nor a throughput)
NOUN = {"trial_cpu_util_pct": "CPU", "cpu_util_pct": "host CPU (all processes)", "gpu_util_pct": "GPU time",
        "trial_rss_bytes": "memory (peak resident)", "trial_rss_mean_bytes": "memory (mean resident)",
        "host_mem_used_bytes": "host memory (peak)", "gpu_mem_used_bytes": "GPU memory (peak)"}
TIME_METRICS = ("time_s", "step_time_s", "latency_ms")
INTERVAL_UNITS = ("°C", "fraction")  # stated as a difference: a ratio of Celsius degrees means nothing


def name(arm: str) -> str:
    """An arm as a reader writes it: tensorflow -> TensorFlow; anything else (pytorch@2.6) unchanged."""
    return NAMES.get(arm, arm)


def times(r: float) -> str:
    """A factor >= 1: 1.28×, 12.3×, 1.003× (three significant digits, at least two decimals below 10)."""
    return f"{r:.2f}×" if r < 10 else f"{r:.3g}×"


def _ci(low: float | None, high: float | None, fmt: str = "{:.2f}") -> str:
    if low is None or high is None:
        return ""
    return f" [95 % CI {fmt.format(low)}–{fmt.format(high)}]"


def _device(analysis: Analysis) -> str:
    devs = analysis.devices
    names: list[str] = []
    arms = devs.get("arms")
    for a in arms if isinstance(arms, list) else []:
        for n in table_of(table_of(a).get("names")):
            if n not in names:
                names.append(n)
    if not names:
        kinds = devs.get("kinds")
        names = [str(k) for k in kinds] if isinstance(kinds, list) else []
    return ", ".join("CPU" if n.lower() == "cpu" else n for n in names) or "device not recorded"


def _profile(analysis: Analysis) -> str:
    return f"{analysis.profile or 'paper'} profile"


def _where(h: HypothesisResult) -> str:
    where = PHASE_IN.get(h.phase, f"in {h.phase}")
    return where + (f" ({h.config_label})" if h.config_label else "")


def _basis(h: HypothesisResult, analysis: Analysis) -> str:
    unit = "networks" if h.test_unit == "configuration" else "pairs"
    n = h.n_networks if unit == "networks" and h.n_networks else h.n_pairs
    return f"n = {n} {unit}, {_profile(analysis)}, {_device(analysis)}"


def _ratio_phrase(metric: str, big: str, small: str, r: float, lo: float | None, hi: float | None,
                  where: str) -> str:
    """``big``'s value is r× ``small``'s (r >= 1), in the words that fit the metric."""
    m = METRICS.get(metric)
    ci = _ci(lo, hi)
    if metric in TIME_METRICS or (m is not None and m.kind == "result" and m.unit in ("s", "ms")):
        return f"{name(small)} was {times(r)} faster than {name(big)} {where}{ci}"
    if metric == "throughput_ips":
        return f"{name(big)} was {times(r)} faster than {name(small)} {where} (throughput){ci}"
    if m is not None and (m.kind in ("energy", "phase_power") or m.unit in ("%", "B", "W", "J")):
        noun = NOUN.get(metric) or (m.label.split(" (")[0])
        return f"{name(big)} used {times(r)} more {noun} than {name(small)} {where}{ci}"
    label = m.label if m else metric
    return f"{label} was {times(r)} higher with {name(big)} than with {name(small)} {where}{ci}"


def _difference_phrase(metric: str, a: str, b: str, shift: JsonTable, where: str) -> str | None:
    """a − b (Hodges–Lehmann) as "X's ... was d higher than Y's"; None without a shift."""
    est = number_of(shift.get("estimate"))
    if est is None:
        return None
    lo, hi = number_of(shift.get("low")), number_of(shift.get("high"))
    if est < 0:
        a, b, est = b, a, -est
        lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
    m = METRICS.get(metric)
    if m is not None and m.unit == "fraction":
        return (f"{name(a)}'s {m.label} was {est * 100:.2f} percentage points higher than {name(b)}'s {where}"
                + _ci(None if lo is None else lo * 100, None if hi is None else hi * 100, "{:.2f}"))
    unit = f" {m.unit}" if m is not None else ""
    label = m.label if m is not None else metric
    return (f"{label} was {est:.3g}{unit} higher with {name(a)} than with {name(b)} {where}"
            + _ci(lo, hi, "{:.3g}"))


def _ratio(h: HypothesisResult) -> JsonTable:
    """The tested ratio a/b of ``h`` (estimate, low, high), {} where the test gave none."""
    return table_of(table_of(h.comparison).get("ratio"))


def _effect_of(h: HypothesisResult) -> str | None:
    """The decided direction and size of ``h``: "TensorFlow was 1.28× faster than PyTorch in training [...]"."""
    a, b = h.arm_a, h.arm_b
    metric = h.tested_metric
    m = METRICS.get(metric)
    where = _where(h)
    if m is not None and m.unit in INTERVAL_UNITS:
        return _difference_phrase(metric, a, b, table_of(table_of(h.comparison).get("shift")), where)
    ratio = _ratio(h)
    est = number_of(ratio.get("estimate"))
    if est is None or est <= 0:
        return None
    lo, hi = number_of(ratio.get("low")), number_of(ratio.get("high"))
    if est >= 1:
        return _ratio_phrase(metric, a, b, est, lo, hi, where)
    return _ratio_phrase(metric, b, a, 1 / est, None if hi is None else 1 / hi, None if lo is None else 1 / lo,
                         where)


def _subject(h: HypothesisResult) -> str:
    m = METRICS.get(h.tested_metric)
    return (m.label if m else h.metric).split(" (")[0]


def load_clause(h: HypothesisResult) -> tuple[str, str]:
    """What a hypothesis's verdict was decided on, and under what load, from its ``load`` (kit.analysis.analyze:
    set where a trial behind it stayed disturbed): ("on the 18 undisturbed of 24 trials", "") when the disturbed
    blocks were set aside, ("", ", measured under load: 24 of 24 trials disturbed, about 1.5 foreign CPUs; a quiet
    host may differ") when too few undisturbed were left; ("", "") for a quiet row. The sentence a user copies
    carries its conditions (issue 39)."""
    load = h.load
    if load is None or not load.get("disturbed"):
        return "", ""
    n, k = load.get("trials"), load.get("disturbed")
    if load.get("decided_on") == "undisturbed":
        return f"on the {load.get('trials_used')} undisturbed of {n} trials", ""
    cpus = number_of(load.get("foreign_cpus"))
    size = f", about {cpus:.2g} foreign CPU{'' if f'{cpus:.2g}' == '1' else 's'}" if cpus is not None else ""
    return "", f", measured under load: {k} of {n} trials disturbed{size}; a quiet host may differ"


def sentence(h: HypothesisResult, analysis: Analysis) -> str | None:
    """One tested hypothesis in a sentence; None for one that was not tested (see :func:`untestable_line`).
    Where trials behind it stayed disturbed it says so (:func:`load_clause`)."""
    if not h.tested:
        return None
    basis = _basis(h, analysis)
    on, under = load_clause(h)
    decided = f"decided {on}" if on else "decided"
    a, b = name(h.arm_a), name(h.arm_b)
    if h.rejected:
        said = _effect_of(h) or f"{_subject(h)} differs between {a} and {b} {_where(h)}"
        suspect = " — SUSPECT: the two sides ran under different loads" if h.suspect else ""
        return f"{said[0].upper()}{said[1:]}, {decided} ({basis}){under}{suspect}."
    if on:
        basis += f"; {on.removeprefix('on ')}"
    d = table_of(h.detectable)
    ratio = _ratio(h)
    shown = ""
    est, low, high = (number_of(ratio.get(k)) for k in ("estimate", "low", "high"))
    if est is not None:
        shown = f" ({a}/{b} = {est:.3g}" + (
            f", 95 % CI {low:.3g}–{high:.3g}" if low is not None and high is not None else "") + ")"
    if d.get("deterministic"):
        return f"{a} and {b} gave identical {_subject(h)} {_where(h)} in every pair, decided ({basis}){under}."
    if d.get("equivalent") and d.get("eq_low") is not None:
        return (f"{a} and {b} are equivalent in {_subject(h)} {_where(h)} within ±5 % ({d['eq_conf']:.0%} interval "
                f"of the ratio {d['eq_low']:.3g}–{d['eq_high']:.3g}), decided ({basis}){under}.")
    if d.get("mde") is not None:
        open_ = f"a difference under {d['mde']:.1%} could have gone unseen"
    elif d.get("decidable") is False:
        open_ = "this n could not have shown any difference"
    else:
        open_ = "how large a difference it could have missed is unknown"
    return f"No difference shown in {_subject(h)} {_where(h)}{shown}: open, {open_} ({basis}){under}."


def _short_reason(text: str) -> str:
    """A reason without its fix and detail: grouped, the line says why once per cause."""
    text = text.split(" (fix:")[0].strip().rstrip(".")
    text = re.sub(r"^(\w+): \1: ", r"\1: ", text, flags=re.IGNORECASE)  # "nvml: NVML: ..." once
    if "sampling period" in text:
        return "phases shorter than the telemetry resolves (set [workload] min_phase_s)"
    if text.startswith("fewer than"):
        return text.split(":")[0]
    return text if len(text) <= 140 else text[:137].rstrip() + "…"


class Untestable(TypedDict):
    """The hypotheses not tested for one reason."""

    reason: str
    ids: list[str]
    subjects: list[str]


def untestable(analysis: Analysis) -> list[Untestable]:
    """The hypotheses not tested, grouped by reason: [{"reason", "ids", "subjects"}], in first-seen order."""
    why_not = {m.metric: m.reason for m in analysis.measured if not m.measured}
    groups: dict[str, Untestable] = {}
    for h in analysis.hypotheses:
        if h.tested:
            continue
        raw = why_not.get(h.tested_metric) or h.reason or h.decision or "no data"
        g = groups.setdefault(_short_reason(str(raw)), {"reason": _short_reason(str(raw)), "ids": [], "subjects": []})
        if h.id not in g["ids"]:
            g["ids"].append(h.id)
        if _subject(h) not in g["subjects"]:
            g["subjects"].append(_subject(h))
    return list(groups.values())


def untestable_line(analysis: Analysis) -> str | None:
    """Everything not tested here in one line, reasons grouped; None when every hypothesis was tested."""
    groups = untestable(analysis)
    if not groups:
        return None
    parts = [f"{', '.join(g['subjects'])} ({', '.join(g['ids'])}): {g['reason']}" for g in groups]
    return "Not testable here: " + "; ".join(parts) + "."


def warnings(analysis: Analysis, threats: Sequence[RankedThreat] | None = None, limit: int = 3) -> list[str]:
    """What qualifies the sentences, most consequential first: a reduced profile, then the ranked threats
    (kit.report.threats.ranked) that are high or medium and bear on the result."""
    from kit.report.threats import ranked

    out = []
    prof = analysis.profile or "paper"
    if prof != "paper":
        out.append(profile_warning(analysis))
    rows = ranked(analysis) if threats is None else threats
    for t in rows:
        if len(out) > limit or t["status"] == "mitigated" or t["severity"] not in ("high", "medium"):
            continue
        if t["folded"] or t["rule"] in ("sensors", "sensor", "short_phases", "external", "cpu_kernels"):
            continue  # the untestable line carries the missing sensors; generality is no flaw of this run
        effect = f": {t['effect_text']}" if t["effect_text"] else ""
        out.append(f"{t['title']} ({t['severity']}){effect}.")
    return out


def profile_warning(analysis: Analysis) -> str:
    """The reduced profile and what it costs this run: its n and the smallest difference it could see."""
    prof = analysis.profile or "paper"
    tested = [h for h in analysis.hypotheses if h.tested]
    ns = [h.n_pairs for h in tested if h.n_pairs]
    mdes = [float(m) for h in tested if (m := number_of(table_of(h.detectable).get("mde"))) is not None]
    bits = [f"{prof.upper()} profile, not the published protocol"]
    if ns:
        bits.append(f"{min(ns)} pairs per comparison")
    if mdes:
        bits.append(f"differences under {max(mdes):.1%} could go unseen")
    elif not tested:
        bits.append("no hypothesis could be tested")
    return "; ".join(bits) + "."


class Answer(TypedDict):
    """The answer block the report opens with (and `kit report` prints)."""

    headline: str  # one line
    decided: list[str]  # a sentence per decided comparison
    open: list[str]  # a sentence per tested comparison that showed neither a difference nor an equivalence
    warnings: list[str]
    untestable: str | None  # one line, or None when everything was tested


def answer(analysis: Analysis, threats: Sequence[RankedThreat] | None = None) -> Answer:
    """The answer block: ``headline`` (one line), ``decided`` and ``open`` sentences, ``warnings`` and
    ``untestable`` (one line or None)."""
    decided: list[str] = []
    open_: list[str] = []
    for h in analysis.hypotheses:
        s = sentence(h, analysis)
        if s is None:
            continue
        d = table_of(h.detectable)
        (decided if h.rejected or d.get("equivalent") or d.get("deterministic") else open_).append(s)
    refusal = analysis.devices.get("refusal")
    if refusal:
        headline = f"No comparison decided: {refusal}."
    elif decided:
        headline = decided[0] if len(decided) == 1 else (
            f"{decided[0].rstrip('.')} (and {len(decided) - 1} more decided below).")
    elif open_:
        headline = (f"No comparison decided: {len(open_)} tested, none showed a difference or an equivalence "
                    "(see below).")
    else:
        headline = "No comparison decided: nothing could be tested here (see below)."
    return {"headline": headline, "decided": decided, "open": open_,
            "warnings": warnings(analysis, threats), "untestable": untestable_line(analysis)}


# ------------------------------------------------------------------------------------------------ kit compare


def _cmp_what(row: CompareRow) -> str:
    parts = [row.arm, row.metric, row.phase, row.config]
    return " · ".join(str(p) for p in parts if p)


def compare_sentence(row: CompareRow, threshold: float = 0.05) -> str:
    """One ``kit compare`` row: "B is 1.31× slower than A [95 % CI 1.22–1.40]: regression" (r >= 1, the
    direction in words), with what was compared; rows without a ratio say why."""
    what = _cmp_what(row)
    verdict = row.verdict or "not tested"
    est, lo, hi = row.ratio, row.ratio_low, row.ratio_high
    if est is None or est <= 0:
        return f"{what}: no ratio ({row.reason or 'too few trials'}): {verdict}"
    metric = row.metric or ""
    bigger = est >= 1
    r = est if bigger else 1 / est
    ci = _ci(lo, hi) if bigger else _ci(None if hi is None else 1 / hi, None if lo is None else 1 / lo)
    m = METRICS.get(metric)
    if metric in TIME_METRICS or (m is not None and m.unit in ("s", "ms")):
        word = "slower" if bigger else "faster"
    elif metric == "throughput_ips":
        word = "faster" if bigger else "slower"
    else:
        word = "higher" if bigger else "lower"
    if abs(est - 1) < 0.0005:
        said = "B equals A (B/A = 1.000)"
    else:
        said = f"B is {times(r)} {word} than A{ci}"
    mde = row.mde
    if verdict == "no change":
        said += f", within ±{threshold:.0%}"
    elif verdict == "inconclusive" and mde is not None and mde != float("inf"):
        said += f"; a change under {mde:.1%} could have gone unseen"
    if row.lower_is_better is None and verdict in ("regression", "improvement"):
        verdict = "change"
    return f"{what}: {said}: {verdict}"


class CompareAnswer(TypedDict):
    """A comparison's answer (the HTML page and `kit compare` print it)."""

    headline: str
    changed: list[str]  # a sentence per changed row: regressions, improvements, suspects
    others: list[str]  # a sentence per other row
    rest: str  # the other rows counted by verdict, in one line


def compare_answer(result: Comparison) -> CompareAnswer:
    """A comparison's answer: the changed rows first (regressions, then improvements, suspects), each a
    sentence; the rest counted in one line."""
    order = {"regression": 0, "improvement": 1, "suspect": 2}
    rows = list(result.rows)
    thr = float(result.threshold or 0.05)
    changed = sorted((r for r in rows if r.verdict in order), key=lambda r: order[r.verdict])
    rest = ", ".join(f"{n} {v}" for v, n in result.counts.items() if n and v not in order)
    if changed:
        headline = _with_note(changed[0], compare_sentence(changed[0], thr)) + (
            f" (and {len(changed) - 1} more changed)" if len(changed) > 1 else "")
    else:
        headline = f"No regression or improvement found between A and B ({rest or 'nothing compared'})."
    return {"headline": headline, "changed": [_with_note(r, compare_sentence(r, thr)) for r in changed],
            "others": [compare_sentence(r, thr) for r in rows if r.verdict not in order],
            "rest": rest}


def _with_note(row: CompareRow, said: str) -> str:
    """A changed row's sentence with the load it was measured under (``load_note``, kit.compare.mark_suspects):
    a verdict that stands under load says so in the sentence itself."""
    note = row.load_note
    return f"{said} ({note})" if note else said


def human_value(x: float | None, unit: str) -> str:
    """A compared median in its unit (bytes in KiB/MiB/GiB)."""
    if unit == "B":
        return fmt_bytes(x)
    if x is None:
        return "–"
    shown = f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"
    return shown if unit in ("fraction", "1", "") else f"{shown} {unit}"
