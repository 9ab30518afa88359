"""Releases wherever a row is accepted (issue 41, item 2): `kit run --images tensorflow==2.19.1,...`.

Hermetic: kit.images.add's ensure_row/ensure_built are replaced by fakes that record their calls and return
shipped rows (nothing is locked, written or built), and no run starts.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ImageError, KitError
from kit.gpus import Gpu, Inventory
from kit.images import add, arms
from kit.images.matrix import load_matrix
from kit.run.request import run_request
from kit.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
SHIPPED = {"2.19.1": "tensorflow-2.19-cpu", "2.20.0": "tensorflow-2.20-cpu", "2.21.0": "tensorflow-2.21-cpu"}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """ensure_row returns the shipped CPU row of the version; ensure_built "builds" 2.20.0 only."""
    seen: list[tuple[str, str]] = []
    matrix = load_matrix()

    def ensure_row(spec: Any, device: str, *, matrix: Any = None, on_line: Any = None) -> Any:
        seen.append(("row", f"{spec.text}@{device}"))
        return load_matrix().get(SHIPPED[spec.version])

    def ensure_built(row: Any, *, engine: Any = None, on_line: Any = None, on_start: Any = None) -> None:
        seen.append(("built", row.name))
        if row.version == "2.20.0" and on_start is not None:
            on_start(row)
            if on_line is not None:
                on_line("STEP 1/9: FROM python")

    monkeypatch.setattr(add, "ensure_row", ensure_row)
    monkeypatch.setattr(add, "ensure_built", ensure_built)
    assert all(matrix.get(n) for n in SHIPPED.values())
    return seen


def request(tmp_path: Path, backend: str = "docker", **kw: Any) -> Any:
    return run_request(spec=LENET, profile="quick", resume=None, backend=backend, runs_dir=tmp_path / "runs", **kw)


def test_release_specs_become_rows_and_images_before_the_run(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    told: list[str] = []
    progress = arms.ImageProgress(on_row=lambda r: told.append(f"{r.item}->{r.row} added={r.added} built={r.built}"),
                                  on_start=lambda r: told.append(f"building {r.name}"), on_line=told.append)
    req = request(tmp_path, images="tensorflow==2.19.1, tensorflow==2.20.0", progress=progress)
    assert calls == [("row", "tensorflow==2.19.1@cpu"), ("built", "tensorflow-2.19-cpu"),
                     ("row", "tensorflow==2.20.0@cpu"), ("built", "tensorflow-2.20-cpu")]
    assert req.opts.arms == ("tensorflow@2.19-cpu", "tensorflow@2.20-cpu")
    assert req.opts.backend_options["images"] == {"tensorflow@2.19-cpu": "tensorflow-2.19-cpu",
                                                  "tensorflow@2.20-cpu": "tensorflow-2.20-cpu"}
    assert told == ["tensorflow==2.19.1->tensorflow-2.19-cpu added=False built=False", "building tensorflow-2.20-cpu",
                    "STEP 1/9: FROM python", "tensorflow==2.20.0->tensorflow-2.20-cpu added=False built=True"]
    assert not (tmp_path / "runs").exists()


def test_rows_and_releases_mix(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    req = request(tmp_path, images="tensorflow-2.19-cpu,tensorflow==2.21.0")
    assert req.opts.arms == ("tensorflow@2.19-cpu", "tensorflow@2.21-cpu")
    assert calls == [("row", "tensorflow==2.21.0@cpu"), ("built", "tensorflow-2.21-cpu")]  # a row is left as it is


def test_rows_alone_never_touch_the_release_code(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    req = request(tmp_path, images="tensorflow-2.19-cpu,tensorflow-2.20-cpu")
    assert req.opts.arms == ("tensorflow@2.19-cpu", "tensorflow@2.20-cpu") and calls == []


def test_image_option_takes_a_release_too(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    req = request(tmp_path, image=["tensorflow=tensorflow==2.20.0", "pytorch=pytorch-2.13-cpu"])
    assert req.opts.backend_options["images"] == {"tensorflow": "tensorflow-2.20-cpu", "pytorch": "pytorch-2.13-cpu"}
    assert calls == [("row", "tensorflow==2.20.0@cpu"), ("built", "tensorflow-2.20-cpu")]


def test_apptainer_resolves_the_row_but_builds_no_docker_image(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    request(tmp_path, backend="apptainer", images="tensorflow==2.19.1,tensorflow==2.20.0")
    assert [c for c in calls if c[0] == "built"] == []


@pytest.mark.parametrize("kw", [{"images": "tensorflow==2.19.1,tensorflow==2.20.0"},
                                {"image": ["tensorflow=tensorflow==2.20.0"]}])
def test_the_local_backend_refuses_a_release_before_anything_is_added(calls: list[tuple[str, str]], tmp_path: Path,
                                                                     kw: dict[str, Any]) -> None:
    with pytest.raises(KitError, match="local backend runs the framework installed in this interpreter") as e:
        request(tmp_path, backend="local", **kw)
    assert e.value.where in ("--images", "--image") and "--backend docker" in (e.value.fix or "")
    assert calls == [] and not (tmp_path / "runs").exists()


def test_a_bad_spec_is_refused_before_any_row_is_added(calls: list[tuple[str, str]], tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="not a release spec") as e:
        request(tmp_path, images="tensorflow==2.19.1,tensorflw==2.20.0")
    assert e.value.where == "--images tensorflw==2.20.0" and e.value.fix
    assert calls == [("row", "tensorflow==2.19.1@cpu"), ("built", "tensorflow-2.19-cpu")]


def test_the_device_is_the_runners_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.gpus

    gpu = Inventory((Gpu(0, "GPU-x", "H200"),))
    monkeypatch.setattr(kit.gpus, "nvml_inventory", lambda: gpu)
    assert arms.run_device(load_spec(LENET, "quick")) == "cpu"  # [workload] device = "cpu", whatever the host has
    assert arms.run_device(load_spec(LENET, "paper")) == "cuda"  # "auto" with a GPU the spec allows
    monkeypatch.setattr(kit.gpus, "nvml_inventory", lambda: Inventory((), "NVML unavailable (no driver)"))
    assert arms.run_device(load_spec(LENET, "paper")) == "cpu"  # "auto" on a GPU-less host: the CPU rows


def test_an_added_row_is_said_to_be_added(monkeypatch: pytest.MonkeyPatch) -> None:
    new = SimpleNamespace(name="tensorflow-2.18-cpu", version="2.18.1")
    monkeypatch.setattr(add, "ensure_row", lambda spec, device, **kw: new)
    monkeypatch.setattr(add, "ensure_built", lambda row, **kw: kw["on_start"](row))
    r = arms.resolve_release("tensorflow==2.18.1", "cpu", build=True)
    assert r == arms.ResolvedRelease("tensorflow==2.18.1", "tensorflow-2.18-cpu", added=True, built=True)


def test_cli_run_with_releases_prints_progress_and_runs_rows(calls: list[tuple[str, str]], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.run.request

    seen: list[Any] = []

    def execute(req: Any, events: Any) -> Any:
        seen.append(req)
        return SimpleNamespace(path=tmp_path / "runs" / "r", manifest=lambda: SimpleNamespace(status="incomplete"))

    monkeypatch.setattr(kit.run.request, "execute", execute)
    res = CliRunner().invoke(app, ["run", str(LENET), "-p", "quick", "--backend", "docker", "--runs-dir",
                                   str(tmp_path / "runs"), "--images", "tensorflow==2.19.1,tensorflow==2.20.0"])
    assert res.exit_code == 0, res.output
    assert seen[0].opts.arms == ("tensorflow@2.19-cpu", "tensorflow@2.20-cpu")
    assert "tensorflow==2.20.0: row tensorflow-2.20-cpu (already in the matrix, image built)" in res.output
    assert "building image tensorflow-2.20-cpu" in res.output and "| STEP 1/9" in res.output
    res = CliRunner().invoke(app, ["run", str(LENET), "-p", "quick", "--runs-dir", str(tmp_path / "runs"),
                                   "--images", "tensorflow==2.19.1,tensorflow==2.20.0"])
    assert res.exit_code != 0 and isinstance(res.exception, KitError) and "local backend" in str(res.exception)


def test_an_image_release_of_another_framework_or_on_resume_is_refused(calls: list[tuple[str, str]],
                                                                       tmp_path: Path) -> None:
    with pytest.raises(KitError, match="is a tensorflow release, not pytorch") as e:
        request(tmp_path, image=["pytorch=tensorflow==2.20.0"])
    assert e.value.where == "--image pytorch=tensorflow==2.20.0" and calls == []
    with pytest.raises(KitError, match="resumed run keeps the images"):
        run_request(spec=None, profile=None, resume=tmp_path / "run", backend="docker", runs_dir=tmp_path,
                    image=["tensorflow=tensorflow==2.20.0"])
    assert calls == []
