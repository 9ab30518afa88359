"""Time the per-trial metric table (kit.analysis.analyze.load_values: samples read, attributed to phases, metric
values and threat facts) of one run directory with two checkouts of the kit, alternating, in one run.

    git worktree add /tmp/before COMMIT
    python benchmarks/load_values_bench.py RUN_DIR /tmp/before .

Prints each checkout's best of five and the ratio old/new. Issue 23 attributed telemetry to phases once per
trial (shared by the metrics and the threat facts) and looks metric values up in summaries grouped once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CODE = """
import sys, time
sys.path.insert(0, {root!r})
import kit
assert kit.__file__.startswith({root!r})
from kit.store import RunDir
from kit.analysis.analyze import load_values, _metrics_of
rd = RunDir.open({run!r})
trials = rd.trial_records()
metrics = _metrics_of(rd.manifest())
best = min(((lambda t0: (load_values(rd, trials, metrics, []), time.perf_counter() - t0)[1])(time.perf_counter()))
           for _ in range(5))
print(len(trials), best)
"""


def once(root: Path, run: Path) -> tuple[int, float]:
    out = subprocess.run([sys.executable, "-c", CODE.format(root=str(root.resolve()), run=str(run))],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]), float(out[1])


def main() -> None:
    run, old, new = (Path(a) for a in sys.argv[1:4])
    t_old, t_new = [], []
    for _ in range(2):  # alternate, so a change of load on the host falls on both
        n, a = once(old, run)
        _, b = once(new, run)
        t_old.append(a)
        t_new.append(b)
    print(f"{run.name}: {n} trials; load_values best of 5 x 2: old {min(t_old):.3f} s, new {min(t_new):.3f} s, "
          f"old/new = {min(t_old) / min(t_new):.2f}x")


if __name__ == "__main__":
    main()
