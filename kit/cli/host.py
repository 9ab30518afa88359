"""`kit doctor`, `kit tune` and `kit selftest`: what this host offers, its noise sources fixed, and whether it
measures what the kit says."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from kit.cli.options import JsonFile, JsonFlag, SelftestBackend, check_names, complete_experiments, complete_profiles
from kit.cli.output import Output, esc, print_json
from kit.errors import ExitCode
from kit.fmt import kit_cmd

if TYPE_CHECKING:
    from kit.doctor.findings import Finding

commands = typer.Typer()


@commands.command(short_help="What this host offers and how to fix what is missing, opening with the verdict.")
def doctor(
    ctx: typer.Context,
    study: Annotated[str | None, typer.Argument(help="An experiment id or path: also say whether this host has what "
                                                     "its profile needs.", autocompletion=complete_experiments)] = None,
    profile: Annotated[str | None, typer.Option("--profile", "-p", help="With STUDY: the profile to check (default: "
                                                "paper where an NVIDIA GPU is present, elsewhere paper-cpu where the study "
                                                "has it, else quick).",
                                                autocompletion=complete_profiles)] = None,
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

    io = Output.of(ctx)
    check_names(study, profile)  # a typo is said at once (exit 2)
    from kit.doctor.checks import run_checks
    from kit.doctor.findings import verdict
    from kit.reproduce import study_needs

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
        print_json(io, {"verdict": summary, "downloads": download, "download_hosts": _hosts_state(findings),
                     "findings": findings, "study": needs, "strict_failed": strict and failed}, "doctor")
    else:
        io.out.print(("[green]" if not summary["unavailable"] else "[yellow]") + escape(summary["line"]) + "[/]")
        io.out.print(f"downloads: {'on' if download else 'off'} (kit run downloads missing datasets unless --no-download)"
                  + (f"; dataset hosts: {_hosts_state(findings)}" if download else ""))
        table = Table(title="kit doctor", show_lines=True)
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for f in findings:
            status = ("[green]ok[/]" if f["ok"] else f"[cyan]{escape(f['status'])}[/]" if f.get("status") else
                      "[yellow]missing[/]" if f.get("optional", True) else "[red]FAIL[/]")
            table.add_row(escape(f["check"]), status, escape(f["detail"]), escape(f.get("fix") or ""))
        io.out.print(table)
        if needs is not None:
            if needs["missing"]:
                io.out.print(escape(f"{needs['study']} ({needs['profile']} profile): missing here: "
                                 + "; ".join(needs["missing"])))
            else:
                io.out.print(escape(f"{needs['study']} ({needs['profile']} profile): this host has what it needs"))
    if strict and failed:
        raise typer.Exit(ExitCode.FAILED)


def _hosts_state(findings: list[Finding]) -> str:
    """"reachable", "not reachable" (some host did not answer) or "not checked", from the dataset downloads row."""
    row = next((f for f in findings if f["check"] == "dataset downloads"), None)
    if row is None:
        return "not checked"
    return "reachable" if row["ok"] else str(row.get("status") or "not reachable")


@commands.command(short_help="Fix the host's noise sources for benchmarking (needs root); --reset undoes it.")
def tune(
    ctx: typer.Context,
    reset: Annotated[bool, typer.Option("--reset", help="Restore what `kit tune` changed (from its state file).")] = False,
    sys_root: Annotated[Path, typer.Option(hidden=True, help="sysfs root (tests).")] = Path("/sys"),
    state: Annotated[Path | None, typer.Option(hidden=True, help="state file (tests).")] = None,
) -> None:
    """Fix the host's noise sources for benchmarking (CPU governor performance, turbo/boost off, GPU clocks locked
    where the driver allows), recording what it changed; `kit tune --reset` puts it back. Needs root."""
    from kit import tune as tuning

    io = Output.of(ctx)
    where = state if state is not None else tuning.STATE_FILE
    if reset:
        undone = tuning.reset(sys_root, where)
        for line in undone["restored"]:
            io.out.print(f"restored {esc(line)}")
        for line in undone["refused"]:
            io.out.print(f"[yellow]not restored[/] {esc(line)}")
        if not undone["restored"] and not undone["refused"]:
            io.out.print("nothing was changed by kit tune")
        return
    res = tuning.tune(sys_root, where)
    for c in res["changed"]:
        io.out.print(f"set {esc(c['name'])}: {esc(c['before'])} -> {esc(c['after'])}")
    for name in res["unchanged"]:
        io.out.print(f"[dim]already set: {esc(name)}[/]")
    for g in res["gpus"]:
        io.out.print(f"GPU {g['index']}: " + (f"clocks locked at {g['sm_mhz']} MHz" if g.get("locked") else
                                           f"[yellow]clocks not locked[/] ({esc(g.get('why'))})"))
    for line in res["failed"]:
        io.out.print(f"[red]failed[/] {esc(line)}")
    if res["nothing"]:
        io.out.print("this host exposes no frequency, boost or GPU clock control (a VM?): nothing to tune; "
                  "CPU pinning ([container] cpuset = \"auto\") still separates the trial from the collectors")
    io.out.print(f"state recorded in {esc(res['state'])}; undo with: {esc(kit_cmd('tune --reset'))}")
    if res["failed"]:
        raise typer.Exit(1)


@commands.command(short_help="Check that this host measures what the kit says; exit 1 if a check fails.")
def selftest(
    ctx: typer.Context,
    gpu: Annotated[int | None, typer.Option(help="NVML index of the GPU to test (default: the first; PCI bus order).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the record as JSON on stdout; the table goes to stderr.")] = False,
    json_file: JsonFile = None,
    backend_: Annotated[SelftestBackend, typer.Option("--backend", help="local (this venv's frameworks) or docker (each image, via the engine).")] = SelftestBackend.local,
    images: Annotated[str | None, typer.Option(help="With --backend docker: matrix rows to test, e.g. pytorch-2.14-cu130,tensorflow-2.21-cu125 (default: the host's default rows).")] = None,
    period_s: Annotated[float, typer.Option(help="Sampling period whose rate the collectors must reach.")] = 0.1,
) -> None:
    """Check that this host measures what the kit says (GPU by UUID, timers, sampling rate, energy counter, TF32, clocks); exit 1 if a check fails."""
    io = Output.of(ctx)
    if json_out:
        io.to_stderr()
    from kit.selftest import run_selftest

    res = run_selftest(gpu=gpu, backend=backend_.value, images=images.split(",") if images else None, period_s=period_s,
                       on_progress=lambda s: io.err.print(f"[dim]{s}[/]", highlight=False))
    style = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]", "info": "[cyan]info[/]"}
    table = Table(title=f"kit selftest ({res['backend']}, " + (f"GPU {res['gpu_index']})" if res["gpu"] else "no GPU)"))
    for col in ("check", "status", "detail"):
        table.add_column(col, overflow="fold")
    for c in res["checks"]:
        table.add_row(c["name"], style[c["status"]], c["detail"])
    io.out.print(table)
    if json_out or json_file:
        # the self-test record's own format number (kit.selftest.SCHEMA) stays, beside the document's schema
        print_json(io, {**res, "record_schema": res.get("schema")}, "selftest", json_file, stdout=json_out)
    failed = [c["name"] for c in res["checks"] if c["status"] == "fail"]
    if failed:
        io.err.print(f"[red]self-test failed[/]: {', '.join(failed)}")
        raise typer.Exit(1)
    io.out.print("self-test passed" + ("" if res["gpu"] else " (CPU path; GPU checks skipped)"))


# -- run / report -------------------------------------------------------------
