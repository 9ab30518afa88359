"""The daily commands import only what they use (issue 44, item 2: imports on demand).

`kit --version`, `kit list`, `kit show`, `kit status` and `kit doctor` answer in about the time Python takes to
start when they load no plotting, no framework and no statistics they do not compute: matplotlib alone is half a
second, statsmodels and pandas another second, torch or TensorFlow several. Each command runs here in a fresh
interpreter (the CLI's own entry point, in-process), which then writes the modules it holds; the test asserts
on that import graph, not on the time, so it holds on a loaded machine too. A module moved back to a top-level
import (kit.store's pandas, kit.stats' package namespace, kit.analysis.threats' pandas) fails it with the
command and the modules named.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GOLDEN_RUN = REPO / "tests" / "data" / "golden" / "run"
LENET = REPO / "experiments" / "florencio2019_lenet"

# never, for any of these commands: plotting, the frameworks, and the data-frame and model-fitting stack
NEVER = ("matplotlib", "torch", "tensorflow", "keras", "jax", "statsmodels", "pandas", "pyarrow", "sklearn")
# scipy: list and show compute the design's smallest attainable p and asymptotic MDE with scipy.special's normal
# (kit.stats.normal), never scipy.stats (0.75 s of docstring rewriting at import); the other three compute nothing
# statistical
NO_SCIPY = (*NEVER, "scipy")
NO_SCIPY_STATS = ("scipy.stats",)

PROBE = """\
import json, sys
out, argv = sys.argv[1], sys.argv[2:]
sys.argv = ["kit", *argv]
import kit.cli
code = 0
try:
    kit.cli.main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
with open(out, "w", encoding="utf-8") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported_by(args: list[str], cwd: Path) -> tuple[int, set[str], str]:
    """Run `kit ARGS` in a fresh interpreter from ``cwd``: its exit code, the top-level names of the modules it
    had loaded when it returned, and its stderr (to say why a command failed)."""
    out = cwd / "modules.json"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    assert out.is_file(), f"kit {' '.join(args)} wrote no module list:\n{done.stderr[-3000:]}"
    got = json.loads(out.read_text(encoding="utf-8"))
    full = set(got["modules"])
    return int(got["code"]), {m.split(".")[0] for m in full} | (full & set(NO_SCIPY_STATS)), done.stderr


def _assert_lean(args: list[str], cwd: Path, forbidden: tuple[str, ...], codes: tuple[int, ...] = (0,)) -> set[str]:
    code, tops, err = imported_by(args, cwd)
    assert code in codes, f"kit {' '.join(args)} exited {code}:\n{err[-3000:]}"
    loaded = sorted(set(forbidden) & tops)
    assert not loaded, (f"kit {' '.join(args)} imported {', '.join(loaded)}, which it does not use: move the import "
                        "into the function that needs it (python -X importtime -m kit ... shows who pulls it in)")
    return tops


def test_version_imports_nothing_of_the_cli(tmp_path: Path) -> None:
    """`kit --version` is answered before typer, rich and the kit's modules load (the <= 0.3 s of issue 44)."""
    tops = _assert_lean(["--version"], tmp_path, NO_SCIPY)
    assert not {"typer", "rich", "click", "numpy"} & tops


def test_list_imports_no_plotting_frameworks_or_frames(tmp_path: Path) -> None:
    _assert_lean(["list", "--experiments", str(LENET), "--runs-dir", str(tmp_path / "runs")], tmp_path,
                 (*NEVER, *NO_SCIPY_STATS))


def test_show_imports_no_plotting_frameworks_or_frames(tmp_path: Path) -> None:
    _assert_lean(["show", str(LENET / "experiment.toml")], tmp_path, (*NEVER, *NO_SCIPY_STATS))


def test_status_imports_no_statistics(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run)
    _assert_lean(["status", str(run)], tmp_path, NO_SCIPY)
    _assert_lean(["status", str(run), "--json"], tmp_path, NO_SCIPY)


def test_doctor_imports_no_statistics(tmp_path: Path) -> None:
    """doctor probes the host (engine, GPUs, sensors): no download probes here, so no network; exit 0 or 1 (a
    host may lack what a check wants), never a crash."""
    _assert_lean(["doctor", "--no-check-downloads"], tmp_path, NO_SCIPY, codes=(0, 1))


@pytest.mark.parametrize("module", ["kit.stats", "kit.store", "kit.analysis.threats", "kit.cli"])
def test_the_namespaces_load_their_heavy_parts_on_use(module: str) -> None:
    """Importing these modules alone loads no pandas or statsmodels; their names still resolve (kit.stats'
    exports and kit.cli.app on first use)."""
    code = (f"import sys, {module}\nprint(sorted(m for m in ('pandas', 'statsmodels', 'matplotlib', 'typer') "
            "if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]", (module, done.stdout, done.stderr)


def test_lazy_names_resolve() -> None:
    from kit import cli, stats

    assert callable(stats.compare_two) and callable(stats.holm) and stats.MIN_N_FOR_TESTS == 10
    assert set(stats.__all__) <= set(dir(stats)) | set(stats._WHERE)
    for name in stats.__all__:
        assert getattr(stats, name) is not None
    assert cli.app.info.help and cli.version_line().startswith("kit ")
    with pytest.raises(AttributeError):
        _ = stats.no_such_name


@pytest.mark.slow
def test_a_stored_analysis_is_reported_and_compared_without_the_analysis_stack(tmp_path: Path) -> None:
    """Once a run's sealed analysis and its figures are stored, `kit report` reads them without scipy.stats,
    statsmodels or matplotlib, and `kit compare` of two runs without pandas, statsmodels or matplotlib (its rank
    tests need scipy.stats: the floor issue 44's closing note measures)."""
    runs = []
    for name in ("a", "b"):
        run = tmp_path / name
        shutil.copytree(GOLDEN_RUN, run)
        code, _tops, err = imported_by(["report", str(run), "--format", "html"], tmp_path)
        assert code == 0, err[-3000:]
        runs.append(str(run))
    _assert_lean(["report", runs[0], "--format", "html"], tmp_path,
                 ("matplotlib", "statsmodels", "torch", "tensorflow", *NO_SCIPY_STATS))
    _assert_lean(["compare", *runs], tmp_path, ("matplotlib", "statsmodels", "pandas", "torch", "tensorflow"),
                 codes=(0, 1, 3, 4))
