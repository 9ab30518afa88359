"""The page `kit reproduce-all` ends with: what was reproduced on this host, study by study, claim by claim.

``<runs>/reproduce-all/summary.html`` and ``summary.tex`` (templates reports/templates/reproduce_all.html.j2 and
latex/reproduce_all.tex.j2, rendered with the report's own Jinja2 environments, so text from run directories is
escaped as in every report). It opens with the headline over every study's claims, then one row per study
(profile, status or why skipped, wall time, the relative link to its report, the framework versions its trials
reported) and every claim with its verdict. Each run's analysis is read through
:func:`kit.analysis.analyze.current_analysis` (recomputed unless its seal holds), never taken from the file as
found; a run made before claims were judged says "no claims recorded".
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.reproduce.execute import Outcome, QuietEvents, ReproduceEvents, Result, RunStudy, run_plan
from kit.reproduce.needs import Host, discover
from kit.reproduce.plan import make_plan
from kit.reproduce.state import STATE_DIR, check_state, load_state
from kit.store import RunDir, atomic_write_bytes
from kit.studies import BUNDLED
from kit.trust import StudyTrust

VERDICTS = ("replicated", "contradicted", "inconclusive", "not testable")
CLAIM_TEXT = ("id", "source", "statement", "kind", "paper_text", "value_text", "verdict", "reason")
SUMMARY_HTML = "summary.html"
SUMMARY_TEX = "summary.tex"


@dataclass(frozen=True)
class ClaimRow:
    """One paper claim as the study's analysis judged it (kit.analysis.claims)."""

    id: str
    source: str
    statement: str
    kind: str
    paper_text: str
    value_text: str
    verdict: str
    reason: str
    differences: tuple[str, ...] = ()


@dataclass(frozen=True)
class StudyRow:
    """One study on the page: how it ended here, where its report is, and its claims."""

    study: str
    title: str
    profile: str
    status: str  # complete | incomplete | failed | skipped
    reason: str = ""
    wall_s: float | None = None
    run_dir: str = ""
    report_href: str = ""  # relative to the summary page; "" when the run has no report
    frameworks: tuple[str, ...] = ()
    claims_headline: str = ""
    claims_note: str = ""  # why there are no claim rows (none recorded, analysis failed)
    claims: tuple[ClaimRow, ...] = ()
    answer: str = ""  # the run's answer line (kit.report.answer), the sentence its report and `kit run` print


@dataclass(frozen=True)
class Summary:
    headline: str
    counts: Mapping[str, int]
    hosts: tuple[str, ...]  # as the runs' manifests recorded them (one line per distinct host)
    host_now: str  # the GPUs this call saw, which chose the profiles
    kit_version: str
    profile: str
    budget_s: float | None
    generated: str
    rows: tuple[StudyRow, ...] = field(default_factory=tuple)


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    if s < 7 * 86400:
        return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
    return f"{s // 86400} days" + (f" {s % 86400 // 3600} h" if s % 86400 // 3600 else "")  # a CPU protocol's months


def read_claims(raw: Any) -> tuple[str, tuple[ClaimRow, ...], str]:
    """(headline, rows, note) from an analysis's "claims" value, defensively: absent in older runs, and a value
    of another shape is named, never shown as if it were a verdict."""
    if raw is None:
        return "", (), "no claims recorded"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("rows", []), list):
        return "", (), "claims unreadable (not the kit's claims table)"
    rows = []
    for r in raw.get("rows", []):
        if not isinstance(r, Mapping):
            return "", (), "claims unreadable (a row is not a table)"
        diffs = r.get("differences") or []
        text = {k: str(r.get(k) or "") for k in CLAIM_TEXT}
        rows.append(ClaimRow(**text, differences=tuple(str(d) for d in diffs) if isinstance(diffs, list) else ()))
    headline = raw.get("headline")
    return (headline if isinstance(headline, str) else ""), tuple(rows), "" if rows else "no claims recorded"


def headline(counts: Mapping[str, int]) -> str:
    """'N of M claims replicated, X contradicted, ... on this host' (the categories that occur)."""
    total = sum(counts.values())
    if not total:
        return "no claims recorded on this host"
    rest = [f"{n} {v}" for v, n in counts.items() if v != "replicated" and n]
    return ", ".join([f"{counts.get('replicated', 0)} of {total} claims replicated", *rest]) + " on this host"


def _host_line(host: Mapping[str, Any]) -> str:
    mem = host.get("memory_total_bytes")
    gpus = [str(g.get("name") or f"GPU {g.get('index')}") for g in host.get("gpus") or [] if isinstance(g, Mapping)]
    parts = [str(host.get("cpu_model") or "unknown CPU"), f"{host.get('cpu_logical') or '?'} logical CPUs",
             f"{mem / 2**30:.1f} GiB memory" if isinstance(mem, int | float) else "memory unknown",
             f"GPUs: {', '.join(gpus)}" if gpus else "no GPU"]
    return ", ".join(parts)


def _study_row(result: Result, runs_dir: Path, out_dir: Path, hosts: list[str]) -> StudyRow:
    from kit.analysis.analyze import current_analysis

    e = result.entry
    row = StudyRow(e.study, e.title, e.profile, result.status, result.reason, result.wall_s, result.run_dir)
    if not result.run_dir:
        return row
    path = runs_dir / result.run_dir
    report = path / "report" / "index.html"
    href = urllib.parse.quote(Path(os.path.relpath(report, out_dir)).as_posix()) if report.is_file() else ""
    try:
        man = RunDir.open(path).manifest()
        if man.experiment != e.study:  # never one study's claims under another's name (check_state refuses it first)
            return replace(row, claims_note=f"not this study's run: {result.run_dir} is a run of {man.experiment}")
        line = _host_line(man.host)
        if line not in hosts:
            hosts.append(line)
        analysis = current_analysis(path)[0]
    except KitError as err:
        return replace(row, report_href=href, claims_note=f"no analysis: {err.one_line()}")
    frameworks = tuple(f"{t.get('framework') or t.get('arm')} {t.get('framework_version') or '?'}"
                       for t in analysis.trial_env)
    head, claims, note = read_claims(analysis.claims)
    from kit.report.answer import answer

    return replace(row, report_href=href, frameworks=frameworks, claims_headline=head, claims=claims,
                   claims_note=note, answer=answer(analysis)["headline"])


def summarize(results: Sequence[Result], runs_dir: Path, host: Host, profile: str,
              budget_s: float | None = None) -> Summary:
    """The page's content: every study's row (its analysis read now) and the headline over all their claims."""
    import kit

    out_dir = runs_dir / STATE_DIR
    hosts: list[str] = []
    rows = tuple(_study_row(r, runs_dir, out_dir, hosts) for r in results)
    counts = {v: 0 for v in VERDICTS}
    for row in rows:
        for c in row.claims:
            counts[c.verdict] = counts.get(c.verdict, 0) + 1
    return Summary(headline(counts), counts, tuple(hosts), host.describe(), kit.__version__, profile, budget_s,
                   time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), rows)


def write_summary(summary: Summary, runs_dir: Path) -> list[Path]:
    """summary.html and summary.tex under <runs>/reproduce-all/, each written by rename."""
    from markupsafe import Markup

    from kit.report import html, latex

    out_dir = runs_dir / STATE_DIR
    ctx = {"s": summary, "duration": fmt_duration}
    tex = latex.environment()
    # an href's target is already %-quoted (urllib): only TeX's own specials in it need a backslash
    tex.filters["url"] = lambda u: Markup(str(u).replace("\\", "").replace("%", r"\%").replace("#", r"\#"))
    paths = []
    for name, env, template in ((SUMMARY_HTML, html.environment(), "reproduce_all.html.j2"),
                                (SUMMARY_TEX, tex, "reproduce_all.tex.j2")):
        atomic_write_bytes(out_dir / name, env.get_template(template).render(**ctx).encode("utf-8"))
        paths.append(out_dir / name)
    return paths


def reproduce_all(runs_dir: Path, run_study: RunStudy, *, profile: str = "auto", budget_s: float | None = None,
                  only: Sequence[str] = (), experiments: Path = BUNDLED, host: Host | None = None,
                  events: ReproduceEvents | None = None, dry_run: bool = False,
                  trust: StudyTrust | None = None, data_dir: Path | None = None) -> Outcome:
    """Discover, plan (printed through ``events.planned`` before anything runs), run, and write the summary.

    The state file is checked first (:func:`kit.reproduce.state.check_state`): a run it names that is not the
    study's, or whose code this reader does not trust, stops the command before anything runs."""
    events = events or QuietEvents()
    host = host if host is not None else Host.detect()
    studies = discover(experiments, only)
    states = load_state(runs_dir)
    check_state(states, studies, runs_dir, trust or StudyTrust())
    plan = make_plan(studies, host, profile, runs_dir, states, budget_s, data_dir=data_dir)
    events.planned(plan, host, budget_s)
    if dry_run:
        return Outcome(tuple(Result(e, "skipped", "dry run") for e in plan))
    outcome = run_plan(plan, runs_dir, run_study, events, budget_s)
    paths = write_summary(summarize(outcome.results, runs_dir, host, profile, budget_s), runs_dir)
    return replace(outcome, summary=tuple(paths))
