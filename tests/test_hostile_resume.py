"""Hostile resumes, performed for real (issue 14, item 10): a second `kit run --resume` while one holds the
run, an edited spec copy in manifest.json, a trial killed by a real signal and retried in its plan position,
and a retry killed between archiving the failed record and removing it.

The runs are real runs of the calibrated workload through ``start_run`` and the local backend. Faults are
real: the local backend is given an interpreter (a shell script) that runs the harness as usual but, for the
first attempt of one trial, SIGKILLs it from outside once its train phase has started, and for another exits
with the harness's out-of-memory code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ExitCode, KitError, StoreError
from kit.plan import make_plan
from kit.run import RETRY_FAILED, RunEvents, RunOptions, resume_run, start_run
from kit.run.trial import trial_record
from kit.spec import load_spec
from kit.store import RunDir

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"
REPO = Path(__file__).resolve().parents[1]


class Messages(RunEvents):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def _faulty_python(tmp: Path, kill: str, oom: str) -> Path:
    """An interpreter for the local backend: the real one, except for the first attempt of two trials.

    Trial ``kill`` is sent SIGKILL from outside (a background watcher) once its markers say the train phase
    started; trial ``oom`` exits 3, the harness's code for running out of memory. Each fault fires once
    (a flag file is consumed), so a retry runs the real harness.
    """
    (tmp / "flag-kill").write_text("")
    (tmp / "flag-oom").write_text("")
    script = tmp / "faulty-python.sh"
    script.write_text(f"""#!/bin/sh
case "$(basename "$PWD")" in
  {kill})
    if [ -e '{tmp}/flag-kill' ]; then
      rm -f '{tmp}/flag-kill'
      ( while ! grep -q '"phase": "train"' markers.jsonl 2>/dev/null; do sleep 0.01; done; kill -KILL $$ ) &
    fi ;;
  {oom})
    if [ -e '{tmp}/flag-oom' ]; then rm -f '{tmp}/flag-oom'; exit 3; fi ;;
esac
exec '{sys.executable}' "$@"
""")
    script.chmod(0o755)
    return script


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real partial run (6 of 8 trials): one trial killed by SIGKILL mid-train, one out of memory."""
    tmp = tmp_path_factory.mktemp("failedrun")
    spec_file = tmp / "calibrated.toml"
    spec_file.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 3")
                         .replace("train_s = 0.15", "train_s = 0.4"))
    spec = load_spec(spec_file)
    plan = make_plan(spec)
    assert len(plan.trials) == 8 and [t.position for t in plan.trials] == list(range(8))
    kill, oom = plan.trials[2], plan.trials[4]
    assert not kill.warmup and not oom.warmup
    python = _faulty_python(tmp, kill.trial_id, oom.trial_id)
    rd = start_run(spec, RunOptions(runs_root=tmp / "runs", backend_options={"python": str(python)}, max_trials=6))
    assert rd.manifest().status == "partial"
    return {"path": rd.path, "kill": kill, "oom": oom, "plan": plan,
            "killed_bytes": rd.trial_path(kill.trial_id).read_bytes()}


def _copy(failed_run: dict[str, Any], tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(failed_run["path"], run)
    return run


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]


# -- (f) the signal is recorded; --retry-failed re-runs in plan position, keeping the failed record ----------

@pytest.mark.slow
def test_a_trial_killed_by_a_signal_records_it_and_is_retried_in_its_plan_position(
        failed_run: dict[str, Any], tmp_path: Path) -> None:
    from kit.analysis.analyze import analyze_run
    from kit.report import write_report

    run = _copy(failed_run, tmp_path)
    kill, oom, plan = failed_run["kill"], failed_run["oom"], failed_run["plan"]
    rd = RunDir.open(run)
    killed = rd.read_trial(kill.trial_id)
    assert killed["status"] == "error" and killed["exit_code"] == -signal.SIGKILL
    assert killed["signal"] == "SIGKILL" and "SIGKILL" in killed["error"]
    assert "train" in {m.get("phase") for m in killed["markers"]}  # killed mid-trial, its markers kept
    assert rd.read_trial(oom.trial_id)["status"] == "oom"
    assert rd.finished_ids() == {t.trial_id for t in plan.trials[:6]}

    events = Messages()
    resume_run(run, RunOptions(retry=RETRY_FAILED), events)
    assert any("retrying 1 trial" in m for m in events.lines), events.lines
    # the failed record is kept byte for byte (with its telemetry), the trial file holds the new attempt
    assert (run / "attempts" / f"{kill.trial_id}.1.json").read_bytes() == failed_run["killed_bytes"]
    assert (run / "attempts" / f"{kill.trial_id}.1.parquet").is_file()
    assert sorted(p.name for p in (run / "attempts").iterdir()) == [f"{kill.trial_id}.1.json",
                                                                     f"{kill.trial_id}.1.parquet"]
    trials = [t.to_json() for t in RunDir.open(run).trial_records()]  # one file per planned trial: no duplicate id
    assert [t["trial_id"] for t in trials] == [t.trial_id for t in plan.trials]
    new = next(t for t in trials if t["trial_id"] == kill.trial_id)
    assert new["status"] == "ok" and new["signal"] is None
    assert (new["position"], new["block"], new["seed"], new["arm"]) == (kill.position, kill.block, kill.seed, kill.arm)
    assert new["attempt"] == 2 and new["previous_attempts"] == [f"attempts/{kill.trial_id}.1.json"]
    # in plan order: the retry (position 2) ran before the missing positions 6 and 7, not after them
    started = {t["trial_id"]: t["started"] for t in trials}
    assert started[kill.trial_id] < started[plan.trials[6].trial_id] < started[plan.trials[7].trial_id]
    assert started[kill.trial_id] > started[plan.trials[5].trial_id]  # and it really ran again
    oom_rec = next(t for t in trials if t["trial_id"] == oom.trial_id)
    assert oom_rec["status"] == "oom"  # --retry-failed leaves out-of-memory results alone
    retry_events = [e for e in _events(run) if e["event"] == "retry"]
    assert [(e["trial_id"], e["archived"], e["status"], e["signal"]) for e in retry_events] == [
        (kill.trial_id, f"attempts/{kill.trial_id}.1.json", "error", "SIGKILL")]
    assert RunDir.open(run).manifest().status == "complete"

    analysis = analyze_run(run)
    (entry,) = analysis.retried_trials
    assert (entry["trial_id"], entry["attempt"], entry["status"], entry["signal"], entry["file"], entry["status_now"]) == (
        kill.trial_id, 1, "error", "SIGKILL", f"attempts/{kill.trial_id}.1.json", "ok")
    assert "SIGKILL" in entry["reason"]
    assert [e["trial_id"] for e in analysis.excluded_trials] == [oom.trial_id]
    write_report(run, analysis, ("html",))
    html = (run / "report" / "index.html").read_text()
    assert "Retried trials" in html and f"attempts/{kill.trial_id}.1.json" in html and "SIGKILL" in html

    # the CLI: --retry-failed has nothing left to retry (oom is a result), --retry-oom retries it
    before = (run / "trials" / f"{oom.trial_id}.json").read_bytes()
    res = CliRunner().invoke(app, ["run", "--resume", str(run), "--retry-failed", "--no-report"])
    assert res.exit_code == 0, res.output
    assert (run / "trials" / f"{oom.trial_id}.json").read_bytes() == before
    res = CliRunner().invoke(app, ["run", "--resume", str(run), "--retry-oom", "--no-report"])
    assert res.exit_code == 0, res.output
    assert json.loads((run / "attempts" / f"{oom.trial_id}.1.json").read_text())["status"] == "oom"
    assert RunDir.open(run).read_trial(oom.trial_id)["status"] == "ok"
    assert {e["trial_id"] for e in analyze_run(run).retried_trials} == {kill.trial_id, oom.trial_id}


def test_retry_options_need_a_run_to_resume(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(CALIBRATED), "--runs-dir", str(runs), "--retry-failed"])
    assert isinstance(res.exception, KitError) and "--resume" in str(res.exception)
    with pytest.raises(KitError, match="retry"):
        start_run(load_spec(CALIBRATED), RunOptions(runs_root=runs, retry=RETRY_FAILED))
    assert not runs.exists()


def test_a_container_killed_by_a_signal_records_it(tmp_path: Path) -> None:
    """Engines report a process killed by signal N as exit code 128+N (Apptainer's -N is translated so)."""
    from kit.backends.container import container_outcome
    from kit.plan import Trial

    trial = Trial(trial_id="r001-c0-pytorch", position=3, block=1, repetition=1, warmup=False, arm="pytorch",
                  framework="pytorch", config_id="c0", seed=5)
    for code, sig, limit, status in [(137, "SIGKILL", "", "error"), (143, "SIGTERM", "", "error"),
                                     (137, "SIGKILL", "2g", "oom"), (1, None, "", "error")]:
        out = container_outcome(tmp_path, code, False, False, "", "", 1.0, {}, limit)
        assert out.status == status and out.detail.get("signal") == sig
        rec = trial_record(trial, out, 0.0, 1.0, [], {}, "docker").to_json()
        assert rec["signal"] == sig and (sig is None or sig in rec["error"])


# -- (a) resume takes the lock before it writes anything ------------------------------------------------------

@pytest.mark.slow
def test_a_resume_refused_by_the_lock_writes_nothing(failed_run: dict[str, Any], tmp_path: Path) -> None:
    run = _copy(failed_run, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\nf = open(sys.argv[1], 'w')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
                               "print('locked', flush=True)\ntime.sleep(300)", str(run / ".lock")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        snapshot = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
        with pytest.raises(StoreError, match="another `kit run`"):
            resume_run(run, RunOptions())
        assert (run / "events.jsonl").read_bytes() == snapshot[Path("events.jsonl")]  # no "resume" event
        assert (run / "manifest.json").read_bytes() == snapshot[Path("manifest.json")]  # status still "partial"
        with pytest.raises(StoreError, match="another `kit run`"):
            resume_run(run, RunOptions(retry=RETRY_FAILED))
        proc = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(run), "--retry-failed"],
                              capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode == ExitCode.INPUT and "another `kit run`" in proc.stderr, proc.stderr
        after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
        assert after[Path("events.jsonl")] == snapshot[Path("events.jsonl")]
        assert after[Path("manifest.json")] == snapshot[Path("manifest.json")]
        assert after == snapshot  # nothing else either: no archive, no trial, no event
    finally:
        holder.kill()
        holder.wait()


# -- (c) the spec copy's digest ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_an_edited_spec_copy_is_refused_and_an_old_manifest_is_resumed_with_a_warning(
        failed_run: dict[str, Any], tmp_path: Path) -> None:
    run = _copy(failed_run, tmp_path)
    man_path = run / "manifest.json"
    man = json.loads(man_path.read_text())
    text = man["spec_source"]["text"]
    assert "train_s = 0.4" in text
    man["spec_source"]["text"] = text.replace("train_s = 0.4", "train_s = 4.0")  # half the trials 10x longer
    man_path.write_text(json.dumps(man, indent=1))
    snapshot = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(StoreError) as info:
        resume_run(run, RunOptions())
    msg = info.value.one_line()
    assert "manifest.json: spec_source.text" in msg and "edited" in msg and "Fix:" in msg and "kit run SPEC" in msg
    proc = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(run)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == ExitCode.INPUT and "spec_source.text" in proc.stderr and "Traceback" not in proc.stderr
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file()} == snapshot
    assert man["spec_source"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()  # stored at the start

    # a manifest written before the digest existed: resumed, and the user is told the copy is unchecked
    man["spec_source"]["text"] = text
    del man["spec_source"]["sha256"]
    man_path.write_text(json.dumps(man, indent=1))
    events = Messages()
    rd = resume_run(run, RunOptions(), events)
    assert any("predates spec digests" in m for m in events.lines), events.lines
    assert rd.manifest().status == "complete"
    assert [e.get("spec_digest") for e in _events(run) if e["event"] == "resume"] == ["absent"]


# -- a retry killed between archiving the failed record and removing it ----------------------------------------

@pytest.mark.slow
def test_a_retry_killed_between_archive_and_removal_is_resumed_cleanly(
        failed_run: dict[str, Any], tmp_path: Path) -> None:
    from kit.analysis.analyze import analyze_run

    run = _copy(failed_run, tmp_path)
    tid = failed_run["kill"].trial_id
    # the retry process SIGKILLs itself at the moment it would remove trials/<id>.json (after the archive)
    code = (
        "import os, signal, sys\n"
        "real = os.unlink\n"
        "def unlink(path, *a, **k):\n"
        f"    if str(path).endswith('trials/{tid}.json'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(path, *a, **k)\n"
        "os.unlink = unlink\n"
        "from kit.run import RETRY_FAILED, RunOptions, resume_run\n"
        "resume_run(sys.argv[1], RunOptions(retry=RETRY_FAILED))\n")
    # timeout=300 only guards against a hang; the exit by SIGKILL says the retry died at the hooked removal (a retry
    # that never reached it would end by itself, not killed), before it could run the trial again
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    archive = run / "attempts" / f"{tid}.1.json"
    assert archive.read_bytes() == failed_run["killed_bytes"]
    assert (run / "trials" / f"{tid}.json").read_bytes() == failed_run["killed_bytes"]  # the failed record still counts
    analysis = analyze_run(run)
    assert analysis.retried_trials == ()  # an archive equal to the trial file is no retry yet
    assert tid in {e["trial_id"] for e in analysis.excluded_trials}

    resume_run(run, RunOptions(retry=RETRY_FAILED))
    assert sorted(p.name for p in (run / "attempts").glob("*.json")) == [f"{tid}.1.json"]  # reused, not copied twice
    assert archive.read_bytes() == failed_run["killed_bytes"]
    rec = RunDir.open(run).read_trial(tid)
    assert rec["status"] == "ok" and rec["attempt"] == 2
    assert [e["file"] for e in analyze_run(run).retried_trials] == [f"attempts/{tid}.1.json"]


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["unknown", "misnamed", "link"])
def test_a_crafted_attempt_file_is_refused(failed_run: dict[str, Any], tmp_path: Path, attack: str) -> None:
    """attempts/ is read like trials/: a file outside the plan, under another trial's name, or a link is refused."""
    import os

    from kit.analysis.analyze import analyze_run

    run = _copy(failed_run, tmp_path)
    (run / "attempts").mkdir()
    src = run / "trials" / f"{failed_run['kill'].trial_id}.json"
    if attack == "unknown":
        rec = json.loads(src.read_text())
        rec["trial_id"] = "r099-c0-pytorch"
        bad = run / "attempts" / "r099-c0-pytorch.1.json"
        bad.write_text(json.dumps(rec))
        match = "not in the run's plan"
    elif attack == "misnamed":
        bad = run / "attempts" / f"{failed_run['oom'].trial_id}.1.json"
        shutil.copy(src, bad)
        match = "its name says"
    else:
        bad = run / "attempts" / f"{failed_run['kill'].trial_id}.1.json"
        os.symlink(src, bad)
        match = "symbolic link; refused"
    with pytest.raises(StoreError, match=match) as info:
        analyze_run(run)
    assert str(bad) in str(info.value)
