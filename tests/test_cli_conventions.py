"""The command line follows the conventions (issue 27, items 4 and 5): short first contact (`kit list`, `kit show`,
`kit run ID`, `--json`, `kit doctor`'s verdict), help that shows its source text, one exit-code table, consoles that
never wrap in a pipe, argument checks before the heavy imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kit import cli
from kit.cli import app
from kit.errors import EXIT_CODE_TABLE, ExitCode, KitError

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_RUN = ROOT / "tests" / "data" / "golden" / "run"
runner = CliRunner()
WIDE = {"COLUMNS": "250", "TERMINAL_WIDTH": "250"}


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``cmd`` (click's objects, from the copy typer vendors)."""
    out = [(path, cmd)]
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            out += _commands(sub, (*path, name))
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- help: every command's, as written ------------------------------------------------------------------------------

def test_every_help_shows_its_source_text_with_brackets_and_no_bool_metavar() -> None:
    """Rich markup used to eat a literal [slurm] ("overrides the spec's )"); every bracketed word of every help
    string must reach the rendered help, flags carry no <bool>, and -h is --help."""
    commands = _commands(typer.main.get_command(app))
    assert len(commands) > 20
    checked = 0
    for path, cmd in commands:
        res = runner.invoke(app, [*path, "-h"], env=WIDE)
        assert res.exit_code == 0, (path, res.output)
        _short_helps_end_a_sentence(path, cmd, res.output)
        shown = _flat(res.output)
        assert "<bool>" not in shown, path
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params if not getattr(p, "hidden", False)]
        for text in texts:
            for word in re.findall(r"\[[^\]\s][^\]]*\]", text):
                assert _flat(word) in shown, (path, word)
                checked += 1
    assert checked >= 2  # [slurm] and [[claims]] at least are there to check
    run_help = _flat(runner.invoke(app, ["run", "--help"], env=WIDE).output)
    assert "(overrides the spec's [slurm])" in run_help
    assert "--backend <local|docker|apptainer|auto>" in run_help and "--executor <local|slurm>" in run_help
    assert "--download / --no-download" in run_help
    assert "<regression|improvement|change>" in _flat(runner.invoke(app, ["compare", "-h"], env=WIDE).output)


def test_version_and_completion() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.startswith("kit "), res.output
    top = _flat(runner.invoke(app, ["-h"], env=WIDE).output)
    assert "--install-completion" in top and "--show-completion" in top


# -- the exit-code table --------------------------------------------------------------------------------------------

def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["kit", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
        raise SystemExit(0)
    return int(info.value.code or 0)


def test_every_exit_code_is_distinct_and_documented() -> None:
    codes = [int(c) for c, _ in EXIT_CODE_TABLE]
    assert len(set(codes)) == len(codes) == len(ExitCode)
    assert ExitCode.INPUT not in (ExitCode.USAGE, ExitCode.FAILED) and ExitCode.INTERNAL != ExitCode.FAILED
    assert KitError("x").exit_code == ExitCode.INPUT
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = readme[readme.index("## Commands"):readme.index("## Experiments")]
    for code, _ in EXIT_CODE_TABLE:
        assert re.search(rf"^\| {int(code)} \|", commands, re.M), f"exit code {int(code)} not in README's table"


def test_exit_codes_of_the_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kit import compare
    from kit.doctor import checks, findings

    assert _main(monkeypatch, "list") == ExitCode.OK
    assert _main(monkeypatch, "run", "experiments/florencio2019_lenet", "--bogus") == ExitCode.USAGE
    assert _main(monkeypatch, "run", "florencio2019_lenet", "--backend", "nope") == ExitCode.USAGE
    assert _main(monkeypatch, "report", str(tmp_path / "nope")) == ExitCode.INPUT
    assert _main(monkeypatch, "run", "no_such_experiment") == ExitCode.USAGE  # a name that does not exist (issue 39)
    # the answer is no: doctor --strict with a required check failing
    monkeypatch.setattr(checks, "run_checks", lambda **kw: [findings.finding("python", False, "2.7", "upgrade",
                                                                               optional=False)])
    assert _main(monkeypatch, "doctor", "--strict") == ExitCode.FAILED
    assert _main(monkeypatch, "doctor") == ExitCode.OK  # without --strict it reports, exit 0
    # compare's gate: regression 1, suspect 4, inconclusive 3
    counts = {"regression": 0, "improvement": 0, "suspect": 0, "inconclusive": 0}
    assert compare.exit_code(dict(counts, regression=1), "regression") == ExitCode.FAILED
    assert compare.exit_code(dict(counts, suspect=1), "regression") == ExitCode.SUSPECT
    assert compare.exit_code(dict(counts, inconclusive=1), "regression") == ExitCode.INCONCLUSIVE

    # an unexpected exception is an internal error, never 1 ("regression found")
    def boom(**kw: Any) -> list[Any]:
        raise RuntimeError("planted bug")

    monkeypatch.setattr(checks, "run_checks", boom)
    assert _main(monkeypatch, "doctor") == ExitCode.INTERNAL

    def interrupted(**kw: Any) -> list[Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(checks, "run_checks", interrupted)
    assert _main(monkeypatch, "doctor") == ExitCode.INTERRUPTED


def test_a_missing_run_dir_is_said_before_the_heavy_imports(tmp_path: Path) -> None:
    """Said before the analysis is imported: checked by which modules were loaded (the probe), not by a clock."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from kit.cli import main; sys.argv = ['kit', 'report', "
                           f"{str(tmp_path / 'nope')!r}]; main()"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.INPUT and "run directory not found" in proc.stderr
    probe = subprocess.run([sys.executable, "-c", "import sys\nfrom kit.cli import main\nsys.argv = ['kit', 'report', "
                            f"{str(tmp_path / 'nope')!r}]\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
                            "print('scipy' in sys.modules, 'pandas' in sys.modules)"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "False False", probe.stdout + probe.stderr


def test_error_lines_do_not_wrap_in_a_pipe() -> None:
    """stderr is not a terminal: the one-line error stays one line at any length (copy-pasteable)."""
    name = "no_such_experiment_" + "x" * 100
    proc = subprocess.run([sys.executable, "-m", "kit", "run", name], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**__import__("os").environ, "COLUMNS": "80"})
    assert proc.returncode == ExitCode.USAGE
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and len(lines[0]) > 200 and name in lines[0], proc.stderr
    assert "florencio2019_lenet" in lines[0]  # the ids it could have been


# -- first contact --------------------------------------------------------------------------------------------------

def test_kit_list_is_one_line_per_experiment_and_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(An empty runs directory: a complete run in ./runs would make its measured wall time the estimate.) No
    minimum-detectable-effect simulation runs for a column `kit list` does not show (checked by making it fail,
    not by timing it)."""
    from kit.analysis import design
    from kit.catalog import list_experiments

    found = list_experiments(mde=False)
    n_profiles = sum(len(e["profiles"]) for e in found)

    def no_simulation(*_: object, **__: object) -> float:
        raise AssertionError("kit list ran the MDE simulation")

    monkeypatch.setattr(design, "mde_sd", no_simulation)
    res = runner.invoke(app, ["list", "--runs-dir", str(tmp_path)], env=WIDE)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 + n_profiles + 1, res.output  # header, the rows, the pointer to kit show
    rows = {tuple(ln.split()[:2]): ln for ln in lines[1:-1]}
    lenet = rows[("florencio2019_lenet", "quick")]
    assert " 26 " in lenet and "~3 min 40 s" in lenet and "experiments/florencio2019_lenet/" in lenet
    assert lenet.split()[-2] == "yes"
    from tests.test_cli_json import _valid

    data = _valid(runner.invoke(app, ["list", "--json", "--runs-dir", str(tmp_path)]).stdout, "list")
    by = {(r["id"], r["profile"]): r for r in data["experiments"]}
    assert by[("florencio2019_lenet", "quick")]["estimate_s"] == 220 and by[("florencio2019_lenet", "quick")]["decidable"]
    assert data["invalid"] == []


def test_kit_show_and_kit_run_take_an_id(tmp_path: Path) -> None:
    from kit.catalog import resolve_experiment

    assert resolve_experiment("florencio2019_lenet") == ROOT / "experiments" / "florencio2019_lenet"
    with pytest.raises(KitError, match="dai_single_gpu_factors, elshawi_dlbench, florencio2019_lenet"):
        resolve_experiment("lenet")
    res = runner.invoke(app, ["show", "florencio2019_lenet"], env=WIDE)
    assert res.exit_code == 0, res.output
    flat = _flat(res.output)
    for part in ("hypotheses: can this profile decide them?", "deviations from the paper", "what the paper claimed",
                 "kit run florencio2019_lenet --profile quick"):
        assert part in flat, part
    from tests.test_cli_json import _valid

    shown = _valid(runner.invoke(app, ["show", "florencio2019_lenet", "--json"]).stdout, "show")
    assert shown["id"] == "florencio2019_lenet" and shown["profiles"][0]["design"]["rows"][0]["mde_sd"]
    # kit run ID reaches the spec; an unknown id is a usage error that lists the ids
    res = runner.invoke(app, ["run", "no_such_id", "--runs-dir", str(tmp_path)])
    assert isinstance(res.exception, KitError) and "kit list" in str(res.exception)
    assert res.exception.exit_code == ExitCode.USAGE


def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """kit doctor probes the dataset download hosts: in tests the probe is injected (no host answers)."""
    from kit.doctor import downloads

    monkeypatch.setattr(downloads, "reach_host", lambda host, port, timeout_s: False)


def test_status_and_doctor_print_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_network(monkeypatch)
    res = runner.invoke(app, ["status", str(GOLDEN_RUN), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["total"] > 0
    res = runner.invoke(app, ["doctor", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["verdict"]["line"].startswith("Ready for: ") and doc["downloads"] is True
    assert {"check", "ok", "detail", "fix"} <= set(doc["findings"][0])


def test_doctor_opens_with_the_verdict_and_says_downloads_as_they_are(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    _no_network(monkeypatch)
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))  # nothing downloaded yet
    monkeypatch.delenv("KIT_DATA_DIR", raising=False)
    res = runner.invoke(app, ["doctor"], env=WIDE)
    lines = res.output.splitlines()
    assert lines[0].startswith("Ready for: ") and "downloads: on" in lines[1], res.output[:500]
    assert "dataset hosts: not reachable" in lines[1] and "every dataset" not in lines[0]  # no host answered
    assert "downloads are off" not in res.output  # kit run downloads by default
    res = runner.invoke(app, ["doctor", "--no-download"], env=WIDE)
    assert "downloads: off" in res.output


def test_doctor_flags_a_cuda_build_on_a_host_without_a_gpu() -> None:
    from kit.doctor.checks import check_cpu_builds, cpu_host_builds
    from kit.doctor.findings import verdict

    rows = cpu_host_builds({"pytorch": "13.0", "tensorflow": None}, {"pytorch": "2.14.1+cu130"})
    bad = [r for r in rows if not r["ok"]]
    assert len(bad) == 1 and "CUDA 13.0 build" in bad[0]["detail"]
    assert "download.pytorch.org/whl/cpu" in bad[0]["fix"] and bad[0]["fix"].startswith("make distclean setup")
    assert check_cpu_builds(driver="580.65.06") == []  # a GPU host: check_driver's business
    v = verdict([{"check": "NVIDIA driver", "ok": False, "detail": "no NVIDIA driver (NVML) on this host: CPU trials only",
                  "fix": "x"}, {"check": "LaTeX (PDF reports)", "ok": True, "detail": "latexmk", "fix": ""}])
    assert v["line"] == ("Ready for: PDF reports; not available here: GPU profiles (the papers' protocols), "
                         "because no NVIDIA driver")


def test_doctor_strict_study_says_what_its_profile_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    from kit import reproduce

    monkeypatch.setattr(reproduce.Host, "detect", classmethod(lambda cls, backend="local": reproduce.Host(0, (), "test")))
    _no_network(monkeypatch)
    res = runner.invoke(app, ["doctor", "--strict", "florencio2019_lenet", "--profile", "paper", "--json"])
    assert res.exit_code == ExitCode.FAILED, res.output
    study = json.loads(res.output)["study"]
    assert study["profile"] == "paper" and any("lacks a GPU" in m for m in study["missing"])


# -- scaffold and descriptions --------------------------------------------------------------------------------------

def test_new_study_creates_missing_parents(tmp_path: Path) -> None:
    from kit.spec import load_spec

    parent = tmp_path / "a" / "b"
    res = runner.invoke(app, ["new", "study", "my_mlp", "--dir", str(parent)])
    assert res.exit_code == 0, res.output
    spec = load_spec(parent / "my_mlp")
    for name in spec.profiles:  # a study of one's own reproduces no paper: no profile is "the published protocol"
        assert "published" not in load_spec(parent / "my_mlp", name).profile_description
    assert spec.profile_description == "the spec as written (no paper)"
    lenet = load_spec(Path(__file__).resolve().parents[1] / "experiments" / "florencio2019_lenet")
    assert lenet.profile_description == "the published protocol"


def test_profile_descriptions_are_host_neutral() -> None:
    from kit.catalog import list_experiments

    for e in list_experiments(mde=False):
        for p in e["profiles"]:
            d = p["description"]
            assert not re.search(r"\bhere\)|on this \d+-core|this host|downloaded here", d), (e["id"], p["name"], d)


def test_report_json_holds_the_summary_alone_on_stdout(tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "golden" / "run", run)
    res = CliRunner().invoke(app, ["report", str(run), "--format", "html", "--json"])
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)  # nothing but the JSON document on stdout; the tables went to stderr
    assert doc["status"] == "complete" and doc["analysis"].endswith("analysis.json")
    assert doc["claims"]["headline"].startswith("this experiment lists no claims")
    assert {h["id"] for h in doc["hypotheses"]} == {"H1"} and "Answer:" in res.stderr


# -- issue 39 item 8: names, help, completion --------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "said"), [
    (["run", "florencio2019_lenat"], "did you mean 'florencio2019_lenet'?"),
    (["run", "lenet", "--profile", "quick"], "did you mean 'florencio2019_lenet'?"),
    (["run", "florencio2019_lenet", "--profile", "quik"], "did you mean 'quick'?"),
    (["show", "germino"], "did you mean 'germino_mnist_energy'?"),
    (["doctor", "florencio2019_lenet", "--profile", "papr"], "did you mean 'paper'?"),
    (["bisect", "florencio2019_lenat", "--images", "a,b"], "did you mean 'florencio2019_lenet'?"),
])
def test_unknown_ids_and_profiles_exit_2_with_a_suggestion(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                           args: list[str], said: str) -> None:
    assert _main(monkeypatch, *args) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert said in _flat(err) and "Traceback" not in err, err


def test_unknown_commands_and_options_exit_2_with_a_suggestion(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    res = runner.invoke(app, ["lsit"])
    assert res.exit_code == ExitCode.USAGE and "Did you mean 'list'?" in res.output
    res = runner.invoke(app, ["run", "florencio2019_lenet", "--profle", "quick"])
    assert res.exit_code == ExitCode.USAGE and "--profile" in res.output  # click's own wording under CliRunner
    assert _main(monkeypatch, "run", "florencio2019_lenet", "--profle", "quick") == ExitCode.USAGE
    assert "No such option: --profle. Did you mean --profile?" in capsys.readouterr().err  # the kit's, via main()
    assert _main(monkeypatch, "images", "lsit") == ExitCode.USAGE
    assert "Did you mean 'list'?" in capsys.readouterr().err


def test_a_typo_is_said_before_any_framework_or_the_analysis_is_imported(tmp_path: Path) -> None:
    """A real process: the typo's exit status and message, and which modules were loaded (not a clock)."""
    code = ("import sys\nfrom kit.cli import main\nsys.argv = ['kit', 'run', 'florencio2019_lenat', '--runs-dir', "
            f"{str(tmp_path)!r}]\ntry:\n    main()\nexcept SystemExit as e:\n    rc = e.code\n"
            "print(rc, *(m in sys.modules for m in ('torch', 'tensorflow', 'scipy', 'pandas', 'kit.catalog')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.split() == ["2", "False", "False", "False", "False", "False"], proc.stdout + proc.stderr
    assert "did you mean 'florencio2019_lenet'?" in proc.stderr


def _short_helps_end_a_sentence(path: tuple[str, ...], cmd: Any, shown: str) -> None:
    """(Issue 39) `kit -h` cut a summary at "(e.g."; help showed <list[str]> (typer's label of a repeatable
    option): every help is checked for both by test_every_help_shows_its_source_text_with_brackets_and_no_bool_metavar."""
    assert "list[" not in shown and "<list" not in shown, path
    if hasattr(cmd, "commands"):
        listing = shown[shown.index("Commands:"):].splitlines()[1:]
        rows = [ln.split(None, 1) for ln in listing if ln.startswith("  ") and not ln.startswith("   ")]
        assert len(rows) == len(cmd.commands), (path, listing)
        for name, summary in rows:
            assert summary.rstrip().endswith(".") and not summary.rstrip().endswith("..."), (path, name, summary)


def test_completion_offers_ids_profiles_and_run_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from kit.cli.options import complete_experiments as _complete_experiments
    from kit.cli.options import complete_profiles as _complete_profiles
    from kit.cli.options import complete_run_dirs as _complete_run_dirs

    assert _complete_experiments("flo") == ["florencio2019_lenet"]
    assert {"florencio2019_lenet", "germino_mnist_energy"} <= set(_complete_experiments(""))
    assert _complete_profiles(SimpleNamespace(params={"spec": "florencio2019_lenet"}), "") == ["paper", "quick",
                                                                                              "smoke"]
    assert _complete_profiles(SimpleNamespace(params={}), "qu") == ["quick"]  # any experiment's
    runs = tmp_path / "runs"
    for name in ("20260101T000000Z-a", "20260102T000000Z-b"):
        (runs / name).mkdir(parents=True)
        (runs / name / "manifest.json").write_text("{}")
    (runs / "not-a-run").mkdir()
    ctx = SimpleNamespace(params={"runs_dir": runs})
    assert _complete_run_dirs(ctx, "") == [f"{runs}/20260101T000000Z-a/", f"{runs}/20260102T000000Z-b/"]
    assert _complete_run_dirs(ctx, "20260102") == [f"{runs}/20260102T000000Z-b/"]
    assert _complete_run_dirs(SimpleNamespace(params={}), f"{runs}/2026010") == [
        f"{runs}/20260101T000000Z-a/", f"{runs}/20260102T000000Z-b/"]
    monkeypatch.chdir(tmp_path)  # the default runs/ of the working directory
    assert _complete_run_dirs(SimpleNamespace(params={}), "") == ["runs/20260101T000000Z-a/",
                                                                  "runs/20260102T000000Z-b/"]
    # the callbacks are wired to the commands' parameters (click's completion entry point)
    run_cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    ctx = run_cmd.make_context("run", ["florencio2019_lenet"], resilient_parsing=True)
    params = {p.name: p for p in run_cmd.params}
    assert [c.value for c in params["spec"].shell_complete(ctx, "flo")] == ["florencio2019_lenet"]
    assert [c.value for c in params["profile"].shell_complete(ctx, "s")] == ["smoke"]
    status_cmd = typer.main.get_command(app).commands["status"]  # type: ignore[attr-defined]
    ctx = status_cmd.make_context("status", [], resilient_parsing=True)
    assert [c.value for c in status_cmd.params[0].shell_complete(ctx, "")] == ["runs/20260101T000000Z-a/",
                                                                               "runs/20260102T000000Z-b/"]
