"""The container backend against a real engine: podman serving the Docker API (CI) or Docker.

The module fixture finds an engine (and, as root on a machine with podman,
starts one with .ci/podman.sh), fetches the locked wheels of the two CPU rows
into a wheelhouse and builds both images from a locally made base (no
registry: $KIT_BASE_IMAGE, localhost/kit-base:bookworm), once; the build is
cached by recipe hash, so a second session reuses it. Then: verification from
inside, a smoke run of the Florencio study through `kit run --backend docker`,
and the error paths (image missing, build failure, time limit, OOM kill).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kit.backends.base import TrialTarget
from kit.backends.container import trial_container
from kit.backends.docker import DockerBackend
from kit.engine import Engine, find_engine
from kit.errors import EngineError, ImageError
from kit.harness import REQUEST_FILE
from kit.images.build import build_image, find_built, image_info, read_images_lock
from kit.images.commands import build_rows
from kit.images.doctor import doctor_engine
from kit.images.lock import default_wheelhouse, fetch_wheels
from kit.images.matrix import load_matrix
from kit.images.render import render
from kit.images.verify import compare
from kit.plan import make_plan
from kit.run.prepare import trial_request
from kit.spec import Container, load_spec

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
CALIBRATED = ROOT / "tests" / "data" / "calibrated.toml"
MNIST = ROOT / "data" / "mnist-t10k"
CPU_ROWS = ("pytorch-2.13-cpu", "tensorflow-2.21-cpu")
LOCAL_BASE = "localhost/kit-base:bookworm"


@dataclass
class Ctx:
    engine: Engine
    base: str | None
    lock: Path
    built: dict[str, Any]


def _start_podman() -> None:
    """Source .ci/podman.sh (root, podman installed) and take over the variables it exports."""
    if os.geteuid() != 0 or not shutil.which("podman"):
        return
    script = ROOT / ".ci" / "podman.sh"
    out = subprocess.run(["bash", "-c", f"source {script} >&2 && env -0"], capture_output=True, timeout=900,
                         check=False)
    if out.returncode != 0:
        pytest.fail(f".ci/podman.sh failed: {out.stderr.decode(errors='replace')[-2000:]}")
    for item in out.stdout.split(b"\0"):
        key, _, value = item.decode(errors="replace").partition("=")
        if key in ("DOCKER_HOST", "CONTAINERS_CONF", "KIT_BASE_IMAGE"):
            os.environ[key] = value


def _engine() -> Engine:
    try:
        return find_engine()
    except EngineError:
        _start_podman()
    try:
        return find_engine()
    except EngineError as err:
        pytest.skip(f"no container engine: {err.one_line()}")


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctx]:
    saved = dict(os.environ)
    try:
        engine = _engine()
        base = os.environ.get("KIT_BASE_IMAGE") or (LOCAL_BASE if image_info(engine, LOCAL_BASE) else None)
        matrix = load_matrix()
        if base is None and image_info(engine, matrix.get(CPU_ROWS[0]).base_ref) is None:
            pytest.skip("no base image on the engine and no registry: run .ci/podman.sh (builds localhost/kit-base)")
        lock = tmp_path_factory.mktemp("images") / "images.lock.json"
        os.environ["KIT_IMAGES_LOCK"] = str(lock)
        os.environ["PIP_RETRIES"] = "1"  # an unreachable extra index (no download.pytorch.org here) fails fast
        wheelhouse = default_wheelhouse()
        rows = [matrix.get(n) for n in CPU_ROWS]
        for row in rows:
            fetch_wheels(row, wheelhouse / row.name)
        results = build_rows(rows, base=base, wheelhouse=wheelhouse, engine=engine,
                             on_line=lambda line: None)
        yield Ctx(engine, base, lock, {r.row: r for r in results})
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _request(spec_path: Path, profile: str | None, framework: str, work: Path, **workload: Any) -> None:
    spec = load_spec(spec_path, profile)
    trial = next(t for t in make_plan(spec).trials if t.framework == framework)
    req = trial_request(spec, trial)
    req["workload"].update(workload)
    work.mkdir(parents=True)
    (work / REQUEST_FILE).write_text(json.dumps(req))


def test_cpu_images_are_labelled_unprivileged_and_cached(ctx: Ctx) -> None:
    matrix = load_matrix()
    for name in CPU_ROWS:
        row = matrix.get(name)
        res = ctx.built[name]
        info = image_info(ctx.engine, res.tag)
        assert info is not None and info["id"] == res.id
        labels = info["labels"]
        assert labels["io.kit.framework"] == row.framework and labels["io.kit.framework.version"] == row.version
        assert labels["io.kit.lock.sha256"] == row.lock_sha256() and labels["org.opencontainers.image.version"] == row.version
        assert labels["io.kit.recipe.sha256"] == render(row, base=ctx.base).sha256 and res.tag.endswith(labels["io.kit.recipe.sha256"][:12])
        attrs = ctx.engine.client.images.get(res.tag).attrs
        assert attrs["Config"]["User"] == "1000:1000"
        again = build_image(ctx.engine, row, base=ctx.base)
        assert again.cached and again.id == res.id
        entry = read_images_lock(ctx.lock)["images"][name]
        assert entry["id"] == res.id and entry["tag"] == res.tag and entry["lock_sha256"] == row.lock_sha256()
        assert find_built(ctx.engine, row)["id"] == res.id


def test_verify_checks_versions_from_inside(ctx: Ctx) -> None:
    res = CliRunner().invoke(__import__("kit.cli", fromlist=["app"]).app, ["images", "verify", *CPU_ROWS])
    assert res.exit_code == 0, res.output
    assert "pytorch-2.13-cpu" in res.output and "2.13.0+cpu" in res.output and "2.21.0" in res.output
    entry = read_images_lock(ctx.lock)["images"]["tensorflow-2.21-cpu"]["verified"]
    assert entry["ok"] and entry["reported"]["framework_version"] == "2.21.0" and entry["reported"]["uid"] == 1000
    row = load_matrix().get("pytorch-2.13-cpu")
    bad, _ = compare(dataclasses.replace(row, version="2.12.0"), entry_reported(ctx, "pytorch-2.13-cpu"))
    assert [(m.key, m.expected) for m in bad] == [("framework_version", "2.12.0")]
    bad, _ = compare(dataclasses.replace(row, device="cuda", cuda="12.4", cudnn="9.1.0"), entry_reported(ctx, row.name))
    # a CPU build where the matrix says CUDA is a mismatch, and a CUDA row whose probe sees no GPU fails
    assert {m.key for m in bad} == {"cuda", "cudnn", "gpu"}


def entry_reported(ctx: Ctx, name: str) -> dict[str, Any]:
    return read_images_lock(ctx.lock)["images"][name]["verified"]["reported"]


def test_smoke_run_through_containers(ctx: Ctx, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "kit", "run", str(SPEC), "--profile", "smoke", "--backend", "docker",
                          "--runs-dir", str(runs), "--data-dir", str(MNIST)], cwd=ROOT, capture_output=True, text=True,
                         timeout=900, env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list(runs.iterdir())
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "complete" and man["backend"]["backend"] == "docker"
    assert man["backend"]["engine"] == ctx.engine.kind and "network none" in man["backend"]["isolation"]
    images = man["backend"]["images"]
    assert set(images) == {"pytorch", "tensorflow"}
    for fw, img in images.items():
        assert img["id"] == ctx.built[img["row"]].id and img["digest"].startswith("sha256:")
        assert img["versions"]["framework"] == fw and img["versions"]["uid"] == 1000
    trials = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*.json"))]
    assert len(trials) == len(man["plan"]["trials"]) == 6
    for t in trials:
        be = t["backend"]
        assert t["status"] == "ok" and t["exit_code"] == 0, t.get("error") or be.get("log_tail")
        assert be["name"] == "docker" and be["oom_killed"] is False and be["exit_code"] == 0
        assert be["network"] == "none" and be["image_id"] == images[t["framework"]]["id"]
        assert t["env"]["framework_version"] == images[t["framework"]]["versions"]["framework_version"]
        assert t["phases"]["train"]["duration_s"] > 0
    import pandas as pd

    samples = pd.read_parquet(run / "samples" / f"{trials[-1]['trial_id']}.parquet")
    assert (samples["metric"] == "cgroup_bytes").any()  # the collectors watched the container's cgroup
    left = ctx.engine.client.containers.list(all=True, filters={"label": "io.kit.role=trial"})
    assert left == []  # every container removed after its trial
    html = (run / "report" / "index.html").read_text()
    assert images["pytorch"]["digest"] in html and images["tensorflow"]["digest"] in html


def test_image_rows_as_arms_in_one_interleaved_plan(ctx: Ctx, tmp_path: Path) -> None:
    """`kit run --images A,B`: each row is an arm of one plan, each trial in its arm's image (issue 8).

    The CPU matrix holds one row per framework, so the two rows here differ in
    framework too; the mapping from arm to image is what is under test.
    """
    spec = tmp_path / "calibrated.toml"
    spec.write_text(CALIBRATED.read_text().replace("repetitions = 12", "repetitions = 3"))
    runs = tmp_path / "runs"
    out = subprocess.run([sys.executable, "-m", "kit", "run", str(spec), "--backend", "docker", "--runs-dir", str(runs),
                          "--images", ",".join(CPU_ROWS)], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list(runs.iterdir())
    man = json.loads((run / "manifest.json").read_text())
    arms = ["pytorch@2.13-cpu", "tensorflow@2.21-cpu"]
    assert man["plan"]["arms"] == arms and sorted(man["backend"]["images"]) == arms
    assert {a: man["backend"]["images"][a]["row"] for a in arms} == dict(zip(arms, CPU_ROWS, strict=True))
    trials = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*.json"))]
    assert len(trials) == 8 and {t["arm"] for t in trials} == set(arms)
    for t in trials:
        assert t["status"] == "ok", t.get("error")
        assert t["backend"]["image_id"] == man["backend"]["images"][t["arm"]]["id"]
        assert t["framework"] == t["arm"].split("@")[0]
    analysis = json.loads((run / "analysis.json").read_text())
    assert analysis["arms"] == arms and analysis["hypotheses"]


def test_no_network_inside_a_trial_container(ctx: Ctx, tmp_path: Path) -> None:
    work, data = tmp_path / "w", tmp_path / "d"
    work.mkdir()
    data.mkdir()
    tc = trial_container("pytorch", work, data, Container(), ctx.built["pytorch-2.13-cpu"].tag, False)
    tc = dataclasses.replace(tc, argv=("python3", "-c", "import os; print(sorted(os.listdir('/sys/class/net')))"),
                             name=tc.name + "-net")
    kwargs = DockerBackend(Container()).container_kwargs(tc, None)
    kwargs.pop("detach")
    got = ctx.engine.client.containers.run(**kwargs, remove=True).decode()
    assert got.strip() == "['lo']"


def _prepared(ctx: Ctx, spec: Container) -> DockerBackend:
    be = DockerBackend(spec)
    be.prepare(("pytorch",), MNIST)
    return be


def test_time_limit_kills_and_removes_the_container(ctx: Ctx, tmp_path: Path) -> None:
    work = tmp_path / "run" / "work" / "r000-c00-pytorch"
    _request(CALIBRATED, None, "pytorch", work, train_s=60.0)
    out = _prepared(ctx, Container()).run_trial("pytorch", work, MNIST, 4, TrialTarget())
    assert out.status == "timeout" and out.detail["exit_code"] != 0
    assert ctx.engine.client.containers.list(all=True, filters={"name": out.detail["container_name"]}) == []


def test_oom_kill_is_recorded_as_oom(ctx: Ctx, tmp_path: Path) -> None:
    work = tmp_path / "run" / "work" / "r000-c00-pytorch"
    _request(SPEC, "smoke", "pytorch", work)
    target = TrialTarget()
    out = _prepared(ctx, Container(mem_limit="48m")).run_trial("pytorch", work, MNIST, 300, target)
    assert out.status == "oom", out.detail
    assert out.detail["oom_killed"] is True and out.detail["exit_code"] == 137 and out.detail["oom_source"]
    assert target.container_id == out.detail["container_id"]


def test_missing_image_is_an_error_before_any_trial(ctx: Ctx) -> None:
    with pytest.raises(ImageError, match=r"pytorch-2\.6-cu124 .* is not built") as e:
        DockerBackend(Container(), images={"pytorch": "pytorch-2.6-cu124"}).prepare(("pytorch",), MNIST)
    assert "kit images build pytorch-2.6-cu124" in str(e.value)


def test_build_failure_reports_the_log(ctx: Ctx, tmp_path: Path) -> None:
    row = load_matrix().get("tensorflow-2.21-cpu")
    (tmp_path / "locks").mkdir()
    wheel = next((default_wheelhouse() / row.name).glob("six-*.whl"))
    (tmp_path / "locks" / "bad.txt").write_text("six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    bad = dataclasses.replace(row, name="kit-test-bad-hash", lock="locks/bad.txt", root=tmp_path)
    wh = tmp_path / "wh"
    wh.mkdir()
    shutil.copy2(wheel, wh / wheel.name)
    with pytest.raises(ImageError, match="the build of kit-test-bad-hash failed") as e:
        build_image(ctx.engine, bad, base=ctx.base, wheelhouse=wh)
    assert "HASHES" in str(e.value).upper()
    with pytest.raises(ImageError, match="is not on the engine"):
        build_image(ctx.engine, row, base="localhost/kit-no-such-base:1", wheelhouse=default_wheelhouse())
    with pytest.raises(ImageError, match="wheelhouse lacks"):
        build_image(ctx.engine, row, base="localhost/kit-no-such-base:1", wheelhouse=tmp_path / "empty")


def test_doctor_names_the_engine_and_the_images(ctx: Ctx) -> None:
    findings = {f["check"]: f for f in doctor_engine()}
    assert findings["container engine"]["ok"] and ctx.engine.kind in findings["container engine"]["detail"]
    assert findings["image for pytorch (cpu)"]["ok"] and findings["image for tensorflow (cpu)"]["ok"]
    assert "engine GPU support" in findings


def test_engine_exports_a_docker_archive_for_apptainer(ctx: Ctx, tmp_path: Path) -> None:
    """The first half of `kit images build --format sif --from-docker` (the second, apptainer build, cannot run here)."""
    import tarfile

    from kit.images.sif import export_image

    ref = ctx.base or LOCAL_BASE
    archive = tmp_path / "image.tar"
    export_image(ctx.engine, ref, archive)
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
    assert manifest[0]["Layers"] and manifest[0]["Config"]
    with pytest.raises(ImageError, match="could not export"):
        export_image(ctx.engine, "localhost/kit-no-such-image:1", tmp_path / "x.tar")


def test_scaffold_study_runs_through_containers(ctx: Ctx, tmp_path: Path) -> None:
    """A study folder outside the repository (issue 17): its modules reach the harness in each image, read-only."""
    from kit.scaffold import new_study

    study = new_study("mlp_podman", tmp_path)
    runs = tmp_path / "runs"  # the template's smoke profile: its quick workload in 2 repetitions (2 + 4 trials)
    out = subprocess.run([sys.executable, "-m", "kit", "run", str(study), "--profile", "smoke", "--backend", "docker",
                          "--runs-dir", str(runs), "--data-dir", str(MNIST)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = list(runs.iterdir())
    man = json.loads((run / "manifest.json").read_text())
    assert man["status"] == "complete" and man["backend"]["backend"] == "docker" and man["study"]["analysis"]
    trials = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*.json"))]
    assert len(trials) == 6
    for t in trials:
        assert t["status"] == "ok", t.get("error") or t["backend"].get("log_tail")
        assert t["backend"]["image_id"] == man["backend"]["images"][t["framework"]]["id"]
        assert t["env"]["framework"] == t["framework"]
    analysis = json.loads((run / "analysis.json").read_text())
    assert analysis["equivalence"]["param_counts_equal"] and analysis["equivalence"]["loss_agrees"]
    assert {a["arm"] for a in analysis["extras"]["mlp_podman"]["arms"]} == {"pytorch", "tensorflow"}
    assert "Model quality per framework" in (run / "report" / "index.html").read_text()
    print(f"\nscaffold study through {ctx.engine.kind}: {len(trials)} trials ok in the images "
          f"{sorted(i['row'] for i in man['backend']['images'].values())}; equivalence verified "
          f"(max loss gap {analysis['equivalence']['max_rel_loss_gap']:.2e})")


def test_verify_runs_a_bundles_study_code_in_containers_by_default(ctx: Ctx, tmp_path: Path) -> None:
    """Issue 22: a bundle that carries study code is re-run in containers when an engine is there (the default
    `--backend auto`), never unsandboxed on the evaluator's host; the output says where it ran."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _crafted import calibrated_study

    from kit.pack import pack
    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    folder = calibrated_study(tmp_path / "study", reps=2)
    rd = start_run(load_spec(folder), RunOptions(runs_root=tmp_path / "runs"))  # packed by someone, elsewhere
    bundle = pack(rd.path)
    out = subprocess.run([sys.executable, "-m", "kit", "verify", str(bundle), "--runs-dir", str(tmp_path / "verify")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    flat = " ".join(out.stdout.split())
    assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]  # 2 blocks test nothing: exit 1
    assert "docker backend: the bundle's study code ran in containers" in flat, flat[-2000:]
    (rerun,) = (tmp_path / "verify").iterdir()
    man = json.loads((rerun / "manifest.json").read_text())
    assert man["backend"]["backend"] == "docker" and man["status"] == "complete"
    trials = [json.loads(p.read_text()) for p in (rerun / "trials").glob("*.json")]
    assert trials and all(t["status"] == "ok" and t["backend"]["name"] == "docker" for t in trials)
    print(f"\nkit verify of a study bundle through {ctx.engine.kind}: {len(trials)} trials in containers")
