"""Releases side by side for real (issue 16): three TensorFlow CPU releases in containers (podman).

Builds tensorflow-2.19-cpu, -2.20-cpu and -2.21-cpu (cached by recipe hash), then:
``kit bisect`` over the three through the engine (each comparison one interleaved run of two
releases; every trial in its arm's image; the verdict reproduced by ``kit compare --arms`` and the
two framework versions among the provenance differences), and the README's CI-gate recipe executed
as written. The workload is LeNet on the bundled MNIST test set, shortened (a `bisect-ci` profile
appended to a copy of the spec) so that three runs fit in CI; what it finds is whatever these
releases do on this host, so the assertions check consistency, not a particular answer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.images.build import image_info
from kit.images.commands import build_rows
from kit.images.lock import default_wheelhouse, fetch_wheels
from kit.images.matrix import load_matrix

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "florencio2019_lenet" / "experiment.toml"
MNIST = ROOT / "data" / "mnist-t10k"
TF_ROWS = ("tensorflow-2.19-cpu", "tensorflow-2.20-cpu", "tensorflow-2.21-cpu")
LOCAL_BASE = "localhost/kit-base:bookworm"
PROFILE = """
[profiles.bisect-ci]
description = "CI profile of the bisection test: 10 repetitions of 20 LeNet steps on a 2,000/1,000 split, no warm-up block, no cool-down."
[profiles.bisect-ci.dataset]
source = "t10k_split"
train_size = 2000
test_size = 1000
[profiles.bisect-ci.workload]
steps_per_epoch = 20
device = "cpu"
min_phase_s = 0.0
threads = 1
[profiles.bisect-ci.design]
repetitions = 10
warmup_repetitions = 0  # each trial warms up inside its process (warmup_steps); the blocks' order is what counts here
timeout_s = 300
[profiles.bisect-ci.telemetry]
baseline_s = 0
cooldown_max_s = 0
"""


@pytest.fixture(scope="module")
def engine_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from test_container_integration import _engine  # the same engine discovery (starts podman as root in CI)

    saved = dict(os.environ)
    try:
        engine = _engine()
        base = os.environ.get("KIT_BASE_IMAGE") or (LOCAL_BASE if image_info(engine, LOCAL_BASE) else None)
        matrix = load_matrix()
        if base is None and image_info(engine, matrix.get(TF_ROWS[0]).base_ref) is None:
            pytest.skip("no base image on the engine and no registry: run .ci/podman.sh (builds localhost/kit-base)")
        os.environ["KIT_IMAGES_LOCK"] = str(tmp_path_factory.mktemp("images") / "images.lock.json")
        os.environ["PIP_RETRIES"] = "1"
        wheelhouse = default_wheelhouse()
        rows = [matrix.get(n) for n in TF_ROWS]
        for row in rows:
            fetch_wheels(row, wheelhouse / row.name)
        build_rows(rows, base=base, wheelhouse=wheelhouse, engine=engine, on_line=lambda line: None)
        yield dict(os.environ)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def spec_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / SPEC.name
    path.write_text(SPEC.read_text() + PROFILE)
    return path


def kit(*args: str, env: dict[str, str], timeout: int = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_bisect_across_three_tensorflow_releases(engine_env: dict[str, str], spec_copy: Path, tmp_path: Path) -> None:
    out_json = tmp_path / "bisect.json"
    res = kit("bisect", str(spec_copy), "--profile", "bisect-ci", "--images", ",".join(TF_ROWS), "--metric", "time_s",
              "--phase", "train", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(MNIST),
              "--json-file", str(out_json), env=engine_env)
    print(res.stdout[-6000:])
    assert res.returncode in (0, 3), res.stdout[-3000:] + res.stderr[-3000:]
    b = json.loads(out_json.read_text())
    assert b["status"] in ("located", "no change", "inconclusive", "non-monotonic")
    assert (res.returncode == 3) == (b["status"] in ("inconclusive", "non-monotonic"))
    assert 1 <= b["n_comparisons"] <= 2 and b["comparisons"][0]["candidate"] == TF_ROWS[-1]
    assert b["status"] in res.stdout and "comparison(s)" in res.stdout
    if b["status"] == "located":
        assert b["n_comparisons"] == 2 and b["first_changed"] in TF_ROWS[1:]
    versions = {"tensorflow-2.19-cpu": "2.19.1", "tensorflow-2.20-cpu": "2.20.0", "tensorflow-2.21-cpu": "2.21.0"}
    for c in b["comparisons"]:
        run = Path(c["run"])
        man = json.loads((run / "manifest.json").read_text())
        base_arm, cand_arm = c["arms"]
        assert man["status"] == "complete" and man["plan"]["arms"] == [base_arm, cand_arm]
        assert {a: man["backend"]["images"][a]["row"] for a in c["arms"]} == {base_arm: c["baseline"],
                                                                             cand_arm: c["candidate"]}
        trials = [json.loads(p.read_text()) for p in sorted((run / "trials").glob("*.json"))]
        assert len(trials) == 20  # 10 blocks of one trial per arm
        for t in trials:  # every trial ran in its arm's image and reported that image's release from inside
            img = man["backend"]["images"][t["arm"]]
            assert t["status"] == "ok" and t["backend"]["image_id"] == img["id"], t.get("error")
            assert t["env"]["framework_version"] == versions[img["row"]]
        # kit compare --arms reproduces the bisection's verdict and lists the two framework versions
        cmp_json = tmp_path / f"cmp-{cand_arm}.json"
        cmp = kit("compare", str(run), "--arms", f"{base_arm},{cand_arm}", "--metric", "time_s", "--json-file",
                  str(cmp_json), env=engine_env, timeout=300)
        assert cmp.returncode == 0, cmp.stdout[-3000:] + cmp.stderr[-3000:]
        rows = [r for r in json.loads(cmp_json.read_text())["rows"] if r["phase"] == "train"]
        assert len(rows) == 1 and rows[0]["verdict"] == c["verdict"]
        assert rows[0]["ratio"] == pytest.approx(c["ratio"])
        diffs = {d["key"]: (d["a"], d["b"]) for d in json.loads(cmp_json.read_text())["provenance_differences"]}
        assert diffs["inside.framework_version"] == (versions[c["baseline"]], versions[c["candidate"]])
        assert "detectable" in cmp.stdout


def readme_recipe() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- ci-gate-recipe -->\s*```sh\n(.*?)```", text, re.S)
    assert m, "README.md lost its CI-gate recipe block (<!-- ci-gate-recipe --> followed by a sh block)"
    return m.group(1)


def test_the_readme_ci_gate_recipe_runs_as_written(engine_env: dict[str, str], spec_copy: Path,
                                                     tmp_path: Path) -> None:
    """The README's recipe for a project's CI, executed by bash: baseline and candidate in one plan, then
    the gate's exit code (0 no change, 1 a conclusive regression, 3 inconclusive) follows kit compare."""
    script = tmp_path / "gate.sh"
    script.write_text("set -euo pipefail\n" + readme_recipe())
    env = {**engine_env, "SPEC": str(spec_copy), "PROFILE": "bisect-ci", "BASELINE": "tensorflow-2.20-cpu",
           "CANDIDATE": "tensorflow-2.21-cpu", "RUNS": str(tmp_path / "runs"), "KIT": f"{sys.executable} -m kit",
           "KIT_DATA_DIR": str(MNIST)}
    res = subprocess.run(["bash", str(script)], cwd=ROOT, capture_output=True, text=True, timeout=1500, env=env)
    print(res.stdout[-4000:])
    assert res.returncode in (0, 1, 3), res.stdout[-3000:] + res.stderr[-3000:]
    (run,) = list((tmp_path / "runs").iterdir())
    verdict = json.loads((run / "gate.json").read_text())["counts"]
    expected = 1 if verdict["regression"] else 3 if verdict["inconclusive"] else 0
    assert res.returncode == expected, (verdict, res.stdout[-2000:])
    assert "tensorflow@2.20-cpu" in res.stdout and "tensorflow@2.21-cpu" in res.stdout
