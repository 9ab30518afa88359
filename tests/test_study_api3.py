"""kit.study_api, API 3: typed analyse() and sections(); API 2 folders through the one adapter, said once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from kit.analysis_record import Analysis
from kit.errors import StudyError
from kit.study_api import STUDY_API, ExtrasRecord, Figure, RunView, Section, StudyApiDeprecation, Table, invoke
from tests.test_study_api import MANIFEST, VALUES
from tests.test_study_api import RECORDS as TRIALS

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden_lenet"


def _module(version: int) -> types.ModuleType:
    mod = types.ModuleType("study_hook")
    mod.STUDY_API = version  # type: ignore[attr-defined]
    return mod


@dataclass(frozen=True)
class _Extras(ExtrasRecord):
    arms: list[str]
    measured: int


def test_analyse_returns_a_record_whose_json_is_the_extras() -> None:
    def analyse(run: RunView) -> _Extras:
        return _Extras(arms=list(run.arms), measured=len(run.measured()))

    out = invoke(_module(3), analyse, "analyse", (MANIFEST, TRIALS, VALUES), "analysis.py")
    assert out == {"arms": ["tensorflow", "pytorch"], "measured": 2}
    assert _Extras.from_json({**out, "newer": 1}) == _Extras(arms=["tensorflow", "pytorch"], measured=2)


def test_api_3_refuses_plain_data() -> None:
    with pytest.raises(StudyError, match="StudyExtras"):
        invoke(_module(3), lambda run: {"a": 1}, "analyse", (MANIFEST, TRIALS, VALUES), "analysis.py")
    manifest = json.loads((GOLDEN / "run" / "manifest.json").read_text())
    analysis = json.loads((GOLDEN / "expected" / "analysis.json").read_text())
    with pytest.raises(StudyError, match="Section"):
        invoke(_module(3), lambda run, an: [{"id": "x", "title": "y"}], "sections", (manifest, analysis), "report.py")


def test_sections_get_the_run_and_the_typed_analysis_and_give_the_kits_section_json() -> None:
    manifest = json.loads((GOLDEN / "run" / "manifest.json").read_text())
    analysis = json.loads((GOLDEN / "expected" / "analysis.json").read_text())
    seen: list[tuple[RunView, Analysis]] = []

    def sections(run: RunView, an: Analysis) -> list[Section]:
        seen.append((run, an))
        return [Section(id="s", title="T", paragraphs=["<b>text</b>"],
                        tables=[Table(caption="c", columns=["a", "b"], rows=[[1, None], ("x", 2.5)])],
                        figures=[Figure(id="f", title="F", svg=None)])]

    out = invoke(_module(3), sections, "sections", (manifest, analysis), "report.py")
    assert out == [{"id": "s", "title": "T", "paragraphs": ["<b>text</b>"],
                    "tables": [{"caption": "c", "columns": ["a", "b"], "rows": [[1, None], ["x", 2.5]]}],
                    "figures": [{"id": "f", "title": "F", "svg": None}]}]
    run, an = seen[0]
    assert isinstance(an, Analysis) and run.experiment == an.experiment and run.trials == ()
    assert len(run.values) == len(analysis["values"])  # the analysis' value table
    # an Analysis given as such is passed on as it is
    invoke(_module(3), sections, "sections", (manifest, an), "report.py")
    assert seen[1][1] is an


def test_an_api_2_hook_in_this_process_warns_with_the_study_folder() -> None:
    with pytest.warns(StudyApiDeprecation, match=r"experiments/old .*STUDY_API 2.*STUDY_API = 3"):
        out = invoke(_module(2), lambda m, a: [{"id": "x", "title": "y"}], "sections", ({}, {}), "experiments/old/report.py")
    assert out == [{"id": "x", "title": "y"}]
    assert STUDY_API == 3


API2_ANALYSIS = '''
STUDY_API = 2

def analyse(run):
    return {"arms": list(run.arms), "measured": len(run.measured())}
'''
API2_REPORT = '''
STUDY_API = 2

def sections(manifest, analysis):
    return [{"id": "old-style", "title": manifest["experiment"], "paragraphs": [str(analysis["extras"])]}]
'''
SCRIPT = '''
import sys
from pathlib import Path

from kit.studies import Hooks, call_hook
from tests.test_study_api import MANIFEST, VALUES
from tests.test_study_api import RECORDS as TRIALS

hooks = Hooks("folder", Path(sys.argv[1]), None)
print(call_hook(hooks, "analysis", "analyse", MANIFEST, TRIALS, VALUES))
print(call_hook(hooks, "analysis", "analyse", MANIFEST, TRIALS, VALUES))
print(call_hook(hooks, "report", "sections", MANIFEST, {"extras": {"lenet5": 1}}))
'''


def test_an_api_2_folder_runs_through_the_adapter_in_a_child_with_one_deprecation_line(tmp_path: Path) -> None:
    """A folder written for API 2 (dict in, dict out) still analyses and reports, in the boxed child process; the
    kit, not the child, says once per process on stderr that it should move to API 3."""
    study = tmp_path / "old_study"
    study.mkdir()
    (study / "analysis.py").write_text(textwrap.dedent(API2_ANALYSIS))
    (study / "report.py").write_text(textwrap.dedent(API2_REPORT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(study)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == lines[1] == "{'arms': ['tensorflow', 'pytorch'], 'measured': 2}"
    assert lines[2] == "[{'id': 'old-style', 'title': 'x', 'paragraphs': [\"{'lenet5': 1}\"]}]"
    said = [line for line in proc.stderr.splitlines() if "STUDY_API" in line]
    assert len(said) == 1, proc.stderr
    assert str(study) in said[0] and "StudyApiDeprecation" in said[0] and "STUDY_API = 3" in said[0]


API3_PNG_REPORT = '''
STUDY_API = 3
from kit.study_api import Figure, Section

PNG = bytes(range(256)) * 3

def sections(run, analysis):
    return [Section(id="png", title="t", figures=[Figure(id="f", title="F", png=PNG)])]
'''
PNG_SCRIPT = '''
import base64, json, sys
from pathlib import Path

from kit.studies import Hooks, call_hook

root = Path(sys.argv[1])
manifest = json.loads((root / "run" / "manifest.json").read_text())
analysis = json.loads((root / "expected" / "analysis.json").read_text())
out = call_hook(Hooks("folder", Path(sys.argv[2]), None), "report", "sections", manifest, analysis)
fig = out[0]["figures"][0]
print(sorted(fig), base64.b64decode(fig["png_b64"]) == bytes(range(256)) * 3)
'''


def test_a_png_figure_survives_the_child_process_as_base64(tmp_path: Path) -> None:
    """JSON has no bytes: a Figure's PNG crosses the child's JSON answer as base64 (it used to arrive as the text
    "b'...'", and the report drew no figure)."""
    study = tmp_path / "png_study"
    study.mkdir()
    (study / "report.py").write_text(textwrap.dedent(API3_PNG_REPORT))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", PNG_SCRIPT, str(GOLDEN), str(study)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['id', 'png_b64', 'svg', 'title'] True"
