"""Everything a report template shows, computed from finished results.

Templates (HTML, LaTeX) take this context and lay it out; they compute
nothing. Plain-language findings are generated here from the hypothesis
decisions, so both formats say the same words. :func:`build_context` reads the
typed :class:`kit.analysis_record.Analysis`; the tables a template lays out are
the rows' JSON (``to_json``), the same words analysis.json holds. The run's
environment, its appendices and the claims ledger are in kit.report.environment,
kit.report.appendix and kit.report.claims_view.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypedDict

from kit.analysis.design import on_this_host
from kit.analysis.metrics import METRICS
from kit.analysis_record import Analysis
from kit.analysis_rows import Design, HypothesisResult, Measured, RunSummary, number_of, table_of
from kit.executors.liveness import incomplete_note, run_state
from kit.fmt import fmt_counts, fmt_value
from kit.manifest import Manifest
from kit.metric_catalog import MetricDef
from kit.plan import config_label
from kit.records import JsonTable, JsonValue
from kit.report import figures
from kit.report.answer import Answer, answer, name, profile_warning, sentence
from kit.report.appendix import disturbance_section, excluded_section, retried_section, sequential_section
from kit.report.claims_view import ClaimsView, claims_context
from kit.report.environment import (
    DEVICE_COLUMNS,
    RawEntry,
    SelfTest,
    device_rows,
    environment_rows,
    raw_index,
    selftest_context,
)
from kit.report.sections import KIT_IDS, DrawnFigure, Figure, Section, extra_sections, kit_figure, study_code_section
from kit.report.threats import RankedThreat
from kit.report.threats import ranked as ranked_threats
from kit.studies import Hooks, resolve_hooks

PHASE_WORD = {"train": "learning (training)", "infer": "inference"}
POWER_NOTE = ("GPU power: 'NVML 1-s moving average' is nvmlDeviceGetPowerUsage, which Ampere and newer drivers "
              "average over about one second (a phase shorter than a few seconds mostly shows the previous one); "
              "'energy counter / phase duration' is the NVML total-energy counter's difference over the phase "
              "divided by its duration, used for the hypotheses where the GPU has the counter; 'instantaneous' is "
              "the driver's NVML_FI_DEV_POWER_INSTANT field where it exists.")


# A figure drawn beside a tested metric's: the trial's own CPU utilisation is tested, the host-wide one (every
# process, what the collectors sample) is shown beside it, labelled, for comparison with papers that used it.
SHOWN_BESIDE = {"trial_cpu_util_pct": ("cpu_util_pct",)}
ENERGY_NOTE = ("Energy: 'gross' is the counter's difference over the phase (the GPU's NVML energy counter, the CPU "
               "packages' and DRAM's RAPL counters), idle draw and every other process included; 'net of idle' "
               "subtracts the idle power of the run's baseline (recorded before the trials) × the phase duration, "
               "so a framework that merely runs longer is not charged the idle draw, though other processes' load "
               "stays in it. ± is a worst-case bound, not a standard error: the energy of the sampling interval "
               "around each phase boundary (power there × sampling period), which interpolating the counter can "
               "put on the wrong side; it matters for phases of a few sampling periods.")


class EnergyBound(TypedDict):
    """One row of the energy bounds table: the median value and bound of one metric, phase, arm and
    configuration."""

    metric: str
    label: str
    unit: str
    phase: str
    arm: str
    config_id: str
    n: int
    median: float
    median_bound: float
    max_bound: float
    bound_pct: float | None
    config_label: str | None


def energy_bounds(analysis: Analysis) -> list[EnergyBound]:
    """Per energy (or energy-derived power) metric, phase, arm and configuration: median value and median bound.

    From the value table's ``bound`` column (kit.analysis.metrics); an analysis without it gives no rows.
    """
    groups: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for v in analysis.values:
        m = METRICS.get(v.metric)
        if m is None or m.kind not in ("energy", "phase_power") or v.value is None or not v.counts:
            continue
        if v.bound is None:
            continue
        key = (v.metric, v.phase, v.arm, v.config_id or "")
        groups.setdefault(key, []).append((float(v.value), float(v.bound)))
    configs = analysis.configs
    out: list[EnergyBound] = []
    for (metric, phase, arm, cid), pairs in sorted(groups.items()):
        med_v, med_b = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        out.append({"metric": metric, "label": METRICS[metric].label, "unit": METRICS[metric].unit, "phase": phase,
                    "arm": arm, "config_id": cid, "n": len(pairs), "median": med_v, "median_bound": med_b,
                    "max_bound": max(p[1] for p in pairs), "bound_pct": 100 * med_b / abs(med_v) if med_v else None,
                    "config_label": config_label(configs[cid]) if len(configs) > 1 and cid in configs else None})
    return out


def _when(t: float | None) -> str:
    return "–" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def finding_text(h: HypothesisResult, analysis: Analysis) -> str:
    """One sentence per hypothesis outcome (kit.report.answer's words: the faster side named, r >= 1), then
    the numbers behind it once: the centres, the test and Holm's p, Cliff's delta."""
    phase = PHASE_WORD.get(h.phase, h.phase)
    if h.config_label:
        phase = f"{phase}, {h.config_label}"
    if not h.tested:
        return f"{h.id} ({h.label}, {phase}): {h.decision or 'not tested'} — {h.reason or 'no data'}."
    comp = table_of(h.comparison)
    a, b = h.arm_a, h.arm_b
    across = h.test_unit == "configuration"  # kit.analysis.across: networks as the unit, log ratios
    ma, mb = table_of(comp.get("a")).get("median"), table_of(comp.get("b")).get("median")
    unit = h.unit
    said = sentence(h, analysis) or ""
    centre = "geometric-mean centre" if across else "median"
    over = ", geometric-mean ratio over the networks" if across else ""
    nums = f"{centre} {fmt_value(ma, unit)} {'' if unit == 'B' else unit} for {name(a)} vs {fmt_value(mb, unit)} " \
           f"{'' if unit == 'B' else unit} for {name(b)}{over}".replace("  ", " ")
    cliff = table_of(comp.get("cliffs_delta"))
    delta = number_of(cliff.get("value"))
    dtxt = f", Cliff's δ = {delta:+.2f} ({cliff.get('magnitude')})" if delta is not None else ""
    suspect = f" SUSPECT: {h.suspect}." if h.suspect and h.rejected else ""
    more = "" if h.rejected else detectable_text(h)
    return (f"{h.id}: {said.rstrip('.')} — {nums}; {h.test_method}, Holm-adjusted p = {h.p_adj:.3g}"
            f"{dtxt}{more}.{suspect}")


def detectable_text(h: HypothesisResult) -> str:
    """What "not rejected" can claim: the difference the test would have found (power 80 % at its real rejection
    region, n and level), and whether the 1 - 2 alpha interval shows the arms equivalent within 5 %."""
    d = table_of(h.detectable)
    if d.get("deterministic"):
        return "; every pair of values is identical: no difference at all over these seeds"
    if d.get("decidable") is False:
        return "; with this n no difference could have been detected"
    mde = number_of(d.get("mde"))
    if mde is None:
        return ""
    text = f"; it would have detected a difference of {mde:.1%} or more (power 80 %)"
    if d.get("equivalent") and d.get("eq_low") is not None:
        return (text + f", and the {d['eq_conf']:.0%} interval of the ratio, {d['eq_low']:.3g}–{d['eq_high']:.3g}, "
                "lies within ±5 %: equivalent at that margin")
    return text + "; smaller ones remain open"


def timed_share_text(run: RunSummary) -> str | None:
    """The run's timed share in one sentence with why it matters, and how calibrated phases are summarised.

    None for an analysis made before the share was computed (or without a counted trial).
    """
    share = run.timed_share
    if share is None:
        return None
    text = (f"Timed share: {share * 100:.0f} % of trial wall time ({float(run.timed_s or 0):.1f} s of "
            f"{float(run.trial_wall_s or 0):.1f} s over {run.timed_trials} counted trials). The rest "
            "is process start, framework import, data loading, warm-up and exit: the larger the share, the more of "
            "the machine time a trial costs measures the frameworks rather than their start-up.")
    passes = {ph: v for ph, v in run.phase_passes.items() if len(v) == 2}
    if any(hi > 1 for _, hi in passes.values()):
        floor = run.min_phase_s
        each = ", ".join(f"{ph} {lo}" + (f"-{hi}" if hi != lo else "") + " passes" for ph, (lo, hi) in passes.items())
        text += (" Calibrated phases" + (f" (min_phase_s = {floor:g} s)" if floor is not None else "")
                 + f": each timed phase repeats its unit until it lasts that long ({each} per trial; a training pass "
                 "is the whole training run from the same initial weights). A trial's time is its mean per pass, "
                 "whose reciprocal is the throughput over the window the telemetry samples; every pass's time is "
                 "in the trial record.")
    return text


class Untested(TypedDict):
    """One line of the untested hypotheses: which hypotheses, metrics and phases, and their reason once."""

    which: str
    reason: str


def untested_hypotheses(hyps: Sequence[HypothesisResult]) -> list[Untested]:
    """The hypotheses not tested, grouped by their reason with the metric and phase taken out ("no paired
    measurements of GPU temperature in the train phase" and the same for H3's CPU temperature are one reason),
    one line per group: which hypotheses, metrics and phases, and the reason once."""
    groups: dict[str, dict[str, list[str]]] = {}  # reason -> "H2 label" -> its phases
    for h in hyps:
        if h.tested:
            continue
        label, phase = str(h.label or h.metric or ""), str(h.phase or "")
        decision, why = str(h.decision or "not tested"), str(h.reason or "")
        reason = f"{decision}: {why}" if why and decision != "not tested" else (why or decision)
        general = reason.replace(f" in the {phase} phase", "").replace(label, "its metric") if label else reason
        groups.setdefault(general, {}).setdefault(f"{h.id} {label}".strip(), []).append(phase)
    out: list[Untested] = []
    for general, items in groups.items():
        which = ", ".join(f"{k} ({', '.join(p for p in ph if p)})" if any(ph) else k for k, ph in items.items())
        out.append({"which": which, "reason": general})
    return out


def descriptive_rows(analysis: Analysis) -> list[JsonTable]:
    """The descriptives as a reader reads them: values in their unit (bytes in KiB/MiB/GiB), the unit shown
    once in the metric cell (none for bytes: each value carries it)."""
    out = []
    for d in analysis.descriptives:
        unit = d.unit
        row = d.to_json()
        row["unit_shown"] = "" if unit == "B" else unit
        for k in ("mean", "sd", "median", "iqr", "min", "max"):
            row[f"{k}_text"] = fmt_value(d.stat(k), unit)
        out.append(row)
    return out


def banner_cost(analysis: Analysis, said: Answer) -> str | None:
    """What the reduced profile costs this run, for the profile banner, unless the answer's warnings already say
    it (then the banner names the profile alone: one fact, said once)."""
    cost = profile_warning(analysis).split("; ", 1)[-1]
    return None if any(cost in str(w) for w in said["warnings"]) else cost


def unmeasured_groups(measured: Iterable[Measured]) -> list[dict[str, str]]:
    """The metrics this run did not measure, grouped by reason in first-seen order: one line per reason naming
    its metrics ("GPU utilisation (%), GPU temperature (°C), ...: nvml: ... (fix: ...)"). Why: a host without
    NVML or RAPL gave one reason to seven or four metrics, and the table repeated it in each row."""
    groups: dict[str, list[str]] = {}
    for m in measured:
        if not m.measured:
            groups.setdefault(m.reason or "no values", []).append(
                f"{m.label or m.metric} ({m.unit})" if m.unit else m.label)
    return [{"metrics": ", ".join(names), "reason": reason} for reason, names in groups.items()]


def _common(cells: Iterable[str]) -> str:
    """The value every row of a table shares ("" when they differ or there is none): said once above the
    table instead of in each row."""
    values = {c or "" for c in cells}
    return values.pop() if len(values) == 1 else ""


def _design(manifest: Manifest, analysis: Analysis) -> Design:
    """The design check of analysis.json; for an analysis written before it existed, computed from the manifest."""
    if analysis.design is not None:
        return analysis.design
    from kit.analysis.design import design_table

    return Design.from_json(design_table(manifest.spec, manifest.configs, analysis.arms))


class ImageRow(TypedDict):
    framework: str
    tag: str
    digest: str


class DeviceTable(TypedDict):
    columns: list[str]
    rows: list[list[str]]
    refusal: JsonValue  # why the run's devices cannot be compared (kit.analysis.devices), or None


class ReportContext(TypedDict):
    """What the HTML and LaTeX templates receive: every key they read, typed. Tables of rows analysis.json
    holds (hypotheses, the design, what was measured) are those rows' JSON, the words analysis.json has."""

    title: str
    experiment: str
    citation: str | None
    reproduces: str | None
    protocol_source: str
    deviations: list[JsonTable]
    profile: str
    is_paper_profile: bool
    profile_description: str | None
    run_dir: str
    started: str
    ended: str
    run: JsonTable  # analysis.json's run, with the run's state (status, incomplete)
    timed_share: str | None
    timed_share_pct: str
    goal: JsonTable
    alpha: float
    arms: list[str]
    hypotheses: list[JsonTable]
    design: JsonTable
    design_test: str
    design_n_note: str
    untested_hypotheses: list[Untested]
    findings: list[str]
    answer: Answer
    profile_warning: str | None
    param_counts: str
    claims: ClaimsView
    figures: list[Figure]
    descriptives: list[JsonTable]
    measured: list[JsonTable]
    unmeasured: list[dict[str, str]]
    equivalence: JsonTable
    threats: list[RankedThreat]
    environment: list[tuple[str, str]]
    devices: DeviceTable
    selftest: SelfTest | None
    power_note: str | None
    energy_bounds: list[EnergyBound]
    energy_note: str | None
    reproduce: list[str]
    images: list[ImageRow]
    command: str | None
    raw_index: list[RawEntry]
    metrics: dict[str, MetricDef]
    kit_version: str | None
    sections: list[Section]
    appendix_sections: list[Section]


def build_context(manifest: Manifest, analysis: Analysis, run_path: Path,
                  hooks: Hooks | None = None) -> ReportContext:
    """Everything the templates show. ``hooks``: the study code the reader trusted (report sections);
    None decides as :func:`kit.studies.resolve_hooks` does by default."""
    hooks = hooks if hooks is not None else resolve_hooks(run_path, manifest)
    spec = manifest.spec
    arms = list(analysis.arms)
    values = [v for v in analysis.values if v.value is not None]  # the figures' rows (kit.report.figures)
    measured_values = [v for v in values if v.counts]
    figs: list[DrawnFigure] = []
    cfgs = manifest.configs
    cfg_labels = ({cid: config_label(cfg) for cid, cfg in cfgs.items()} if len(cfgs) > 1 else None)
    hyp_metrics = []
    tested = [h.tested_metric for h in analysis.hypotheses] or \
        [h["metric"] for h in spec.get("hypotheses", [])]
    for metric in tested:
        for shown in (metric, *SHOWN_BESIDE.get(metric, ())):
            if shown not in hyp_metrics:
                hyp_metrics.append(shown)
    for metric in hyp_metrics:
        for phase in ("train", "infer"):
            if any(v.metric == metric and v.phase == phase for v in measured_values):
                title = f"{METRICS[metric].label}, {PHASE_WORD[phase]} phase"
                figs.append({"id": f"box-{metric}-{phase}", "title": title, "kind": "box",
                             "svg": figures.boxplot(measured_values, metric, phase, arms, title, cfg_labels)})
    for phase in ("train", "infer"):
        if any(v.metric == "time_s" and v.phase == phase for v in values):
            title = f"execution time against schedule position, {PHASE_WORD[phase]} phase"
            figs.append({"id": f"schedule-time-{phase}", "title": title, "kind": "schedule",
                         "svg": figures.schedule_plot(values, "time_s", phase, arms, title, cfg_labels)})
    from kit.report.telemetry_fig import telemetry_figure

    series = analysis.telemetry
    if series is None:  # read back from disk: analysis.json holds no series, the run directory does
        from kit.analysis.telemetry_series import series_of_run
        from kit.store import RunDir

        series = series_of_run(RunDir.open(run_path), arms)
    tel = telemetry_figure(series, arms)
    if tel is not None:
        figs.append(tel)
    shown_figs = [kit_figure(f) for f in figs]  # every figure an image the kit encoded (kit.report.svg_safe)
    spec_path = (manifest.spec_source.path if manifest.spec_source else None) or "experiments/<study>/experiment.toml"
    profile = manifest.profile or "paper"
    reproduce = [f"kit run {spec_path}" + ("" if profile == "paper" else f" --profile {profile}")
                 + (f" --backend {manifest.backend['backend']}" if manifest.backend.get("backend") not in (None, "local") else ""),
                 f"kit report {run_path} --format html,latex,pdf"]
    hyps = analysis.hypotheses
    design = on_this_host(_design(manifest, analysis), hyps)
    threat_rows = ranked_threats(analysis)
    the_answer = answer(analysis, threat_rows)
    # an unfinished run (interrupted, partial, failed, or "running" with its process gone: kit.executors.liveness)
    # says so first: the templates open the page with run.incomplete, above the title and any sentence a reader
    # might copy
    state = run_state(run_path, manifest.status, manifest.executor.name)
    unfinished = incomplete_note(state, analysis.run.finished, analysis.run.planned, run_path)
    images: list[ImageRow] = [{"framework": fw, "tag": img.get("tag", "?"), "digest": img.get("digest") or img.get("id") or "?"}
              for fw, img in (manifest.backend.get("images") or {}).items()]
    argv = manifest.command
    command = " ".join(shlex.quote(str(a)) for a in argv) if argv else None
    return {
        "title": manifest.title or manifest.experiment,
        "experiment": manifest.experiment,
        "citation": spec["experiment"].get("citation"),
        "reproduces": spec["experiment"].get("reproduces"),
        "protocol_source": spec["experiment"].get("protocol_source") or "",
        "deviations": list(spec.get("deviations") or []),
        "profile": profile,
        "is_paper_profile": profile == "paper",
        "profile_description": manifest.profile_description,
        "run_dir": str(run_path),
        "started": _when(manifest.started),
        "ended": _when(manifest.ended),
        "run": {**analysis.run.to_json(), "status": state.status, "incomplete": unfinished},
        "timed_share": timed_share_text(analysis.run),
        "timed_share_pct": (f"{analysis.run.timed_share * 100:.0f} %" if analysis.run.timed_share is not None
                            else ""),
        "goal": spec.get("goal", {}),
        "alpha": analysis.alpha,
        "arms": arms,
        "hypotheses": [h.to_json() for h in hyps],
        "design": design.to_json(),
        "design_test": _common(r.test for r in design.rows),
        "design_n_note": _common(r.n_note for r in design.rows),
        "untested_hypotheses": untested_hypotheses(hyps),
        "findings": [finding_text(h, analysis) for h in hyps if h.tested],
        "answer": the_answer,
        "profile_warning": banner_cost(analysis, the_answer) if profile != "paper" else None,
        "param_counts": fmt_counts(analysis.equivalence.get("param_counts")),
        "claims": claims_context(analysis),
        "figures": shown_figs,
        "descriptives": descriptive_rows(analysis),
        "measured": [m.to_json() for m in analysis.measured],
        "unmeasured": unmeasured_groups(analysis.measured),
        "equivalence": analysis.equivalence,
        "threats": [t for t in threat_rows if not t["folded"]],
        "environment": environment_rows(manifest, analysis),
        "devices": {"columns": DEVICE_COLUMNS, "rows": device_rows(analysis),
                    "refusal": analysis.devices.get("refusal")},
        "selftest": selftest_context(manifest),
        "power_note": POWER_NOTE if any(v.metric.startswith("gpu_power") for v in values) else None,
        "energy_bounds": energy_bounds(analysis),
        "energy_note": ENERGY_NOTE if any(METRICS[v.metric].kind == "energy" for v in values
                                          if v.metric in METRICS) else None,
        "reproduce": reproduce,
        "images": images,
        "command": command,
        "raw_index": raw_index(run_path),
        "metrics": METRICS,
        "kit_version": analysis.kit_version,
        # the study's own sections follow the main text; the kit's records of the run are appendices
        "sections": (study_code_section(hooks)
                     + extra_sections(manifest, analysis, hooks, reserved=KIT_IDS | {f["id"] for f in shown_figs})),
        "appendix_sections": (excluded_section(analysis) + retried_section(analysis) + disturbance_section(analysis)
                              + sequential_section(analysis)),
    }
