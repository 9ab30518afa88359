"""`--json` is JSON on stdout for every command that has it, `--json-file PATH` writes the same document, and every
document names its schema and the kit's version and validates against the JSON Schema shipped in kit/schemas/
(issue 39, item 8). The old `--json PATH` form fails as a usage error that names --json-file."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from kit import __version__
from kit.cli import app
from kit.cli.output import SCHEMAS
from kit.errors import ExitCode

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_RUN = ROOT / "tests" / "data" / "golden" / "run"
SCHEMA_DIR = ROOT / "kit" / "schemas"
runner = CliRunner()


def _schema(name: str) -> dict[str, Any]:
    from importlib import resources

    return json.loads(resources.files("kit").joinpath("schemas", f"{name}.schema.json").read_text(encoding="utf-8"))


def _valid(text: str, name: str) -> dict[str, Any]:
    """The document on stdout alone (json.loads fails on anything else there), of this schema, valid."""
    doc = json.loads(text)
    assert doc["schema"] == {"name": f"kit.{name}", "version": SCHEMAS[name]} and doc["kit_version"] == __version__
    jsonschema.Draft202012Validator(_schema(name)).validate(doc)
    return doc


def test_every_document_has_a_schema_file_that_is_a_valid_json_schema() -> None:
    shipped = {p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json")}
    assert shipped == set(SCHEMAS)
    for name in SCHEMAS:
        schema = _schema(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"kit.{name}/{SCHEMAS[name]}"
        assert schema["properties"]["schema"]["properties"]["name"] == {"const": f"kit.{name}"}
        assert {"schema", "kit_version"} <= set(schema["required"])
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"kit" = ["schemas/*.schema.json"]' in pyproject  # shipped as package data


def test_a_schema_rejects_a_document_that_breaks_it() -> None:
    """The check can fail: a missing key, a wrong type and another schema's name are each refused."""
    doc = {"schema": {"name": "kit.list", "version": 1}, "kit_version": __version__, "experiments": [], "invalid": []}
    validator = jsonschema.Draft202012Validator(_schema("list"))
    validator.validate(doc)
    for broken in ({k: v for k, v in doc.items() if k != "kit_version"}, {**doc, "invalid": "x"},
                   {**doc, "schema": {"name": "kit.show", "version": 1}}):
        assert not validator.is_valid(broken)


def test_status_json() -> None:
    """(kit list --json and kit show --json are validated where tests/test_cli_conventions.py reads them.)"""
    res = runner.invoke(app, ["status", str(GOLDEN_RUN), "--json"])
    assert res.exit_code == 0, res.output
    assert _valid(res.stdout, "status")["total"] > 0


def test_doctor_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.doctor import downloads

    monkeypatch.setattr(downloads, "reach_host", lambda host, port, timeout_s: False)
    doc = _valid(runner.invoke(app, ["doctor", "--json"]).stdout, "doctor")
    assert doc["download_hosts"] in ("not reachable", "not checked")
    doc = _valid(runner.invoke(app, ["doctor", "--json", "--no-check-downloads"]).stdout, "doctor")
    assert doc["download_hosts"] == "not checked"


def test_selftest_json_and_json_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kit import selftest as st

    def fake(**kwargs: Any) -> dict[str, Any]:  # the record kit.selftest builds, without running the checks
        return {**st.record([st.check("CPU timer", "pass", "fine"), st.check("GPU checks", "skip", "no GPU")], False),
                "backend": "local", "gpu_index": None}

    monkeypatch.setattr(st, "run_selftest", fake)
    res = runner.invoke(app, ["selftest", "--json", "--json-file", str(tmp_path / "st.json")])
    assert res.exit_code == 0, res.output
    doc = _valid(res.stdout, "selftest")
    assert doc == json.loads((tmp_path / "st.json").read_text()) and doc["record_schema"] == st.SCHEMA
    assert "self-test passed" in res.stderr  # the human lines went to stderr


def test_bench_overhead_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The overhead statistics are real (kit.bench.overhead); the trial is a deterministic stand-in."""
    from kit import bench

    times = iter([0.100 + 0.001 * (i % 5) for i in range(100)])
    monkeypatch.setattr(bench, "harness_trial", lambda *a, **kw: lambda on: next(times) * (1.01 if on else 1.0))
    res = runner.invoke(app, ["bench", "overhead", "--pairs", "4", "--json"])
    assert res.exit_code == 0, res.output
    doc = _valid(res.stdout, "bench-overhead")
    assert doc["n_pairs"] == 4 and len(doc["times_on_s"]) == 4


def test_bisect_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The search and verdicts are kit.bisect's over synthetic releases (tests/test_bisect.py); no image runs."""
    from kit import bisect
    from tests.test_bisect import releases_with

    names, pair, _ = releases_with([1.0, 1.0, 1.12, 1.12])

    def fake_run(spec: Any, rows: list[str], opts: Any, *a: Any, **kw: Any) -> bisect.BisectResult:
        out = bisect.bisect_releases(names, pair)
        return dataclasses.replace(out, metric=opts.metric, phase=opts.phase, threshold=opts.threshold,
                                   alpha=opts.alpha, experiment=spec.experiment.id, profile=spec.profile)

    monkeypatch.setattr(bisect, "run_bisect", fake_run)
    res = runner.invoke(app, ["bisect", str(ROOT / "experiments" / "florencio2019_lenet"), "--images", ",".join(names),
                              "-p", "quick", "--json", "--json-file", str(tmp_path / "b.json"), "--runs-dir",
                              str(tmp_path / "runs")])
    assert res.exit_code in (0, 3), res.output
    doc = _valid(res.stdout, "bisect")
    assert doc["status"] == "located" and doc == json.loads((tmp_path / "b.json").read_text())


@pytest.mark.slow
def test_report_compare_history_json(tmp_path: Path) -> None:
    a, b, runs = tmp_path / "a", tmp_path / "b", tmp_path / "runs"
    for dest in (a, b, runs / "r0", runs / "r1"):
        shutil.copytree(GOLDEN_RUN, dest)
    res = runner.invoke(app, ["report", str(a), "--format", "html", "--json"])
    assert res.exit_code == 0, res.output
    assert _valid(res.stdout, "run-summary")["status"] == "complete"
    res = runner.invoke(app, ["compare", str(a), str(b), "--json", "--json-file", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    doc = _valid(res.stdout, "compare")
    assert doc == json.loads((tmp_path / "c.json").read_text()) and doc["rows"]
    res = runner.invoke(app, ["history", str(runs), "--arm", "pytorch", "--json", "--no-cache"])
    assert res.exit_code == 0, res.output
    assert [r["version"] for r in _valid(res.stdout, "history")["runs"]] == ["pytorch calibrated"] * 2


@pytest.mark.slow
def test_run_and_verify_json(tmp_path: Path) -> None:
    """A real run of the calibrated workload (--json), packed, then verified (--json)."""
    spec = tmp_path / "cal.toml"
    spec.write_text((ROOT / "tests" / "data" / "calibrated.toml").read_text().replace("repetitions = 12",
                                                                                      "repetitions = 3"))
    res = runner.invoke(app, ["run", str(spec), "--runs-dir", str(tmp_path / "runs"), "--no-report", "--json"])
    assert res.exit_code == 0, res.output
    run = _valid(res.stdout, "run-summary")
    assert run["status"] == "complete"
    assert runner.invoke(app, ["pack", run["run_dir"]]).exit_code == 0
    bundle = run["run_dir"] + ".bundle"
    res = runner.invoke(app, ["verify", bundle, "--runs-dir", str(tmp_path / "v"), "--json"])
    doc = _valid(res.stdout, "verify")
    assert res.exit_code == 0 and doc["claims_changed"] == [], res.output
    res = runner.invoke(app, ["verify", bundle, "--integrity-only", "--json"])
    assert res.exit_code == 0 and _valid(res.stdout, "verify")["integrity_only"] is True


# -- the old form ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["compare", "A_DIR", "B_DIR", "--json", "out.json"],
                                  ["history", "A_DIR", "--json", "out.json"],
                                  ["selftest", "--json", "out.json"],
                                  ["bisect", "experiments/florencio2019_lenet", "--images", "a,b", "--json", "out.json"],
                                  ["compare", "A_DIR", "--arms", "x,y", "--json", "out.json"],
                                  ["bench", "overhead", "--json", "out.json"]])
def test_the_old_json_path_form_is_a_usage_error_that_names_json_file(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      tmp_path: Path, args: list[str]) -> None:
    from kit import cli

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    argv = [{"A_DIR": str(tmp_path / "a"), "B_DIR": str(tmp_path / "b")}.get(x, x) for x in args]
    monkeypatch.setattr(sys, "argv", ["kit", *argv])
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit) as info:
        cli.main()
    assert info.value.code == ExitCode.USAGE
    err = " ".join(capsys.readouterr().err.split())
    assert "--json-file out.json" in err and "Traceback" not in err, err
    assert not (tmp_path / "out.json").exists() and not (ROOT / "out.json").exists()
