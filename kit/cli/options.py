"""The options several commands share: choices, argument types with their shell completion, and the checks said
before the heavy imports (an unknown experiment id or profile, a missing run directory).

The name checks and the completion read the experiments' TOML files with tomllib alone: kit.catalog imports the
analysis (scipy, pandas, seconds on a busy host), which neither a typo nor a <TAB> should wait for.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kit.errors import UsageError, suggestion


class Backend(StrEnum):
    """Where trials run (kit run, reproduce-all)."""

    local = "local"
    docker = "docker"
    apptainer = "apptainer"
    auto = "auto"


class Executor(StrEnum):
    local = "local"
    slurm = "slurm"


class ContainerBackend(StrEnum):
    docker = "docker"
    apptainer = "apptainer"


class SelftestBackend(StrEnum):
    local = "local"
    docker = "docker"


class FailOn(StrEnum):
    regression = "regression"
    improvement = "improvement"
    change = "change"


class Phase(StrEnum):
    train = "train"
    infer = "infer"


# -- names checked before the heavy imports, and shell completion ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class Declared:
    """What a spec file declares that a name check needs: its experiment id and its profiles' names."""

    experiment_id: str | None = None
    profiles: tuple[str, ...] = ()


def declared(path: Path) -> Declared:
    import tomllib

    from kit.studies import STUDY_FILE

    target = path / STUDY_FILE if path.is_dir() else path
    try:
        # A FIFO or device would block or never end, a huge file would stall a typo check: only a regular file
        # of spec size is read here; kit.spec.load_spec says what is wrong with anything else.
        if not target.is_file() or target.stat().st_size > 1 << 20:
            return Declared()
        with open(target, "rb") as fh:
            raw = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return Declared()
    exp, profiles = raw.get("experiment"), raw.get("profiles")
    return Declared(exp.get("id") if isinstance(exp, dict) and isinstance(exp.get("id"), str) else None,
                    tuple(profiles) if isinstance(profiles, dict) else ())


def experiment_names(extra: list[Path] | None = None) -> dict[str, Path]:
    """Experiment id (and folder or file name) -> spec path, as kit.catalog.known_experiments finds them."""
    from kit.studies import experiment_dirs, experiment_paths

    found: dict[str, Path] = {}
    for directory in experiment_dirs(extra or []):
        if directory.is_dir():
            for path in experiment_paths(directory):
                for name in (declared(path).experiment_id, path.stem if path.is_file() else path.name):
                    if name:
                        found.setdefault(name, path)
    return found


def profiles_of(path: Path) -> list[str]:
    return ["paper", *declared(path).profiles]


def check_names(experiment: str | None, profile: str | None = None, extra: list[Path] | None = None,
                what: str = "experiment") -> None:
    """An unknown experiment id or profile is a usage error (exit 2) with the closest names, said at once."""
    if experiment is None:
        return
    path = Path(experiment)
    if not path.exists():
        if "/" in experiment or experiment.endswith(".toml"):
            return  # a path: load_spec says what is wrong with it
        names = experiment_names(extra)
        if experiment not in names:
            ids = sorted(names)
            raise UsageError(f"no {what} with the id {experiment!r} and no such file", where=experiment,
                             fix=suggestion(experiment, names) + f"the ids are {', '.join(ids)} (kit list); or give "
                                 "the path of an experiment TOML or study folder")
        path = names[experiment]
    known = profiles_of(path)
    if profile is not None and len(known) > 1 and profile not in known:
        raise UsageError(f"{experiment} has no profile {profile!r}", where="--profile",
                         fix=suggestion(profile, known) + f"its profiles are {', '.join(known)}")


def need_run_dir(run_dir: Path) -> None:
    """The argument check before the heavy imports (analysis, frameworks): a missing directory is said at once."""
    if not run_dir.is_dir():
        from kit.errors import StoreError

        raise StoreError("run directory not found", where=str(run_dir),
                         fix="give a directory made by `kit run` (ls runs/)")


def complete_experiments(incomplete: str) -> list[str]:
    """Shell completion: the experiment ids (kit list)."""
    return sorted(n for n in experiment_names() if n.startswith(incomplete))


def complete_profiles(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion: the profiles of the experiment on the line, or of every experiment."""
    given = next((str(v) for k, v in ctx.params.items() if k in ("spec", "study", "experiment") and v), None)
    names = experiment_names()
    paths = [names.get(given) or Path(given)] if given else list(names.values())
    return sorted({p for path in paths for p in profiles_of(path) if p.startswith(incomplete)})


def complete_run_dirs(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion: run directories (those holding a manifest.json) under --runs-dir (default runs/) or under
    the directory being typed."""
    if "/" in incomplete:
        base = Path(incomplete) if incomplete.endswith("/") else Path(incomplete).parent
    else:
        base = Path(str(ctx.params.get("runs_dir") or "runs"))
    try:
        shown = sorted(f"{p}/" for p in base.iterdir() if (p / "manifest.json").is_file())
    except OSError:
        return []
    return [s for s in shown if s.startswith(incomplete) or Path(s).name.startswith(incomplete)]


# -- argument and option types ----------------------------------------------------------------------------------------

ExperimentsOpt = Annotated[list[Path] | None, typer.Option(
    "--experiments", "--experiments-dir", metavar="<path>",
    help="Also the experiments of this directory (study folders and TOML files) or this study folder; "
         "repeatable. Env: KIT_EXPERIMENTS (os.pathsep-separated).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout (and nothing else there).")]
JsonFile = Annotated[Path | None, typer.Option("--json-file", metavar="<path>",
                                               help="Write the JSON document (as --json prints it) to this file.")]
ExperimentArg = Annotated[str, typer.Argument(help="An experiment id (kit list) or the path of its TOML or study folder.",
                                              autocompletion=complete_experiments)]
ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Profile in the spec (e.g. quick).",
                                                autocompletion=complete_profiles)]
RunDirArg = Annotated[Path, typer.Argument(help="A run directory.", autocompletion=complete_run_dirs)]

TRUST_HELP = ("Run the study code in the run's own copy (study/analysis.py, report.py) for this command; "
              "by default only the kit's own studies and digests trusted with `kit trust` run. Read the code first.")
STUDY_HELP = "Use this study folder's analysis.py/report.py instead of the run's copy (your own code)."
