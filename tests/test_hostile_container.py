"""A hostile trial against the host (issue 14 item 1): every attack performed for real.

The work directory is the trial's: in a container it is written by the
container's user. A trial that plants a symbolic link, a FIFO, a directory or
a huge file where the kit reads ``result.json`` / ``markers.jsonl`` or writes
``stdout.log`` / ``stderr.log`` must leave every host file untouched and end
as a trial error with the reason; the work directory is never world-writable;
the container has no capabilities, no privilege gain, a process limit, a
read-only root and a writable /tmp.

The unit tests run on this file system (no engine); the ``engine`` tests run
crafted "harnesses" (python3 -c SCRIPT in place of kit.harness) through the
real ``DockerBackend.run_trial`` in podman or Docker, and check the hardening
from inside the container.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.backends.apptainer import ApptainerBackend, exec_command
from kit.backends.base import (
    MARKERS_MAX_LINES,
    RESULT_MAX_BYTES,
    TrialFileError,
    create_trial_file,
    read_markers,
    read_outputs,
    read_result,
    read_trial_file,
    status_from,
)
from kit.backends.container import IMAGE_UID, prepare_work, trial_container, work_owner
from kit.backends.docker import PIDS_LIMIT, DockerBackend, _write_logs
from kit.backends.local import LocalBackend
from kit.collectors.base import TrialTarget
from kit.errors import EngineError
from kit.spec import Container

ROOT = Path(__file__).resolve().parents[1]
FAKE_APPTAINER = ROOT / "tests" / "_fake_apptainer.py"
PRECIOUS = "precious host data: must survive the trial\n"
# what a symlinked result.json would say if the kit followed it: an "ok" trial the trial never ran
FORGED = json.dumps({"status": "ok", "results": {"train_time_s": 0.001}})


@pytest.fixture(autouse=True)
def _deadline() -> Iterator[None]:
    """A hang (a FIFO opened for reading) fails the test instead of blocking the suite."""
    def boom(signum: int, frame: Any) -> None:
        raise TimeoutError("the kit blocked on a trial's file")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(240)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _victim(tmp_path: Path, name: str = "victim.txt", text: str = PRECIOUS) -> Path:
    """A host file outside the work directory that the trial must not reach."""
    p = tmp_path / "host" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


def _work(tmp_path: Path) -> Path:
    work = tmp_path / f"hostile-{uuid.uuid4().hex[:8]}" / "work" / "r000-c00-pytorch"
    work.mkdir(parents=True)
    (work / "request.json").write_text("{}")
    return work


# -- reading: never follow, never block, never read without a cap ------------------------------

def test_result_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    victim = _victim(tmp_path, "forged.json", FORGED)
    work = _work(tmp_path)
    (work / "result.json").symlink_to(victim)
    with pytest.raises(TrialFileError, match=r"result.json .* is a symbolic link"):
        read_result(work / "result.json")
    (work / "result.json").unlink()
    (work / "result.json").symlink_to(tmp_path / "does-not-exist")  # dangling: refused too, not "absent"
    with pytest.raises(TrialFileError, match="symbolic link"):
        read_result(work / "result.json")
    result, markers, problem = read_outputs(work)
    assert result is not None and result["status"] == "error" and "symbolic link" in result["error"]
    assert problem and markers == [] and status_from(0, result, False) == "error"


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    work = _work(tmp_path)
    os.mkfifo(work / "result.json")
    os.mkfifo(work / "markers.jsonl")
    with pytest.raises(TrialFileError, match="is a FIFO, not a regular file"):
        read_result(work / "result.json")
    with pytest.raises(TrialFileError, match=r"markers.jsonl .* is a FIFO"):
        read_markers(work / "markers.jsonl")
    result, _, problem = read_outputs(work)
    assert result and result["status"] == "error" and "result.json" in problem and "markers.jsonl" in problem


def test_oversized_files_are_refused_before_reading(tmp_path: Path) -> None:
    work = _work(tmp_path)
    with open(work / "result.json", "wb") as fh:  # sparse: 1 GiB on paper, nothing on disk
        fh.truncate(1024**3)
    with pytest.raises(TrialFileError, match=rf"1073741824 bytes, over the {RESULT_MAX_BYTES}-byte limit"):
        read_result(work / "result.json")
    assert read_trial_file(work / "result.json", 2 * 1024**3) is not None  # the cap, not the type, refused it
    (work / "markers.jsonl").write_text("{}\n" * (MARKERS_MAX_LINES + 1))
    with pytest.raises(TrialFileError, match="marker limit"):
        read_markers(work / "markers.jsonl")


def test_other_shapes_are_refused_or_ignored(tmp_path: Path) -> None:
    work = _work(tmp_path)
    (work / "result.json").mkdir()
    with pytest.raises(TrialFileError, match="is a directory"):
        read_result(work / "result.json")
    os.rmdir(work / "result.json")
    (work / "result.json").write_text("[1, 2]")
    with pytest.raises(TrialFileError, match="JSON list, not an object"):
        read_result(work / "result.json")
    (work / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TrialFileError, match="nested too deeply"):
        read_result(work / "result.json")
    (work / "result.json").write_text('{"status": "ok"')  # torn (a killed writer): no result, the exit code decides
    assert read_result(work / "result.json") is None
    (work / "markers.jsonl").write_text('{"event": "a"}\n[1]\n"x"\n{"event": "b"}\n{"ev')
    assert read_markers(work / "markers.jsonl") == [{"event": "a"}, {"event": "b"}]
    assert read_result(work / "absent.json") is None and read_markers(work / "absent.jsonl") == []


# -- writing: a planted name is replaced, never written through -----------------------------------

def test_planted_log_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    victim, other = _victim(tmp_path), _victim(tmp_path, "other.txt")
    work = _work(tmp_path)
    (work / "stdout.log").symlink_to(victim)
    os.link(other, work / "stderr.log")  # a hard link to a host file: the name is replaced, the inode untouched
    assert _write_logs(work, "OUT\n", "ERR\n") is None
    assert victim.read_text() == PRECIOUS and other.read_text() == PRECIOUS
    assert not (work / "stdout.log").is_symlink() and (work / "stdout.log").read_text() == "OUT\n"
    assert (work / "stderr.log").read_text() == "ERR\n" and os.stat(other).st_nlink == 1
    (work / "stdout.log").unlink()
    (work / "stdout.log").mkdir()  # a name that cannot be freed: skipped with the reason, no crash
    problem = _write_logs(work, "OUT\n", "ERR\n")
    assert problem and "stdout.log not written" in problem


def test_create_trial_file_refuses_a_work_dir_symlink(tmp_path: Path) -> None:
    real = _work(tmp_path)
    link = tmp_path / "link-to-work"
    link.symlink_to(real)
    with pytest.raises(OSError):
        create_trial_file(link, "stdout.log")


# -- ownership instead of mode 777 ----------------------------------------------------------------

def test_work_owner_never_world_writable(tmp_path: Path) -> None:
    root = work_owner(0, 0, rootless=False)
    assert root.user == f"{IMAGE_UID}:{IMAGE_UID}" and root.chown == (IMAGE_UID, IMAGE_UID)
    assert work_owner(1234, 1234, rootless=True).user == "0:0"  # rootless: container root is the kit's user
    assert work_owner(1234, 99, rootless=False) == work_owner(1234, 99, rootless=False)
    assert work_owner(1234, 99, rootless=False).user == "1234:99" and work_owner(1234, 99, False).chown is None
    work = _work(tmp_path)
    os.chmod(work, 0o777)  # what the kit used to do
    prepare_work(work, None)
    assert stat.S_IMODE(os.stat(work).st_mode) == 0o700
    if os.geteuid() == 0:
        prepare_work(work, root)
        st = os.stat(work)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (IMAGE_UID, IMAGE_UID, 0o700)
        assert stat.S_IMODE(os.stat(work / "request.json").st_mode) == 0o644  # the kit's, readable


def test_container_arguments_are_hardened(tmp_path: Path) -> None:
    work = _work(tmp_path)
    tc = dataclasses.replace(trial_container("pytorch", work, tmp_path, Container(), "img", False), user="1000:1000")
    kw = DockerBackend(Container()).container_kwargs(tc, None)
    assert kw["cap_drop"] == ["ALL"] and kw["security_opt"] == ["no-new-privileges"]
    assert kw["pids_limit"] == PIDS_LIMIT and kw["read_only"] is True and kw["user"] == "1000:1000"
    assert "/tmp" in kw["tmpfs"] and "mode=1777" in kw["tmpfs"]["/tmp"] and kw["shm_size"] == "2g"
    assert kw["environment"]["HOME"] == "/tmp" and kw["environment"]["MPLCONFIGDIR"].startswith("/tmp/")
    cmd = exec_command(tc, Path("x.sif"))
    assert "--no-privs" in cmd and "--containall" in cmd


# -- the local and Apptainer backends: a crafted harness plants links and FIFOs --------------------

HOSTILE_SH = """#!/bin/sh
# a "harness" that plants, in its work directory (cwd), links to host files and a FIFO
echo some output
echo some error >&2
ln -s {victim} result.json
rm -f stderr.log && mkfifo stderr.log
ln -s {victim} stdout.log 2>/dev/null || true
exit 0
"""


def _hostile_exe(tmp_path: Path, victim: Path) -> Path:
    exe = tmp_path / "bin" / "hostile-python"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(HOSTILE_SH.format(victim=victim))
    exe.chmod(0o755)
    return exe


def test_local_backend_hostile_trial(tmp_path: Path) -> None:
    victim = _victim(tmp_path, "forged.json", FORGED)
    work = _work(tmp_path)
    out = LocalBackend(python=str(_hostile_exe(tmp_path, victim))).run_trial("pytorch", work, tmp_path, 60, TrialTarget())
    assert out.status == "error" and out.result and "symbolic link" in out.result["error"]
    assert "result.json" in out.detail["untrusted_output"]
    assert "some error" in out.stderr_tail  # read through the kit's descriptor, not the planted FIFO
    assert victim.read_text() == FORGED


def test_apptainer_backend_hostile_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = _victim(tmp_path, "forged.json", FORGED)
    exe = tmp_path / "bin" / "apptainer"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_APPTAINER} \"$@\"\n")
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_APPTAINER_PYTHON", str(_hostile_exe(tmp_path, victim)))  # "python3" in the container
    be = ApptainerBackend(Container(), apptainer=str(exe))
    be._images = {"pytorch": {"row": "r", "path": "/s/pt.sif", "digest": "sha256:" + "a" * 64, "device": "cpu"}}
    work = _work(tmp_path)
    out = be.run_trial("pytorch", work, tmp_path, 60, TrialTarget())
    assert out.status == "error" and "symbolic link" in out.result["error"] and "some error" in out.stderr_tail
    assert victim.read_text() == FORGED and stat.S_IMODE(os.stat(work).st_mode) == 0o700


# -- the Docker backend against a real engine -------------------------------------------------------

LOCAL_BASE = "localhost/kit-base:bookworm"


def _find_engine() -> Any:
    from kit.engine import find_engine

    try:
        return find_engine()
    except EngineError:
        pass
    if os.geteuid() == 0 and shutil.which("podman"):  # as tests/test_container_integration.py: start podman
        out = subprocess.run(["bash", "-c", f"source {ROOT / '.ci' / 'podman.sh'} >&2 && env -0"],
                             capture_output=True, timeout=900, check=False)
        for item in out.stdout.split(b"\0"):
            key, _, value = item.decode(errors="replace").partition("=")
            if key in ("DOCKER_HOST", "CONTAINERS_CONF", "KIT_BASE_IMAGE"):
                os.environ[key] = value
    try:
        return find_engine()
    except EngineError as err:
        pytest.skip(f"no container engine: {err.one_line()}")


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """An image with python3: the locally made base (CI) or a built kit CPU image."""
    from kit.images.build import image_info

    saved = dict(os.environ)
    try:
        eng = _find_engine()
        for ref in (os.environ.get("KIT_BASE_IMAGE"), LOCAL_BASE, "localhost/kit/pytorch-2.13-cpu"):
            if ref and image_info(eng, ref):
                yield ref
                return
        pytest.skip("no image with python3 on the engine: run .ci/podman.sh (builds localhost/kit-base)")
    finally:
        os.environ.clear()
        os.environ.update(saved)


class ScriptBackend(DockerBackend):
    """The real Docker backend, with ``python3 -c SCRIPT`` in place of the harness (a hostile trial)."""

    def __init__(self, image: str, script: str) -> None:
        super().__init__(Container())
        self.script = script
        self._images = {"pytorch": {"row": "hostile", "tag": image, "id": image, "device": "cpu"}}

    def trial_container(self, arm: str, work: Path, data_dir: Path, img: dict[str, Any], target: TrialTarget) -> Any:
        tc = super().trial_container(arm, work, data_dir, img, target)
        return dataclasses.replace(tc, argv=("python3", "-c", self.script))


def _run(image: str, script: str, tmp_path: Path) -> tuple[Any, Path]:
    work = _work(tmp_path)
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return ScriptBackend(image, script).run_trial("pytorch", work, data, 120, TrialTarget()), work


INSIDE = r"""
import errno, json, os, subprocess
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return line.split(':', 1)[1].strip()
def writable(path):
    try:
        with open(path, 'w') as fh:
            fh.write('x')
        os.unlink(path)
        return 'yes'
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
pids = next((open(p).read().strip() for p in ('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max')
             if os.path.exists(p)), None)
out = os.stat('/out')
report = {'CapEff': status('CapEff'), 'CapPrm': status('CapPrm'), 'CapBnd': status('CapBnd'),
          'NoNewPrivs': status('NoNewPrivs'), 'uid': os.getuid(), 'gid': os.getgid(), 'pids_max': pids,
          'root_fs': writable('/probe'), 'usr': writable('/usr/probe'), 'tmp': writable('/tmp/probe'),
          'home': os.environ.get('HOME'), 'home_writable': writable(os.path.expanduser('~/probe')),
          'out_uid': out.st_uid, 'out_mode': oct(out.st_mode & 0o777), 'shm': writable('/dev/shm/probe'),
          'mounts': [l.split()[1:4] for l in open('/proc/mounts') if l.split()[1] in ('/', '/tmp')]}
print(json.dumps(report))
with open('/out/result.json', 'w') as fh:
    json.dump({'status': 'ok', 'results': {}, 'inside': report}, fh)
"""


@pytest.mark.engine
def test_trial_container_is_hardened_from_inside(image: str, tmp_path: Path) -> None:
    out, work = _run(image, INSIDE, tmp_path)
    assert out.status == "ok", out.detail
    got = out.result["inside"]
    print(json.dumps(got, indent=1))
    assert got["CapEff"] == got["CapPrm"] == got["CapBnd"] == "0000000000000000"  # no capabilities at all
    assert got["NoNewPrivs"] == "1"
    assert got["root_fs"] == got["usr"] == "EROFS"  # read-only root file system
    assert got["tmp"] == "yes" and got["shm"] == "yes" and got["home"] == "/tmp" and got["home_writable"] == "yes"
    assert got["pids_max"] == str(PIDS_LIMIT)
    mounts = {m[0]: m[2].split(",") for m in got["mounts"]}
    assert "ro" in mounts["/"] and "rw" in mounts["/tmp"]
    if os.geteuid() == 0:  # rootful: the image's unprivileged user, owning its work directory, 0700
        assert (got["uid"], got["gid"]) == (IMAGE_UID, IMAGE_UID) and got["out_uid"] == IMAGE_UID
    assert got["out_mode"] == "0o700" and out.detail["user"] == f"{got['uid']}:{got['gid']}"
    assert stat.S_IMODE(os.stat(work).st_mode) & 0o007 == 0  # nobody else on the host


PLANT = r"""
import json, os, sys
print('trial stdout'); print('trial stderr', file=sys.stderr); sys.stdout.flush(); sys.stderr.flush()
os.symlink({victim!r}, '/out/stdout.log')
os.symlink({victim2!r}, '/out/stderr.log')
os.symlink({forged!r}, '/out/result.json')
os.mkfifo('/out/markers.jsonl')
"""


@pytest.mark.engine
def test_container_cannot_make_the_kit_overwrite_host_files(image: str, tmp_path: Path) -> None:
    victim, victim2 = _victim(tmp_path), _victim(tmp_path, "victim2.txt")
    forged = _victim(tmp_path, "forged.json", FORGED)
    os.chmod(victim, 0o600)  # root's own file: only the kit (root) could write it
    out, work = _run(image, PLANT.format(victim=str(victim), victim2=str(victim2), forged=str(forged)), tmp_path)
    assert victim.read_text() == PRECIOUS and victim2.read_text() == PRECIOUS and forged.read_text() == FORGED
    assert out.status == "error" and out.exit_code == 0  # exit 0 and a "result" saying ok: still an error
    reason = out.detail["untrusted_output"]
    print(reason)
    assert "result.json in the trial's work directory is a symbolic link" in reason and "markers.jsonl" in reason
    assert "is a FIFO" in reason and out.result["error"].startswith("untrusted trial output")
    for name, text in (("stdout.log", "trial stdout"), ("stderr.log", "trial stderr")):
        p = work / name
        assert not p.is_symlink() and stat.S_ISREG(p.lstat().st_mode) and text in p.read_text()


HUGE = r"""
import os
with open('/out/result.json', 'wb') as fh:
    fh.truncate(1 << 30)           # 1 GiB (sparse)
os.mkdir('/out/stdout.log')        # a log name the kit cannot free
with open('/out/markers.jsonl', 'w') as fh:
    fh.write('{}\n' * 200000)      # more markers than allowed
"""


@pytest.mark.engine
def test_huge_result_and_unwritable_log_are_errors_not_crashes(image: str, tmp_path: Path) -> None:
    out, _ = _run(image, HUGE, tmp_path)
    reason = out.detail["untrusted_output"]
    print(reason, "|", out.detail.get("log_files"))
    assert out.status == "error" and f"1073741824 bytes, over the {RESULT_MAX_BYTES}-byte limit" in reason
    assert "marker limit" in reason and "stdout.log not written" in out.detail["log_files"]
