"""Precision per machine-minute, and false verdicts on a busy host (issue 24's benchmark), for the kit as it is.

    python benchmarks/precision_bench.py budget [--minutes 10] [--runs-dir DIR]
    python benchmarks/precision_bench.py aa [--runs-dir DIR]

``budget``: the LeNet quick profile (experiments/florencio2019_lenet, local backend), run after run, back to back,
until the budget of machine time is spent (the run in flight finishes). Every run's measured blocks are pooled:
a block pairs one TensorFlow and one PyTorch trial of one repetition, run interleaved in a random order. Printed:

* the timed share: the trials' timed phases (train + infer) over their wall time (process start to result);
* per phase (train, infer): the SD of the paired log differences log(TF/PT), and the minimum detectable change
  at the pooled number of pairs (kit.stats.detectability: alpha 0.05 two-sided, power 80 %), the figure the
  kit itself reports.

Runs are pooled as blocks of one experiment: between-run drift is part of the noise the figure shows.

``aa``: an A/A experiment. Two runs of identical code, back to back; during the second, a CPU hog (a busy Python
loop in its own process) starts once half of the first run's duration has passed and runs to the end. Then
``kit compare A B`` (kit.compare.compare_runs, the default metrics and threshold) and the count of each verdict.
No verdict should say regression or improvement: nothing changed but the host's load.

Figures are printed, never asserted (the guide: speed is measured in benchmarks, not in timed tests).
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kit.analysis.analyze import analyze_run, usable  # noqa: E402
from kit.analysis.hypotheses import paired_arrays  # noqa: E402
from kit.analysis.power_cache import detectability  # noqa: E402
from kit.run import RunOptions, start_run  # noqa: E402
from kit.spec import load_spec  # noqa: E402
from kit.store import RunDir  # noqa: E402

STUDY = ROOT / "experiments" / "florencio2019_lenet"
TIMED = ("train", "infer")


def one_run(runs: Path) -> Path:
    spec = load_spec(STUDY, "quick")
    rd = start_run(spec, RunOptions(runs_root=runs, backend="local"))
    if rd.manifest().status != "complete":
        sys.exit(f"run {rd.path} is {rd.manifest().status}")
    analyze_run(rd.path)
    return rd.path


def timed_share(run: Path) -> tuple[float, float]:
    """(timed seconds, wall seconds) over the run's measured trials."""
    timed = wall = 0.0
    for t in RunDir.open(run).trial_records():
        if not t.counts or t.wall_s is None:
            continue
        wall += t.wall_s
        timed += sum(float(t.phases.get(p, {}).get("duration_s") or 0.0) for p in TIMED)
    return timed, wall


def pairs(run: Path, phase: str) -> tuple[np.ndarray, np.ndarray]:
    import pandas as pd

    from kit.analysis.analyze import current_analysis

    analysis, _ = current_analysis(run, need_study=False)
    vals = usable(pd.DataFrame(analysis.value_rows()))
    a, b, _ = paired_arrays(vals, "c00", "time_s", phase, "tensorflow", "pytorch")
    return a, b


def budget(args: argparse.Namespace) -> None:
    runs_dir = Path(args.runs_dir)
    t0 = time.monotonic()
    done: list[Path] = []
    while time.monotonic() - t0 < args.minutes * 60:
        done.append(one_run(runs_dir))
        print(f"run {len(done)}: {done[-1].name} ({time.monotonic() - t0:.0f} s)", flush=True)
    spent = time.monotonic() - t0
    timed, wall = (sum(x) for x in zip(*(timed_share(r) for r in done), strict=True))
    print(f"\nLeNet quick profile, local backend, {len(done)} runs back to back in {spent / 60:.1f} min "
          f"(budget {args.minutes:g} min)")
    print(f"timed share: {timed:.1f} s timed (train + infer) of {wall:.1f} s trial wall time = {timed / wall:.1%}")
    for phase in TIMED:
        a = np.concatenate([pairs(r, phase)[0] for r in done])
        b = np.concatenate([pairs(r, phase)[1] for r in done])
        d = np.log(a / b)
        det = detectability(a, b, paired=True, level=0.05, threshold=0.02)
        mde = "-" if det.mde is None or not math.isfinite(det.mde) else f"{det.mde:.1%}"
        print(f"{phase}: {len(d)} pairs, TF/PT geometric mean ratio {math.exp(d.mean()):.3f}, "
              f"SD of log(TF/PT) {d.std(ddof=1):.4f}, minimum detectable change {mde}; {det.why}")


def aa(args: argparse.Namespace) -> None:
    from kit.compare import compare_runs

    runs_dir = Path(args.runs_dir)
    t0 = time.monotonic()
    run_a = one_run(runs_dir / "a")
    dur = time.monotonic() - t0
    print(f"run A: {run_a.name} ({dur:.0f} s), quiet host", flush=True)
    hog: list[subprocess.Popen[bytes]] = []

    def start_hog() -> None:
        hog.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

    timer = threading.Timer(dur / 2, start_hog)
    timer.start()
    try:
        run_b = one_run(runs_dir / "b")
    finally:
        timer.cancel()
        for p in hog:
            p.kill()
            p.wait()
    print(f"run B: {run_b.name}, a busy-loop process from {dur / 2:.0f} s on" + ("" if hog else " (never started)"))
    res = compare_runs(run_a, run_b).to_json()
    verdicts = Counter(r["verdict"] for r in res["rows"])
    print("\nkit compare A B, verdict counts: " + ", ".join(f"{k} {verdicts.get(k, 0)}" for k in (
        "regression", "improvement", "suspect", "no change", "inconclusive", "not tested")))
    for r in res["rows"]:
        print(f"  {r.get('metric')} {r.get('phase')} {r.get('arm')}: ratio {r.get('ratio')}, p_adj {r.get('p_adj')}, "
              f"{r['verdict']}")
    for name, run in (("A", run_a), ("B", run_b)):
        from kit.analysis.analyze import current_analysis

        shaken = current_analysis(run, need_study=False)[0].disturbance
        print(f"run {name}: disturbed attempts re-run {shaken.reruns}, counted trials still disturbed "
              f"{len(shaken.still_disturbed_trials)} of {shaken.measured_trials}")
    for r in res["rows"]:
        if r["verdict"] == "suspect":
            print(f"  suspect {r['metric']} {r['phase']} {r['arm']} (would be {r['was']}): {r['suspect_cause']}")
    hints = [d for d in res["provenance_differences"] if str(d["key"]).startswith("threat.")]
    print("host-state differences the comparison lists: " + (", ".join(f"{d['key']} {d['a']} -> {d['b']}"
                                                                     for d in hints) or "none"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("budget", "aa"))
    ap.add_argument("--minutes", type=float, default=10.0, help="machine-time budget of the budget mode")
    ap.add_argument("--runs-dir", default="/tmp/precision-bench", help="where the runs are written")
    args = ap.parse_args()
    (budget if args.mode == "budget" else aa)(args)


if __name__ == "__main__":
    main()
