"""The map's HTML in headless Chromium at 1280 px: the page never scrolls sideways; a matrix wider than the page
scrolls inside its own box, and the one-line answers come first."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.replication.build import Cell, ClaimRow, ClassColumn, MapResult, Pooled
from kit.replication.hostclass import HostClass
from kit.replication.render import render_html

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\)|:\d+)\]\s*(.*)")


def _wide_map(classes: int = 12) -> MapResult:
    hosts = [HostClass(arch="x86-64", cpu_vendor="Intel", cpu_model=f"Xeon Platinum 83{i:02d}C", cpu_family_model="6/106",
                       isa=("avx2", "avx512f"), threads=i + 1, device="cpu", gpu="", gpu_cc="", driver="",
                       versions=(("pytorch", "2.14.1"), ("tensorflow", "2.21.0")), backend="local", profile="paper")
             for i in range(classes)]
    cells = tuple(Cell(h.key, "replicated", ("replicated",), 1.02, 0.99, 1.05, 0.95, 12, 1, (), True, 0.02, 0.015)
                  for h in hosts)
    pooled = Pooled(classes, 1.02, 1.0, 1.04, 0.95, 1.09, 0.02, 0.01, 0.0001, 0.2, 13.0, 0.95)
    claims = tuple(ClaimRow(f"P{i}", "Fig. 4", "TensorFlow and PyTorch train equally fast", "time_s (train)",
                            "Hodges-Lehmann ratio", cells, pooled, f"replicated on {classes} of {classes} host classes")
                   for i in range(4))
    return MapResult(experiment="golden", profile="paper", classes=tuple(ClassColumn(h, ("run",)) for h in hosts),
                     claims=claims, never_tested=(), refused=(), duplicates=(), runs=classes, reused=classes)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)")
def test_a_wide_map_fits_1280_px_and_its_matrix_scrolls_in_its_own_box(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    html = render_html(_wide_map())
    probe = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html, count=1).replace(
        "</body>", "<script>window.addEventListener('load', function () { var w = document.querySelector("
                   "'.matrix-wrap'); var a = document.getElementById('answers').getBoundingClientRect(); "
                   "console.error('kit-map ' + JSON.stringify({page: document.documentElement.scrollWidth, "
                   "scroll: w.scrollWidth, client: w.clientWidth, right: w.getBoundingClientRect().right, "
                   "answers_top: a.top})); });</script></body>")
    page = tmp_path / "probe.html"
    page.write_text(probe, encoding="utf-8")
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--window-size=1280,900",
         f"--screenshot={tmp_path / 'map.png'}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    logged = [m.group(1) for line in proc.stderr.splitlines() if (m := CONSOLE.search(line)) and "kit-map " in line]
    assert logged, proc.stderr[-2000:]
    raw = logged[0][logged[0].index("kit-map ") + len("kit-map "):]
    box = json.loads(raw[: raw.rindex("}") + 1])
    assert box["page"] <= 1280 and box["right"] <= 1280, box  # the page itself does not scroll sideways
    assert box["scroll"] > box["client"], box  # twelve host classes: the matrix scrolls inside its box
    assert box["answers_top"] < 120, box  # the answers open the page
