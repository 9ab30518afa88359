"""The `kit` command: a thin typer layer over the library.

Each command parses its options, calls one function in ``kit`` and prints the result it returns. One module per
command group (listing, host, run, report, compare, bundle, images, tools), registered by :mod:`kit.cli.root`;
the options they share and the checks said before the heavy imports in :mod:`kit.cli.options`; where the text
goes and the JSON documents in :mod:`kit.cli.output`; errors are ``KitError``s, caught once in
:func:`kit.cli.entry.main`: one line with the cause, where and the fix, and a non-zero exit code; ``--debug`` adds
the traceback.
"""

from kit.cli.entry import main
from kit.cli.root import app

__all__ = ["app", "main"]
