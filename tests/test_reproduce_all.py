"""`kit reproduce-all`: the plan (what the host lacks, what the budget excludes), resume after a kill, the summary.

The runner is injected: a fake writes a run directory as the runner would (tests/_runs.py), so every test here is
hardware-free and fast; one test marked slow runs the real command on the LeNet smoke profile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.collectors.base import SAMPLE_COLUMNS
from kit.errors import KitError, SpecError, StoreError
from kit.reproduce import (
    Host,
    Needs,
    PlanEntry,
    choose_profile,
    discover,
    fits,
    fmt_duration,
    headline,
    load_state,
    make_plan,
    read_claims,
    reproduce_all,
    requirements,
    run_plan,
    state_path,
)
from kit.spec import load_spec, parse_spec
from kit.store import RunDir, atomic_write_json
from tests._runs import manifest_of, record_of, write_record

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
LENET = EXPERIMENTS / "florencio2019_lenet" / "experiment.toml"
CPU = Host(0, (), "NVML unavailable")
ONE_GPU = Host(1, ("NVIDIA H100",))
MNIST = {"name": "mnist", "source": "t10k_split", "directory": "/d", "origin": "bundled", "sha256": {}}
CLAIMS = {
    "headline": "1 of 2 claims replicated, 1 contradicted",
    "counts": {"replicated": 1, "contradicted": 1, "inconclusive": 0, "not testable": 0},
    "rows": [
        {"id": "C1", "source": "Fig. 4", "statement": "PyTorch trains faster_than TensorFlow (100 %)",
         "kind": "direction", "paper_text": "PyTorch faster", "value_text": "1.28 [1.20, 1.35]",
         "verdict": "replicated", "reason": "the interval excludes 1",
         "differences": ["the paper ran on a GTX 1050 GPU; this run on the CPU"]},
        {"id": "C2", "source": "Table 3", "statement": "inference time does not differ", "kind": "no_difference",
         "paper_text": "no difference", "value_text": "0.71 [0.65, 0.77]", "verdict": "contradicted",
         "reason": "outside the 5 % margin", "differences": []},
    ],
}


def _studies(tmp_path: Path, *ids: str) -> Path:
    """A folder of LeNet copies under other experiment ids (each its own study, run by the fake in seconds)."""
    d = tmp_path / "experiments"
    d.mkdir()
    text = LENET.read_text(encoding="utf-8")
    for sid in ids:
        (d / f"{sid}.toml").write_text(text.replace('id = "florencio2019_lenet"', f'id = "{sid}"', 1),
                                       encoding="utf-8")
    return d


class FakeRunner:
    """A run_study that writes what `kit run` would leave (manifest, trials, a sealed analysis with claims, a
    report page); ``interrupt``: studies whose first call stops after one trial with this exception."""

    def __init__(self, runs_dir: Path, interrupt: dict[str, BaseException] | None = None) -> None:
        self.runs_dir, self.interrupt = runs_dir, dict(interrupt or {})
        self.calls: list[tuple[str, Path | None]] = []

    def __call__(self, entry: PlanEntry, resume: Path | None, on_run_dir: Callable[[Path], None]) -> Path:
        from kit.plan import make_plan as plan_of

        self.calls.append((entry.study, resume))
        spec = load_spec(entry.path, entry.profile)
        if resume is None:
            rd = RunDir.create(self.runs_dir, spec.experiment.id, manifest_of(spec, dataset=MNIST, status="running"))
        else:
            rd = RunDir.open(resume)
        on_run_dir(rd.path)
        for t in plan_of(spec).trials:
            if t.trial_id in rd.finished_ids():
                continue
            write_record(rd, record_of(t, 1.0e9 + 10.0 * t.position, 2.0 + 0.1 * (t.framework == "pytorch"), 0.1,
                                     results={"test_accuracy": 0.9}), pd.DataFrame(columns=SAMPLE_COLUMNS))
            if entry.study in self.interrupt:
                raise self.interrupt.pop(entry.study)
        rd.update_manifest(status="complete")
        _analysis_with_claims(rd.path, CLAIMS)
        (rd.path / "report").mkdir(exist_ok=True)
        (rd.path / "report" / "index.html").write_text("<p>report</p>", encoding="utf-8")
        return rd.path


def _analysis_with_claims(run_dir: Path, claims: Any) -> None:
    """The kit's own analysis of the run with ``claims`` put in and sealed again, as this user's kit seals it."""
    from kit.analysis.analyze import analyze_run
    from kit.freshness import SEAL_KEY, inputs_digest, seal
    from kit.studies import resolve_hooks

    a = {k: v for k, v in analyze_run(run_dir).to_json().items() if k != SEAL_KEY}
    a["claims"] = claims
    a[SEAL_KEY] = seal(a, inputs_digest(run_dir), resolve_hooks(run_dir, RunDir.open(run_dir).manifest()).state())
    atomic_write_json(run_dir / "analysis.json", a)


# -- what a study needs, what the host has ------------------------------------------------------------------------

def test_requirements_read_the_spec_keys_the_runner_resolves_devices_with() -> None:
    assert requirements(load_spec(LENET, "quick")) == Needs()  # device = "cpu"
    paper = requirements(load_spec(LENET))
    assert paper.gpus == 1 and 'workload.device = "auto"' in paper.why
    dist = requirements(load_spec(EXPERIMENTS / "patel_distributed"))
    assert dist.gpus == 2 and 'strategy "dp"' in dist.why
    # dist_device = "cpu": no GPU (its ResNet-18 still needs torchvision: tests/test_lean_install.py)
    assert requirements(load_spec(EXPERIMENTS / "patel_distributed", "quick")) == Needs(torchvision="resnet18 from "
                                                                                         "torchvision.models")
    sweep = requirements(load_spec(EXPERIMENTS / "patel_models_sweep"))
    assert sweep.gpus == 1 and "in case" in sweep.why  # some of its cases are CPU inference


def test_fits_says_what_the_host_lacks() -> None:
    assert fits(ONE_GPU, Needs(1, "x")) is None and fits(CPU, Needs()) is None
    assert fits(CPU, Needs(1, 'workload.device = "gpu"')) == (
        'host lacks a GPU: the profile needs 1 (workload.device = "gpu"), this host has no NVIDIA GPU '
        "(NVML unavailable)")
    assert "host lacks GPUs: the profile needs 2" in (fits(ONE_GPU, Needs(2, "d")) or "")
    assert "host lacks GPU 3" in (fits(Host(2, ("a", "b")), Needs(1, "x", (0, 3))) or "")
    assert (choose_profile("auto", CPU), choose_profile("auto", ONE_GPU), choose_profile("smoke", CPU)) == (
        "quick", "paper", "smoke")


# -- the plan -------------------------------------------------------------------------------------------------

def test_plan_skips_what_the_host_lacks_with_the_reason(tmp_path: Path) -> None:
    studies = discover(EXPERIMENTS)
    assert [s.id for s in studies] == sorted(s.id for s in studies) and len(studies) >= 6  # discovered, in order
    paper_on_cpu = make_plan(studies, CPU, "paper", tmp_path, {})
    assert {e.action for e in paper_on_cpu} == {"skip"}
    assert all(e.reason.startswith("host lacks") for e in paper_on_cpu)
    auto_on_gpu = {e.study: e for e in make_plan(studies, ONE_GPU, "auto", tmp_path, {})}
    dist = auto_on_gpu["patel_distributed"]
    assert (dist.profile, dist.action) == ("paper", "skip")
    assert dist.reason.startswith("host lacks GPUs: the profile needs 2 (workload.devices = 2")
    assert auto_on_gpu["florencio2019_lenet"].action == "run"
    assert auto_on_gpu["elshawi_dlbench"].estimate_s == 950400  # the paper profile's, from the spec (voc2012 included)
    smoke = {e.study: e for e in make_plan(studies, CPU, "smoke", tmp_path, {})}
    assert smoke["florencio2019_lenet"].action == "run"
    assert smoke["elshawi_dlbench"].reason == "no profile 'smoke' (profiles: paper, quick, paper-cpu)"


def test_a_budget_skips_up_front_what_would_not_fit(tmp_path: Path) -> None:
    # the quick profiles (auto on a CPU host picks paper-cpu where a study has it: tests/test_paper_cpu.py)
    plan = {e.study: e for e in make_plan(discover(EXPERIMENTS), CPU, "quick", tmp_path, {}, budget_s=430)}
    assert [plan[s].action for s in ("dai_single_gpu_factors", "elshawi_dlbench")] == ["run", "run"]  # 120 + 300 s
    assert plan["florencio2019_lenet"].reason == "would not fit the budget: estimate 220 s, 10 s left"
    assert plan["patel_distributed"].action == "skip"  # 80 s > 10 s: skipped, never started


def test_a_measured_wall_time_is_preferred_to_the_spec_estimate(tmp_path: Path) -> None:
    studies = discover(_studies(tmp_path, "a_lenet"))
    runs = tmp_path / "runs"
    spec = load_spec(studies[0].path, "smoke")
    rd = RunDir.create(runs, "a_lenet", manifest_of(spec, dataset=MNIST))  # complete, ended an hour after it started
    (entry,) = make_plan(studies, CPU, "smoke", runs, {})
    assert (entry.estimate_s, entry.estimate_from) == (3600.0, rd.path.name)


def test_the_loop_skips_a_study_the_time_left_no_longer_fits(tmp_path: Path) -> None:
    studies = discover(_studies(tmp_path, "a_lenet", "b_lenet"))
    runs = tmp_path / "runs"
    plan = make_plan(studies, CPU, "smoke", runs, {}, budget_s=130)  # 60 + 60 s planned
    assert [e.action for e in plan] == ["run", "run"]
    ticks = iter([0.0, 0.0, 0.0, 100.0, 100.0, 100.0, 100.0])  # the first study ran 100 s, not 60
    fake = FakeRunner(runs)
    out = run_plan(plan, runs, fake, budget_s=130, clock=lambda: next(ticks, 100.0))
    assert [c[0] for c in fake.calls] == ["a_lenet"]
    assert out.results[1].reason == "would not fit the budget: estimate 60 s, 30 s left"


# -- resume -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stop", [KeyboardInterrupt(), SystemExit(143)])
def test_a_killed_call_resumes_the_study_it_stopped_in_and_skips_finished_ones(tmp_path: Path,
                                                                               stop: BaseException) -> None:
    exp = _studies(tmp_path, "a_lenet", "b_lenet", "c_lenet")
    runs = tmp_path / "runs"
    fake = FakeRunner(runs, interrupt={"b_lenet": stop})
    first = reproduce_all(runs, fake, profile="smoke", experiments=exp, host=CPU)
    assert first.interrupted
    assert [(r.entry.study, r.status) for r in first.results] == [
        ("a_lenet", "complete"), ("b_lenet", "incomplete"), ("c_lenet", "skipped")]
    state = load_state(runs)
    assert state["a_lenet"].status == "complete" and state["b_lenet"].status == "incomplete"
    b_run = runs / state["b_lenet"].run_dir
    assert len(RunDir.open(b_run).finished_ids()) == 1  # what finished before the kill is kept

    again = FakeRunner(runs)
    second = reproduce_all(runs, again, profile="smoke", experiments=exp, host=CPU)
    assert again.calls == [("b_lenet", b_run), ("c_lenet", None)]  # a_lenet is not run again; b_lenet resumed
    assert [r.status for r in second.results] == ["complete"] * 3
    assert load_state(runs)["b_lenet"].run_dir == b_run.name
    assert len(RunDir.open(b_run).finished_ids()) == len(RunDir.open(runs / state["a_lenet"].run_dir).finished_ids())


def test_a_corrupt_state_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": 1, "studies": {"x": {"profile": "quick", "run_dir": "../../etc",
                                                                       "status": "complete"}}}))
    with pytest.raises(StoreError, match="malformed entry for study 'x'") as err:
        load_state(tmp_path)
    assert "remove it to start afresh" in (err.value.fix or "")


# -- the summary ------------------------------------------------------------------------------------------------

def test_the_summary_lists_every_study_and_every_claim(tmp_path: Path) -> None:
    exp = _studies(tmp_path, "a_lenet", "b_lenet")
    (exp / "z_paper_only.toml").write_text(
        (exp / "a_lenet.toml").read_text().replace('id = "a_lenet"', 'id = "z_paper_only"', 1).split(
            "[profiles.quick]")[0], encoding="utf-8")
    runs = tmp_path / "runs"
    out = reproduce_all(runs, FakeRunner(runs), profile="smoke", experiments=exp, host=CPU)
    html = (runs / "reproduce-all" / "summary.html").read_text()
    tex = (runs / "reproduce-all" / "summary.tex").read_text()
    assert [p.name for p in out.summary] == ["summary.html", "summary.tex"]
    assert "<h1>2 of 4 claims replicated, 2 contradicted on this host</h1>" in html
    for sid in ("a_lenet", "b_lenet", "z_paper_only"):
        assert sid in html and sid.replace("_", r"\_") in tex
    assert "no profile &#39;smoke&#39; (profiles: paper)" in html  # the skipped study, with why
    a_run = load_state(runs)["a_lenet"].run_dir
    assert f'href="../{a_run}/report/index.html"' in html
    assert "PyTorch trains faster_than TensorFlow (100 %)" in html and "the paper ran on a GTX 1050 GPU" in html
    assert r"PyTorch trains faster\_than TensorFlow (100 \%)" in tex  # escaped as every LaTeX report is
    assert "contradicted" in tex and "1.28 [1.20, 1.35]" in tex
    assert "test CPU, 2 logical CPUs" in html  # the host from the runs' manifests


def test_claims_are_read_defensively() -> None:
    assert read_claims(None) == ("", (), "no claims recorded")  # a run made before claims were judged
    assert read_claims("2 of 3")[2].startswith("claims unreadable")
    assert read_claims({"rows": [1]})[2].startswith("claims unreadable")
    head, rows, note = read_claims(CLAIMS)
    assert (head, [r.verdict for r in rows], note) == (CLAIMS["headline"], ["replicated", "contradicted"], "")
    assert headline({"replicated": 0, "not testable": 0}) == "no claims recorded on this host"
    assert [fmt_duration(s) for s in (None, 42, 190, 3600, 86400 + 1800, 90 * 86400, 8 * 86400 + 7200)] == [
        "-", "42 s", "3 min 10 s", "1 h", "24 h 30 min", "90 days", "8 days 2 h"]


# -- the spec's estimate, the command line ----------------------------------------------------------------------

def test_a_profile_estimate_is_read_and_checked_with_its_key_path() -> None:
    text = LENET.read_text(encoding="utf-8")
    assert load_spec(LENET, "quick").profile_estimate_s == 220 and load_spec(LENET).profile_estimate_s == 4200
    bad = text.replace("estimate_s = 220 ", 'estimate_s = "4m"', 1)
    with pytest.raises(SpecError) as err:
        parse_spec(bad, "x.toml", "smoke")  # an invalid profile fails the file, chosen or not
    assert err.value.where == "x.toml: profiles.quick.estimate_s"
    with pytest.raises(SpecError, match="expected seconds"):
        parse_spec(text.replace("estimate_s = 4200", "estimate_s = -1", 1), "x.toml")


def test_a_bad_budget_or_study_is_a_clear_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["reproduce-all", "--budget", "5x", "--runs-dir", str(tmp_path)])
    assert res.exit_code != 0 and isinstance(res.exception, KitError)
    assert str(res.exception) == "--budget: cannot read the budget '5x'. Fix: e.g. 20m, 1h30m, 900s or 900."
    res = CliRunner().invoke(app, ["reproduce-all", "--only", "nope", "--dry-run", "--runs-dir", str(tmp_path)])
    assert res.exit_code != 0 and "no study 'nope'" in str(res.exception) and "florencio2019_lenet" in str(
        res.exception)
    assert not (tmp_path / "reproduce-all").exists()  # nothing written before the input is checked


@pytest.mark.slow
def test_reproduce_all_runs_the_one_study_that_fits(tmp_path: Path) -> None:
    """The real command: a 2-minute budget and the smoke profile leave the LeNet study only (about a minute)."""
    proc = subprocess.run([sys.executable, "-m", "kit", "reproduce-all", "--profile", "smoke", "--budget", "2m",
                           "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = load_state(tmp_path)
    assert list(state) == ["florencio2019_lenet"] and state["florencio2019_lenet"].status == "complete"
    assert (tmp_path / state["florencio2019_lenet"].run_dir / "report" / "index.html").is_file()
    html = (tmp_path / "reproduce-all" / "summary.html").read_text()
    assert "no profile &#39;smoke&#39;" in html and "florencio2019_lenet" in html
