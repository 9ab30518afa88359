"""Spec loading: valid files load; every kind of invalid input is refused with
the file, the key path and what is expected, and nothing is written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kit.errors import SpecError
from kit.spec import load_spec


def write_variant(tmp_path: Path, spec_path: Path, old: str, new: str) -> Path:
    text = spec_path.read_text()
    assert old in text, old
    p = tmp_path / "spec.toml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_paper_and_profiles_load(spec_path: Path) -> None:
    paper = load_spec(spec_path)
    assert paper.profile == "paper"
    assert paper.workload.batch_size == 100 and paper.workload.steps_per_epoch == 600
    assert paper.workload.learning_rate == 0.01 and paper.workload.epochs == 1
    assert paper.design.repetitions == 100 and paper.design.warmup_repetitions == 1
    assert [h.id for h in paper.hypotheses] == ["H1", "H2", "H3", "H4", "H5"]
    assert paper.design.alpha == 0.05
    quick = load_spec(spec_path, "quick")
    assert quick.profile == "quick" and quick.design.repetitions == 12
    assert quick.dataset.source == "t10k_split" and "QUICK PROFILE" in quick.profile_description
    assert quick.workload.batch_size == 100  # inherited from the base


@pytest.mark.parametrize(
    ("old", "new", "key", "expected"),
    [
        ("repetitions = 100", "repetitions = 1", "design.repetitions", "an integer in [2, 10000]"),
        ('frameworks = ["tensorflow", "pytorch"]', 'frameworks = ["tensorflow", "mxnet"]', "experiment.frameworks[1]",
         "one of pytorch, tensorflow"),
        ("batch_size = 100", 'batch_size = "100"', "workload.batch_size", "an integer"),
        ("batch_size = 100", "batch_size = 100\nbatchsize = 3", "workload.batchsize", "unknown key"),
        ("batch_size = 100", "batch_size = 100\ntf_jit_compile = 1", "workload.tf_jit_compile", "true or false"),
        ('name = "lenet5"', 'name = "lenet6"', "workload.name", "a known workload ("),
        ("batch_size = 100", "batch_size = 70000", "workload.batch_size", "at most the 60000 training examples"),
        ('name = "mnist"', 'name = "cifar-11"', "dataset.name", "a known dataset"),
        ('[dataset]\nname = "mnist"\nsource = "full"            # the official 60,000/10,000 split\n', "",
         "dataset", "a [dataset] table (workload lenet5 needs one of: mnist)"),
        ("learning_rate = 0.01", "learning_rate = -1.0", "workload.learning_rate", "a number in (0, 10)"),
        ("alpha = 0.05\ntimeout_s", "alpha = 5\ntimeout_s", "design.alpha", "a significance level"),
    ],
)
def test_invalid_specs_name_file_key_and_expectation(tmp_path: Path, spec_path: Path, old: str, new: str, key: str,
                                                     expected: str) -> None:
    bad = write_variant(tmp_path, spec_path, old, new)
    with pytest.raises(SpecError) as exc:
        load_spec(bad)
    msg = exc.value.one_line()
    assert str(bad) in msg and key in msg and expected in msg, msg
    assert "Fix:" in msg and "\n" not in msg


def test_invalid_profile_fails_the_file(tmp_path: Path, spec_path: Path) -> None:
    bad = write_variant(tmp_path, spec_path, "[profiles.quick.design]\nrepetitions = 12",
                        "[profiles.quick.design]\nrepetitions = 0")
    with pytest.raises(SpecError, match=re.escape("profiles.quick -> design.repetitions")):
        load_spec(bad)


def test_steps_beyond_dataset_refused(tmp_path: Path, spec_path: Path) -> None:
    bad = write_variant(tmp_path, spec_path, "steps_per_epoch = 80", "steps_per_epoch = 81")
    with pytest.raises(SpecError, match=r"steps_per_epoch.*at most 80"):
        load_spec(bad, "quick")


def test_unknown_profile_and_missing_file(tmp_path: Path, spec_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown profile 'fast'.*paper, quick"):
        load_spec(spec_path, "fast")
    with pytest.raises(SpecError, match="spec file not found"):
        load_spec(tmp_path / "nope.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[experiment\nid=")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(broken)


def test_cli_invalid_spec_one_line_nonzero_nothing_written(tmp_path: Path, spec_path: Path) -> None:
    bad = write_variant(tmp_path, spec_path, "repetitions = 100", "repetitions = 1")
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "kit", "run", str(bad), "--runs-dir", str(runs)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "design.repetitions" in lines[0] and "Fix:" in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not runs.exists()
