"""`kit run`, `kit reproduce-all` and `kit status`: run an experiment (or resume one), every study that fits this
host, and say where a run stands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from kit.cli.options import (
    Backend,
    Executor,
    JsonFlag,
    ProfileOpt,
    RunDirArg,
    check_names,
    complete_experiments,
    need_run_dir,
)
from kit.cli.output import Output, esc, print_json
from kit.cli.report import make_report, run_summary
from kit.errors import KitError
from kit.fmt import kit_cmd

if TYPE_CHECKING:
    from kit.images.arms import ImageProgress, ResolvedRelease
    from kit.store import RunDir

commands = typer.Typer()


@commands.command()
def run(
    ctx: typer.Context,
    spec: Annotated[str | None, typer.Argument(help="An experiment id (kit list) or its TOML or study folder (omit with --resume).", autocompletion=complete_experiments)] = None,
    profile: ProfileOpt = None,
    backend: Annotated[Backend, typer.Option(help="local, docker (Docker or Podman), apptainer, or auto (containers when an engine with GPUs is present).")] = Backend.local,
    resume: Annotated[Path | None, typer.Option(help="Continue this run directory: run only the missing trials.")] = None,
    retry_failed: Annotated[bool, typer.Option("--retry-failed", help="With --resume: also re-run the trials that failed (status error, which includes a kill by a signal, or timeout), each in its original plan position with its seed; every failed record is kept under attempts/ and listed in the report. Out-of-memory trials are not retried (in a batch-size sweep running out of memory is the result); add --retry-oom for them.")] = False,
    retry_oom: Annotated[bool, typer.Option("--retry-oom", help="With --resume: also re-run the trials whose status is oom (kept under attempts/ likewise).")] = False,
    runs_dir: Annotated[Path, typer.Option(help="Where run directories are created.")] = Path("runs"),
    data_dir: Annotated[Path | None, typer.Option(help="Directory with the dataset files (offline hosts). Env: KIT_DATA_DIR.")] = None,
    download: Annotated[bool, typer.Option(help="Download missing datasets into the cache.")] = True,
    seed: Annotated[int | None, typer.Option(help="Plan seed (default: the spec's).")] = None,
    report: Annotated[bool, typer.Option(help="Analyse and write the report when the run ends.")] = True,
    max_trials: Annotated[int | None, typer.Option(help="Stop after this many trials (resume later).")] = None,
    executor: Annotated[Executor, typer.Option(help="Where trials run: local (this host) or slurm (jobs on a cluster).")] = Executor.local,
    partition: Annotated[str | None, typer.Option(help="Slurm partition (overrides the spec's [slurm]).")] = None,
    account: Annotated[str | None, typer.Option(help="Slurm account.")] = None,
    gpus_per_trial: Annotated[int | None, typer.Option(help="GPUs per job (--gres=gpu:N).")] = None,
    time_limit: Annotated[str | None, typer.Option(help="Slurm time limit per job, e.g. 02:00:00.")] = None,
    blocks_per_job: Annotated[int | None, typer.Option(help="Interleaved blocks per job (one node each).")] = None,
    sbatch_option: Annotated[list[str] | None, typer.Option(metavar="<str>", help="Extra sbatch option, e.g. --qos=normal (repeatable).")] = None,
    wait: Annotated[bool, typer.Option(help="With --executor slurm: wait for the jobs, then report.")] = False,
    chunk: Annotated[int | None, typer.Option(hidden=True, help="Inside a cluster job: run this chunk.")] = None,
    label: Annotated[str | None, typer.Option(help="Version label of this run, for `kit history`.")] = None,
    image: Annotated[list[str] | None, typer.Option("--image", metavar="<str>", help="Container backends: the matrix row of a framework, e.g. pytorch=pytorch-2.6-cu124, or a release, e.g. tensorflow=tensorflow==2.18.1 (repeatable).")] = None,
    images: Annotated[str | None, typer.Option("--images", help="Container backends: run one arm per matrix row or release, interleaved in one plan, e.g. pytorch-2.6-cu124,pytorch-2.7-cu126 or tensorflow==2.18.1,tensorflow==2.19.1 (version-to-version comparison; a release without a row is added to images/matrix.local.toml for the run's device and, with docker, built first).")] = None,
    build_images: Annotated[bool, typer.Option(help="Container backends: build the images the run needs if they are missing.")] = False,
    until_conclusive: Annotated[bool, typer.Option("--until-conclusive", help="Add interleaved blocks until every testable hypothesis is decided (a difference, or equivalence within 5 %), looking after the spec's repetitions and every as many more, with alpha spending so that the family-wise error stays at alpha; stops at --max-repetitions or when the next look would pass --budget.")] = False,
    budget: Annotated[str | None, typer.Option(help="With --until-conclusive: the most time to spend, e.g. 20m or 1h.")] = None,
    max_repetitions: Annotated[int | None, typer.Option(help="With --until-conclusive: the most repetitions per arm (default 4 x the spec's).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the run's summary as JSON on stdout (run directory, status, report); the progress and tables go to stderr.")] = False,
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help="With --resume: run the study code in the run's own copy (study/*.py) for this command; by default a resumed run runs only the kit's own studies, a folder you name with --study, and digests trusted with `kit trust`. Read the code first.")] = False,
    study: Annotated[Path | None, typer.Option("--study", help="With --resume: your own study folder; the run's copy must be byte for byte its code (the resume is refused otherwise).")] = None,
    study_digest: Annotated[str | None, typer.Option("--study-digest", hidden=True, help="Inside a cluster job: the digest of the study copy the submitting kit checked.")] = None,
    wait_for_quiet: Annotated[str | None, typer.Option("--wait-for-quiet", metavar="DURATION", help="On a busy host (other work above [design] disturbance_cpu during the idle baseline, or re-runs of disturbed trials disturbed again), wait up to this long for a quiet window, e.g. 10m, with a countdown; then go on either way. Default: go on at once (disturbed trials are re-run within the run's budget, the rest flagged).")] = None,
) -> None:
    """Run an experiment (or resume one) and write its run directory."""
    io = Output.of(ctx)
    check_names(spec, profile)  # a typo is said at once (exit 2), before kit.catalog imports the analysis
    from kit.catalog import resolve_experiment

    spec_path = resolve_experiment(spec) if spec is not None else None  # before the heavy imports
    from kit.collectors.quiet import parse_wait

    wait_s = parse_wait(wait_for_quiet) if wait_for_quiet is not None else None
    if json_out:
        io.to_stderr()
    from kit.cli.ui import RichEvents
    from kit.run.request import execute, run_request

    req = run_request(
        spec=spec_path, profile=profile, resume=resume, backend=_choose_backend(io, backend.value), runs_dir=runs_dir,
        data_dir=data_dir, download=download, seed=seed, max_trials=max_trials, executor=executor.value,
        slurm={"partition": partition, "account": account, "gpus_per_trial": gpus_per_trial, "time_limit": time_limit,
               "blocks_per_job": blocks_per_job, "sbatch_options": tuple(sbatch_option) if sbatch_option else None},
        chunk=chunk, label=label, retry_failed=retry_failed, retry_oom=retry_oom, image=image, images=images,
        trust_study_code=trust_study_code, study=study, study_digest=study_digest, progress=image_progress(io))
    req.opts.wait_for_quiet_s = wait_s
    if build_images and req.opts.backend == "docker" and req.spec is not None:
        _build_run_images(io, req.spec, req.opts.arms or req.spec.experiment.frameworks,
                          req.opts.backend_options.get("images"))
    if (budget is not None or max_repetitions is not None) and not until_conclusive:
        raise KitError("--budget and --max-repetitions belong to --until-conclusive", where="kit run",
                       fix="add --until-conclusive")
    with RichEvents(io.err) as events:
        if until_conclusive:
            rd = _run_until_conclusive(io, req, budget, max_repetitions, events)
        else:
            rd = execute(req, events)
    io.out.print(f"run directory: [bold]{esc(rd.path)}[/]")
    if chunk is not None:
        return
    if wait:  # only a run handed to jobs has anything to wait for
        _wait_for_jobs(io, rd)
    status = rd.manifest().status
    if report and status == "complete":
        from kit.report import default_formats

        formats, note = default_formats()
        if note:
            io.out.print(f"[yellow]{note}[/]")
        make_report(io, rd.path, formats, req.opts.study_trust)
    elif status != "complete":
        io.out.print(f"[yellow]run is {esc(status)}[/]: continue with `{esc(kit_cmd(f'run --resume {rd.path}'))}`")
    if json_out:
        print_json(io, run_summary(rd.path), "run-summary")


def _run_until_conclusive(io: Output, req: Any, budget: str | None, max_repetitions: int | None, events: Any) -> RunDir:
    from kit.sequential_run import UntilConclusive, parse_budget, run_until_conclusive

    if req.spec is None:
        raise KitError("--until-conclusive starts a new run", where="--resume",
                       fix="give the spec instead of --resume (a resumed run runs its recorded plan)")
    until = UntilConclusive(max_repetitions=max_repetitions,
                            budget_s=parse_budget(budget) if budget is not None else None)
    rd = run_until_conclusive(req.spec, req.opts, until, events)
    from kit.analysis.analyze import current_analysis

    seq = current_analysis(rd.path, rd)[0].sequential or {}
    reason = str(seq.get("stop_reason") or ("conclusive" if seq.get("decided") else ""))
    why = {"conclusive": "every testable hypothesis decided", "budget": "the next look would pass the budget"}.get(
        reason, "the maximum repetitions reached")
    io.out.print(f"[bold]until conclusive[/]: stopped at {seq.get('stopped_at')} repetitions per arm ({why})")
    decisions, still_open = seq.get("decisions"), seq.get("open")  # JSON tables of kit.sequential_run
    for d in decisions if isinstance(decisions, list) else []:
        if isinstance(d, dict):
            io.out.print(f"  {esc(d['key'])}: {esc(d['status'])}")
    for o in still_open if isinstance(still_open, list) else []:
        if isinstance(o, dict):
            io.out.print(f"  [yellow]open[/] {esc(o['key'])}: {esc(o['why'])}")
    return rd


def _wait_for_jobs(io: Output, rd: RunDir) -> None:
    """Follow the run's jobs until none is pending or running, printing progress as trials finish."""
    from kit.executors import from_record

    executor = from_record(rd.manifest().executor, str(rd.path))
    if not executor.hands_off:
        return
    total = len(rd.manifest().plan.trials)
    last = {"n": -1}

    def poll(active: int) -> None:
        n = len(rd.finished_ids())
        if n != last["n"]:
            io.err.print(f"[dim]{n}/{total} trials finished · {active} job(s) pending or running[/]")
            last["n"] = n

    executor.wait(rd, poll)
    _print_status(io, rd.path)


@commands.command("reproduce-all", short_help="Run every study whose profile fits this host (resumable) and write one summary page.")
def reproduce_all_cmd(
    ctx: typer.Context,
    budget: Annotated[str | None, typer.Option(help="The most time to spend, e.g. 2h or 45m: a study whose estimate does not fit what is left is skipped, never started.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="auto (paper where an NVIDIA GPU is present; elsewhere paper-cpu, the paper's CPU protocol, where a study has it, else quick), quick, paper, paper-cpu, or another profile name; a study without it is skipped.")] = "auto",
    runs_dir: Annotated[Path, typer.Option(help="Where the run directories, the state file and the summary go; the same one again resumes.")] = Path("runs"),
    backend_: Annotated[Backend, typer.Option("--backend", help="local, docker, apptainer, or auto (containers when an engine with GPUs is present).")] = Backend.local,
    only: Annotated[list[str] | None, typer.Option("--only", metavar="<str>", autocompletion=complete_experiments, help="Only this study (its id or folder name; repeatable).")] = None,
    experiments: Annotated[Path | None, typer.Option("--experiments", help="The studies of this directory instead of the kit's experiments/.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Directory with the dataset files (offline hosts). Env: KIT_DATA_DIR.")] = None,
    build_images: Annotated[bool, typer.Option(help="Container backends: build the images each run needs if they are missing.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help="Resume the runs the state file names even when their study code (study/*.py) is neither the kit's own nor on your allow-list (`kit trust`). Read the code first.")] = False,
    wait_for_quiet: Annotated[str | None, typer.Option("--wait-for-quiet", metavar="DURATION", help="Each run: on a busy host (other work above [design] disturbance_cpu during the idle baseline, or re-runs of disturbed trials disturbed again), wait up to this long for a quiet window, e.g. 10m, with a countdown; then go on either way. Default: go on at once (disturbed trials are re-run within the run's budget, the rest flagged).")] = None,
) -> None:
    """Run every study whose profile fits this host, one after another (resumable), and write one summary page."""
    from kit.cli.ui import RichEvents
    from kit.report import default_formats
    from kit.reproduce import KitRunner, reproduce_all
    from kit.sequential_run import parse_budget
    from kit.studies import BUNDLED

    io = Output.of(ctx)
    backend = backend_.value
    budget_s = parse_budget(budget) if budget is not None else None
    from kit.collectors.quiet import parse_wait

    wait_s = parse_wait(wait_for_quiet) if wait_for_quiet is not None else None
    formats, note = default_formats()
    chosen = _choose_backend(io, backend) if not dry_run else backend

    def prepare(req: Any) -> None:
        if build_images and req.opts.backend == "docker" and req.spec is not None:
            _build_run_images(io, req.spec, req.opts.arms or req.spec.experiment.frameworks,
                              req.opts.backend_options.get("images"))

    from kit.trust import StudyTrust

    trust = StudyTrust(trust_run_copy=trust_study_code)
    runner = KitRunner(runs_dir, chosen, data_dir, events=lambda: RichEvents(io.err), prepare=prepare,
                       report=lambda path: make_report(io, path, formats, trust), trust=trust, wait_for_quiet_s=wait_s)
    if note and not dry_run:
        io.out.print(f"[yellow]{note}[/]")
    from kit.reproduce import Host

    # the backend decides whether this interpreter's torchvision matters (a container brings its own)
    res = reproduce_all(runs_dir, runner, profile=profile, budget_s=budget_s, only=only or (),
                        experiments=experiments or BUNDLED, host=Host.detect(chosen), events=_ReproduceLines(io),
                        dry_run=dry_run, trust=trust, data_dir=data_dir)
    for p in res.summary:
        io.out.print(f"summary: [bold]{esc(p)}[/]")
    if res.interrupted:
        io.err.print("[yellow]interrupted[/]: run the same command again to resume")
        raise typer.Exit(130)


class _ReproduceLines:
    """The plan up front, then a line as each study starts and ends (kit.reproduce.ReproduceEvents)."""

    def __init__(self, io: Output) -> None:
        self.io = io

    def planned(self, plan: Any, host: Any, budget_s: float | None) -> None:
        from kit.reproduce import fmt_duration

        budget = f", budget {fmt_duration(budget_s)}" if budget_s is not None else ""
        table = Table(title=esc(f"kit reproduce-all on this host ({host.describe()}{budget})"))
        for col in ("study", "profile", "estimate", "plan"):
            table.add_column(col, overflow="fold")
        for e in plan:
            est = "-" if e.estimate_s is None else fmt_duration(e.estimate_s) + (
                "" if e.estimate_from in ("spec", "") else f" (measured: {e.estimate_from})")
            what = {"run": "run", "resume": f"resume {e.run_dir}", "done": f"done ({e.run_dir})"}.get(
                e.action, f"[yellow]skip[/]: {esc(e.reason)}")
            if e.action != "skip" and e.data:
                what += f" · {e.data}"
            table.add_row(esc(e.study), esc(e.profile), esc(est), what if e.action == "skip" else esc(what))
        self.io.out.print(table)

    def study_started(self, entry: Any, index: int, total: int) -> None:
        verb = "resuming" if entry.action == "resume" else "starting"
        self.io.err.print(f"[bold]{verb} {esc(entry.study)}[/] ({index}/{total}, profile {esc(entry.profile)})")

    def study_finished(self, result: Any) -> None:
        from kit.reproduce import fmt_duration

        style = {"complete": "green", "failed": "red", "incomplete": "yellow"}.get(result.status, "blue")
        wall = f" in {fmt_duration(result.wall_s)}" if result.wall_s is not None else ""
        why = f": {esc(result.reason)}" if result.reason else ""
        self.io.err.print(f"[{style}]{result.status}[/] {esc(result.entry.study)}{wall}{why}", highlight=False)


@commands.command()
def status(ctx: typer.Context, run_dir: RunDirArg,
           trials: Annotated[bool, typer.Option(help="List every trial, not only the summary.")] = False,
           json_out: JsonFlag = False) -> None:
    """Queued, running, finished, failed and lost trials of a run, with Slurm job ids and reasons."""
    io = Output.of(ctx)
    need_run_dir(run_dir)
    if json_out:
        from kit.executors.status import run_status

        print_json(io, run_status(run_dir), "status")
        return
    _print_status(io, run_dir, trials)



def _print_status(io: Output, run_dir: Path, trials: bool = False) -> None:
    from rich.markup import escape

    from kit.executors.status import run_status

    st = run_status(run_dir)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(st["counts"].items()))
    retried = f" ({st['retried']} retried; failed attempts under attempts/)" if st.get("retried") else ""
    io.out.print(escape(f"{st['experiment']} · {st['run_dir']} · executor {st['executor']} · status {st['status']} · "
                     f"{st['total']} trials: {counts}{retried}"))
    if st.get("status_reason"):  # the manifest says "running", no process works on the run (kit.executors.liveness)
        io.out.print(escape(f"the manifest says {st['recorded_status']}; {st['status_reason']}"
                         + (". Continue with: " + kit_cmd(f"run --resume {st['run_dir']}")
                            if st["status"] == "interrupted" else "")))
    if st["jobs"]:
        table = Table(title="Slurm jobs")
        for col in ("chunk", "job", "state", "node", "done", "reason"):
            table.add_column(col)
        for j in st["jobs"]:
            table.add_row(*(esc(v) for v in (j["chunk"], j["job"], j["state"], j["node"], f"{j['finished']}/{j['trials']}",
                                              j["reason"])))
        io.out.print(table)
    rows = st["trials"] if trials else [r for r in st["trials"] if r["state"] in ("failed", "lost")]
    if rows:
        table = Table(title="Trials" if trials else "Failed or lost trials")
        for col in ("trial", "state", "job", "node", "signal", "earlier attempts", "reason"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(*(escape(str(v)) for v in (r["trial_id"], r["state"], r["job"] or "", r["node"] or "",
                                                      r.get("signal") or "", r.get("earlier_attempts") or "", r["reason"])))
        io.out.print(table)
        if any(r["state"] == "failed" for r in rows):
            io.out.print(escape("re-run failed trials in their plan positions: "
                             + kit_cmd(f"run --resume {st['run_dir']} --retry-failed")))


def _choose_backend(io: Output, name: str) -> str:
    if name != "auto":
        return name
    try:
        from kit.engine import engine_with_gpu
    except ImportError:
        return "local"
    chosen = "docker" if engine_with_gpu() else "local"
    io.err.print(f"[dim]--backend auto: {chosen} ("
                  + ("a container engine can hand this host's NVIDIA GPU(s) to containers" if chosen == "docker"
                     else "no container engine with GPU support here; see `kit doctor`") + ")[/]")
    return chosen


def image_progress(io: Output) -> ImageProgress:
    """Releases becoming rows and images (kit.images.arms), said on stderr as they happen."""
    from kit.images.arms import ImageProgress

    def on_row(r: ResolvedRelease) -> None:
        how = "added to the user matrix" if r.added else "already in the matrix"
        io.err.print(f"[bold]{esc(r.item)}[/]: row {esc(r.row)} ({how}" + (", image built)" if r.built else ")"),
                     highlight=False)

    return ImageProgress(on_row=on_row, on_line=lambda s: io.err.out(f"  | {s}", highlight=False),
                         on_start=lambda r: io.err.print(f"[bold]building image {esc(r.name)}[/] (needed by this run)"))


def _build_run_images(io: Output, spec: Any, arms: tuple[str, ...], overrides: dict[str, str] | None) -> None:
    from kit.images.commands import ensure_images

    ensure_images(arms, overrides, spec.container,
                  on_line=lambda s: io.err.out(f"  | {s}", highlight=False),
                  on_start=lambda r: io.err.print(f"[bold]building image {r.name}[/] (needed by this run)"))
