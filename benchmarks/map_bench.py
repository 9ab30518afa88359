"""`kit map` over 100 runs: wall time of loading (seals verified, analyses reused), building and writing the map.

The 100 runs are derived from the golden run (tests/data/golden/run) with the paper's claims: five host classes
(Intel AVX-512, Intel AMX, AMD Zen 4, ARM Neoverse, a 1-core Intel), 20 runs each, each with its own start time
(a distinct run) and 1 % of noise on every time. They are analysed once before the clock starts (sealed, as
`kit run` leaves them); the timed part is what a user's `kit map runs/* --out DIR` does. Target (issue 42): under
30 s on the 2-core development machine.

    .venv/bin/python benchmarks/map_bench.py [--runs 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden" / "run"
CLAIMS = [
    {"id": "P1", "source": "Fig. 4", "statement": "TensorFlow and PyTorch train equally fast", "kind": "no_difference",
     "margin": 0.10, "metric": "time_s", "phase": "train", "arms": ["tensorflow", "pytorch"], "device": "any"},
    {"id": "P2", "source": "Table 3", "statement": "PyTorch's GPU use is lower", "kind": "direction",
     "metric": "gpu_util_pct", "phase": "train", "arms": ["tensorflow", "pytorch"], "direction": "greater",
     "device": "gpu", "hardware": "GTX 1050"},
]
HOSTS = [  # (host provenance, TensorFlow's time factor)
    ({"machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
      "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 106, "isa": ["avx2", "avx512f", "avx512_vnni"]}}, 1.0),
    ({"machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
      "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 143, "isa": ["avx2", "avx512f", "amx_tile"]}}, 0.97),
    ({"machine": "x86_64", "cpu_model": "AMD EPYC 9654 96-Core Processor",
      "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "isa": ["avx2", "avx512f"]}}, 1.03),
    ({"machine": "aarch64", "cpu_model": "Neoverse-V1", "cpu": {"vendor": "ARM", "isa": []}}, 1.5),
    ({"machine": "x86_64", "cpu_model": "Intel(R) Core(TM) i5-8250U CPU @ 1.60GHz", "cpu_logical": 1,
      "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 142, "isa": ["avx2"]}}, 1.05),
]


def derive(dest: Path, i: int) -> Path:
    host, factor = HOSTS[i % len(HOSTS)]
    shutil.copytree(GOLDEN, dest)
    man = json.loads((dest / "manifest.json").read_text())
    man["spec"]["claims"] = CLAIMS
    man["host"].update(host)
    man["started"] = 1.0e9 + i
    (dest / "manifest.json").write_text(json.dumps(man))
    rng = np.random.default_rng(i)
    for f in (dest / "trials").glob("*.json"):
        rec = json.loads(f.read_text())
        if "train_time_s" in rec.get("results", {}):
            rec["results"]["train_time_s"] *= (factor if rec.get("framework") == "tensorflow" else 1.0) * float(
                np.exp(rng.normal(0, 0.01)))
            f.write_text(json.dumps(rec))
    return dest


def analyse(path: Path) -> None:
    from kit.analysis.analyze import analyze_run
    from kit.trust import StudyTrust

    analyze_run(path, trust=StudyTrust(allow_list=False))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--keep", type=Path, default=None, help="derive the runs here (kept) instead of a temporary dir")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from kit.replication.build import build_map
    from kit.replication.inputs import load_inputs
    from kit.replication.render import write_map

    base = args.keep or Path(tempfile.mkdtemp(prefix="kit-map-bench-"))
    runs = [p if (p := base / f"run{i:03d}").exists() else derive(p, i) for i in range(args.runs)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=2) as pool:
        list(pool.map(analyse, runs))
    prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = build_map(load_inputs(runs))
    write_map(result, base / "map")
    wall = time.perf_counter() - t0
    print(f"map of {result.runs} runs in {len(result.classes)} host classes: {wall:.2f} s wall "
          f"(analyses reused {result.reused}, recomputed {result.runs - result.reused}; preparation, not timed: "
          f"{prep:.1f} s); target < 30 s")
    for c in result.claims:
        print(f"  {c.id}: {c.answer}")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
