"""`kit history`: a planted step between two versions is found at the right place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.history import detect_steps, history
from kit.runner import RunOptions, start_run
from kit.spec import load_spec

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _runs(medians: list[float], n: int = 8, noise: float = 0.01) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i, m in enumerate(medians):
        vals = list(m * (1 + noise * rng.standard_normal(n)))
        out.append({"label": f"v{i}", "values": vals, "median": float(np.median(vals))})
    return out


def test_step_detection_on_known_series() -> None:
    steps = detect_steps(_runs([1.0, 1.0, 1.0, 1.2, 1.2, 1.2]))
    assert [(s["index"], s["from"], s["to"], s["verdict"]) for s in steps] == [(3, "v2", "v3", "regression")]
    assert steps[0]["ratio"] == pytest.approx(1.2, rel=0.02)
    assert detect_steps(_runs([1.0] * 6)) == []
    assert detect_steps(_runs([1.0, 1.0, 1.01, 1.01])) == []  # below the practical threshold
    two = detect_steps(_runs([1.0, 1.0, 0.8, 0.8, 1.1, 1.1]))
    assert [(s["index"], s["verdict"]) for s in two] == [(2, "improvement"), (4, "regression")]


@pytest.mark.slow
def test_history_over_real_runs(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    for i, slowdown in enumerate((1.0, 1.0, 1.25, 1.25)):
        spec = tmp_path / f"v{i}.toml"
        spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 6").replace(
            "jitter_frac = 0.01", f"jitter_frac = 0.01\nslowdown = {slowdown}"))
        start_run(load_spec(spec), RunOptions(runs_root=runs_dir, label=f"2.{i}"))
    res = history(runs_dir, "time_s", "train", "pytorch")
    assert [r["label"] for r in res["runs"]] == ["2.0", "2.1", "2.2", "2.3"]
    assert [(s["from"], s["to"], s["verdict"]) for s in res["steps"]] == [("2.1", "2.2", "regression")]
    html = tmp_path / "h.html"
    proc = subprocess.run([sys.executable, "-m", "kit", "history", str(runs_dir), "--metric", "time_s", "--arm", "pytorch",
                           "--html", str(html)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "regression between '2.1' and '2.2'" in proc.stdout and "<svg" in html.read_text()
