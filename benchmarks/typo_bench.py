"""A typo in an experiment id or profile (issue 39, item 8): how long `kit run` takes to say so, in a real process,
beside what the old path cost (kit.catalog imported before the name was checked: the analysis, scipy and pandas).

    .venv/bin/python benchmarks/typo_bench.py [REPEATS]

Prints the median wall time of each and their ratio (a figure for the closing note, never a test: the host's load
sets the absolute times).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "kit run florencio2019_lenat (id typo)": [sys.executable, "-m", "kit", "run", "florencio2019_lenat"],
    "kit run florencio2019_lenet -p quik (profile typo)": [sys.executable, "-m", "kit", "run", "florencio2019_lenet",
                                                            "--profile", "quik"],
    "old path: import kit.catalog, then resolve": [sys.executable, "-c", "import kit.cli, kit.catalog as c\n"
                                                   "try:\n    c.resolve_experiment('florencio2019_lenat')\n"
                                                   "except Exception:\n    pass"],
}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    medians = {}
    for name, cmd in CASES.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
            times.append(time.perf_counter() - t0)
        medians[name] = statistics.median(times)
        print(f"{name}: median {medians[name]:.2f} s over {repeats} (exit {proc.returncode})")
    values = list(medians.values())
    new, old = values[0], values[-1]
    print(f"old path / id typo now: {old / new:.1f}x")


if __name__ == "__main__":
    main()
