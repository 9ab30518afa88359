"""`kit report` with the figure cache (kit.report.figure_cache), end to end on the golden LeNet run: the report
that takes every figure from the cache is byte for byte the one that drew them, imports no matplotlib, and
leaves nothing of the cache in the run directory; ``--redraw`` draws them all again, to the same bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN_RUN = REPO / "tests" / "data" / "golden_lenet" / "run"

PROBE = """\
import json, sys
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["kit", *argv]
import kit.cli
code = 0
try:
    kit.cli.main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
with open(out, "w", encoding="utf-8") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _report(run: Path, cache: Path, *extra: str) -> set[str]:
    """`kit report RUN --format html,latex` in a fresh interpreter: the modules it had loaded."""
    out = run.parent / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "KIT_FIGURE_CACHE": str(cache), "KIT_NO_BROWSER": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), "report", str(run), "--format", "html,latex",
                           *extra], env=env, capture_output=True, text=True, timeout=300, cwd=run.parent)
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got["code"] == 0, done.stderr[-3000:]
    return set(got["modules"])


def _outputs(run: Path) -> dict[str, bytes]:
    report = run / "report"
    return {str(p.relative_to(report)): p.read_bytes() for p in sorted(report.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_cached_report_is_the_drawn_one_without_matplotlib(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run)
    cache = tmp_path / "figures"
    assert "matplotlib" in _report(run, cache)  # drawn, stored
    drawn = _outputs(run)
    assert any(k.endswith(".pdf") for k in drawn)
    entries = sorted(p.name for p in cache.iterdir())
    assert entries and all(n.endswith(".kfig") for n in entries)
    assert not [p for p in run.rglob("*") if p.suffix == ".kfig"]  # never in the run directory

    assert "matplotlib" not in _report(run, cache)  # every figure a hit (the analysis stored too)
    assert _outputs(run) == drawn
    assert sorted(p.name for p in cache.iterdir()) == entries

    assert "matplotlib" in _report(run, cache, "--redraw")
    assert _outputs(run) == drawn
