"""The report's appendices on the run itself: trials left out, attempts re-run, host load, sequential looks.

Apart from kit.report.context: each reads one table of the analysis and lays it out as a section, and none
of them feeds the answer the report opens with.
"""

from __future__ import annotations

from typing import Any

from kit.analysis_record import Analysis
from kit.analysis_rows import PhaseLoad
from kit.records import JsonValue
from kit.report.sections import Cell, Details, Section, Table


def _c(v: JsonValue) -> Cell:
    """A value of a JSON table as a table cell (text or a number, as it was written)."""
    return v if v is None or isinstance(v, str | int | float) else str(v)


def excluded_section(analysis: Analysis) -> list[Section]:
    """Every trial the analysis did not use, with its file and reason (none: no section)."""
    rows: list[list[Cell]] = [[_c(e["trial_id"]), _c(e.get("arm") or ""), _c(e.get("status") or ""),
                               "warm-up" if e.get("warmup") else "measured", _c(e["file"]), _c(e["reason"])]
                              for e in analysis.excluded_trials]
    if not rows:
        return []
    n_invalid = sum(1 for e in analysis.excluded_trials if e.get("status") == "invalid")
    return [{"id": "excluded-trials", "title": "Excluded trials",
             "paragraphs": [f"{len(rows)} trial(s) are not used by any statistic: failed, skipped or out of memory as "
                            f"their status says, or ({n_invalid}) excluded because their files hold impossible values "
                            "(not finite, or negative where the quantity cannot be). A block missing one of its trials "
                            "drops out of the paired tests. The files stay in the run directory."],
             "tables": [{"caption": "Excluded trials", "columns": ["trial", "arm", "status", "kind", "file", "reason"],
                         "rows": rows}], "figures": []}]


def retried_section(analysis: Analysis) -> list[Section]:
    """The attempts a retry replaced (none: no section). Failures (an error, a time limit, a kill) are listed one
    per row with why and the file they are kept in; disturbed attempts, which kit run re-ran at once because the
    host was busy and which failed nothing, are one summary line with their list behind a <details> element.
    Why: under a persistent load nearly every trial is re-run, and a table of dozens of "disturbed" rows under
    "Failed attempts" hid the one attempt that did fail (issue 39)."""
    entries = analysis.retried_trials
    if not entries:
        return []
    failed = [e for e in entries if e.get("status") != "disturbed"]
    shaken = [e for e in entries if e.get("status") == "disturbed"]
    paragraphs = []
    tables: list[Table] = []
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
                       "rows": [[_c(e["trial_id"]), _c(e.get("arm") or ""), str(e.get("attempt", "")),
                                 _c(e.get("status") or ""), _c(e.get("signal") or ""), _c(e["reason"]), _c(e["file"]),
                                 _c(e.get("status_now") or "")] for e in failed]})
    else:
        paragraphs.append("No attempt failed.")
    details: list[Details] = []
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
                                    "rows": [[_c(e["trial_id"]), _c(e.get("arm") or ""), str(e.get("attempt", "")),
                                              _c(e["file"]), _c(e.get("status_now") or "")] for e in shaken]}]})
    return [{"id": "retried-trials", "title": "Retried trials", "paragraphs": paragraphs, "tables": tables,
             "details": details, "figures": []}]


def disturbance_section(analysis: Analysis) -> list[Section]:
    """What ran beside the timed phases: per arm and phase the foreign CPU, the re-runs, what stayed disturbed."""
    d = analysis.disturbance
    if not d.phases:
        return []
    by: dict[tuple[str, str], list[PhaseLoad]] = {}
    for r in d.phases:
        by.setdefault((str(r.arm), r.phase), []).append(r)
    rows: list[list[Cell]] = []
    for (arm, phase), rs in sorted(by.items()):
        judged = [r for r in rs if r.judged]
        foreign = sorted(float(r.foreign_cpu) for r in judged if r.foreign_cpu is not None)
        rows.append([arm, phase, f"{len(judged)} of {len(rs)}",
                     f"{foreign[len(foreign) // 2]:.2f}" if foreign else "–", f"{foreign[-1]:.2f}" if foreign else "–",
                     str(sum(1 for r in rs if r.disturbed))])
    still = d.still_disturbed_trials
    return [{"id": "host-conditions", "title": "Host conditions during the trials",
             "paragraphs": [
                 "Each timed phase of each trial was checked while the run went on: the CPU time of everything "
                 "outside the trial and the kit (host busy time minus the trial's own CPU time, from its markers, "
                 "minus the collectors'), CPU frequency against the idle baseline, and on GPUs foreign processes "
                 "and throttling. A phase with more foreign CPU than design.disturbance_cpu "
                 "(the default CPUs) or with throttling marks "
                 "the trial disturbed; kit run re-ran it at once in its plan position "
                 f"({d.reruns} re-run(s) in this run). {len(still)} counted trial(s) were still disturbed "
                 "after the re-runs; a comparison whose sides differ in them is called suspect. Phases shorter "
                 "than five sampling periods are not judged."],
             "tables": [{"caption": "Foreign CPU (CPUs busy outside the trial) per arm and phase",
                         "columns": ["arm", "phase", "judged phases", "median foreign CPU", "max", "still disturbed"],
                         "rows": rows}], "figures": []}]


def sequential_section(analysis: Analysis) -> list[Section]:
    """A run made with --until-conclusive: its looks, levels and decisions, and what stayed open and why."""
    if analysis.sequential is None:
        return []
    # still a JSON table (kit.analysis.sequential.summary writes it), read by name as it was written
    seq: Any = analysis.sequential
    sched = seq.get("schedule") or {}
    looks: list[list[Cell]] = [[str(lk.get("repetitions")), f"{float(lk.get('alpha') or 0):.2g}",
              ", ".join(f"{x['key']}: {x['status']}" for x in lk.get("decisions") or [])[:400]]
             for lk in seq.get("looks_taken") or []]
    opened: list[list[Cell]] = [[o.get("key", ""), o.get("why", "")] for o in seq.get("open") or []]
    open_table: list[Table] = ([{"caption": "Open hypotheses", "columns": ["hypothesis", "why"], "rows": opened}]
                               if opened else [])
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
                        *open_table], "figures": []}]
