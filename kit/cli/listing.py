"""`kit list` and `kit show`: the experiments this kit knows, one line per profile or one in full."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import typer
from rich.table import Table

from kit.cli.options import ExperimentArg, ExperimentsOpt, JsonFlag, check_names
from kit.cli.output import Output, esc, print_json
from kit.errors import ExitCode, KitError
from kit.fmt import kit_cmd

commands = typer.Typer()


class ListRow(TypedDict):
    """One row of `kit list` (and of its --json document): a profile, its estimate here and where it lives; an
    invalid experiment is one row with its error."""

    id: str
    profile: str
    trials: int
    estimate_s: float | None
    estimate_from: str
    measured_s: float | None
    measured_run: str | None
    measured_busy: bool | None
    estimate_text: str
    fits_here: bool | None
    why_not_here: NotRequired[str | None]
    decidable: bool | None
    decidable_text: str
    where: str
    description: NotRequired[str]
    error: NotRequired[str]


@commands.command("list", short_help="One line per experiment and profile: trials, estimate here, decidable, where.")
def list_cmd(
    ctx: typer.Context,
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

    io = Output.of(ctx)
    found = list_experiments(experiment_dirs(experiments or []), mde=False)
    rows = list_rows(found, runs_dir)
    invalid = [e["file"] for e in found if e.get("invalid")]
    if json_out:
        print_json(io, {"experiments": rows, "invalid": invalid}, "list")
    else:
        table = Table(title=None, box=None, show_edge=False, pad_edge=False)
        for col in ("experiment", "profile", "trials", "estimate here", "decidable", "where"):
            table.add_column(col, no_wrap=col != "estimate here", overflow="fold")
        for r in rows:
            table.add_row(escape(r["id"]), escape(r["profile"]), str(r["trials"]), escape(r["estimate_text"]),
                          escape(r["decidable_text"]), escape(r["where"]))
        io.out.print(table)
        if deviations or claims:
            for e in found:
                if deviations:
                    _print_deviations_of(io, e["id"], e.get("deviations", []))
                if claims:
                    _print_claims_of(io, e)
        else:
            io.out.print(f"[dim]details (design, deviations, claims): {esc(kit_cmd('show ID'))} · run: "
                      f"{esc(kit_cmd('run ID --profile PROFILE'))}[/]")
    if invalid:  # a script or CI step must not read the listing as all well
        for r in rows:
            if r.get("error"):
                io.err.print(f"[red]invalid:[/] {escape(r['where'])}: {escape(r['error'])}", highlight=False)
        io.err.print(f"[red]error:[/] {len(invalid)} experiment(s) invalid: {escape(', '.join(invalid))}")
        raise typer.Exit(ExitCode.INPUT)


def _where(path: str) -> str:
    """A path relative to the working directory where it is below it (copy-pasteable), else as found."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve())) + ("/" if p.is_dir() else "")
    except (ValueError, OSError):
        return str(p) + ("/" if p.is_dir() else "")


def _decidable_text(decidable: list[bool]) -> str:
    """Whether a profile can decide its hypotheses, from one flag per design row."""
    if not decidable:
        return "-"
    n = sum(decidable)
    return "yes" if n == len(decidable) else ("no" if n == 0 else f"partly ({n}/{len(decidable)})")


def list_rows(found: list[dict[str, Any]], runs_dir: Path) -> list[ListRow]:
    """The compact listing's rows: the spec's estimate_s and, beside it, a complete earlier run's measured wall time
    (kit.catalog.estimate_text), or what the host lacks for the profile."""
    from kit.catalog import estimate_text, measured_runs
    from kit.reproduce import Host, Needs, fits, fmt_duration

    host = Host.detect()
    walls = measured_runs(runs_dir, [e["id"] for e in found if not e.get("invalid")])
    rows: list[ListRow] = []
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
                         "decidable_text": _decidable_text([bool(r["decidable"]) for r in design.get("rows") or []]),
                         "where": _where(e["path"]),
                         "description": p["description"]})
    return rows


@commands.command("show", short_help="One experiment in full: profiles, design, deviations and claims.")
def show_cmd(
    ctx: typer.Context,
    experiment: ExperimentArg,
    experiments: ExperimentsOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """One experiment in full: its profiles (description, trials, estimate), what each can decide (the design),
    where it differs from its paper (deviations) and what the paper claimed."""
    from rich.markup import escape

    io = Output.of(ctx)
    check_names(experiment, extra=experiments)  # a typo is said at once (exit 2), before the analysis is imported
    from kit.catalog import list_experiments, resolve_experiment
    from kit.studies import study_dir_of

    path = resolve_experiment(experiment, experiments)
    found = list_experiments([path.parent] if study_dir_of(path) is None else [study_dir_of(path) or path])
    matches = [e for e in found if Path(e["path"]).resolve() == (study_dir_of(path) or path).resolve()] or found
    e = matches[0]
    if json_out:
        print_json(io, e, "show")
        return
    if e.get("invalid"):
        raise KitError(e["profiles"][0]["description"], where=str(path))
    from kit.analysis.design import design_summary

    io.out.print(f"[bold]{escape(e['id'])}[/]: {escape(e.get('title') or '')}")
    io.out.print(escape(f"where: {_where(e['path'])}" + (f" · protocol from {e['protocol_source']}"
                                                       if e.get("protocol_source") else "")
                     + f" · {len(e.get('deviations', []))} deviations listed, {len(e.get('claims', []))} claims"))
    rows = {r["profile"]: r for r in list_rows([e], Path("runs"))}
    table = Table(title="Profiles: what each runs and whether it can decide its hypotheses", show_lines=True)
    for col in ("profile", "trials", "estimate here", "description", "hypotheses: can this profile decide them?"):
        table.add_column(col, overflow="fold")
    for p in e["profiles"]:
        hyps = "\n".join(design_summary(r) for r in (p.get("design") or {}).get("rows", [])) or "-"
        table.add_row(escape(p["name"]), str(p["trials"]), escape(rows[p["name"]]["estimate_text"]),
                      escape(p["description"]), escape(hyps))
    io.out.print(table)
    for r in rows.values():  # what the host lacks for a profile (GPUs, torchvision), with the fix
        lacks = r.get("why_not_here")
        if lacks and "torchvision" in lacks:
            io.out.print(escape(f"{r['profile']}: {lacks}"), soft_wrap=True)
    _print_deviations_of(io, e["id"], e.get("deviations", []))
    _print_claims_of(io, e)
    names = [p["name"] for p in e["profiles"]]
    io.out.print(escape("run it: " + kit_cmd(f"run {e['id']} --profile {'quick' if 'quick' in names else names[-1]}")))


def _print_deviations_of(io: Output, exp_id: str, rows: list[dict[str, str]]) -> None:
    """Where an experiment differs from its paper: one row per aspect (the paper's, the kit's, and why)."""
    from rich.markup import escape

    if not rows:
        io.out.print(escape(f"{exp_id}: no deviations from the paper listed"))
        return
    dev = Table(title=f"{escape(exp_id)}: deviations from the paper", show_lines=True)
    for col in ("aspect", "paper", "kit", "why"):
        dev.add_column(col, overflow="fold")
    for d in rows:
        dev.add_row(*(escape(d[k]) for k in ("aspect", "paper", "kit", "why")))
    io.out.print(dev)


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


def _print_claims_of(io: Output, e: dict[str, Any]) -> None:
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
        io.out.print(escape(f"{e['id']}: no [[claims]] listed"))
        return
    io.out.print(table)
