"""The root of the `kit` command: the typer app, its global options, and the command groups registered in the
order `kit --help` lists them (one module per group: listing, host, run, report, compare, bundle, images, tools).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from kit.cli import bundle, compare, host, listing, report, run, tools
from kit.cli import map as map_cli
from kit.cli.datasets import datasets_app
from kit.cli.images import images_app
from kit.cli.output import Output


def _context_settings() -> dict[str, list[str] | int | None]:
    """Help is plain text (rich_markup_mode=None): a literal [slurm] or [[claims]] in a help string is shown as
    written, option names are never cut, and flags carry no <bool> metavar. -h is --help; choices are enums, listed
    by --help."""
    return {"help_option_names": ["-h", "--help"], "max_content_width": 120,
            "terminal_width": None if sys.stdout.isatty() else 120}


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

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings=_context_settings(),
                  help="Reproducible TensorFlow-vs-PyTorch benchmarks: run, analyse, report. Exit codes: 0 success, "
                       "1 the answer is no (regression, claims not reproduced, a failed check), 2 usage error, "
                       "3 inconclusive, 4 suspect, 5 input error (bad spec, run directory, bundle), 6 internal error.")


def _version(value: bool) -> None:
    if value:  # `kit --version` alone never gets here (kit.cli.main answers it before typer loads)
        from kit.cli.version import version_line

        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the kit's version and exit.")] = False) -> None:
    # main() hands its Output in (it reports the errors after the app returns); a test's CliRunner does not
    if not isinstance(ctx.obj, Output):
        ctx.obj = Output.for_terminal()
    ctx.obj.debug = debug or bool(os.environ.get("KIT_DEBUG"))


def _register() -> None:
    """Each group module declares its commands on its own typer.Typer (``commands``); the root lists them in this
    order, then the sub-apps (kit images ..., kit new ..., kit bench ...)."""
    for group in (listing, host, run, report, compare, bundle, map_cli):
        app.registered_commands.extend(group.commands.registered_commands)
    app.add_typer(images_app, name="images")
    app.add_typer(datasets_app, name="datasets")
    app.add_typer(tools.new_app, name="new")
    app.add_typer(tools.bench_app, name="bench")


_register()
