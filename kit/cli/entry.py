"""`kit`'s entry point and its one place of error handling.

A ``KitError`` is caught here, once: one line with the cause, where and the fix, and its exit code
(kit.errors.ExitCode); ``--debug`` adds the traceback. Click's usage errors are said in the kit's words, an
unexpected exception is an internal error (exit 6, never 1), and SIGTERM/SIGHUP end a command as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

import typer
from rich.status import Status

from kit.cli.output import Output, esc, json_usage_hint
from kit.cli.root import app
from kit.errors import ExitCode, KitError
from kit.fmt import in_user_terms

REPEAT_GRACE_S = 10.0


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
    hint = json_usage_hint(argv)
    if hint and hasattr(err, "message"):
        err.message = f"{err.message}. {hint}"


class _HookLine:
    """A study hook is running (kit.study_child): its time against its limit, as a live line (a line every 10 s
    when the output is not a terminal), never silence."""

    def __init__(self, io: Output) -> None:
        self.io = io
        self.status: Status | None = None

    def tick(self, what: str, elapsed_s: float, limit_s: float) -> None:
        text = esc(f"{what}: {elapsed_s:.0f} s of its {limit_s:g} s limit (KIT_HOOK_TIMEOUT_S sets it)")
        if not self.io.err.is_terminal:
            if int(elapsed_s) % 10 == 1:
                self.io.err.print(f"[dim]{text}[/]", highlight=False)
            return
        if self.status is None:
            self.status = self.io.err.status(text)
            self.status.start()
        else:
            self.status.update(text)

    def done(self) -> None:
        line, self.status = self.status, None
        if line is not None:
            line.stop()


class _Interrupt:
    """SIGTERM and SIGHUP as Ctrl-C. A closing terminal sends SIGHUP more than once (the shell forwards it to its
    jobs, the kernel sends it again as the session ends, a wrapper passes it on): the first one stops the command;
    repeats within REPEAT_GRACE_S are dropped, so they cannot cut short the cleanup the first one started (the
    trial's processes, the run's status "interrupted"). A later one interrupts again."""

    def __init__(self) -> None:
        self.first: float | None = None  # when the first SIGHUP/SIGTERM arrived (time.monotonic)

    def __call__(self, signum: int, frame: object) -> None:
        now = time.monotonic()
        if self.first is not None and now - self.first < REPEAT_GRACE_S:
            return
        self.first = now
        raise KeyboardInterrupt(f"signal {signum}")


def _last_line(io: Output, text: str) -> None:
    """A closing line (an error, "aborted"). After SIGHUP the terminal is gone and writing to it fails (EIO; a
    closed pipe: EPIPE): that must not replace the command's exit code (130, or the error's) with Python's 1."""
    try:
        io.err.print(text, highlight=False, soft_wrap=True)
    except OSError:
        pass


def _exit_with(io: Output, err: KitError) -> None:
    """One line for a KitError, its hints (`kit run --resume RUN`) as commands that run from here
    (kit.fmt.kit_prefix), and its exit code."""
    if err.fix:
        err.fix = in_user_terms(err.fix)
    # the message quotes input (manifest values, names from bundles): shown as written, never as markup
    _last_line(io, f"[bold red]error:[/] {esc(err.one_line())}")
    if io.debug:
        with contextlib.suppress(OSError):
            if err.detail:
                io.err.print(esc(err.detail), highlight=False, soft_wrap=True)
            io.err.print_exception()
    sys.exit(err.exit_code)


def main() -> None:
    """Entry point: run the app, translate KitError into one line and an exit code (kit.errors.ExitCode: 0 success,
    1 the answer is no, 2 usage, 3 inconclusive, 4 suspect, 5 input error, 6 internal error, 130 interrupted).

    SIGTERM and SIGHUP end every command as Ctrl-C does (KeyboardInterrupt): the cleanup of whatever runs (a
    trial, a study hook and every process it started, temporary directories) happens, and the exit code is 130."""
    import signal

    from kit.study_child import hook_progress

    io = Output.for_terminal()
    interrupt = _Interrupt()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:  # never undo an ignore: `nohup kit run ...` survives a logout
            signal.signal(sig, interrupt)
    hook_line = _HookLine(io)
    try:
        with hook_progress(hook_line.tick, on_end=hook_line.done):
            rc = app(standalone_mode=False, obj=io)  # click returns the code of typer.Exit instead of raising
        if rc == ExitCode.INTERRUPTED:  # typer turns a KeyboardInterrupt inside a command into Exit(130)
            _last_line(io, "[yellow]aborted[/]")
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except KitError as err:
        _exit_with(io, err)
    except (typer.Abort, KeyboardInterrupt):
        _last_line(io, "[yellow]aborted[/]")
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
                _exit_with(io, first)
            _last_line(io, "[yellow]aborted[/]")
            sys.exit(ExitCode.INTERRUPTED)
        kerr = disk_error(err, getattr(err, "filename", None) or "?", "complete the command")
        _last_line(io, f"[bold red]error:[/] {esc(kerr.one_line())}")
        if io.debug:
            io.err.print_exception()
        sys.exit(kerr.exit_code)
    except Exception as err:  # usage errors (click's, or the copy typer vendors since 0.20) and genuine bugs
        if _is_usage_error(err):
            _usage_hints(err, sys.argv[1:])
            err.show()  # type: ignore[attr-defined]
            sys.exit(int(err.exit_code))  # type: ignore[attr-defined]
        io.err.print(f"[bold red]internal error:[/] {esc(f'{type(err).__name__}: {err}')}. Re-run with --debug for "
                     "the traceback and report it.", highlight=False, soft_wrap=True)
        if io.debug:
            io.err.print_exception()
        sys.exit(ExitCode.INTERNAL)  # never 1: a CI gate must not read a crash as "regression found"
