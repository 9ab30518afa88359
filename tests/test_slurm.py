"""The Slurm executor against a real (single-node) Slurm: every trial lands once,
a cancelled job loses only its trial in flight, and resume completes the plan."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from kit.executors.slurm import SlurmOptions, chunks_of, expand_tasks, job_script, parse_sacct, parse_scontrol
from kit.executors.status import run_status
from kit.plan import make_plan
from kit.spec import load_spec
from kit.store import RunDir


def test_chunks_hold_whole_blocks(spec_path: Path) -> None:
    plan = make_plan(load_spec(spec_path, "quick"))
    chunks = chunks_of(plan, 3)
    assert [b for c in chunks for b in c] == sorted({t.block for t in plan.trials})
    assert all(len(c) <= 3 for c in chunks)


def test_job_script_is_exclusive_one_node_and_passes_options(tmp_path: Path) -> None:
    opts = SlurmOptions(partition="gpu", account="proj", gpus_per_trial=1, time_limit="01:30:00",
                        sbatch_options=("--qos=high", "--constraint=h100"), python="/opt/venv/bin/python")
    text = job_script(tmp_path / "run", opts, "apptainer", "exp")
    for line in ("#SBATCH --nodes=1", "#SBATCH --exclusive", "#SBATCH --partition=gpu", "#SBATCH --account=proj",
                 "#SBATCH --gres=gpu:1", "#SBATCH --time=01:30:00", "#SBATCH --qos=high", "#SBATCH --constraint=h100",
                 "#SBATCH --signal=B:TERM@60"):
        assert line in text.splitlines(), line
    assert '--chunk "$SLURM_ARRAY_TASK_ID"' in text and "--backend apptainer" in text
    assert text.splitlines()[-1].startswith("exec /opt/venv/bin/python -m kit run --resume")


def test_parsers() -> None:
    assert expand_tasks("1-3") == [1, 2, 3] and expand_tasks("0,4-5%2") == [0, 4, 5] and expand_tasks("7") == [7]
    sc = parse_scontrol("JobId=9 ArrayJobId=8 ArrayTaskId=1-2 JobState=PENDING Reason=Resources NodeList=\n"
                        "JobId=10 ArrayJobId=8 ArrayTaskId=0 JobState=TIMEOUT Reason=TimeLimit NodeList=n1 ExitCode=0:15\n")
    assert sc["8_1"].state == "PENDING" and sc["8_2"].active and sc["8_0"].state == "TIMEOUT" and not sc["8_0"].active
    sa = parse_sacct("8_0|PREEMPTED|n2|0:15|None\n8_1|CANCELLED by 0|n3|0:15|None\n")
    assert sa["8_0"].state == "PREEMPTED" and sa["8_1"].state == "CANCELLED" and sa["8_1"].node == "n3"


# -- against the real Slurm -------------------------------------------------------------

def _slurm_ready() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "Slurm client tools not installed (CI installs them: .ci/slurm.sh)"
    try:
        res = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "sinfo does not answer"
    if res.returncode != 0 or not res.stdout.strip():
        return f"no Slurm controller reachable ({res.stderr.strip()[:200]}); start one with `source .ci/slurm.sh`"
    return None


@pytest.fixture
def slurm() -> None:
    reason = _slurm_ready()
    if reason:
        pytest.skip(reason)


def _kit(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    import sys

    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _run_dir(runs: Path) -> Path:
    dirs = list(runs.glob("*-florencio2019_lenet"))
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.mark.slurm
@pytest.mark.slow
def test_slurm_run_lands_every_trial_once_and_reports(slurm: None, tmp_path: Path, spec_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = _kit("run", str(spec_path), "-p", "smoke", "--runs-dir", str(runs), "--executor", "slurm",
                "--backend", "local", "--wait")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rd = RunDir.open(_run_dir(runs))
    plan = make_plan(load_spec(spec_path, "smoke"))
    assert rd.finished_ids() == {t.trial_id for t in plan.trials}
    records = [r.to_json() for r in rd.trial_records()]  # the trial files as written
    assert all(r["status"] == "ok" for r in records)
    assert all(r["executor"]["name"] == "slurm" and r["executor"]["job_id"] for r in records)
    # a block never spans two jobs: both arms of a block ran in the same job, on the same node
    by_block: dict[int, set[tuple[str, str]]] = {}
    for r in records:
        by_block.setdefault(r["block"], set()).add((r["executor"]["job_id"], r["host"]))
    assert all(len(v) == 1 for v in by_block.values())
    assert (rd.path / "nodes").is_dir() and list((rd.path / "nodes").glob("*.json"))
    assert (rd.path / "report" / "index.html").exists()
    assert rd.manifest().status == "complete"
    st = run_status(rd.path)
    assert st["counts"] == {"finished": len(plan.trials)}
    assert {j["state"] for j in st["jobs"]} == {"COMPLETED"}


@pytest.mark.slurm
@pytest.mark.slow
def test_scancel_mid_run_then_resume_completes_without_duplicates(slurm: None, tmp_path: Path, spec_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = _kit("run", str(spec_path), "-p", "smoke", "--runs-dir", str(runs), "--executor", "slurm",
                "--backend", "local", "--blocks-per-job", "3")  # one job holds the whole plan
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = _run_dir(runs)
    sub = json.loads((run_dir / "slurm" / "submissions.jsonl").read_text().splitlines()[0])
    task = f"{sub['array_job_id']}_0"
    deadline = time.monotonic() + 600
    # wait until one trial finished and the next one is in flight, then cancel the job
    while time.monotonic() < deadline:
        done = list((run_dir / "trials").glob("*.json"))
        in_flight = list((run_dir / "work").glob("*/markers.jsonl")) if (run_dir / "work").exists() else []
        if done and in_flight:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the job did not reach its second trial in time")
    subprocess.run(["scancel", task], check=True, timeout=30)
    while time.monotonic() < deadline and run_status(run_dir)["jobs"][0]["state"] in ("RUNNING", "COMPLETING", "PENDING"):
        time.sleep(0.5)
    st = run_status(run_dir)
    assert st["jobs"][0]["state"] == "CANCELLED", st["jobs"]
    lost = [r for r in st["trials"] if r["state"] == "lost"]
    assert lost and all("CANCELLED" in r["reason"] for r in lost)
    before = {p.name: p.read_bytes() for p in (run_dir / "trials").glob("*.json")}
    assert len(before) < 6
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "interrupted" for e in events)  # SIGTERM reached the run loop

    proc = _kit("run", "--resume", str(run_dir), "--executor", "slurm", "--wait")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plan = make_plan(load_spec(spec_path, "smoke"))
    after = {p.name: p.read_bytes() for p in (run_dir / "trials").glob("*.json")}
    assert set(after) == {f"{t.trial_id}.json" for t in plan.trials}
    assert all(after[k] == v for k, v in before.items())  # finished trials untouched
    subs = (run_dir / "slurm" / "submissions.jsonl").read_text().splitlines()
    assert len(subs) == 2  # the original and one resubmission
    assert run_status(run_dir)["counts"] == {"finished": len(plan.trials)}
