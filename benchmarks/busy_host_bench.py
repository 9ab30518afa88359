"""Issue 39: what a busy host does to a quick run. One invocation, two LeNet quick runs of the same kit:

    .venv/bin/python benchmarks/busy_host_bench.py [--hogs 1] [--hog-cpu N] [--cpuset auto] [--timeout-min 30] \
        [--kit-root DIR] [--only quiet|hog] > docs/evidence/busy-host-<date>.md

Issue 43 added ``--cpuset auto`` (the run pinned: ``[container] cpuset = "auto"`` appended to a copy of the
study's directory, so the trials run on CPU 1.. and the kit on CPU 0) and ``--hog-cpu N`` (each hog pinned to CPU N
with ``sched_setaffinity``): with both, a hog on the kit's CPU and one on the trial's CPU are two invocations.

1. "quiet": no load added by this script (the host's own background load is sampled and printed beside it);
2. "hog": the same run while ``--hogs`` processes spin on the CPU for the whole run (started before the run, so the
   run's idle baseline sees them too, stopped after it ends), which is what a colleague's job on a shared server does.

For each run it prints the wall time, the host's background load while it ran (foreign runnable processes from
/proc/loadavg, less the hogs' own), the measured trials, the re-run attempts per trial (archived disturbed attempts
under ``attempts/`` plus the kept records, over the planned measured trials), the disturbed trials kept, and the
answer lines the kit printed; then the ratio of the two wall times. A run still going after ``--timeout-min``
minutes is stopped with SIGTERM (the kit keeps its finished trials) and reported as cut, with what it had done.

``--kit-root`` runs another checkout's kit (its source tree, with this venv's packages) so the figures before and
after a change come from one script: ``git archive <commit> | tar -x -C /tmp/before`` then
``--kit-root /tmp/before``. Nothing here asserts a speed: it prints what it measured.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = "experiments/florencio2019_lenet/experiment.toml"
NOTE = re.compile(r"host busy|stopped re-running|re-runs? stopped|budget|waiting for a quiet|quiet window", re.I)
ANSWER = re.compile(r"\b(faster|slower) than\b|\bno (significant )?difference\b|\binconclusive\b", re.I)


def _spin(stop: mp.synchronize.Event, cpu: int | None = None) -> None:
    """A CPU hog: pure-Python arithmetic until told to stop (no I/O, no sleeping), on CPU ``cpu`` when given."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 31 + 7) % 1_000_003


@dataclass
class Outcome:
    label: str
    wall_s: float
    cut: bool
    rc: int | None
    run_dir: Path | None
    measured: int = 0
    planned: int = 0
    archived: int = 0
    disturbed_kept: int = 0
    load_mean: float = 0.0
    answers: list[str] = field(default_factory=list)
    medians: dict[str, tuple[float, float]] = field(default_factory=dict)  # arm -> (train_time_s, infer_time_s)
    notes: list[str] = field(default_factory=list)
    tail: str = ""


def _loadavg1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return float("nan") if not n else (xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2)


def _count(run_dir: Path, out: Outcome) -> None:
    """Trials, archived attempts and kept-disturbed flags from the run directory (any kit version's layout)."""
    times: dict[str, tuple[list[float], list[float]]] = {}
    for rec_path in sorted((run_dir / "trials").glob("*.json")):
        try:
            rec = json.loads(rec_path.read_text())
        except (OSError, ValueError):
            continue
        if rec.get("warmup"):
            continue
        out.measured += 1
        res = rec.get("results") or {}
        if rec.get("status") == "ok" and isinstance(res, dict):
            tr, inf = times.setdefault(str(rec.get("arm")), ([], []))
            for key, into in (("train_time_s", tr), ("infer_time_s", inf)):
                if isinstance(res.get(key), (int, float)):
                    into.append(float(res[key]))
        dist = rec.get("disturbance") or {}
        if isinstance(dist, dict) and dist.get("disturbed"):
            out.disturbed_kept += 1
    out.medians = {arm: (_median(tr), _median(inf)) for arm, (tr, inf) in sorted(times.items())}
    attempts = run_dir / "attempts"
    if attempts.is_dir():
        out.archived = sum(1 for p in attempts.rglob("*.json") if p.parent.name != "telemetry"
                           and not p.name.startswith("telemetry"))
    try:
        plan = json.loads((run_dir / "manifest.json").read_text()).get("plan") or {}
        trials = plan.get("trials") if isinstance(plan, dict) else None
        if isinstance(trials, list):
            out.planned = sum(1 for t in trials if isinstance(t, dict) and not t.get("warmup"))
    except (OSError, ValueError):
        pass


def _pinned_spec(kit_root: Path, tmp: Path, cpuset: str) -> Path:
    """A copy of the study's directory whose spec asks for ``[container] cpuset`` (the copy keeps the study's
    relative paths); the checkout's own spec is not touched."""
    src = kit_root / SPEC
    dst = tmp / "study" / src.parent.name
    shutil.copytree(src.parent, dst)
    spec = dst / src.name
    text = spec.read_text()
    if "\n[container]" in text:
        raise SystemExit(f"{src} has a [container] table already: set its cpuset there instead")
    spec.write_text(text + f'\n[container]\ncpuset = "{cpuset}"\n')
    return spec


def run_once(label: str, kit_root: Path, hogs: int, timeout_s: float, runs_dir: Path, spec: Path,
             hog_cpu: int | None = None) -> Outcome:
    stop = mp.Event()
    procs = [mp.Process(target=_spin, args=(stop, hog_cpu), daemon=True) for _ in range(hogs)]
    for p in procs:
        p.start()
    if hogs:
        time.sleep(3)  # the hog is there before the run begins, as a colleague's job would be
    env = dict(os.environ, PYTHONPATH=str(kit_root), COLUMNS="160", KIT_NO_BROWSER="1")
    cmd = [sys.executable, "-m", "kit", "run", str(spec), "--profile", "quick", "--backend", "local",
           "--runs-dir", str(runs_dir)]
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5):
            loads.append(_loadavg1())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=kit_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    cut = False
    try:
        text, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        cut = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            text, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            text, _ = proc.communicate()
    wall = time.monotonic() - t0
    done.set()
    stop.set()
    for p in procs:
        p.join(5)
    dirs = sorted(d for d in runs_dir.iterdir() if d.is_dir()) if runs_dir.is_dir() else []
    out = Outcome(label, wall, cut, proc.returncode, dirs[-1] if dirs else None)
    out.load_mean = (sum(loads) / len(loads) - hogs) if loads else float("nan")
    out.answers = [ln.strip() for ln in text.splitlines() if ANSWER.search(ln)][:6]
    out.notes = list(dict.fromkeys(ln.strip() for ln in text.splitlines() if NOTE.search(ln)))[:8]
    out.tail = "\n".join(text.splitlines()[-8:])
    if out.run_dir:
        _count(out.run_dir, out)
    return out


def _fmt_s(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:04.1f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hogs", type=int, default=1, help="CPU-spinning processes beside the second run")
    ap.add_argument("--timeout-min", type=float, default=30.0, help="stop a run (SIGTERM) after this many minutes")
    ap.add_argument("--kit-root", type=Path, default=ROOT, help="the checkout whose kit runs (default: this one)")
    ap.add_argument("--only", choices=("quiet", "hog"), help="run one of the two only")
    ap.add_argument("--hog-cpu", type=int, help="pin each hog to this CPU (default: the scheduler places them)")
    ap.add_argument("--cpuset", help='run the study with [container] cpuset set to this ("auto": trial on CPU 1.., '
                    "the kit on CPU 0)")
    args = ap.parse_args()
    if args.hog_cpu is not None and args.hog_cpu not in os.sched_getaffinity(0):
        raise SystemExit(f"--hog-cpu {args.hog_cpu}: not a CPU this process may use {sorted(os.sched_getaffinity(0))}")
    root = args.kit_root.resolve()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    where = f" pinned to CPU {args.hog_cpu}" if args.hog_cpu is not None else ""
    print(f"# Busy host: LeNet quick, quiet and beside {args.hogs} CPU hog(s){where}\n")
    print(f"- kit source: `{root}` (this checkout at {commit}{'' if root == ROOT else ', another tree'})")
    print(f"- host: {os.cpu_count()} CPUs; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    pinned = f' (a copy with [container] cpuset = "{args.cpuset}")' if args.cpuset else ""
    print(f"- command: `python -m kit run {SPEC}{pinned} --profile quick --backend local --runs-dir <tmp>`\n")
    results: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="busy-bench-") as tmp:
        spec = _pinned_spec(root, Path(tmp), args.cpuset) if args.cpuset else root / SPEC
        for label, hogs in (("quiet", 0), ("hog", args.hogs)):
            if args.only and label != args.only:
                continue
            print(f"running {label} ...", file=sys.stderr, flush=True)
            results.append(run_once(label, root, hogs, args.timeout_min * 60, Path(tmp) / label, spec,
                                    args.hog_cpu))
        print("| run | wall | cut | exit | background load (runnable, less hogs) | measured trials | planned "
              "| archived re-run attempts | attempts per trial | disturbed kept |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for o in results:
            per = (o.measured + o.archived) / o.measured if o.measured else float("nan")
            print(f"| {o.label} | {_fmt_s(o.wall_s)} | {'yes' if o.cut else 'no'} | {o.rc} | {o.load_mean:.2f} "
                  f"| {o.measured} | {o.planned or '?'} | {o.archived} | {per:.2f} | {o.disturbed_kept} |")
        arms = sorted({a for o in results for a in o.medians})
        print("\n| run | " + " | ".join(f"{a} train / infer median (s)" for a in arms) + " |")
        print("|---|" + "---|" * len(arms))
        for o in results:
            cells = [f"{o.medians[a][0]:.3f} / {o.medians[a][1]:.4f}" if a in o.medians else "-" for a in arms]
            print(f"| {o.label} | " + " | ".join(cells) + " |")
        if len(results) == 2:
            q, h = results
            print(f"\nwall time, hog / quiet: **{h.wall_s / q.wall_s:.2f}×**"
                  + (" (the hog run was cut: a lower bound)" if h.cut else ""))
        for o in results:
            print(f"\n## Answer lines, {o.label}\n")
            print("\n".join(f"    {a}" for a in o.answers) or "    (none printed)")
            print("\nwhat it said about the load and its re-runs:\n")
            print("\n".join(f"    {a}" for a in o.notes) or "    (nothing)")
            print(f"\nlast lines of its output:\n\n```\n{o.tail}\n```")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
