"""Shared fixtures. Tests that need hardware, an engine or torchvision skip with the reason;
under KIT_CI=1 (set by .ci/run) such a skip becomes a failure, so CI cannot
go green by skipping the integration tests it is meant to run."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from kit.harness import PINNED_ENV

# Tests run workloads in this process too: pin what the harness pins before any test imports a framework
# (TensorFlow reads TF_ENABLE_ONEDNN_OPTS once, at import; a CPU trial whose setting did not take stops).
for _key, _value in PINNED_ENV.items():
    os.environ.setdefault(_key, _value)

# The user's config directory holds the study allow-list and the key that seals analyses (kit.trust): tests
# never read or write the real one (set at import: module-scoped fixtures run before function-scoped ones).
os.environ["KIT_CONFIG_DIR"] = tempfile.mkdtemp(prefix="kit-test-config-")
# The simulated power figures (kit.analysis.power_cache) are kept on disk between processes: one directory for the whole
# session, so the runs that tests start with `kit run` share the draws (deterministic: seed, code and numpy are in
# each entry's key) instead of each analysis simulating them again, and the user's own cache is never touched.
os.environ["KIT_POWER_CACHE"] = tempfile.mkdtemp(prefix="kit-test-power-")
# The report figures (kit.report.figure_cache) likewise: one directory for the session, never the user's.
os.environ["KIT_FIGURE_CACHE"] = tempfile.mkdtemp(prefix="kit-test-figures-")
# A user's images/matrix.local.toml (kit images add) never changes a test: set at import, because tests
# parametrised over the matrix's rows read it while they are collected, before any fixture runs.
os.environ["KIT_LOCAL_MATRIX"] = str(Path(tempfile.mkdtemp(prefix="kit-test-matrix-")) / "matrix.local.toml")

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
MNIST_T10K = ROOT / "data" / "mnist-t10k"
# Markers whose tests CI must run, not skip (.ci/run installs the engine, Slurm, TeX and Chromium);
# only gpu may skip there: CI machines have no GPU.
CI_REQUIRED = {"engine", "slurm", "browser", "tex", "mount", "torchvision"}
# A lean CPU install (issue 39, item 6: `make setup` where pip offers a CPU torch but no CPU torchvision) has torch
# alone; a test that needs torchvision (the model zoo's vision models, Faster R-CNN) skips there, saying why. Found
# without importing it: importing torchvision starts torch, seconds per process for every test run.
NO_TORCHVISION = "needs torchvision, which this venv lacks (a lean CPU install: see `kit doctor`)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked torchvision where this interpreter cannot import it (CI installs the full pair, and
    under KIT_CI=1 the skip below is turned into a failure by pytest_runtest_makereport)."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    skip = pytest.mark.skip(reason=NO_TORCHVISION)
    for item in items:
        if item.get_closest_marker("torchvision") is not None:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    """Under KIT_CI=1 a skip of a CI-required test is a failure, whether the test or a fixture skipped."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("KIT_CI") != "1" or not report.skipped:
        return
    required = CI_REQUIRED & {m.name for m in item.iter_markers()}
    if required and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"KIT_CI=1: test marked {', '.join(sorted(required))} was skipped ({reason}); "
                           "CI must run it")


@pytest.fixture(autouse=True)
def _no_user_matrix(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts without a user matrix (a row one test adds never reaches the next): a fresh path that
    does not exist (the one set at import covers collection)."""
    monkeypatch.setenv("KIT_LOCAL_MATRIX", str(tmp_path_factory.mktemp("no-user-matrix") / "matrix.local.toml"))


@pytest.fixture
def spec_path() -> Path:
    return SPEC


@pytest.fixture
def mnist_dir(tmp_path: Path) -> Path:
    """A private copy of the real MNIST test set (tests may corrupt it)."""
    d = tmp_path / "mnist"
    shutil.copytree(MNIST_T10K, d)
    return d


@pytest.fixture
def kit_cmd() -> list[str]:
    return [sys.executable, "-m", "kit"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's dataset or history cache, never download in tests."""
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("KIT_HISTORY_CACHE", str(tmp_path_factory.mktemp("history-cache")))
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
