"""A study's analysis or report hook, run in a boxed child process that can only answer in JSON.

    python -m kit.study_child WORK_DIR ADDRESS_SPACE_BYTES OUTPUT_BYTES

Study code that is not the kit's own (a run's copy the user trusted, a folder
named with ``--study``) never runs in the process that analyses runs,
compares claims or prints verdicts: it could rebind any function there. The
parent (:func:`run_in_child`) writes the arguments to ``WORK_DIR/args.pickle``
(its own data: the child unpickles what the kit wrote, the kit never unpickles
what the child wrote), the child imports the hook from the study folder as its
own package and writes ``result.json`` (plain JSON: numbers, strings, lists,
tables) or ``error.json`` (the exception and its traceback). The parent reads
either like any file a trial leaves: no link, capped, parsed with depth
limits; the child's exit code, a time limit and a missing answer are the
study's errors, said as such.

Trusted code is still not trusted to end, to stay small or to clean up after
itself, so the child runs in a box (:class:`HookLimits`, issue 37):

* a wall-time limit (default 2 minutes) enforced by the kit, shown while it
  runs through the callback of :func:`hook_progress` (about once a second);
* an address-space cap (``RLIMIT_AS``, default 4 GiB): a hook that allocates
  too much gets a MemoryError (the study's error, said as such) instead of
  driving the machine into swap;
* an output cap (``RLIMIT_FSIZE`` on every file it writes, and the capped
  reads of its answer, error report and log);
* its own session and process group, under the kit as a child subreaper
  (:mod:`kit.proctree`): a daemon it starts (double fork, ``setsid``) is
  re-parented to the kit, and when the hook ends, times out or the kit is
  interrupted (SIGTERM, SIGHUP, SIGINT: :func:`interrupt_box`), every
  process it started is stopped, killed and reaped, its temporary
  directories are removed, and only then does the interruption go on (as
  KeyboardInterrupt: the CLI's exit 130).

The limits come from the environment (``KIT_HOOK_TIMEOUT_S``,
``KIT_HOOK_MEMORY_MB``, ``KIT_HOOK_OUTPUT_MB``), from :func:`hook_limits`
around a command, or from the ``limits`` parameter.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import StudyError

KIT_ROOT = Path(__file__).resolve().parents[1]
ARGS, RESULT, ERROR, LOG = "args.pickle", "result.json", "error.json", "stderr.log"
API = "api.txt"  # the STUDY_API the hook's module asked for (the parent says once that an old one is deprecated)
ENV_TIMEOUT, ENV_MEMORY, ENV_OUTPUT = "KIT_HOOK_TIMEOUT_S", "KIT_HOOK_MEMORY_MB", "KIT_HOOK_OUTPUT_MB"
ERROR_MAX_BYTES = 1 << 20
LOG_TAIL_BYTES = 4000
PROGRESS_EVERY_S = 1.0
POLL_S = 0.1
# Threads and malloc arenas reserve address space (OpenBLAS: a buffer per thread, glibc: an arena per thread), so
# on a machine with many cores a hook that uses numpy could hit the address-space cap without using the memory.
# The child gets these unless the user set them: a hook's analysis needs no more than a few threads.
THREAD_DEFAULTS = {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4",
                   "MALLOC_ARENA_MAX": "4"}


VECTOR_FIGURE = "__vector_figure__"  # a report figure: its SVG text and its PDF bytes (base64) for LaTeX


def _plain(obj: Any) -> Any:
    """JSON-safe: numpy scalars and arrays to Python, NaN/inf to None, tuples to lists, keys to strings; a report
    figure (an SVG string carrying its PDF, kit.report.figures.VectorFigure) as {VECTOR_FIGURE, pdf_b64}."""
    if isinstance(obj, str) and isinstance(getattr(obj, "pdf", None), bytes):
        import base64

        return {VECTOR_FIGURE: str(obj), "pdf_b64": base64.b64encode(obj.pdf).decode("ascii")}  # type: ignore[attr-defined]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy arrays and scalars
        return _plain(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


# -- the box's limits -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HookLimits:
    """What one study hook may use: wall time, address space, bytes written per file (and read back)."""

    timeout_s: float = 120.0
    memory_mb: int = 4096
    output_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name, value, low in (("timeout_s", self.timeout_s, 0.1), ("memory_mb", self.memory_mb, 256),
                                 ("output_bytes", self.output_bytes, 1 << 16)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < low:
                raise StudyError(f"the study hooks' limit {name} = {value!r} is not a number of at least {low:g}",
                                 where=f"HookLimits.{name}", fix=f"give {name} >= {low:g}")

    @property
    def output_mb(self) -> float:
        return self.output_bytes / (1 << 20)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, timeout_s: float | None = None,
                 memory_mb: int | None = None, output_mb: int | None = None) -> HookLimits:
        """The defaults, overridden by the environment, overridden by the arguments (a command's options)."""
        env = os.environ if env is None else env
        got: dict[str, Any] = {}
        for key, field, kind, given in ((ENV_TIMEOUT, "timeout_s", float, timeout_s),
                                        (ENV_MEMORY, "memory_mb", int, memory_mb),
                                        (ENV_OUTPUT, "output_bytes", int, output_mb)):
            value: Any = given
            if value is None and env.get(key, "").strip():
                try:
                    value = kind(env[key].strip())
                except ValueError:
                    raise StudyError(f"{key}={env[key]!r} is not a {'number' if kind is float else 'whole number'}",
                                     where=f"environment variable {key}",
                                     fix=f"set {key} to a positive {'number' if kind is float else 'whole number'} "
                                         "or unset it") from None
            if value is not None:
                got[field] = value << 20 if field == "output_bytes" else value
        try:
            return cls(**got)
        except StudyError as exc:
            names = {"timeout_s": ENV_TIMEOUT, "memory_mb": ENV_MEMORY, "output_bytes": ENV_OUTPUT}
            field = (exc.where or "").rpartition(".")[2]
            raise StudyError(exc.cause, where=f"{names.get(field, field)} (environment or command option)",
                             fix=exc.fix) from None


ProgressCallback = Callable[[str, float, float], None]  # (what, elapsed_s, limit_s)


@dataclass(frozen=True)
class _Progress:
    tick: ProgressCallback
    on_end: Callable[[], None] | None


_LIMITS: contextvars.ContextVar[HookLimits | None] = contextvars.ContextVar("kit_hook_limits", default=None)
_PROGRESS: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar("kit_hook_progress", default=None)


@contextlib.contextmanager
def hook_limits(limits: HookLimits) -> Iterator[HookLimits]:
    """The limits of every study hook run inside the block (a command's ``--hook-*`` options)."""
    token = _LIMITS.set(limits)
    try:
        yield limits
    finally:
        _LIMITS.reset(token)


@contextlib.contextmanager
def hook_progress(callback: ProgressCallback, on_end: Callable[[], None] | None = None) -> Iterator[None]:
    """While a study hook runs inside the block, ``callback(what, elapsed_s, limit_s)`` about once a second
    (e.g. a progress line "the study's sections() 12 s of its 120 s limit"): a limit shows, not silence.
    ``on_end()`` when a hook that got at least one call ends, however it ends (to clear a live line)."""
    token = _PROGRESS.set(_Progress(callback, on_end))
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def current_limits() -> HookLimits:
    """The limits in force: :func:`hook_limits`' if set, else the environment's (else the defaults)."""
    return _LIMITS.get() or HookLimits.from_env()


# -- the kit's SIGTERM, SIGHUP and SIGINT while a hook runs --------------------------------------------------------

INTERRUPTS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Interrupts:
    """The first SIGTERM, SIGHUP or SIGINT inside :func:`interrupt_box` raises KeyboardInterrupt, once: later ones
    are noted, never raised again, so the cleanup that the first one starts (kill the hook's tree, remove its
    directories) cannot be cut short by a second. Inside :meth:`held` none is raised; one that arrived there is
    raised when the block ends (after the cleanup it protects)."""

    def __init__(self) -> None:
        self.signum = 0
        self.raised = False
        self.armed = True

    def handler(self, signum: int, frame: object) -> None:
        if not self.signum:
            self.signum = signum
        if self.armed and not self.raised:
            self.raised = True
            raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        was = self.armed
        self.armed = False
        try:
            yield
        finally:
            self.armed = was
            if was and self.signum and not self.raised:
                self.raised = True
                raise KeyboardInterrupt(f"signal {signal.Signals(self.signum).name}")


_BOX: list[Interrupts] = []  # the outermost box of the main thread (nested boxes share it)


@contextlib.contextmanager
def interrupt_box() -> Iterator[Interrupts]:
    """SIGTERM, SIGHUP and SIGINT become one KeyboardInterrupt inside the block (see :class:`Interrupts`).

    Without it a SIGTERM or SIGHUP ends the kit at once (Python's default), leaving the hook's processes and
    directories behind. Only the main thread can handle signals: elsewhere the box is inert. Nested boxes share
    the outermost one, so a second signal during any of their cleanups is held too.
    """
    if threading.current_thread() is not threading.main_thread():
        yield Interrupts()
        return
    if _BOX:
        yield _BOX[0]
        return
    box = Interrupts()
    old: dict[int, Any] = {}
    try:
        for sig in INTERRUPTS:
            if signal.getsignal(sig) == signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT: still ignored
                continue
            old[sig] = signal.signal(sig, box.handler)
        _BOX.append(box)
        yield box
    finally:
        _BOX.clear()
        for num, handler in old.items():
            if handler is not None:
                signal.signal(num, handler)


def remove_tree(path: Path) -> None:
    """Remove a directory a hook could write, even where it took away its own permissions (chmod 000)."""
    def writable(func: Any, name: str, exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name) or ".", 0o700)
            if os.path.isdir(name) and not os.path.islink(name):
                os.chmod(name, 0o700)
                shutil.rmtree(name, ignore_errors=True)
            else:
                os.unlink(name)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=writable)
        shutil.rmtree(path, ignore_errors=True)


# -- the child ------------------------------------------------------------------------------------------------------

def _limit_self(address_space_bytes: int, output_bytes: int) -> None:
    """The child's own limits, set before it reads anything of the study (hard limits too: the hook cannot raise
    them again). Set here rather than in a ``preexec_fn``, which is unsafe in a parent with threads."""
    import resource

    for which, value in ((resource.RLIMIT_AS, address_space_bytes), (resource.RLIMIT_FSIZE, output_bytes),
                         (resource.RLIMIT_CORE, 0)):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (value, value))


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    work = Path(argv[0])
    if len(argv) >= 3:
        _limit_self(int(argv[1]), int(argv[2]))
    try:
        with (work / ARGS).open("rb") as fh:
            req = pickle.load(fh)  # written by the kit process that started this one
        from kit.workloads.study_import import import_study_module

        mod = import_study_module(Path(req["root"]), req["module"], package="kit_study_host")
        fn = getattr(mod, req["func"], None)
        if not callable(fn):
            raise AttributeError(f"{req['module']}.py defines no function {req['func']}()")
        from kit.study_api import api_of, invoke

        where = str(Path(req["root"]) / f"{req['module']}.py")
        (work / API).write_text(str(api_of(mod, where)), encoding="ascii")
        out = invoke(mod, fn, req["func"], tuple(req["args"]), where)
        data = json.dumps(_plain(out), allow_nan=False)
        (work / RESULT).write_text(data, encoding="utf-8")  # EFBIG past the output cap: reported below
    except BaseException as exc:
        with contextlib.suppress(OSError):
            (work / RESULT).unlink()  # a torn answer is no answer
        err = {"type": type(exc).__name__, "message": str(exc)[:2000],
               "errno": exc.errno if isinstance(exc, OSError) else None,
               "traceback": "".join(traceback.format_exception(exc))[-20000:]}
        (work / ERROR).write_text(json.dumps(err), encoding="utf-8")
        return 1
    return 0


# -- the parent -----------------------------------------------------------------------------------------------------

def _child_env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(KIT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["TMPDIR"] = str(work / "tmp")  # the hook's own temporary files go where the kit removes them
    for key, value in THREAD_DEFAULTS.items():
        env.setdefault(key, value)
    return env


MEMORY_WORDS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


def _failure(code: int, err_doc: Any, tail: str, func: str, module: str, where: str, limits: HookLimits,
             fix: str) -> StudyError:
    """The study's error for a child that ended without an answer, said as what happened."""
    etype = str(err_doc.get("type")) if isinstance(err_doc, dict) else ""
    text = f"{etype} {err_doc.get('message') if isinstance(err_doc, dict) else ''} {tail}"
    detail = str(err_doc.get("traceback")) if isinstance(err_doc, dict) else tail
    if etype == "MemoryError" or (not etype and any(w in text for w in MEMORY_WORDS)):
        return StudyError(f"the study's {func}() ran out of its {limits.memory_mb} MiB address space",
                          where=where, fix=f"make {module}.py use less memory, or allow more: "
                                           f"{ENV_MEMORY}={limits.memory_mb * 2} (MiB)", detail=detail)
    if isinstance(err_doc, dict) and err_doc.get("errno") == errno.EFBIG:
        return StudyError(f"the study's {func}() wrote a file over its {limits.output_mb:g} MiB output limit",
                          where=where, fix=f"make {module}.py write less, or allow more: "
                                           f"{ENV_OUTPUT}={max(1, round(limits.output_mb * 4))} (MiB)", detail=detail)
    if isinstance(err_doc, dict):
        return StudyError(f"the study's {func}() raised {etype}: {str(err_doc.get('message'))[:300]}", where=where,
                          fix=fix, detail=detail)
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals() \
        else f"ended with exit code {code}"
    return StudyError(f"the study's {func}() {how} and gave no answer", where=where, fix=fix, detail=tail)


def _say_api(work: Path, where: str) -> None:
    """The deprecation line of a hook on an older STUDY_API, said by the kit (the child's stderr is not shown).
    The file is the child's: read by descriptor without following a link, a few bytes, a number or nothing."""
    from kit.study_api import STUDY_API, warn_legacy

    try:
        fd = os.open(work / API, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        text = os.read(fd, 8).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    if text.isdigit() and 1 <= int(text) < STUDY_API:
        warn_legacy(int(text), where)


def run_in_child(root: Path, module: str, func: str, args: tuple[Any, ...], where: str,
                 limits: HookLimits | None = None) -> Any:
    """``module.func(*args)`` from the study folder ``root`` in a fresh, boxed interpreter; its JSON answer.

    StudyError for the study's own failure (an exception, the time limit, the memory or output cap, no answer);
    KeyboardInterrupt, after the cleanup, when the kit is interrupted meanwhile. Whatever happens, no process
    the hook started outlives this call and its work directory is removed.
    """
    from kit.proctree import TreeGuard, child_subreaper
    from kit.safeio import load_json

    limits = limits or current_limits()
    fix = f"fix {module}.py in the study folder (re-run with --debug for the traceback)"
    what = f"the study's {func}()"
    progress = _PROGRESS.get()
    with interrupt_box() as box, child_subreaper():
        work: Path | None = None
        err_fd = -1
        proc: subprocess.Popen[bytes] | None = None
        ticked = False
        guard = TreeGuard()
        try:
            with box.held():
                work = Path(tempfile.mkdtemp(prefix="kit-study-hook-"))
            (work / "tmp").mkdir()
            with (work / ARGS).open("wb") as fh:
                pickle.dump({"root": str(Path(root).resolve()), "module": module, "func": func, "args": args}, fh,
                            protocol=pickle.HIGHEST_PROTOCOL)
            err_fd = os.open(work / LOG, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with box.held():  # started and known to the guard as one step
                proc = subprocess.Popen(
                    [sys.executable, "-m", "kit.study_child", str(work), str(int(limits.memory_mb * (1 << 20))),
                     str(int(limits.output_bytes))], cwd=work, env=_child_env(work), stdin=subprocess.DEVNULL,
                    stdout=err_fd, stderr=err_fd, start_new_session=True)
                guard.started(proc.pid)
            t0 = time.monotonic()
            next_tick = t0 + PROGRESS_EVERY_S
            while True:
                try:
                    code = proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now - t0 >= limits.timeout_s:
                    raise StudyError(f"{what} did not finish within its {limits.timeout_s:g} s time limit "
                                     "(it was stopped, with every process it started)", where=where,
                                     fix=f"make {func}() faster, or give it more time: "
                                         f"{ENV_TIMEOUT}={max(limits.timeout_s * 4, 600):g} (seconds)")
                if now >= next_tick:
                    next_tick = now + PROGRESS_EVERY_S
                    guard.reap()  # daemons of the hook that already ended: no zombies pile up
                    if progress is not None:
                        ticked = True
                        progress.tick(what, now - t0, limits.timeout_s)
            # read by descriptor, never by name: the hook may have replaced the file (a FIFO, a link)
            size = os.fstat(err_fd).st_size
            tail = os.pread(err_fd, LOG_TAIL_BYTES, max(0, size - LOG_TAIL_BYTES)).decode("utf-8", errors="replace")
            if code != 0:
                err_doc = load_json(work / ERROR, ERROR_MAX_BYTES, "the study hook's error report", missing_ok=True)
                raise _failure(code, err_doc, tail, func, module, where, limits, fix)
            answer = load_json(work / RESULT, limits.output_bytes, f"the answer of {what}", expect=None, fix=fix)
            _say_api(work, where)
            return answer
        finally:
            with box.held():
                if proc is not None:  # the hook, everything it started, and whatever was re-parented here
                    guard.end(roots=(proc.pid,) if proc.returncode is None else ())
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.kill()
                    proc.wait()
                    guard.end()
                if err_fd >= 0:
                    os.close(err_fd)
                if work is not None:
                    remove_tree(work)
                if ticked and progress is not None and progress.on_end is not None:
                    progress.on_end()


if __name__ == "__main__":
    sys.exit(main())
