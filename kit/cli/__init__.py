"""The `kit` command: a thin typer layer over the library.

Each command parses its options, calls one function in ``kit`` and prints the result it returns. One module per
command group (listing, host, run, report, compare, bundle, images, tools), registered by :mod:`kit.cli.root`;
the options they share and the checks said before the heavy imports in :mod:`kit.cli.options`; where the text
goes and the JSON documents in :mod:`kit.cli.output`; errors are ``KitError``s, caught once in
:func:`kit.cli.entry.main`: one line with the cause, where and the fix, and a non-zero exit code; ``--debug`` adds
the traceback.

Imports on demand (issue 44): this package imports nothing up front. ``kit --version`` answers before typer, rich
and the command modules load (a tenth of a second instead of half a second); every other command goes through
:func:`kit.cli.entry.main`, and each command imports the library it uses inside its function
(tests/test_import_graph.py holds the daily commands to that).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from kit.cli.version import version_line

if TYPE_CHECKING:
    from typer import Typer

__all__ = ["app", "main", "version_line"]


def main() -> None:
    """Entry point (`kit`, `python -m kit`): ``kit --version`` alone is answered here, the rest by
    :func:`kit.cli.entry.main` (the app, its signal handling and its one place of error handling)."""
    if sys.argv[1:] == ["--version"]:
        print(version_line())
        return
    from kit.cli.entry import main as run_app

    run_app()


def __getattr__(name: str) -> Typer:
    """``kit.cli.app``, the typer app (tests drive it with typer's CliRunner), built on first use (PEP 562)."""
    if name == "app":
        from kit.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
