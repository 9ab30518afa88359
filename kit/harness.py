"""Runs one trial; the only kit code that executes inside a framework image.

    python -m kit.harness --out OUT_DIR --data DATA_DIR [--study STUDY_DIR]

reads ``OUT_DIR/request.json``, appends phase markers to
``OUT_DIR/markers.jsonl`` and writes ``OUT_DIR/result.json`` (atomically).
It imports nothing from the host side of the kit: only the standard library,
numpy, ``kit.workloads`` and the one framework the trial needs (or, for a
study folder's own workload, the module the request names from STUDY_DIR:
the run's read-only copy of the folder).

Exit codes: 0 ok, 3 out of memory, 4 bad request, 5 skipped by design
(``SkipTrial``: the trial cannot run on this host, with the reason), 6 the
device asked for cannot be used (``DeviceUnavailable``: a GPU the framework
cannot reach, or not the GPU the kit gave the trial; status ``error``, never a
silent CPU run), 1 any other error. The result file says the same in words,
with the traceback's last lines (and for 6 ``error_kind = "device"`` with the
cause and the fix).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_ERROR, EXIT_OOM, EXIT_BAD_REQUEST, EXIT_SKIPPED, EXIT_DEVICE = 0, 1, 3, 4, 5, 6
REQUEST_FILE, RESULT_FILE, MARKERS_FILE = "request.json", "result.json", "markers.jsonl"


def _write_result(out: Path, payload: dict[str, Any]) -> None:
    tmp = out / (RESULT_FILE + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out / RESULT_FILE)


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the kit process that started it dies.

    Set only when ``KIT_PARENT_PID`` is given (the local backend): a killed
    ``kit run`` must not leave a trial running under a resumed one.
    """
    want = os.environ.get("KIT_PARENT_PID")
    if not want or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != want:  # the parent died before prctl took effect
        os._exit(EXIT_ERROR)


# Settings a framework reads once, at import, pinned before any workload module is imported (a workload that
# imports keras before kit.workloads.tf_env would otherwise get the CPU's default: issue 15). A value the
# user set is kept; the trial records what ran and the analysis compares the arms.
PINNED_ENV = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kit.harness", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="directory with request.json; results go here")
    ap.add_argument("--data", required=True, type=Path, help="directory holding the dataset files")
    ap.add_argument("--study", type=Path, default=None, help="the study folder whose module the request names")
    args = ap.parse_args(argv)
    out: Path = args.out
    _die_with_parent()
    # Every process of the trial (torchrun, its DDP ranks, DataLoader workers) inherits this: the phase markers'
    # cpu_s sums the tree rooted here, whichever process writes them (kit.workloads.tree_cpu).
    from kit.workloads.tree_cpu import ROOT_ENV

    os.environ[ROOT_ENV] = str(os.getpid())
    for key, value in PINNED_ENV.items():
        os.environ.setdefault(key, value)
    started = time.time()
    try:
        req = json.loads((out / REQUEST_FILE).read_text(encoding="utf-8"))
        from kit.workloads import module_for

        study = req.get("study")
        if study is not None:
            if args.study is None or not isinstance(study, dict) or not isinstance(study.get("module"), str):
                raise ValueError("the request names a study module but no --study folder was given")
            mod_name = str(study["module"])
        else:
            mod_name = module_for(req["workload"]["name"], req["framework"])
    except (OSError, ValueError, KeyError) as exc:
        _write_result(out, {"status": "error", "error": f"bad request: {exc!r}", "started": started})
        return EXIT_BAD_REQUEST

    from kit.workloads.common import DeviceUnavailable, Markers, SkipTrial

    markers = Markers(out / MARKERS_FILE)
    try:  # the CPUs the trial may run on, as the kernel says (kit.pinning records what was asked)
        cpus: list[int] | None = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = None
    markers.event("harness_start", pid=os.getpid(), python=sys.version.split()[0], cpus=cpus)
    mod = None
    try:
        if study is not None:
            from kit.workloads.study_import import import_study_module

            mod = import_study_module(args.study, mod_name)
        else:
            mod = importlib.import_module(mod_name)
        markers.event("imported", module=mod_name)
        results, env = mod.run(req, args.data, markers)
    except DeviceUnavailable as exc:
        markers.event("harness_end", status="error", error_kind="device")
        markers.close()
        _write_result(out, {"status": "error", "error_kind": "device",
                            "error": f"DeviceUnavailable: {exc}"[:2000], "cause": exc.cause, "fix": exc.fix,
                            "traceback_tail": "".join(traceback.format_exception(exc))[-4000:],
                            "started": started, "ended": time.time()})
        print(f"kit.harness: device unavailable: {exc.cause}\n  fix: {exc.fix}", file=sys.stderr)
        return EXIT_DEVICE
    except SkipTrial as exc:
        markers.event("harness_end", status="skipped")
        markers.close()
        _write_result(out, {"status": "skipped", "error": f"skipped: {exc}", "reason": str(exc),
                            "started": started, "ended": time.time()})
        return EXIT_SKIPPED
    except BaseException as exc:
        oom = False
        if mod is not None and hasattr(mod, "is_oom"):
            try:
                oom = bool(mod.is_oom(exc))
            except Exception:
                oom = False
        tb = traceback.format_exception(exc)
        markers.event("harness_end", status="oom" if oom else "error")
        markers.close()
        _write_result(out, {
            "status": "oom" if oom else "error",
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback_tail": "".join(tb)[-4000:],
            "started": started,
            "ended": time.time(),
        })
        if isinstance(exc, KeyboardInterrupt):
            raise
        return EXIT_OOM if oom else EXIT_ERROR
    markers.event("harness_end", status="ok")
    markers.close()
    _write_result(out, {"status": "ok", "results": results, "env": env, "started": started, "ended": time.time()})
    return EXIT_OK


if __name__ == "__main__":
    rc = main()
    # Everything is on disk (result.json replaced atomically, markers fsynced): skip the interpreter's teardown,
    # which after a framework import costs 0.4 s (torch) to 0.8 s (TensorFlow) of every trial's wall time and
    # measures nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
