"""Benchmark of `kit history` over many runs (issue 14 item 11): prints seconds per run count.

Users keep one run per nightly build, so `kit history` must stay fast at 1,000 runs.
The runs are copies of the stored golden run (tests/data/golden/run, a real run of
the calibrated workload: 11 trials per arm, telemetry samples included) with
their phase times rescaled (a 15 % slowdown planted at 60 % of the series, 1 %
noise) and each one analysed as `kit run` would have done when it finished, so
the timed command reads fresh analyses as it does on a real runs directory.

    .venv/bin/python benchmarks/history_bench.py                 # 25, 100 and 1000 runs
    .venv/bin/python benchmarks/history_bench.py --runs 25 100   # fewer
    .venv/bin/python benchmarks/history_bench.py --keep /tmp/hist  # reuse generated runs

Each figure is the wall time of one `kit history` command in a fresh process
(import time included), the way a user meets it: without the history cache
(`--no-cache`), the first call that fills it, and a call served from it; it
also prints the step found. `--baseline DIR` times the kit of another checkout
(`git worktree add DIR <commit>`) on the same runs, for a before/after ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden" / "run"
STEP_AT = 0.6
SLOWDOWN = 1.15


def _scale_trial(path: Path, factor: float, rng: np.random.Generator) -> None:
    rec = json.loads(path.read_text())
    f = factor * (1.0 + 0.01 * rng.standard_normal())
    for ph in (rec.get("phases") or {}).values():
        if isinstance(ph, dict) and isinstance(ph.get("duration_s"), float):
            ph["duration_s"] *= f
    for m in rec.get("markers") or []:
        if m.get("event") == "phase_end" and isinstance(m.get("duration_s"), float):
            m["duration_s"] *= f
    for k, v in list((rec.get("results") or {}).items()):
        if k.endswith("_time_s") and isinstance(v, float):
            rec["results"][k] = v * f
    path.write_text(json.dumps(rec, indent=1))


def make_run(args: tuple[Path, int, int]) -> None:
    """Copy of the golden run number ``i`` of ``n``, rescaled and analysed."""
    from kit.analysis.analyze import analyze_run

    runs_dir, i, n = args
    dest = runs_dir / f"2026-01-01T00-00-{i:05d}-golden"
    if (dest / "analysis.json").is_file():
        return
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(GOLDEN, dest)
    man = json.loads((dest / "manifest.json").read_text())
    man["label"] = f"nightly-{i:05d}"
    man["started"] = 1_790_000_000.0 + 86_400.0 * i
    (dest / "manifest.json").write_text(json.dumps(man, indent=1))
    rng = np.random.default_rng(i)
    factor = SLOWDOWN if i >= int(STEP_AT * n) else 1.0
    for t in sorted((dest / "trials").glob("*.json")):
        _scale_trial(t, factor, rng)
    analyze_run(dest)


def generate(runs_dir: Path, n: int) -> None:
    runs_dir.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor() as pool:
        list(pool.map(make_run, [(runs_dir, i, n) for i in range(n)], chunksize=8))


def time_history(runs_dir: Path, *extra: str, root: Path = ROOT, cache: Path | None = None,
                 timeout: float | None = None) -> tuple[float, str]:
    """Wall time of one `kit history` in a fresh process, run from the checkout ``root`` (its kit/ is imported)."""
    cmd = [sys.executable, "-m", "kit", "history", str(runs_dir), "--metric", "time_s", "--phase", "train",
           "--arm", "pytorch", *extra]
    env = {**os.environ, "KIT_HISTORY_CACHE": str(cache or runs_dir.parent / "history-cache")}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return float("inf"), f"(stopped after {timeout:.0f} s)"
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kit history failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    steps = [ln.strip() for ln in proc.stdout.splitlines() if "between" in ln or ln.startswith("no step")]
    return wall, "; ".join(steps) or "(no step line)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, nargs="+", default=[25, 100, 1000])
    ap.add_argument("--keep", type=Path, help="generate the runs here and keep them (reused next time)")
    ap.add_argument("--baseline", type=Path, help="also time the kit of this checkout (e.g. a `git worktree` of an "
                                                  "older commit), without cache options")
    ap.add_argument("--baseline-timeout", type=float, default=900.0, help="seconds before a baseline call is stopped")
    a = ap.parse_args()
    base = a.keep or Path(tempfile.mkdtemp(prefix="kit-history-bench-"))
    try:
        print(f"runs copied from {GOLDEN.relative_to(ROOT)} under {base}; slowdown x{SLOWDOWN} planted at run "
              f"{STEP_AT:.0%} of the series")
        for n in a.runs:
            t0 = time.perf_counter()
            generate(base / f"n{n}", n)
            gen = time.perf_counter() - t0
            runs = base / f"n{n}"
            expected = f"nightly-{int(STEP_AT * n) - 1:05d}' and 'nightly-{int(STEP_AT * n):05d}"
            cache = Path(tempfile.mkdtemp(prefix="kit-history-cache-"))
            try:
                cold, steps = time_history(runs, "--no-cache")
                first, _ = time_history(runs, cache=cache)  # reads every run, fills the cache
                warm, steps_warm = time_history(runs, cache=cache)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            print(f"{n:>5} runs [generated in {gen:.0f} s]: kit history --no-cache {cold:6.2f} s, "
                  f"first call {first:6.2f} s, cached {warm:6.2f} s ({1000 * warm / n:.1f} ms/run); planted step found: "
                  f"{'yes' if expected in steps and expected in steps_warm else 'NO'}  {steps}")
            if a.baseline:
                old, old_steps = time_history(runs, root=a.baseline.resolve(), timeout=a.baseline_timeout)
                if math.isinf(old):  # stopped: its time is only known to exceed the limit
                    lim = a.baseline_timeout
                    print(f"{n:>5} runs: baseline {a.baseline}: > {lim:.0f} s (stopped) = more than "
                          f"{lim / cold:.0f}x this kit's --no-cache, more than {lim / warm:.0f}x cached")
                    continue
                print(f"{n:>5} runs: baseline {a.baseline}: {old:6.2f} s = {old / cold:.1f}x this kit's --no-cache, "
                      f"{old / warm:.1f}x cached; step found: {'yes' if expected in old_steps else 'NO'}  {old_steps}")
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
