"""The `kit` command: a thin typer layer over the library.

Each command parses its options, calls one function in ``kit`` and prints the
result. Errors are ``KitError``s, caught once in ``main``: one line with the
cause, where and the fix, and a non-zero exit code; ``--debug`` adds the
traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kit.errors import ExitCode, KitError, UsageError, suggestion
from kit.fmt import in_user_terms, kit_cmd
from kit.records import Analysis

if TYPE_CHECKING:
    from kit.store import RunDir

# Help is plain text (rich_markup_mode=None): a literal [slurm] or [[claims]] in a help string is shown as written,
# option names are never cut, and flags carry no <bool> metavar. -h is --help; choices are enums, listed by --help.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 120,
                           "terminal_width": None if sys.stdout.isatty() else 120}
app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings=CONTEXT,
                  help="Reproducible TensorFlow-vs-PyTorch benchmarks: run, analyse, report. Exit codes: 0 success, "
                       "1 the answer is no (regression, claims not reproduced, a failed check), 2 usage error, "
                       "3 inconclusive, 4 suspect, 5 input error (bad spec, run directory, bundle), 6 internal error.")


def _repeatable_metavar() -> None:
    """typer writes a repeatable argument's type as <list[str]> (a Python annotation, not a value to type); the
    kit's help writes <str>... (options set metavar="<str>" themselves)."""
    import re

    from typer.core import TyperArgument

    plain = TyperArgument.display_type

    def display_type(self: Any, ctx: Any) -> str:
        shown = plain(self, ctx)
        m = re.fullmatch(r"<list\[(.+)\]>", shown)
        return f"<{m.group(1)}>..." if m else shown

    TyperArgument.display_type = display_type  # type: ignore[method-assign]


_repeatable_metavar()


def _console(stderr: bool = False) -> Console:
    """A terminal gets rich's wrapping at its width; a pipe or CI log never wraps text (commands and paths stay
    copy-pasteable) and draws tables at 160 columns, not 80."""
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, width=None if tty else 160, soft_wrap=not tty)


console = _console(stderr=True)
out = _console()
_STATE: dict[str, bool] = {"debug": False}


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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("dlbench-kit")
        except PackageNotFoundError:
            v = "unknown (not installed as a package)"
        print(f"kit {v}")
        raise typer.Exit()


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the kit's version and exit.")] = False) -> None:
    _STATE["debug"] = debug or bool(os.environ.get("KIT_DEBUG"))


def _to_stderr() -> None:
    """With --json: the human output (tables, lines) goes to stderr, so stdout holds the JSON document alone."""
    global out
    out = console


def _run_summary(run_dir: Path) -> dict[str, Any]:
    """A run directory's summary for --json: its status and counts, and where the analysis has been written, the
    report files, the paper claims' verdicts and the hypotheses' decisions."""
    import json

    from kit.executors.status import run_status

    st = run_status(run_dir)
    res: dict[str, Any] = {"run_dir": str(run_dir), "experiment": st.get("experiment"), "status": st.get("status"),
                           "trials": st.get("total"), "counts": st.get("counts")}
    analysis_path = Path(run_dir) / "analysis.json"
    if analysis_path.is_file() and not analysis_path.is_symlink():
        try:  # a run directory may be someone else's: capped, never a link, and only read (kit report recomputes it)
            if analysis_path.stat().st_size > 256 << 20:
                raise ValueError("analysis.json is larger than 256 MiB")
            loaded = json.loads(analysis_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        analysis: dict[str, Any] = loaded if isinstance(loaded, dict) else {}
        res["analysis"] = str(analysis_path)
        res["reports"] = sorted(str(p) for p in (Path(run_dir) / "report").glob("*") if p.is_file()) \
            if (Path(run_dir) / "report").is_dir() else []
        raw_claims = analysis.get("claims")
        claims: dict[str, Any] = raw_claims if isinstance(raw_claims, dict) else {}
        res["claims"] = {"headline": claims.get("headline"),
                         "verdicts": [{k: c.get(k) for k in ("id", "statement", "verdict", "reason")}
                                      for c in claims.get("rows") or [] if isinstance(c, dict)]}
        res["hypotheses"] = [{k: h.get(k) for k in ("id", "phase", "metric", "config_label", "n_pairs", "p", "p_adj",
                                                    "effect_text", "decision")}
                             for h in analysis.get("hypotheses") or [] if isinstance(h, dict)]
    return res


# Every JSON document the kit prints (--json) or writes (--json-file) opens with its schema, {"name": "kit.NAME",
# "version": N}, described by kit/schemas/NAME.schema.json (shipped in the package), and the kit's version: a reader
# can tell what it holds and which kit made it. A version moves when a key is removed or changes its meaning.
SCHEMAS: dict[str, int] = {"list": 1, "show": 1, "doctor": 1, "status": 1, "run-summary": 1, "verify": 1,
                           "compare": 1, "bisect": 1, "history": 1, "selftest": 1, "bench-overhead": 1}


def _document(name: str, data: dict[str, Any]) -> dict[str, Any]:
    from kit import __version__

    return {"schema": {"name": f"kit.{name}", "version": SCHEMAS[name]}, "kit_version": __version__,
            **{k: v for k, v in data.items() if k not in ("schema", "kit_version")}}


def _print_json(data: dict[str, Any], name: str, json_file: Path | None = None, *, stdout: bool = True) -> None:
    """Machine-readable output: --json prints one JSON document on stdout, nothing else there; --json-file writes
    the same document to a file (atomically; a device or FIFO such as /dev/stdout is written into, not replaced)."""
    import json

    text = json.dumps(_document(name, data), indent=1, default=str) + "\n"
    if json_file is not None:
        from kit.store import write_named_output

        write_named_output(json_file, text.encode())
        console.print(f"written: {_esc(json_file)}", highlight=False)
    if stdout:
        sys.stdout.write(text)
        sys.stdout.flush()


def _old_json_form(json_out: bool, *given: Path | None) -> None:
    """`--json out.json` (the old form of compare, bisect, history, selftest, bench overhead) now reads as the flag
    and an argument: refused with the new form, not taken as a run directory or spec."""
    for p in given:
        if json_out and p is not None and p.suffix == ".json" and not p.is_dir():
            raise UsageError(f"{p} is not a run directory or spec: --json takes no value now (it prints the JSON on "
                             "stdout)", where="--json", fix=f"write a file with --json-file {p}")


JSON_HINT = "--json takes no value now (it prints the JSON on stdout); write a file with --json-file {}"


def _json_usage_hint(argv: list[str]) -> str:
    """The old `--json PATH` form met as a usage error (an unexpected extra argument): the hint to the new form."""
    for i, arg in enumerate(argv[:-1]):
        nxt = argv[i + 1]
        if arg == "--json" and not nxt.startswith("-") and not Path(nxt).is_dir():
            return JSON_HINT.format(nxt)
    return ""


# -- names checked before the heavy imports, and shell completion ----------------------------------------------------
# Both read the experiments' TOML files with tomllib alone: kit.catalog imports the analysis (scipy, pandas, seconds
# on a busy host), which neither a typo nor a <TAB> should wait for.

def _declared(path: Path) -> dict[str, Any]:
    import tomllib

    from kit.studies import STUDY_FILE

    target = path / STUDY_FILE if path.is_dir() else path
    try:
        # A FIFO or device would block or never end, a huge file would stall a typo check: only a regular file
        # of spec size is read here; kit.spec.load_spec says what is wrong with anything else.
        if not target.is_file() or target.stat().st_size > 1 << 20:
            return {}
        with open(target, "rb") as fh:
            raw = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _experiment_names(extra: list[Path] | None = None) -> dict[str, Path]:
    """Experiment id (and folder or file name) -> spec path, as kit.catalog.known_experiments finds them."""
    from kit.studies import experiment_dirs, experiment_paths

    found: dict[str, Path] = {}
    for directory in experiment_dirs(extra or []):
        if directory.is_dir():
            for path in experiment_paths(directory):
                exp = _declared(path).get("experiment")
                declared = exp.get("id") if isinstance(exp, dict) and isinstance(exp.get("id"), str) else None
                for name in (declared, path.stem if path.is_file() else path.name):
                    if name:
                        found.setdefault(name, path)
    return found


def _profiles_of(path: Path) -> list[str]:
    profiles = _declared(path).get("profiles")
    return ["paper", *(profiles if isinstance(profiles, dict) else {})]


def _check_names(experiment: str | None, profile: str | None = None, extra: list[Path] | None = None,
                 what: str = "experiment") -> None:
    """An unknown experiment id or profile is a usage error (exit 2) with the closest names, said at once."""
    if experiment is None:
        return
    path = Path(experiment)
    if not path.exists():
        if "/" in experiment or experiment.endswith(".toml"):
            return  # a path: load_spec says what is wrong with it
        names = _experiment_names(extra)
        if experiment not in names:
            ids = sorted(names)
            raise UsageError(f"no {what} with the id {experiment!r} and no such file", where=experiment,
                             fix=suggestion(experiment, names) + f"the ids are {', '.join(ids)} (kit list); or give "
                                 "the path of an experiment TOML or study folder")
        path = names[experiment]
    known = _profiles_of(path)
    if profile is not None and len(known) > 1 and profile not in known:
        raise UsageError(f"{experiment} has no profile {profile!r}", where="--profile",
                         fix=suggestion(profile, known) + f"its profiles are {', '.join(known)}")


def _complete_experiments(incomplete: str) -> list[str]:
    """Shell completion: the experiment ids (kit list)."""
    return sorted(n for n in _experiment_names() if n.startswith(incomplete))


def _complete_profiles(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion: the profiles of the experiment on the line, or of every experiment."""
    given = next((str(v) for k, v in ctx.params.items() if k in ("spec", "study", "experiment") and v), None)
    names = _experiment_names()
    paths = [names.get(given) or Path(given)] if given else list(names.values())
    return sorted({p for path in paths for p in _profiles_of(path) if p.startswith(incomplete)})


def _complete_run_dirs(ctx: typer.Context, incomplete: str) -> list[str]:
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


# -- list / doctor ------------------------------------------------------------

ExperimentsOpt = Annotated[list[Path] | None, typer.Option(
    "--experiments", "--experiments-dir", metavar="<path>",
    help="Also the experiments of this directory (study folders and TOML files) or this study folder; "
         "repeatable. Env: KIT_EXPERIMENTS (os.pathsep-separated).")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout (and nothing else there).")]
JsonFile = Annotated[Path | None, typer.Option("--json-file", metavar="<path>",
                                               help="Write the JSON document (as --json prints it) to this file.")]
ExperimentArg = Annotated[str, typer.Argument(help="An experiment id (kit list) or the path of its TOML or study folder.",
                                              autocompletion=_complete_experiments)]
ProfileOpt = Annotated[str | None, typer.Option("--profile", "-p", help="Profile in the spec (e.g. quick).",
                                                autocompletion=_complete_profiles)]
RunDirArg = Annotated[Path, typer.Argument(help="A run directory.", autocompletion=_complete_run_dirs)]


@app.command("list", short_help="One line per experiment and profile: trials, estimate here, decidable, where.")
def list_cmd(
    experiments: ExperimentsOpt = None,
    deviations: Annotated[bool, typer.Option("--deviations", help="Also list where each experiment differs from its paper (kit show ID: one experiment's).")] = False,
    claims: Annotated[bool, typer.Option("--claims", help="Also list what each paper claimed ([[claims]]: source, kind, quantity, the paper's value, conditions), which every run judges (kit show ID: one experiment's).")] = False,
    runs_dir: Annotated[Path, typer.Option(help="Where earlier runs are: a complete run's measured wall time is the estimate.")] = Path("runs"),
    json_out: JsonFlag = False,
) -> None:
    """One line per experiment and profile: id, trials, estimated time on this host, whether it can decide its
    hypotheses, and where it lives. `kit show ID` prints one experiment's design, deviations and claims."""
    from rich.markup import escape

    from kit.catalog import list_experiments
    from kit.studies import experiment_dirs

    found = list_experiments(experiment_dirs(experiments or []), mde=False)
    rows = _list_rows(found, runs_dir)
    invalid = [e["file"] for e in found if e.get("invalid")]
    if json_out:
        _print_json({"experiments": rows, "invalid": invalid}, "list")
    else:
        table = Table(title=None, box=None, show_edge=False, pad_edge=False)
        for col in ("experiment", "profile", "trials", "estimate here", "decidable", "where"):
            table.add_column(col, no_wrap=col != "estimate here", overflow="fold")
        for r in rows:
            table.add_row(escape(r["id"]), escape(r["profile"]), str(r["trials"]), escape(r["estimate_text"]),
                          escape(r["decidable_text"]), escape(r["where"]))
        out.print(table)
        if deviations or claims:
            for e in found:
                if deviations:
                    _print_deviations_of(e)
                if claims:
                    _print_claims_of(e)
        else:
            out.print(f"[dim]details (design, deviations, claims): {_esc(kit_cmd('show ID'))} · run: "
                      f"{_esc(kit_cmd('run ID --profile PROFILE'))}[/]")
    if invalid:  # a script or CI step must not read the listing as all well
        for r in rows:
            if r.get("error"):
                console.print(f"[red]invalid:[/] {escape(r['where'])}: {escape(r['error'])}", highlight=False)
        console.print(f"[red]error:[/] {len(invalid)} experiment(s) invalid: {escape(', '.join(invalid))}")
        raise typer.Exit(ExitCode.INPUT)


def _where(path: str) -> str:
    """A path relative to the working directory where it is below it (copy-pasteable), else as found."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve())) + ("/" if p.is_dir() else "")
    except (ValueError, OSError):
        return str(p) + ("/" if p.is_dir() else "")


def _decidable_text(design: dict[str, Any] | None) -> str:
    rows = (design or {}).get("rows") or []
    if not rows:
        return "-"
    n = sum(1 for r in rows if r["decidable"])
    return "yes" if n == len(rows) else ("no" if n == 0 else f"partly ({n}/{len(rows)})")


def _list_rows(found: list[dict[str, Any]], runs_dir: Path) -> list[dict[str, Any]]:
    """The compact listing's rows: the spec's estimate_s and, beside it, a complete earlier run's measured wall time
    (kit.catalog.estimate_text), or what the host lacks for the profile."""
    from kit.catalog import estimate_text, measured_runs
    from kit.reproduce_all import Host, Needs, fits
    from kit.reproduce_summary import fmt_duration

    host = Host.detect()
    walls = measured_runs(runs_dir, [e["id"] for e in found if not e.get("invalid")])
    rows = []
    for e in found:
        for p in e["profiles"]:
            if e.get("invalid"):
                rows.append({"id": e["id"], "profile": "-", "trials": 0, "estimate_s": None, "estimate_from": "",
                             "measured_s": None, "measured_run": None, "measured_busy": None,
                             "estimate_text": "-", "fits_here": None, "decidable": None,
                             "decidable_text": "invalid", "where": _where(e["path"]), "error": p["description"]})
                continue
            gpu_needs = Needs(int(p.get("needs_gpus") or 0), str(p.get("needs_why") or ""))
            # torchvision: asked only where it is missing (a lean CPU install), since it loads the profile's spec
            tv = "" if host.torchvision else str(p.get("needs_torchvision") or "")
            lacks = fits(host, gpu_needs) or fits(host, Needs(torchvision=tv))
            est, source = p.get("estimate_s"), "spec" if p.get("estimate_s") else ""
            seen = walls.get((e["id"], p["name"]))
            text = estimate_text(est, seen)
            if lacks and fits(host, gpu_needs):  # the spec's figure is for a host that has them
                there = est or (seen.wall_s if seen else None)
                text = f"needs {p['needs_gpus']} GPU" + ("s" if p["needs_gpus"] > 1 else "") + (
                    f" (~{fmt_duration(there)} there)" if there else "")
            elif lacks:
                text = "needs torchvision"
            design = p.get("design") or {}
            rows.append({"id": e["id"], "profile": p["name"], "trials": p["trials"], "estimate_s": est,
                         "estimate_from": source, "measured_s": seen.wall_s if seen else None,
                         "measured_run": seen.run_dir if seen else None, "measured_busy": seen.busy if seen else None,
                         "estimate_text": text, "fits_here": lacks is None,
                         "why_not_here": lacks, "decidable": design.get("all_decidable"),
                         "decidable_text": _decidable_text(design), "where": _where(e["path"]),
                         "description": p["description"]})
    return rows


@app.command("show", short_help="One experiment in full: profiles, design, deviations and claims.")
def show_cmd(
    experiment: ExperimentArg,
    experiments: ExperimentsOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """One experiment in full: its profiles (description, trials, estimate), what each can decide (the design),
    where it differs from its paper (deviations) and what the paper claimed."""
    from rich.markup import escape

    _check_names(experiment, extra=experiments)  # a typo is said at once (exit 2), before the analysis is imported
    from kit.catalog import list_experiments, resolve_experiment
    from kit.studies import study_dir_of

    path = resolve_experiment(experiment, experiments)
    found = list_experiments([path.parent] if study_dir_of(path) is None else [study_dir_of(path) or path])
    matches = [e for e in found if Path(e["path"]).resolve() == (study_dir_of(path) or path).resolve()] or found
    e = matches[0]
    if json_out:
        _print_json(e, "show")
        return
    if e.get("invalid"):
        raise KitError(e["profiles"][0]["description"], where=str(path))
    from kit.analysis.design import design_summary

    out.print(f"[bold]{escape(e['id'])}[/]: {escape(e.get('title') or '')}")
    out.print(escape(f"where: {_where(e['path'])}" + (f" · protocol from {e['protocol_source']}"
                                                       if e.get("protocol_source") else "")
                     + f" · {len(e.get('deviations', []))} deviations listed, {len(e.get('claims', []))} claims"))
    rows = {r["profile"]: r for r in _list_rows([e], Path("runs"))}
    table = Table(title="Profiles: what each runs and whether it can decide its hypotheses", show_lines=True)
    for col in ("profile", "trials", "estimate here", "description", "hypotheses: can this profile decide them?"):
        table.add_column(col, overflow="fold")
    for p in e["profiles"]:
        hyps = "\n".join(design_summary(r) for r in (p.get("design") or {}).get("rows", [])) or "-"
        table.add_row(escape(p["name"]), str(p["trials"]), escape(rows[p["name"]]["estimate_text"]),
                      escape(p["description"]), escape(hyps))
    out.print(table)
    for r in rows.values():  # what the host lacks for a profile (GPUs, torchvision), with the fix
        if r.get("why_not_here") and "torchvision" in r["why_not_here"]:
            out.print(escape(f"{r['profile']}: {r['why_not_here']}"), soft_wrap=True)
    _print_deviations_of(e)
    _print_claims_of(e)
    names = [p["name"] for p in e["profiles"]]
    out.print(escape("run it: " + kit_cmd(f"run {e['id']} --profile {'quick' if 'quick' in names else names[-1]}")))


def _print_deviations_of(e: dict[str, Any]) -> None:
    from rich.markup import escape

    rows = e.get("deviations", [])
    if not rows:
        out.print(escape(f"{e['id']}: no deviations from the paper listed"))
        return
    dev = Table(title=f"{escape(e['id'])}: deviations from the paper", show_lines=True)
    for col in ("aspect", "paper", "kit", "why"):
        dev.add_column(col, overflow="fold")
    for d in rows:
        dev.add_row(*(escape(d[k]) for k in ("aspect", "paper", "kit", "why")))
    out.print(dev)


def _claim_quantity(c: dict[str, Any]) -> str:
    if c.get("untestable"):
        return f"not judged: {c['untestable']}"
    arms = c.get("arms") or []
    t = c.get("threshold") or 1.0
    ratio = "/".join(arms) if t == 1.0 else f"{arms[0]}/({t:g} x {arms[1]})" if len(arms) == 2 else "/".join(arms)
    what = {"direction": f"{ratio} {'> 1' if c.get('direction') == 'greater' else '< 1'}",
            "difference": f"{ratio} != 1",
            "magnitude": f"{ratio} = {c.get('paper_value')} +- {(c.get('tolerance') or 0) + (c.get('uncertainty') or 0):.0%}"
                         + (" (read from a figure)" if c.get("approximate") else ""),
            "no_difference": f"{ratio} within {(c.get('margin') or 0):.0%} of 1",
            "not_significant": (f"{ratio} not significant" if not c.get("factor") else
                                f"{', '.join(arms)}: no significant trend with {c.get('factor')}")
                               + f" at the paper's n = {c.get('paper_n')}",
            "trend": f"{', '.join(arms)} {c.get('trend')} with {c.get('factor')}"
                     + (f" up to {c.get('up_to'):g}" if c.get("up_to") is not None else "")}.get(c.get("kind", ""), "")
    where = ", ".join(f"{k}={v}" for k, v in (c.get("where") or {}).items())
    out = f"{c.get('metric')} ({c.get('phase')}): {what}" + (f" [{where}]" if where else "") + \
        (f"; {c.get('scope')}" if c.get("scope") in ("overall", "each_network") else "")
    if c.get("cause_removed"):
        out += f"; recorded, never contradicted: the kit removes the gap's cause ({c['cause_removed']})"
    return out


def _claim_conditions(c: dict[str, Any]) -> str:
    """The conditions a claim depends on (those that block a verdict first), as `kit list --claims` shows them."""
    tied = " ".join(f"{k} {v}" for k, v in (c.get("tied_versions") or {}).items())
    parts = (c.get("device") if c.get("device") != "any" else "",
             f"{c['gpus']} GPUs" if c.get("gpus") else "",
             f"{c['threads']} CPU threads" if c.get("threads") else "",
             f"CPU {c['cpu_model']}" if c.get("cpu_model") else "",
             f"tied to {tied}" if tied else "",
             "timing on shapes (a stand-in of the paper's sizes may judge it)" if c.get("data") == "shapes" else "",
             c.get("hardware") or "",
             "paper's versions " + " ".join(f"{k} {v}" for k, v in (c.get("versions") or {}).items())
             if c.get("versions") else "")
    return "; ".join(x for x in parts if x) or "any"


def _print_claims_of(e: dict[str, Any]) -> None:
    from rich.markup import escape

    rows = e.get("claims", [])
    table = Table(title=f"{e['id']}: what the paper claimed ({len(rows)})", show_lines=True)
    for col in ("id", "source", "statement", "kind", "quantity", "the paper's words", "conditions"):
        table.add_column(col, overflow="fold")
    for c in rows:
        words = (c.get("paper_text") or "-") + (f" [{c['reading']}]" if c.get("reading") else "")
        table.add_row(*(escape(str(v)) for v in (c["id"], c["source"], c["statement"], c["kind"], _claim_quantity(c),
                                                   words, _claim_conditions(c))))
    if not rows:
        out.print(escape(f"{e['id']}: no [[claims]] listed"))
        return
    out.print(table)


@app.command(short_help="What this host offers and how to fix what is missing, opening with the verdict.")
def doctor(
    study: Annotated[str | None, typer.Argument(help="An experiment id or path: also say whether this host has what "
                                                     "its profile needs.", autocompletion=_complete_experiments)] = None,
    profile: Annotated[str | None, typer.Option("--profile", "-p", help="With STUDY: the profile to check (default: "
                                                "paper where an NVIDIA GPU is present, quick elsewhere).",
                                                autocompletion=_complete_profiles)] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Dataset directory to check as well. Env: KIT_DATA_DIR.")] = None,
    download: Annotated[bool, typer.Option(help="Whether kit run will download missing datasets (it does by default), "
                                                "so that they count as available.")] = True,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when something required is missing: the python and "
                                                          "frameworks, and with STUDY whatever its profile needs.")] = False,
    check_downloads: Annotated[bool, typer.Option(help="Probe the dataset download hosts (a TCP connection within 3 s "
                                                       "each, in parallel); --no-check-downloads says \"not checked\".")] = True,
    json_out: JsonFlag = False,
) -> None:
    """Say what this host offers (engine, GPUs, NVML, sensors, RAPL, datasets) and how to fix what is missing; the
    first line is the verdict: what this host is ready for and what is not available here, and why."""
    from rich.markup import escape

    _check_names(study, profile)  # a typo is said at once (exit 2)
    from kit.doctor import run_checks, verdict
    from kit.reproduce_all import study_needs

    study_path = None
    if study is not None:
        from kit.catalog import resolve_experiment

        study_path = resolve_experiment(study)
    findings = run_checks(data_dir=data_dir, download=download, check_downloads_=check_downloads)
    summary = verdict(findings)
    needs = study_needs(study_path, profile, findings, download, data_dir) if study_path is not None else None
    required = [f for f in findings if not f["ok"] and not f.get("optional", True)]
    failed = bool(required) or bool(needs and needs["missing"])
    if json_out:
        _print_json({"verdict": summary, "downloads": download, "download_hosts": _hosts_state(findings),
                     "findings": findings, "study": needs, "strict_failed": strict and failed}, "doctor")
    else:
        out.print(("[green]" if not summary["unavailable"] else "[yellow]") + escape(summary["line"]) + "[/]")
        out.print(f"downloads: {'on' if download else 'off'} (kit run downloads missing datasets unless --no-download)"
                  + (f"; dataset hosts: {_hosts_state(findings)}" if download else ""))
        table = Table(title="kit doctor", show_lines=True)
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for f in findings:
            status = ("[green]ok[/]" if f["ok"] else f"[cyan]{escape(f['status'])}[/]" if f.get("status") else
                      "[yellow]missing[/]" if f.get("optional", True) else "[red]FAIL[/]")
            table.add_row(escape(f["check"]), status, escape(f["detail"]), escape(f.get("fix") or ""))
        out.print(table)
        if needs is not None:
            if needs["missing"]:
                out.print(escape(f"{needs['study']} ({needs['profile']} profile): missing here: "
                                 + "; ".join(needs["missing"])))
            else:
                out.print(escape(f"{needs['study']} ({needs['profile']} profile): this host has what it needs"))
    if strict and failed:
        raise typer.Exit(ExitCode.FAILED)


def _hosts_state(findings: list[dict[str, Any]]) -> str:
    """"reachable", "not reachable" (some host did not answer) or "not checked", from the dataset downloads row."""
    row = next((f for f in findings if f["check"] == "dataset downloads"), None)
    if row is None:
        return "not checked"
    return "reachable" if row["ok"] else str(row.get("status") or "not reachable")


@app.command(short_help="Fix the host's noise sources for benchmarking (needs root); --reset undoes it.")
def tune(
    reset: Annotated[bool, typer.Option("--reset", help="Restore what `kit tune` changed (from its state file).")] = False,
    sys_root: Annotated[Path, typer.Option(hidden=True, help="sysfs root (tests).")] = Path("/sys"),
    state: Annotated[Path | None, typer.Option(hidden=True, help="state file (tests).")] = None,
) -> None:
    """Fix the host's noise sources for benchmarking (CPU governor performance, turbo/boost off, GPU clocks locked
    where the driver allows), recording what it changed; `kit tune --reset` puts it back. Needs root."""
    from kit import tune as tuning

    where = state if state is not None else tuning.STATE_FILE
    if reset:
        res = tuning.reset(sys_root, where)
        for line in res["restored"]:
            out.print(f"restored {_esc(line)}")
        for line in res["refused"]:
            out.print(f"[yellow]not restored[/] {_esc(line)}")
        if not res["restored"] and not res["refused"]:
            out.print("nothing was changed by kit tune")
        return
    res = tuning.tune(sys_root, where)
    for c in res["changed"]:
        out.print(f"set {_esc(c['name'])}: {_esc(c['before'])} -> {_esc(c['after'])}")
    for name in res["unchanged"]:
        out.print(f"[dim]already set: {_esc(name)}[/]")
    for g in res["gpus"]:
        out.print(f"GPU {g['index']}: " + (f"clocks locked at {g['sm_mhz']} MHz" if g.get("locked") else
                                           f"[yellow]clocks not locked[/] ({_esc(g.get('why'))})"))
    for line in res["failed"]:
        out.print(f"[red]failed[/] {_esc(line)}")
    if res["nothing"]:
        out.print("this host exposes no frequency, boost or GPU clock control (a VM?): nothing to tune; "
                  "CPU pinning ([container] cpuset = \"auto\") still separates the trial from the collectors")
    out.print(f"state recorded in {_esc(res['state'])}; undo with: {_esc(kit_cmd('tune --reset'))}")
    if res["failed"]:
        raise typer.Exit(1)


@app.command(short_help="Check that this host measures what the kit says; exit 1 if a check fails.")
def selftest(
    gpu: Annotated[int | None, typer.Option(help="NVML index of the GPU to test (default: the first; PCI bus order).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the record as JSON on stdout; the table goes to stderr.")] = False,
    json_file: JsonFile = None,
    backend_: Annotated[SelftestBackend, typer.Option("--backend", help="local (this venv's frameworks) or docker (each image, via the engine).")] = SelftestBackend.local,
    images: Annotated[str | None, typer.Option(help="With --backend docker: matrix rows to test, e.g. pytorch-2.14-cu130,tensorflow-2.21-cu125 (default: the host's default rows).")] = None,
    period_s: Annotated[float, typer.Option(help="Sampling period whose rate the collectors must reach.")] = 0.1,
) -> None:
    """Check that this host measures what the kit says (GPU by UUID, timers, sampling rate, energy counter, TF32, clocks); exit 1 if a check fails."""
    if json_out:
        _to_stderr()
    from kit.selftest import run_selftest

    res = run_selftest(gpu=gpu, backend=backend_.value, images=images.split(",") if images else None, period_s=period_s,
                       on_progress=lambda s: console.print(f"[dim]{s}[/]", highlight=False))
    style = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]", "info": "[cyan]info[/]"}
    table = Table(title=f"kit selftest ({res['backend']}, " + (f"GPU {res['gpu_index']})" if res["gpu"] else "no GPU)"))
    for col in ("check", "status", "detail"):
        table.add_column(col, overflow="fold")
    for c in res["checks"]:
        table.add_row(c["name"], style[c["status"]], c["detail"])
    out.print(table)
    if json_out or json_file:
        # the self-test record's own format number (kit.selftest.SCHEMA) stays, beside the document's schema
        _print_json({**res, "record_schema": res.get("schema")}, "selftest", json_file, stdout=json_out)
    failed = [c["name"] for c in res["checks"] if c["status"] == "fail"]
    if failed:
        console.print(f"[red]self-test failed[/]: {', '.join(failed)}")
        raise typer.Exit(1)
    out.print("self-test passed" + ("" if res["gpu"] else " (CPU path; GPU checks skipped)"))


# -- run / report -------------------------------------------------------------

@app.command()
def run(
    spec: Annotated[str | None, typer.Argument(help="An experiment id (kit list) or its TOML or study folder (omit with --resume).", autocompletion=_complete_experiments)] = None,
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
    image: Annotated[list[str] | None, typer.Option("--image", metavar="<str>", help="Container backends: the matrix row of a framework, e.g. pytorch=pytorch-2.6-cu124 (repeatable).")] = None,
    images: Annotated[str | None, typer.Option("--images", help="Container backends: run one arm per matrix row, interleaved in one plan, e.g. pytorch-2.6-cu124,pytorch-2.7-cu126 (version-to-version comparison).")] = None,
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
    _check_names(spec, profile)  # a typo is said at once (exit 2), before kit.catalog imports the analysis
    from kit.catalog import resolve_experiment

    spec_path = resolve_experiment(spec) if spec is not None else None  # before the heavy imports
    from kit.collectors.quiet import parse_wait

    wait_s = parse_wait(wait_for_quiet) if wait_for_quiet is not None else None
    if json_out:
        _to_stderr()
    from kit.run_request import execute, run_request
    from kit.ui import RichEvents

    req = run_request(
        spec=spec_path, profile=profile, resume=resume, backend=_choose_backend(backend.value), runs_dir=runs_dir,
        data_dir=data_dir, download=download, seed=seed, max_trials=max_trials, executor=executor.value,
        slurm={"partition": partition, "account": account, "gpus_per_trial": gpus_per_trial, "time_limit": time_limit,
               "blocks_per_job": blocks_per_job, "sbatch_options": tuple(sbatch_option) if sbatch_option else None},
        chunk=chunk, label=label, retry_failed=retry_failed, retry_oom=retry_oom, image=image, images=images,
        trust_study_code=trust_study_code, study=study, study_digest=study_digest)
    req.opts.wait_for_quiet_s = wait_s
    if build_images and req.opts.backend == "docker" and req.spec is not None:
        _build_run_images(req.spec, req.opts.arms or req.spec.experiment.frameworks,
                          req.opts.backend_options.get("images"))
    if (budget is not None or max_repetitions is not None) and not until_conclusive:
        raise KitError("--budget and --max-repetitions belong to --until-conclusive", where="kit run",
                       fix="add --until-conclusive")
    with RichEvents(console) as events:
        if until_conclusive:
            rd = _run_until_conclusive(req, budget, max_repetitions, events)
        else:
            rd = execute(req, events)
    out.print(f"run directory: [bold]{_esc(rd.path)}[/]")
    if chunk is not None:
        return
    if wait:  # only a run handed to jobs has anything to wait for
        _wait_for_jobs(rd)
    status = rd.manifest().status
    if report and status == "complete":
        from kit.report import default_formats

        formats, note = default_formats()
        if note:
            out.print(f"[yellow]{note}[/]")
        _make_report(rd.path, formats, req.opts.study_trust)
    elif status != "complete":
        out.print(f"[yellow]run is {_esc(status)}[/]: continue with `{_esc(kit_cmd(f'run --resume {rd.path}'))}`")
    if json_out:
        _print_json(_run_summary(rd.path), "run-summary")


def _run_until_conclusive(req: Any, budget: str | None, max_repetitions: int | None, events: Any) -> RunDir:
    from kit.sequential_run import UntilConclusive, parse_budget, run_until_conclusive

    if req.spec is None:
        raise KitError("--until-conclusive starts a new run", where="--resume",
                       fix="give the spec instead of --resume (a resumed run runs its recorded plan)")
    until = UntilConclusive(max_repetitions=max_repetitions,
                            budget_s=parse_budget(budget) if budget is not None else None)
    rd = run_until_conclusive(req.spec, req.opts, until, events)
    from kit.analysis.analyze import current_analysis

    seq = current_analysis(rd.path, rd)[0].raw.get("sequential") or {}
    reason = str(seq.get("stop_reason") or ("conclusive" if seq.get("decided") else ""))
    why = {"conclusive": "every testable hypothesis decided", "budget": "the next look would pass the budget"}.get(
        reason, "the maximum repetitions reached")
    out.print(f"[bold]until conclusive[/]: stopped at {seq.get('stopped_at')} repetitions per arm ({why})")
    for d in seq.get("decisions") or []:
        out.print(f"  {_esc(d['key'])}: {_esc(d['status'])}")
    for o in seq.get("open") or []:
        out.print(f"  [yellow]open[/] {_esc(o['key'])}: {_esc(o['why'])}")
    return rd


def _wait_for_jobs(rd: RunDir) -> None:
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
            console.print(f"[dim]{n}/{total} trials finished · {active} job(s) pending or running[/]")
            last["n"] = n

    executor.wait(rd, poll)
    _print_status(rd.path)


@app.command("reproduce-all", short_help="Run every study whose profile fits this host (resumable) and write one summary page.")
def reproduce_all_cmd(
    budget: Annotated[str | None, typer.Option(help="The most time to spend, e.g. 2h or 45m: a study whose estimate does not fit what is left is skipped, never started.")] = None,
    profile: Annotated[str, typer.Option("--profile", "-p", help="auto (paper where an NVIDIA GPU is present, quick elsewhere), quick, paper, or another profile name; a study without it is skipped.")] = "auto",
    runs_dir: Annotated[Path, typer.Option(help="Where the run directories, the state file and the summary go; the same one again resumes.")] = Path("runs"),
    backend_: Annotated[Backend, typer.Option("--backend", help="local, docker, apptainer, or auto (containers when an engine with GPUs is present).")] = Backend.local,
    only: Annotated[list[str] | None, typer.Option("--only", metavar="<str>", autocompletion=_complete_experiments, help="Only this study (its id or folder name; repeatable).")] = None,
    experiments: Annotated[Path | None, typer.Option("--experiments", help="The studies of this directory instead of the kit's experiments/.")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Directory with the dataset files (offline hosts). Env: KIT_DATA_DIR.")] = None,
    build_images: Annotated[bool, typer.Option(help="Container backends: build the images each run needs if they are missing.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan and stop.")] = False,
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help="Resume the runs the state file names even when their study code (study/*.py) is neither the kit's own nor on your allow-list (`kit trust`). Read the code first.")] = False,
    wait_for_quiet: Annotated[str | None, typer.Option("--wait-for-quiet", metavar="DURATION", help="Each run: on a busy host (other work above [design] disturbance_cpu during the idle baseline, or re-runs of disturbed trials disturbed again), wait up to this long for a quiet window, e.g. 10m, with a countdown; then go on either way. Default: go on at once (disturbed trials are re-run within the run's budget, the rest flagged).")] = None,
) -> None:
    """Run every study whose profile fits this host, one after another (resumable), and write one summary page."""
    from kit.report import default_formats
    from kit.reproduce_all import BUNDLED, KitRunner
    from kit.reproduce_summary import reproduce_all
    from kit.sequential_run import parse_budget
    from kit.ui import RichEvents

    backend = backend_.value
    budget_s = parse_budget(budget) if budget is not None else None
    from kit.collectors.quiet import parse_wait

    wait_s = parse_wait(wait_for_quiet) if wait_for_quiet is not None else None
    formats, note = default_formats()
    chosen = _choose_backend(backend) if not dry_run else backend

    def prepare(req: Any) -> None:
        if build_images and req.opts.backend == "docker" and req.spec is not None:
            _build_run_images(req.spec, req.opts.arms or req.spec.experiment.frameworks,
                              req.opts.backend_options.get("images"))

    from kit.trust import StudyTrust

    trust = StudyTrust(trust_run_copy=trust_study_code)
    runner = KitRunner(runs_dir, chosen, data_dir, events=lambda: RichEvents(console), prepare=prepare,
                       report=lambda path: _make_report(path, formats, trust), trust=trust, wait_for_quiet_s=wait_s)
    if note and not dry_run:
        out.print(f"[yellow]{note}[/]")
    from kit.reproduce_all import Host

    # the backend decides whether this interpreter's torchvision matters (a container brings its own)
    res = reproduce_all(runs_dir, runner, profile=profile, budget_s=budget_s, only=only or (),
                        experiments=experiments or BUNDLED, host=Host.detect(chosen), events=_ReproduceLines(),
                        dry_run=dry_run, trust=trust)
    for p in res.summary:
        out.print(f"summary: [bold]{_esc(p)}[/]")
    if res.interrupted:
        console.print("[yellow]interrupted[/]: run the same command again to resume")
        raise typer.Exit(130)


class _ReproduceLines:
    """The plan up front, then a line as each study starts and ends (kit.reproduce_all.ReproduceEvents)."""

    def planned(self, plan: Any, host: Any, budget_s: float | None) -> None:
        from kit.reproduce_summary import fmt_duration

        budget = f", budget {fmt_duration(budget_s)}" if budget_s is not None else ""
        table = Table(title=_esc(f"kit reproduce-all on this host ({host.describe()}{budget})"))
        for col in ("study", "profile", "estimate", "plan"):
            table.add_column(col, overflow="fold")
        for e in plan:
            est = "-" if e.estimate_s is None else fmt_duration(e.estimate_s) + (
                "" if e.estimate_from in ("spec", "") else f" (measured: {e.estimate_from})")
            what = {"run": "run", "resume": f"resume {e.run_dir}", "done": f"done ({e.run_dir})"}.get(
                e.action, f"[yellow]skip[/]: {_esc(e.reason)}")
            table.add_row(_esc(e.study), _esc(e.profile), _esc(est), what if e.action == "skip" else _esc(what))
        out.print(table)

    def study_started(self, entry: Any, index: int, total: int) -> None:
        verb = "resuming" if entry.action == "resume" else "starting"
        console.print(f"[bold]{verb} {_esc(entry.study)}[/] ({index}/{total}, profile {_esc(entry.profile)})")

    def study_finished(self, result: Any) -> None:
        from kit.reproduce_summary import fmt_duration

        style = {"complete": "green", "failed": "red", "incomplete": "yellow"}.get(result.status, "blue")
        wall = f" in {fmt_duration(result.wall_s)}" if result.wall_s is not None else ""
        why = f": {_esc(result.reason)}" if result.reason else ""
        console.print(f"[{style}]{result.status}[/] {_esc(result.entry.study)}{wall}{why}", highlight=False)


@app.command()
def status(run_dir: RunDirArg,
           trials: Annotated[bool, typer.Option(help="List every trial, not only the summary.")] = False,
           json_out: JsonFlag = False) -> None:
    """Queued, running, finished, failed and lost trials of a run, with Slurm job ids and reasons."""
    _need_run_dir(run_dir)
    if json_out:
        from kit.executors.status import run_status

        _print_json(run_status(run_dir), "status")
        return
    _print_status(run_dir, trials)


def _need_run_dir(run_dir: Path) -> None:
    """The argument check before the heavy imports (analysis, frameworks): a missing directory is said at once."""
    if not run_dir.is_dir():
        from kit.errors import StoreError

        raise StoreError("run directory not found", where=str(run_dir),
                         fix="give a directory made by `kit run` (ls runs/)")


def _print_status(run_dir: Path, trials: bool = False) -> None:
    from rich.markup import escape

    from kit.executors.status import run_status

    st = run_status(run_dir)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(st["counts"].items()))
    retried = f" ({st['retried']} retried; failed attempts under attempts/)" if st.get("retried") else ""
    out.print(escape(f"{st['experiment']} · {st['run_dir']} · executor {st['executor']} · status {st['status']} · "
                     f"{st['total']} trials: {counts}{retried}"))
    if st.get("status_reason"):  # the manifest says "running", no process works on the run (kit.executors.liveness)
        out.print(escape(f"the manifest says {st['recorded_status']}; {st['status_reason']}"
                         + (". Continue with: " + kit_cmd(f"run --resume {st['run_dir']}")
                            if st["status"] == "interrupted" else "")))
    if st["jobs"]:
        table = Table(title="Slurm jobs")
        for col in ("chunk", "job", "state", "node", "done", "reason"):
            table.add_column(col)
        for j in st["jobs"]:
            table.add_row(*(_esc(v) for v in (j["chunk"], j["job"], j["state"], j["node"], f"{j['finished']}/{j['trials']}",
                                              j["reason"])))
        out.print(table)
    rows = st["trials"] if trials else [r for r in st["trials"] if r["state"] in ("failed", "lost")]
    if rows:
        table = Table(title="Trials" if trials else "Failed or lost trials")
        for col in ("trial", "state", "job", "node", "signal", "earlier attempts", "reason"):
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(*(escape(str(v)) for v in (r["trial_id"], r["state"], r["job"] or "", r["node"] or "",
                                                      r.get("signal") or "", r.get("earlier_attempts") or "", r["reason"])))
        out.print(table)
        if any(r["state"] == "failed" for r in rows):
            out.print(escape("re-run failed trials in their plan positions: "
                             + kit_cmd(f"run --resume {st['run_dir']} --retry-failed")))


def _choose_backend(name: str) -> str:
    if name != "auto":
        return name
    try:
        from kit.engine import engine_with_gpu
    except ImportError:
        return "local"
    chosen = "docker" if engine_with_gpu() else "local"
    console.print(f"[dim]--backend auto: {chosen} ("
                  + ("a container engine can hand this host's NVIDIA GPU(s) to containers" if chosen == "docker"
                     else "no container engine with GPU support here; see `kit doctor`") + ")[/]")
    return chosen


def _build_run_images(spec: Any, arms: tuple[str, ...], overrides: dict[str, str] | None) -> None:
    from kit.images.commands import ensure_images

    ensure_images(arms, overrides, spec.container,
                  on_line=lambda s: console.out(f"  | {s}", highlight=False),
                  on_start=lambda r: console.print(f"[bold]building image {r.name}[/] (needed by this run)"))


TRUST_HELP = ("Run the study code in the run's own copy (study/analysis.py, report.py) for this command; "
              "by default only the kit's own studies and digests trusted with `kit trust` run. Read the code first.")
STUDY_HELP = "Use this study folder's analysis.py/report.py instead of the run's copy (your own code)."


@app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="A run directory made by `kit run`.", autocompletion=_complete_run_dirs)],
    format: Annotated[str, typer.Option("--format", "-f", help="Comma-separated, any of: html, latex, pdf.")] = "html",
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help=TRUST_HELP)] = False,
    study: Annotated[Path | None, typer.Option("--study", help=STUDY_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout (analysis, report files, claims, hypotheses); the tables go to stderr.")] = False,
) -> None:
    """Analyse a run directory (no trial is run) and write its report."""
    formats = tuple(f.strip() for f in format.split(",") if f.strip())
    bad = [f for f in formats if f not in ("html", "latex", "pdf")]
    if bad or not formats:
        raise typer.BadParameter(f"{', '.join(bad) or 'nothing'}: give html, latex and/or pdf, comma-separated",
                                 param_hint="--format")
    _need_run_dir(run_dir)
    if json_out:
        _to_stderr()
    from kit.trust import StudyTrust

    _make_report(run_dir, formats, StudyTrust(trust_run_copy=trust_study_code, study_dir=study))
    if json_out:
        _print_json(_run_summary(run_dir), "run-summary")


def _print_incomplete(run_dir: Path, analysis: dict[str, Any]) -> None:
    """The line an unfinished run's report opens with (kit.executors.liveness.incomplete_note), its hint runnable
    from here."""
    from kit.executors.liveness import incomplete_note, run_state
    from kit.store import RunDir

    man = RunDir.open(run_dir).manifest()
    run = analysis["run"]
    note = incomplete_note(run_state(Path(run_dir), man.status, man.executor.name), int(run.get("finished") or 0),
                           int(run.get("planned") or 0), Path(run_dir))
    if note:
        out.print(f"[yellow]{_esc(in_user_terms(note))}[/]", soft_wrap=True)


def _make_report(run_dir: Path, formats: tuple[str, ...], trust: Any = None) -> None:
    from kit.analysis.analyze import analyze_run
    from kit.report import write_report
    from kit.report.answer import answer

    analysis = analyze_run(run_dir, trust=trust)
    paths = write_report(run_dir, analysis, formats, trust)
    _print_incomplete(run_dir, analysis)
    out.print(f"[bold]Answer:[/] {_esc(answer(analysis)['headline'])}", soft_wrap=True)
    _print_claims(analysis)
    _print_hypotheses(analysis)
    out.print(f"analysis: [bold]{_esc(Path(run_dir) / 'analysis.json')}[/]")
    for p in paths:
        out.print(f"report: [bold]{_esc(p)}[/]")
    _print_study_notice(analysis)


def _print_study_notice(analysis: dict[str, Any] | Analysis) -> None:
    code = analysis.study_code if isinstance(analysis, Analysis) else analysis.get("study_code") or {}
    notice = code.get("notice")
    if notice:
        console.print(f"[yellow]note:[/] {_esc(notice)}", highlight=False, soft_wrap=True)


def _esc(value: object) -> str:
    """Text from run directories, specs and bundles, shown as written (never as rich markup)."""
    from rich.markup import escape

    return escape(str(value))


def _print_claims(analysis: dict[str, Any]) -> None:
    """The paper's findings first: the headline, one row per claim this run judged (this run's value, the
    verdict), then one line per reason for the claims it could not test, with what would test them."""
    from kit.report.context import claims_context

    ledger = claims_context(analysis)
    out.print(f"[bold]Did the paper's findings hold?[/] {_esc(ledger['headline'])}")
    if not ledger["rows"]:
        return
    colour = {"replicated": "green", "contradicted": "red", "inconclusive": "yellow"}
    if ledger["judged"]:
        table = Table(title=None)
        for col in ("claim", "the paper found", "this run", "verdict"):
            table.add_column(col, overflow="fold")
        for c in ledger["judged"]:
            style = colour.get(c["verdict"], "dim")
            shown = "p = " in (c["value_text"] or "")  # the value's own text may carry its p already
            n_fam = c.get("family_size") or 0
            p = (f"\np = {c['p']:.3g}" if c.get("p") is not None and not shown else "") + (
                f"; Holm over {n_fam} claim{'s' if n_fam != 1 else ''}: {c['p_adjusted']:.3g}"
                if c.get("p_adjusted") is not None else "")
            table.add_row(_esc(f"{c['id']} ({c['source']})"), _esc(c["statement"]), _esc((c["value_text"] or "-") + p),
                          f"[{style}]{_esc(c['verdict'])}[/]: {_esc(c['reason'])}")
        out.print(table)
    for g in ledger["untested"]:
        would = (f" Would test {'it' if len(g['ids']) == 1 else 'them'}: {g['command']} {g['host']}." if g["command"]
                 else f" Would test {'it' if len(g['ids']) == 1 else 'them'}: {g['host']}." if g["host"] else "")
        out.print(f"[dim]not testable[/] {_esc(g['ids_text'])}: {_esc(g['reason'])}.{_esc(would)}", soft_wrap=True)


def _print_hypotheses(analysis: dict[str, Any]) -> None:
    """This run's answer in sentences (kit.report.answer: the faster side named, r >= 1, with its interval and
    basis), the warnings that qualify it, one line for what was not testable here; then the tested rows."""
    from kit.report.answer import answer

    ans = answer(analysis)
    for line in ans["decided"] + ans["open"]:
        out.print(f"  {_esc(line)}", soft_wrap=True)
    for w in ans["warnings"]:
        out.print(f"[yellow]warning:[/] {_esc(w)}", soft_wrap=True)
    if ans["untestable"]:
        out.print(f"[dim]{_esc(ans['untestable'])}[/]", soft_wrap=True)
    tested = [h for h in analysis.get("hypotheses", []) if h.get("tested")]
    if not tested:
        return
    table = Table(title="Hypotheses tested")
    for col in ("id", "phase", "metric", "n", "test", "p (Holm)", "effect", "decision"):
        table.add_column(col, overflow="fold")
    for h in tested:
        metric = h["metric"] + (f" [{h['config_label']}]" if h.get("config_label") else "")
        table.add_row(*(_esc(v) for v in (h["id"], h["phase"], metric, str(h.get("n_pairs", "")),
                                           h.get("test_method") or "-", _fmt_p(h.get("p_adj")),
                                           h.get("effect_text") or "-", h["decision"])))
    out.print(table)


def _fmt_p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


def _fmt_mde(row: dict[str, Any]) -> str:
    if row.get("decidable") is False:
        return "none (n too small)"
    return "unknown" if row.get("mde") is None else f"{row['mde']:.1%}"


@app.command(short_help="Compare two runs, or two arms of one run: ratio, test, effect size and a verdict per metric.")
def compare(
    run_a: Annotated[Path, typer.Argument(help="Baseline run directory (with --arms: the run whose arms are compared).",
                                          autocompletion=_complete_run_dirs)],
    run_b: Annotated[Path | None, typer.Argument(help="Candidate run directory (omit with --arms).",
                                                 autocompletion=_complete_run_dirs)] = None,
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
) -> None:
    """Compare two runs, or two arms of one run (e.g. two framework versions): ratio, test, effect size,
    minimum detectable change and a three-way verdict per metric (change, no change, inconclusive)."""
    import dataclasses

    _old_json_form(json_out, run_a, run_b)
    if json_out:
        _to_stderr()
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
    _need_run_dir(run_a)
    if run_b is not None:
        _need_run_dir(run_b)
    opts = CompareOptions(threshold=threshold, alpha=alpha, allow_different_hosts=allow_different_hosts)
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
    out.print(f"[bold]Answer:[/] {_esc(said['headline'])}", soft_wrap=True)
    for line in said["changed"][1:]:
        out.print(f"  {_esc(line)}", soft_wrap=True)
    table = Table(title=_esc(f"{res['experiment_b']}: B vs A (threshold {threshold:.0%}, α {alpha})"))
    for col in ("config", "metric", "phase", "arm", "n", "median A", "median B", "B/A [95% CI]", "p (Holm)",
                "detectable", "verdict"):
        table.add_column(col, overflow="fold")
    style = {"regression": "red", "improvement": "green", "inconclusive": "yellow", "suspect": "magenta"}
    for r in res["rows"]:
        ci = "" if r["ratio_low"] is None else f" [{r['ratio_low']:.3f}, {r['ratio_high']:.3f}]"
        table.add_row(_esc(r["config"]), _esc(r["metric"]), _esc(r["phase"]), _esc(r["arm"]),
                      str(min(r["n_a"], r["n_b"])), _esc(human_value(r["median_a"], r["unit"])),
                      _esc(human_value(r["median_b"], r["unit"])),
                      _esc(("-" if r["ratio"] is None else f"{r['ratio']:.3f}") + ci),
                      _fmt_p(r["p_adj"]), _fmt_mde(r),
                      f"[{style.get(r['verdict'], 'white')}]{r['verdict']}[/]")
    out.print(table)
    out.print(f"detectable: the smallest change the comparison would have found with power 80 % at its n and "
              f"observed noise (level alpha/m = {alpha}/{len(res['rows'])}, the test's exact rejection region); "
              f"\"no change\" needs the {1 - 2 * alpha:.0%} interval of B/A inside [{1 / (1 + threshold):.3f}, "
              f"{1 + threshold:.3f}] (equivalence, TOST at {alpha})")
    for r in res["rows"]:
        if r["verdict"] == "suspect":
            out.print(f"[magenta]suspect[/] {_esc(r['arm'])} {_esc(r['metric'])} {_esc(r['phase'])} "
                      f"(would be {r['was']}): {_esc(r['suspect_cause'])}")
        elif r.get("load_note"):
            out.print(f"[yellow]under load[/] {_esc(r['arm'])} {_esc(r['metric'])} {_esc(r['phase'])} "
                      f"({r['verdict']} stands): {_esc(r['load_note'])}", soft_wrap=True)
    advice = conclusive_advice(res)
    if advice:
        out.print(f"[yellow]{_esc(advice)}[/]")
    if res["provenance_differences"]:
        from rich.markup import escape

        pt = Table(title="Provenance differences (and whether they could explain a changed verdict)")
        for col in ("what", "A", "B", "could explain a change"):
            pt.add_column(col, overflow="fold")
        for d in res["provenance_differences"]:
            pt.add_row(escape(d["key"]), escape(str(d["a"])), escape(str(d["b"])), escape(d.get("may_explain") or "-"))
        out.print(pt)
    else:
        out.print("provenance: no differences")
    for c in res.get("claims_changed") or []:
        out.print(f"[yellow]paper claim {_esc(c['id'])} changed verdict[/]: {_esc(c['verdict_a'])} in A "
                  f"({_esc(c['value_a'] or '-')}) -> {_esc(c['verdict_b'])} in B ({_esc(c['value_b'] or '-')}): "
                  f"{_esc(c['statement'])}")
        for why in c["could_explain"][:8] or ["no provenance difference that could explain it: noise, or the "
                                               "host's state"]:
            out.print(f"  could explain it: {_esc(why)}")
    if json_out or json_file:
        _print_json(res, "compare", json_file, stdout=json_out)
    if html_out:
        render_html(res, html_out)
    code = exit_code(res, fail_on, allow_inconclusive)
    if code == 1:
        console.print(f"[red]{fail_on} found[/]: exit {code}")
    elif code == EXIT_SUSPECT:
        console.print(f"[magenta]no {fail_on} found, but a significant change is suspect[/]: the two sides ran in "
                      f"different host conditions; re-run on a quiet host: exit {code}")
    elif code:
        console.print(f"[yellow]no {fail_on} found, but the comparison could not have seen one everywhere[/]: exit {code} "
                      "(more repetitions, or --allow-inconclusive)")
    if code:
        raise typer.Exit(code)


@app.command("bisect")
def bisect_cmd(
    spec: Annotated[Path, typer.Argument(help="Experiment TOML.", autocompletion=_complete_experiments)],
    images: Annotated[str, typer.Option("--images", help="Image rows of one framework in release order, known good first, known bad last, e.g. tensorflow-2.19-cpu,tensorflow-2.20-cpu,tensorflow-2.21-cpu.")],
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
    _old_json_form(json_out, spec)
    _check_names(str(spec), profile)
    if json_out:
        _to_stderr()
    from kit.bisect import BisectOptions, run_bisect
    from kit.runner import RunOptions
    from kit.spec import load_spec
    from kit.ui import RichEvents

    backend, phase = backend_.value, phase_.value
    loaded = load_spec(spec, profile)
    opts = BisectOptions(metric=metric, phase=phase, threshold=threshold, alpha=alpha)
    run_opts = RunOptions(runs_root=runs_dir, backend=backend, data_dir=data_dir)
    with RichEvents(console) as events:
        res = run_bisect(loaded, images.split(","), opts, run_opts, events,
                         on_compare=lambda a, b: console.print(f"[bold]comparing {b} with {a}[/] (one interleaved run)"))
    table = Table(title=f"kit bisect {loaded.experiment.id}: {metric} ({phase}), threshold {threshold:.0%}")
    for col in ("candidate", "baseline", f"{metric} B/A [95% CI]", "p (Holm)", "detectable", "verdict", "run"):
        table.add_column(col, overflow="fold")
    for c in res["comparisons"]:
        ci = "" if c.get("ratio_low") is None else f" [{c['ratio_low']:.3f}, {c['ratio_high']:.3f}]"
        ratio = "-" if c.get("ratio") is None else f"{c['ratio']:.3f}{ci}"
        table.add_row(_esc(c["candidate"]), _esc(c["baseline"]), ratio, _fmt_p(c.get("p_adj")),
                      "unknown" if c.get("mde") is None else f"{c['mde']:.1%}", c["verdict"], _esc(c["run"]))
    out.print(table)
    out.print(f"[bold]{_esc(res['status'])}[/]: {_esc(res['answer'])} ({res['n_comparisons']} comparison(s))")
    if json_out or json_file:
        _print_json(res, "bisect", json_file, stdout=json_out)
    if res["status"] in ("inconclusive", "non-monotonic"):
        raise typer.Exit(3)


@app.command("history")
def history_cmd(
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
) -> None:
    """A metric across runs of successive versions, with the steps where it changed."""
    _old_json_form(json_out, runs_dir)
    if json_out:
        _to_stderr()
    phase = phase_.value
    if not runs_dir.is_dir():
        raise KitError("runs directory not found", where=str(runs_dir), fix="give the directory holding the run directories")

    from rich.progress import Progress

    from kit.history import history, render_html
    from kit.store import write_named_output

    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("reading runs", total=None)
        res = history(runs_dir, metric, phase, arm, experiment, threshold, use_cache=cache,
                      on_run=lambda done, total: progress.update(task, completed=done, total=total))
    table = Table(title=_esc(f"{metric} ({phase}, {res['arm']}) across {len(res['runs'])} runs"))
    for col in ("#", "label", "version (this arm's)", "n", "median", "IQR"):
        table.add_column(col)
    for i, r in enumerate(res["runs"]):
        table.add_row(str(i), _esc(r["label"]), _esc(r.get("version") or "-"), str(r["n"]), f"{r['median']:.4g}",
                      f"{r['q1']:.4g}–{r['q3']:.4g}")
    out.print(table)
    if not res["steps"]:
        out.print("no step: no significant change larger than the threshold")
    for c in res.get("caveats", []):
        out.print(f"[yellow]note:[/] {_esc(c)}")
    for s in res["steps"]:
        out.print(f"[{'red' if s['verdict'] == 'regression' else 'green'}]{s['verdict']}[/] between {_esc(repr(s['from']))} "
                  f"and {_esc(repr(s['to']))}: ratio {s['ratio']:.3f} [{s['ratio_low']:.3f}, {s['ratio_high']:.3f}], "
                  f"p (Holm) {s['p_adj']:.3g}")
    if json_out or json_file:
        _print_json(res, "history", json_file, stdout=json_out)
    if html_out:
        write_named_output(html_out, render_html(res).encode())


@app.command("pack")
def pack_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run directory to bundle.", autocompletion=_complete_run_dirs)],
    out_dir: Annotated[Path | None, typer.Option("--out", help="Bundle directory (default: RUN_DIR.bundle).")] = None,
    trust_study_code: Annotated[bool, typer.Option("--trust-study-code", help=TRUST_HELP)] = False,
    study: Annotated[Path | None, typer.Option("--study", help=STUDY_HELP)] = None,
) -> None:
    """Bundle a run for artifact evaluation: raw data, report, recipes, source, claims, SHA256SUMS, README."""
    _need_run_dir(run_dir)
    from kit.analysis.analyze import current_analysis
    from kit.pack import pack
    from kit.trust import StudyTrust

    trust = StudyTrust(trust_run_copy=trust_study_code, study_dir=study)
    tgz = pack(run_dir, out_dir, trust)
    out.print(f"bundle: [bold]{_esc(tgz)}[/] (and the directory beside it)")
    _print_study_notice(current_analysis(run_dir, trust=trust)[0])


@app.command("verify")
def verify_cmd(
    bundle: Annotated[Path, typer.Argument(help="A bundle made by `kit pack` (.tar.gz or directory).")],
    profile: Annotated[str | None, typer.Option("--profile", "-p", help="Re-run this profile (default: the bundle's).")] = None,
    tolerance: Annotated[float | None, typer.Option(help="Allowed relative change of each ratio (default: the bundle's).")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where the re-run goes (default: beside the bundle).")] = None,
    backend_: Annotated[Backend, typer.Option("--backend", help="Backend of the re-run: auto (containers when the bundle "
                                                           "carries study code, else local), docker, apptainer or local.")] = Backend.auto,
    trust_bundle_code: Annotated[bool, typer.Option("--trust-bundle-code", help=(
        "The bundle's study code may run unsandboxed on this host (the local backend) and its analysis/report "
        "hooks may run (in a child process). Read run/study/ first."))] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Dataset directory for the re-run.")] = None,
    integrity_only: Annotated[bool, typer.Option("--integrity-only", help="Stop after the integrity check (every file "
                                                 "matches SHA256SUMS, no link): nothing is analysed or re-run; exit 0 "
                                                 "when it passes.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the verification as JSON on stdout; the tables go to stderr.")] = False,
    json_file: JsonFile = None,
) -> None:
    """Check a bundle's integrity, re-run it, and say whether its claims reproduce (exit 1 if one changed)."""
    if not bundle.exists():
        raise KitError("bundle not found", where=str(bundle), fix="give a bundle made by `kit pack` (.tar.gz or directory)")
    if json_out:
        _to_stderr()
    from kit.ui import RichEvents
    from kit.verify import INTEGRITY_MEANS, VerifyOptions, verify

    def integrity_ok(n_files: int) -> None:  # said first, before the re-run starts
        out.print(_esc(f"integrity: ok ({n_files} files match SHA256SUMS: {INTEGRITY_MEANS})"))

    opts = VerifyOptions(profile=profile, tolerance=tolerance, runs_root=runs_dir, backend=backend_.value,
                         data_dir=data_dir, trust_bundle_code=trust_bundle_code, integrity_only=integrity_only)
    if integrity_only:
        res = verify(bundle, opts, None, integrity_ok)
        if json_out or json_file:
            _print_json(res, "verify", json_file, stdout=json_out)
        return
    with RichEvents(console) as events:
        res = verify(bundle, opts, events, integrity_ok)
    out.print(_esc(f"re-run: {res['rerun_dir']} ({res['rerun_status']}, profile {res['profile_rerun']}); "
                   f"{res['code_ran']}"))
    table = Table(title=f"Claims (tolerance ±{res['tolerance']:.0%})")
    for col in ("id", "phase", "decision (original)", "decision (re-run)", "ratio (original)", "ratio (re-run)", "reproduced"):
        table.add_column(col, overflow="fold")
    for c in res["claims"]:
        dec = "rejected" if c["rejected"] else ("not rejected" if c["tested"] else (c.get("decision") or "not tested"))
        new = "rejected" if c.get("new_rejected") else ("not rejected" if c.get("new_tested", True) else "not tested")
        table.add_row(_esc(c["id"]), _esc(c["phase"]), _esc(dec), new, _fmt_p(c["ratio"]), _fmt_p(c.get("new_ratio")),
                      "[green]yes[/]" if c["reproduced"] else f"[red]no[/] {_esc(c['why'])}")
    out.print(table)
    if res.get("paper_claims"):
        paper = Table(title=f"The paper's findings, re-judged on the re-run: {res.get('paper_headline') or ''}")
        for col in ("claim", "the paper found", "verdict (bundle)", "verdict (re-run)", "changed"):
            paper.add_column(col, overflow="fold")
        for p in res["paper_claims"]:
            paper.add_row(_esc(p["id"]), _esc(p["statement"]), _esc(f"{p['verdict_original']} {p['value_original']}"),
                          _esc(f"{p['verdict_rerun']} {p['value_rerun']}"),
                          "[yellow]changed[/]" if p["changed"] else "same")
        out.print(paper)
    if res["note"]:
        out.print(f"[yellow]note:[/] {_esc(res['note'])}")
    if res.get("study_code_notice"):
        out.print(f"[yellow]note:[/] {_esc(res['study_code_notice'])}")
    badges = ", ".join(f"{k.replace('_', ' ')}: {'yes' if v else 'no'}" for k, v in res["badges"].items())
    out.print(f"badges: {badges}")
    changed = res["claims_changed"]
    out.print(f"[red]claims changed[/]: {_esc(', '.join(changed))}" if changed else
              "claims: none changed" + ("" if res["claims_tested"] else
                                        " (none was tested, in the bundle or here: nothing to reproduce, no badge)"))
    if json_out or json_file:
        _print_json(res, "verify", json_file, stdout=json_out)
    if changed:
        raise typer.Exit(ExitCode.FAILED)


@app.command("trust", short_help="Trust a run's study code (its digest), so that report and pack run its hooks.")
def trust_cmd(
    run_dir: Annotated[Path | None, typer.Argument(help="A run directory (or a bundle's run/) whose study code you "
                                                        "have read and trust.")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the trusted study digests.")] = False,
    remove: Annotated[str | None, typer.Option("--remove", help="Stop trusting this digest.")] = None,
) -> None:
    """Trust a run's study code (its digest, computed here), so that report/pack run its analysis and report
    hooks; the allow-list lives in your config directory, never in a run directory."""
    from kit import trust as trustmod

    if remove is not None:
        found = trustmod.untrust(remove)
        out.print(f"{'removed' if found else 'not in the list'}: {_esc(remove)}")
        return
    if list_ or run_dir is None:
        entries = trustmod.trusted()
        table = Table(title=f"trusted study code ({_esc(trustmod.config_dir() / trustmod.TRUST_FILE)})")
        for col in ("digest", "source", "files"):
            table.add_column(col, overflow="fold")
        for digest, e in sorted(entries.items()):
            table.add_row(digest, _esc(e.get("source", "")), _esc(", ".join(map(str, e.get("files", [])))))
        out.print(table)
        return
    from kit.store import RunDir
    from kit.studies import RUN_COPY, checked_copy, digest_of, study_files

    rd = RunDir.open(run_dir)
    copy = checked_copy(rd.path, rd.manifest())
    if copy is None:
        raise KitError("the run has no study folder copy: it runs only the kit's own code", where=str(run_dir),
                       fix="nothing to trust")
    files = study_files(copy)
    digest = digest_of(files)
    trustmod.trust(digest, str(rd.path / RUN_COPY), [r for r, _ in files])
    out.print(f"trusted study code {digest} ({len(files)} files: {_esc(', '.join(r for r, _ in files))})")


from kit.cli_images import images_app  # noqa: E402  (kit images ...)

app.add_typer(images_app, name="images")

new_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Start something new from a working template.")
app.add_typer(new_app, name="new")


@new_app.command("study")
def new_study_cmd(
    name: Annotated[str, typer.Argument(help="The study's name (also its workload's and experiment's).")],
    directory: Annotated[Path, typer.Option("--dir", help="Where the study folder is created (missing parents are created).")] = Path("."),
) -> None:
    """Write a working study folder (an MLP on MNIST in both frameworks) that `kit run` executes at once."""
    from kit.scaffold import new_study

    dest = new_study(name, directory)
    out.print(f"study folder {_esc(dest)}: experiment.toml, model.py, workload_torch.py, workload_keras.py, "
              "analysis.py, report.py, README.md")
    out.print(f"run it: {_esc(kit_cmd(f'run {dest} --profile quick'))}   (guide: docs/writing-a-study.md)")


bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Benchmarks of the kit itself (collector overhead).")
app.add_typer(bench_app, name="bench")


@bench_app.command("overhead")
def bench_overhead(
    spec: Annotated[Path, typer.Argument(help="Experiment whose workload is timed.")] = Path("experiments/florencio2019_lenet/experiment.toml"),
    profile: Annotated[str | None, typer.Option("--profile", "-p")] = "quick",
    framework: Annotated[str, typer.Option(help="Framework of the timed trials.")] = "pytorch",
    pairs: Annotated[int, typer.Option(help="Off/on pairs (after one discarded warm-up pair).")] = 15,
    period_s: Annotated[float, typer.Option(help="Sampling period of the collectors.")] = 0.1,
    collectors: Annotated[str, typer.Option(help="Comma-separated collectors to switch on.")] = "cpu,memory,hwmon,nvml,rapl",
    seed: Annotated[int, typer.Option()] = 0,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result (raw times included) as JSON on stdout.")] = False,
    json_file: JsonFile = None,
) -> None:
    """Collectors off vs on, interleaved, real harness trials: ratio of median timed-phase durations with a CI."""
    _old_json_form(json_out, spec)
    if json_out:
        _to_stderr()
    from kit.bench import harness_trial, overhead

    names = [c.strip() for c in collectors.split(",") if c.strip()]
    run_trial = harness_trial(spec, profile, framework, names, period_s)
    done = {"n": 0}
    total = 2 * (pairs + 1)

    def counted(on: bool) -> float:
        t = run_trial(on)
        done["n"] += 1
        console.print(f"[dim]trial {done['n']}/{total} collectors {'on ' if on else 'off'} {t:.4f} s[/]", highlight=False)
        return t

    res = overhead(counted, pairs, seed)
    out.print(f"collector overhead at {period_s * 1000:g} ms ({', '.join(names)}), {pairs} pairs, {framework}: "
              f"ratio of medians on/off = {res.ratio:.4f} ({res.overhead_pct:+.2f} %), "
              f"{res.confidence:.0%} CI [{res.ci_low:.4f}, {res.ci_high:.4f}] ({res.ci_method})")
    if json_out or json_file:
        _print_json(res.as_dict(), "bench-overhead", json_file, stdout=json_out)


def _is_usage_error(err: BaseException) -> bool:
    """A ClickException from click or from typer's vendored copy (no click dependency to import)."""
    return any(c.__name__ == "ClickException" for c in type(err).__mro__) and hasattr(err, "show")


def _usage_hints(err: Any, argv: list[str]) -> None:
    """Click's usage error in the kit's words: an unknown option says "did you mean", and the old `--json PATH`
    form says to use --json-file."""
    if type(err).__name__ == "NoSuchOption" and getattr(err, "possibilities", None):
        close = sorted(err.possibilities)
        err.message = f"No such option: {err.option_name}. Did you mean {' or '.join(close[:3])}?"
        err.possibilities = None
    hint = _json_usage_hint(argv)
    if hint and hasattr(err, "message"):
        err.message = f"{err.message}. {hint}"


_HOOK_LINE: dict[str, Any] = {}


def _hook_tick(what: str, elapsed_s: float, limit_s: float) -> None:
    """A study hook is running (kit.study_child): its time against its limit, as a live line (a line every 10 s
    when the output is not a terminal), never silence."""
    text = _esc(f"{what}: {elapsed_s:.0f} s of its {limit_s:g} s limit (KIT_HOOK_TIMEOUT_S sets it)")
    if not console.is_terminal:
        if int(elapsed_s) % 10 == 1:
            console.print(f"[dim]{text}[/]", highlight=False)
        return
    if "status" not in _HOOK_LINE:
        _HOOK_LINE["status"] = console.status(text)
        _HOOK_LINE["status"].start()
    else:
        _HOOK_LINE["status"].update(text)


def _hook_done() -> None:
    line = _HOOK_LINE.pop("status", None)
    if line is not None:
        line.stop()


_STOPPING: list[float] = []  # when the first SIGHUP/SIGTERM of this process arrived (time.monotonic)
REPEAT_GRACE_S = 10.0


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP as Ctrl-C. A closing terminal sends SIGHUP more than once (the shell forwards it to its
    jobs, the kernel sends it again as the session ends, a wrapper passes it on): the first one stops the command;
    repeats within REPEAT_GRACE_S are dropped, so they cannot cut short the cleanup the first one started (the
    trial's processes, the run's status "interrupted"). A later one interrupts again."""
    import time

    now = time.monotonic()
    if _STOPPING and now - _STOPPING[0] < REPEAT_GRACE_S:
        return
    _STOPPING[:] = [now]
    raise KeyboardInterrupt(f"signal {signum}")


def _last_line(text: str) -> None:
    """A closing line (an error, "aborted"). After SIGHUP the terminal is gone and writing to it fails (EIO; a
    closed pipe: EPIPE): that must not replace the command's exit code (130, or the error's) with Python's 1."""
    try:
        console.print(text, highlight=False, soft_wrap=True)
    except OSError:
        pass


def _exit_with(err: KitError) -> None:
    """One line for a KitError, its hints (`kit run --resume RUN`) as commands that run from here
    (kit.fmt.kit_prefix), and its exit code."""
    if err.fix:
        err.fix = in_user_terms(err.fix)
    # the message quotes input (manifest values, names from bundles): shown as written, never as markup
    _last_line(f"[bold red]error:[/] {_esc(err.one_line())}")
    if _STATE["debug"]:
        with contextlib.suppress(OSError):
            if err.detail:
                console.print(_esc(err.detail), highlight=False, soft_wrap=True)
            console.print_exception()
    sys.exit(err.exit_code)


def main() -> None:
    """Entry point: run the app, translate KitError into one line and an exit code (kit.errors.ExitCode: 0 success,
    1 the answer is no, 2 usage, 3 inconclusive, 4 suspect, 5 input error, 6 internal error, 130 interrupted).

    SIGTERM and SIGHUP end every command as Ctrl-C does (KeyboardInterrupt): the cleanup of whatever runs (a
    trial, a study hook and every process it started, temporary directories) happens, and the exit code is 130."""
    import signal

    from kit.study_child import hook_progress

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:  # never undo an ignore: `nohup kit run ...` survives a logout
            signal.signal(sig, _interrupt)
    try:
        with hook_progress(_hook_tick, on_end=_hook_done):
            rc = app(standalone_mode=False)  # click returns the code of typer.Exit instead of raising
        if rc == ExitCode.INTERRUPTED:  # typer turns a KeyboardInterrupt inside a command into Exit(130)
            _last_line("[yellow]aborted[/]")
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except KitError as err:
        _exit_with(err)
    except (typer.Abort, KeyboardInterrupt):
        _last_line("[yellow]aborted[/]")
        sys.exit(ExitCode.INTERRUPTED)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except SystemExit:
        raise
    except OSError as err:  # a write or read the library did not translate: still the path and a fix, never a traceback
        import errno

        from kit.errors import disk_error

        first = err.__context__
        if err.errno in (errno.EIO, errno.EPIPE) and isinstance(first, (KitError, KeyboardInterrupt)):
            # the terminal hung up (SIGHUP) or the pipe closed while the command was ending (a progress display's
            # last refresh): the command's own outcome stands ("interrupted", 130), not the failed write
            if isinstance(first, KitError):
                _exit_with(first)
            _last_line("[yellow]aborted[/]")
            sys.exit(ExitCode.INTERRUPTED)
        kerr = disk_error(err, getattr(err, "filename", None) or "?", "complete the command")
        _last_line(f"[bold red]error:[/] {_esc(kerr.one_line())}")
        if _STATE["debug"]:
            console.print_exception()
        sys.exit(kerr.exit_code)
    except Exception as err:  # usage errors (click's, or the copy typer vendors since 0.20) and genuine bugs
        if _is_usage_error(err):
            _usage_hints(err, sys.argv[1:])
            err.show()  # type: ignore[attr-defined]
            sys.exit(int(err.exit_code))  # type: ignore[attr-defined]
        console.print(f"[bold red]internal error:[/] {_esc(f'{type(err).__name__}: {err}')}. Re-run with --debug for "
                      "the traceback and report it.", highlight=False, soft_wrap=True)
        if _STATE["debug"]:
            console.print_exception()
        sys.exit(ExitCode.INTERNAL)  # never 1: a CI gate must not read a crash as "regression found"


if __name__ == "__main__":
    main()
