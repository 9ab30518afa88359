"""Where one invocation's text goes, and the JSON documents the commands print.

The human output (tables, lines) goes to stdout, or to stderr under --json so that stdout holds the JSON document
alone; progress, notes and errors go to stderr. Which console is which is decided per invocation (an
:class:`Output` held by the click context), never by a module-level global: a test, or a second call in the same
process, gets its own.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import typer
from rich.console import Console

from kit.errors import UsageError


def terminal_console(stderr: bool = False) -> Console:
    """A terminal gets rich's wrapping at its width; a pipe or CI log never wraps text (commands and paths stay
    copy-pasteable) and draws tables at 160 columns, not 80."""
    tty = (sys.stderr if stderr else sys.stdout).isatty()
    return Console(stderr=stderr, width=None if tty else 160, soft_wrap=not tty)


@dataclass(slots=True)
class Output:
    """One invocation's consoles: ``out`` for the human output, ``err`` for progress, notes and errors;
    ``debug`` (--debug or KIT_DEBUG) adds tracebacks to errors."""

    out: Console
    err: Console
    debug: bool = False

    @classmethod
    def for_terminal(cls) -> Output:
        return cls(terminal_console(), terminal_console(stderr=True))

    @classmethod
    def of(cls, ctx: typer.Context) -> Output:
        """The invocation's Output (set by the root callback, or handed in by ``main``); made here when a command
        is invoked without either (a test calling a sub-app)."""
        found = ctx.find_object(Output)
        if found is None:
            found = cls.for_terminal()
            ctx.find_root().obj = found
        return found

    def to_stderr(self) -> None:
        """With --json: the human output (tables, lines) goes to stderr, so stdout holds the JSON document alone."""
        self.out = self.err


def esc(value: object) -> str:
    """Text from run directories, specs and bundles, shown as written (never as rich markup)."""
    from rich.markup import escape

    return escape(str(value))


def fmt_p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


# Every JSON document the kit prints (--json) or writes (--json-file) opens with its schema, {"name": "kit.NAME",
# "version": N}, described by kit/schemas/NAME.schema.json (shipped in the package), and the kit's version: a reader
# can tell what it holds and which kit made it. A version moves when a key is removed or changes its meaning.
SCHEMAS: Mapping[str, int] = MappingProxyType({
    "list": 1, "show": 1, "doctor": 1, "status": 1, "run-summary": 1, "verify": 1, "compare": 1, "bisect": 1,
    "history": 1, "selftest": 1, "bench-overhead": 1, "map": 1})


def document(name: str, data: Mapping[str, object]) -> dict[str, Any]:
    """The JSON document of a command's result: its schema and the kit's version first."""
    from kit import __version__

    return {"schema": {"name": f"kit.{name}", "version": SCHEMAS[name]}, "kit_version": __version__,
            **{k: v for k, v in data.items() if k not in ("schema", "kit_version")}}


def print_json(io: Output, data: Mapping[str, object], name: str, json_file: Path | None = None, *,
               stdout: bool = True) -> None:
    """Machine-readable output: --json prints one JSON document on stdout, nothing else there; --json-file writes
    the same document to a file (atomically; a device or FIFO such as /dev/stdout is written into, not replaced)."""
    import json

    text = json.dumps(document(name, data), indent=1, default=str) + "\n"
    if json_file is not None:
        from kit.store import write_named_output

        write_named_output(json_file, text.encode())
        io.err.print(f"written: {esc(json_file)}", highlight=False)
    if stdout:
        sys.stdout.write(text)
        sys.stdout.flush()


def old_json_form(json_out: bool, *given: Path | None) -> None:
    """`--json out.json` (the old form of compare, bisect, history, selftest, bench overhead) now reads as the flag
    and an argument: refused with the new form, not taken as a run directory or spec."""
    for p in given:
        if json_out and p is not None and p.suffix == ".json" and not p.is_dir():
            raise UsageError(f"{p} is not a run directory or spec: --json takes no value now (it prints the JSON on "
                             "stdout)", where="--json", fix=f"write a file with --json-file {p}")


JSON_HINT = "--json takes no value now (it prints the JSON on stdout); write a file with --json-file {}"


def json_usage_hint(argv: list[str]) -> str:
    """The old `--json PATH` form met as a usage error (an unexpected extra argument): the hint to the new form."""
    for i, arg in enumerate(argv[:-1]):
        nxt = argv[i + 1]
        if arg == "--json" and not nxt.startswith("-") and not Path(nxt).is_dir():
            return JSON_HINT.format(nxt)
    return ""
