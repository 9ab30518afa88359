"""Resuming is a trust boundary (issue 37, items 1, 2 and 7): each test performs the attack for real.

A run directory handed over by someone else is resumed (`kit run --resume`, `kit reproduce-all`): its study code
must not run unless the reader trusts it, whatever digest its manifest carries; a crafted reproduce-all state
file must not point the kit at a run outside the runs directory, at another study's run or at untrusted code;
numbers recorded in a manifest (the sequential rule's margin, the design's alpha) are checked before use.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from _crafted import calibrated_study, edit_manifest, golden_copy

from kit.errors import ExitCode, StoreError, StudyError
from kit.run import RunOptions, resume_run, start_run
from kit.run_code import resume_code, snapshot
from kit.spec import load_spec
from kit.store import RunDir
from kit.studies import BUNDLED, digest_of, study_files
from kit.trust import StudyTrust

EVIL = """
from pathlib import Path
Path({marker!r}).write_text("the planted workload ran")
"""


@pytest.fixture(autouse=True)
def own_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh allow-list per test: what one test trusted must not make another's attack pass."""
    cfg = tmp_path / "config"
    monkeypatch.setenv("KIT_CONFIG_DIR", str(cfg))
    return cfg


def _partial_run(tmp: Path, name: str = "cal_study") -> tuple[Path, Path]:
    """A real run of a study folder (the calibrated busy-wait as the study's own workload), stopped after one
    trial; (study folder, run directory)."""
    folder = calibrated_study(tmp / "study", reps=2, name=name)
    rd = start_run(load_spec(folder), RunOptions(runs_root=tmp / "runs", max_trials=1))
    assert rd.manifest().status == "partial"
    return folder, rd.path


def _plant_and_reseal(run: Path, marker: Path) -> None:
    """Edit the run's copy of its workload module (prepend code that leaves ``marker``) and re-seal the manifest's
    study digest, as whoever hands over the run directory can."""
    wl = run / "study" / "wl.py"
    wl.chmod(0o644)
    wl.write_text(EVIL.format(marker=str(marker)) + wl.read_text())
    files = study_files(run / "study")
    edit_manifest(run, lambda m: m["study"].update(digest=digest_of(files), files=[r for r, _ in files]))


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`kit ARGS` through the CLI's own entry point (errors as the user sees them): exit code and output."""
    import sys

    import kit.cli

    monkeypatch.setattr(sys, "argv", ["kit", *args])
    with pytest.raises(SystemExit) as info:
        kit.cli.main()
        raise SystemExit(0)
    got = capsys.readouterr()
    return int(info.value.code or 0), got.out + got.err


def _state(run: Path) -> tuple[int, bytes, bytes]:
    return len(list((run / "trials").glob("*.json"))), (run / "manifest.json").read_bytes(), \
        (run / "events.jsonl").read_bytes()


# -- 1. resume runs only code you trust ---------------------------------------------------------------------------

def test_a_planted_edit_with_a_resealed_digest_is_not_run_on_resume(tmp_path: Path) -> None:
    folder, run = _partial_run(tmp_path)
    marker = tmp_path / "planted-ran"
    _plant_and_reseal(run, marker)
    before = _state(run)
    with pytest.raises(StudyError, match=r"neither this kit's bundled study nor code you trusted") as err:
        resume_run(run, RunOptions(runs_root=tmp_path / "runs"))
    assert "--trust-study-code" in (err.value.fix or "") and "wl.py" in err.value.cause
    assert not marker.exists()
    assert _state(run) == before  # nothing written: no event, no manifest change, no trial
    # the folder the user names is not the run's code: refused, naming the file that differs
    with pytest.raises(StudyError, match=r"wl\.py differs"):
        resume_run(run, RunOptions(runs_root=tmp_path / "runs", study_trust=StudyTrust(study_dir=folder)))
    assert not marker.exists() and _state(run) == before
    # consent for this command runs it (and says so in the event log)
    rd = resume_run(run, RunOptions(runs_root=tmp_path / "runs", max_trials=1,
                                    study_trust=StudyTrust(trust_run_copy=True)))
    assert marker.exists() and len(rd.finished_ids()) == 2
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e.get("study_code") for e in events if e.get("event") == "resume"] == ["copy"]


def test_the_users_own_run_resumes_without_flags_and_the_cli_refuses_a_stranger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`kit run` of a folder trusts its code as the run starts (a run killed half-way resumes without
    --trust-study-code); a planted edit is refused through the CLI with cause, where and fix, exit 5."""
    folder, run = _partial_run(tmp_path)
    code = resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True)
    assert code.kind == "allow-list"
    code = resume_code(run, RunDir.open(run).manifest(), StudyTrust(study_dir=folder), declares_study=True)
    assert code.kind == "folder"
    marker = tmp_path / "planted-ran"
    _plant_and_reseal(run, marker)
    code_, out = _main(monkeypatch, capsys, "run", "--resume", str(run), "--no-report")
    assert code_ == ExitCode.INPUT, out
    assert "Traceback" not in out and "--trust-study-code" in out and not marker.exists()
    code_, out = _main(monkeypatch, capsys, "run", "--trust-study-code", "--no-report", str(folder))
    assert code_ == ExitCode.INPUT and "--resume" in out, out  # the flags belong to a resume


def test_the_trials_import_the_checked_bytes_not_the_copy_as_it_is_later(tmp_path: Path) -> None:
    _, run = _partial_run(tmp_path)
    code = resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True)
    wl = run / "study" / "wl.py"
    wl.chmod(0o644)
    wl.write_text("raise SystemExit('edited after the check')\n")  # a swap between the check and the trial
    with snapshot(code) as study_dir:
        assert study_dir is not None and study_dir != run / "study"
        assert "edited after the check" not in (study_dir / "wl.py").read_text()
        assert digest_of(study_files(study_dir)) == code.digest
        assert not os.access(study_dir / "wl.py", os.W_OK) or os.geteuid() == 0
    assert not study_dir.exists()  # removed when the run ends


def _bundled_copy(run: Path, study: str) -> None:
    """Give a crafted run the copy of a bundled study (as a run of it would hold) and name the experiment."""
    shutil.copytree(BUNDLED / study, run / "study", ignore=shutil.ignore_patterns("__pycache__"))
    files = study_files(run / "study")
    edit_manifest(run, lambda m: m.update(experiment=study, study={
        "source": "/x", "files": [r for r, _ in files], "digest": digest_of(files), "analysis": True,
        "report": True}))


def test_the_bundled_study_is_recognised_byte_for_byte_and_an_edit_of_it_is_named(tmp_path: Path) -> None:
    run = golden_copy(tmp_path / "run")
    _bundled_copy(run, "germino_mnist_energy")
    assert resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True).kind == "bundled"
    (run / "study" / "README.md").write_text("a README edit runs nothing\n")
    _reseal(run)
    assert resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True).kind == "bundled"
    torch_wl = run / "study" / "workload_torch.py"
    torch_wl.write_text(torch_wl.read_text() + "\nimport os\nos.system('true')\n")
    _reseal(run)
    with pytest.raises(StudyError, match=r"against the bundled study of germino_mnist_energy: workload_torch\.py "
                                         r"differs"):
        resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True)


def _reseal(run: Path) -> None:
    files = study_files(run / "study")
    edit_manifest(run, lambda m: m["study"].update(digest=digest_of(files), files=[r for r, _ in files]))


def test_a_copy_the_manifest_does_not_record_is_refused(tmp_path: Path) -> None:
    run = golden_copy(tmp_path / "run")
    (run / "study").mkdir()
    (run / "study" / "wl.py").write_text("import os\n")
    with pytest.raises(StoreError, match=r"manifest does not record"):
        resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=False)
    shutil.rmtree(run / "study")
    with pytest.raises(StoreError, match=r"records no study copy"):
        resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=True)
    assert resume_code(run, RunDir.open(run).manifest(), StudyTrust(), declares_study=False).kind == "kit"


def test_a_cluster_job_runs_only_the_digest_it_was_handed(tmp_path: Path) -> None:
    from kit.executors.slurm import SlurmOptions, job_script

    _, run = _partial_run(tmp_path)
    man = RunDir.open(run).manifest()
    digest = resume_code(run, man, StudyTrust(), declares_study=True).digest
    assert digest is not None
    script = job_script(run, SlurmOptions(), "local", "cal_study", digest)
    assert f"--study-digest {digest}" in script
    assert resume_code(run, man, StudyTrust(allow_list=False), declares_study=True,
                       pinned_digest=digest).kind == "pinned"
    _plant_and_reseal(run, tmp_path / "m")
    with pytest.raises(StudyError, match=r"changed after the job was submitted"):
        resume_code(run, RunDir.open(run).manifest(), StudyTrust(trust_run_copy=True), declares_study=True,
                    pinned_digest=digest)


# -- 2. reproduce-all's state file is data -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_studies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two study folders (cal_a, cal_b) and a runs directory holding a real partial run of each (made once; each
    test attacks its own copy). Their code is on the allow-list of the config directory the runs were made with,
    which each test's config directory (fresh, see own_config) is given again by _experiments."""
    tmp = tmp_path_factory.mktemp("two-studies")
    old = os.environ.get("KIT_CONFIG_DIR")
    os.environ["KIT_CONFIG_DIR"] = str(tmp / "config")
    try:
        for name in ("cal_a", "cal_b"):
            folder = calibrated_study(tmp / "experiments" / name, reps=2, name=name)
            start_run(load_spec(folder), RunOptions(runs_root=tmp / "runs", max_trials=1))
    finally:
        if old is None:
            os.environ.pop("KIT_CONFIG_DIR", None)
        else:
            os.environ["KIT_CONFIG_DIR"] = old
    return tmp


def _experiments(tmp: Path, template: Path) -> tuple[Path, Path]:
    shutil.copytree(template / "experiments", tmp / "experiments")
    shutil.copytree(template / "runs", tmp / "runs", symlinks=True)
    shutil.copytree(template / "config", Path(os.environ["KIT_CONFIG_DIR"]), dirs_exist_ok=True)
    return tmp / "experiments", tmp / "runs"


def _write_state(runs: Path, entries: dict[str, dict[str, object]]) -> Path:
    path = runs / "reproduce-all" / "state.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 1, "studies": entries}))
    return path


def _run_of(runs: Path, name: str) -> str:
    return next(d.name for d in runs.iterdir() if d.name.endswith(f"-{name}"))


class _NoRun:
    def __call__(self, entry: object, resume: Path | None, on_run_dir: object) -> Path:
        raise AssertionError("a refused state must not run or resume anything")


def _reproduce(exps: Path, runs: Path, trust: StudyTrust | None = None) -> None:
    from kit.reproduce import Host, reproduce_all

    reproduce_all(runs, _NoRun(), profile="paper", experiments=exps, host=Host(), trust=trust)


@pytest.mark.parametrize("attack", ["other-study", "outside-link", "profile"])
def test_a_crafted_state_file_is_refused_with_its_key_path(tmp_path: Path, attack: str, two_studies: Path) -> None:
    exps, runs = _experiments(tmp_path, two_studies)
    if attack == "other-study":  # cal_a's entry names cal_b's run: its claims would be shown as cal_a's
        entries = {"cal_a": {"profile": "paper", "run_dir": _run_of(runs, "cal_b"), "status": "running"}}
        why = r"names a run of experiment 'cal_b', not of study 'cal_a'"
    elif attack == "outside-link":  # a link inside the runs directory to a run elsewhere
        elsewhere = tmp_path / "elsewhere"
        shutil.move(str(runs / _run_of(runs, "cal_a")), elsewhere)
        (runs / "planted").symlink_to(elsewhere)
        entries = {"cal_a": {"profile": "paper", "run_dir": "planted", "status": "running"}}
        why = r"never follows a link out of the runs directory"
    else:
        entries = {"cal_a": {"profile": "quick", "run_dir": _run_of(runs, "cal_a"), "status": "running"}}
        why = r"names a run of profile 'paper', listed as 'quick'"
    state = _write_state(runs, entries)
    with pytest.raises(StoreError, match=why) as err:
        _reproduce(exps, runs)
    assert err.value.where == f"{state}: studies.cal_a.run_dir"
    assert not (runs / "reproduce-all" / "summary.html").exists()


def test_a_state_naming_a_run_with_planted_code_is_refused_before_it_resumes(tmp_path: Path,
                                                                             two_studies: Path) -> None:
    exps, runs = _experiments(tmp_path, two_studies)
    run = runs / _run_of(runs, "cal_a")
    marker = tmp_path / "planted-ran"
    _plant_and_reseal(run, marker)
    state = _write_state(runs, {"cal_a": {"profile": "paper", "run_dir": run.name, "status": "running"}})
    with pytest.raises(StudyError, match=r"neither this kit's bundled study nor code you trusted") as err:
        _reproduce(exps, runs)
    assert str(err.value.where).startswith(f"{state}: studies.cal_a.run_dir -> ") and not marker.exists()
    # a recorded protocol that is not the study's (the run's spec edited) is refused too
    _write_state(runs, {"cal_b": {"profile": "paper", "run_dir": _run_of(runs, "cal_b"), "status": "running"}})
    edit_manifest(runs / _run_of(runs, "cal_b"), lambda m: m["spec"]["workload"].update(epochs=7))
    with pytest.raises(StoreError, match=r"recorded protocol is not study cal_b's as cal_b gives it \(spec\.workload\.epochs"):
        _reproduce(exps, runs)


# -- 7. every recorded number is checked before use --------------------------------------------------------------

@pytest.mark.parametrize(("edit", "key"), [
    (lambda m: m.update(sequential={"first": 10, "step": 10, "max_repetitions": 40, "alpha": 0.05,
                                    "margin": 0.99, "budget_s": None}), "sequential.margin"),
    (lambda m: m.update(sequential={"first": 2, "step": 1, "max_repetitions": 10_000, "alpha": 0.05,
                                    "margin": 0.05}), "sequential.step"),
    (lambda m: m.update(sequential={"first": 10, "step": 10, "max_repetitions": 40, "alpha": 0.05,
                                    "margin": 0.05, "budget_s": float("inf")}), "sequential.budget_s"),
    (lambda m: m["spec"]["design"].update(alpha=0.9), "spec.design.alpha"),
    (lambda m: m["spec"]["design"].update(disturbance_cpu=-1.0), "spec.design.disturbance_cpu"),
    (lambda m: m["spec"]["telemetry"].update(period_s=1e-9), "spec.telemetry.period_s"),
    (lambda m: m["spec"]["workload"].update(min_phase_s=-5.0), "spec.workload.min_phase_s"),
    (lambda m: m["spec"]["hypotheses"][0].update(family="of-one"), "spec.hypotheses[0].family"),
])
def test_an_out_of_range_recorded_number_is_a_store_error_with_its_key_path(
        tmp_path: Path, edit: object, key: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    run = golden_copy(tmp_path / "run")
    edit_manifest(run, edit)
    with pytest.raises(StoreError) as err:
        RunDir.open(run).manifest()
    assert str(err.value.where).endswith(f"manifest.json: {key}"), err.value
    code_, out = _main(monkeypatch, capsys, "report", str(run))
    assert code_ == ExitCode.INPUT and key in out and "Traceback" not in out, out


def test_the_kit_never_writes_a_margin_it_would_refuse_to_read() -> None:
    from kit.analysis.sequential_record import schedule

    with pytest.raises(ValueError, match=r"margin"):
        schedule(10, 10, 40, 0.05, margin=0.99)
    with pytest.raises(ValueError, match=r"looks"):
        schedule(2, 1, 10_000, 0.05)
    with pytest.raises(ValueError, match=r"max at most 10000"):
        schedule(200, 200, 20_000, 0.05)  # 100 looks, but a max_repetitions no reader would accept


def test_a_copy_swapped_after_the_check_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race the snapshot closes, end to end: the run's copy is replaced (and re-sealed) right after the kit
    checked it and wrote its snapshot; the resumed trials run the checked bytes, not the swapped ones."""
    import kit.run.resume

    _, run = _partial_run(tmp_path)
    marker = tmp_path / "swapped-ran"
    real = kit.run.resume.snapshot

    def swap_after(code: object) -> object:
        cm = real(code)  # type: ignore[arg-type]
        study_dir = cm.__enter__()
        _plant_and_reseal(run, marker)  # the attacker's move, between the check and the first trial

        class Box:
            def __enter__(self) -> object:
                return study_dir

            def __exit__(self, *exc: object) -> None:
                cm.__exit__(*exc)
        return Box()

    monkeypatch.setattr(kit.run.resume, "snapshot", swap_after)
    rd = resume_run(run, RunOptions(runs_root=tmp_path / "runs", max_trials=1))
    assert len(rd.finished_ids()) == 2 and not marker.exists()
    assert "Path(" in (run / "study" / "wl.py").read_text()  # the swap did happen
