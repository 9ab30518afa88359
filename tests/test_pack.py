"""`kit pack` then `kit verify` round-trip on a real run; a tampered file fails verification."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kit.errors import ExitCode, KitError
from kit.pack import pack
from kit.run import RunOptions, start_run
from kit.spec import load_spec
from kit.verify import IntegrityError, check_integrity, compare_claims, verify

CALIBRATED = Path(__file__).parent / "data" / "calibrated.toml"


# What a paper would have claimed: TensorFlow trains more slowly (the planted 20 %: replicated), and a claim made
# on a GPU, which this CPU run cannot test.
PAPER_CLAIMS = """
[[claims]]
id = "P1"
source = "Table 5"
statement = "TensorFlow trains more slowly than PyTorch"
kind = "direction"
metric = "time_s"
phase = "train"
arms = ["tensorflow", "pytorch"]
direction = "greater"

[[claims]]
id = "P2"
source = "Fig. 7"
statement = "TensorFlow's inference is slower on the GPU"
kind = "direction"
metric = "time_s"
phase = "infer"
arms = ["tensorflow", "pytorch"]
direction = "greater"
device = "gpu"
hardware = "GTX 1050"
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pack")
    spec = tmp / "calibrated.toml"
    # a real claim: tensorflow is planted 20 % slower, so H1 is rejected in both phases
    spec.write_text(CALIBRATED.read_text().replace(
        "jitter_frac = 0.01", 'jitter_frac = 0.01\nslowdown = 1.2\nslowdown_framework = "tensorflow"') + PAPER_CLAIMS)
    rd = start_run(load_spec(spec), RunOptions(runs_root=tmp / "runs"))
    return pack(rd.path)


@pytest.mark.slow
def test_bundle_contents(bundle: Path) -> None:
    root = bundle.parent / bundle.name.removesuffix(".tar.gz")
    for name in ("README.md", "SHA256SUMS", "claims.json", "kit-src.tar.gz", "run/manifest.json",
                 "run/analysis.json", "spec/calibrated.toml", "images"):
        assert (root / name).exists(), name
    assert not (root / "run" / "work").exists() and not (root / "run" / ".lock").exists()
    readme = (root / "README.md").read_text()
    for badge in ("Artifacts Available", "Functional", "Results Reproduced", "kit verify"):
        assert badge in readme
    claims = json.loads((root / "claims.json").read_text())["claims"]
    assert {(c["id"], c["phase"]) for c in claims} == {("H1", "train"), ("H1", "infer")}
    assert all(c["rejected"] and c["direction"] == "tensorflow > pytorch" for c in claims)
    paper = json.loads((root / "claims.json").read_text())["paper_claims"]
    assert [(c["id"], c["verdict"]) for c in paper] == [("P1", "replicated"), ("P2", "not testable")]
    assert 1.1 < paper[0]["estimate"] < 1.3
    assert "1 of 2 claims replicated, 1 not testable on this host" in readme and "| P1 | Table 5 |" in readme
    assert check_integrity(root) > 10
    with tarfile.open(root / "kit-src.tar.gz") as tar:
        assert "kit/kit/harness.py" in tar.getnames()


@pytest.mark.slow
def test_verify_round_trip(bundle: Path, tmp_path: Path) -> None:
    res = verify(bundle, None)
    assert res["integrity"] == "ok" and res["same_profile"]
    assert res["claims_reproduced"], res["claims"]
    assert res["badges"] == {"available": True, "functional": True, "results_reproduced": True}
    assert [(p["id"], p["verdict_original"], p["verdict_rerun"]) for p in res["paper_claims"]] == [
        ("P1", "replicated", "replicated"), ("P2", "not testable", "not testable")]
    assert res["paper_verdicts_changed"] == []


@pytest.mark.slow
def test_verify_refuses_a_forged_paper_verdict(bundle: Path, tmp_path: Path) -> None:
    from kit.pack import write_sums

    work = tmp_path / "copy"
    with tarfile.open(bundle) as tar:
        tar.extractall(work, filter="data")
    root = next(work.iterdir())
    meta = json.loads((root / "claims.json").read_text())
    meta["paper_claims"][1]["verdict"] = "replicated"  # a GPU claim "replicated" on a CPU run
    (root / "claims.json").write_text(json.dumps(meta))
    write_sums(root)  # the forger re-signs: integrity holds, the raw data still say otherwise
    with pytest.raises(IntegrityError, match=r"paper claim P2 verdict: 'replicated' claimed, 'not testable'"):
        verify(root)


@pytest.mark.slow
def test_verify_fails_on_a_tampered_file(bundle: Path, tmp_path: Path) -> None:
    work = tmp_path / "copy"
    with tarfile.open(bundle) as tar:
        tar.extractall(work, filter="data")
    root = next(work.iterdir())
    trial = next((root / "run" / "trials").glob("*.json"))
    rec = json.loads(trial.read_text())
    rec["results"]["train_time_s"] *= 0.5  # a "better" number
    trial.write_text(json.dumps(rec))
    with pytest.raises(IntegrityError, match=r"changed run/trials/"):
        verify(root)
    proc = subprocess.run([sys.executable, "-m", "kit", "verify", str(root)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == ExitCode.INPUT and "integrity check failed" in proc.stderr and "Traceback" not in proc.stderr
    (root / "run" / "trials" / "extra.json").write_text("{}")
    with pytest.raises(KitError, match=r"extra run/trials/extra.json"):
        check_integrity(root)


def test_claims_comparison_rules() -> None:
    old = [{"id": "H1", "phase": "train", "config_id": "c00", "tested": True, "rejected": True,
            "direction": "a > b", "ratio": 1.20}]
    same = [{**old[0], "ratio": 1.25}]
    far = [{**old[0], "ratio": 1.40}]
    flipped = [{**old[0], "direction": "a < b", "ratio": 0.8}]
    assert compare_claims(old, same, 0.10)[0]["reproduced"]
    assert not compare_claims(old, far, 0.10)[0]["reproduced"]
    assert not compare_claims(old, flipped, 0.10)[0]["reproduced"]
    assert not compare_claims(old, [], 0.10)[0]["reproduced"]
