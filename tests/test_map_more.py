"""`kit map` beyond the matrix: the "as measured" figure over host classes whose runs ran under conditions unlike
the paper's (shown, labelled, never a verdict), the LaTeX table compiled inside a document, and a share bundle
(`kit pack --share`) mapped beside the run it came from (counted once) and beside other hosts."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from kit.replication.build import Cell, ClaimRow, ClassColumn, MapResult, _answer, _pooled
from kit.replication.hostclass import HostClass
from kit.replication.meta import LogEffect, random_effects
from kit.replication.render import render_html, render_tex

HAVE_TEX = shutil.which("pdflatex") is not None


def _host(model: str) -> HostClass:
    return HostClass(arch="x86-64", cpu_vendor="Intel", cpu_model=model, cpu_family_model="6/106",
                     isa=("avx2", "avx512f"), threads=1, device="cpu", gpu="", gpu_cc="", driver="",
                     versions=(("pytorch", "2.14.1"), ("tensorflow", "2.21.0")), backend="local", profile="quick")


def _cells(differences: tuple[str, ...], hosts: list[HostClass]) -> list[Cell]:
    out = []
    for h, (ratio, se) in zip(hosts, ((0.87, 0.05), (0.99, 0.06), (1.03, 0.07)), strict=True):
        lo, hi = ratio * math.exp(-1.96 * se), ratio * math.exp(1.96 * se)
        out.append(Cell(h.key, "not testable" if differences else "replicated", ("x",), ratio, lo, hi, 0.95, 12, 1,
                        differences, not differences, math.log(ratio), se))
    return out


def test_classes_unlike_the_paper_get_an_as_measured_figure_never_a_verdict() -> None:
    classes = [_host(f"Xeon {i}") for i in range(3)]
    unlike = _cells(("the paper's hardware: GTX 1050; this run's: AMD EPYC",), classes)
    hosts = {h.key: h for h in classes}
    assert _pooled([c for c in unlike if c.pooled]) is None  # nothing enters the paper's pooled figure
    fig = _pooled([c for c in unlike if not c.pooled and c.differences])
    assert fig is not None
    ref = random_effects([LogEffect(c.log_ratio or 0.0, c.se_log or 0.0) for c in unlike])
    assert abs(fig.tau2 - ref.tau2) < 1e-12 and abs(math.log(fig.ratio) - ref.log_ratio) < 1e-12
    answer = _answer(unlike, hosts, None, 3, fig)
    assert answer.startswith("not tested on any of the 3 host classes given (conditions unlike the paper's)")
    assert "as measured here, unlike the paper's conditions (no verdict)" in answer and "over 3 classes" in answer
    row = ClaimRow("C1", "Fig. 4", "s", "time_s (train)", "e", tuple(unlike), None, answer, fig)
    assert row.to_json()["pooled"] is None and isinstance(row.to_json()["as_measured"], dict)
    m = MapResult("lenet", "quick", tuple(ClassColumn(h, ("r",)) for h in hosts.values()), (row,), (), (), (), 3, 3)
    html = render_html(m)
    assert "as measured, unlike the paper: no verdict" in html
    # classes judged under the paper's conditions pool as before, and get no "as measured" figure
    like = _cells((), classes)
    assert _pooled([c for c in like if c.pooled]) is not None
    assert _pooled([c for c in like if not c.pooled and c.differences]) is None


@pytest.mark.tex
@pytest.mark.skipif(not HAVE_TEX, reason="pdflatex not installed (apt-get install texlive-latex-extra)")
def test_the_map_table_compiles_inside_a_document(tmp_path: Path) -> None:
    hosts = [_host(f"Xeon <8375C> & 50% \\input{{/etc/passwd}} _#$ {i}") for i in range(3)]
    cells = _cells((), hosts)
    fig = _pooled(cells)
    row = ClaimRow("C1", "Fig. 4", "s", "q", "e", tuple(cells), fig, "a")
    m = MapResult("lenet", "quick", tuple(ClassColumn(h, ("r",)) for h in hosts), (row,), (), (), (), 3, 3)
    (tmp_path / "map.tex").write_text(render_tex(m))
    (tmp_path / "paper.tex").write_text("\\documentclass{article}\\usepackage{booktabs}\\usepackage[T1]{fontenc}"
                                        "\\begin{document}\\input{map.tex}\\end{document}\n")
    done = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                           "paper.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "paper.pdf").stat().st_size > 1000


@pytest.mark.slow  # packs (re-analyses) one run and maps three
def test_a_share_bundle_maps_beside_its_run_once_and_beside_other_hosts(tmp_path: Path) -> None:
    from kit.replication.build import build_map
    from kit.replication.inputs import load_inputs
    from kit.share import pack_share
    from tests.test_map import AMD, ARM, INTEL, make_run

    run = make_run(tmp_path / "intel", INTEL)
    tgz = pack_share(run, tmp_path / "intel.share")
    both = load_inputs([run, tgz])
    assert len(both.loaded) == 1 and len(both.duplicates) == 1 and not both.refused
    three = build_map(load_inputs([tgz, make_run(tmp_path / "amd", AMD, tf_factor=1.03),
                                   make_run(tmp_path / "arm", ARM, tf_factor=1.5)]))
    assert len(three.classes) == 3 and not three.refused
    p1 = next(c for c in three.claims if c.id == "P1")
    assert p1.pooled is not None and p1.pooled.k == 3
    assert "private-host-name" not in str(three.to_json())
