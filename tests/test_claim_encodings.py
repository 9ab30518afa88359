"""The papers' findings as the experiments encode them (issue 38, item 6), checked against the papers' own words.

Every claim's ``paper_text`` is verbatim text of its paper: one or more passages joined by " … ", each found in
the paper's text (the seeds the kit reproduces, ``shared/seeds/<study>.txt`` beside the repository, or
$KIT_SEEDS_DIR) once whitespace is normalised and the extraction's line-break hyphens are undone. And each claim
re-encoded or added by issue 38 is checked against that sentence: its kind, arms, direction, value and the
conditions the sentence implies, with the words in the quote that carry them (a flipped direction, a value not
computed from the quoted numbers, or a quote that does not say what the claim says fails here).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from kit.claim_spec import Claim
from kit.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
SEEDS = Path(os.environ.get("KIT_SEEDS_DIR") or ROOT.parent / "shared" / "seeds")
EXPERIMENTS = sorted((ROOT / "experiments").glob("*/experiment.toml"))
ALL = {(p.parent.name, c.id): c for p in EXPERIMENTS for c in load_spec(p).claims}
STUDY = {p.parent.name: load_spec(p).experiment.study for p in EXPERIMENTS}


def _norm(text: str, seed: bool = False) -> str:
    """Whitespace collapsed; in the paper's text a hyphen at a line break joins the word (``Ten-\\nsorFlow``);
    hyphens dropped on both sides (so "R-CNN" split as "R-\\nCNN" still matches)."""
    t = text.replace("\u00ad", "")
    if seed:
        t = re.sub(r"-[ \t]*\n\s*", "", t)
    return re.sub(r"\s+", " ", t.replace("-", "")).strip()


def passages(quote: str) -> list[str]:
    return [p.strip() for p in quote.split(" … ") if p.strip()]


def _seed(experiment: str) -> str:
    path = SEEDS / f"{STUDY[experiment]}.txt"
    if not path.is_file():
        pytest.skip(f"the papers' texts are not here ({path}; set KIT_SEEDS_DIR)")
    return _norm(path.read_text(encoding="utf-8"), seed=True)


@pytest.mark.parametrize("key", sorted(ALL), ids=lambda k: f"{k[0]}-{k[1]}")
def test_every_claim_quotes_its_paper(key: tuple[str, str]) -> None:
    claim = ALL[key]
    seed = _seed(key[0])
    assert claim.paper_text.strip(), f"{key}: no paper_text"
    for p in passages(claim.paper_text):
        assert _norm(p) in seed, f"{key}: not in the paper's text: {p!r}"
    assert _norm(claim.statement) not in seed, f"{key}: the statement is the kit's words, not a quote"


def test_a_passage_not_in_the_paper_is_caught() -> None:
    seed = _seed("florencio2019_lenet")
    assert _norm("shows clearly a smaller learning execution time for the code that uses PyTorch library.") in seed
    assert _norm("shows clearly a smaller learning execution time for the code that uses TensorFlow library.") \
        not in seed


# What each re-encoded or added claim must be, and the words of its quote that say so (issue 38, item 6). "value":
# (quoted numerator, quoted denominator) whose ratio is the claim's paper_value, both read from the quote or reading.
KERAS = "the kit's TensorFlow arm is tf.keras: the paper's Keras result"
EXPECT: dict[tuple[str, str], dict[str, Any]] = {
    ("florencio2019_lenet", "C9"): dict(kind="not_significant", paper_n=100, words=["0.4851894147442428",
                                                                                  "H0 was not rejected"]),
    ("florencio2019_lenet", "C11"): dict(untestable=True, words=["the probability distribution is not normal"]),
    ("germino_mnist_energy", "C1"): dict(direction="less", tied={"tensorflow": "==2.0.*"},
                                         words=["TensorFlow significantly outperforms PyTorch"]),
    ("germino_mnist_energy", "C2"): dict(kind="magnitude", value=("8.61", "50.93"), threads=12,
                                         cpu="AMD Ryzen 5 3600X", tied={"tensorflow": "==2.0.*"},
                                         words=["improvement on the CPU of nearly 6x", "TensorFlow - CPU 8.49 8.61"]),
    ("germino_mnist_energy", "C3"): dict(kind="magnitude", value=("9.34", "16.51"), device="gpu",
                                         words=["1.75x on the GPU", "PyTorch - GPU 16.45 16.51"]),
    ("germino_mnist_energy", "C4"): dict(kind="magnitude", value=("155.26", "182.25"), threads=12,
                                         words=["1.2x slower on the CPU", "TensorFlow - CPU 154.64 155.26"]),
    ("germino_mnist_energy", "C5"): dict(kind="magnitude", value=("28.26", "58.39"), device="gpu",
                                         words=["over 2x slower on the GPU", "TensorFlow - GPU 28.02 28.26"]),
    ("germino_mnist_energy", "C6"): dict(direction="less", threads=12, tied={"tensorflow": "==2.0.*"},
                                         words=["power usage for PyTorch implementations is higher"]),
    ("germino_mnist_energy", "C7"): dict(direction="less", device="gpu", tied={"tensorflow": "==2.0.*"},
                                         words=["power usage for PyTorch implementations is higher"]),
    ("germino_mnist_energy", "C8"): dict(cause_removed=True, direction="greater",
                                         words=["base models given by PyTorch appear to be significantly less "
                                                "accurate"]),
    ("germino_mnist_energy", "C12"): dict(arms=("tensorflow@device=cpu", "tensorflow@device=gpu"), direction="less",
                                          threads=12, cpu="AMD Ryzen 5 3600X", words=["using TensorFlow in which case the CPU outperforms the GPU"]),
    ("germino_mnist_energy", "C13"): dict(arms=("tensorflow@device=gpu", "tensorflow@device=cpu"), kind="magnitude",
                                          value=("28.26", "155.26"), threads=12, cpu="AMD Ryzen 5 3600X", words=["the GPU is nearly 6x faster than the CPU"]),
    ("germino_mnist_energy", "C14"): dict(untestable=True,
                                          words=["near electrical capacity", "bound more strictly by the run time"]),
    ("patel_models_sweep", "C10"): dict(untestable=True, words=["With the exception of VGG16"]),
    ("patel_models_sweep", "C11"): dict(direction="less", scope="overall", threads=1, listed=5, device="cpu",
                                        words=["TensorFlow consistently outperformed CPU inference",
                                               "on a single CPU"]),
    ("patel_models_sweep", "C13"): dict(kind="not_significant", arms=("tensorflow",), paper_n=100,
                                        factor="batch_size", words=["batch size did not significantly affect power"]),
    ("patel_models_sweep", "C14"): dict(untestable=True, words=["GPU memory wasn't enough"]),
    ("patel_distributed", "C1"): dict(arms=("pytorch@case=ddp", "pytorch@case=dp"), direction="greater", gpus=2,
                                      words=["DistributedDataParallel (DDP) performs better than DataParallel"]),
    ("patel_distributed", "C2"): dict(arms=("pytorch@case=ddp", "pytorch@case=single"), direction="greater",
                                      threshold=1.8, gpus=2, words=["near-linear speed"]),
    ("dai_single_gpu_factors", "C1"): dict(kind="difference", scope="each_network", listed=7,
                                           words=["their performance difference", "seven popular neural networks"]),
    ("elshawi_dlbench", "C2"): dict(cause_removed=True, direction="greater",
                                    words=["Keras, MXNet and Theano come in the first place",
                                           "PyTorch comes in the last place"]),
    ("elshawi_dlbench", "C4"): dict(untestable=True, cause_removed=True, words=["TensorFlow achieves the lowest"]),
    ("elshawi_dlbench", "C5"): dict(direction="less", threads=64, cpu="Intel Xeon", data="shapes",
                                    words=["Keras has the smallest training time on MNIST"]),
    ("elshawi_dlbench", "C6"): dict(untestable=True, words=["Both Pytorch and Tensorflow show similar training"]),
    ("elshawi_dlbench", "C7"): dict(untestable=True, words=["TensorFlow takes the smallest training time"]),
    ("elshawi_dlbench", "C10"): dict(untestable=True, words=["Keras, Chainer, and Theano have comparable memory"]),
    ("elshawi_dlbench", "C11"): dict(untestable=True, words=["TensorFlow has the highest memory consumption on Penn"]),
    ("elshawi_dlbench", "C12"): dict(kind="magnitude", value=("638", "2628"),
                                     words=["followed by Keras (10 min and 38 s)", "PyTorch comes in the last place "
                                            "(43 min and 48 s)"]),
    ("elshawi_dlbench", "C13"): dict(kind="not_significant", paper_n=5,
                                     words=["between Keras, Pytorch, TensorFlow, and Chainer are not statistically "
                                            "significant"]),
    ("elshawi_dlbench", "C17"): dict(untestable=True, words=["TensorFlow has the highest CPU consumption on IMDB"]),
    ("elshawi_dlbench", "C18"): dict(direction="greater", where={"case": "svhn"},
                                     words=["TensorFlow and Keras have the highest memory consumption on SVHN",
                                            "PyTorch has the lowest memory consumption on SVHN"]),
    ("elshawi_dlbench", "C22"): dict(direction="greater", words=["Keras and Theano have a comparable training time "
                                                                 "of 9 h and 36 min", "6 h and 12 min"]),
    ("elshawi_dlbench", "C26"): dict(untestable=True, words=["Keras, Chainer, and Pytorch takes more than 24 h"]),
    ("elshawi_dlbench", "C32"): dict(cause_removed=True, direction="less", words=["74.7%", "PyTorch (94.4%)"]),
    ("elshawi_dlbench", "C33"): dict(cause_removed=True, direction="less",
                                     words=["Keras achieves the lowest accuracy of 73.3%"]),
    ("elshawi_dlbench", "C34"): dict(kind="not_significant", paper_n=5,
                                     words=["between PyTorch and the rest of the frameworks on Many things which are "
                                            "not statistically significant"]),
    ("elshawi_dlbench", "C34b"): dict(untestable=True, direction="less",
                                      words=["between TensorFlow and the rest of the frameworks on Penn Treebank and "
                                             "Many things are statistically significant"]),
    ("elshawi_dlbench", "C40"): dict(cause_removed=True, direction="greater",
                                     words=["Keras achieves the highest accuracy of 53.8%"]),
    ("elshawi_dlbench", "C41"): dict(kind="not_significant", paper_n=5,
                                     words=["Penn Treebank dataset achieve a comparable low performance",
                                            "not statistically significant"]),
    ("elshawi_dlbench", "C42"): dict(kind="no_difference", where={"case": "svhn"},
                                     words=["MNIST and SVHN datasets on the CNN, all the deep learning frameworks "
                                            "achieve a comparable accuracy"]),
    ("elshawi_dlbench", "C43"): dict(direction="less", device="gpu", where={"case": "svhn"},
                                     words=["For SVHN, Keras has the lowest GPU usage"]),
    ("elshawi_dlbench", "C44"): dict(arms=("tensorflow@device=cpu", "tensorflow@device=gpu"), direction="less",
                                     words=["Keras on IMDB Reviews using LSTM, CPU without GPU outperforms"]),
    ("elshawi_dlbench", "C45"): dict(arms=("tensorflow@device=gpu", "tensorflow@device=cpu"), direction="less",
                                     threshold=0.316, scope="overall", words=["by an order of magnitude across most"]),
    ("elshawi_dlbench", "C46"): dict(untestable=True, words=["PyTorch gains the least"]),
    ("elshawi_dlbench", "C47"): dict(untestable=True, words=["Pearson correlation coefficient", "0.0005"]),
}


def _ratio(a: str, b: str) -> float:
    return round(float(a) / float(b), 4)


@pytest.mark.parametrize("key", sorted(EXPECT), ids=lambda k: f"{k[0]}-{k[1]}")
def test_each_reencoded_or_new_claim_says_what_its_sentence_says(key: tuple[str, str]) -> None:
    claim: Claim = ALL[key]
    want = EXPECT[key]
    for w in want["words"]:
        assert _norm(w) in _norm(claim.paper_text), f"{key}: the quote does not say {w!r}"
    assert bool(claim.untestable.strip()) == bool(want.get("untestable")), key
    assert bool(claim.cause_removed.strip()) == bool(want.get("cause_removed")), key
    for field, attr in (("kind", "kind"), ("direction", "direction"), ("scope", "scope"), ("threads", "threads"),
                        ("cpu", "cpu_model"), ("device", "device"), ("gpus", "gpus"), ("data", "data"),
                        ("paper_n", "paper_n"), ("factor", "factor"), ("threshold", "threshold"),
                        ("metric", "metric"), ("where", "where")):
        if field in want:
            assert getattr(claim, attr) == want[field], (key, attr, getattr(claim, attr))
    if "tied" in want:
        assert claim.tied_versions == want["tied"], key
    if not claim.untestable:
        assert claim.arms == want.get("arms", ("tensorflow", "pytorch")), key
    if "value" in want:
        a, b = want["value"]
        assert claim.paper_value == _ratio(a, b), (key, claim.paper_value, _ratio(a, b))
        assert all(x in claim.paper_text + claim.reading for x in (a.split(".")[0], b.split(".")[0])), key
    if "listed" in want:
        assert sum(len(v) for v in claim.listed().values()) == want["listed"], key


def test_dlbench_judges_its_tensorflow_arm_by_the_papers_keras_results() -> None:
    """DLBench's TensorFlow arm is tf.keras: a testable claim on it rests on what the paper says of Keras, or on
    PyTorch being the highest or lowest of all frameworks (so of Keras too); the low-level TensorFlow results are
    recorded as not testable."""
    for (exp, cid), c in ALL.items():
        if exp != "elshawi_dlbench" or c.untestable or c.cause_removed or "tensorflow" not in c.arms:
            continue
        text = c.paper_text
        assert "Keras" in text or re.search(r"(?i)pytorch (has|achieves|comes in) the (highest|lowest|last)", text) \
            or "all the deep learning frameworks" in text or "all frameworks" in text.lower() \
            or "PyTorch has the highest" in text or "PyTorch and the rest of the frameworks" in text, (cid, text)


def test_kit_list_claims_shows_the_new_and_reencoded_claims() -> None:
    """What `kit list --claims` prints of the new fields: the quantity and the conditions (that every claim of every
    experiment is in its table is checked where the command runs: tests/test_claims.py, kit list --claims)."""
    import dataclasses

    from kit.cli.listing import _claim_conditions, _claim_quantity

    shown = {k: (_claim_quantity(dataclasses.asdict(c)), _claim_conditions(dataclasses.asdict(c)))
             for k, c in ALL.items()}
    assert shown[("patel_distributed", "C2")][0] == ("throughput_ips (train): pytorch@case=ddp/(1.8 x "
                                                    "pytorch@case=single) > 1")
    assert "not significant at the paper's n = 100" in shown[("florencio2019_lenet", "C9")][0]
    assert "tensorflow: no significant trend with batch_size at the paper's n = 100" in \
        shown[("patel_models_sweep", "C13")][0]
    assert shown[("dai_single_gpu_factors", "C1")][0].endswith("; each_network")
    assert "recorded, never contradicted: the kit removes the gap's cause" in shown[("elshawi_dlbench", "C2")][0]
    assert shown[("germino_mnist_energy", "C2")][1].startswith("cpu; 12 CPU threads; CPU AMD Ryzen 5 3600X; tied to "
                                                               "tensorflow ==2.0.*")


def test_the_readme_counts_the_claims_the_experiments_encode() -> None:
    """The README's count of claims (all, recorded but not judged by design, cause removed) is the experiments':
    a claim added or re-encoded as untestable changes it, and a stale count misleads the reader of the ledger."""
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text(encoding="utf-8"))
    m = re.search(r"prints them: (\d+) claims over the five papers, (\d+) of which the kit records but cannot judge "
                  r"by design .*? and (\d+) more record a gap whose cause", readme)
    assert m, "README.md: the claims count sentence is gone"
    claims = list(ALL.values())
    untestable = sum(1 for c in claims if c.untestable.strip())
    removed = sum(1 for c in claims if c.cause_removed.strip() and not c.untestable.strip())
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (len(claims), untestable, removed)
