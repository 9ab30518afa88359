"""CI cannot go green by skipping: under KIT_CI=1 a skipped engine/slurm/tex/browser test fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

CASES = '''
import pytest

@pytest.fixture
def engine():
    pytest.skip("no engine answers")

@pytest.mark.engine
def test_fixture_skips(engine):
    pass

@pytest.mark.tex
def test_body_skips():
    pytest.skip("latexmk missing")

def test_plain_skip():
    pytest.skip("allowed")
'''


def _run(tmp_path: Path, ci: bool) -> str:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_cases.py").write_text(CASES)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    engine: e\n    tex: t\n")
    env = {"PATH": "/usr/bin:/bin", **({"KIT_CI": "1"} if ci else {})}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=env)
    return proc.stdout


def test_required_skips_fail_under_ci(tmp_path: Path) -> None:
    out = _run(tmp_path, ci=True)
    assert "1 failed, 1 skipped, 1 error" in out, out
    assert "test marked engine was skipped (Skipped: no engine answers)" in out
    assert "test marked tex was skipped" in out


def test_outside_ci_they_skip(tmp_path: Path) -> None:
    assert "3 skipped" in _run(tmp_path, ci=False)
