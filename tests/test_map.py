"""`kit map` (issue 42, item 2): the replication map across host classes, built from real analyses of run
directories whose provenance a test wrote (the golden run, copied with other hosts' provenance), and bundles."""

from __future__ import annotations

import json
import math
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from typer.testing import CliRunner

from kit.cli.root import app
from kit.replication.build import build_map
from kit.replication.inputs import load_inputs

ROOT = Path(__file__).resolve().parents[1]
GOLDEN_RUN = ROOT / "tests" / "data" / "golden" / "run"
SCHEMA = json.loads((ROOT / "kit" / "schemas" / "map.schema.json").read_text())
CLAIMS = [
    {"id": "P1", "source": "Fig. 4", "statement": "TensorFlow and PyTorch train equally fast", "kind": "no_difference",
     "margin": 0.10, "metric": "time_s", "phase": "train", "arms": ["tensorflow", "pytorch"], "device": "any",
     "paper_text": "TF 41.3 s, PT 40.2 s"},
    {"id": "P2", "source": "Table 3", "statement": "PyTorch's GPU use is lower", "kind": "direction",
     "metric": "gpu_util_pct", "phase": "train", "arms": ["tensorflow", "pytorch"], "direction": "greater",
     "device": "gpu", "hardware": "GTX 1050"},
]
INTEL = {"machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
         "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 106, "stepping": 6,
                 "isa": ["sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"]}}
AMD = {"machine": "x86_64", "cpu_model": "AMD EPYC 9654 96-Core Processor",
       "cpu": {"vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
               "isa": ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]}}
ARM = {"machine": "aarch64", "cpu_model": "Neoverse-V1", "cpu": {"vendor": "ARM", "family": None, "model": None,
                                                                  "stepping": None, "isa": []}}
SAPPHIRE = {"machine": "x86_64", "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
            "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 143, "stepping": 8,
                    "isa": ["avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"]}}


def make_run(dest: Path, host: dict[str, Any], *, tf_factor: float = 1.0, started: float | None = None,
             experiment: str | None = None, profile: str | None = None, jitter_seed: int | None = None,
             claims: list[dict[str, Any]] | None = None) -> Path:
    """The golden run copied to ``dest`` with the paper's claims, another host's provenance, TensorFlow's training
    times scaled by ``tf_factor`` (and, with ``jitter_seed``, every time moved by up to 1 %: a replicate)."""
    shutil.copytree(GOLDEN_RUN, dest)
    man = json.loads((dest / "manifest.json").read_text())
    man["spec"]["claims"] = CLAIMS if claims is None else claims
    man["host"].update(hostname="private-host-name", **host)
    man["started"] = started if started is not None else 1.0e9 + zlib.crc32(dest.name.encode())  # one run each
    if experiment is not None:
        man["experiment"] = experiment
    if profile is not None:
        man["profile"] = profile
    (dest / "manifest.json").write_text(json.dumps(man))
    rng = np.random.default_rng(jitter_seed)
    for f in (dest / "trials").glob("*.json"):
        rec = json.loads(f.read_text())
        scale = tf_factor if rec.get("framework") == "tensorflow" else 1.0
        if jitter_seed is not None:
            scale *= float(np.exp(rng.normal(0, 0.01)))
        if scale != 1.0 and "train_time_s" in rec.get("results", {}):
            rec["results"]["train_time_s"] *= scale
            f.write_text(json.dumps(rec))
    return dest


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Four host classes (Intel AVX-512 with two replicate runs, AMD Zen 4, Intel AMX, ARM Neoverse where
    TensorFlow trains 50 % more slowly), analysed once (sealed: a second map reuses the analyses)."""
    d = tmp_path_factory.mktemp("hosts")
    runs = {"intel1": make_run(d / "intel1", INTEL), "intel2": make_run(d / "intel2", INTEL, jitter_seed=1),
            "amd": make_run(d / "amd", AMD, tf_factor=1.03), "arm": make_run(d / "arm", ARM, tf_factor=1.5),
            "spr": make_run(d / "spr", SAPPHIRE, tf_factor=0.97)}
    load_inputs(list(runs.values()))  # analyse and seal
    return runs


def dl_by_hand(y: list[float], se: list[float]) -> tuple[float, float, float]:
    """DerSimonian-Laird in closed form: (pooled log ratio, tau^2, I^2)."""
    w = [1 / s**2 for s in se]
    fe = sum(wi * yi for wi, yi in zip(w, y, strict=True)) / sum(w)
    q = sum(wi * (yi - fe) ** 2 for wi, yi in zip(w, y, strict=True))
    c = sum(w) - sum(wi**2 for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(y) - 1)) / c)
    wr = [1 / (s**2 + tau2) for s in se]
    return sum(wi * yi for wi, yi in zip(wr, y, strict=True)) / sum(wr), tau2, max(0.0, (q - (len(y) - 1)) / q)


@pytest.mark.slow
def test_the_matrix_and_the_pooled_ratio_equal_a_hand_calculation(hosts: dict[str, Path], tmp_path: Path) -> None:
    from kit.replication.meta import se_from_interval

    m = build_map(load_inputs(list(hosts.values())))
    assert len(m.classes) == 4 and m.runs == 5 and m.reused == 5  # the fixture's analyses, reused (sealed)
    p1 = next(c for c in m.claims if c.id == "P1")
    by_label = {next(h.host.label for h in m.classes if h.host.key == c.class_key): c for c in p1.cells}
    arm = next(c for label, c in by_label.items() if label.startswith("arm64"))
    assert arm.verdict == "contradicted" and arm.ratio is not None and arm.ratio > 1.4
    intel = next(c for label, c in by_label.items() if "8375C" in label)
    assert intel.runs == 2 and intel.verdicts == ("replicated", "replicated") and intel.n == 20
    assert p1.answer.startswith("replicated on 3 of 4 host classes; contradicted on 1 class, the only one with ARM CPUs; "
                                "heterogeneous: I²")
    # each single-run cell's standard error from its interval; the replicate class by inverse variance
    for c in p1.cells:
        if c.runs == 1:
            assert c.low is not None and c.high is not None and c.se_log is not None
            assert abs(c.se_log - se_from_interval(c.low, c.high, 0.95)) < 1e-12
    assert p1.pooled is not None
    y = [c.log_ratio for c in p1.cells]
    se = [c.se_log for c in p1.cells]
    assert all(v is not None for v in y + se)
    mu, tau2, i2 = dl_by_hand([float(v) for v in y if v is not None], [float(v) for v in se if v is not None])
    assert abs(p1.pooled.log_ratio - mu) < 1e-6 and abs(p1.pooled.tau2 - tau2) < 1e-6
    assert abs(p1.pooled.i2 - i2) < 1e-6 and abs(p1.pooled.ratio - math.exp(mu)) < 1e-6
    (never,) = m.never_tested
    assert never.id == "P2" and "GPU" in never.would_test and "not judged on any" in m.claims[1].answer


@pytest.mark.slow
def test_kit_map_writes_html_latex_and_json_of_its_schema(hosts: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "map"
    res = CliRunner().invoke(app, ["map", *map(str, hosts.values()), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads((out / "map.json").read_text()))
    html = (out / "map.html").read_text()
    assert html.index("the only one with ARM CPUs") < html.index('<section id="matrix">')  # the answer first
    assert "overflow-x: auto" in html and "private-host-name" not in html
    tex = (out / "map.tex").read_text()
    assert r"\begin{tabular}" in tex and "Neoverse" in tex and r"\toprule" in tex


@pytest.mark.slow
def test_a_mixed_study_input_is_refused_naming_both_studies(hosts: dict[str, Path], tmp_path: Path) -> None:
    other = make_run(tmp_path / "other", AMD, experiment="another_study")
    res = CliRunner().invoke(app, ["map", str(hosts["intel1"]), str(other), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    text = " ".join(str(res.exception or "").split()) + " ".join(res.output.split())
    assert "golden" in text and "another_study" in text, text
    other_profile = make_run(tmp_path / "quick", AMD, profile="quick")
    res = CliRunner().invoke(app, ["map", str(hosts["intel1"]), str(other_profile), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "quick" in " ".join(res.output.split()) + str(res.exception)


def _bundle(run: Path, dest: Path) -> Path:
    """A bundle directory as `kit pack` lays it out (run/, claims.json, SHA256SUMS) for ``run``."""
    from kit.analysis_record import Analysis
    from kit.pack import paper_claims_of, write_sums

    shutil.copytree(run, dest / "run")
    an = Analysis.from_json(json.loads((run / "analysis.json").read_text()), "test")
    man = json.loads((run / "manifest.json").read_text())
    (dest / "claims.json").write_text(json.dumps({"experiment": man["experiment"], "profile": man["profile"],
                                                  "claims": [], "paper_claims": paper_claims_of(an)}))
    write_sums(dest)
    return dest


@pytest.mark.slow
def test_the_same_run_twice_counts_once_and_a_tampered_bundle_is_refused(hosts: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    good = _bundle(hosts["amd"], tmp_path / "amd-bundle")
    tgz = tmp_path / "amd.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(good, arcname="amd-bundle")
    bad = _bundle(hosts["arm"], tmp_path / "arm-bundle")
    trial = next((bad / "run" / "trials").glob("*tensorflow.json"))
    rec = json.loads(trial.read_text())
    rec["results"]["train_time_s"] /= 1.5  # "ARM is as fast": an edit after packing
    trial.write_text(json.dumps(rec))
    inputs = load_inputs([hosts["amd"], good, tgz, bad, tmp_path / "nothing-here"])
    assert [x.kind for x in inputs.loaded] == ["run"] and len(inputs.duplicates) == 2
    reasons = {r.path: r.reason for r in inputs.refused}
    assert "changed run/trials/" in reasons[str(bad)] and "not a run directory or bundle" in reasons[
        str(tmp_path / "nothing-here")]
    m = build_map(inputs)
    assert [r.path for r in m.refused] == [str(bad), str(tmp_path / "nothing-here")]
