"""`kit compare` on real runs of the calibrated workload: a planted 10 % slowdown is a
regression (failing exit code under --fail-on regression); a planted 1 % is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.compare import CompareOptions, compare_arms, compare_runs, verdict
from kit.run import RunOptions, start_run
from kit.spec import load_spec

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def test_verdict_needs_significance_and_practical_size() -> None:
    assert verdict(1.10, 0.001, True, 0.05, 0.05, mde=0.03) == "regression"
    assert verdict(0.90, 0.001, True, 0.05, 0.05, mde=0.03) == "improvement"
    assert verdict(1.10, 0.001, True, 0.05, 0.05, mde=0.20) == "regression"  # seen although hard to see
    # "no change" is an equivalence verdict: the interval inside the margin, whatever the MDE says
    assert verdict(1.01, 0.20, True, 0.05, 0.05, mde=0.03, equivalent=True) == "no change"
    assert verdict(1.10, 0.20, True, 0.05, 0.05, mde=0.03, equivalent=False) == "inconclusive"  # MDE alone: no
    assert verdict(1.10, 0.20, True, 0.05, 0.05, mde=0.12) == "inconclusive"
    assert verdict(1.01, 1e-9, True, 0.05, 0.05, mde=0.01, equivalent=True) == "no change"  # significant, negligible
    assert verdict(1.01, 1e-9, True, 0.05, 0.05, mde=None) == "inconclusive"  # equivalence not assessable
    assert verdict(1.01, None, True, 0.05, 0.05, mde=float("inf")) == "inconclusive"  # too few trials to test
    assert verdict(0.90, 0.001, False, 0.05, 0.05, mde=0.03) == "regression"  # throughput went down
    assert verdict(None, None, True, 0.05, 0.05, mde=0.01) == "not tested"


def calibrated_run(tmp_path: Path, name: str, slowdown: float) -> Path:
    # no warm-up block: compare reads the measured trials only (kit.records), and a busy-wait phase has nothing to warm
    spec_file = tmp_path / f"{name}.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("jitter_frac = 0.01", f"jitter_frac = 0.01\nslowdown = {slowdown}")
                         .replace("warmup_repetitions = 1", "warmup_repetitions = 0"))
    rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / name))
    assert rd.manifest().status == "complete"
    return rd.path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    return {name: calibrated_run(tmp, name, s) for name, s in (("base", 1.0), ("slow10", 1.10), ("slow1", 1.01))}


@pytest.mark.slow
def test_planted_10_percent_slowdown_is_a_regression(runs: dict[str, Path]) -> None:
    res = compare_runs(runs["base"], runs["slow10"], CompareOptions(n_boot=2000)).to_json()
    times = [r for r in res["rows"] if r["metric"] == "time_s"]
    assert len(times) == 4  # 2 phases x 2 arms
    assert all(r["verdict"] == "regression" for r in times), [(r["phase"], r["arm"], r["ratio"], r["p_adj"]) for r in times]
    assert all(1.05 < r["ratio"] < 1.2 for r in times)
    keys = {d["key"] for d in res["provenance_differences"] if not d["key"].startswith("threat.")}
    assert keys == {"spec.workload.params.slowdown"}  # the planted difference is listed as a provenance difference
    (planted,) = [d for d in res["provenance_differences"] if d["key"] == "spec.workload.params.slowdown"]
    assert planted["may_explain"] == "the protocol itself"
    # conditions of the run (drift, load before trials) may differ between two runs: listed, as conditions
    assert all(d["may_explain"].startswith("a condition of the run") for d in res["provenance_differences"]
               if d["key"].startswith("threat."))


@pytest.mark.slow
def test_planted_1_percent_is_no_change(runs: dict[str, Path]) -> None:
    res = compare_runs(runs["base"], runs["slow1"], CompareOptions(n_boot=2000)).to_json()
    times = [r for r in res["rows"] if r["metric"] == "time_s"]
    assert times and all(r["verdict"] == "no change" for r in times), [(r["ratio"], r["p_adj"], r["mde"], r["noise"]) for r in times]


@pytest.mark.slow
def test_cli_fail_on_regression_gates(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    html = tmp_path / "cmp.html"
    bad = subprocess.run([sys.executable, "-m", "kit", "compare", str(runs["base"]), str(runs["slow10"]),
                          "--fail-on", "regression", "--json-file", str(out), "--html", str(html)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "regression" in bad.stdout and json.loads(out.read_text())["counts"]["regression"] == 4
    assert "<table>" in html.read_text() and "regression" in html.read_text()
    ok = subprocess.run([sys.executable, "-m", "kit", "compare", str(runs["base"]), str(runs["slow1"]),
                         "--fail-on", "regression"], capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_different_hosts_refused_unless_allowed(tmp_path: Path) -> None:
    import shutil

    golden = Path(__file__).parent / "data" / "golden" / "run"

    def fake(name: str, host: str) -> Path:
        run = tmp_path / name
        shutil.copytree(golden, run)
        man = json.loads((run / "manifest.json").read_text())
        man["host"]["hostname"] = host
        (run / "manifest.json").write_text(json.dumps(man))
        return run

    from kit.errors import AnalysisError, KitError

    a, b = fake("a", "node1"), fake("b", "node2")
    with pytest.raises(KitError, match=r"different machines.*--allow-different-hosts"):
        compare_runs(a, b)
    with pytest.raises(AnalysisError, match="share no configuration"):
        compare_runs(a, b, CompareOptions(allow_different_hosts=True, metrics=("latency_ms",)))


@pytest.mark.slow
def test_two_arms_of_one_run_are_compared_paired(tmp_path: Path) -> None:
    """`kit compare RUN --arms A,B`: the version arms of one interleaved run, Wilcoxon on per-block pairs."""
    spec_file = tmp_path / "arms.toml"
    spec_file.write_text(CALIBRATED.read_text().replace(
        "jitter_frac = 0.01", 'jitter_frac = 0.01\nslowdown = 1.10\nslowdown_framework = "pytorch"'))
    run = start_run(load_spec(spec_file), RunOptions(runs_root=tmp_path / "runs")).path
    res = compare_arms(run, "tensorflow", "pytorch", CompareOptions(n_boot=2000)).to_json()
    times = [r for r in res["rows"] if r["metric"] == "time_s"]
    assert len(times) == 2 and all(r["paired"] and r["n_a"] == r["n_b"] == 12 for r in times)
    assert all(r["test"] == "wilcoxon signed-rank" for r in times), [r["test"] for r in times]
    assert all(r["verdict"] == "regression" and 1.05 < r["ratio"] < 1.2 for r in times), times
    back = compare_arms(run, "pytorch", "tensorflow", CompareOptions(n_boot=2000)).to_json()
    assert {r["verdict"] for r in back["rows"] if r["metric"] == "time_s"} == {"improvement"}
    gate = subprocess.run([sys.executable, "-m", "kit", "compare", str(run), "--arms", "tensorflow,pytorch",
                           "--fail-on", "regression"], capture_output=True, text=True, timeout=300)
    assert gate.returncode == 1 and "pytorch vs tensorflow" in gate.stdout, gate.stdout + gate.stderr
    wrong = subprocess.run([sys.executable, "-m", "kit", "compare", str(run), "--arms", "tensorflow,jax"],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "run has no arm 'jax'" in wrong.stderr and "Traceback" not in wrong.stderr
