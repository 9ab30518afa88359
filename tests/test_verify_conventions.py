"""`kit verify` (issue 39, item 8): "integrity: ok" is the first thing it says, before any re-run; --integrity-only
stops there (exit 0 when it passes); a bundle that verifies with every claim unchanged exits 0, also when none of its
claims could be tested (it used to exit 1: "reproduced" required a tested claim, and the exit followed it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kit.errors import ExitCode
from kit.verify import compare_claims

ROOT = Path(__file__).resolve().parents[1]


def test_an_untested_claim_that_stays_untested_is_unchanged_and_says_so() -> None:
    old = [{"id": "H1", "phase": "train", "config_id": "c00", "tested": False, "rejected": None, "direction": None,
            "ratio": None}]
    (row,) = compare_claims(old, [dict(old[0])], 0.10)
    assert row["reproduced"] and row["new_tested"] is False and row["why"] == ""
    (row,) = compare_claims(old, [{**old[0], "tested": True, "rejected": False, "ratio": 1.01}], 0.10)
    assert not row["reproduced"] and row["new_tested"] is True  # tested now: the decision changed


def _kit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bundle of a calibrated run too short to test its hypothesis (3 repetitions): every claim untested."""
    from kit.pack import pack
    from kit.run import RunOptions, start_run
    from kit.spec import load_spec

    tmp = tmp_path_factory.mktemp("verify")
    spec = tmp / "cal.toml"
    spec.write_text((ROOT / "tests" / "data" / "calibrated.toml").read_text().replace("repetitions = 12",
                                                                                      "repetitions = 3"))
    rd = start_run(load_spec(spec), RunOptions(runs_root=tmp / "runs"))
    return Path(str(pack(rd.path)).removesuffix(".tar.gz"))


@pytest.mark.slow
def test_integrity_first_and_exit_0_when_no_claim_changed(bundle: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", str(bundle), "--runs-dir", str(tmp_path / "v")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, cwd=tmp_path)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert proc.returncode == ExitCode.OK, proc.stdout[-3000:]
    assert lines[0].startswith("integrity: ok ("), lines[:3]  # before the re-run's first trial line
    assert any(ln.startswith("ok ") for ln in lines[1:])  # the re-run happened, after it
    assert "claims: none changed (none was tested" in proc.stdout and "results reproduced: no" in proc.stdout


@pytest.mark.slow
def test_integrity_only_stops_after_the_check(bundle: Path, tmp_path: Path) -> None:
    import shutil

    runs = tmp_path / "v"
    proc = _kit("verify", str(bundle), "--integrity-only", "--runs-dir", str(runs), cwd=tmp_path)
    assert proc.returncode == ExitCode.OK, proc.stdout + proc.stderr
    assert proc.stdout.startswith("integrity: ok (") and not runs.exists()  # nothing re-run
    forged = tmp_path / "forged"
    shutil.copytree(bundle, forged)
    trial = next((forged / "run" / "trials").glob("*.json"))
    trial.chmod(0o644)
    trial.write_text(trial.read_text().replace('"status": "ok"', '"status": "ok" '))
    proc = _kit("verify", str(forged), "--integrity-only", cwd=tmp_path)
    assert proc.returncode == ExitCode.INPUT and "integrity check failed" in proc.stderr, proc.stderr
    assert "integrity: ok" not in proc.stdout
