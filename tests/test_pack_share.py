"""`kit pack --share` (issue 42, part 3): a bundle of one host's results without its hostname, user names, home
paths or environment, still verifiable. A fake run (tests/_runs.py) carries crafted secrets in every field where a
real run records such data; the bundle and its .tar.gz are grepped for them."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ExitCode, StoreError
from kit.pack import pack, write_sums
from kit.plan import make_plan
from kit.share import SHARE_FILE, Identity, Redactor, pack_share
from kit.spec import load_spec
from kit.store import RunDir
from kit.verify import IntegrityError, verify
from tests._runs import manifest_of, record_of, write_record

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"
HOST, USER, HOME, TOKEN = "secret-host-7f3a", "alice-secret", "/home/alice-secret", "sk-abc123"
GPU_UUID = "GPU-5d3b8a1e-77aa-4c1f-9f0e-0123456789ab"
NODE, PARTITION = "worker-secret-4c2e", "part-secret-91d0"  # a Slurm job's node and partition
SECRETS = (HOST, USER, HOME, TOKEN, GPU_UUID[4:], NODE, PARTITION)


def _rows(device: str, t0: float) -> list[dict[str, Any]]:
    return [{"t": t0 + i, "source": "cpu", "device": device, "metric": "util_pct", "value": 10.0 + i, "unit": "%"}
            for i in range(3)]


def secret_run(tmp: Path, host_name: str = HOST, named: bool = False) -> Path:
    """A run of calibrated.toml whose provenance, trials, logs, events, nodes and samples name the host, its user,
    her home and an environment token, wherever a real run records such data (tests/_runs.py records).
    ``named``: the resolved spec the run recorded (its title, hypothesis id and question) names them too, and the
    run recorded no copy of the spec's text (nothing kept verbatim names them)."""
    HOST = host_name  # the host this run names
    spec_path = tmp / "calibrated.toml"
    text = CALIBRATED.read_text().replace(
        "jitter_frac = 0.01", 'jitter_frac = 0.01\nslowdown = 1.2\nslowdown_framework = "tensorflow"')
    if named:
        text = text.replace('title = "Calibrated phases (instrument self-test)"',
                            f'title = "Calibrated by {USER} on {HOST.upper()}"').replace(
            'id = "H1"', f'id = "H1-{USER}"').replace('"Same time?"', f'"Same time in {HOME}/exp on {HOST}?"')
    spec_path.write_text(text)
    spec = load_spec(spec_path)
    host = {"hostname": HOST, "os": "Debian GNU/Linux 12", "kernel": "6.1.0", "machine": "x86_64",
            "cpu_model": "AMD EPYC 9654", "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
                                                 "isa": ["avx2", "avx512f"]},
            "cpu_logical": 8, "cpu_physical": 4, "memory_total_bytes": 1 << 34, "python": "3.11.7",
            "gpus": [{"index": 0, "name": "NVIDIA H100", "uuid": GPU_UUID, "compute_capability": "9.0",
                      "memory_total_bytes": 80 << 30, "driver_version": "550.54"}],
            "env": {"TOKEN": TOKEN, "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "4"}}
    man = manifest_of(spec, host=host, dataset={"name": "mnist", "source": "t10k", "directory": f"{HOME}/data/mnist",
                                                "origin": "bundled", "sha256": {}},
                      spec_source={"path": f"{HOME}/exp/calibrated.toml", "text": "" if named else text},
                      backend={"backend": "local", "python": f"{HOME}/.venv/bin/python"},
                      command=["kit", "run", f"{HOME}/exp/calibrated.toml", "--runs-dir", f"/tmp/{USER}/runs"],
                      kit={"version": "0.1.0", "commit": None})
    rd = RunDir.create(tmp / "runs", spec.experiment.id, man)
    rng = np.random.default_rng(0)
    for t in make_plan(spec).trials:
        f = 1.2 if t.framework == "tensorflow" else 1.0
        train_s, infer_s = (s * f * (1 + 0.01 * rng.standard_normal()) for s in (1.0, 0.5))
        rec = record_of(t, 1.0e9 + 10.0 * t.position, train_s, infer_s, host=HOST,
                        env={"framework": t.framework, "framework_version": "2.21.0", "gpu_uuid": GPU_UUID},
                        stderr_tail=f"TOKEN={TOKEN} loading {HOME}/data/mnist as {USER} on {HOST}\n",
                        traceback_tail=f'File "{HOME}/.venv/lib/python3.11/site-packages/x.py", line 1',
                        executor={"name": "slurm", "chunk": 0, "job_id": "4242", "node": NODE,
                                  "partition": PARTITION})
        write_record(rd, rec, _rows(HOST, 1.0e9 + 10.0 * t.position))
    rd.write_samples(f"_baseline-{HOST}-chunk0", _rows(HOST, 1.0e9 - 5))
    (rd.path / "nodes").mkdir()
    (rd.path / "nodes" / f"{HOST}.json").write_text(json.dumps({"host": HOST, "hostname": HOST,
                                                                  "env": {"TOKEN": TOKEN}}))
    (rd.path / "events.jsonl").write_text(json.dumps({"t": 1.0e9, "event": "start", "host": HOST, "pid": 7,
                                                      "boot_id": "956d3c0e-d85b-4d51-b56a-a727579f0974",
                                                      "cwd": f"{HOME}/work"}) + "\n" + json.dumps(
        {"t": 1.0e9 + 1, "event": "chunk_start", "chunk": 0, "job_id": "4242", "node": NODE.upper(),
         "partition": PARTITION, "path": f"/usr/bin:{HOME}/bin"}) + "\n")
    (rd.path / "report").mkdir()
    (rd.path / "report" / "index.html").write_text(f"<p>{HOST} {HOME}</p>")
    return rd.path


def _leaks(data: bytes) -> list[str]:
    return [s for s in SECRETS if s.encode() in data]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("share")
    run = secret_run(tmp)
    return run, pack_share(run, tmp / "out" / "calibrated.share")


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_no_secret_in_any_file_of_the_bundle_or_its_tarball(shared: tuple[Path, Path]) -> None:
    run, tgz = shared
    root = tgz.parent / tgz.name.removesuffix(".tar.gz")
    assert any(_leaks(p.read_bytes()) for p in run.rglob("*") if p.is_file())  # the run does name them
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and not [(p.name, _leaks(p.read_bytes())) for p in files if _leaks(p.read_bytes())]
    assert not [p for p in root.rglob("*") if _leaks(p.name.encode())]
    raw = gzip.decompress(tgz.read_bytes())  # the tar stream: every member's bytes and name
    assert not _leaks(raw)
    for p in root.rglob("*.parquet"):  # and the decoded columns (compression could hide a string from grep)
        table = pq.read_table(p).to_pylist()
        assert not _leaks(json.dumps(table).encode())


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_what_a_share_bundle_keeps_and_drops(shared: tuple[Path, Path]) -> None:
    _, tgz = shared
    root = tgz.parent / tgz.name.removesuffix(".tar.gz")
    names = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    assert {"README.md", "SHA256SUMS", "claims.json", SHARE_FILE, "run/manifest.json", "run/analysis.json",
            "run/samples/_baseline-host-1-chunk0.parquet", "run/nodes/host-1.json"} <= names
    assert not {n for n in names if n.startswith(("run/report", "images")) or n == "kit-src.tar.gz"}
    man = json.loads((root / "run" / "manifest.json").read_text())
    assert "env" not in man["host"] and man["host"]["hostname"] == "host-1"
    assert man["dataset"]["directory"] == "<redacted>" and man["spec_source"]["path"] == "<redacted>"
    trial = json.loads(next((root / "run" / "trials").glob("*.json")).read_text())
    assert trial["host"] == "host-1" and "TOKEN=<redacted>" in trial["stderr_tail"] and "<user>" in trial["stderr_tail"]
    assert trial["env"]["framework_version"] == "2.21.0"  # the framework's environment is kept (not env vars)
    marker = json.loads((root / SHARE_FILE).read_text())
    assert marker["share"] is True and marker["schema_version"] == 1 and marker["redacted"]
    hc = marker["host"]
    assert (hc["cpu_vendor"], hc["cpu_family"], hc["cpu_isa"], hc["gpus"][0]["compute_capability"],
            hc["driver_version"], hc["frameworks"]) == ("AuthenticAMD", 25, ["avx2", "avx512f"], "9.0", "550.54",
                                                        {"tensorflow": "2.21.0", "pytorch": "2.21.0"})
    readme = (root / "README.md").read_text()
    assert "What was redacted" in readme and "host.env" in readme
    claims = json.loads((root / "claims.json").read_text())
    assert claims["share"] and any(c["rejected"] for c in claims["claims"])  # the planted 20 % still found


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_kit_verify_passes_on_a_share_bundle(shared: tuple[Path, Path]) -> None:
    _, tgz = shared
    res = verify(tgz)
    assert res["share"] and res["integrity"] == "ok" and res["claims_changed"] == [] and res["claims_tested"] >= 1
    assert res["badges"] == {"available": True, "functional": False, "results_reproduced": False}
    out = CliRunner().invoke(app, ["verify", str(tgz)])
    assert out.exit_code == 0, out.output
    assert "share bundle: claims consistent" in out.output


def _copy(tgz: Path, tmp: Path) -> Path:
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp / "copy", filter="data")
    return next((tmp / "copy").iterdir())


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_a_tampered_share_bundle_fails_verify(shared: tuple[Path, Path], tmp_path: Path) -> None:
    root = _copy(shared[1], tmp_path)
    trial = next((root / "run" / "trials").glob("*tensorflow*.json"))
    rec = json.loads(trial.read_text())
    rec["results"]["train_time_s"] *= 0.5
    trial.write_text(json.dumps(rec))
    with pytest.raises(IntegrityError, match=r"changed run/trials/"):
        verify(root)
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", str(root)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == ExitCode.INPUT and "integrity check failed" in proc.stderr
    write_sums(root)  # the forger re-signs: the claims no longer follow from the raw data
    with pytest.raises(IntegrityError, match=r"claims.json is not what the bundled raw data give"):
        verify(root)


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_a_forged_marker_fails_verify(shared: tuple[Path, Path], tmp_path: Path) -> None:
    root = _copy(shared[1], tmp_path)
    marker = json.loads((root / SHARE_FILE).read_text())
    marker["host"]["gpus"][0]["name"] = "NVIDIA B200"  # a "faster host" for the same numbers
    (root / SHARE_FILE).write_text(json.dumps(marker))
    write_sums(root)
    with pytest.raises(IntegrityError, match=r"host class is not the bundled run's"):
        verify(root)
    (root / SHARE_FILE).write_text(json.dumps({**marker, "share": "yes"}))
    write_sums(root)
    with pytest.raises(IntegrityError, match=r"not a share marker"):
        verify(root)


def test_the_redactor_replaces_names_paths_uuids_and_assignments() -> None:
    red = Redactor(Identity(hostnames=(HOST, "vm"), users=(USER,), homes=(HOME,)))
    assert red.text(f"{HOST}.lan /sys/class/hwmon {HOME}/x vmstat _baseline-vm-chunk0 kvm") == \
        "host-1.lan /sys/class/hwmon <redacted> vmstat _baseline-host-2-chunk0 kvm"
    assert red.text(f"TOKEN={TOKEN} by {USER} in ~{USER}") == "TOKEN=<redacted> by <user> in ~<user>"
    assert red.text("/usr/lib/python3/x.py and C:/x and /tmp/a b") == "/usr/lib/python3/x.py and C:/x and <redacted> b"
    first, again = red.text(GPU_UUID), red.text(GPU_UUID.lower())
    assert first[4:] == again[4:] and GPU_UUID[4:] not in first and first.startswith("GPU-")  # stable: trials still match
    assert red.value({"host": HOST, "n": 3, "list": [f"{HOME}/a", None]}) == \
        {"host": "host-1", "n": 3, "list": ["<redacted>", None]}
    assert Identity(("a",), (), ()).with_more(users=("root", "bob")).users == ("bob",)  # root names nobody


def test_check_marker_refuses_what_is_not_a_share_marker() -> None:
    from kit.share import check_marker

    good = {"schema_version": 1, "share": True, "redacted": ["x"], "dropped": [], "host": {}}
    assert check_marker(good, "share.json") == good
    for bad in ({**good, "share": "yes"}, {**good, "schema_version": 2}, {**good, "redacted": [1]},
                {**good, "host": None}):
        with pytest.raises(StoreError, match="not a share marker"):
            check_marker(bad, "share.json")


@pytest.mark.slow  # writes a 26-trial run (seconds)
def test_a_study_copy_naming_the_user_stops_the_pack(tmp_path: Path) -> None:
    run = secret_run(tmp_path)
    rd = RunDir.open(run)
    red = Redactor(Identity.of_run(rd, rd.manifest()))
    assert HOST in red.identity.hostnames and USER in red.identity.users  # her home in the run names her
    from kit.share import check_verbatim

    (run / "study").mkdir()
    (run / "study" / "notes.md").write_text(f"data in {HOME}/data")
    with pytest.raises(StoreError, match="kept verbatim in a share bundle"):
        check_verbatim(rd, rd.manifest(), red)


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_cli_pack_share_and_full_pack_unchanged(tmp_path: Path) -> None:
    run = secret_run(tmp_path)
    res = CliRunner().invoke(app, ["pack", str(run), "--share"])
    assert res.exit_code == 0, res.output
    assert (run.parent / f"{run.name}.share.tar.gz").is_file()
    res = CliRunner().invoke(app, ["pack", "--help"])
    assert "--share" in res.output
    full = pack(run)  # without --share: the full bundle, provenance as recorded
    root = full.parent / full.name.removesuffix(".tar.gz")
    assert (root / "kit-src.tar.gz").is_file() and not (root / SHARE_FILE).exists()
    assert HOST in (root / "run" / "manifest.json").read_text()
    shutil.rmtree(root)


@pytest.mark.slow
def test_a_real_smoke_run_shares_without_the_hostname(tmp_path: Path) -> None:
    import socket

    proc = subprocess.run([sys.executable, "-m", "kit", "run", "florencio2019_lenet", "--profile", "smoke",
                           "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = next((tmp_path / "runs").iterdir())
    tgz = pack_share(run)
    root = tgz.parent / tgz.name.removesuffix(".tar.gz")
    paths = [str(tmp_path), str(Path(__file__).resolve().parents[1]), str(Path.home())]
    host = socket.gethostname()
    for p in [*root.rglob("*.json"), *root.rglob("*.jsonl"), tgz]:
        data = gzip.decompress(p.read_bytes()) if p == tgz else p.read_bytes()
        assert not [s for s in paths if s.encode() in data], p
        if p != tgz:  # no JSON string names the host (a study's README may use its name as a word)
            assert f'"{host}"'.encode() not in data and f"-{host}-".encode() not in data, p
    assert not [p for p in root.rglob("*") if host in p.name.split("-")]
    assert verify(tgz)["share"]


# -- review findings (issue 42, item 3): each attack performed for real ------------------------------------------------

@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_the_tarball_names_no_owner(shared: tuple[Path, Path]) -> None:
    import getpass

    with tarfile.open(shared[1]) as tar:
        members = tar.getmembers()
    assert members and getpass.getuser()
    assert not [(m.name, m.uname, m.gname, m.uid, m.gid) for m in members
                if m.uname or m.gname or m.uid != 0 or m.gid != 0 or getpass.getuser() in (m.uname, m.gname)]


@pytest.mark.slow  # packs and re-analyses a 26-trial run (seconds)
def test_slurm_nodes_and_partitions_are_pseudonyms_and_job_ids_are_said_kept(shared: tuple[Path, Path]) -> None:
    root = shared[1].parent / shared[1].name.removesuffix(".tar.gz")
    trial = json.loads(next((root / "run" / "trials").glob("*.json")).read_text())
    assert trial["executor"]["node"].startswith("host-") and trial["executor"]["partition"] == "partition-1"
    assert trial["executor"]["job_id"] == "4242"
    events = [json.loads(x) for x in (root / "run" / "events.jsonl").read_text().splitlines()]
    assert events[1]["node"] == trial["executor"]["node"] and events[1]["partition"] == "partition-1"
    assert events[1]["path"] == "/usr/bin:<redacted>"  # a PATH-like list: each part judged on its own
    redacted = " ".join(json.loads((root / SHARE_FILE).read_text())["redacted"])
    assert "Slurm node names" in redacted and "job, array job and task ids: kept" in redacted


@pytest.mark.slow  # packs and re-analyses a 26-trial run twice (seconds)
def test_names_in_the_recorded_spec_are_redacted_and_verify_still_passes(tmp_path: Path) -> None:
    """The claims' ids and texts, the title and paths name the user and host: the pack used to refuse ("kit bug"),
    and wrote claims.json and README.md unredacted; now what verify recomputes is what is stored."""
    run = secret_run(tmp_path, named=True)
    assert f"H1-{USER}".encode() in (run / "manifest.json").read_bytes()
    tgz = pack_share(run)
    root = tgz.parent / tgz.name.removesuffix(".tar.gz")
    for name in ("claims.json", "README.md", "run/analysis.json", "run/manifest.json", SHARE_FILE):
        data = (root / name).read_bytes()
        assert not _leaks(data) and HOST.upper().encode() not in data, name
    claims = json.loads((root / "claims.json").read_text())
    assert {c["id"] for c in claims["claims"]} == {"H1-<user>"}
    assert "Calibrated by <user> on host-1" in (root / "README.md").read_text()
    res = verify(tgz)
    assert res["share"] and res["claims_changed"] == [] and res["claims_tested"] >= 1
    out = CliRunner().invoke(app, ["verify", str(tgz)])
    assert out.exit_code == 0, out.output


@pytest.mark.slow  # writes a 26-trial run and re-analyses it (seconds)
def test_a_host_named_like_a_word_of_the_data_is_refused_with_the_real_cause(tmp_path: Path) -> None:
    """A host called "cpu": redacting it everywhere would rename the spec's device and collector; the pack says
    so and what to do, never "kit bug" (the spec's text names it too: refused before anything is analysed)."""
    for named in (False, True):
        (tmp_path / str(named)).mkdir()
        run = secret_run(tmp_path / str(named), host_name="cpu", named=named)
        with pytest.raises(StoreError) as err:
            pack_share(run)
        assert "'cpu'" in err.value.cause and "kit bug" not in err.value.fix, err.value
        assert "common word" in err.value.fix and "full bundle" in err.value.fix
        res = CliRunner().invoke(app, ["pack", str(run), "--share"])
        assert res.exit_code != 0 and isinstance(res.exception, StoreError) and "common word" in res.exception.fix


def test_redactor_review_gaps() -> None:
    red = Redactor(Identity(hostnames=(HOST,), users=(USER,), homes=(HOME,), partitions=(PARTITION,)))
    # (a) a ':'-joined list that starts in a system tree: each part judged alone; no climbing out of /usr
    assert red.text("PATH is /usr/bin:/scratch/alice/x:/bin at /a/b.py:12") == \
        "PATH is /usr/bin:<redacted>:/bin at <redacted>:12"
    assert red.text("/usr/../scratch/alice") == "<redacted>"
    # (b) host names in any case, and in file names
    assert red.text(f"{HOST.upper()} and {HOST.title()}.lan") == "host-1 and host-1.lan"
    assert red.host_alias(HOST.upper()) == "host-1"
    assert Identity((), (), ()).with_more(hostnames=("Big-Box",)).hostnames == ("big-box",)
    # a pseudonymous UUID stays itself: redacting twice (run, then analysis) gives the same text
    once = red.text(GPU_UUID)
    assert red.text(once) == once
    # (c) a partition is replaced by field, never as a word (partitions are called "gpu")
    assert red.value({"partition": PARTITION, "note": f"on {PARTITION}", "executor": {"partition": "other"}}) == \
        {"partition": "partition-1", "note": f"on {PARTITION}", "executor": {"partition": "other"}}


@pytest.mark.slow  # writes a 26-trial run (seconds)
def test_a_study_copy_naming_the_host_stops_the_pack(tmp_path: Path) -> None:
    from kit.share import check_verbatim

    run = secret_run(tmp_path)
    rd = RunDir.open(run)
    red = Redactor(Identity.of_run(rd, rd.manifest()))
    assert NODE in red.identity.hostnames and PARTITION in red.identity.partitions
    (run / "study").mkdir()
    (run / "study" / "notes.md").write_text(f"measured on {HOST.upper()}")
    with pytest.raises(StoreError, match=r"kept verbatim in a share bundle.*host name"):
        check_verbatim(rd, rd.manifest(), red)
