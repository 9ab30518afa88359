"""A planted confound, found by the threats section: a real run of the calibrated workload on a
"warming device" (every phase slower by a fixed share per schedule position) with all trials of one
framework first is flagged for non-interleaving and drift; a clean interleaved run of the same
workload without drift keeps those rules quiet."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.analysis.analyze import analyze_run
from kit.report import write_report
from kit.run import RunOptions, start_run
from kit.spec import load_spec

# Starts the frameworks or renders whole reports: `make test-all`, not the fast `make test`.
pytestmark = pytest.mark.slow

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


def _run(tmp: Path, name: str, *, blocking: str, drift: float, train_s: float = 0.08, infer_s: float = 0.03) -> dict:
    text = CALIBRATED.read_text().replace("jitter_frac = 0.01", f"jitter_frac = 0.005\ndrift_per_position = {drift}")
    text = text.replace("train_s = 0.15", f"train_s = {train_s}").replace("infer_s = 0.05", f"infer_s = {infer_s}")
    text = text.replace("repetitions = 12", "repetitions = 10").replace("[design]\n", f"[design]\nblocking = \"{blocking}\"\n")
    spec_file = tmp / f"{name}.toml"
    spec_file.write_text(text)
    rd = start_run(load_spec(spec_file), RunOptions(runs_root=tmp / name))
    assert rd.manifest().status == "complete"
    analysis = analyze_run(rd.path)
    (html,) = write_report(rd.path, analysis, ("html",))
    threats = html.read_text(encoding="utf-8").split('<section id="threats">')[1].split("</section>")[0]
    return {**analysis.to_json(), "threats_html": threats}


@pytest.fixture(scope="module")
def confounded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _run(tmp_path_factory.mktemp("confound"), "warming", blocking="sequential", drift=0.03)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # Longer phases: the rule ignores drifts under 2 % of the median, and a millisecond of scheduler
    # noise on a busy 2-core machine is 3 % of a 30 ms phase but under 1 % of these.
    return _run(tmp_path_factory.mktemp("clean"), "clean", blocking="interleaved", drift=0.0, train_s=0.2, infer_s=0.12)


def _threats(analysis: dict, rule: str) -> list[dict]:
    return [t for t in analysis["validity"] if t["rule"] == rule and t["status"] == "threat"]


def test_planted_confound_is_flagged(confounded: dict) -> None:
    order = _threats(confounded, "order")
    assert order and order[0]["severity"] == "high" and "sequential" in order[0]["evidence"]
    drift = _threats(confounded, "drift")
    # both phases of both frameworks grow with position; the rule sees it within each framework
    assert {(t["numbers"]["arm"], t["numbers"]["phase"]) for t in drift} == {
        (a, p) for a in ("tensorflow", "pytorch") for p in ("train", "infer")}
    assert all(t["severity"] == "high" and t["numbers"]["slope"] > 0 for t in drift)
    # the confound also makes the frameworks look different although the workload is the same
    rejected = [h for h in confounded["hypotheses"] if h["rejected"]]
    assert rejected, "the planted drift should produce a spurious difference between the frameworks"
    # and the report's threats section says so
    assert "Frameworks not interleaved" in confounded["threats_html"]
    assert "Drift of train time with schedule position (pytorch)" in confounded["threats_html"]


def test_clean_run_keeps_order_and_drift_quiet(clean: dict) -> None:
    assert not _threats(clean, "order")
    assert not _threats(clean, "drift"), _threats(clean, "drift")
    order = [t for t in clean["validity"] if t["rule"] == "order"]
    assert order and order[0]["status"] == "mitigated"
    assert "Frameworks not interleaved" not in clean["threats_html"] and "Drift of" not in clean["threats_html"]
