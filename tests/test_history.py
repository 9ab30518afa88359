"""`kit history`: a planted step between two versions is found at the right place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kit.history import HistoryPoint, detect_steps, history
from kit.run import RunOptions, start_run
from kit.spec import load_spec

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _runs(medians: list[float], n: int = 8, noise: float = 0.01) -> list[HistoryPoint]:
    rng = np.random.default_rng(0)
    out = []
    for i, m in enumerate(medians):
        vals = list(m * (1 + noise * rng.standard_normal(n)))
        out.append(HistoryPoint.of("", 0.0, f"v{i}", "", None, vals))
    return out


def test_step_detection_on_known_series() -> None:
    steps = [s.to_json() for s in detect_steps(_runs([1.0, 1.0, 1.0, 1.2, 1.2, 1.2]))]
    assert [(s["index"], s["from"], s["to"], s["verdict"]) for s in steps] == [(3, "v2", "v3", "regression")]
    assert steps[0]["ratio"] == pytest.approx(1.2, rel=0.02)
    assert detect_steps(_runs([1.0] * 6)) == []
    assert detect_steps(_runs([1.0, 1.0, 1.01, 1.01])) == []  # below the practical threshold
    two = [s.to_json() for s in detect_steps(_runs([1.0, 1.0, 0.8, 0.8, 1.1, 1.1]))]
    assert [(s["index"], s["verdict"]) for s in two] == [(2, "improvement"), (4, "regression")]


@pytest.mark.slow
def test_history_over_real_runs(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    for i, slowdown in enumerate((1.0, 1.0, 1.25, 1.25)):
        spec = tmp_path / f"v{i}.toml"
        # no warm-up block: history reads the measured trials only, and a busy-wait phase has nothing to warm
        spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 6").replace(
            "warmup_repetitions = 1", "warmup_repetitions = 0").replace(
            "jitter_frac = 0.01", f"jitter_frac = 0.01\nslowdown = {slowdown}"))
        start_run(load_spec(spec), RunOptions(runs_root=runs_dir, label=f"2.{i}"))
    res = history(runs_dir, "time_s", "train", "pytorch").to_json()
    assert [r["label"] for r in res["runs"]] == ["2.0", "2.1", "2.2", "2.3"]
    assert [(s["from"], s["to"], s["verdict"]) for s in res["steps"]] == [("2.1", "2.2", "regression")]
    html = tmp_path / "h.html"
    proc = subprocess.run([sys.executable, "-m", "kit", "history", str(runs_dir), "--metric", "time_s", "--arm", "pytorch",
                           "--html", str(html)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "regression between '2.1' and '2.2'" in proc.stdout
    assert '<img class=plot src="data:image/svg+xml;base64,' in html.read_text()  # the plot, as an image the kit encodes


def test_a_regression_in_the_newest_run_alone_is_found() -> None:
    """One-run segments are allowed: tonight's nightly regressed, and it is the last run of the series."""
    steps = [s.to_json() for s in detect_steps(_runs([1.0] * 30 + [1.2], n=10))]
    assert [(s["index"], s["verdict"]) for s in steps] == [(30, "regression")]


def test_one_planted_step_among_a_thousand_runs() -> None:
    """Run-level segmentation at the size users keep (one run per nightly build); figures: benchmarks/history_bench.py."""
    medians = [1.0] * 600 + [1.15] * 400
    steps = [s.to_json() for s in detect_steps(_runs(medians, n=10))]
    assert [(s["index"], s["from"], s["to"], s["verdict"]) for s in steps] == [(600, "v599", "v600", "regression")]
    assert steps[0]["runs_before"] == steps[0]["runs_after"] == 10  # validated on the neighbouring runs' trials
    assert detect_steps(_runs([1.0] * 1000, n=10)) == []


def _golden_runs(tmp_path: Path, n: int) -> Path:
    import json
    import shutil

    golden = Path(__file__).parent / "data" / "golden" / "run"
    runs = tmp_path / "runs"
    for i in range(n):
        dest = runs / f"r{i}"
        shutil.copytree(golden, dest)
        man = json.loads((dest / "manifest.json").read_text())
        man.update(label=f"2.{i}", started=1_790_000_000.0 + i)
        (dest / "manifest.json").write_text(json.dumps(man))
    return runs


@pytest.mark.slow
def test_history_cache_serves_unchanged_runs_and_rereads_an_edited_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import kit.history as hist
    from kit import history_cache

    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(history_cache, "RACY_S", 0.0)
    runs = _golden_runs(tmp_path, 3)
    first = history(runs, "time_s", "train", "pytorch").to_json()
    read: list[str] = []
    real = hist._extract
    monkeypatch.setattr(hist, "_extract", lambda path, *a: read.append(path.name) or real(path, *a))
    assert history(runs, "time_s", "train", "pytorch").to_json()["runs"] == first["runs"] and read == []  # all from the cache
    # the same bytes count edited in place (size unchanged): the run is read again and its new value used
    trial = runs / "r1" / "trials" / "r003-c00-pytorch.json"
    rec = json.loads(trial.read_text())
    old = rec["phases"]["train"]["duration_s"]
    digits = repr(old)
    text = trial.read_text().replace(digits, digits[:2] + ("9" if digits[2] != "9" else "8") + digits[3:])
    assert len(text) == len(trial.read_text())
    trial.write_text(text)
    again = history(runs, "time_s", "train", "pytorch").to_json()
    assert read == ["r1"]
    assert again["runs"][1]["q3"] != first["runs"][1]["q3"] or again["runs"][1]["median"] != first["runs"][1]["median"]
    assert [r["median"] for r in again["runs"]][::2] == [r["median"] for r in first["runs"]][::2]


@pytest.mark.parametrize("content", [b"\x00garbage", b'{"version": 1, "runs": {"r0": {"fp": "x", "values": ["NaN"]}}}',
                                     b'{"version": 1, "runs": []}'])
def test_a_damaged_history_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    from kit import history_cache

    monkeypatch.setenv(history_cache.ENV, str(tmp_path / "cache"))
    runs = _golden_runs(tmp_path, 2)
    path = history_cache.cache_path(runs, "time_s|train|pytorch")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert len(history(runs, "time_s", "train", "pytorch").runs) == 2


@pytest.mark.slow
def test_runs_read_in_worker_processes_give_the_serial_answer_and_its_errors(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call over many runs reads them in a process pool: same runs, same order, same errors."""
    import kit.history as hist
    from kit.errors import KitError

    runs = _golden_runs(tmp_path, 4)
    serial = history(runs, "time_s", "train", "pytorch", use_cache=False).to_json()
    monkeypatch.setattr(hist, "PARALLEL_MIN_RUNS", 2)
    monkeypatch.setattr(hist.os, "cpu_count", lambda: 2)
    pooled = history(runs, "time_s", "train", "pytorch", use_cache=False).to_json()
    assert pooled["runs"] == serial["runs"] and [r["label"] for r in pooled["runs"]] == ["2.0", "2.1", "2.2", "2.3"]
    (runs / "r2" / "trials" / "r003-c00-pytorch.json").write_text('{"trial_id": "r003-c00-pytorch", "status": "ok"')
    with pytest.raises(KitError) as err:  # raised in a worker, with its cause, place and fix intact
        history(runs, "time_s", "train", "pytorch", use_cache=False)
    assert err.value.where and "r003-c00-pytorch" in str(err.value)
