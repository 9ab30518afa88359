"""Issue 13, report side: the environment section shows per arm the device (kind, name, UUID), the GPU
the host sampled, TF32 and precision, and the host self-test from the manifest; a refused run says
that no hypothesis was decided; phase power and the 1-s average are labelled; a failed design cell
of the Dai study is reported with its error. HTML and LaTeX both (the LaTeX is checked as text:
this machine has no TeX; CI compiles it in tests/test_report_latex.py)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from kit.analysis.analyze import analyze_run
from kit.report import write_report
from kit.report.latex import LATEX_DIR
from kit.store import REPORT
from tests._runs import run_view
from tests._studies import study_module, study_sections
from tests.test_analysis_gpu_host import NAMES, OWN, UUIDS, _dai_manifest, _dai_trials, make_run

# Starts the frameworks or renders whole reports: `make test-all`, not the fast `make test`.
pytestmark = pytest.mark.slow

SELFTEST = {"schema": 1, "ok": True, "gpu": True, "checks": [
    {"name": "same_gpu_uuid", "status": "pass", "detail": "torch and tensorflow see GPU-00000003",
     "numbers": {"gpu_index": 3}},
    {"name": "busy_wait_timing", "status": "pass", "detail": "calibrated GPU busy-wait timed within 0.3 %",
     "numbers": {"error_frac": 0.003}},
    {"name": "energy_counter_interval", "status": "info", "detail": "energy counter updates every 0.1 s",
     "numbers": {"interval_s": 0.1}},
    {"name": "foreign_processes", "status": "fail", "detail": "1 process on GPU 3", "numbers": {"count": 1}},
]}


def _text(path: Path) -> str:
    s = re.sub(r"<svg.*?</svg>", "[SVG]", path.read_text(encoding="utf-8"), flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", s)))


def _latex(run: Path, name: str) -> str:
    return (run / REPORT / LATEX_DIR / "tables" / f"{name}.tex").read_text(encoding="utf-8")


def test_environment_shows_devices_precision_and_the_selftest(tmp_path: Path) -> None:
    rd = make_run(tmp_path, manifest_extra={"selftest": SELFTEST})
    analysis = analyze_run(rd.path)
    write_report(rd.path, analysis, ("html", "latex"))
    text = _text(rd.path / REPORT / "index.html")
    env = text[text.index("Environment and provenance"):text.index("Deviations from the paper")]
    assert "Devices and precision per arm" in env
    for arm in ("tensorflow", "pytorch"):
        assert re.search(rf"{arm} gpu {re.escape(NAMES[OWN])} {UUIDS[OWN]} {OWN}: {UUIDS[OWN]} "
                         r"off \(matmul off, conv off\) fp32 10", env), env
    assert "Host self-test" in env and "Self-test before the run: passed; failed: foreign_processes" in env
    assert "busy_wait_timing pass calibrated GPU busy-wait timed within 0.3 % error_frac 0.003" in env
    assert "GPU power (NVML 1-s moving average)" in text and "energy counter / phase duration" in text
    assert "No hypothesis decided" not in text

    dev = _latex(rd.path, "devices")
    assert "GPU-00000003" in dev and "off (matmul off, conv off)" in dev and r"\label{tab:devices}" in dev
    st = _latex(rd.path, "selftest")
    assert r"busy\_wait\_timing" in st and r"\textbf{fail}" in st and "passed; failed" in st
    main = (rd.path / REPORT / LATEX_DIR / "report.tex").read_text(encoding="utf-8")
    assert r"\input{tables/devices}" in main and r"\input{tables/selftest}" in main
    for tex in (dev, st, main):
        assert r"\VAR" not in tex and r"\BLOCK" not in tex


def test_report_without_selftest_or_device_records_says_so(tmp_path: Path) -> None:
    """An old run: no manifest selftest, no env device_kind (inferred from env.device)."""
    def env_of(t: Any) -> dict[str, Any]:
        return {"framework": t.framework, "device": "cuda", "device_name": NAMES[OWN]}

    rd = make_run(tmp_path, env_of=env_of, gpus_of=lambda t: None)
    analysis = analyze_run(rd.path)
    write_report(rd.path, analysis, ("html", "latex"))
    text = _text(rd.path / REPORT / "index.html")
    assert "No self-test recorded with this run" in text
    assert re.search(r"tensorflow gpu " + re.escape(NAMES[OWN]) + r" – – not recorded – 10", text)
    assert "TF32 use not recorded" in text  # GPU trials without a TF32 record: a medium threat
    assert "No self-test recorded" in _latex(rd.path, "selftest")


def test_refused_run_says_no_hypothesis_was_decided(tmp_path: Path) -> None:
    def env_of(t: Any) -> dict[str, Any]:
        if t.framework == "tensorflow":
            return {"framework": "tensorflow", "device": "/CPU:0", "device_kind": "cpu", "device_name": "cpu"}
        return {"framework": "pytorch", "device": "cuda:0", "device_kind": "gpu", "device_name": NAMES[OWN],
                "gpu_uuid": UUIDS[OWN]}

    rd = make_run(tmp_path, env_of=env_of)
    analysis = analyze_run(rd.path)
    write_report(rd.path, analysis, ("html", "latex"))
    text = _text(rd.path / REPORT / "index.html")
    assert "No hypothesis decided: the arms ran on different kinds of device" in text
    # the answer first, and every untested hypothesis in one line with its reason
    assert "No comparison decided: the arms ran on different kinds of device" in text
    assert re.search(r"Not testable here: execution time[^.]*\(H1[^)]*\): the arms ran on different kinds", text), text
    assert "Arms ran on different devices" in text  # the threat
    assert "reject H0" not in text
    hyp = _latex(rd.path, "hypotheses")
    assert "not decided: the arms ran on different kinds of device" in hyp
    main = (rd.path / REPORT / LATEX_DIR / "report.tex").read_text(encoding="utf-8")
    assert "No hypothesis decided:" in main


def test_dai_report_names_the_failed_cells() -> None:
    analyse = study_module("dai_single_gpu_factors", "analysis").analyse

    d = analyse(run_view(_dai_manifest(), _dai_trials({("c00", "tensorflow")})))
    secs = study_sections(study_module("dai_single_gpu_factors", "report"), {"dai_factors": d})
    failed = next(s for s in secs if s["id"] == "dai-failed")
    (row,) = failed["tables"][0]["rows"]
    assert row[:5] == ["resnet50", "base", "tensorflow", "error", 3]
    assert "expected axis -1 of input shape to have value 3" in row[6]
    gap = next(s for s in secs if s["id"] == "dai-gap")
    assert any("factor analysis is not computed" in p for p in gap["paragraphs"])
