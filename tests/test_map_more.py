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
    unlike = _cells(("the paper measured this on a GPU; this run ran on the CPU",), classes)
    hosts = {h.key: h for h in classes}
    assert _pooled([c for c in unlike if c.pooled]) is None  # nothing enters the paper's pooled figure
    fig = _pooled([c for c in unlike if not c.pooled and c.differences])
    assert fig is not None
    ref = random_effects([LogEffect(c.log_ratio or 0.0, c.se_log or 0.0) for c in unlike])
    assert abs(fig.tau2 - ref.tau2) < 1e-12 and abs(math.log(fig.ratio) - ref.log_ratio) < 1e-12
    answer = _answer(unlike, hosts, None, 3, fig)
    assert answer.startswith("not judged on any of the 3 host classes given; why, and what would test it, below")
    assert "as measured where not judged (no verdict)" in answer and "over 3 classes" in answer
    row = ClaimRow("C1", "Fig. 4", "s", "time_s (train)", "e", tuple(unlike), None, answer, fig)
    assert row.to_json()["pooled"] is None and isinstance(row.to_json()["as_measured"], dict)
    m = MapResult("lenet", "quick", tuple(ClassColumn(h, ("r",)) for h in hosts.values()), (row,), (), (), (), 3, 3)
    html = render_html(m)
    assert "as measured, not judged: no verdict" in html
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


@pytest.mark.slow  # analyses three runs
def test_a_claim_judged_with_recorded_differences_is_pooled_and_a_blocked_one_is_not(tmp_path: Path) -> None:
    """The ledger's recorded differences (the paper's hardware, versions it names) do not keep a judged claim out of
    the pooled figure; a claim not testable on these hosts (the paper measured it on a GPU) stays out of it even
    though its runs have an estimate, which enters only the "as measured" figure."""
    from kit.replication.build import build_map
    from kit.replication.inputs import load_inputs
    from tests.test_map import AMD, ARM, CLAIMS, INTEL, make_run

    claims = [{**CLAIMS[0], "hardware": "GTX 1050 laptop", "versions": {"tensorflow": "1.8", "pytorch": "1.0"}},
              {**CLAIMS[0], "id": "P3", "statement": "TensorFlow trains as fast as PyTorch on the GPU",
               "device": "gpu"}]
    runs = [make_run(tmp_path / name, host, tf_factor=f, claims=claims)
            for name, host, f in (("intel", INTEL, 1.0), ("amd", AMD, 1.03), ("arm", ARM, 1.2))]
    m = build_map(load_inputs(runs))
    p1, p3 = (next(c for c in m.claims if c.id == i) for i in ("P1", "P3"))
    assert all(c.differences for c in p1.cells), "the hardware and versions are recorded on every cell"
    assert all(c.pooled for c in p1.cells) and p1.pooled is not None and p1.pooled.k == 3
    assert all(c.verdict == "not testable" and c.why_not and not c.pooled for c in p3.cells)
    assert all(c.ratio is not None for c in p3.cells)
    assert p3.pooled is None and p3.as_measured is not None and p3.as_measured.k == 3
    assert "as measured where not judged (no verdict)" in p3.answer


@pytest.mark.slow  # analyses three runs
def test_two_inputs_claiming_one_run_with_other_results_are_both_refused(tmp_path: Path) -> None:
    """A crafted copy of someone's run (same study, plan, start and end) with other trial results, given first,
    must not shadow the real one as a "duplicate": both are refused, the other inputs are still mapped."""
    from kit.replication.inputs import load_inputs
    from tests.test_map import AMD, INTEL, make_run

    forged = make_run(tmp_path / "forged", INTEL, started=1.5e9, tf_factor=0.5)
    real = make_run(tmp_path / "real", INTEL, started=1.5e9)
    other = make_run(tmp_path / "other", AMD)
    got = load_inputs([forged, real, other])
    assert [x.source for x in got.loaded] == [str(other)] and not got.duplicates
    assert {r.path for r in got.refused} == {str(forged), str(real)}
    assert all("trial results differ" in r.reason or "other trial results" in r.reason for r in got.refused)


def test_an_input_that_breaks_the_analysis_is_refused_and_the_rest_mapped(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import kit.replication.inputs as inputs
    from kit.replication.hostclass import host_class
    from tests._runs import bare_analysis, bare_manifest

    # a crafted trial env whose threads is a list (unhashable) gives a host class, not a TypeError
    an = bare_analysis(trial_env=[{"arm": "pytorch", "framework": "pytorch", "threads": [1], "device": "cpu"}])
    assert host_class(bare_manifest(), an).threads is None or isinstance(host_class(bare_manifest(), an).threads, int)

    def load_one(path: Path) -> object:
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(inputs, "load_one", load_one)
    got = inputs.load_inputs([tmp_path / "a", tmp_path / "b"])
    assert not got.loaded and len(got.refused) == 2
    assert got.refused[0].reason == "cannot be read or analysed: TypeError: unhashable type: 'list'"
