"""`kit map RUN_OR_BUNDLE... --out DIR`: the replication map of one study from many hosts (kit.replication)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kit.cli.output import Output, esc, print_json

commands = typer.Typer()


@commands.command("map", short_help="The replication map of one study from many hosts: each claim by host class.")
def map_cmd(
    ctx: typer.Context,
    inputs: Annotated[list[Path], typer.Argument(help="Run directories and bundles (.tar.gz or directory) of one "
                                                      "study and profile, from any hosts.")],
    out: Annotated[Path, typer.Option("--out", help="Directory for map.html, map.tex and map.json (created).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the map as JSON on stdout; the summary goes to "
                                                          "stderr.")] = False,
) -> None:
    """Put runs and bundles of one study from many hosts side by side: per paper claim and host class the verdict,
    the ratio with its interval and n; across three or more classes a random-effects pooled ratio with tau^2, I^2
    and the prediction interval for a new host, and a one-line answer per claim. Bundles are verified first; an
    input that fails the kit's checks is listed as refused with its reason. Runs of different studies or profiles
    are refused (exit 2)."""
    io = Output.of(ctx)
    if json_out:
        io.to_stderr()
    from kit.replication.build import build_map
    from kit.replication.inputs import load_inputs
    from kit.replication.render import map_document, write_map

    many = len(inputs) > 3

    def progress(i: int, n: int, path: str) -> None:
        if many:
            io.err.print(f"[{i}/{n}] {esc(path)}", highlight=False)

    result = build_map(load_inputs(inputs, progress))
    files = write_map(result, out)
    for c in result.claims:
        io.out.print(f"[bold]{esc(c.id)}[/]: {esc(c.answer)}", soft_wrap=True)
    io.out.print(f"{result.runs} run(s) in {len(result.classes)} host class(es); analyses reused "
                 f"{result.reused}, recomputed {result.runs - result.reused}", highlight=False)
    for n in result.never_tested:
        io.out.print(f"never tested: {esc(n.id)}: would test it: {esc(n.would_test)}", soft_wrap=True)
    for r in result.refused:
        io.err.print(f"[yellow]refused[/] {esc(r.path)}: {esc(r.reason)}", soft_wrap=True)
    for d in result.duplicates:
        io.err.print(f"given twice, counted once: {esc(d)}", soft_wrap=True)
    for path in files.values():
        io.err.print(f"written: {esc(path)}", highlight=False)
    if json_out:
        print_json(io, map_document(result), "map")
