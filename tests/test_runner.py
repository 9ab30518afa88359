"""The run loop end to end with the real harness: trials land once each, a real
kill loses only the trial in flight, and resume completes the plan."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.plan import make_plan
from kit.run import RunOptions, resume_run, start_run
from kit.spec import load_spec
from kit.store import RunDir

pytestmark = pytest.mark.slow


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_smoke_run_writes_every_trial(tmp_path: Path, spec_path: Path) -> None:
    spec = load_spec(spec_path, "smoke")
    rd = start_run(spec, RunOptions(runs_root=tmp_path / "runs", collectors=("cpu", "memory")))
    man = rd.manifest()
    plan = make_plan(spec)
    assert man.status == "complete" and man.plan_digest == plan.digest() and man.plan == plan
    assert rd.finished_ids() == {t.trial_id for t in plan.trials}
    for rec in (r.to_json() for r in rd.trial_records()):
        assert rec["status"] == "ok", rec.get("error")
        assert set(rec["phases"]) == {"warmup", "train", "infer"}
        assert rec["phases"]["train"]["duration_s"] == rec["results"]["train_time_s"]
        # the room's temperature: this spec states none; a host without an ambient sensor says why it has none
        amb = rec["ambient"]
        assert amb["stated_c"] is None and (amb["sensor_c"] is not None or amb["note"])
    assert not (rd.path / "work").exists()
    assert man.dataset is not None and man.dataset.origin == "bundled" and man.host["cpu_logical"] >= 1

    # `kit report RUN_DIR` re-analyses the stored run without running any trial: twice, the same bytes
    raw = {p.relative_to(rd.path): _digest(p) for d in ("trials", "samples") for p in (rd.path / d).iterdir()}
    first = CliRunner().invoke(app, ["report", str(rd.path)])
    assert first.exit_code == 0, first.output
    analysis = _digest(rd.path / "analysis.json")
    (rd.path / "analysis.json").unlink()
    second = CliRunner().invoke(app, ["report", str(rd.path)])
    assert second.exit_code == 0, second.output
    assert _digest(rd.path / "analysis.json") == analysis
    assert {p.relative_to(rd.path): _digest(p) for d in ("trials", "samples") for p in (rd.path / d).iterdir()} == raw
    assert (rd.path / "report" / "index.html").exists()


def test_kill_and_resume_loses_nothing_and_duplicates_nothing(tmp_path: Path, spec_path: Path) -> None:
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "kit", "run", str(spec_path), "-p", "smoke", "--runs-dir", str(runs), "--no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 240
    run_dir = None
    while time.monotonic() < deadline:
        dirs = list(runs.glob("*-florencio2019_lenet")) if runs.exists() else []
        if dirs and len(list((dirs[0] / "trials").glob("*.json"))) >= 2:
            run_dir = dirs[0]
            break
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        time.sleep(0.2)
    assert run_dir is not None, "the run did not finish two trials in time"
    # wait until the next trial is really in flight, then kill kit run hard
    while not any((run_dir / "work").glob("*/markers.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.1)
    in_flight = [p.parent.name for p in (run_dir / "work").glob("*/markers.jsonl")]
    os.killpg(proc.pid, signal.SIGKILL)  # kit run and everything in its session
    proc.wait(timeout=30)
    # the harness of the trial in flight died with its parent (PR_SET_PDEATHSIG), no orphan keeps running
    for _ in range(50):
        alive = subprocess.run(["pgrep", "-f", f"kit.harness --out {run_dir}"], capture_output=True, text=True).stdout
        if not alive.strip():
            break
        time.sleep(0.1)
    assert not alive.strip(), f"orphan harness still running: {alive}"
    before = {p.name: _digest(p) for p in (run_dir / "trials").glob("*.json")}
    assert len(before) >= 2 and in_flight and in_flight[0] + ".json" not in before
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"  # killed, not finished

    rd = resume_run(run_dir, RunOptions(runs_root=runs))
    plan = make_plan(load_spec(spec_path, "smoke"))
    after = {p.name: _digest(p) for p in (run_dir / "trials").glob("*.json")}
    assert set(after) == {f"{t.trial_id}.json" for t in plan.trials}  # every trial, once
    assert all(after[name] == digest for name, digest in before.items())  # finished trials untouched
    assert rd.manifest().status == "complete"
    events = [json.loads(x)["event"] for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events[0] == "start" and "resume" in events and events[-1] == "end"
    assert {r.status for r in RunDir.open(run_dir).trial_records()} == {"ok"}


def test_relative_runs_dir_reaches_the_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make reproduce` passes `--runs-dir runs`: trials run in their work directory, so the path must be absolute."""
    spec_file = tmp_path / "cal.toml"
    spec_file.write_text((Path(__file__).parent / "data" / "calibrated.toml").read_text().replace("repetitions = 12", "repetitions = 2"))
    monkeypatch.chdir(tmp_path)
    rd = start_run(load_spec(spec_file), RunOptions(runs_root=Path("runs"), collectors=("cpu",)))
    trials = rd.trial_records()
    assert rd.manifest().status == "complete" and len(trials) == 6
    assert {t.status for t in trials} == {"ok"}, [t.error for t in trials]
