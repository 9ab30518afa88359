"""Golden LeNet report: a stored quick run of the florencio2019_lenet study (made by ``make reproduce``),
analysed and reported afresh, must give the stored analysis.json, HTML page and LaTeX sources, line for line.

This is what keeps a refactor of the analysis and report layers honest: the records may change shape inside
the kit, the reader's report may not. Only the run directory's own path (it differs per test), the checkout's
experiments folder (CI clones elsewhere) and the kit version are normalised; matplotlib's SVG ids are fixed by a salt (kit.report.figures.to_svg), so the figures
compare too.

Regenerate after an intended change of what a report says with ``KIT_REGEN_GOLDEN=1 pytest
tests/test_report_golden.py`` and review the diff of tests/data/golden_lenet/expected in the commit.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kit
from kit.cli import app

REPO = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "data" / "golden_lenet"
EXPECTED = GOLDEN / "expected"
VOLATILE = ("kit_version", "seal")


def _normalised(text: str, run: Path) -> str:
    # LaTeX breaks a long path with \allowbreak{} between its parts: the path is found without them
    text = text.replace("\\allowbreak{}", "")
    # the study's folder is read from this checkout, wherever it lies (CI clones it elsewhere); the run's own
    # recorded paths (its dataset, its study_dir) stay as the run says
    text = text.replace(str(REPO / "experiments"), "EXPERIMENTS")
    return text.replace(str(run), "RUN").replace(f"kit {kit.__version__}", "kit VERSION")


def _outputs(run: Path) -> dict[str, str]:
    """The report's text outputs (figures as LaTeX wrappers; their PDFs are drawn from the same data as the SVGs
    the HTML embeds) and the analysis without what changes per release or key."""
    out = {"index.html": (run / "report" / "index.html").read_text(encoding="utf-8")}
    latex = run / "report" / "latex"
    for path in sorted(latex.rglob("*.tex")):
        out[f"latex/{path.relative_to(latex)}"] = path.read_text(encoding="utf-8")
    analysis = json.loads((run / "analysis.json").read_text(encoding="utf-8"))
    out["analysis.json"] = json.dumps({k: v for k, v in analysis.items() if k not in VOLATILE}, indent=1,
                                      sort_keys=True) + "\n"
    return {name: _normalised(text, run) for name, text in out.items()}


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    run = tmp_path_factory.mktemp("golden-lenet") / "run"
    shutil.copytree(GOLDEN / "run", run)
    result = CliRunner().invoke(app, ["report", str(run), "--format", "html,latex"])
    assert result.exit_code == 0, result.output
    return _outputs(run)


def test_the_lenet_report_is_the_golden_one(fresh: dict[str, str]) -> None:
    if os.environ.get("KIT_REGEN_GOLDEN") == "1":
        shutil.rmtree(EXPECTED, ignore_errors=True)
        for name, text in fresh.items():
            (EXPECTED / name).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / name).write_text(text, encoding="utf-8")
    expected = {str(p.relative_to(EXPECTED)): p.read_text(encoding="utf-8")
                for p in sorted(EXPECTED.rglob("*")) if p.is_file()}
    assert sorted(fresh) == sorted(expected), "the report's files differ from the golden ones"
    problems = []
    for name in sorted(expected):
        if fresh[name] != expected[name]:
            diff = difflib.unified_diff(expected[name].splitlines(), fresh[name].splitlines(), f"golden/{name}",
                                        f"fresh/{name}", n=1, lineterm="")
            problems.append("\n".join(line[:300] for line in list(diff)[:40]))
    assert not problems, "the report differs from the golden one:\n" + "\n\n".join(problems)


def test_the_golden_report_can_fail(fresh: dict[str, str]) -> None:
    """The comparison above sees a one-character change of a figure in the answer (it is not vacuous)."""
    html = fresh["index.html"]
    golden = (EXPECTED / "index.html").read_text(encoding="utf-8")
    assert html == golden
    i = html.index("faster")
    assert html[:i] + "slower" + html[i + 6:] != golden
