"""The daily commands, timed as a user meets them, against the time of importing pandas and matplotlib (issue 44).

Each command runs in a fresh process (import time included), ``--repeat`` times; its median and minimum wall time
are set against R, the median time of ``python -c "import pandas, matplotlib"`` measured in the same run (before
the commands and again after them), so that the figures of a loaded machine and of a quiet one compare. Printed
as a Markdown table with issue 44's target beside each ratio:

    --version <= 0.3 s; report with its analysis recomputed <= 3 R; report at 10^6 telemetry samples <= 4 R;
    compare of two LeNet runs <= 2 R; history over 1,000 runs <= 5 R on its first call, <= 1 R from its cache.

The rest (list, show, doctor, status, report with a stored analysis) are timed and shown without a target.

Everything runs on copies under a temporary folder, never on the runs given:

- ``--runs A B`` (default: the newest two LeNet runs under ./runs) are copied (cp -a); a warm-up `kit report` of
  each stores its sealed analysis (the seal is this user's kit's, over the kit's own sources: a run copied from
  elsewhere is re-analysed once) and fills the power-simulation and figure caches, as a user's earlier report would
  have (each kit's own, never the user's).
  "report (stored analysis)" then reads analysis.json; "report (recomputed)" removes it before each repeat.
- the 10^6-sample run is a copy of A whose samples/*.parquet are made denser: between two consecutive samples of
  a series (source, device, metric) ``k - 1`` more, at evenly spaced times and linearly interpolated values (a
  counter stays monotonic, a gauge within its neighbours), so that the run holds ``--samples`` rows in all. Its
  analysis.json is removed before each repeat (the recomputed case, as issue 44 timed it).
- the 1,000 runs of `kit history` are built by benchmarks/history_bench.py's ``generate`` (the golden run rescaled
  and analysed, ``--distinct`` per regime, the rest derived from them and re-sealed) by the kit under test.
  "first call" starts each repeat with an empty history cache; "cached" follows a call that filled it.

``--kit-root DIR`` (repeatable) times another checkout's kit with this interpreter's packages, e.g. the state
before a change (``git archive HEAD | tar -x -C /tmp/kit-before``): each kit gets its own snapshot of its sources
(an edit to a checkout while this runs would make every seal stale), its own runs, caches and key, and its own
columns in the table.

    .venv/bin/python benchmarks/commands_bench.py
    .venv/bin/python benchmarks/commands_bench.py --kit-root /tmp/kit-before --kit-root . --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ("kit", "reports", "experiments", "pyproject.toml", "tests/data/golden/run")
REFERENCE = "import pandas, matplotlib"
LENET = "florencio2019_lenet"


@dataclass(frozen=True)
class Target:
    """Issue 44's bound on a command: ``ratio`` times R, or ``seconds`` (absolute)."""

    ratio: float | None = None
    seconds: float | None = None

    def text(self) -> str:
        return f"<= {self.ratio:g} R" if self.ratio is not None else f"<= {self.seconds:g} s" if self.seconds else ""

    def met(self, median_s: float, reference_s: float) -> bool | None:
        if self.ratio is not None:
            return median_s <= self.ratio * reference_s
        if self.seconds is not None:
            return median_s <= self.seconds
        return None


@dataclass(frozen=True)
class Command:
    """One daily command: its name in the table, its arguments (run dirs as placeholders), what is done before
    each timed repeat (untimed), and its target."""

    name: str
    argv: tuple[str, ...]
    prepare: Callable[[Path], None] = lambda work: None
    target: Target = field(default_factory=Target)
    ok_codes: tuple[int, ...] = (0, 1, 3, 4)  # a verdict's exit code (1 regression, 3 inconclusive, 4 suspect)


@dataclass(frozen=True)
class Timing:
    times_s: tuple[float, ...]
    codes: tuple[int, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)


def _drop(path: Path) -> None:
    path.unlink(missing_ok=True)


def _empty(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def commands(samples: int = 1_000_000, history_runs: int = 1000) -> list[Command]:
    """The daily commands of issue 44, in the order they are timed ({A}, {B}, {BIG}, {HIST}: the copies)."""
    dense, hist = f"{samples:.0e}".replace("e+0", "e").replace("1e", "10^"), f"{history_runs:,}"
    return [
        Command("--version", ("--version",), target=Target(seconds=0.3), ok_codes=(0,)),
        Command("list", ("list",), ok_codes=(0,)),
        Command("show", ("show", LENET), ok_codes=(0,)),
        Command("doctor", ("doctor", "--no-check-downloads"), ok_codes=(0, 1)),
        Command("status", ("status", "{A}"), ok_codes=(0,)),
        Command("report (stored analysis)", ("report", "{A}", "--format", "html")),
        Command("report (recomputed)", ("report", "{A}", "--format", "html"),
                prepare=lambda w: _drop(w / "runs" / "a" / "analysis.json"), target=Target(ratio=3)),
        Command(f"report at {dense} samples", ("report", "{BIG}", "--format", "html"),
                prepare=lambda w: _drop(w / "runs" / "big" / "analysis.json"), target=Target(ratio=4)),
        Command("compare A B", ("compare", "{A}", "{B}"), target=Target(ratio=2)),
        Command(f"history {hist} runs, first call", ("history", "{HIST}"),
                prepare=lambda w: _empty(w / "history-cache"), target=Target(ratio=5)),
        Command(f"history {hist} runs, cached", ("history", "{HIST}"), target=Target(ratio=1)),
    ]


# --------------------------------------------------------------------------- the kit under test, its copies


@dataclass(frozen=True)
class Kit:
    """A kit under test: its snapshot and the folder holding its copies, caches and key."""

    label: str
    source: Path
    snapshot: Path
    work: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.snapshot), "KIT_CONFIG_DIR": str(self.work / "config"),
                "KIT_CACHE_DIR": str(self.work / "cache"), "KIT_POWER_CACHE": str(self.work / "power-cache"),
                "KIT_HISTORY_CACHE": str(self.work / "history-cache"), "KIT_FIGURE_CACHE": str(self.work / "figure-cache"),
                "KIT_NO_BROWSER": "1", "COLUMNS": "160"}

    def argv(self, cmd: Command) -> list[str]:
        runs = self.work / "runs"
        subst = {"{A}": str(runs / "a"), "{B}": str(runs / "b"), "{BIG}": str(runs / "big"),
                 "{HIST}": str(self.work / "history")}
        return [sys.executable, "-m", "kit", *(subst.get(a, a) for a in cmd.argv)]

    def run(self, args: list[str], timeout_s: float = 1800) -> tuple[float, int, str]:
        t0 = time.perf_counter()
        done = subprocess.run(args, cwd=self.work, env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=timeout_s)
        return time.perf_counter() - t0, done.returncode, done.stderr


def snapshot(source: Path, dest: Path) -> Path:
    """The kit's sources as they are now (its seals cover them), without caches."""
    for rel in SNAPSHOT:
        src = source / rel
        if not src.exists():
            src = ROOT / rel  # an older checkout without the golden run: this one's (data, not code)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), symlinks=True)
        else:
            shutil.copy2(src, target)
    return dest


def newest_lenet_runs(runs_dir: Path, n: int = 2) -> list[Path]:
    found = sorted((p for p in runs_dir.glob(f"*-{LENET}*") if (p / "manifest.json").is_file()
                    and (p / "samples").is_dir()), key=lambda p: p.name)
    if len(found) < n:
        raise SystemExit(f"need {n} LeNet runs under {runs_dir} (kit run {LENET} --profile quick), or give --runs A B")
    return found[-n:]


def sample_count(run: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in sorted((run / "samples").glob("*.parquet")))


def densify(run: Path, total: int) -> int:
    """Make the run's telemetry hold about ``total`` samples (see the module docstring); the rows it now holds."""
    import math

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    have = sample_count(run)
    k = max(1, math.ceil(total / max(have, 1)))
    if k == 1:
        return have
    for path in sorted((run / "samples").glob("*.parquet")):
        table = pq.read_table(path)
        df = table.to_pandas()
        if df.empty:
            continue
        parts = []
        for _, g in df.groupby(["source", "device", "metric"], sort=False, dropna=False):
            g = g.sort_values("t", kind="stable")
            t, v = g["t"].to_numpy(float), g["value"].to_numpy(float)
            dt = np.diff(t, append=t[-1] + (t[-1] - t[-2] if len(t) > 1 else 1.0))
            dv = np.diff(v, append=v[-1])
            frac = np.arange(k) / k
            rep = g.loc[g.index.repeat(k)].reset_index(drop=True)
            rep["t"] = (t[:, None] + dt[:, None] * frac).ravel()
            rep["value"] = (v[:, None] + dv[:, None] * frac).ravel()
            parts.append(rep)
        dense = pd.concat(parts, ignore_index=True).sort_values("t", kind="stable").reset_index(drop=True)
        pq.write_table(pa.Table.from_pandas(dense[list(df.columns)], schema=table.schema, preserve_index=False), path)
    return sample_count(run)


def prepare_kit(kit: Kit, runs: list[Path], samples: int, history_runs: int, distinct: int) -> dict[str, str]:
    """The kit's copies of the runs, the dense run, its 1,000 history runs and its warm-up reports."""
    facts: dict[str, str] = {}
    runs_dir = kit.work / "runs"
    runs_dir.mkdir(parents=True)
    for name, src in zip(("a", "b"), runs, strict=True):
        subprocess.run(["cp", "-a", str(src), str(runs_dir / name)], check=True)
    shutil.copytree(runs_dir / "a", runs_dir / "big", symlinks=True)
    before = sample_count(runs_dir / "a")
    facts["samples"] = f"{before:,} in A; {densify(runs_dir / 'big', samples):,} in the dense copy"
    for name in ("a", "b"):  # seal each analysis by this kit and fill the power cache, as an earlier report did
        (runs_dir / name / "analysis.json").unlink(missing_ok=True)
        wall, rc, err = kit.run([sys.executable, "-m", "kit", "report", str(runs_dir / name), "--format", "html"])
        if rc not in (0, 1, 3, 4):
            raise SystemExit(f"{kit.label}: warm-up report of {name} failed ({rc}):\n{err[-2000:]}")
        facts[f"warm-up report {name}"] = f"{wall:.1f} s"
    t0 = time.perf_counter()
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); from history_bench import generate;"
            "runs = generate(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[2]) / 'sources');"
            "Path(sys.argv[2], 'history').symlink_to(runs, target_is_directory=True)")
    subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks"), str(kit.work), str(history_runs),
                    str(distinct)], cwd=kit.work, env=kit.env(), check=True)
    facts["history runs"] = f"{history_runs:,} built in {time.perf_counter() - t0:.0f} s"
    return facts


# --------------------------------------------------------------------------- timing


def time_reference(repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", REFERENCE], check=True)
        out.append(time.perf_counter() - t0)
    return out


def time_command(kit: Kit, cmd: Command, repeat: int) -> Timing:
    times, codes = [], []
    for _ in range(repeat):
        cmd.prepare(kit.work)
        wall, rc, err = kit.run(kit.argv(cmd))
        if rc not in cmd.ok_codes:
            print(f"warning: {kit.label}: kit {' '.join(cmd.argv)} exited {rc}: {err.strip()[-400:]}", file=sys.stderr)
        times.append(wall)
        codes.append(rc)
    return Timing(tuple(times), tuple(codes))


def table(kits: list[Kit], results: dict[str, dict[str, Timing]], reference_s: float, chosen: list[Command]) -> str:
    head = ["command"]
    for k in kits:
        head += [f"{k.label} median s", f"{k.label} min s", f"{k.label} x R"]
    head += ["target", "met (" + kits[-1].label + ")"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cmd in chosen:
        row = [cmd.name]
        for k in kits:
            t = results[k.label].get(cmd.name)
            if t is None:
                row += ["-", "-", "-"]
                continue
            bad = sorted({c for c in t.codes if c not in cmd.ok_codes})
            row += [f"{t.median_s:.2f}" + (f" (exit {bad})" if bad else ""), f"{t.min_s:.2f}",
                    f"{t.median_s / reference_s:.2f}"]
        last = results[kits[-1].label].get(cmd.name)
        met = cmd.target.met(last.median_s, reference_s) if last else None
        row += [cmd.target.text() or "-", "-" if met is None else ("yes" if met else "NO")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kit-root", type=Path, action="append", default=None,
                    help="a checkout whose kit is timed (repeatable: one set of columns each; default this one)")
    ap.add_argument("--runs", type=Path, nargs=2, default=None, metavar=("A", "B"),
                    help="two LeNet runs to copy (default: the newest two under ./runs)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", type=int, default=1_000_000, help="telemetry samples of the dense copy")
    ap.add_argument("--history-runs", type=int, default=1000)
    ap.add_argument("--distinct", type=int, default=2, help="analysed source runs per regime of the history")
    ap.add_argument("--only", nargs="*", default=None, help="time only the commands whose name starts so")
    ap.add_argument("--keep", type=Path, default=None, help="work here (kept) instead of a temporary folder")
    args = ap.parse_args()
    roots = [r.resolve() for r in (args.kit_root or [ROOT])]
    runs = [r.resolve() for r in args.runs] if args.runs else newest_lenet_runs(Path("runs").resolve())
    base = args.keep or Path(tempfile.mkdtemp(prefix="kit-commands-bench-"))
    try:
        kits = []
        facts: dict[str, dict[str, str]] = {}
        for i, root in enumerate(roots):
            label = root.name if len({r.name for r in roots}) == len(roots) else f"kit{i}"
            work = base / f"{i}-{label}"
            kit = Kit(label, root, snapshot(root, work / "src"), work)
            facts[label] = prepare_kit(kit, runs, args.samples, args.history_runs, args.distinct)
            kits.append(kit)
        chosen = [c for c in commands(args.samples, args.history_runs) if not args.only or any(c.name.startswith(o) for o in args.only)]
        reference = time_reference(args.repeat)
        results: dict[str, dict[str, Timing]] = {k.label: {} for k in kits}
        for cmd in chosen:  # the kits in turn per command: before and after meet the same load
            for kit in kits:
                results[kit.label][cmd.name] = time_command(kit, cmd, args.repeat)
        reference += time_reference(args.repeat)
        r = statistics.median(reference)
        print(f"# kit daily commands, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
              f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n")
        print(f"R = `python -c \"{REFERENCE}\"`: median {r:.2f} s, min {min(reference):.2f} s "
              f"({len(reference)} runs, before and after the commands); {args.repeat} repeats per command.")
        print(f"runs: A = {runs[0]}, B = {runs[1]}")
        for label, f in facts.items():
            print(f"{label} ({next(k.source for k in kits if k.label == label)}): "
                  + "; ".join(f"{k}: {v}" for k, v in f.items()))
        print()
        print(table(kits, results, r, chosen))
        print("\nraw seconds: " + json.dumps({k: {c: [round(x, 3) for x in t.times_s] for c, t in v.items()}
                                              for k, v in results.items()}))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
