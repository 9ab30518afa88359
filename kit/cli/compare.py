"""`kit compare`, `kit bisect` and `kit history`: two runs (or two arms of one) compared, the first release that
changed a metric, and a metric across the runs of successive versions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kit.cli.options import (
    ContainerBackend,
    FailOn,
    JsonFile,
    Phase,
    ProfileOpt,
    check_names,
    complete_experiments,
    complete_run_dirs,
    need_run_dir,
)
from kit.cli.output import Output, esc, fmt_p, old_json_form, print_json
from kit.errors import KitError, UsageError

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from kit.compare_records import CompareRow

commands = typer.Typer()



def _fmt_mde(row: CompareRow) -> str:
    if row.decidable is False:
        return "none (n too small)"
    return "unknown" if row.mde is None else f"{row.mde:.1%}"


MarkdownOpt = Annotated[bool, typer.Option("--markdown", help="Print the answer as a GitHub-flavoured Markdown table "
                                           "on stdout (a pull request, an issue, $GITHUB_STEP_SUMMARY); the tables "
                                           "go to stderr. The exit code is unchanged.")]
OnlyChangesOpt = Annotated[bool, typer.Option("--only-changes", help="With --markdown: only regressions, "
                                              "improvements and suspect changes; the rest counted in one line.")]
VerifyAllOpt = Annotated[bool, typer.Option("--verify-all", help="Check each run's analysis seal by re-hashing all "
                                            "of its raw files, not only those whose size or mtime changed (and "
                                            "believe no cached entry).")]


def _markdown_on_stdout(io: Output, command: str, markdown: bool, only_changes: bool, json_out: bool) -> None:
    """--markdown prints the Markdown alone on stdout (the tables go to stderr, as with --json); stdout holds one
    document, so --markdown with --json is refused, and --only-changes shapes the Markdown only."""
    if markdown and json_out:
        raise UsageError("--markdown and --json both print on stdout", where=f"{command} --markdown --json",
                         fix="keep one on stdout and write the JSON to a file with --json-file PATH")
    if only_changes and not markdown:
        raise UsageError("--only-changes selects the rows of the Markdown output", where=f"{command} --only-changes",
                         fix="add --markdown")
    if markdown:
        io.to_stderr()


@commands.command(short_help="Compare two runs, or two arms of one run: ratio, test, effect size and a verdict per metric.")
def compare(
    ctx: typer.Context,
    run_a: Annotated[Path, typer.Argument(help="Baseline run directory (with --arms: the run whose arms are compared).",
                                          autocompletion=complete_run_dirs)],
    run_b: Annotated[Path | None, typer.Argument(help="Candidate run directory (omit with --arms).",
                                                 autocompletion=complete_run_dirs)] = None,
    arms: Annotated[str | None, typer.Option(help="Compare two arms of one run instead, paired by block: BASELINE,CANDIDATE (e.g. the image versions of `kit run --images`).")] = None,
    threshold: Annotated[float, typer.Option(help="Practical threshold: |B/A - 1| a verdict needs (0.05 = 5 %).")] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level after Holm's correction.")] = 0.05,
    allow_different_hosts: Annotated[bool, typer.Option(help="Compare runs of different hosts or GPU models.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON on stdout; the tables go to stderr.")] = False,
    json_file: JsonFile = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write the comparison as HTML here.")] = None,
    fail_on_: Annotated[FailOn | None, typer.Option("--fail-on", help="Exit 1 on: regression, improvement or change (CI gating); exit 4 when none was found but a significant change is suspect (the runs' host conditions differ: re-run); exit 3 when a comparison was inconclusive.")] = None,
    allow_inconclusive: Annotated[bool, typer.Option(help="With --fail-on: exit 0, not 3, when comparisons are inconclusive.")] = False,
    metric: Annotated[list[str] | None, typer.Option("--metric", metavar="<str>", help="Compare only these metrics (repeatable; default time_s, throughput_ips, step_time_s, latency_ms, accuracy).")] = None,
    markdown: MarkdownOpt = False,
    only_changes: OnlyChangesOpt = False,
    verify_all: VerifyAllOpt = False,
) -> None:
    """Compare two runs, or two arms of one run (e.g. two framework versions): ratio, test, effect size,
    minimum detectable change and a three-way verdict per metric (change, no change, inconclusive)."""
    import dataclasses

    io = Output.of(ctx)
    old_json_form(json_out, run_a, run_b)
    _markdown_on_stdout(io, "kit compare", markdown, only_changes, json_out)
    if json_out:
        io.to_stderr()
    from kit.compare import (
        EXIT_SUSPECT,
        CompareOptions,
        compare_arms,
        compare_runs,
        conclusive_advice,
        exit_code,
        render_html,
    )

    fail_on = fail_on_.value if fail_on_ is not None else None
    need_run_dir(run_a)
    if run_b is not None:
        need_run_dir(run_b)
    opts = CompareOptions(threshold=threshold, alpha=alpha, allow_different_hosts=allow_different_hosts,
                          verify_all=verify_all)
    if metric:
        from kit.analysis.metrics import METRICS

        unknown = [m for m in metric if m not in METRICS]
        if unknown:
            raise KitError(f"unknown metric {unknown[0]!r}", where="--metric", fix=f"use one of: {', '.join(sorted(METRICS))}")
        opts = dataclasses.replace(opts, metrics=tuple(metric))
    if arms is not None:
        pair = [a.strip() for a in arms.split(",")]
        if run_b is not None or len(pair) != 2:
            raise KitError("--arms takes one run and two arms", where="kit compare",
                           fix="kit compare RUN --arms BASELINE_ARM,CANDIDATE_ARM")
        res = compare_arms(run_a, pair[0], pair[1], opts)
    elif run_b is None:
        raise KitError("no candidate run given", where="kit compare", fix="kit compare RUN_A RUN_B, or kit compare RUN --arms A,B")
    else:
        res = compare_runs(run_a, run_b, opts)
    from kit.report.answer import compare_answer, human_value

    said = compare_answer(res)
    io.out.print(f"[bold]Answer:[/] {esc(said['headline'])}", soft_wrap=True)
    for line in said["changed"][1:]:
        io.out.print(f"  {esc(line)}", soft_wrap=True)
    table = Table(title=esc(f"{res.experiment_b}: B vs A (threshold {threshold:.0%}, α {alpha})"))
    for col in ("config", "metric", "phase", "arm", "n", "median A", "median B", "B/A [95% CI]", "p (Holm)",
                "detectable", "verdict"):
        table.add_column(col, overflow="fold")
    style = {"regression": "red", "improvement": "green", "inconclusive": "yellow", "suspect": "magenta"}
    for r in res.rows:
        ci = "" if r.ratio_low is None else f" [{r.ratio_low:.3f}, {r.ratio_high:.3f}]"
        table.add_row(esc(r.config), esc(r.metric), esc(r.phase), esc(r.arm),
                      str(min(r.n_a, r.n_b)), esc(human_value(r.median_a, r.unit)),
                      esc(human_value(r.median_b, r.unit)),
                      esc(("-" if r.ratio is None else f"{r.ratio:.3f}") + ci),
                      fmt_p(r.p_adj), _fmt_mde(r),
                      f"[{style.get(r.verdict, 'white')}]{r.verdict}[/]")
    io.out.print(table)
    io.out.print(f"detectable: the smallest change the comparison would have found with power 80 % at its n and "
              f"observed noise (level alpha/m = {alpha}/{len(res.rows)}, the test's exact rejection region); "
              f"\"no change\" needs the {1 - 2 * alpha:.0%} interval of B/A inside [{1 / (1 + threshold):.3f}, "
              f"{1 + threshold:.3f}] (equivalence, TOST at {alpha})")
    for r in res.rows:
        if r.verdict == "suspect":
            io.out.print(f"[magenta]suspect[/] {esc(r.arm)} {esc(r.metric)} {esc(r.phase)} "
                      f"(would be {r.was}): {esc(r.suspect_cause or '')}")
        elif r.load_note:
            io.out.print(f"[yellow]under load[/] {esc(r.arm)} {esc(r.metric)} {esc(r.phase)} "
                      f"({r.verdict} stands): {esc(r.load_note)}", soft_wrap=True)
    advice = conclusive_advice(res)
    if advice:
        io.out.print(f"[yellow]{esc(advice)}[/]")
    if res.provenance_differences:
        from rich.markup import escape

        pt = Table(title="Provenance differences (and whether they could explain a changed verdict)")
        for col in ("what", "A", "B", "could explain a change"):
            pt.add_column(col, overflow="fold")
        for d in res.provenance_differences:
            pt.add_row(escape(d.key), escape(str(d.a)), escape(str(d.b)), escape(d.may_explain or "-"))
        io.out.print(pt)
    else:
        io.out.print("provenance: no differences")
    for c in res.claims_changed or ():
        io.out.print(f"[yellow]paper claim {esc(c.id)} changed verdict[/]: {esc(c.verdict_a)} in A "
                  f"({esc(c.value_a or '-')}) -> {esc(c.verdict_b)} in B ({esc(c.value_b or '-')}): "
                  f"{esc(c.statement)}")
        for why in c.could_explain[:8] or ["no provenance difference that could explain it: noise, or the "
                                               "host's state"]:
            io.out.print(f"  could explain it: {esc(why)}")
    if json_out or json_file:
        print_json(io, res.to_json(), "compare", json_file, stdout=json_out)
    if html_out:
        render_html(res, html_out)
    if markdown:
        import sys

        from kit.markdown import compare_markdown

        sys.stdout.write(compare_markdown(res, only_changes=only_changes))
        sys.stdout.flush()
    code = exit_code(res.counts, fail_on, allow_inconclusive)
    if code == 1:
        io.err.print(f"[red]{fail_on} found[/]: exit {code}")
    elif code == EXIT_SUSPECT:
        io.err.print(f"[magenta]no {fail_on} found, but a significant change is suspect[/]: the two sides ran in "
                      f"different host conditions; re-run on a quiet host: exit {code}")
    elif code:
        io.err.print(f"[yellow]no {fail_on} found, but the comparison could not have seen one everywhere[/]: exit {code} "
                      "(more repetitions, or --allow-inconclusive)")
    if code:
        raise typer.Exit(code)


@commands.command("bisect")
def bisect_cmd(
    ctx: typer.Context,
    spec: Annotated[Path, typer.Argument(help="Experiment TOML.", autocompletion=complete_experiments)],
    images: Annotated[str | None, typer.Option("--images", help="Image rows (or releases, e.g. tensorflow==2.20.0) of one framework in release order, known good first, known bad last, e.g. tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu.")] = None,
    between: Annotated[tuple[str, str] | None, typer.Option("--between", metavar="GOOD BAD", help="Bisect over every release on the index from GOOD to BAD, e.g. --between tensorflow==2.17.1 tensorflow==2.21.0 (releases with a wheel for the rows' Python, not yanked); only the releases the bisection visits are added as rows and built.")] = None,
    pre: Annotated[bool, typer.Option("--pre", help="With --between: include pre-releases.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the answer and the comparisons as Markdown on stdout (for an issue or a pull request); the tables go to stderr.")] = False,
    metric: Annotated[str, typer.Option(help="Metric that changed, e.g. time_s.")] = "time_s",
    phase_: Annotated[Phase, typer.Option("--phase", help="Phase of the metric.")] = Phase.train,
    profile: ProfileOpt = None,
    threshold: Annotated[float, typer.Option(help="Practical threshold: |B/A - 1| a change needs (0.05 = 5 %).")] = 0.05,
    alpha: Annotated[float, typer.Option(help="Significance level after Holm's correction.")] = 0.05,
    backend_: Annotated[ContainerBackend, typer.Option("--backend", help="Container backend that runs the images: docker (Docker or Podman) or apptainer.")] = ContainerBackend.docker,
    runs_dir: Annotated[Path, typer.Option(help="Where the comparison runs are created.")] = Path("runs"),
    data_dir: Annotated[Path | None, typer.Option(help="Directory with the dataset files (offline hosts).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the bisection as JSON on stdout; the tables go to stderr.")] = False,
    json_file: JsonFile = None,
) -> None:
    """Find the first release that changed a metric: the fewest paired runs, each a conclusive comparison."""
    io = Output.of(ctx)
    old_json_form(json_out, spec)
    check_names(str(spec), profile)
    if (images is None) == (between is None):
        raise KitError("give the releases either as --images GOOD,...,BAD or as --between GOOD BAD" if images is None
                       else "--images and --between both name the releases", where="kit bisect",
                       fix="--images tensorflow-2.19-cpu,tensorflow-2.21-cpu (rows or releases), or --between "
                           "tensorflow==2.17.1 tensorflow==2.21.0 (every release on the index between them)")
    if pre and between is None:
        raise KitError("--pre belongs to --between", where="--pre", fix="add --between GOOD BAD, or drop --pre")
    if json_out and markdown:
        raise KitError("--json and --markdown both print on stdout", where="kit bisect",
                       fix="keep one, and write the JSON with --json-file")
    if json_out or markdown:
        io.to_stderr()
    from kit.bisect import BisectOptions, releases_between, run_bisect
    from kit.cli.run import image_progress
    from kit.cli.ui import RichEvents
    from kit.run import RunOptions
    from kit.spec import load_spec

    backend, phase = backend_.value, phase_.value
    loaded = load_spec(spec, profile)
    opts = BisectOptions(metric=metric, phase=phase, threshold=threshold, alpha=alpha)
    run_opts = RunOptions(runs_root=runs_dir, backend=backend, data_dir=data_dir)
    if between is not None:
        releases = releases_between(loaded, between[0], between[1], pre=pre)
        io.out.print(f"{len(releases)} releases from {esc(between[0])} to {esc(between[1])} on the index: "
                     f"{esc(', '.join(r.partition('==')[2] for r in releases))} (rows are added and built only for "
                     "the releases the bisection visits)", soft_wrap=True)
    else:
        releases = (images or "").split(",")
    with RichEvents(io.err) as events:
        res = run_bisect(loaded, releases, opts, run_opts, events,
                         on_compare=lambda a, b: io.err.print(f"[bold]comparing {b} with {a}[/] (one interleaved run)"),
                         progress=image_progress(io))
    table = Table(title=f"kit bisect {loaded.experiment.id}: {metric} ({phase}), threshold {threshold:.0%}")
    for col in ("candidate", "baseline", f"{metric} B/A [95% CI]", "p (Holm)", "detectable", "verdict", "run"):
        table.add_column(col, overflow="fold")
    for c in res.comparisons:
        ci = "" if c.ratio_low is None else f" [{c.ratio_low:.3f}, {c.ratio_high:.3f}]"
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}{ci}"
        table.add_row(esc(c.candidate), esc(c.baseline), ratio, fmt_p(c.p_adj),
                      "unknown" if c.mde is None else f"{c.mde:.1%}", c.verdict, esc(c.run))
    io.out.print(table)
    io.out.print(esc(res.message()), soft_wrap=True)
    io.out.print(f"[bold]{esc(res.status)}[/]: {esc(res.answer)} ({res.n_comparisons} comparison(s))")
    if markdown:
        from kit.bisect import markdown as bisect_markdown

        typer.echo(bisect_markdown(res), nl=False)
    if json_out or json_file:
        print_json(io, res.to_json(), "bisect", json_file, stdout=json_out)
    if res.status in ("inconclusive", "non-monotonic"):
        raise typer.Exit(3)


def _publish_history(io: Output, runs_dir: Path, out_dir: Path, threshold: float, cache: bool) -> None:
    """`kit history --publish DIR`: the site of every series (kit.history_site), with progress on stderr."""
    from rich.progress import Progress

    from kit.history_site import publish

    with Progress(console=io.err, transient=True) as progress:
        task = progress.add_task("reading runs", total=None)
        site = publish(runs_dir, out_dir, threshold=threshold, use_cache=cache,
                       on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    io.out.print(f"{site.series} series from {site.runs_read + site.runs_reused} runs ({site.runs_read} read, "
                 f"{site.runs_reused} from the cache); {site.pages_written} file(s) written, {site.pages_unchanged} "
                 f"unchanged, {site.pages_removed} removed: {esc(str(site.index))}", soft_wrap=True)


@commands.command("history")
def history_cmd(
    ctx: typer.Context,
    runs_dir: Annotated[Path, typer.Argument(help="Directory holding many run directories.")],
    metric: Annotated[str, typer.Option(help="Metric to follow, e.g. time_s.")] = "time_s",
    phase_: Annotated[Phase, typer.Option("--phase", help="Phase of the metric.")] = Phase.train,
    arm: Annotated[str | None, typer.Option(help="Arm (framework) to follow; default the first.")] = None,
    experiment: Annotated[str | None, typer.Option(help="Only runs of this experiment.")] = None,
    threshold: Annotated[float, typer.Option(help="Practical threshold for a step (0.05 = 5 %).")] = 0.05,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write the plot and table as HTML here.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the history as JSON on stdout; the table goes to stderr.")] = False,
    json_file: JsonFile = None,
    cache: Annotated[bool, typer.Option(help="Reuse what earlier calls read from unchanged runs "
                                             "(~/.cache/kit/history or $KIT_HISTORY_CACHE).")] = True,
    markdown: MarkdownOpt = False,
    only_changes: OnlyChangesOpt = False,
    verify_all: VerifyAllOpt = False,
    publish: Annotated[Path | None, typer.Option("--publish", help="Write a static site of every series (all studies, metrics, phases and arms: --metric/--phase/--arm/--experiment do not restrict it) into this directory; works from file://.")] = None,
) -> None:
    """A metric across runs of successive versions, with the steps where it changed."""
    io = Output.of(ctx)
    old_json_form(json_out, runs_dir)
    _markdown_on_stdout(io, "kit history", markdown, only_changes, json_out)
    if json_out:
        io.to_stderr()
    phase = phase_.value
    if not runs_dir.is_dir():
        raise KitError("runs directory not found", where=str(runs_dir), fix="give the directory holding the run directories")
    if publish is not None:
        _publish_history(io, runs_dir, publish, threshold, cache)
        return

    from kit.history import history, render_html, shown_runs

    bar: list[tuple[Progress, TaskID]] = []  # (progress, task), started only when a run has to be read: none when cached

    def on_run(done: int, total: int) -> None:
        if not bar:
            if done >= total:
                return
            from rich.progress import Progress

            progress = Progress(console=io.err, transient=True)
            progress.start()
            bar.append((progress, progress.add_task("reading runs", total=total)))
        bar[0][0].update(bar[0][1], completed=done, total=total)

    try:
        res = history(runs_dir, metric, phase, arm, experiment, threshold, use_cache=cache, verify_all=verify_all,
                      on_run=on_run)
    finally:
        if bar:
            bar[0][0].stop()
    table = Table(title=esc(f"{metric} ({phase}, {res.arm}) across {len(res.runs)} runs"))
    for col in ("#", "label", "version (this arm's)", "n", "median", "IQR"):
        table.add_column(col)
    last = -1
    for i in shown_runs(res):
        if i > last + 1:  # long series: the runs left out are counted (--json/--html/--publish list them all)
            table.add_row("…", f"[dim]{i - last - 1} runs not shown[/]", "", "", "", "")
        r, last = res.runs[i], i
        table.add_row(str(i), esc(r.label), esc(r.version or "-"), str(r.n), f"{r.median:.4g}",
                      f"{r.q1:.4g}–{r.q3:.4g}")
    if last < len(res.runs) - 1:
        table.add_row("…", f"[dim]{len(res.runs) - last - 1} runs not shown[/]", "", "", "", "")
    io.out.print(table)
    if not res.steps:
        io.out.print("no step: no significant change larger than the threshold")
    for c in res.caveats:
        io.out.print(f"[yellow]note:[/] {esc(c)}")
    for s in res.steps:
        io.out.print(f"[{'red' if s.verdict == 'regression' else 'green'}]{s.verdict}[/] between {esc(repr(s.from_label))} "
                  f"and {esc(repr(s.to_label))}: ratio {s.ratio:.3f} [{s.ratio_low:.3f}, {s.ratio_high:.3f}], "
                  f"p (Holm) {s.p_adj:.3g}")
    if json_out or json_file:
        print_json(io, res.to_json(), "history", json_file, stdout=json_out)
    if html_out:
        from kit.store import write_named_output  # (not at the top: a cached call reads no run, kit.store is slow)

        write_named_output(html_out, render_html(res).encode())
    if markdown:
        import sys

        from kit.markdown import history_markdown
        from kit.store import RunDir

        study = experiment or RunDir.open(Path(res.runs[0].run_dir)).manifest().experiment  # one study: history()
        sys.stdout.write(history_markdown(res, only_changes=only_changes, experiment=study))
        sys.stdout.flush()
