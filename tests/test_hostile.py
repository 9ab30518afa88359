"""Hostile bundles, performed for real: each test crafts the attack and checks the defence.

An attacker who crafts a bundle can also rewrite its SHA256SUMS, so integrity
alone proves nothing about a crafted bundle; these tests re-seal every crafted
bundle (``write_sums``) so that only the defence under test can stop it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kit import verify as packmod
from kit.errors import ExitCode
from kit.pack import pack, write_sums
from kit.run import RunOptions, start_run
from kit.spec import load_spec
from kit.verify import IntegrityError, check_integrity, verify

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bundle of a small real run (3 blocks of the calibrated workload)."""
    tmp = tmp_path_factory.mktemp("hostile")
    spec = tmp / "calibrated.toml"
    spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 3"))
    rd = start_run(load_spec(spec), RunOptions(runs_root=tmp / "runs"))
    tgz = pack(rd.path)
    return tgz.parent / tgz.name.removesuffix(".tar.gz")


def _copy(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def _seal(root: Path) -> Path:
    """Re-write SHA256SUMS (as an attacker can) and tar the bundle; returns the .tar.gz."""
    write_sums(root)
    tgz = root.parent / f"{root.name}.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    return tgz


def _cli_verify(target: Path, runs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "verify", str(target), "--runs-dir", str(runs)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_bundle_without_claims_is_refused_not_reproduced(bundle_dir: Path, tmp_path: Path) -> None:
    root = _copy(bundle_dir, tmp_path / "noclaims")
    # consistent forgery: no hypotheses in the analysis, no claims in claims.json
    analysis = json.loads((root / "run" / "analysis.json").read_text())
    analysis["hypotheses"] = []
    (root / "run" / "analysis.json").write_text(json.dumps(analysis))
    meta = json.loads((root / "claims.json").read_text())
    meta["claims"] = []
    (root / "claims.json").write_text(json.dumps(meta))
    write_sums(root)
    runs = tmp_path / "runs"
    with pytest.raises(IntegrityError, match="no claims"):
        verify(root, packmod.VerifyOptions(runs_root=runs))
    assert not runs.exists()  # nothing was re-run
    proc = _cli_verify(root, runs)
    assert proc.returncode == ExitCode.INPUT and "no claims" in proc.stderr and "Traceback" not in proc.stderr
    assert "results reproduced" not in proc.stdout.lower()


@pytest.mark.slow
@pytest.mark.parametrize("spec_path", ["/etc/passwd", "../outside.toml", "spec/../../outside.toml"])
def test_a_spec_path_outside_the_bundle_is_refused(bundle_dir: Path, tmp_path: Path, spec_path: str) -> None:
    root = _copy(bundle_dir, tmp_path / "b")
    # an experiment that is not the bundled one, where the crafted path points
    (tmp_path / "outside.toml").write_text((root / "spec" / "calibrated.toml").read_text())
    meta = json.loads((root / "claims.json").read_text())
    meta["spec"] = spec_path
    (root / "claims.json").write_text(json.dumps(meta))
    write_sums(root)
    runs = tmp_path / "runs"
    with pytest.raises(IntegrityError, match="not a path inside the bundle"):
        verify(root, packmod.VerifyOptions(runs_root=runs))
    assert not runs.exists()


@pytest.mark.slow
def test_claims_that_disagree_with_the_bundled_analysis_are_refused(bundle_dir: Path, tmp_path: Path) -> None:
    root = _copy(bundle_dir, tmp_path / "forged")
    meta = json.loads((root / "claims.json").read_text())
    meta["claims"][0]["rejected"] = not meta["claims"][0]["rejected"]
    meta["claims"][0]["tested"] = True
    (root / "claims.json").write_text(json.dumps(meta))
    write_sums(root)
    with pytest.raises(IntegrityError, match=r"claims\.json is not what the bundled raw data give"):
        verify(root, packmod.VerifyOptions(runs_root=tmp_path / "runs"))


@pytest.mark.slow
def test_a_bundled_analysis_with_a_value_of_the_wrong_type_is_refused(bundle_dir: Path, tmp_path: Path) -> None:
    """The typed reader reads a value of the wrong type as empty; a forged ``"tested": "no"`` on an untested
    hypothesis (typed: False, as the kit's own) must still be told apart from the kit's analysis."""
    root = _copy(bundle_dir, tmp_path / "typed")
    analysis = json.loads((root / "run" / "analysis.json").read_text())
    rows = [h for h in analysis["hypotheses"] if h.get("tested") is False] or analysis["hypotheses"][:1]
    rows[0]["tested"] = "no" if rows[0].get("tested") is False else "yes"
    (root / "run" / "analysis.json").write_text(json.dumps(analysis))
    write_sums(root)
    with pytest.raises(IntegrityError, match=r"the bundled analysis\.json is not the analysis of the bundled raw data"):
        verify(root, packmod.VerifyOptions(runs_root=tmp_path / "runs"))


@pytest.mark.slow
def test_another_experiment_in_the_bundled_spec_is_refused(bundle_dir: Path, tmp_path: Path) -> None:
    root = _copy(bundle_dir, tmp_path / "other")
    spec = root / "spec" / "calibrated.toml"
    spec.write_text(spec.read_text().replace('id = "calibrated"', 'id = "something_else"'))
    write_sums(root)
    runs = tmp_path / "runs"
    # the spec is not the one the run recorded (manifest spec_source.text): the re-run would follow another protocol
    with pytest.raises(IntegrityError, match="not the spec the run recorded"):
        verify(root, packmod.VerifyOptions(runs_root=runs))
    assert not runs.exists()


@pytest.mark.slow
def test_a_link_in_a_bundle_directory_is_never_followed(bundle_dir: Path, tmp_path: Path) -> None:
    root = _copy(bundle_dir, tmp_path / "link")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host file")
    os.symlink(secret, root / "run" / "stolen.txt")
    with pytest.raises(IntegrityError, match=r"link or special file: run/stolen\.txt"):
        check_integrity(root)


def _bomb(path: Path, member_bytes: int) -> None:
    """A small .tar.gz whose one member expands to ``member_bytes`` zeros."""

    class Zeros(io.RawIOBase):
        def __init__(self, n: int) -> None:
            self.left = n

        def readable(self) -> bool:
            return True

        def readinto(self, b: bytearray) -> int:  # type: ignore[override]
            k = min(len(b), self.left)
            b[:k] = bytes(k)
            self.left -= k
            return k

    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("bundle/huge.bin")
        info.size = member_bytes
        tar.addfile(info, io.BufferedReader(Zeros(member_bytes), 1 << 20))


@pytest.mark.slow
def test_a_bundle_with_a_huge_member_is_refused_before_extraction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = tmp_path / "bomb.tar.gz"
    _bomb(bomb, packmod.MAX_MEMBER_BYTES + 1)  # 1 GiB + 1 byte of zeros in a few megabytes
    assert bomb.stat().st_size < 8 << 20
    extracted: list[str] = []
    real = tarfile.TarFile.extractall

    def spy(self: tarfile.TarFile, *args: object, **kwargs: object) -> None:
        extracted.append(str(self.name))
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tarfile.TarFile, "extractall", spy)
    with pytest.raises(IntegrityError, match=r"huge.bin' is 1073741825 bytes, more than the limit"):
        verify(bomb, packmod.VerifyOptions(runs_root=tmp_path / "runs"))
    assert extracted == []  # refused from the headers, nothing written (the spy, not a clock, says so)


def test_member_count_and_total_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    many = tmp_path / "many.tar.gz"
    with tarfile.open(many, "w:gz") as tar:
        for i in range(30):
            info = tarfile.TarInfo(f"bundle/f{i}")
            info.size = 1000
            tar.addfile(info, io.BytesIO(bytes(1000)))
    monkeypatch.setattr(packmod, "MAX_MEMBERS", 20)
    with pytest.raises(IntegrityError, match="30 members, more than the limit of 20"):
        verify(many)
    monkeypatch.setattr(packmod, "MAX_MEMBERS", 100)
    monkeypatch.setattr(packmod, "MAX_TOTAL_BYTES", 20_000)
    with pytest.raises(IntegrityError, match="add up to more than the limit of 20000 bytes"):
        verify(many)


def test_a_link_member_is_an_integrity_error_with_exit_2(tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("bundle/escape")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(IntegrityError, match="'bundle/escape' is a link or special file"):
        verify(evil)
    proc = _cli_verify(evil, tmp_path / "runs")
    assert proc.returncode == ExitCode.INPUT, proc.stderr
    assert "link or special file" in proc.stderr and "internal error" not in proc.stderr.lower()
    assert "Traceback" not in proc.stderr


def test_a_traversal_member_is_an_integrity_error(tmp_path: Path) -> None:
    evil = tmp_path / "trav.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(IntegrityError, match="bundle member refused"):
        verify(evil)
    assert not (tmp_path.parent / "escaped.txt").exists()


@pytest.mark.slow
def test_a_stale_analysis_is_recomputed_by_compare_history_and_pack(tmp_path: Path) -> None:
    """An analysis made while the run was incomplete must not answer for the finished run."""
    from kit.analysis.analyze import analyze_run, current_analysis
    from kit.compare import load_analysis
    from kit.freshness import DIGEST_KEY
    from kit.history import collect
    from kit.run import resume_run

    spec = tmp_path / "calibrated.toml"
    spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 3"))
    rd = start_run(load_spec(spec), RunOptions(runs_root=tmp_path / "runs", max_trials=4))
    early = analyze_run(rd.path)
    n_early = len(early.values)
    resume_run(rd.path, RunOptions(runs_root=tmp_path / "runs"))  # finishes the plan, analysis.json untouched
    stale = json.loads((rd.path / "analysis.json").read_text())
    assert stale[DIGEST_KEY] == early.raw_digest and len(stale["values"]) == n_early
    fresh = load_analysis(rd.path)
    assert len(fresh.values) > n_early and fresh.raw_digest != early.raw_digest
    _, recomputed = current_analysis(rd.path)
    assert not recomputed  # now current: read, not recomputed
    # an edited trial file makes it stale again
    trial = next((rd.path / "trials").glob("*.json"))
    trial.write_text(trial.read_text().replace('"status": "ok"', '"status": "error"', 1))
    _, recomputed = current_analysis(rd.path)
    assert recomputed
    hist = [r.to_json() for r in collect(tmp_path / "runs", "time_s", "train", None, None)]
    assert hist and hist[0]["n"] == sum(1 for v in load_analysis(rd.path).values
                                        if v.metric == "time_s" and v.phase == "train" and v.arm == hist[0]["arm"]
                                        and not v.warmup and v.status == "ok" and v.value is not None)
    # pack re-analyses before packing, and verify refuses a bundle whose analysis is stale
    stale["values"] = stale["values"][:2]
    (rd.path / "analysis.json").write_text(json.dumps(stale))
    root = Path(str(pack(rd.path)).removesuffix(".tar.gz"))
    packed = json.loads((root / "run" / "analysis.json").read_text())
    assert packed[DIGEST_KEY] == fresh.raw_digest or len(packed["values"]) > 2
    stale["hypotheses"][0]["rejected"] = not stale["hypotheses"][0]["rejected"]
    (root / "run" / "analysis.json").write_text(json.dumps(stale))
    write_sums(root)
    with pytest.raises(IntegrityError, match=r"bundled analysis\.json is not the analysis of the bundled raw data"):
        verify(root, packmod.VerifyOptions(runs_root=tmp_path / "verify-runs"))


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("smallrun")
    spec = tmp / "calibrated.toml"
    spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 2"))
    return start_run(load_spec(spec), RunOptions(runs_root=tmp / "runs")).path


def _status_cli(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "status", str(run)], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["duplicate", "unknown", "link"])
def test_trial_files_outside_the_plan_are_refused(small_run: Path, tmp_path: Path, attack: str) -> None:
    import shutil

    from kit.analysis.analyze import analyze_run
    from kit.errors import StoreError

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    trials = sorted((run / "trials").glob("*.json"))
    assert len(trials) == 6  # 3 blocks x 2 frameworks
    if attack == "duplicate":  # a copy under another name: the same trial twice
        bad = run / "trials" / "zz-copy.json"
        shutil.copy(trials[0], bad)
        match = r"recorded twice"
    elif attack == "unknown":  # a trial id the plan never had
        rec = json.loads(trials[0].read_text())
        rec["trial_id"] = "b099-pytorch"
        bad = run / "trials" / "b099-pytorch.json"
        bad.write_text(json.dumps(rec))
        match = r"not in the run's plan"
    else:  # a link to a file outside the run directory
        outside = tmp_path / "outside.json"
        shutil.copy(trials[0], outside)
        trials[0].unlink()
        bad = trials[0]
        os.symlink(outside, bad)
        match = r"symbolic link; refused"
    with pytest.raises(StoreError, match=match) as info:
        analyze_run(run)
    assert str(bad) in str(info.value)
    proc = _status_cli(run)
    assert proc.returncode == ExitCode.INPUT and bad.name in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def _procs_mentioning(text: str) -> dict[int, str]:
    """PID -> command line of every live process whose command line contains ``text`` (zombies excluded)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            out[int(d.name)] = cmd
    return out


@pytest.mark.slow
@pytest.mark.torchvision  # patel_distributed's DDP ranks train resnet18 from torchvision.models
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_ddp_ranks_die_with_the_kit(tmp_path: Path, sig: str) -> None:
    """Kill `kit run` while torchrun's DDP ranks (each in its own session) train: none may survive."""
    import signal

    runs = tmp_path / "runs"
    spec = Path(__file__).parents[1] / "experiments" / "patel_distributed" / "experiment.toml"
    kit = subprocess.Popen([sys.executable, "-m", "kit", "run", str(spec), "--profile", "quick", "--runs-dir", str(runs)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        ranks: dict[int, str] = {}
        while time.monotonic() < deadline and kit.poll() is None:
            ranks = {p: c for p, c in _procs_mentioning(str(runs)).items() if "zoo_ddp_worker" in c}
            if len(ranks) >= 2:
                break
            time.sleep(0.2)
        assert len(ranks) >= 2, "the DDP ranks never started"
        kit.send_signal(getattr(signal, sig))
        kit.wait(timeout=120)
        deadline = time.monotonic() + 30
        left = _procs_mentioning(str(runs))
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _procs_mentioning(str(runs))
        assert not left, f"processes of the trial outlived the kit ({sig}): {left}"
    finally:
        for pid in _procs_mentioning(str(runs)):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        if kit.poll() is None:
            kit.kill()


LENET = Path(__file__).parents[1] / "experiments" / "florencio2019_lenet" / "experiment.toml"


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = LENET.read_text()
    assert old in text, old
    out = tmp_path / "variant.toml"
    out.write_text(text.replace(old, new, 1))
    return out


@pytest.mark.parametrize(("old", "new", "key", "expected"), [
    ("timeout_s = ", "timeout_s = nan # ", "design.timeout_s", "finite number"),
    ("baseline_s = 10\n", "baseline_s = inf\n", "telemetry.baseline_s", "finite number"),
    ("cooldown_max_s = 120\n", "cooldown_max_s = -inf\n", "telemetry.cooldown_max_s", "finite number"),
    ("learning_rate = 0.01", "learning_rate = nan", "workload.learning_rate", "finite number"),
    ("repetitions = 100 ", "repetitions = 1000000000 ", "design.repetitions", "[2, 10000]"),
    ("timeout_s = ", "timeout_s = 1e300 # ", "design.timeout_s", "at most 1000000000"),
    ("baseline_s = 10\n", "baseline_s = 1e6\n", "telemetry.baseline_s", "[0, 3600]"),
])
def test_impossible_spec_numbers_are_refused_at_load(tmp_path: Path, old: str, new: str, key: str,
                                                     expected: str) -> None:
    from kit.errors import SpecError

    bad = _variant(tmp_path, old, new)
    with pytest.raises(SpecError) as info:
        load_spec(bad)
    msg = info.value.one_line()
    assert key in msg and expected in msg, msg


def test_a_plan_too_large_is_refused_before_it_is_built(tmp_path: Path) -> None:
    """9000 repetitions x 2 frameworks x 20 grid values: counted, never built. No clock: a spy on
    ``Spec.configurations`` (the one place configurations are built, which every check and the plan iterate) says
    the refusal came before anything was built."""
    from kit.errors import SpecError
    from kit.spec import Spec

    built: list[int] = []
    real = Spec.configurations

    def spy(self: Spec) -> list[dict[str, object]]:
        built.append(1)
        return real(self)

    ok = _variant(tmp_path, "repetitions = 100 ", "repetitions = 10 ")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Spec, "configurations", spy)
        load_spec(ok)
        assert built, "the spy does not see configurations being built"  # the spy works: a plan in bounds is built
        built.clear()
        bad = _variant(tmp_path, "repetitions = 100 ", "repetitions = 9000 ")
        bad.write_text(bad.read_text() + "\n[grid]\nbatch_size = [" + ", ".join(str(i) for i in range(1, 21)) + "]\n")
        with pytest.raises(SpecError, match=r"a plan of at most 200000 trials; 20 configuration\(s\) x 18002"):
            load_spec(bad)
        assert built == []  # counted, never built
        huge = _variant(tmp_path, "repetitions = 100 ", "repetitions = 10 ")
        huge.write_text(huge.read_text() + "\n[grid]\n" + "\n".join(
            f"{k} = [{', '.join(str(i) for i in range(1, 101))}]" for k in ("batch_size", "epochs", "warmup_steps"))
            + "\n")
        with pytest.raises(SpecError, match=r"at most 10000 configurations"):
            load_spec(huge)  # 10^6 configurations: refused while counting
        assert built == []


def test_a_fifo_or_huge_file_as_spec_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "kit", "run", str(fifo), "--runs-dir", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=60)  # a read() on the FIFO would block forever
    assert proc.returncode == ExitCode.INPUT and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()
    big = tmp_path / "big.toml"
    big.write_text(LENET.read_text() + "#" * (2 << 20))
    from kit.errors import SpecError

    with pytest.raises(SpecError, match="more than the limit of 1048576"):
        load_spec(big)
    proc = subprocess.run([sys.executable, "-m", "kit", "list", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize(("value", "why"), [(-0.5, "negative"), (float("nan"), "not finite"), (float("inf"), "not finite")])
def test_impossible_values_exclude_the_trial_loudly(small_run: Path, tmp_path: Path, value: float, why: str) -> None:
    """A negative or NaN time edited into a trial file is never analysed; the trial is listed with its reason."""
    import shutil

    from kit.analysis.analyze import analyze_run
    from kit.report import write_report

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    measured = [p for p in sorted((run / "trials").glob("*.json")) if not json.loads(p.read_text()).get("warmup")]
    target = measured[0]
    rec = json.loads(target.read_text())
    rec["results"]["train_time_s"] = value
    target.write_text(json.dumps(rec))  # json writes NaN/Infinity, as Python's reader accepts them
    typed = analyze_run(run)
    analysis = typed.to_json()
    tid = rec["trial_id"]
    listed = [e for e in analysis["excluded_trials"] if e["trial_id"] == tid]
    assert listed and listed[0]["status"] == "invalid" and why in listed[0]["reason"]
    assert listed[0]["file"] == f"trials/{tid}.json" and "results.train_time_s" in listed[0]["reason"]
    used = [v for v in analysis["values"] if v["trial_id"] == tid]
    assert used and all(v["status"] == "invalid" for v in used)  # in the table, never in a statistic
    assert all(not (v["trial_id"] == tid and v["status"] == "ok") for v in analysis["values"])
    write_report(run, typed, ("html",))
    html = (run / "report" / "index.html").read_text()
    assert "Excluded trials" in html and tid in html and why in html


# -- item 9: disk full and read-only file systems, on a real (tmpfs) file system -------------------

@pytest.fixture
def small_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real 16 MiB tmpfs mounted for this test (root only), unmounted after it."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if res.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True, capture_output=True, text=True)


def _kit(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=timeout)


def _leftovers(run: Path) -> list[str]:
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.name.endswith(".tmp")) + (
        ["work/"] if (run / "work").exists() else [])


def _slow_calibrated(tmp_path: Path, reps: int = 4) -> Path:
    spec = tmp_path / "calibrated.toml"
    spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", f"repetitions = {reps}")
                    .replace("train_s = 0.15", "train_s = 0.4"))
    return spec


@pytest.mark.slow
@pytest.mark.mount
def test_disk_full_mid_run_fails_cleanly_and_resumes(small_fs: Path, tmp_path: Path) -> None:
    """The disk fills while `kit run` runs: error with the path and the fix, status failed, no .tmp left; resume ends it."""
    spec = _slow_calibrated(tmp_path)
    runs = small_fs / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "kit", "run", str(spec), "--runs-dir", str(runs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and len(list(runs.glob("*/trials/*.json"))) < 3:
        time.sleep(0.05)
    assert len(list(runs.glob("*/trials/*.json"))) >= 3, "the run never got going"
    filler = small_fs / "filler"
    # fill the file system for real, up to ENOSPC; unbuffered, so that closing the file has nothing left to flush
    # (a buffered file keeps the part of a write that did not fit and fails again at close, depending on how the
    # free space falls against the chunk size)
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
        except OSError as exc:
            assert exc.errno == 28
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == ExitCode.INPUT, (out, err)
    text = " ".join((out + err).split())
    assert "no space left on the device" in text and "Fix: free space on the file system holding" in text, text
    assert str(small_fs) in text and "Traceback" not in text and "internal error" not in text
    (run,) = runs.iterdir()
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "failed" and "no space" in man["failure"]["cause"]
    assert _leftovers(run) == []
    assert not (run / ".space-reserve").exists()
    done = len(list((run / "trials").glob("*.json")))
    assert 3 <= done < 10
    filler.unlink()
    res = _kit("run", "--resume", str(run))
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert len(list((run / "trials").glob("*.json"))) == 10 and _leftovers(run) == []


@pytest.mark.mount
def test_a_read_only_runs_dir_is_refused_with_the_path(small_fs: Path, tmp_path: Path) -> None:
    spec = _slow_calibrated(tmp_path)
    _remount(small_fs, "ro")
    res = _kit("run", str(spec), "--runs-dir", str(small_fs / "runs"))
    assert res.returncode == ExitCode.INPUT, res.stdout + res.stderr
    text = " ".join(res.stderr.split())
    assert "the file system is read-only" in text and str(small_fs / "runs") in text and "remount" in text, text
    assert "Traceback" not in text and "internal error" not in text
    assert list(small_fs.iterdir()) == []


@pytest.mark.slow
@pytest.mark.mount
def test_resume_on_a_read_only_file_system_changes_nothing(small_fs: Path, tmp_path: Path) -> None:
    spec = _slow_calibrated(tmp_path, reps=2)
    rd = start_run(load_spec(spec), RunOptions(runs_root=small_fs / "runs", max_trials=2))
    before = {p: p.read_bytes() for p in rd.path.rglob("*") if p.is_file()}
    assert json.loads((rd.path / "manifest.json").read_text())["status"] == "partial"
    _remount(small_fs, "ro")
    res = _kit("run", "--resume", str(rd.path))
    assert res.returncode == ExitCode.INPUT, res.stdout + res.stderr
    text = " ".join(res.stderr.split())
    assert "read-only" in text and str(rd.path) in text and "Traceback" not in text, text
    assert {p: p.read_bytes() for p in rd.path.rglob("*") if p.is_file()} == before


def test_a_data_dir_that_does_not_exist_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit dataset location that is missing never falls back to the bundled files."""
    from kit.datasets import resolve
    from kit.errors import DatasetError

    missing = tmp_path / "no-such-dir"
    with pytest.raises(DatasetError, match="--data-dir does not exist") as info:
        resolve("mnist", "t10k_split", data_dir=missing)
    assert str(missing) in str(info.value)
    monkeypatch.setenv("KIT_DATA_DIR", str(missing))
    with pytest.raises(DatasetError, match=r"\$KIT_DATA_DIR does not exist"):
        resolve("mnist", "t10k_split")
    lenet = Path(__file__).resolve().parents[1] / "experiments" / "florencio2019_lenet" / "experiment.toml"
    res = subprocess.run([sys.executable, "-m", "kit", "run", str(lenet), "--profile", "quick", "--runs-dir",
                          str(tmp_path / "runs")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "KIT_DATA_DIR": str(missing)})
    assert res.returncode == ExitCode.INPUT and "KIT_DATA_DIR does not exist" in " ".join(res.stderr.split()), res.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_pack_never_reads_a_link_or_fifo_planted_in_the_run(small_run: Path, tmp_path: Path, planted: str) -> None:
    import shutil

    from kit.errors import StoreError

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    bad = run / "samples" / "extra.parquet"
    if planted == "link":
        os.symlink(secret, bad)
    else:
        os.mkfifo(bad)
    with pytest.raises(StoreError, match="planted") as info:
        pack(run, tmp_path / "bundle")
    assert str(bad) in str(info.value)
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "bundle.tar.gz").exists()
    res = _kit("pack", str(run), "--out", str(tmp_path / "b2"))
    assert res.returncode == ExitCode.INPUT and "planted" in res.stderr and not (tmp_path / "b2").exists(), res.stderr


@pytest.mark.slow
def test_status_shows_markup_from_a_trial_file_literally(small_run: Path, tmp_path: Path) -> None:
    """An error text in a trial file is shown as written (rich markup would raise on '[/]' or restyle the table)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    trial = sorted((run / "trials").glob("*.json"))[0]
    rec = json.loads(trial.read_text())
    rec.update(status="error", error="[/] [red]boom[/red]", signal="SIGKILL")
    trial.write_text(json.dumps(rec))
    proc = _status_cli(run)
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.replace("│", " ").split())
    assert "[/] [red]boom[/red]" in flat and "SIGKILL" in flat and "--retry-failed" in flat, proc.stdout
