"""`kit --version`: answered by :func:`kit.cli.main` before typer and the command modules load (issue 44), and by
the app's own ``--version`` option when it comes with other options (``kit --debug --version``)."""

from __future__ import annotations


def version_line() -> str:
    """What `kit --version` prints: the installed distribution's version (the kit may run from a checkout that is
    not installed, and says so)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("dlbench-kit")
    except PackageNotFoundError:
        v = "unknown (not installed as a package)"
    return f"kit {v}"
