"""`kit datasets ...`: fetch the real dataset files a study's profile needs ahead of a run, or list which are here
(thin layer over kit.dataset_fetch)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kit.cli.options import ExperimentArg, ExperimentsOpt, ProfileOpt, check_names
from kit.cli.output import Output, esc
from kit.errors import DatasetError

if TYPE_CHECKING:
    from kit.spec import Spec

datasets_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Real dataset files of a study: fetch them ahead (with their SHA-256), list them.")

DataDirOpt = Annotated[Path | None, typer.Option(
    "--data-dir", metavar="<path>",
    help="Fetch into (or look in) this directory, one folder per dataset, instead of the kit's cache; a run then "
         "takes --data-dir with the same path. Env: KIT_DATA_DIR is looked in too.")]


def _spec(experiment: str, profile: str | None, experiments: list[Path] | None) -> Spec:
    from kit.catalog import resolve_experiment
    from kit.spec import load_spec

    check_names(experiment, profile, extra=experiments)
    return load_spec(resolve_experiment(experiment, experiments), None if profile in (None, "paper") else profile)


@datasets_app.command("fetch", short_help="Download and verify every real dataset file a study's profile needs.")
def fetch_cmd(ctx: typer.Context, experiment: ExperimentArg, profile: ProfileOpt = None, data_dir: DataDirOpt = None,
              experiments: ExperimentsOpt = None) -> None:
    """Download every real dataset file the study's profile needs (default: the paper profile) into the cache or
    --data-dir, verifying each SHA-256; a file already there is verified, not fetched again; an interrupted
    download resumes. Without network: which files failed, where from, and how to bring them from another host."""
    from kit.dataset_fetch import FileState, copy_instructions, study_files

    io = Output.of(ctx)
    spec = _spec(experiment, profile, experiments)
    if data_dir is not None:
        data_dir.expanduser().mkdir(parents=True, exist_ok=True)
    shown: dict[str, int] = {}

    def progress(name: str, done: int, total: int | None) -> None:
        step = (done * 10 // total) if total else done >> 24  # every 10 % (or 16 MiB) per file
        if shown.get(name) != step:
            shown[name] = step
            io.err.print(esc(f"downloading {name}: {done:,}/{f'{total:,}' if total else '?'} bytes"), highlight=False)

    result = study_files(spec, data_dir, download=True, progress=progress)
    if not result.files:
        io.out.print(esc(f"{result.study} ({result.profile}): no dataset files to fetch (its data are random inputs "
                         "or synthetic stand-ins the kit writes)"), highlight=False)
        return
    for f in result.files:
        note = f": {f.error}" if f.error else ""
        io.out.print(esc(f"{f.state.value:8} {f.needed.dataset}/{f.needed.file.name} -> {f.path}{note}"), highlight=False)
    if result.ok:
        fetched = sum(f.state is FileState.fetched for f in result.files)
        io.out.print(esc(f"{result.study} ({result.profile}): all {len(result.files)} files here and verified "
                         f"({fetched} fetched) under {result.target}"), highlight=False)
        return
    raise DatasetError(f"{len(result.failed())} of {len(result.files)} dataset files of {result.study} "
                       f"({result.profile}) could not be fetched", where=str(result.target),
                       fix=copy_instructions(result, spec))


@datasets_app.command("list", short_help="Which real dataset files a study's profile needs, and which are here.")
def list_cmd(ctx: typer.Context, experiment: ExperimentArg, profile: ProfileOpt = None, data_dir: DataDirOpt = None,
             experiments: ExperimentsOpt = None) -> None:
    """Which real dataset files the study's profile needs, and which are here (verified) or missing; downloads
    nothing. Exit 1 when any is missing."""
    from kit.dataset_fetch import study_files

    io = Output.of(ctx)
    spec = _spec(experiment, profile, experiments)
    result = study_files(spec, data_dir)
    table = Table(title=esc(f"{result.study} ({result.profile}): dataset files"))
    for col in ("dataset", "source", "file", "state", "where"):
        table.add_column(col)
    for f in result.files:
        table.add_row(esc(f.needed.dataset), esc(f.needed.source), esc(f.needed.file.name), f.state.value,
                      esc(f.error or str(f.path)))
    io.out.print(table)
    if not result.ok:
        io.err.print(esc(f"missing: {len(result.failed())} file(s); fetch them with: kit datasets fetch "
                         f"{result.study}" + (f" --profile {result.profile}" if result.profile != "paper" else "")),
                     highlight=False)
        raise typer.Exit(1)
