"""Someone else's run is data, not code (issue 22): each test performs the attack for real.

A crafted run directory or bundle: study code that runs when it is only looked at, a verdict forged by
the bundle's own code, forged or stale derived files, processes that outlive their trial, links and
FIFOs planted where the kit reads and writes, markup and malformed values in the records.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _crafted import calibrated_study, edit_manifest, golden_copy, marker_code, plant_study
from typer.testing import CliRunner

from kit.analysis.analyze import analyze_run, current_analysis
from kit.cli import app
from kit.errors import ExitCode, KitError, StoreError
from kit.studies import StudyError
from kit.trust import StudyTrust

KIT = [sys.executable, "-m", "kit"]


def _kit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=timeout)


class Hung(Exception):
    pass


def _main(capsys: pytest.CaptureFixture[str], *args: str, timeout_s: int = 30) -> subprocess.CompletedProcess[str]:
    """`kit ARGS` through the CLI's own entry point (errors as the user sees them), in this process; a call that
    hangs (a FIFO opened for reading) is interrupted by SIGALRM after ``timeout_s`` and fails the test."""
    from unittest import mock

    import kit.cli

    def hung(signum: int, frame: object) -> None:
        raise Hung(f"kit {' '.join(args)} did not return within {timeout_s} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(timeout_s)
    try:
        with mock.patch.object(sys, "argv", ["kit", *args]):
            try:
                kit.cli.main()
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    cap = capsys.readouterr()
    return subprocess.CompletedProcess(["kit", *args], code, cap.out, cap.err)


def _cli(*args: str) -> tuple[int, str]:
    """The command in this process (CliRunner); a KitError as `kit` reports it (exit code and its one line)."""
    res = CliRunner().invoke(app, list(args))
    if isinstance(res.exception, KitError):
        return res.exception.exit_code, res.output + res.exception.one_line()
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


# -- 1. no code from a run directory runs without consent ----------------------------------------------------

@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A run whose study/ holds analysis.py and report.py that leave a marker, digest re-sealed by its author."""
    run = golden_copy(tmp_path / "runs" / "planted")
    marker = tmp_path / "marker"
    plant_study(run, marker_code(marker))
    return run, marker


def _no_marker(marker: Path) -> None:
    assert not marker.exists() and not Path(f"{marker}.report").exists(), "the run's own code ran"


def test_report_does_not_run_a_runs_study_code_and_says_so(planted: tuple[Path, Path]) -> None:
    run, marker = planted
    code, text = _cli("report", str(run))
    assert code == 0, text
    _no_marker(marker)
    notice = [line for line in text.splitlines() if "study code not run" in line]
    assert len(notice) == 1 and "--trust-study-code" in notice[0] and "kit trust" in notice[0], text
    html = (run / "report" / "index.html").read_text()
    assert "Study code not run" in html and "Planted study section" not in html
    assert json.loads((run / "analysis.json").read_text())["extras"] == {}


def test_compare_history_and_pack_do_not_run_it_either(planted: tuple[Path, Path], tmp_path: Path) -> None:
    run, marker = planted
    base = golden_copy(tmp_path / "runs" / "base")
    code, text = _cli("compare", str(base), str(run))
    assert code == 0, text
    code, text = _cli("history", str(tmp_path / "runs"), "--no-cache")
    assert code == 0, text
    code, text = _cli("pack", str(run), "--out", str(tmp_path / "bundle"))
    assert code == 0, text
    assert "study code not run" in text
    _no_marker(marker)


@pytest.mark.slow
def test_with_consent_the_sections_appear(planted: tuple[Path, Path], tmp_path: Path) -> None:
    run, marker = planted
    code, text = _cli("report", str(run), "--trust-study-code")
    assert code == 0, text
    assert marker.exists() and Path(f"{marker}.report").exists()  # it ran: in a child process (kit.study_child)
    assert "Planted study section" in (run / "report" / "index.html").read_text()
    assert json.loads((run / "analysis.json").read_text())["extras"] == {"calibrated": {"planted": 22}}
    # remembered consent: `kit trust RUN` puts the digest on the user's allow-list (outside the run)
    other = golden_copy(tmp_path / "other")
    plant_study(other, marker_code(tmp_path / "marker2"))
    code, text = _cli("trust", str(other))
    assert code == 0 and "trusted study code" in text, text
    code, text = _cli("report", str(other))
    assert code == 0 and "study code not run" not in text, text
    assert (tmp_path / "marker2").exists() and "Planted study section" in (other / "report" / "index.html").read_text()


def test_a_study_folder_named_on_the_command_line_is_used_instead(planted: tuple[Path, Path], tmp_path: Path) -> None:
    run, marker = planted
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "experiment.toml").write_text("")
    (mine / "report.py").write_text("def sections(manifest, analysis):\n"
                                    "    return [{'id': 'mine', 'title': 'My own section'}]\n")
    code, text = _cli("report", str(run), "--study", str(mine))
    assert code == 0, text
    _no_marker(marker)
    assert "My own section" in (run / "report" / "index.html").read_text()


@pytest.mark.slow
def test_an_exception_in_a_study_hook_is_the_studys_error(planted: tuple[Path, Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run, _ = planted
    plant_study(run, {"analysis.py": "def analyse(manifest, trials, values):\n    raise ValueError('broken study')\n"})
    with pytest.raises(StudyError, match=r"analyse\(\) raised ValueError: broken study") as info:
        analyze_run(run, trust=StudyTrust(trust_run_copy=True))
    assert "Traceback" in (info.value.detail or "") and "broken study" in info.value.detail
    proc = _main(capsys, "report", str(run), "--trust-study-code")
    assert proc.returncode == ExitCode.INPUT and "Traceback" not in proc.stderr and "broken study" in proc.stderr
    proc = _main(capsys, "--debug", "report", str(run), "--trust-study-code")
    assert proc.returncode == ExitCode.INPUT and "raise ValueError('broken study')" in proc.stderr  # the study's traceback


# -- 2. verify's verdict cannot be forged; the recorded protocol is the one re-run --------------------------

FORGER = """
import kit.verify
kit.verify.compare_claims = lambda old, new, tolerance: [
    {**c, "new_ratio": c["ratio"], "new_rejected": c["rejected"], "new_direction": c["direction"],
     "reproduced": True, "why": ""} for c in old]
"""


@pytest.fixture(scope="module")
def study_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real bundle of a study folder's run whose analysis.py rebinds verify's comparison when imported."""
    from kit.pack import pack
    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    tmp = tmp_path_factory.mktemp("forger")
    marker = tmp / "forger-ran"
    folder = calibrated_study(tmp / "study", reps=10, extra_files=marker_code(marker, FORGER))  # 10: claims tested
    rd = start_run(load_spec(folder), RunOptions(runs_root=tmp / "runs"))
    tgz = pack(rd.path)
    return Path(str(tgz).removesuffix(".tar.gz")), marker


@pytest.mark.slow
def test_bundle_code_cannot_forge_the_verdict(study_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    from kit.verify import VerifyOptions, verify

    bundle, marker = study_bundle
    # tolerance 0: no re-run reproduces a ratio exactly, so the honest verdict is "not reproduced"
    res = verify(bundle, VerifyOptions(runs_root=tmp_path / "v1", backend="local", trust_bundle_code=True,
                                       tolerance=0.0))
    assert marker.exists()  # the forger's module ran (trusted), but in a child process
    assert not res["claims_reproduced"] and not res["badges"]["results_reproduced"]
    assert any(not c["reproduced"] and "tolerance" in c["why"] for c in res["claims"])
    assert "UNSANDBOXED" in res["code_ran"]
    proc = _kit("verify", str(bundle), "--runs-dir", str(tmp_path / "v2"), "--backend", "local",
                "--trust-bundle-code", "--tolerance", "0", timeout=300)
    assert proc.returncode == 1 and "results reproduced: no" in proc.stdout, proc.stdout + proc.stderr
    assert "unchanged since they were packed" in proc.stdout and "does not say who packed them" in proc.stdout


@pytest.mark.slow
def test_a_study_spec_outside_the_runs_copy_is_never_loaded_as_code(study_bundle: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """A packer drops run/study/ and the manifest's study entry and points claims.json at a folder of their own
    beside it: the spec is read as text, and a study spec without the run's copy is refused before anything runs."""
    import shutil

    from kit.pack import write_sums
    from kit.verify import IntegrityError, VerifyOptions, verify

    bundle, _ = study_bundle
    root = tmp_path / "moved"
    shutil.copytree(bundle, root)
    shutil.copytree(root / "run" / "study", root / "evil")
    shutil.rmtree(root / "run" / "study")
    edit_manifest(root / "run", lambda m: m.pop("study"))
    meta = json.loads((root / "claims.json").read_text())
    meta["spec"] = "evil/experiment.toml"
    (root / "claims.json").write_text(json.dumps(meta))
    write_sums(root)
    runs = tmp_path / "runs"
    with pytest.raises(IntegrityError, match=r"holds no copy of that folder"):
        verify(root, VerifyOptions(runs_root=runs))
    assert not runs.exists()


@pytest.mark.slow
def test_bundle_code_does_not_run_unsandboxed_without_the_flag(study_bundle: tuple[Path, Path],
                                                              tmp_path: Path) -> None:
    from kit.verify import VerifyOptions, verify

    bundle, _ = study_bundle
    runs = tmp_path / "runs"
    with pytest.raises(KitError, match="would run it unsandboxed") as info:
        verify(bundle, VerifyOptions(runs_root=runs, backend="local"))
    assert "--trust-bundle-code" in (info.value.fix or "")
    assert not runs.exists()  # nothing was run


@pytest.mark.slow
def test_a_bundle_whose_study_protocol_differs_from_the_recorded_one_is_refused(
        study_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    from kit.pack import write_sums
    from kit.verify import IntegrityError, VerifyOptions, verify

    bundle, _ = study_bundle
    # the study copy asks for more repetitions; the manifest's study digest and SHA256SUMS re-sealed
    one = tmp_path / "one"
    shutil.copytree(bundle, one)
    toml = one / "run" / "study" / "experiment.toml"
    toml.chmod(0o644)
    toml.write_text(toml.read_text().replace("repetitions = 10", "repetitions = 11"))
    plant_study(one / "run", {})
    write_sums(one)
    with pytest.raises(IntegrityError, match=r"study's experiment\.toml is not the spec the run recorded"):
        verify(one, VerifyOptions(runs_root=tmp_path / "r1", backend="local", trust_bundle_code=True))
    # ... and the manifest's copy of the spec too (with its sha256 recomputed): the recorded plan decides
    two = tmp_path / "two"
    shutil.copytree(one, two)
    text = (two / "run" / "study" / "experiment.toml").read_text()

    def same_text(m: dict) -> None:
        import hashlib

        m["spec_source"]["text"] = text
        m["spec_source"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    edit_manifest(two / "run", same_text)
    spec_file = next((two / "spec").glob("*.toml"))
    spec_file.write_text(text)
    write_sums(two)
    with pytest.raises(IntegrityError, match=r"differs from the protocol the run recorded.*repetitions"):
        verify(two, VerifyOptions(runs_root=tmp_path / "r2", backend="local", trust_bundle_code=True))
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


# -- 3. derived files are recomputed unless this kit made them from these inputs ----------------------------

@pytest.mark.slow
def test_a_forged_analysis_never_changes_a_verdict(tmp_path: Path) -> None:
    from kit.compare import compare_runs

    a, b = golden_copy(tmp_path / "a"), golden_copy(tmp_path / "b")
    analyze_run(a), analyze_run(b)
    forged = json.loads((b / "analysis.json").read_text())
    for v in forged["values"]:
        if v["metric"] == "time_s" and v["value"] is not None:
            v["value"] *= 3.0  # identical raw data, a 3x "regression"
    (b / "analysis.json").write_text(json.dumps(forged))
    res = compare_runs(a, b).to_json()
    assert all(r["verdict"] != "regression" for r in res["rows"]), res["rows"]
    assert all(abs(r["ratio"] - 1.0) < 1e-9 for r in res["rows"] if r["metric"] == "time_s")
    # a seal copied from another run (or re-computed without this user's key) does not make it current
    forged["seal"] = json.loads((a / "analysis.json").read_text())["seal"]
    (b / "analysis.json").write_text(json.dumps(forged))
    assert current_analysis(b)[1] is True


def test_an_edited_manifest_makes_the_analysis_stale(tmp_path: Path) -> None:
    run = golden_copy(tmp_path / "run")
    analyze_run(run)
    assert current_analysis(run)[1] is False  # sealed by this user's kit from these inputs: reused
    # any level but the stored one shows the edit was read; 0.01, not an extreme one such as 1e-9, whose power
    # searches simulate up to hundreds of pairs (half a minute) without saying more about staleness (issue 44)
    edit_manifest(run, lambda m: m["spec"]["design"].update(alpha=0.01))
    analysis, recomputed = current_analysis(run)
    assert recomputed and analysis.alpha == 0.01
    (run / "nodes").mkdir()
    (run / "nodes" / "n1.json").write_text(json.dumps({"host": "n1"}))
    assert current_analysis(run)[1] is True  # nodes/ is an input too


def test_a_resume_with_an_edited_spec_copy_and_a_recomputed_digest_is_refused(tmp_path: Path) -> None:
    import hashlib

    from kit.errors import PlanError
    from kit.run import RunOptions, resume_run

    run = golden_copy(tmp_path / "run")

    def edit(m: dict) -> None:
        text = m["spec_source"]["text"].replace("train_s = 0.06", "train_s = 0.3")
        assert text != m["spec_source"]["text"]
        m["spec_source"]["text"] = text
        m["spec_source"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()  # re-sealed by the editor
    edit_manifest(run, edit)
    with pytest.raises(PlanError, match=r"does not resolve to the protocol the run recorded.*train_s"):
        resume_run(run, RunOptions(runs_root=tmp_path))
    edit_manifest(run, lambda m: m["spec_source"].pop("sha256"))  # or deleted
    with pytest.raises(PlanError, match="does not resolve to the protocol"):
        resume_run(run, RunOptions(runs_root=tmp_path))


# -- 4. every process of a trial ends with the trial ---------------------------------------------------------

def _alive_with(token: str) -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass
    return out


@pytest.mark.slow
def test_a_daemon_left_by_a_trial_ends_with_it_and_is_recorded(tmp_path: Path) -> None:
    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    token = f"kit-leftover-{os.getpid()}-{time.time_ns()}"
    folder = calibrated_study(tmp_path / "study", reps=2, leave_token=token)
    rd = start_run(load_spec(folder), RunOptions(runs_root=tmp_path / "runs"))
    assert _alive_with(token) == []  # each busy daemon ended with its trial
    recs = [json.loads(p.read_text()) for p in (rd.path / "trials").glob("*.json")]
    assert recs and all(r["backend"]["leftover_count"] == 1 for r in recs)
    assert all(token in r["backend"]["leftover_processes"][0]["cmdline"] for r in recs)
    threats = {t["rule"]: t for t in analyze_run(rd.path).to_json()["validity"]}
    assert threats["trial_processes_left"]["numbers"]["trials"] and threats["trial_processes_left"]["status"] == "threat"


def test_a_trial_killed_on_its_time_limit_takes_its_daemons_with_it(tmp_path: Path) -> None:
    from kit.backends.local import LocalBackend
    from kit.collectors.base import TrialTarget

    token = f"kit-timeout-{os.getpid()}-{time.time_ns()}"
    work = tmp_path / "work"
    work.mkdir()
    (work / "request.json").write_text("{}")
    fake = tmp_path / "fakepython"
    fake.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, subprocess, sys, time
        if sys.argv[1] == "-I":  # the reaper itself: run it with the real interpreter
            os.execv({sys.executable!r}, [{sys.executable!r}, *sys.argv[1:]])
        if os.fork() == 0:
            os.setsid()
            subprocess.Popen([{sys.executable!r}, "-c", "import time; time.sleep(600)", {token!r}])
            os._exit(0)
        time.sleep(600)
        """))
    fake.chmod(0o755)
    out = LocalBackend(python=str(fake)).run_trial("pytorch", work, tmp_path, 2.0, TrialTarget())
    assert out.status == "timeout" and _alive_with(token) == []
    assert out.detail["leftover_count"] >= 1


# -- 5. reads and writes never follow what a run directory plants -------------------------------------------

@pytest.mark.parametrize("plant", ["fifo", "devzero"])
@pytest.mark.parametrize("name", ["manifest.json", "nodes/n1.json", "samples/r000-c00-pytorch.parquet"])
def test_fifos_and_device_links_are_refused_before_they_are_read(tmp_path: Path, plant: str, name: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """No clock asserted: a FIFO opened for reading (no writer) blocks forever and /dev/zero never ends, so a kit
    that read them would hang, which _main's alarm turns into a failure (a hang guard only); what proves the
    defence is the refusal itself, naming the planted file and what it is."""
    run = golden_copy(tmp_path / "run")
    target = run / name
    target.parent.mkdir(exist_ok=True)
    target.unlink(missing_ok=True)
    os.mkfifo(target) if plant == "fifo" else os.symlink("/dev/zero", target)
    proc = _main(capsys, "report", str(run))
    assert proc.returncode == ExitCode.INPUT, proc.stderr
    assert ("FIFO" if plant == "fifo" else "symbolic link") in proc.stderr and "Traceback" not in proc.stderr
    assert name.split("/")[-1] in proc.stderr


def test_history_over_a_directory_with_one_fifo_manifest_ends_with_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    golden_copy(tmp_path / "runs" / "a")
    bad = golden_copy(tmp_path / "runs" / "b")
    (bad / "manifest.json").unlink()
    os.mkfifo(bad / "manifest.json")
    proc = _main(capsys, "history", str(tmp_path / "runs"), "--no-cache")
    assert proc.returncode == ExitCode.INPUT and "FIFO" in proc.stderr and "Traceback" not in proc.stderr


def test_planted_links_for_lock_events_and_report_leave_their_targets_untouched(tmp_path: Path) -> None:
    from kit.report import write_report
    from kit.run import RunOptions, resume_run

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = golden_copy(tmp_path / "run")
    (run / ".lock").unlink(missing_ok=True)
    os.symlink(victim, run / ".lock")
    with pytest.raises(StoreError, match="lock file is a symbolic link"):
        resume_run(run, RunOptions(runs_root=tmp_path))
    (run / ".lock").unlink()
    (run / "events.jsonl").unlink()
    os.symlink(victim, run / "events.jsonl")
    with pytest.raises(StoreError, match=r"events\.jsonl is a symbolic link"):
        resume_run(run, RunOptions(runs_root=tmp_path))
    assert victim.read_text() == "precious\n"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, run / "report")
    analysis = analyze_run(run)
    with pytest.raises(StoreError, match=r"report/ in the run directory is a symbolic link"):
        write_report(run, analysis, ("html", "latex"))
    assert list(elsewhere.iterdir()) == []
    # analysis.json planted as a link: the write replaces the link, the target keeps its content
    (run / "analysis.json").unlink()
    os.symlink(victim, run / "analysis.json")
    analyze_run(run)
    assert victim.read_text() == "precious\n" and not (run / "analysis.json").is_symlink()


def test_a_link_planted_inside_the_report_directory_is_not_written_through(tmp_path: Path) -> None:
    from kit.report import write_report

    run = golden_copy(tmp_path / "run")
    victim = tmp_path / "victim.tex"
    victim.write_text("precious\n")
    (run / "report" / "latex").mkdir(parents=True)
    os.symlink(victim, run / "report" / "latex" / "report.tex")
    os.symlink(victim, run / "report" / "index.html")
    write_report(run, analyze_run(run), ("html", "latex"))
    assert victim.read_text() == "precious\n"
    assert not (run / "report" / "latex" / "report.tex").is_symlink()


@pytest.mark.slow
def test_a_killed_pack_does_not_block_the_next(tmp_path: Path) -> None:
    run = golden_copy(tmp_path / "run")
    out = tmp_path / "bundle"
    # SIGKILL in the middle of a real pack: after the run's files were copied, before the archive
    snippet = textwrap.dedent(f"""
        import os, signal
        import kit.pack as p
        real = p._fill_bundle
        def fill(*a, **k):
            real(*a, **k)
            os.kill(os.getpid(), signal.SIGKILL)
        p._fill_bundle = fill
        p.pack({str(run)!r}, {str(out)!r})
        """)
    proc = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and not Path(f"{out}.tar.gz").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".bundle.tmp-")]  # the killed pack's temporary
    proc = _kit("pack", str(run), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "SHA256SUMS").is_file() and Path(f"{out}.tar.gz").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle.tmp-")]  # removed by the next pack


# -- 6. markup, malformed records and values, options -------------------------------------------------------

def test_markup_in_a_manifest_value_is_shown_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = golden_copy(tmp_path / "run")
    edit_manifest(run, lambda m: m["spec"]["design"].update(alpha="[/x] [bold]loud"))
    proc = _main(capsys, "report", str(run))
    assert proc.returncode == ExitCode.INPUT and "Traceback" not in proc.stderr, proc.stderr
    assert "'[/x] [bold]loud'" in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3


@pytest.mark.parametrize("content,match", [
    ("[1, 2, 3]", "JSON list, not a JSON object"),
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ('{"schema_version": 1, "experiment": ', "not valid JSON"),
    ("\udcff", "not UTF-8"),
])
def test_malformed_manifests_are_one_line_errors(tmp_path: Path, content: str, match: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = golden_copy(tmp_path / "run")
    (run / "manifest.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(StoreError, match=match):
        analyze_run(run)
    proc = _main(capsys, "report", str(run))
    assert proc.returncode == ExitCode.INPUT and "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def _edit_trial(run: Path, fn: object) -> str:
    p = run / "trials" / "r003-c00-pytorch.json"
    rec = json.loads(p.read_text())
    fn(rec)  # type: ignore[operator]
    p.write_text(json.dumps(rec))
    return rec["trial_id"]


@pytest.mark.parametrize("value,why", [
    (True, "is not a number"), (0.0, "is not a time in"), (1e300, "is not a time in"), ("0.5", "is not a number"),
    (-1.0, "is not a time in"), (float("nan"), "not finite")])
def test_impossible_times_exclude_the_trial(tmp_path: Path, value: object, why: str) -> None:
    run = golden_copy(tmp_path / "run")
    tid = _edit_trial(run, lambda r: r["results"].update(train_time_s=value))
    excluded = {e["trial_id"]: e for e in analyze_run(run).excluded_trials}
    assert excluded[tid]["status"] == "invalid" and why in excluded[tid]["reason"]


def test_an_accuracy_outside_zero_one_excludes_the_trial(tmp_path: Path) -> None:
    run = golden_copy(tmp_path / "run")
    tid = _edit_trial(run, lambda r: r["results"].update(test_accuracy=7.5))
    excluded = {e["trial_id"]: e for e in analyze_run(run).excluded_trials}
    assert "is not a fraction in [0, 1]" in excluded[tid]["reason"]


@pytest.mark.parametrize("field,value", [("phases", [1, 2]), ("results", "fast"), ("block", 99), ("arm", "mxnet"),
                                         ("markers", {"a": 1})])
def test_a_malformed_trial_record_is_refused_naming_the_key(tmp_path: Path, field: str, value: object) -> None:
    run = golden_copy(tmp_path / "run")
    _edit_trial(run, lambda r: r.update({field: value}))
    with pytest.raises(StoreError, match=rf"r003-c00-pytorch.json: {field} must be"):
        analyze_run(run)


def test_a_parquet_with_other_columns_is_an_error_naming_the_file(tmp_path: Path) -> None:
    import pandas as pd

    run = golden_copy(tmp_path / "run")
    pd.DataFrame({"a": [1.0], "b": ["x"]}).to_parquet(run / "samples" / "r000-c00-pytorch.parquet")
    with pytest.raises(StoreError, match=r"r000-c00-pytorch.parquet: samples file has the columns \['a', 'b'\]"):
        analyze_run(run)


@pytest.mark.parametrize("threshold", ["-1", "nan", "0", "inf"])
def test_thresholds_are_validated(tmp_path: Path, threshold: str) -> None:
    a, b = golden_copy(tmp_path / "runs" / "a"), golden_copy(tmp_path / "runs" / "b")
    for args in (("compare", str(a), str(b)), ("history", str(tmp_path / "runs"), "--no-cache")):
        code, text = _cli(*args, "--threshold", threshold)
        assert code == ExitCode.INPUT and "is not a relative change in (0, 10)" in text, text


@pytest.mark.slow
@pytest.mark.mount
def test_compare_and_history_work_on_read_only_runs_without_an_analysis(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mnt = tmp_path / "ro"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        a, b = golden_copy(mnt / "runs" / "a"), golden_copy(mnt / "runs" / "b")
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        code, text = _cli("compare", str(a), str(b))
        assert code == 0 and ("no change" in text or "inconclusive" in text), text
        code, text = _cli("history", str(mnt / "runs"), "--no-cache")
        assert code == 0 and "no step" in text, text
        assert not (a / "analysis.json").exists()  # analysed in memory
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_history_finds_a_step_in_the_newest_of_three_runs(tmp_path: Path) -> None:
    from kit.history import history

    runs = tmp_path / "runs"
    for i in range(3):
        run = golden_copy(runs / f"r{i}")
        edit_manifest(run, lambda m, i=i: m.update(label=f"v{i}", started=1000.0 + i))
    for p in (runs / "r2" / "trials").glob("*-pytorch.json"):  # the newest run: 15x slower training
        rec = json.loads(p.read_text())
        rec["results"]["train_time_s"] *= 15
        rec["wall_s"] *= 15  # the trial took that much longer (a time is bounded by its trial's wall time)
        p.write_text(json.dumps(rec))
    res = history(runs, "time_s", "train", "pytorch", use_cache=False).to_json()
    assert [(s["index"], s["verdict"]) for s in res["steps"]] == [(2, "regression")]
    assert res["steps"][0]["ratio"] > 10 and res["caveats"]  # and it says what 3 runs cannot estimate


def test_bytecode_planted_beside_trusted_source_never_runs(planted: tuple[Path, Path], tmp_path: Path) -> None:
    """The digest covers a study's sources; a .pyc in study/__pycache__ (unchecked hash: never compared with the
    source) or beside them is never imported, even when the user trusts the digest."""
    import py_compile

    run, _ = planted
    evil = tmp_path / "evil.py"
    evil.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'pyc-ran')!r}).write_text('x')\n"
                    "def analyse(manifest, trials, values):\n    return {'from': 'bytecode'}\n")
    (run / "study" / "__pycache__").mkdir()
    tag = sys.implementation.cache_tag
    py_compile.compile(str(evil), cfile=str(run / "study" / "__pycache__" / f"analysis.{tag}.pyc"),
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    py_compile.compile(str(evil), cfile=str(run / "study" / "helper.pyc"))
    analysis = analyze_run(run, trust=StudyTrust(trust_run_copy=True))
    assert analysis.extras == {"calibrated": {"planted": 22}}  # the source ran, not the bytecode
    assert not (tmp_path / "pyc-ran").exists()


def test_a_studys_report_figures_keep_their_pdf_through_the_child(tmp_path: Path) -> None:
    from kit.report.context import extra_sections
    from kit.store import RunDir
    from kit.studies import resolve_hooks
    from tests._runs import bare_analysis

    run = golden_copy(tmp_path / "run")
    plant_study(run, {"report.py": textwrap.dedent("""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from kit.report.figures import to_svg

        def sections(manifest, analysis):
            fig, ax = plt.subplots()
            ax.plot([0, 1], [1, 0])
            return [{"id": "fig", "title": "A figure", "figures": [{"id": "line", "title": "line", "svg": to_svg(fig)}]}]
        """)})
    man = RunDir.open(run).manifest()
    (sec,) = extra_sections(man, bare_analysis(), resolve_hooks(run, man, StudyTrust(trust_run_copy=True)))
    svg = sec["figures"][0]["svg"]
    assert str(svg).startswith("<svg") and svg.pdf.startswith(b"%PDF")  # the LaTeX report gets its PDF


def test_an_exited_child_the_harness_did_not_wait_for_is_not_a_leftover(tmp_path: Path) -> None:
    from kit.backends.local import REAPER, read_report, wait_reaper

    r, w = os.pipe()
    code = "import subprocess, time\nsubprocess.Popen(['true'])\ntime.sleep(0.5)\n"  # a zombie when it exits
    proc = subprocess.Popen([sys.executable, "-I", str(REAPER), str(w), "--", sys.executable, "-c", code],
                            pass_fds=(w,), start_new_session=True)
    os.close(w)
    assert wait_reaper(proc, 30) is False and proc.returncode == 0
    rec = read_report(r)
    os.close(r)
    assert rec["leftover_count"] == 0, rec
