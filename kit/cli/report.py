"""`kit report`: analyse a run directory and write its report; the answer, the paper's claims and the hypotheses
printed as the report opens with them, and the run's summary for --json (kit run and kit report)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Required, TypedDict

import typer
from rich.table import Table

from kit.cli.options import STUDY_HELP, TRUST_HELP, complete_run_dirs, need_run_dir
from kit.cli.output import Output, esc, fmt_p, print_json
from kit.fmt import in_user_terms

if TYPE_CHECKING:  # (the typed record loads with the report: `kit history`'s cached call registers this command only)
    from kit.analysis_record import Analysis

commands = typer.Typer()


class ClaimsSummary(TypedDict):
    """The paper claims' headline and verdicts in a run's summary."""

    headline: Any
    verdicts: list[ClaimVerdict]


class ClaimVerdict(TypedDict):
    id: Any
    statement: Any
    verdict: Any
    reason: Any


class HypothesisSummary(TypedDict):
    id: Any
    phase: Any
    metric: Any
    config_label: Any
    n_pairs: Any
    p: Any
    p_adj: Any
    effect_text: Any
    decision: Any


class RunSummary(TypedDict, total=False):
    """The run-summary document (kit run --json, kit report --json): the run's status and counts, and where the
    analysis has been written, the report files, the paper claims' verdicts and the hypotheses' decisions. The
    values read from analysis.json are shown as found (a run directory may be someone else's)."""

    run_dir: Required[str]
    experiment: Required[Any]
    status: Required[Any]
    trials: Required[Any]
    counts: Required[Any]
    analysis: str
    reports: list[str]
    claims: ClaimsSummary
    hypotheses: list[HypothesisSummary]


def run_summary(run_dir: Path) -> RunSummary:
    """A run directory's summary for --json: its status and counts, and where the analysis has been written, the
    report files, the paper claims' verdicts and the hypotheses' decisions."""
    import json

    from kit.executors.status import run_status

    st = run_status(run_dir)
    res = RunSummary(run_dir=str(run_dir), experiment=st.get("experiment"), status=st.get("status"),
                     trials=st.get("total"), counts=st.get("counts"))
    analysis_path = Path(run_dir) / "analysis.json"
    if analysis_path.is_file() and not analysis_path.is_symlink():
        try:  # a run directory may be someone else's: capped, never a link, and only read (kit report recomputes it)
            if analysis_path.stat().st_size > 256 << 20:
                raise ValueError("analysis.json is larger than 256 MiB")
            loaded = json.loads(analysis_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        analysis = loaded if isinstance(loaded, dict) else {}
        res["analysis"] = str(analysis_path)
        res["reports"] = sorted(str(p) for p in (Path(run_dir) / "report").glob("*") if p.is_file()) \
            if (Path(run_dir) / "report").is_dir() else []
        raw_claims = analysis.get("claims")
        claims = raw_claims if isinstance(raw_claims, dict) else {}
        res["claims"] = ClaimsSummary(headline=claims.get("headline"), verdicts=[
            ClaimVerdict(id=c.get("id"), statement=c.get("statement"), verdict=c.get("verdict"), reason=c.get("reason"))
            for c in claims.get("rows") or [] if isinstance(c, dict)])
        res["hypotheses"] = [
            HypothesisSummary(id=h.get("id"), phase=h.get("phase"), metric=h.get("metric"),
                              config_label=h.get("config_label"), n_pairs=h.get("n_pairs"), p=h.get("p"),
                              p_adj=h.get("p_adj"), effect_text=h.get("effect_text"), decision=h.get("decision"))
            for h in analysis.get("hypotheses") or [] if isinstance(h, dict)]
    return res


# Every JSON document the kit prints (--json) or writes (--json-file) opens with its schema, {"name": "kit.NAME",
# "version": N}, described by kit/schemas/NAME.schema.json (shipped in the package), and the kit's version: a reader



@commands.command("report")
def report_cmd(
    ctx: typer.Context,
    run_dir: Annotated[Path, typer.Argument(help="A run directory made by `kit run`.", autocompletion=complete_run_dirs)],
    format: Annotated[str, typer.Option("--format", "-f", help="Comma-separated, any of: html, latex, pdf.")] = "html",
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help=TRUST_HELP)] = False,
    study: Annotated[Path | None, typer.Option("--study", help=STUDY_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout (analysis, report files, claims, hypotheses); the tables go to stderr.")] = False,
    reanalyse: Annotated[bool, typer.Option("--reanalyse", help="Recompute the analysis even where the stored, sealed analysis.json still holds.")] = False,
    verify_all: Annotated[bool, typer.Option("--verify-all", help="Check the stored analysis's seal by re-hashing every input file, not only those whose size or mtime moved.")] = False,
    redraw: Annotated[bool, typer.Option("--redraw", help="Draw every figure afresh instead of taking it from the figure cache (~/.cache/kit/figures or $KIT_FIGURE_CACHE); --reanalyse does too.")] = False,
) -> None:
    """Analyse a run directory (no trial is run) and write its report.

    A stored analysis.json is reused while its seal holds (this kit made it from the run's files as they are now);
    otherwise it is recomputed."""
    io = Output.of(ctx)
    formats = tuple(f.strip() for f in format.split(",") if f.strip())
    bad = [f for f in formats if f not in ("html", "latex", "pdf")]
    if bad or not formats:
        raise typer.BadParameter(f"{', '.join(bad) or 'nothing'}: give html, latex and/or pdf, comma-separated",
                                 param_hint="--format")
    need_run_dir(run_dir)
    if json_out:
        io.to_stderr()
    from kit.trust import StudyTrust

    make_report(io, run_dir, formats, StudyTrust(trust_run_copy=trust_study_code, study_dir=study),
                reuse=not reanalyse, verify_all=verify_all, redraw=redraw or reanalyse)
    if json_out:
        print_json(io, run_summary(run_dir), "run-summary")


def _print_incomplete(io: Output, run_dir: Path, finished: int, planned: int) -> None:
    """The line an unfinished run's report opens with (kit.executors.liveness.incomplete_note), its hint runnable
    from here."""
    from kit.executors.liveness import incomplete_note, run_state
    from kit.store import RunDir

    man = RunDir.open(run_dir).manifest()
    note = incomplete_note(run_state(Path(run_dir), man.status, man.executor.name), finished, planned, Path(run_dir))
    if note:
        io.out.print(f"[yellow]{esc(in_user_terms(note))}[/]", soft_wrap=True)


def make_report(io: Output, run_dir: Path, formats: tuple[str, ...], trust: Any = None, reuse: bool = False,
                verify_all: bool = False, redraw: bool = False) -> None:
    """Analyse (``reuse``: take the stored analysis while its seal holds, kit.analysis.analyze.current_analysis)
    and render the asked formats (``redraw``: no figure from the figure cache); print the answer, the claims and
    the hypotheses."""
    from kit.analysis.analyze import analyze_run, current_analysis
    from kit.report import write_report
    from kit.report.answer import answer

    if reuse:
        analysis, recomputed = current_analysis(Path(run_dir), trust=trust, verify_all=verify_all)
    else:
        analysis, recomputed = analyze_run(run_dir, trust=trust), True
    paths = write_report(run_dir, analysis, formats, trust, redraw=redraw)
    _print_incomplete(io, run_dir, analysis.run.finished, analysis.run.planned)
    io.out.print(f"[bold]Answer:[/] {esc(answer(analysis)['headline'])}", soft_wrap=True)
    _print_claims(io, analysis)
    _print_hypotheses(io, analysis)
    io.out.print(f"analysis: [bold]{esc(Path(run_dir) / 'analysis.json')}[/]"
                 + ("" if recomputed else " (stored, its seal holds; --reanalyse recomputes it)"))
    for p in paths:
        io.out.print(f"report: [bold]{esc(p)}[/]")
    print_study_notice(io, analysis.study_code.get("notice"))


def print_study_notice(io: Output, notice: object) -> None:
    """The study code's notice (whose analysis.py/report.py ran, or why none did), when it has one."""
    if notice:
        io.err.print(f"[yellow]note:[/] {esc(notice)}", highlight=False, soft_wrap=True)




def _print_claims(io: Output, analysis: Analysis) -> None:
    """The paper's findings first: the headline, one row per claim this run judged (this run's value, the
    verdict), then one line per reason for the claims it could not test, with what would test them."""
    from kit.report.claims_view import claims_context

    ledger = claims_context(analysis)
    io.out.print(f"[bold]Did the paper's findings hold?[/] {esc(ledger['headline'])}")
    if not ledger["rows"]:
        return
    colour = {"replicated": "green", "contradicted": "red", "inconclusive": "yellow"}
    if ledger["judged"]:
        table = Table(title=None)
        for col in ("claim", "the paper found", "this run", "verdict"):
            table.add_column(col, overflow="fold")
        for c in ledger["judged"]:
            style = colour.get(str(c["verdict"]), "dim")
            shown = "p = " in str(c["value_text"] or "")  # the value's own text may carry its p already
            n_fam = c.get("family_size") or 0
            p = (f"\np = {c['p']:.3g}" if c.get("p") is not None and not shown else "") + (
                f"; Holm over {n_fam} claim{'s' if n_fam != 1 else ''}: {c['p_adjusted']:.3g}"
                if c.get("p_adjusted") is not None else "")
            table.add_row(esc(f"{c['id']} ({c['source']})"), esc(c["statement"]), esc(str(c["value_text"] or "-") + p),
                          f"[{style}]{esc(c['verdict'])}[/]: {esc(c['reason'])}")
        io.out.print(table)
    for g in ledger["untested"]:
        would = (f" Would test {'it' if len(g['ids']) == 1 else 'them'}: {g['command']} {g['host']}." if g["command"]
                 else f" Would test {'it' if len(g['ids']) == 1 else 'them'}: {g['host']}." if g["host"] else "")
        io.out.print(f"[dim]not testable[/] {esc(g['ids_text'])}: {esc(g['reason'])}.{esc(would)}", soft_wrap=True)


def _print_hypotheses(io: Output, analysis: Analysis) -> None:
    """This run's answer in sentences (kit.report.answer: the faster side named, r >= 1, with its interval and
    basis), the warnings that qualify it, one line for what was not testable here; then the tested rows."""
    from kit.report.answer import answer

    ans = answer(analysis)
    for line in ans["decided"] + ans["open"]:
        io.out.print(f"  {esc(line)}", soft_wrap=True)
    for w in ans["warnings"]:
        io.out.print(f"[yellow]warning:[/] {esc(w)}", soft_wrap=True)
    if ans["untestable"]:
        io.out.print(f"[dim]{esc(ans['untestable'])}[/]", soft_wrap=True)
    tested = [h for h in analysis.hypotheses if h.tested]
    if not tested:
        return
    table = Table(title="Hypotheses tested")
    for col in ("id", "phase", "metric", "n", "test", "p (Holm)", "effect", "decision"):
        table.add_column(col, overflow="fold")
    for h in tested:
        metric = h.metric + (f" [{h.config_label}]" if h.config_label else "")
        table.add_row(*(esc(v) for v in (h.id, h.phase, metric, str(h.n_pairs), h.test_method or "-",
                                           fmt_p(h.p_adj), h.effect_text or "-", h.decision)))
    io.out.print(table)
