"""The CLI is a thin layer: commands reach the library and errors become one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kit.cli import app
from kit.errors import ExitCode

runner = CliRunner()


def test_list_shows_experiments_and_profiles() -> None:
    res = runner.invoke(app, ["list"])
    assert res.exit_code == 0, res.output
    assert "florencio2019_lenet" in res.output
    for profile in ("paper", "quick", "smoke"):
        assert profile in res.output
    assert "202" in res.output  # paper profile: (100 + 1 warm-up) blocks x 2 frameworks


def test_list_exits_non_zero_when_an_experiment_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "broken.toml").write_text("schema = 1\n[experiment]\nid = 'broken'\n", encoding="utf-8")
    res = runner.invoke(app, ["list", "--experiments", str(tmp_path)])
    assert res.exit_code == ExitCode.INPUT, res.output  # a bad spec: an input error, not "the answer is no"
    assert "(invalid)" in res.output and "florencio2019_lenet" in res.output  # the row stays, the others too
    assert "1 experiment(s) invalid: broken.toml" in res.output


def test_doctor_reports_each_capability_with_fixes() -> None:
    res = runner.invoke(app, ["doctor"])
    assert res.exit_code == 0, res.output
    for check in ("python", "framework pytorch", "framework tensorflow", "sensor cpu", "sensor nvml",
                  "CPU frequency governor", "dataset mnist", "LaTeX"):
        assert check in res.output, check


def test_doctor_library_findings_have_fixes_when_missing() -> None:
    from kit.doctor.checks import run_checks

    findings = run_checks()
    assert {"check", "ok", "detail", "fix"} <= set(findings[0])
    for f in findings:
        if not f["ok"]:
            assert f["fix"], f  # every gap comes with its fix
    by = {f["check"]: f for f in findings}
    assert by["dataset mnist (t10k_split)"]["ok"]  # bundled real test set


def test_report_on_missing_run_dir_is_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kit", "report", str(tmp_path / "nope")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == ExitCode.INPUT
    assert "run directory not found" in proc.stderr and "Fix:" in proc.stderr and "Traceback" not in proc.stderr


def test_run_without_spec_or_resume(tmp_path: Path) -> None:
    res = runner.invoke(app, ["run", "--runs-dir", str(tmp_path)])
    assert res.exit_code != 0


def test_usage_error_is_clicks_message_not_a_traceback() -> None:
    """typer vendors click (no click package to import): a bad option must still be a usage line and exit 2."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kit", "run", "experiments/florencio2019_lenet/experiment.toml", "--bogus"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 2, proc.stderr
    assert "No such option: --bogus" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
