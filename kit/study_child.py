"""A study's analysis or report hook, run in a child process that can only answer in JSON.

    python -m kit.study_child WORK_DIR

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
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from kit.errors import StudyError

KIT_ROOT = Path(__file__).resolve().parents[1]
ARGS, RESULT, ERROR = "args.pickle", "result.json", "error.json"


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


def main(argv: list[str] | None = None) -> int:
    work = Path((argv if argv is not None else sys.argv[1:])[0])
    try:
        with (work / ARGS).open("rb") as fh:
            req = pickle.load(fh)  # written by the kit process that started this one
        from kit.workloads.study_import import import_study_module

        mod = import_study_module(Path(req["root"]), req["module"], package="kit_study_host")
        fn = getattr(mod, req["func"], None)
        if not callable(fn):
            raise AttributeError(f"{req['module']}.py defines no function {req['func']}()")
        from kit.study_api import invoke

        out = invoke(mod, fn, req["func"], tuple(req["args"]), str(Path(req["root"]) / f"{req['module']}.py"))
        data = json.dumps(_plain(out), allow_nan=False)
    except BaseException as exc:
        err = {"type": type(exc).__name__, "message": str(exc)[:2000],
               "traceback": "".join(traceback.format_exception(exc))[-20000:]}
        (work / ERROR).write_text(json.dumps(err), encoding="utf-8")
        return 1
    (work / RESULT).write_text(data, encoding="utf-8")
    return 0


def run_in_child(root: Path, module: str, func: str, args: tuple[Any, ...], where: str, timeout_s: float,
                 max_bytes: int) -> Any:
    """``module.func(*args)`` from the study folder ``root`` in a fresh interpreter; its JSON answer."""
    from kit.safeio import load_json

    fix = f"fix {module}.py in the study folder (re-run with --debug for the traceback)"
    with tempfile.TemporaryDirectory(prefix="kit-study-hook-") as tmp:
        work = Path(tmp)
        with (work / ARGS).open("wb") as fh:
            pickle.dump({"root": str(Path(root).resolve()), "module": module, "func": func, "args": args}, fh,
                        protocol=pickle.HIGHEST_PROTOCOL)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(KIT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        err_fd = os.open(work / "stderr.log", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            proc = subprocess.Popen([sys.executable, "-m", "kit.study_child", str(work)], cwd=work, env=env,
                                    stdin=subprocess.DEVNULL, stdout=err_fd, stderr=err_fd, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise StudyError(f"the study's {func}() did not finish within {timeout_s:g} s", where=where,
                                 fix=fix) from None
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):  # what the hook started ends with it
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # read by descriptor, never by name: the hook may have replaced the file (a FIFO, a link)
            size = os.fstat(err_fd).st_size
            tail = os.pread(err_fd, 4000, max(0, size - 4000)).decode("utf-8", errors="replace")
        finally:
            os.close(err_fd)
        if code != 0:
            err_doc = load_json(work / ERROR, 1 << 20, "the study hook's error report", missing_ok=True)
            if isinstance(err_doc, dict):
                raise StudyError(f"the study's {func}() raised {err_doc.get('type')}: "
                                 f"{str(err_doc.get('message'))[:300]}", where=where, fix=fix,
                                 detail=str(err_doc.get("traceback")))
            raise StudyError(f"the study's {func}() ended with exit code {code} and no answer", where=where,
                             fix=fix, detail=tail)
        return load_json(work / RESULT, max_bytes, f"the answer of the study's {func}()", expect=None, fix=fix)


if __name__ == "__main__":
    sys.exit(main())
