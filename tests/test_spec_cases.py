"""[cases]: one experiment over several datasets or models, each with its own settings,
validated like [workload]; the studies' files load in every profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import SpecError
from kit.plan import make_plan
from kit.run.prepare import trial_request
from kit.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DLBENCH = ROOT / "experiments" / "elshawi_dlbench" / "experiment.toml"
GERMINO = ROOT / "experiments" / "germino_mnist_energy" / "experiment.toml"


def test_dlbench_cases_carry_their_dataset_and_settings() -> None:
    spec = load_spec(DLBENCH)
    cfgs = spec.configurations()
    assert [c["case"] for c in cfgs] == ["mnist", "cifar10", "cifar100", "svhn", "imdb", "spa_eng", "ptb", "voc2012"]
    by = {c["case"]: c for c in cfgs}
    assert spec.dataset_for(by["svhn"]).source == "cropped"
    ptb = spec.workload_for(by["ptb"])
    assert (ptb.epochs, ptb.batch_size, ptb.optimizer, ptb.learning_rate) == (50, 20, "adadelta", 1.0)
    assert spec.workload_for(by["cifar100"]).epochs == 200 and spec.workload_for(by["mnist"]).epochs == 15
    assert spec.design.repetitions == 12 and spec.telemetry.period_s == 1.0  # 5 decide nothing; 12: issue 25
    voc = spec.workload_for(by["voc2012"])  # DLBench Sec. 4.3; torchvision's resize defaults
    assert spec.dataset_for(by["voc2012"]).source == "trainval"
    assert (voc.epochs, voc.batch_size, voc.optimizer, voc.learning_rate) == (100, 2, "adam", 1e-4)
    assert (voc.params["weight_decay"], voc.params["detect_min_size"], voc.params["detect_max_size"]) == (5e-4, 800, 1333)
    assert len(make_plan(spec).trials) == len(cfgs) * 2 * 12


def test_quick_profile_merges_into_cases_and_marks_synthetic_sources() -> None:
    spec = load_spec(DLBENCH, "quick")
    by = {c["case"]: c for c in spec.configurations()}
    assert spec.dataset_for(by["mnist"]).source == "t10k_split"
    assert {spec.dataset_for(by[c]).source for c in ("cifar10", "cifar100", "svhn", "imdb", "ptb", "voc2012")} == {
        "synthetic"}
    assert spec.workload_for(by["voc2012"]).params["detect_min_size"] == 64
    assert spec.workload_for(by["ptb"]).optimizer == "adadelta"  # inherited from the base case
    assert spec.workload_for(by["imdb"]).params["imdb_seq_len"] == 200
    assert "SYNTHETIC" in spec.profile_description
    plan = make_plan(spec)
    req = trial_request(spec, next(t for t in plan.trials if t.config["case"] == "imdb"))
    assert req["dataset"]["name"] == "imdb" and req["workload"]["batch_size"] == 64
    assert "case" not in req["workload"]


def test_germino_cases() -> None:
    spec = load_spec(GERMINO)
    by = {c["case"]: spec.workload_for(c) for c in spec.configurations()}
    assert by["knn"].params["model"] == "knn" and by["mlp"].optimizer == "adam"
    assert (by["cnn"].batch_size, by["cnn"].epochs, by["cnn"].momentum) == (4, 2, 0.9)
    assert spec.design.repetitions == 20


def _variant(tmp_path: Path, old: str, new: str, src: Path = DLBENCH) -> Path:
    text = src.read_text()
    assert old in text, old
    p = tmp_path / "spec.toml"
    p.write_text(text.replace(old, new, 1))
    return p


@pytest.mark.parametrize(
    ("old", "new", "key", "expected"),
    [
        ("workload = { epochs = 15 }", "workload = { epochz = 15 }", "cases.mnist.workload.epochz", "unknown key"),
        ("workload = { epochs = 15 }", 'workload = { epochs = "15" }', "cases.mnist.workload.epochs", "an integer"),
        ('dataset = { name = "mnist", source = "full" }', 'dataset = { name = "mnist", source = "python" }',
         "cases.mnist.dataset.source", "one of full, t10k_split"),
        ('optimizer = "adadelta"', 'optimizer = "rmsprop"', "workload.optimizer", "'sgd', 'adam', 'adadelta'"),
        ("imdb_seq_len = 200", "imdb_seq_len = 0", "workload.imdb_seq_len", "a value >= 1"),
        ('[cases.mnist]\ntitle', '[cases.mnist]\nenabled = 3\ntitle', "cases.mnist.enabled", "true or false"),
    ],
)
def test_bad_cases_name_key_and_expectation(tmp_path: Path, old: str, new: str, key: str, expected: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_spec(_variant(tmp_path, old, new), "quick")
    msg = exc.value.one_line()
    assert key in msg and expected in msg, msg


def test_a_case_dataset_the_workload_cannot_use(tmp_path: Path) -> None:
    p = _variant(tmp_path, 'workload = { model = "knn" }', 'workload = { model = "knn" }\ndataset = { name = "imdb", '
                 'source = "aclImdb" }', GERMINO)
    with pytest.raises(SpecError, match=r"cases\.knn\.dataset\.name.*one of mnist for workload germino"):
        load_spec(p)


def test_every_case_disabled_is_refused(tmp_path: Path) -> None:
    text = GERMINO.read_text()
    for c in ("knn", "mlp", "cnn"):
        text = text.replace(f"[cases.{c}]\n", f"[cases.{c}]\nenabled = false\n")
    p = tmp_path / "s.toml"
    p.write_text(text)
    with pytest.raises(SpecError, match="at least one case"):
        load_spec(p)
    one = GERMINO.read_text().replace("[cases.knn]\n", "[cases.knn]\nenabled = false\n")
    p.write_text(one)
    assert [c["case"] for c in load_spec(p).configurations()] == ["mlp", "cnn"]
