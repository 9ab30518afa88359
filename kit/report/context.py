"""Everything a report template shows, computed from finished results.

Templates (HTML, LaTeX) take this context and lay it out; they compute
nothing. Plain-language findings are generated here from the hypothesis
decisions, so both formats say the same words.
"""

from __future__ import annotations

import re
import shlex
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.analysis.design import on_this_host
from kit.analysis.metrics import METRICS
from kit.executors.liveness import incomplete_note, run_state
from kit.fmt import fmt_counts, fmt_value
from kit.manifest import Manifest
from kit.plan import config_label
from kit.records import counts
from kit.report import figures
from kit.report.answer import answer, profile_warning
from kit.report.sections import KIT_IDS, extra_sections, kit_figure, study_code_section
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


def energy_bounds(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per energy (or energy-derived power) metric, phase, arm and configuration: median value and median bound.

    From the value table's ``bound`` column (kit.analysis.metrics); an analysis without it gives no rows.
    """
    groups: dict[tuple[str, str, str, str], list[tuple[float, float]]] = {}
    for v in analysis.get("values") or []:
        m = METRICS.get(v.get("metric", ""))
        if m is None or m.kind not in ("energy", "phase_power") or v.get("value") is None or not counts(v):
            continue
        if v.get("bound") is None:
            continue
        key = (v["metric"], v["phase"], v["arm"], v.get("config_id") or "")
        groups.setdefault(key, []).append((float(v["value"]), float(v["bound"])))
    configs = analysis.get("configs") or {}
    out = []
    for (metric, phase, arm, cid), pairs in sorted(groups.items()):
        med_v, med_b = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
        out.append({"metric": metric, "label": METRICS[metric].label, "unit": METRICS[metric].unit, "phase": phase,
                    "arm": arm, "config_id": cid, "n": len(pairs), "median": med_v, "median_bound": med_b,
                    "max_bound": max(p[1] for p in pairs), "bound_pct": 100 * med_b / abs(med_v) if med_v else None,
                    "config_label": config_label(configs[cid]) if len(configs) > 1 and cid in configs else None})
    return out


def _when(t: float | None) -> str:
    return "–" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _bytes(n: float | None) -> str:
    if n is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def finding_text(h: dict[str, Any], analysis: dict[str, Any] | None = None) -> str:
    """One sentence per hypothesis outcome (kit.report.answer's words: the faster side named, r >= 1), then
    the numbers behind it once: the centres, the test and Holm's p, Cliff's delta."""
    from kit.report.answer import name, sentence

    phase = PHASE_WORD.get(h["phase"], h["phase"])
    if h.get("config_label"):
        phase = f"{phase}, {h['config_label']}"
    if not h.get("tested"):
        return f"{h['id']} ({h['label']}, {phase}): {h.get('decision') or 'not tested'} — {h.get('reason') or 'no data'}."
    comp = h["comparison"]
    a, b = h["arm_a"], h["arm_b"]
    across = h.get("test_unit") == "configuration"  # kit.analysis.across: networks as the unit, log ratios
    ma, mb = comp["a"]["median"], comp["b"]["median"]
    unit = h["unit"]
    said = sentence(h, analysis or {}) or ""
    centre = "geometric-mean centre" if across else "median"
    over = ", geometric-mean ratio over the networks" if across else ""
    nums = f"{centre} {fmt_value(ma, unit)} {'' if unit == 'B' else unit} for {name(a)} vs {fmt_value(mb, unit)} " \
           f"{'' if unit == 'B' else unit} for {name(b)}{over}".replace("  ", " ")
    delta = (comp.get("cliffs_delta") or {}).get("value")
    dtxt = f", Cliff's δ = {delta:+.2f} ({comp['cliffs_delta'].get('magnitude')})" if delta is not None else ""
    suspect = f" SUSPECT: {h['suspect']}." if h.get("suspect") and h.get("rejected") else ""
    more = "" if h.get("rejected") else detectable_text(h)
    return (f"{h['id']}: {said.rstrip('.')} — {nums}; {h['test_method']}, Holm-adjusted p = {h['p_adj']:.3g}"
            f"{dtxt}{more}.{suspect}")


def detectable_text(h: dict[str, Any]) -> str:
    """What "not rejected" can claim: the difference the test would have found (power 80 % at its real rejection
    region, n and level), and whether the 1 - 2 alpha interval shows the arms equivalent within 5 %."""
    d = h.get("detectable") or {}
    if d.get("deterministic"):
        return "; every pair of values is identical: no difference at all over these seeds"
    if d.get("decidable") is False:
        return "; with this n no difference could have been detected"
    if d.get("mde") is None:
        return ""
    text = f"; it would have detected a difference of {d['mde']:.1%} or more (power 80 %)"
    if d.get("equivalent") and d.get("eq_low") is not None:
        return (text + f", and the {d['eq_conf']:.0%} interval of the ratio, {d['eq_low']:.3g}–{d['eq_high']:.3g}, "
                "lies within ±5 %: equivalent at that margin")
    return text + "; smaller ones remain open"


def timed_share_text(run: dict[str, Any]) -> str | None:
    """The run's timed share in one sentence with why it matters, and how calibrated phases are summarised.

    None for an analysis made before the share was computed (or without a counted trial).
    """
    share = run.get("timed_share")
    if not isinstance(share, (int, float)) or isinstance(share, bool):
        return None
    text = (f"Timed share: {share * 100:.0f} % of trial wall time ({float(run.get('timed_s') or 0):.1f} s of "
            f"{float(run.get('trial_wall_s') or 0):.1f} s over {run.get('timed_trials')} counted trials). The rest "
            "is process start, framework import, data loading, warm-up and exit: the larger the share, the more of "
            "the machine time a trial costs measures the frameworks rather than their start-up.")
    passes = {ph: v for ph, v in (run.get("phase_passes") or {}).items() if isinstance(v, list) and len(v) == 2}
    if any(hi > 1 for _, hi in passes.values()):
        floor = run.get("min_phase_s")
        each = ", ".join(f"{ph} {lo}" + (f"-{hi}" if hi != lo else "") + " passes" for ph, (lo, hi) in passes.items())
        text += (" Calibrated phases" + (f" (min_phase_s = {floor:g} s)" if isinstance(floor, (int, float)) else "")
                 + f": each timed phase repeats its unit until it lasts that long ({each} per trial; a training pass "
                 "is the whole training run from the same initial weights). A trial's time is its mean per pass, "
                 "whose reciprocal is the throughput over the window the telemetry samples; every pass's time is "
                 "in the trial record.")
    return text


def environment_rows(manifest: Manifest, analysis: dict[str, Any]) -> list[tuple[str, str]]:
    host = manifest.host
    kit = manifest.kit
    be = manifest.backend
    rows = [
        ("host", f"{host.get('hostname', '?')} · {host.get('os', '?')} · kernel {host.get('kernel', '?')}"),
        ("CPU", f"{host.get('cpu_model', '?')} · {host.get('cpu_physical', '?')} cores / {host.get('cpu_logical', '?')} threads"),
        ("CPU governor", ", ".join(host.get("cpu_freq", {}).get("governors", [])) or "not exposed"),
        ("memory", _bytes(host.get("memory_total_bytes"))),
    ]
    for g in host.get("gpus", []) or [{"name": "none detected (NVML unavailable or no GPU)"}]:
        parts = [g.get("name", "?")] + [f"{k} {g[k]}" for k in ("driver_version", "uuid", "vbios", "power_limit_w") if g.get(k)]
        rows.append((f"GPU {g.get('index', '')}".strip(), " · ".join(str(p) for p in parts)))
    rows.append(("backend", f"{be.get('backend', '?')}" + (f" ({be['isolation']})" if be.get("isolation") else "")))
    for fw, img in (be.get("images") or {}).items():
        rows.append((f"image {fw}", f"{img.get('tag', '?')} · digest {img.get('digest') or img.get('id', '?')}"))
    envs: dict[str, dict[str, Any]] = {}
    for v in analysis.get("trial_env", []):
        envs.setdefault(v["arm"], v)
    for arm, env in envs.items():
        extra = " · ".join(f"{k} {env[k]}" for k in ("framework_version", "keras_version", "cuda", "cudnn", "device_name", "threads")
                           if env.get(k) is not None)
        rows.append((f"{arm} (inside the trial)", extra))
    datasets = manifest.used_datasets()
    if not datasets:
        rows.append(("dataset", "none: the workload generates its inputs"))
    for ds in datasets:
        rows.append(("dataset", f"{ds.name} ({ds.source}) from {ds.directory} [{ds.origin}], SHA-256 verified"))
    rows.append(("kit", f"{kit.get('version')} · commit {kit.get('commit') or 'not a git checkout'}"
                        + (" (with local changes)" if kit.get("dirty") else "")))
    rows.append(("plan", f"{manifest.plan.blocking} blocks, seed {manifest.plan.seed}, digest {manifest.plan_digest}"))
    return rows


def _counted(counts: dict[str, int] | None) -> str:
    """{"gpu": 10} -> "gpu"; several values: each with its number of trials."""
    if not counts:
        return "–"
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{k} ({n} trials)" for k, n in counts.items())


DEVICE_COLUMNS = ["arm", "kind", "device", "GPU UUID (inside the trial)", "GPU sampled by the host (index: UUID)",
                  "TF32 (mode, matmul, conv)", "precision", "trials"]


def device_rows(analysis: dict[str, Any]) -> list[list[str]]:
    """Per arm: the device kind, name and GPU UUID its trials reported, the GPU(s) the host sampled,
    TF32 and precision (``analysis["devices"]``; an analysis from before issue 13 has none)."""
    rows = []
    for a in (analysis.get("devices") or {}).get("arms", []):
        tf32 = _counted(a.get("tf32")) if a.get("tf32") else "not recorded"
        rows.append([a["arm"], _counted(a.get("kinds")), _counted(a.get("names")), _counted(a.get("gpu_uuids")),
                     ", ".join(a.get("host_gpus") or []) or "–", tf32, _counted(a.get("precision")),
                     str(a.get("n_trials", "–"))])
    return rows


def _numbers_text(numbers: dict[str, Any] | None) -> str:
    if not numbers:
        return ""
    return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in numbers.items())


def selftest_context(manifest: Manifest) -> dict[str, Any] | None:
    """The host self-test recorded in the manifest (``kit.selftest.host_selftest``), or None."""
    st = manifest.selftest
    if st is None:
        return None
    checks = st.get("checks") or []
    summary = ("passed" if st.get("ok") else "FAILED") + (
        "" if st.get("gpu") else " (CPU path only: the GPU checks were skipped)")
    failed = [c.get("name") for c in checks if c.get("status") == "fail"]
    if failed:
        summary += f"; failed: {', '.join(str(f) for f in failed)}"
    return {"ok": bool(st.get("ok")), "gpu": bool(st.get("gpu")), "summary": summary,
            "columns": ["check", "status", "detail", "numbers"],
            "rows": [[str(c.get("name", "?")), str(c.get("status", "?")), str(c.get("detail") or ""),
                      _numbers_text(c.get("numbers"))] for c in checks]}


def raw_index(run_path: Path) -> list[dict[str, Any]]:
    out = []
    import stat

    for name in ("manifest.json", "trials", "samples", "attempts", "events.jsonl", "analysis.json"):
        p = run_path / name
        try:
            st = p.lstat()
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):  # a link is not followed: its target is none of the run's business
            sizes = [f.lstat() for f in p.iterdir()]
            regular = [s.st_size for s in sizes if stat.S_ISREG(s.st_mode)]
            out.append({"path": f"{name}/", "files": len(regular), "size": _bytes(sum(regular))})
        elif stat.S_ISREG(st.st_mode):
            out.append({"path": name, "files": 1, "size": _bytes(st.st_size)})
    return out


def excluded_section(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """Every trial the analysis did not use, with its file and reason (none: no section)."""
    rows = [[e["trial_id"], e.get("arm") or "", e.get("status") or "", "warm-up" if e.get("warmup") else "measured",
             e["file"], e["reason"]] for e in analysis.get("excluded_trials") or []]
    if not rows:
        return []
    n_invalid = sum(1 for e in analysis["excluded_trials"] if e.get("status") == "invalid")
    return [{"id": "excluded-trials", "title": "Excluded trials",
             "paragraphs": [f"{len(rows)} trial(s) are not used by any statistic: failed, skipped or out of memory as "
                            f"their status says, or ({n_invalid}) excluded because their files hold impossible values "
                            "(not finite, or negative where the quantity cannot be). A block missing one of its trials "
                            "drops out of the paired tests. The files stay in the run directory."],
             "tables": [{"caption": "Excluded trials", "columns": ["trial", "arm", "status", "kind", "file", "reason"],
                         "rows": rows}], "figures": []}]


def retried_section(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts a retry replaced (none: no section). Failures (an error, a time limit, a kill) are listed one
    per row with why and the file they are kept in; disturbed attempts, which kit run re-ran at once because the
    host was busy and which failed nothing, are one summary line with their list behind a <details> element.
    Why: under a persistent load nearly every trial is re-run, and a table of dozens of "disturbed" rows under
    "Failed attempts" hid the one attempt that did fail (issue 39)."""
    entries = analysis.get("retried_trials") or []
    if not entries:
        return []
    failed = [e for e in entries if e.get("status") != "disturbed"]
    shaken = [e for e in entries if e.get("status") == "disturbed"]
    paragraphs = []
    tables = []
    if failed:
        n = len({e["trial_id"] for e in failed})
        paragraphs.append(
            f"{n} trial(s) were run again after {len(failed)} attempt(s) that failed (an error, a time limit or a kill "
            "by a signal; kit run --resume --retry-failed). A retry runs in the trial's original plan position with "
            "its seed, so the interleaving of the arms holds, but later in time than planned. The statistics use the "
            "latest attempt (its status is in the last column); each failed attempt is kept, with its telemetry, in "
            "the file named.")
        tables.append({"caption": "Failed attempts of retried trials",
                       "columns": ["trial", "arm", "attempt", "status", "signal", "reason", "file", "status now"],
                       "rows": [[e["trial_id"], e.get("arm") or "", str(e.get("attempt", "")), e.get("status") or "",
                                 e.get("signal") or "", e["reason"], e["file"], e.get("status_now") or ""]
                                for e in failed]})
    else:
        paragraphs.append("No attempt failed.")
    details = []
    if shaken:
        trials = {e["trial_id"] for e in shaken}
        per = sorted(sum(1 for e in shaken if e["trial_id"] == t) for t in trials)
        causes: dict[str, int] = {}
        for e in shaken:
            cause = str(e.get("reason") or "").removeprefix("disturbed: ")
            causes[cause] = causes.get(cause, 0) + 1
        said = "; ".join(f"{c} ({n}×)" if len(causes) > 1 else c for c, n in list(causes.items())[:3])
        line = (f"{len(shaken)} disturbed attempt(s) of {len(trials)} trial(s) were re-run at once by kit run "
                f"({per[0]}" + (f"–{per[-1]}" if per[-1] != per[0] else "") + " per trial), because the host was "
                f"busy while they ran: {said}" + ("; …" if len(causes) > 3 else "") + ". None of them failed; the "
                "statistics use the latest attempt, and the host conditions below say what stayed disturbed.")
        details.append({"line": line, "summary": f"the {len(shaken)} disturbed attempts",
                        "tables": [{"caption": "", "columns": ["trial", "arm", "attempt", "file", "status now"],
                                    "rows": [[e["trial_id"], e.get("arm") or "", str(e.get("attempt", "")), e["file"],
                                              e.get("status_now") or ""] for e in shaken]}]})
    return [{"id": "retried-trials", "title": "Retried trials", "paragraphs": paragraphs, "tables": tables,
             "details": details, "figures": []}]


def disturbance_section(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """What ran beside the timed phases: per arm and phase the foreign CPU, the re-runs, what stayed disturbed."""
    d = analysis.get("disturbance") or {}
    rows_in = [r for r in d.get("phases") or [] if isinstance(r, dict)]
    if not rows_in:
        return []
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows_in:
        by.setdefault((str(r.get("arm")), str(r.get("phase"))), []).append(r)
    rows = []
    for (arm, phase), rs in sorted(by.items()):
        judged = [r for r in rs if r.get("judged")]
        foreign = sorted(float(r["foreign_cpu"]) for r in judged if isinstance(r.get("foreign_cpu"), (int, float)))
        rows.append([arm, phase, f"{len(judged)} of {len(rs)}",
                     f"{foreign[len(foreign) // 2]:.2f}" if foreign else "–", f"{foreign[-1]:.2f}" if foreign else "–",
                     str(sum(1 for r in rs if r.get("disturbed")))])
    still = d.get("still_disturbed_trials") or []
    return [{"id": "host-conditions", "title": "Host conditions during the trials",
             "paragraphs": [
                 "Each timed phase of each trial was checked while the run went on: the CPU time of everything "
                 "outside the trial and the kit (host busy time minus the trial's own CPU time, from its markers, "
                 "minus the collectors'), CPU frequency against the idle baseline, and on GPUs foreign processes "
                 "and throttling. A phase with more foreign CPU than design.disturbance_cpu "
                 f"({(d.get('limits') or {}).get('foreign_cpu', 'the default')} CPUs) or with throttling marks "
                 "the trial disturbed; kit run re-ran it at once in its plan position "
                 f"({d.get('reruns', 0)} re-run(s) in this run). {len(still)} counted trial(s) were still disturbed "
                 "after the re-runs; a comparison whose sides differ in them is called suspect. Phases shorter "
                 "than five sampling periods are not judged."],
             "tables": [{"caption": "Foreign CPU (CPUs busy outside the trial) per arm and phase",
                         "columns": ["arm", "phase", "judged phases", "median foreign CPU", "max", "still disturbed"],
                         "rows": rows}], "figures": []}]


def sequential_section(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """A run made with --until-conclusive: its looks, levels and decisions, and what stayed open and why."""
    seq = analysis.get("sequential")
    if not isinstance(seq, dict):
        return []
    sched = seq.get("schedule") or {}
    looks = [[str(lk.get("repetitions")), f"{float(lk.get('alpha') or 0):.2g}",
              ", ".join(f"{x['key']}: {x['status']}" for x in lk.get("decisions") or [])[:400]]
             for lk in seq.get("looks_taken") or []]
    opened = [[o.get("key", ""), o.get("why", "")] for o in seq.get("open") or []]
    why = {"conclusive": "every testable hypothesis was decided", "budget": "the next look would have passed the "
           "budget"}.get(str(seq.get("stop_reason")), "it reached its maximum repetitions")
    return [{"id": "sequential", "title": "Stopping when conclusive",
             "paragraphs": [
                 f"The run added interleaved blocks and looked at its hypotheses after {sched.get('looks')} "
                 f"repetitions per arm; it stopped at {seq.get('stopped_at')} because {why}. Each look tests at its "
                 "own level, the increment of an O'Brien-Fleming-type alpha-spending function; the increments add up "
                 f"to alpha = {sched.get('alpha')}, so the family-wise error over all looks stays at alpha (checked "
                 "by simulation in the kit's tests). A hypothesis is decided when the difference is significant or "
                 f"the arms are shown equivalent within {float(sched.get('margin') or 0):.0%} (two one-sided "
                 "Wilcoxon tests), Holm over both kinds of test at each look. The hypothesis table below uses the "
                 "nominal alpha on all the data; the decisions of this section are the ones that account for the "
                 "looks."],
             "tables": [{"caption": "Looks", "columns": ["repetitions", "level spent", "decisions"], "rows": looks},
                        *([{"caption": "Open hypotheses", "columns": ["hypothesis", "why"], "rows": opened}]
                          if opened else [])], "figures": []}]


def claims_context(analysis: dict[str, Any], where: str = "analysis.json") -> dict[str, Any]:
    """The paper-claims ledger the report opens with (kit.analysis.claims), checked; an analysis written
    before claims existed shows that none were recorded. Beside the rows: ``judged`` (the claims this run gave a
    verdict) and ``untested`` (the not-testable ones grouped by reason, one line each, with what would test
    them), so that the ledger of a run that can judge little (a CPU run of a GPU paper) fits on one screen."""
    from kit.analysis.claims import Ledger

    raw = analysis.get("claims")
    if raw is None:
        return {"headline": "no claims recorded (an analysis written before the kit judged papers' claims: "
                            "`kit report RUN` recomputes it)", "rows": [], "counts": {}, "conditions": [],
                "judged": [], "untested": []}
    ledger = Ledger.from_json(raw, where).as_dict()
    ledger.update(claim_groups(ledger["rows"]))
    return ledger


_COMMAND = re.compile(r"^`([^`]+)`\s*(.*)$")
_DATA = re.compile(r"the data: (?:an? )?(?:(\w+) )?stand-ins? for [^;]*")
_PROTOCOL = re.compile(r"(the protocol: the \S+ profile runs otherwise than the paper) \([^()]*\)")


def reason_group(reason: str) -> str:
    """A not-testable reason without what differs per claim (which datasets are stand-ins, which protocol keys
    differ): the line the report groups claims under. Why: on a CPU run of a GPU paper nearly every claim differs
    in the device, the data and the protocol; naming each claim's datasets and keys in the grouped line would
    give each claim its own line, and the ledger would not fit on a screen. The full reason stays in the row."""
    out = _DATA.sub(lambda m: f"the data: {'a ' + m.group(1) if m.group(1) else 'a'} stand-in for the paper's dataset",
                    reason)
    return _PROTOCOL.sub(r"\1", out)


def claim_groups(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``judged``: the rows with a verdict; ``untested``: the not-testable rows grouped by (reason without the
    per-claim details: :func:`reason_group`, what would test them), in the ledger's order, each group's claim ids
    compressed ("C1-C10"), its command and host apart (the command set as code)."""
    from kit.analysis.claims import BY_DESIGN

    judged = [r for r in rows if r["verdict"] != "not testable"]
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        if r["verdict"] != "not testable":
            continue
        would = r.get("would_test") or ""
        general = reason_group(r["reason"])
        g = groups.setdefault((general, would), {"reason": general, "would_test": would, "ids": [],
                                                     "rows": [], "by_design": would == BY_DESIGN})
        g["ids"].append(r["id"])
        g["rows"].append(r)
    untested = []
    for g in groups.values():
        m = _COMMAND.match(g["would_test"]) if not g["by_design"] else None
        g["command"], g["host"] = (m.group(1), m.group(2)) if m else ("", "" if g["by_design"] else g["would_test"])
        g["ids_text"] = id_ranges(g["ids"])
        g["shared"] = shared_reason(g["rows"])
        untested.append(g)
    return {"judged": judged, "untested": untested}


def shared_reason(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The full reason and differences of a group's rows when every row has the same ones (None otherwise). Why:
    ten claims not testable for one reason used to repeat that 8-line reason in ten rows; said once above the
    rows, the list of claims reads in one screen."""
    first = (rows[0].get("reason"), list(rows[0].get("differences") or []))
    if any((r.get("reason"), list(r.get("differences") or [])) != first for r in rows[1:]):
        return None
    return {"reason": first[0], "differences": first[1]}


def untested_hypotheses(hyps: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The hypotheses not tested, grouped by their reason with the metric and phase taken out ("no paired
    measurements of GPU temperature in the train phase" and the same for H3's CPU temperature are one reason),
    one line per group: which hypotheses, metrics and phases, and the reason once."""
    groups: dict[str, dict[str, Any]] = {}
    for h in hyps:
        if h.get("tested"):
            continue
        label, phase = str(h.get("label") or h.get("metric") or ""), str(h.get("phase") or "")
        decision, why = str(h.get("decision") or "not tested"), str(h.get("reason") or "")
        reason = f"{decision}: {why}" if why and decision != "not tested" else (why or decision)
        general = reason.replace(f" in the {phase} phase", "").replace(label, "its metric") if label else reason
        g = groups.setdefault(general, {"reason": general, "items": {}})
        g["items"].setdefault(f"{h['id']} {label}".strip(), []).append(phase)
    out = []
    for g in groups.values():
        items = ", ".join(f"{k} ({', '.join(p for p in ph if p)})" if any(ph) else k for k, ph in g["items"].items())
        out.append({"which": items, "reason": g["reason"]})
    return out


def id_ranges(ids: list[str]) -> str:
    """"C1-C10, C12" for consecutive numbered ids of one prefix, in the given order."""
    out: list[str] = []
    run: list[tuple[str, int, str]] = []

    def flush() -> None:
        if not run:
            return
        if len(run) >= 3:
            out.append(f"{run[0][2]}-{run[-1][2]}")
        else:
            out.extend(x[2] for x in run)
        run.clear()

    for i in ids:
        m = re.fullmatch(r"([A-Za-z_.-]*)(\d+)", i)
        if m and run and run[-1][0] == m.group(1) and run[-1][1] + 1 == int(m.group(2)):
            run.append((m.group(1), int(m.group(2)), i))
            continue
        flush()
        if m:
            run.append((m.group(1), int(m.group(2)), i))
        else:
            out.append(i)
    flush()
    return ", ".join(out)


def descriptive_rows(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """The descriptives as a reader reads them: values in their unit (bytes in KiB/MiB/GiB), the unit shown
    once in the metric cell (none for bytes: each value carries it)."""
    out = []
    for d in analysis.get("descriptives", []):
        unit = d.get("unit") or ""
        row = dict(d)
        row["unit_shown"] = "" if unit == "B" else unit
        for k in ("mean", "sd", "median", "iqr", "min", "max"):
            row[f"{k}_text"] = fmt_value(d.get(k), unit)
        out.append(row)
    return out


def banner_cost(analysis: dict[str, Any], said: dict[str, Any]) -> str | None:
    """What the reduced profile costs this run, for the profile banner, unless the answer's warnings already say
    it (then the banner names the profile alone: one fact, said once)."""
    cost = profile_warning(analysis).split("; ", 1)[-1]
    return None if any(cost in str(w) for w in said.get("warnings") or []) else cost


def unmeasured_groups(measured: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The metrics this run did not measure, grouped by reason in first-seen order: one line per reason naming
    its metrics ("GPU utilisation (%), GPU temperature (°C), ...: nvml: ... (fix: ...)"). Why: a host without
    NVML or RAPL gave one reason to seven or four metrics, and the table repeated it in each row."""
    groups: dict[str, list[str]] = {}
    for m in measured:
        if not m.get("measured"):
            groups.setdefault(str(m.get("reason") or "no values"), []).append(
                f"{m.get('label') or m.get('metric')} ({m.get('unit')})" if m.get("unit") else str(m.get("label")))
    return [{"metrics": ", ".join(names), "reason": reason} for reason, names in groups.items()]


def _common(rows: list[dict[str, Any]], key: str) -> str:
    """The value every row shares under ``key`` ("" when they differ or there is none): said once above a table
    instead of in each row."""
    values = {str(r.get(key) or "") for r in rows}
    return values.pop() if len(values) == 1 else ""


def _design(manifest: Manifest, analysis: dict[str, Any]) -> dict[str, Any]:
    """The design check of analysis.json; for an analysis written before it existed, computed from the manifest."""
    if analysis.get("design"):
        return analysis["design"]
    from kit.analysis.design import design_table

    return design_table(manifest.spec, manifest.configs, analysis["arms"])


def build_context(manifest: Manifest, analysis: dict[str, Any], run_path: Path,
                  hooks: Hooks | None = None) -> dict[str, Any]:
    """Everything the templates show. ``hooks``: the study code the reader trusted (report sections);
    None decides as :func:`kit.studies.resolve_hooks` does by default."""
    hooks = hooks if hooks is not None else resolve_hooks(run_path, manifest)
    spec = manifest.spec
    arms = analysis["arms"]
    values = [v for v in analysis["values"] if v["value"] is not None]
    measured_values = [v for v in values if counts(v)]
    figs = []
    cfgs = manifest.configs
    cfg_labels = ({cid: config_label(cfg) for cid, cfg in cfgs.items()} if len(cfgs) > 1 else None)
    hyp_metrics = []
    tested = [h.get("metric_tested") or h["metric"] for h in analysis.get("hypotheses", [])] or \
        [h["metric"] for h in spec.get("hypotheses", [])]
    for metric in tested:
        for shown in (metric, *SHOWN_BESIDE.get(metric, ())):
            if shown not in hyp_metrics:
                hyp_metrics.append(shown)
    for metric in hyp_metrics:
        for phase in ("train", "infer"):
            if any(v["metric"] == metric and v["phase"] == phase for v in measured_values):
                title = f"{METRICS[metric].label}, {PHASE_WORD[phase]} phase"
                figs.append({"id": f"box-{metric}-{phase}", "title": title, "kind": "box",
                             "svg": figures.boxplot(measured_values, metric, phase, arms, title, cfg_labels)})
    for phase in ("train", "infer"):
        if any(v["metric"] == "time_s" and v["phase"] == phase for v in values):
            title = f"execution time against schedule position, {PHASE_WORD[phase]} phase"
            figs.append({"id": f"schedule-time-{phase}", "title": title, "kind": "schedule",
                         "svg": figures.schedule_plot(values, "time_s", phase, arms, title, cfg_labels)})
    from kit.report.telemetry_fig import telemetry_figure

    tel = telemetry_figure(run_path, arms)
    if tel is not None:
        figs.append(tel)
    figs = [kit_figure(f) for f in figs]  # every figure an image the kit encoded (kit.report.svg_safe)
    spec_path = (manifest.spec_source.path if manifest.spec_source else None) or "experiments/<study>/experiment.toml"
    profile = manifest.profile or "paper"
    reproduce = [f"kit run {spec_path}" + ("" if profile == "paper" else f" --profile {profile}")
                 + (f" --backend {manifest.backend['backend']}" if manifest.backend.get("backend") not in (None, "local") else ""),
                 f"kit report {run_path} --format html,latex,pdf"]
    hyps = analysis.get("hypotheses", [])
    design = on_this_host(_design(manifest, analysis), hyps) or {}
    threat_rows = ranked_threats(analysis)
    the_answer = answer(analysis, threat_rows)
    # an unfinished run (interrupted, partial, failed, or "running" with its process gone: kit.executors.liveness)
    # says so first: the templates open the page with run.incomplete, above the title and any sentence a reader
    # might copy
    state = run_state(run_path, manifest.status, manifest.executor.name)
    unfinished = incomplete_note(state, int(analysis["run"].get("finished") or 0),
                                 int(analysis["run"].get("planned") or 0), run_path)
    images = [{"framework": fw, "tag": img.get("tag", "?"), "digest": img.get("digest") or img.get("id") or "?"}
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
        "run": {**analysis["run"], "status": state.status, "incomplete": unfinished},
        "timed_share": timed_share_text(analysis["run"]),
        "timed_share_pct": (f"{analysis['run']['timed_share'] * 100:.0f} %"
                            if isinstance(analysis["run"].get("timed_share"), (int, float)) else ""),
        "goal": spec.get("goal", {}),
        "alpha": analysis["alpha"],
        "arms": arms,
        "hypotheses": hyps,
        "design": design,
        "design_test": _common(design.get("rows") or [], "test"),
        "design_n_note": _common(design.get("rows") or [], "n_note"),
        "untested_hypotheses": untested_hypotheses(hyps),
        "findings": [finding_text(h, analysis) for h in hyps if h.get("tested")],
        "answer": the_answer,
        "profile_warning": banner_cost(analysis, the_answer) if profile != "paper" else None,
        "param_counts": fmt_counts(analysis.get("equivalence", {}).get("param_counts")),
        "claims": claims_context(analysis),
        "figures": figs,
        "descriptives": descriptive_rows(analysis),
        "measured": analysis.get("measured", []),
        "unmeasured": unmeasured_groups(analysis.get("measured", [])),
        "equivalence": analysis.get("equivalence", {}),
        "threats": [t for t in threat_rows if not t["folded"]],
        "environment": environment_rows(manifest, analysis),
        "devices": {"columns": DEVICE_COLUMNS, "rows": device_rows(analysis),
                    "refusal": (analysis.get("devices") or {}).get("refusal")},
        "selftest": selftest_context(manifest),
        "power_note": POWER_NOTE if any(v["metric"].startswith("gpu_power") for v in values) else None,
        "energy_bounds": energy_bounds(analysis),
        "energy_note": ENERGY_NOTE if any(METRICS[v["metric"]].kind == "energy" for v in values
                                          if v["metric"] in METRICS) else None,
        "reproduce": reproduce,
        "images": images,
        "command": command,
        "raw_index": raw_index(run_path),
        "metrics": METRICS,
        "kit_version": analysis.get("kit_version"),
        # the study's own sections follow the main text; the kit's records of the run are appendices
        "sections": (study_code_section(hooks)
                     + extra_sections(manifest, analysis, hooks, reserved=KIT_IDS | {f["id"] for f in figs})),
        "appendix_sections": (excluded_section(analysis) + retried_section(analysis) + disturbance_section(analysis)
                              + sequential_section(analysis)),
    }
