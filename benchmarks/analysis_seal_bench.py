"""What does reusing a sealed analysis.json save over recomputing it every time? (issue 22 item 3)

`kit compare`, `kit history` and `kit pack` may either recompute every run's analysis (nothing stored is
trusted) or reuse analysis.json when its seal holds (kit.freshness: an HMAC under the user's key over the
digest of every input and the analysis's content; checking it hashes every input file). This prints both
costs, measured in one process on the same run, as seconds and as a ratio, for the stored golden run
(22 trials with telemetry) and for a copy of it enlarged to 10x the trials.

    .venv/bin/python benchmarks/analysis_seal_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GOLDEN = ROOT / "tests" / "data" / "golden" / "run"


def enlarge(src: Path, dest: Path, times: int) -> Path:
    """The golden run with its blocks repeated ``times`` times (new trial ids, blocks and positions)."""
    shutil.copytree(src, dest)
    man = json.loads((dest / "manifest.json").read_text())
    base = list(man["plan"]["trials"])
    n_blocks = 1 + max(t["block"] for t in base)
    n_pos = 1 + max(t["position"] for t in base)
    for k in range(1, times):
        for t in base:
            new = {**t, "block": t["block"] + k * n_blocks, "position": t["position"] + k * n_pos,
                   "repetition": t["repetition"] + k * n_blocks, "warmup": False}
            new["trial_id"] = t["trial_id"].replace(f"r{t['repetition']:03d}", f"r{new['repetition']:03d}")
            man["plan"]["trials"].append(new)
            rec = json.loads((src / "trials" / f"{t['trial_id']}.json").read_text())
            rec.update({k2: new[k2] for k2 in ("trial_id", "block", "position", "repetition", "warmup")})
            (dest / "trials" / f"{new['trial_id']}.json").write_text(json.dumps(rec))
            shutil.copy(src / "samples" / f"{t['trial_id']}.parquet", dest / "samples" / f"{new['trial_id']}.parquet")
    (dest / "manifest.json").write_text(json.dumps(man))
    return dest


def timed(fn: object, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("KIT_CONFIG_DIR", str(Path(tmp) / "config"))
        from kit.analysis.analyze import analyze_run, current_analysis
        from kit.freshness import inputs_digest

        for label, times in (("golden run", 1), ("golden run x10", 10)):
            run = enlarge(GOLDEN, Path(tmp) / f"run{times}", times)
            analyze_run(run)  # warm-up: imports, caches; writes the sealed analysis
            n = len(list((run / "trials").glob("*.json")))
            size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
            recompute = timed(lambda run=run: analyze_run(run, write=False), args.repeat)
            reuse = timed(lambda run=run: current_analysis(run), args.repeat)
            assert current_analysis(run)[1] is False, "the seal did not hold"
            digest = timed(lambda run=run: inputs_digest(run), args.repeat)
            print(f"{label}: {n} trials, {size / 1e6:.1f} MB; median of {args.repeat}: recompute {recompute:.3f} s, "
                  f"reuse (seal check) {reuse:.3f} s (of which hashing the inputs {digest:.3f} s); "
                  f"recompute / reuse = {recompute / reuse:.1f}x")


if __name__ == "__main__":
    main()
