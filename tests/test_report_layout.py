"""A report that reads in minutes (issue 39, item 7).

Fast (the default suite): the golden run's HTML, rendered with stand-in figures, with ten not-testable claims
sharing one long reason, seven metrics sharing one reason, and 30 disturbed re-runs beside one real failure:
no mid-word-break CSS, "Failed attempts" lists the failure alone, the disturbed re-runs are one line and a
<details> list, and each repeated reason is said once. The LaTeX column spec and soft breaks are checked too.

Browser (``-m browser``): the LeNet-shaped page (the same planted run, real figures) at 1280 x 800 in headless
Chromium is at most 10 screens above its appendices, with the answer, the ledger and the first figure in the
first two screens, and no word cut inside. TeX (``-m tex``): its PDF is at most 12 pages and the LaTeX log has no
overfull box wider than 2 pt in a table.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from kit.analysis_record import Analysis
from kit.report import context as context_mod
from kit.report import write_report
from kit.report.latex import build_pdf, column_spec, tex_text
from tests.test_report_browser import GOLDEN_RUN, needs_chromium
from tests.test_report_latex import needs_tex

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import report_height  # noqa: E402

GOLDEN_ANALYSIS = GOLDEN_RUN.parent / "analysis.json"
LONG_REASON = ("differs in the device: the paper measured this on a GPU (Dell Inspiron 15 Gaming i15-7567: NVIDIA "
               "GeForce GTX 1050 (4 GB), Intel Core i5-7300HQ, 8 GB), this run ran on the CPU; the protocol: the "
               "quick profile runs otherwise than the paper (epochs, steps_per_epoch, min_phase_s, dataset split)")
NVML = ("nvml: NVML: NVML Shared Library Not Found (fix: install the NVIDIA driver on this host (it provides "
        "libnvidia-ml.so.1); collectors run on the host, not in the trial's container)")
CAUSE = "foreign CPU 1.52 CPUs above the limit 0.5 in the train phase"


def _claim(i: int, reason: str) -> dict[str, Any]:
    return {"id": f"C{i}", "source": f"Fig. {i}", "statement": f"claim {i} of the paper", "kind": "ratio",
            "quantity": "time_s (train), tensorflow/pytorch", "paper_text": f"the paper's words {i}",
            "verdict": "not testable", "reason": reason, "procedure": "Hodges-Lehmann ratio", "value_text": "0.8",
            "differences": ["the paper used pytorch 1.0; this run 2.14"],
            "would_test": "`kit run golden --profile paper` on a host with one NVIDIA GPU"}


def planted(analysis: dict[str, Any]) -> dict[str, Any]:
    """The golden analysis as a busy quick run of a GPU paper leaves it: ten claims not testable for one reason,
    one for another; seven metrics not measured for one reason; 30 disturbed re-runs and one failed attempt."""
    a = copy.deepcopy(analysis)
    rows = [_claim(i, LONG_REASON) for i in range(1, 11)] + [_claim(11, "the kit cannot judge this claim")]
    a["claims"] = {"schema_version": 1, "headline": "0 of 11 claims replicated, 11 not testable on this host",
                   "counts": {"not testable": 11}, "conditions": ["profile: quick", "devices: cpu"], "rows": rows}
    a["measured"] = list(a.get("measured") or []) + [
        {"metric": f"gpu_{k}", "label": f"GPU thing {k}", "unit": "W", "measured": False, "n_values": 0,
         "reason": NVML} for k in range(7)]
    entries = [{"trial_id": f"r{i % 20:03d}-c00-{'pytorch' if i % 2 else 'tensorflow'}", "attempt": 1 + i // 20,
                "file": f"attempts/r{i % 20:03d}.{1 + i // 20}.json", "arm": "pytorch" if i % 2 else "tensorflow",
                "status": "disturbed", "disturbed": True, "signal": None, "reason": f"disturbed: {CAUSE}",
                "status_now": "ok"} for i in range(30)]
    entries.append({"trial_id": "r003-c00-pytorch", "attempt": 3, "file": "attempts/r003-c00-pytorch.3.json",
                    "arm": "pytorch", "status": "failed", "disturbed": False, "signal": "SIGKILL",
                    "reason": "failed: exit code -9 (killed by SIGKILL)", "status_now": "ok"})
    a["retried_trials"] = entries
    return a


@pytest.fixture
def stand_in_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures are not this test's subject: a tiny SVG instead of matplotlib's seconds per figure."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 40 30"><rect width="40" height="30" '
           'fill="#ccc"/></svg>')
    monkeypatch.setattr(context_mod.figures, "boxplot", lambda *a, **k: svg)
    monkeypatch.setattr(context_mod.figures, "schedule_plot", lambda *a, **k: svg)
    monkeypatch.setattr("kit.report.telemetry_fig.telemetry_figure", lambda *a, **k: None)


@pytest.fixture
def page(tmp_path: Path, stand_in_figures: None) -> str:
    run = tmp_path / "run"
    shutil.copytree(GOLDEN_RUN, run)
    analysis = Analysis.from_json(planted(json.loads(GOLDEN_ANALYSIS.read_text(encoding="utf-8"))), "planted")
    (path,) = write_report(run, analysis, ("html",))
    return path.read_text(encoding="utf-8")


def section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start:html.index("</section>", start)]


def test_no_css_breaks_a_word_inside(page: str) -> None:
    css = re.search(r"<style>(.*?)</style>", page, re.S)
    assert css is not None
    for hack in ("break-all", "anywhere", "word-break", "hyphens: auto"):
        assert hack not in css.group(1), hack


def test_failed_attempts_list_failures_and_disturbed_reruns_are_one_line(page: str) -> None:
    retried = section(page, "retried-trials")
    table = retried[retried.index("Failed attempts of retried trials"):retried.index("</table>")]
    assert table.count("<tr>") == 2 and "SIGKILL" in table and "disturbed" not in table  # header + the failure
    assert "attempts/r003-c00-pytorch.3.json" in table
    line = re.search(r"<p class=\"small\">(30 disturbed attempt\(s\) of 20 trial\(s\)[^<]*)</p>", retried)
    assert line is not None and CAUSE in line.group(1) and "(1–2 per trial)" in line.group(1), retried[:3000]
    details = retried[retried.index("<details"):retried.index("</details>")]
    assert "<summary>the 30 disturbed attempts</summary>" in details and details.count("<tr>") == 31
    assert retried.count(CAUSE) == 1  # the cause once, in the summary line


def test_repeated_reasons_are_said_once(page: str) -> None:
    claims = section(page, "claims")
    # the ten claims: one group line, and one header row of the details table, not ten rows with the reason
    assert claims.count("quick profile runs otherwise than the paper (epochs") == 1
    assert re.search(r'<tr class="group"><th colspan="\d"><strong>C1-C10</strong>: differs in the device', claims)
    assert claims.count('<tr class="untested">') == 11 and claims.count("the paper used pytorch 1.0") == 2  # once per group
    metrics = section(page, "metrics")
    assert metrics.count("NVML Shared Library Not Found") == 1 and "GPU thing 0 (W), GPU thing 1 (W)" in metrics
    # the appendices follow the main text, and the failures are in them
    assert page.index('<div id="appendices">') > page.index('<section id="goal">')
    assert page.index('<section id="retried-trials">') > page.index('<div id="appendices">')


def test_untested_hypotheses_are_grouped_by_reason() -> None:
    hyps = [{"id": "H1", "phase": "train", "tested": True},
            *({"id": h, "phase": ph, "tested": False, "label": lab, "reason": f"no paired measurements of {lab} in "
               f"the {ph} phase"} for h, lab in (("H2", "GPU temperature"), ("H3", "CPU temperature"))
              for ph in ("train", "infer"))]
    from kit.analysis_rows import HypothesisResult

    assert context_mod.untested_hypotheses([HypothesisResult.from_json(h) for h in hyps]) == [
        {"which": "H2 GPU temperature (train, infer), H3 CPU temperature (train, infer)",
         "reason": "no paired measurements of its metric"}]


def test_latex_columns_wrap_at_spaces_and_fit_the_line() -> None:
    table = {"columns": ["trial", "arm", "attempt", "status", "reason", "file"],
             "rows": [["r001-c00-pytorch", "pytorch", "1", "failed", "failed: exit code -9 (killed by SIGKILL) "
                       "while the train phase of this trial ran on the host beside another", "attempts/r001.1.json"]]}
    spec = column_spec(table)
    widths = [float(w) for w in re.findall(r"p\{([\d.]+)cm\}", spec)]
    assert widths and spec.count("l") >= 4 and sum(widths) < 17.0
    assert column_spec({"columns": ["a", "b"], "rows": [[1, 2]]}) == "@{}l l@{}"
    assert tex_text("tensorflow/pytorch avx2,fma 61,706") == r"tensorflow/\allowbreak{}pytorch avx2,\allowbreak{}fma 61,706"


# ------------------------------------------------------------------------------ real browser, real TeX

@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The planted golden run with its real figures, HTML and LaTeX (and the PDF where TeX is installed)."""
    run = tmp_path_factory.mktemp("layout") / "run"
    shutil.copytree(GOLDEN_RUN, run)
    analysis = Analysis.from_json(planted(json.loads(GOLDEN_ANALYSIS.read_text(encoding="utf-8"))), "planted")
    write_report(run, analysis, ("html", "latex", "pdf") if shutil.which("latexmk") else ("html", "latex"))
    return run / "report"


@pytest.mark.browser
@needs_chromium
def test_at_1280_px_the_main_text_is_short_and_opens_with_the_answer(rendered: Path, tmp_path: Path) -> None:
    got = report_height.measure_html(rendered / "index.html", tmp_path)
    assert got["vw"] == report_height.WIDTH
    assert got["appendices"] is not None and got["above_appendices_screens"] <= 10, got
    for key in ("answer", "claims", "figure"):
        assert got[key] is not None and got[key] < 2 * report_height.SCREEN, (key, got[key])
    assert got["inside"] == [], got["inside"][:10]
    assert got["wide"] == [] and not got["page_wider"], got["wide"]
    # the probe sees what it measures: a planted break-all in a narrow column cuts words, and is reported
    text = (rendered / "index.html").read_text(encoding="utf-8").replace(
        "</style>", "table.threats td { word-break: break-all; } table.threats col.c-mitigation { width: 4%; }"
                    "</style>", 1)
    planted_page = tmp_path / "planted.html"
    planted_page.write_text(text, encoding="utf-8")
    assert report_height.measure_html(planted_page, tmp_path / "p2")["inside"] != []


@pytest.mark.tex
@needs_tex
def test_pdf_is_short_and_no_table_runs_over_the_margin(rendered: Path, tmp_path: Path) -> None:
    got = report_height.measure_latex(rendered / "latex")
    assert got["pdf_pages"] is not None and got["pdf_pages"] <= 12, got["pdf_pages"]
    tables = [b for b in got["overfull"] if b["pt"] > 2 and (b["kind"] == "in alignment" or "tables/" in b["file"])]
    assert tables == [], tables
    # the check sees a table that does run over: a copy whose threats table has a 20 cm cell, built again
    wide = tmp_path / "latex"
    shutil.copytree(rendered / "latex", wide)
    frag = wide / "tables" / "threats.tex"
    row = r"x & y & \rule{20cm}{1pt} & z \\"
    frag.write_text(frag.read_text(encoding="utf-8").replace(r"\endfoot", r"\endfoot" + "\n" + row, 1), encoding="utf-8")
    build_pdf(wide / "report.tex")
    over = report_height.measure_latex(wide)["overfull_in_tables_over_2pt"]
    assert any("threats" in b["file"] or b["kind"] == "in alignment" for b in over), over


def test_the_log_parser_attributes_overfull_boxes_to_their_fragment() -> None:
    log = ("(./report.tex (./tables/threats.tex\nOverfull \\hbox (66.38478pt too wide) in paragraph at lines 20--20\n"
           "[]\n) (./figures/a.tex)\nOverfull \\hbox (2.81558pt too wide) in alignment at lines 16--33\n)")
    got = report_height.overfull_boxes(log)
    assert [(b["file"], b["kind"], round(b["pt"], 1)) for b in got] == [
        ("./tables/threats.tex", "in paragraph", 66.4), ("./report.tex", "in alignment", 2.8)]
