"""The papers' own software versions (issue 28): a deviation in every experiment, and paper-era image rows.

Every bundled experiment states the framework/CUDA/cuDNN/Python versions its paper ran against what the
kit runs; the matrix may carry ``paper_era = true`` rows (the paper's stack, for the paper's own code),
which are validated, never a default, never in a version-to-version series, and refused as a place for
the kit's trials because its harness cannot run there (CPython >= 3.10, Keras 3 / torch 2 APIs).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kit.analysis.claim_conditions import _conditions
from kit.analysis.claim_records import RunContext
from kit.backends.container import choose_rows, image_arms
from kit.bisect import check_releases
from kit.errors import ImageError, KitError
from kit.images.commands import era_text, list_images
from kit.images.lock import parse_lock, target_args
from kit.images.matrix import HARNESS_MIN_PYTHON, load_matrix, parse_matrix, require_harness
from kit.images.render import render
from kit.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*/experiment.toml"))

# what each paper's text says about its software, as the deviation must name it ("not stated" where it is silent)
PAPER_VERSIONS = {
    "florencio2019_lenet": ("TensorFlow 1.8", "PyTorch 1.0", "CUDA 9.0", "cuDNN 7.1", "3.5.2"),
    "elshawi_dlbench": ("TensorFlow 1.11.0", "Keras 2.2.4", "PyTorch 0.4.1", "CUDA 10.0", "cuDNN 7.3", "Python not stated"),
    "germino_mnist_energy": ("TensorFlow 2.0", "not stated"),
    "patel_models_sweep": ("not stated",),
    "patel_distributed": ("not stated",),
    "dai_single_gpu_factors": ("not stated",),
}

ERA_ROW = """
name = "pytorch-1.0-py36-cu90"
framework = "pytorch"
version = "1.0.0"
device = "cuda"
cuda = "9.0"
cudnn = "7.4.1"
python = "3.6"
base = "docker.io/library/python:3.6.15-slim-bullseye"
base_digest = "sha256:73a62cab42cf800cb2e4ff603a3b167d9b5487228cdf6ff63d2f629b6b086209"
platforms = ["manylinux1_x86_64"]
requirements = ["torch==1.0.0"]
lock = "locks/x.txt"
paper_era = true
papers = ["florencio2019_lenet"]
harness = false
"""
DEFAULTS = """[defaults]
python = "3.11"
base = "docker.io/library/python:3.11.15-slim-bookworm"
base_digest = "sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3"
"""


def _parse(tmp_path: Path, row: str) -> object:
    p = tmp_path / "matrix.toml"
    p.write_text(f"schema = 1\n{DEFAULTS}\n[[image]]\n{row}", encoding="utf-8")
    return parse_matrix(p.read_text(), p)


def _versions_deviation(path: Path) -> str:
    spec = load_spec(path)
    found = [d for d in spec.deviations if d.aspect == "software versions"]
    assert len(found) == 1, f"{path.parent.name}: no 'software versions' deviation"
    d = found[0]
    return f"{d.paper} || {d.kit} || {d.why}"


# -- the deviations -----------------------------------------------------------

def test_every_experiment_is_covered() -> None:
    assert {p.parent.name for p in EXPERIMENTS} == set(PAPER_VERSIONS)


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.parent.name)
def test_every_experiment_states_the_papers_software_versions(path: Path) -> None:
    spec = load_spec(path)
    d = next(d for d in spec.deviations if d.aspect == "software versions")
    for want in PAPER_VERSIONS[path.parent.name]:
        assert want in d.paper, f"{path.parent.name}: the paper side lacks {want!r}"
    m = load_matrix()
    for fw, dev in (("pytorch", "cuda"), ("tensorflow", "cuda"), ("tensorflow", "cpu")):
        row = m.default_for(fw, dev)  # the kit side names what a run picks today, so it cannot go stale
        assert row.version in d.kit, f"{path.parent.name}: the kit side does not name {row.name} ({row.version})"
    assert f"CPython {m.default_for('pytorch', 'cuda').python}" in d.kit
    assert "Hopper" in d.why or "nothing can be matched" in d.why
    for row in m.rows:  # a paper-era row serving this study is named in its entry
        if path.parent.name in row.papers:
            assert row.name in d.kit, f"{path.parent.name}: its paper-era row {row.name} is not named"


def test_dlbench_names_the_frameworks_it_does_not_run_and_folds_cuda_into_the_versions_entry() -> None:
    spec = load_spec(ROOT / "experiments" / "elshawi_dlbench" / "experiment.toml")
    by = {d.aspect: d for d in spec.deviations}
    gone = by["frameworks not run"]
    for fw, fact in (("MXNet 1.3.0", "Apache Attic"), ("Theano 1.0.2", "1.0.5"), ("Chainer 4.5", "CuPy")):
        assert fw in gone.paper and fact in gone.why
    assert "CUDA 10.0" not in by["environment"].paper and "software versions" in by["environment"].paper


def test_germino_says_its_result_rests_on_tf_2_0_and_the_claims_carry_it() -> None:
    path = ROOT / "experiments" / "germino_mnist_energy" / "experiment.toml"
    text = _versions_deviation(path)
    assert "TensorFlow 2.0" in text and "may not show it" in text and "C1-C8" in text
    claims = [c for c in load_spec(path).claims if c.id in {f"C{i}" for i in range(1, 9)}]
    assert len(claims) == 8 and all(c.versions.get("tensorflow") == "2.0" for c in claims)
    ctx = RunContext(profile="paper", device_kinds=("cpu",), gpus_per_trial=0, hardware="x",
                     versions={"tensorflow": "2.21.0", "pytorch": "2.14.1"}, arm_of={})
    _, diffs = _conditions(claims[0], ctx)
    assert "the paper used tensorflow 2.0; this run 2.21.0" in diffs  # what the deviation promises


def test_kit_list_deviations_shows_the_versions_rows() -> None:
    from typer.testing import CliRunner

    from kit.cli import app

    res = CliRunner().invoke(app, ["list", "--deviations"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert res.output.count("software versions") >= len(EXPERIMENTS) and "frameworks not run" in res.output


# -- the matrix: paper-era rows -----------------------------------------------

def test_shipped_paper_era_rows_are_consistent_with_their_locks() -> None:
    m = load_matrix()
    era = [r for r in m.rows if r.paper_era]
    assert era, "the matrix has no paper-era row"
    for r in era:
        assert not r.default and not r.harness and r.harness_problem()
        assert r.papers and all((ROOT / "experiments" / p / "experiment.toml").is_file() for p in r.papers)
        assert r.python_tuple() < HARNESS_MIN_PYTHON and f"python:{r.python}." in r.base and r.base.endswith("-slim-bullseye")
        pins = {p.key: p for p in parse_lock(r.lock_text(), r.lock)}
        fw = "torch" if r.framework == "pytorch" else "tensorflow"
        assert pins[fw].version == r.version  # the lock pins the row's framework
        for req in r.requirements:  # and every top-level requirement
            name = req.split("=")[0].split(">")[0].split("<")[0].strip()
            assert name.lower() in pins, f"{r.name}: {name} not in its lock"
        tag = f"cp{r.python.replace('.', '')}m"
        for p in pins.values():  # wheels the row's pip can install: its CPython ABI and its platforms only
            if p.key in r.no_binary:  # a source-only dependency: the archive, built in the image
                assert p.filename == f"{p.name}-{p.version}.tar.gz" or p.filename.endswith(".tar.gz"), p
                continue
            assert p.filename.endswith(".whl"), p
            assert tag in p.filename or "-none-any" in p.filename or "-abi3-" in p.filename, p.filename
            plats = p.filename[:-4].rsplit("-", 1)[-1].split(".")
            assert plats == ["any"] or set(plats) & set(r.platforms), p.filename
        assert {k for k, p in pins.items() if not p.filename.endswith(".whl")} == set(r.no_binary)
        assert f"--no-binary={','.join(r.no_binary)} " in r.lock_text() if r.no_binary else True
        args = target_args(r)
        assert args[args.index("--abi") + 1] == tag and args.count("--platform") == len(r.platforms)


def test_paper_era_rows_are_never_defaults_and_listed_as_such() -> None:
    m = load_matrix()
    for r in m.rows:
        if r.paper_era:
            assert m.default_for(r.framework, r.device) is not r
    listed = {x["name"]: x for x in list_images(m)}
    era = next(r for r in m.rows if r.paper_era)
    assert listed[era.name]["paper_era"] and not listed[era.name]["harness"]
    assert era_text(era).startswith("paper era: ") and "no kit trials" in era_text(era)
    assert all(x["era"] == "current" for x in listed.values() if not x["paper_era"])


def test_a_paper_era_dockerfile_renders_for_old_pip() -> None:
    row = next(r for r in load_matrix().rows if r.paper_era)
    text = render(row).text
    assert f"FROM {row.base_ref} AS install" in text and 'io.kit.python="3.6"' in text
    # pip 18.1 (CPython 3.6.15's ensurepip) knows every option the install stage uses
    for flag in ("--require-hashes", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--disable-pip-version-check"):
        assert flag in text
    assert "pip check" in text and "LD_LIBRARY_PATH" not in text  # torch bundles its CUDA runtime


@pytest.mark.parametrize(("change", "key", "says"), [
    ("papers = []", "papers", "required for paper_era"),
    ("default = true", "default", "never a default"),
    ("harness = true", "harness", "CPython >= 3.10"),
    ('python = "3.7"', "python", "Python of the base image"),
    ('platforms = ["win_amd64"]', "platforms[0]", "linux x86_64 wheel platform"),
    ('papers = ["../etc"]', "papers[0]", "experiment id"),
    ("paper_era = 1", "paper_era", "true or false"),
])
def test_paper_era_validation_names_the_key(tmp_path: Path, change: str, key: str, says: str) -> None:
    field = change.split(" = ")[0]
    row = "\n".join(line for line in ERA_ROW.splitlines() if not line.startswith(f"{field} ")) + "\n" + change + "\n"
    with pytest.raises(ImageError) as e:
        _parse(tmp_path, row)
    assert f"image[0].{key}" in str(e.value) and says in str(e.value) and "Fix:" in str(e.value)


@pytest.mark.parametrize("field", ["python", "base", "base_digest"])
def test_a_paper_era_row_states_its_own_python_and_base(tmp_path: Path, field: str) -> None:
    row = "\n".join(line for line in ERA_ROW.splitlines() if not line.startswith(f"{field} "))
    if field == "python":  # the 3.11 default would contradict the 3.6 base: drop the base too to reach the check
        row = row.replace("python:3.6.15-slim-bullseye", "python:3.11.15-slim-bookworm")
    with pytest.raises(ImageError, match=rf"image\[0\]\.{field}"):
        _parse(tmp_path, row)


def test_papers_need_paper_era_and_a_valid_row_parses(tmp_path: Path) -> None:
    m = _parse(tmp_path, ERA_ROW)
    row = m.rows[0]  # type: ignore[attr-defined]
    assert row.paper_era and row.papers == ("florencio2019_lenet",) and not row.harness
    plain = ERA_ROW.replace("paper_era = true", "paper_era = false").replace("harness = false", "")
    with pytest.raises(ImageError, match=r"image\[0\]\.(papers|harness)"):
        _parse(tmp_path, plain)
    with pytest.raises(ImageError, match="only paper-era cuda images"):
        m.default_for("pytorch", "cuda")  # type: ignore[attr-defined]


# -- the refusal --------------------------------------------------------------

def _era_row() -> object:
    return next(r for r in load_matrix().rows if r.paper_era)


def test_trials_are_refused_on_a_paper_era_row() -> None:
    row = _era_row()
    with pytest.raises(ImageError) as e:
        choose_rows(("pytorch", "tensorflow"), "cuda", {"pytorch": row.name})  # type: ignore[attr-defined]
    msg = str(e.value)
    assert "cannot run trials in image" in msg and "CPython 3.6" in msg and "3.10" in msg
    assert msg.startswith("--image pytorch=pytorch-1.0-py36-cu90: ") and "Fix:" in msg and "kit images build" in msg
    with pytest.raises(ImageError, match="cannot run trials"):
        image_arms([row.name, "pytorch-2.7-cu126"], ("pytorch", "tensorflow"))  # type: ignore[attr-defined]


def test_bisect_refuses_a_paper_era_row_before_any_run() -> None:
    row = _era_row()
    with pytest.raises(KitError, match="paper-era row"):
        check_releases([row.name, "pytorch-2.6-cu124", "pytorch-2.7-cu126"], ("pytorch", "tensorflow"))  # type: ignore[attr-defined]


def test_the_refusal_also_covers_a_current_python_row_marked_harness_false() -> None:
    row = dataclasses.replace(load_matrix().get("pytorch-2.13-cpu"), harness=False)
    assert "harness = false" in (row.harness_problem() or "")
    with pytest.raises(ImageError, match="harness = false"):
        require_harness(row, "x")
    require_harness(load_matrix().get("pytorch-2.13-cpu"), "x")  # a current row passes
    old = dataclasses.replace(load_matrix().get("pytorch-2.13-cpu"), python="3.9")
    assert "3.9" in (old.harness_problem() or "")


# -- locks for another CPython ------------------------------------------------

def _report(requires: list[str]) -> dict[str, object]:
    return {"install": [
        {"metadata": {"name": "Werkzeug", "version": "2.0.3", "requires_dist": requires},
         "download_info": {"url": "https://x/Werkzeug-2.0.3-py3-none-any.whl", "archive_info": {"hash": "sha256=" + "a" * 64}}},
    ]}


def test_a_marker_evaluated_for_the_host_python_is_caught() -> None:
    """pip evaluates markers for the Python it runs on; the lock check evaluates them for the row's."""
    from kit.images.lock import marker_gaps

    era = next(r for r in load_matrix().rows if r.python == "3.6")
    current = load_matrix().get("pytorch-2.13-cpu")
    report = _report(['dataclasses ; python_version < "3.7"', 'watchdog ; extra == "watchdog"',
                      'pywin32 ; sys_platform == "win32"'])
    gaps = marker_gaps(era, report)
    assert len(gaps) == 1 and gaps[0].startswith("dataclasses (required by Werkzeug 2.0.3")
    assert marker_gaps(current, report) == []  # on 3.11 the marker is false: nothing missing


def test_source_only_pins_are_named_in_the_lock_the_recipe_and_the_fetch(tmp_path: Path) -> None:
    from kit.images.lock import Pin as LockPin
    from kit.images.lock import fetch_command, format_lock, wheel_key

    row = next(r for r in load_matrix().rows if r.sdists)
    assert set(row.no_binary) <= {"termcolor", "gast", "html5lib"}
    text = format_lock(row, [LockPin("termcolor", "1.1.0", ("b" * 64,), "termcolor-1.1.0.tar.gz")], "26.3")
    assert f"--no-binary={','.join(row.no_binary)} -r" in text
    assert f"--only-binary=:all: --no-binary={','.join(row.no_binary)} \"$@\"" in render(row).text
    assert f"--no-binary={','.join(row.no_binary)}" in fetch_command(row, tmp_path)
    assert wheel_key("termcolor-1.1.0.tar.gz") == ("termcolor", "1.1.0")  # sdists count as present in a wheelhouse
    assert "--no-binary" not in render(load_matrix().get("pytorch-2.13-cpu")).text  # current rows: wheels only


def test_sdists_are_refused_on_current_rows_and_must_be_pinned(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"image\[0\]\.sdists\[0\].*pinned"):
        _parse(tmp_path, ERA_ROW + 'sdists = ["termcolor"]\n')
    plain = (ERA_ROW.replace("paper_era = true", "").replace('papers = ["florencio2019_lenet"]', "")
             .replace("harness = false", "").replace('python = "3.6"', 'python = "3.11"')
             .replace("python:3.6.15-slim-bullseye", "python:3.11.15-slim-bookworm"))
    with pytest.raises(ImageError, match=r"image\[0\]\.sdists.*current row"):
        _parse(tmp_path, plain + 'sdists = ["termcolor==1.1.0"]\n')


# -- the version probe in a paper-era image -----------------------------------

def test_the_probe_is_sent_without_what_cpython_3_6_cannot_run() -> None:
    import ast
    import shutil
    import subprocess

    from kit.images.verify import probe_source

    src = probe_source()
    tree = ast.parse(src)
    assert not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in ast.walk(tree))
    assert not any(isinstance(n, ast.AnnAssign) for n in ast.walk(tree))
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        assert fn.returns is None and all(a.annotation is None for a in fn.args.args + fn.args.kwonlyargs), fn.name
    assert "def probe(framework)" in src and "tf_gpu_names" in src
    candidates = [*sorted(Path.home().glob(".pyenv/versions/3.6.*/bin/python")), shutil.which("python3.6")]
    old = next((c for c in candidates if c and subprocess.run(
        [str(c), "-c", "import sys; assert sys.version_info[:2] == (3, 6)"], capture_output=True, timeout=60,
        check=False).returncode == 0), None)
    if old is None:
        pytest.skip("no CPython 3.6 on this host to compile the probe with")
    out = subprocess.run([str(old), "-c", "import sys; compile(sys.stdin.read(), 'probe', 'exec')"], input=src,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr


def test_kit_run_refuses_a_paper_era_image_before_asking_for_an_engine() -> None:
    from typer.testing import CliRunner

    from kit.cli import app

    runs = Path("/nonexistent/never")
    res = CliRunner().invoke(app, ["run", "florencio2019_lenet", "-p", "quick", "--backend", "docker",
                                   "--image", "pytorch=pytorch-1.0-py36-cu90", "--runs-dir", str(runs)])
    assert isinstance(res.exception, ImageError) and not runs.exists()  # the CLI prints it as cause/where/fix
    msg = str(res.exception)
    assert "cannot run trials in image pytorch-1.0-py36-cu90" in msg
    assert msg.startswith("--image pytorch=pytorch-1.0-py36-cu90: ") and "kit images build pytorch-1.0-py36-cu90" in msg


def test_a_bullseye_row_without_platforms_resolves_for_glibc_2_31() -> None:
    from kit.images.lock import PLATFORMS, row_platforms

    era = next(r for r in load_matrix().rows if r.paper_era)
    bare = dataclasses.replace(era, platforms=())
    assert row_platforms(bare)[0] == "manylinux_2_31_x86_64" and "manylinux_2_32_x86_64" not in row_platforms(bare)
    assert row_platforms(load_matrix().get("pytorch-2.13-cpu")) == PLATFORMS  # bookworm rows: unchanged
    args = target_args(bare)
    assert args[args.index("--platform") + 1] == "manylinux_2_31_x86_64"
