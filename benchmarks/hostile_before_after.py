"""Issue 22's attacks against a kit checkout, for a before/after record (prints one line per attack).

    git worktree add /tmp/kit-old e376af3
    .venv/bin/python benchmarks/hostile_before_after.py --kit /tmp/kit-old   # before
    .venv/bin/python benchmarks/hostile_before_after.py                      # this checkout

Each attack is crafted with this checkout's test helpers (tests/_crafted.py) on copies of the golden run
and performed by running `python -m kit ...` of the checkout under test in a fresh process, with a time
limit (a hang is reported as such) and a private config directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def kit(checkout: Path, env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int | str, str, float]:
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "kit", *args], cwd=checkout, env=env, capture_output=True,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return "hung", "", time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kit", type=Path, default=ROOT, help="checkout whose kit is attacked")
    args = ap.parse_args()
    from _crafted import golden_copy, marker_code, plant_study

    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(args.kit), "KIT_CONFIG_DIR": str(t / "config"),
               "KIT_HISTORY_CACHE": str(t / "hcache")}
        print(f"kit under attack: {args.kit} ({subprocess.run(['git', '-C', str(args.kit), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})")

        run = golden_copy(t / "runs" / "planted")
        marker = t / "marker"
        plant_study(run, marker_code(marker))
        for cmd in (["report", str(run)], ["compare", str(golden_copy(t / "base")), str(run)],
                    ["history", str(t / "runs"), "--no-cache"], ["pack", str(run), "--out", str(t / "b1")]):
            marker.unlink(missing_ok=True)
            Path(f"{marker}.report").unlink(missing_ok=True)
            (run / "analysis.json").unlink(missing_ok=True)
            code, out, _ = kit(args.kit, env, *cmd)
            ran = marker.exists() or Path(f"{marker}.report").exists()
            print(f"planted study/analysis.py, kit {cmd[0]}: exit {code}; the run's code ran: {'YES' if ran else 'no'}"
                  f"; notice printed: {'yes' if 'study code not run' in out else 'no'}")

        a, b = golden_copy(t / "fa"), golden_copy(t / "fb")
        for r in (a, b):
            kit(args.kit, env, "report", str(r))
        forged = json.loads((b / "analysis.json").read_text())
        for v in forged["values"]:
            if v["metric"] == "time_s" and v["value"] is not None:
                v["value"] *= 3.0
        (b / "analysis.json").write_text(json.dumps(forged))
        code, out, _ = kit(args.kit, env, "compare", str(a), str(b), "--metric", "time_s")
        print(f"forged analysis.json (identical raw data, times x3), kit compare: exit {code}; "
              f"'regression' rows: {out.count('regression')}")

        fifo = golden_copy(t / "fifo")
        (fifo / "manifest.json").unlink()
        os.mkfifo(fifo / "manifest.json")
        code, out, secs = kit(args.kit, env, "report", str(fifo), timeout=20)
        print(f"manifest.json is a FIFO, kit report: {code} after {secs:.1f} s; traceback: "
              f"{'yes' if 'Traceback' in out else 'no'}")

        mark = golden_copy(t / "markup")
        man = json.loads((mark / "manifest.json").read_text())
        man["spec"]["design"]["alpha"] = "[/x]"
        (mark / "manifest.json").write_text(json.dumps(man))
        code, out, _ = kit(args.kit, env, "report", str(mark))
        print(f"'[/x]' in a manifest value, kit report: exit {code}; traceback: {'yes' if 'Traceback' in out else 'no'}"
              f"; internal error: {'yes' if 'internal error' in out else 'no'}")

        hist = t / "hist"
        for i in range(3):
            r = golden_copy(hist / f"r{i}")
            m = json.loads((r / "manifest.json").read_text())
            m.update(label=f"v{i}", started=1000.0 + i)
            (r / "manifest.json").write_text(json.dumps(m))
        for p in (hist / "r2" / "trials").glob("*-pytorch.json"):
            rec = json.loads(p.read_text())
            rec["results"]["train_time_s"] *= 15
            rec["wall_s"] *= 15
            p.write_text(json.dumps(rec))
        code, out, _ = kit(args.kit, env, "history", str(hist), "--arm", "pytorch", "--no-cache")
        print(f"15x slower training in the newest of 3 runs, kit history: exit {code}; step found: "
              f"{'yes' if 'regression between' in out else 'no'}")

        code, out, _ = kit(args.kit, env, "compare", str(a), str(a), "--threshold", "nan")
        print(f"kit compare --threshold nan: exit {code}; {'internal error' if 'internal error' in out else 'clean'}")

        wrong = golden_copy(t / "parquet")
        import pandas as pd

        pd.DataFrame({"a": [1.0]}).to_parquet(wrong / "samples" / "r000-c00-pytorch.parquet")
        code, out, _ = kit(args.kit, env, "report", str(wrong))
        print(f"telemetry Parquet with other columns, kit report: exit {code}; "
              f"{'names the file' if 'r000-c00-pytorch.parquet' in out else 'silent'}")


if __name__ == "__main__":
    main()
