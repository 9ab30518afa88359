"""A lean CPU install whatever the host offers (issue 39, item 6): without a CPU torchvision the studies that need it
say so (kit list, kit show, kit doctor) and reproduce-all skips them with the reason and the fix; and every hint the
kit prints names a command that works from where the user stands (.venv/bin/kit unless `kit` on PATH is this kit)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kit.doctor import checks, findings, torch_cpu
from kit.fmt import from_here, in_user_terms, kit_cmd, kit_prefix
from kit.reproduce import Host, Needs, discover, fits, make_plan, requirements
from kit.spec import load_spec
from kit.studies import BUNDLED, torchvision_need

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LEAN = Host(0, (), "no NVML", torchvision=False)


def test_which_studies_need_torchvision() -> None:
    """The model zoo's vision models and DLBench's Faster R-CNN case; LeNet, Germino and Dai's quick profile
    (a transformer) do not."""
    need = {(p.parent.name, prof): torchvision_need(load_spec(p, prof))
            for p, prof in [(BUNDLED / "patel_models_sweep" / "experiment.toml", "quick"),
                            (BUNDLED / "elshawi_dlbench" / "experiment.toml", "quick"),
                            (BUNDLED / "florencio2019_lenet" / "experiment.toml", "quick"),
                            (BUNDLED / "germino_mnist_energy" / "experiment.toml", "quick"),
                            (BUNDLED / "dai_single_gpu_factors" / "experiment.toml", "quick")]}
    assert "resnet18" in need[("patel_models_sweep", "quick")] and "torchvision" in need[("patel_models_sweep", "quick")]
    assert "voc2012" in need[("elshawi_dlbench", "quick")] and "Faster R-CNN" in need[("elshawi_dlbench", "quick")]
    assert not need[("florencio2019_lenet", "quick")] and not need[("germino_mnist_energy", "quick")]
    assert not need[("dai_single_gpu_factors", "quick")]


@pytest.mark.slow  # loads every bundled study's profiles (seconds on a busy 2-core host)
def test_reproduce_all_skips_them_with_the_reason_and_the_fix(tmp_path: Path) -> None:
    plan = {e.study: e for e in make_plan(discover(BUNDLED), LEAN, "quick", tmp_path, {})}
    zoo = plan["patel_models_sweep"]
    assert zoo.action == "skip" and "needs torchvision (resnet18, mobilenet_v2 from torchvision.models)" in zoo.reason
    assert "Fix:" in zoo.reason and torch_cpu.torchvision_pin() in zoo.reason and torch_cpu.TORCH_CPU_INDEX in zoo.reason
    assert "Faster R-CNN" in plan["elshawi_dlbench"].reason
    assert plan["florencio2019_lenet"].action == "run"
    with_tv = {e.study: e for e in make_plan(discover(BUNDLED), Host(0, (), "no NVML"), "quick", tmp_path, {})}
    assert with_tv["patel_models_sweep"].action == "run"  # torchvision present: nothing lacks
    needs = requirements(load_spec(BUNDLED / "patel_models_sweep" / "experiment.toml", "quick"))
    assert fits(Host(0, torchvision=True), needs) is None and fits(LEAN, Needs()) is None


def test_a_container_backend_does_not_need_the_venvs_torchvision(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit import studies

    monkeypatch.setattr(studies, "torchvision_installed", lambda: False)
    assert Host.detect("docker").torchvision is True and Host.detect("local").torchvision is False


@pytest.mark.slow  # loads every bundled study's profiles
def test_kit_list_and_doctor_say_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit import reproduce, studies
    from kit.catalog import list_experiments
    from kit.cli.listing import list_rows

    monkeypatch.setattr(reproduce.Host, "detect", classmethod(lambda cls, backend="local": LEAN))
    found = [e for e in list_experiments(BUNDLED, mde=False) if e["id"] in ("patel_models_sweep",
                                                                            "florencio2019_lenet")]
    rows = {(r["id"], r["profile"]): r for r in list_rows(found, Path("/nonexistent-runs"))}
    assert rows[("patel_models_sweep", "quick")]["estimate_text"] == "needs torchvision"
    assert "torchvision" in rows[("patel_models_sweep", "quick")]["why_not_here"]
    assert rows[("florencio2019_lenet", "quick")]["fits_here"] is True
    monkeypatch.setattr(checks.importlib.metadata, "version",
                        lambda name: (_ for _ in ()).throw(checks.importlib.metadata.PackageNotFoundError(name))
                        if name == "torchvision" else "2.13.0+cpu")
    monkeypatch.setattr(studies, "torchvision_installed", lambda: False)
    (f,) = checks.check_torchvision()
    assert not f["ok"] and f["optional"] and "patel_models_sweep" in f["detail"] and "elshawi_dlbench" in f["detail"]
    assert "torchvision==0.28.0+cpu" in f["fix"] and "florencio2019_lenet" not in f["detail"]
    assert "studies that need torchvision" in findings.verdict([f])["line"]


def test_the_kit_command_as_the_user_can_type_it(tmp_path: Path) -> None:
    script = BIN / "kit"
    if not script.is_file():
        pytest.skip("no kit script beside this interpreter")
    # not on PATH: the script, relative to the working directory below it, absolute elsewhere
    assert kit_prefix(cwd=str(BIN.parent.parent), path_env="/usr/bin:/bin") == from_here(script, str(BIN.parent.parent))
    assert kit_prefix(cwd=str(BIN.parent.parent), path_env="/usr/bin:/bin").endswith("bin/kit")
    assert not kit_prefix(cwd=str(BIN.parent.parent), path_env="/usr/bin:/bin").startswith("/")
    assert kit_prefix(cwd=str(tmp_path), path_env="/usr/bin:/bin") == str(script.absolute())
    # on PATH (the same script): plain kit; another kit earlier on PATH: this one's path
    assert kit_prefix(cwd=str(tmp_path), path_env=f"{BIN}:/usr/bin") == "kit"
    other = tmp_path / "bin"
    other.mkdir()
    (other / "kit").write_text("#!/bin/sh\n")
    (other / "kit").chmod(0o755)
    assert kit_prefix(cwd=str(tmp_path), path_env=f"{other}:{BIN}") == str(script.absolute())


def test_hints_in_messages_are_rewritten_not_prose() -> None:
    text = ("continue with: kit run --resume runs/x; `kit report RUN`; sudo kit tune; (kit doctor); "
            "the kit runs trials; the kit report says")
    got = in_user_terms(text, ".venv/bin/kit")
    assert got == ("continue with: .venv/bin/kit run --resume runs/x; `.venv/bin/kit report RUN`; sudo .venv/bin/kit "
                   "tune; (.venv/bin/kit doctor); the kit runs trials; the kit report says")
    assert in_user_terms(got, ".venv/bin/kit") == got  # idempotent: a hint already in user terms stays
    assert in_user_terms(text, "kit") == text
    assert kit_cmd("status RUN").endswith("kit status RUN")


def test_every_kit_command_is_known_to_the_rewrite() -> None:
    import typer.main

    from kit.cli import app
    from kit.fmt import KIT_COMMANDS

    assert set(typer.main.get_command(app).commands) <= set(KIT_COMMANDS)  # type: ignore[attr-defined]


@pytest.mark.slow  # a `kit` process
def test_an_error_fix_names_the_command_that_runs_here(tmp_path: Path) -> None:
    kit = ROOT / ".venv" / "bin" / "kit"
    if not kit.exists():
        pytest.skip("needs the kit installed in .venv (make setup)")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    bad = tmp_path / "not-a-run"
    bad.mkdir()
    p = subprocess.run([str(kit), "status", str(bad)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
                       check=False)
    msg = " ".join((p.stdout + p.stderr).split())
    assert p.returncode == 5 and "`.venv/bin/kit run`" in msg, msg
