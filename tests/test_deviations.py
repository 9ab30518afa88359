"""Every experiment says where it differs from its paper, and the report and `kit list` show it (issue 15).

The deviations used to be comments in the experiment files, invisible in the
results; now they are ``[[deviations]]`` tables of the spec, carried into the
manifest, `kit list --deviations` and the report (HTML and LaTeX).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kit.cli import app
from kit.errors import SpecError
from kit.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").glob("*/experiment.toml"))
CALIBRATED = ROOT / "tests" / "data" / "calibrated.toml"
GOLDEN = ROOT / "tests" / "data" / "golden"


def test_there_are_experiments() -> None:
    assert len(EXPERIMENTS) >= 6


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.parent.name)
def test_every_experiment_lists_its_deviations_and_its_paper_source(path: Path) -> None:
    spec = load_spec(path)
    assert spec.deviations, f"{path.name}: no [[deviations]]"
    for d in spec.deviations:
        assert all(getattr(d, k).strip() for k in ("aspect", "paper", "kit", "why")), d
    assert len({d.aspect for d in spec.deviations}) == len(spec.deviations), "one entry per aspect"
    # the paper profile names the table, figure, listing or section its protocol comes from
    assert re.search(r"\b(Table|Tables|Fig|Figs|Section|Listings?|Abstract)\b", spec.experiment.protocol_source), path.name
    assert spec.to_dict()["deviations"][0]["aspect"] == spec.deviations[0].aspect  # reaches the manifest


def test_the_deviations_the_issue_names_are_stated() -> None:
    """The ones found missing: ResNet50 in Patel's listings, DP vs DDP batches, one CPU core, Germino's split,
    the LeNet-5 variant, DLBench's CPU-only environment."""
    def text(name: str) -> str:
        return " ".join(f"{d.aspect} {d.paper} {d.kit} {d.why}" for d in load_spec(ROOT / "experiments" / name / "experiment.toml").deviations)

    dist = text("patel_distributed")
    assert "ResNet50" in dist and "global batch" in dist and "per rank" in dist
    assert load_spec(ROOT / "experiments" / "patel_distributed" / "experiment.toml").workload.flat()["model"] == "resnet50"
    assert "one CPU core" in text("patel_models_sweep")
    assert "re-randomised" in text("germino_mnist_energy")
    lenet = text("florencio2019_lenet")
    assert "LeNet-5" in lenet and "61,706 parameters" in lenet
    assert "CPU-only" in text("elshawi_dlbench")


def _with(extra: str) -> str:
    return CALIBRATED.read_text() + extra


def test_an_empty_deviation_field_is_refused_with_its_key_path() -> None:
    bad = _with('\n[[deviations]]\naspect = "order"\npaper = "sequential"\nkit = "  "\nwhy = "drift"\n')
    with pytest.raises(SpecError, match=r"deviations\[0\]\.kit: expected a non-empty string"):
        parse_spec(bad, "x.toml")
    with pytest.raises(SpecError, match=r"deviations\[0\]\.why"):
        parse_spec(_with('\n[[deviations]]\naspect = "a"\npaper = "b"\nkit = "c"\n'), "x.toml")


def test_a_profile_cannot_replace_the_deviations() -> None:
    text = _with('\n[[deviations]]\naspect = "a"\npaper = "b"\nkit = "c"\nwhy = "d"\n'
                 '\n[profiles.quick]\ndescription = "q"\n[[profiles.quick.deviations]]\naspect = "x"\npaper = "y"\n'
                 'kit = "z"\nwhy = "w"\n')
    with pytest.raises(SpecError, match=r"profiles\.quick\.deviations"):
        parse_spec(text, "x.toml")


def test_kit_list_shows_the_paper_source_and_the_deviations() -> None:
    res = CliRunner().invoke(app, ["list", "--experiments-dir", str(ROOT / "experiments"), "--deviations"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "patel_distributed: deviations from the paper" in flat and "ResNet50" in flat
    res = CliRunner().invoke(app, ["show", "patel_distributed"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.replace("│", " ").split())
    assert "deviations listed" in flat and "protocol from Section VI-E" in flat
    assert "patel_distributed: deviations from the paper" in flat and "ResNet50" in flat


def test_the_report_shows_the_deviations_escaped(tmp_path: Path) -> None:
    """HTML and LaTeX sections list every deviation of the run's spec; markup in the text is shown, not run."""
    from kit.analysis_record import Analysis
    from kit.report import write_report
    from kit.report.latex import LATEX_DIR

    run = tmp_path / "run"
    shutil.copytree(GOLDEN / "run", run)
    man = json.loads((run / "manifest.json").read_text())
    man["spec"]["deviations"] = [{"aspect": "trial <b>order</b>", "paper": "all TF then all PT",
                                  "kit": "interleaved 100% & blocked_pairs", "why": "drift"}]
    man["spec"]["experiment"]["protocol_source"] = "Table 2"
    (run / "manifest.json").write_text(json.dumps(man))
    analysis = Analysis.from_json(json.loads((GOLDEN / "analysis.json").read_text()), "golden analysis.json")
    write_report(run, analysis, ("html", "latex"))
    page = (run / "report" / "index.html").read_text()
    section = page[page.index('<section id="deviations">'):]
    section = section[:section.index("</section>")]
    assert "trial &lt;b&gt;order&lt;/b&gt;" in section and "<b>" not in section
    assert "interleaved 100% &amp; blocked_pairs" in section and "Paper profile's protocol from: Table 2" in page
    tex = (run / "report" / LATEX_DIR / "tables" / "deviations.tex").read_text()
    assert r"interleaved 100\% \& blocked\_pairs" in tex and "drift" in tex
    assert r"\input{tables/deviations}" in (run / "report" / LATEX_DIR / "report.tex").read_text()
