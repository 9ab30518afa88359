"""Benchmark of `kit history` and `kit history --publish` over many runs (issue 14 item 11, issue 41 item 5).

Users keep one run per nightly build, so `kit history` must answer over 10,000 runs in under 10 s with its cache,
and `--publish` of 10,000 runs in under 60 s (2-core host). The runs are made from the stored golden run
(tests/data/golden/run, a real run of the calibrated workload: 11 trials per arm, telemetry samples included):

- ``--distinct M`` (50) source runs per regime are real: the golden run's phase times rescaled (a 15 % slowdown
  in the "after" regime, 1 % noise per trial) and analysed as `kit run` does when it finishes (1-3 s each);
- every run of a series is derived from the source of its regime (``i % M``), cheaply but as `kit run` would
  have left it: trials/, samples/ and events.jsonl hard-linked (immutable raw files), a fresh manifest.json
  (its own label and start/end time), and the source's analysis.json with only ``run.started``/``run.ended``
  changed and its seal recomputed with the kit's own functions (kit.freshness.seal over inputs_digest of the
  new run directory), so `kit history` reads each one as a fresh, sealed analysis and never re-analyses it.
  ``--check-derived K`` re-analyses K derived runs from scratch and checks the analysis is the same (seal aside).

The slowdown sits at 60 % of the series. Each figure is the wall time of one command in a fresh process (import
time included), the way a user meets it: `kit history` without its cache (``--no-cache``), the first call that
fills it, a call served from it; `kit history --publish DIR` first publish, a republish with nothing changed and
one with a run added. ``--baseline DIR`` times the kit of another checkout (``git worktree add DIR <commit>``) on
the same runs: their analyses are re-sealed for that kit's build first (the analysis code must be the same, so
the files are what it would have written), and it is timed without and with its cache (no --publish there).

The kit is run from a snapshot of this checkout taken at start (kit/, reports/, experiments/, benchmarks/, the
golden run) under a temporary folder: an analysis's seal covers the kit's sources, so an edit to the checkout
while the benchmark runs would otherwise make every analysis stale.

    .venv/bin/python benchmarks/history_bench.py                       # 25, 100 and 1000 runs
    .venv/bin/python benchmarks/history_bench.py --runs 1000 10000 --baseline /tmp/base
    .venv/bin/python benchmarks/history_bench.py --keep /tmp/hist      # keep (and reuse) the generated runs
    .venv/bin/python benchmarks/history_bench.py --sources /tmp/src    # keep only the analysed sources

Results of 2026-11-29 (1,000 and 10,000 runs, before/after): docs/evidence/history-bench-2026-11-29.txt.
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
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden" / "run"
STEP_AT = 0.6
SLOWDOWN = 1.15
SNAPSHOT = ("kit", "reports", "experiments", "benchmarks", "pyproject.toml", "tests/data/golden/run")
LINKED = ("trials", "samples")  # immutable raw files: hard-linked into derived runs
DAY_S = 86_400.0
T0 = 1_790_000_000.0


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


def make_source(args: tuple[Path, str, int]) -> None:
    """A real source run: the golden run, rescaled (regime ``before`` or ``after``, noise seeded by ``k``), analysed."""
    from kit.analysis.analyze import analyze_run

    src_dir, regime, k = args
    dest = src_dir / f"{regime}-{k:03d}"
    if (dest / "analysis.json").is_file():
        return
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(GOLDEN, dest)
    rng = np.random.default_rng(k + (100_000 if regime == "after" else 0))
    for t in sorted((dest / "trials").glob("*.json")):
        _scale_trial(t, SLOWDOWN if regime == "after" else 1.0, rng)
    analyze_run(dest)


def _source_of(src_dir: Path, i: int, n: int, m: int) -> Path:
    return src_dir / f"{'after' if i >= int(STEP_AT * n) else 'before'}-{i % m:03d}"


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _reseal(dest: Path, content: dict[str, Any], raw: str) -> bytes:
    """analysis.json's bytes for ``content`` sealed by the imported kit for the run ``dest`` as it is now, as
    kit.analysis.analyze.analyze_run writes them (kit.store.atomic_write_json's format)."""
    from kit import freshness
    from kit.freshness import SEAL_KEY, seal
    from kit.store import RunDir
    from kit.studies import resolve_hooks

    hooks = resolve_hooks(dest, RunDir.open(dest).manifest(), None).state()
    body = {k: v for k, v in content.items() if k != SEAL_KEY}
    if hasattr(freshness, "sealed_text"):  # a version-3 seal (per-file digests, over the bytes), as analyze_run
        text, sealed_v3 = freshness.sealed_text(body, freshness.scan_inputs(dest), hooks)
        if sealed_v3 is None:
            raise SystemExit("no seal key: run `kit doctor`")
        return text
    sealed = seal(body, freshness.inputs_digest(dest, raw), hooks)  # an older kit (--baseline)
    if sealed is None:
        raise SystemExit("no seal key: run `kit doctor`")
    body[SEAL_KEY] = sealed
    return (json.dumps(body, indent=1, sort_keys=False, default=str) + "\n").encode()


def derive_run(args: tuple[Path, Path, int, int], link: bool = True) -> None:
    """Run ``i`` of ``n`` derived from its regime's source (see the module docstring); ``link`` False copies the
    raw files (a run added to a timed series: a new hard link would change the ctime, so the cache fingerprint,
    of every run that shares the source's files)."""
    src, runs_dir, i, _ = args
    dest = runs_dir / f"2026-01-01T00-00-{i:05d}-golden"
    if (dest / "analysis.json").is_file():
        return
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for sub in LINKED:
        (dest / sub).mkdir()
        for f in sorted((src / sub).iterdir()):
            (os.link if link else shutil.copy2)(f, dest / sub / f.name)
    if (src / "events.jsonl").is_file():
        (os.link if link else shutil.copy2)(src / "events.jsonl", dest / "events.jsonl")
    man = json.loads((src / "manifest.json").read_text())
    length = float(man["ended"]) - float(man["started"])
    man["label"] = f"nightly-{i:05d}"
    man["started"] = T0 + DAY_S * i
    man["ended"] = man["started"] + length
    _write(dest / "manifest.json", json.dumps(man, indent=1).encode())
    content = _source_analysis(src)
    content = {**content, "run": {**content["run"], "started": man["started"], "ended": man["ended"]}}
    _write(dest / "analysis.json", _reseal(dest, content, content["raw_digest"]))


_SOURCES: dict[Path, dict[str, Any]] = {}  # per worker process: each source's analysis parsed once


def _source_analysis(src: Path) -> dict[str, Any]:
    if src not in _SOURCES:
        _SOURCES[src] = json.loads((src / "analysis.json").read_text())
    return _SOURCES[src]


def reseal_run(run: Path) -> None:
    """Re-seal a run's analysis.json for the imported kit (a baseline checkout): same content, its seal."""
    content = json.loads((run / "analysis.json").read_text())
    _write(run / "analysis.json", _reseal(run, content, content["raw_digest"]))


def _pool(fn: Any, jobs: list[Any]) -> None:
    with ProcessPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        list(pool.map(fn, jobs, chunksize=max(1, min(64, len(jobs) // 8))))


def generate(base: Path, n: int, m: int, src_dir: Path) -> Path:
    src_dir.mkdir(parents=True, exist_ok=True)
    _pool(make_source, [(src_dir, r, k) for r in ("before", "after") for k in range(min(m, n))])
    runs = base / f"n{n}"
    runs.mkdir(parents=True, exist_ok=True)
    _pool(derive_run, [(_source_of(src_dir, i, n, m), runs, i, n) for i in range(n)])
    return runs


def check_derived(runs: Path, k: int) -> str:
    """Re-analyse ``k`` derived runs from scratch (a copy, so hard links are not written through): the analysis
    must equal the derived one but for its seal, and the derived one's seal must hold."""
    from kit.analysis.analyze import analyze_run, current_analysis
    from kit.analysis_record import SEAL_KEY

    picked = sorted(runs.iterdir())[:: max(1, len(list(runs.iterdir())) // max(k, 1))][:k]
    for run in picked:
        _, recomputed = current_analysis(run, need_study=False)
        if recomputed:
            return f"NO: {run.name} was re-analysed (its seal did not hold)"
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / run.name
            shutil.copytree(run, copy)
            (copy / "analysis.json").unlink()
            fresh = analyze_run(copy).to_json()
        derived = json.loads((run / "analysis.json").read_text())
        fresh.pop(SEAL_KEY, None)
        derived.pop(SEAL_KEY, None)
        if json.dumps(fresh, sort_keys=True, default=str) != json.dumps(derived, sort_keys=True, default=str):
            return f"NO: {run.name} re-analysed differs from its derived analysis"
    return f"yes ({len(picked)} derived runs re-analysed: same analysis, seal holds)"


def _kit(root: Path, args: list[str], env: dict[str, str], timeout: float | None) -> tuple[float, str]:
    """Wall time of one `kit …` in a fresh process, run with the checkout ``root``'s kit."""
    cmd = [sys.executable, "-m", "kit", *args]
    env = {**os.environ, **env, "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return float("inf"), f"(stopped after {timeout:.0f} s)"
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return wall, proc.stdout + proc.stderr


def time_history(root: Path, runs: Path, cache: Path | None, timeout: float | None = None) -> tuple[float, str]:
    args = ["history", str(runs), "--metric", "time_s", "--phase", "train", "--arm", "pytorch"]
    wall, out = _kit(root, args + ([] if cache else ["--no-cache"]),
                     {"KIT_HISTORY_CACHE": str(cache or runs.parent / "unused-cache")}, timeout)
    steps = [ln.strip() for ln in out.splitlines() if "between" in ln or ln.startswith("no step")]
    return wall, "; ".join(steps) or out[-300:]


def time_publish(root: Path, runs: Path, site: Path, cache: Path) -> tuple[float, str]:
    wall, out = _kit(root, ["history", str(runs), "--publish", str(site)], {"KIT_HISTORY_CACHE": str(cache)}, None)
    return wall, " ".join(out.split())[-200:]


def snapshot(dest: Path) -> Path:
    """A copy of the files the kit runs from (see the module docstring)."""
    for rel in SNAPSHOT:
        src = ROOT / rel
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def bench(root: Path, base: Path, n: int, a: argparse.Namespace) -> list[str]:
    t0 = time.perf_counter()
    runs = generate(base, n, a.distinct, a.sources or base / "sources")
    gen = time.perf_counter() - t0
    lines = [f"{n} runs (generated in {gen:.0f} s: {min(a.distinct, n)} analysed sources per regime, the rest "
             "derived)"]
    if a.check_derived:
        lines.append(f"  derived runs read as real ones: {check_derived(runs, a.check_derived)}")
    expected = f"nightly-{int(STEP_AT * n) - 1:05d}' and 'nightly-{int(STEP_AT * n):05d}"
    cache = base / f"cache-{n}"
    site = base / f"site-{n}"
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    rows: list[tuple[str, float]] = []
    cold, steps = time_history(root, runs, None)
    rows.append(("kit history --no-cache", cold))
    rows.append(("kit history, first call (fills the cache)", time_history(root, runs, cache)[0]))
    warm, steps_warm = time_history(root, runs, cache)
    rows.append(("kit history, cached", warm))
    rows.append(("kit history --publish, first", time_publish(root, runs, site, cache)[0]))
    rows.append(("kit history --publish, nothing changed", time_publish(root, runs, site, cache)[0]))
    derive_run((_source_of(a.sources or base / "sources", n, n + 1, a.distinct), runs, n, n + 1), link=False)  # one more run
    time.sleep(2.5)  # older than kit.history_cache.RACY_S, as a nightly run is when the site is rebuilt
    added, note = time_publish(root, runs, site, cache)
    rows.append(("kit history --publish, one run added", added))
    shutil.rmtree(runs / f"2026-01-01T00-00-{n:05d}-golden")
    found = "yes" if expected in steps and expected in steps_warm else "NO"
    lines += [f"  {label:<45} {sec:8.2f} s" for label, sec in rows]
    lines.append(f"  planted step found: {found}  ({steps})")
    lines.append(f"  republish with one run added: {note}")
    if a.baseline:
        old = a.baseline.resolve()
        t1 = time.perf_counter()
        _reseal_all(old, runs)
        lines.append(f"  baseline {a.baseline} (analyses re-sealed for its build in {time.perf_counter() - t1:.0f} s):")
        bcache = base / f"cache-{n}-baseline"
        shutil.rmtree(bcache, ignore_errors=True)
        for label, c in (("kit history --no-cache", None), ("kit history, first call (fills the cache)", bcache),
                         ("kit history, cached", bcache)):
            if label.endswith("--no-cache") and n > a.baseline_no_cache_max:
                continue  # the first call reads every run the same way
            sec, out = time_history(old, runs, c, timeout=a.baseline_timeout)
            ok = "yes" if expected in out else "NO"
            shown = f"> {a.baseline_timeout:.0f} s (stopped)" if math.isinf(sec) else f"{sec:8.2f} s"
            lines.append(f"    {label:<43} {shown}  step found: {ok}")
        shutil.rmtree(bcache, ignore_errors=True)
        if a.keep:
            _reseal_all(root, runs)  # back to this kit's seals (--keep reuses them)
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    return lines


def _reseal_all(root: Path, runs: Path) -> None:
    """Re-seal every run's analysis for the kit of ``root`` (in a process that imports that kit)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--reseal", str(runs)], check=True, cwd=root,
                   env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, nargs="+", default=[25, 100, 1000])
    ap.add_argument("--distinct", type=int, default=50, help="analysed source runs per regime (the rest derived)")
    ap.add_argument("--check-derived", type=int, default=3, help="re-analyse this many derived runs to check them")
    ap.add_argument("--keep", type=Path, help="generate the runs here and keep them (reused next time)")
    ap.add_argument("--sources", type=Path, help="keep the analysed source runs here (reused next time; their "
                                                 "analyses are only copied, so a kit edit does not spoil them)")
    ap.add_argument("--baseline", type=Path, help="also time the kit of this checkout (e.g. a `git worktree` of an "
                                                  "older commit)")
    ap.add_argument("--baseline-timeout", type=float, default=900.0, help="seconds before a baseline call is stopped")
    ap.add_argument("--baseline-no-cache-max", type=int, default=1000,
                    help="time the baseline's --no-cache only up to this many runs")
    ap.add_argument("--reseal", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.reseal:  # worker mode: PYTHONPATH names the kit whose seals are written
        _pool(reseal_run, sorted(p.parent for p in a.reseal.glob("*/analysis.json")))
        return
    base = a.keep or Path(tempfile.mkdtemp(prefix="kit-history-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    snap = Path(tempfile.mkdtemp(prefix="kit-history-bench-src-"))
    try:
        root = snapshot(snap)
        print(f"# {' '.join([Path(sys.executable).name, *sys.argv])}")
        print(f"# kit snapshot of {ROOT} in {root}; runs under {base}; slowdown x{SLOWDOWN} planted at "
              f"{STEP_AT:.0%} of the series; one fresh process per figure")
        sys.stdout.flush()
        env_root = str(root)
        os.environ["PYTHONPATH"] = env_root
        sys.path.insert(0, env_root)  # this process generates with the snapshot's kit too
        for name in [m for m in sys.modules if m == "kit" or m.startswith("kit.")]:
            del sys.modules[name]
        for n in a.runs:
            for line in bench(root, base, n, a):
                print(line, flush=True)
            if not a.keep:
                shutil.rmtree(base / f"n{n}", ignore_errors=True)
    finally:
        shutil.rmtree(snap, ignore_errors=True)
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
