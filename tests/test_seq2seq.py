"""DLBench's English-Spanish encoder-decoder (Fig. 3c): the unpinned registry entry (refused without the user's
digest), the spa-eng.zip reader on the stand-in and on crafted attacks, the authors' split, BLEU on hand-computed
cases, and (slow) the two framework builds: equal parameter counts, equal outputs, equal SGD trajectories."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kit import synthetic
from kit.dataset_registry import SPA_ENG
from kit.dataset_types import UNPINNED
from kit.datasets import DATASETS, ENV_SHA256, fetch, resolve, sha256_file
from kit.errors import ChecksumError, DatasetError
from kit.workloads import anki, seq2seq
from kit.workloads.common import WorkloadError


def _zip(path: Path, members: list[tuple[str, bytes]], attr: int = 0o644) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2018, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = attr << 16
            zf.writestr(info, data)
    return path


ROOT = Path(__file__).resolve().parents[1]
GOOD = b"Go.\tVe.\nHi.\tHola.\n"


# -- registry: registered, not pinned, refused without the user's digest -----------------------------------

def test_spa_eng_is_registered_unpinned_with_the_tensorflow_copy() -> None:
    info = DATASETS["spa_eng"]
    assert info is SPA_ENG and info.synthetic == "kit.synthetic:write_spa_eng"
    f = info.file("spa-eng.zip")
    assert f.sha256 == UNPINNED and f.size == 2638744
    assert f.urls[0] == "http://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip"
    assert info.sources == {"tatoeba": ("spa-eng.zip",), "synthetic": ()}
    assert info.full_sizes["tatoeba"] == (80000, 20000)


def test_unpinned_file_needs_the_users_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synthetic.write_spa_eng(tmp_path, 20, 5)  # right name and format, any bytes: the kit cannot tell
    monkeypatch.delenv(ENV_SHA256, raising=False)
    with pytest.raises(DatasetError) as exc:
        resolve("spa_eng", "tatoeba", data_dir=tmp_path, download=False)
    assert "not pinned" in exc.value.one_line() and ENV_SHA256 in exc.value.one_line()
    digest = sha256_file(tmp_path / "spa-eng.zip")
    monkeypatch.setenv(ENV_SHA256, f"other.zip={'0' * 64}, spa-eng.zip={digest.upper()}")
    ok = resolve("spa_eng", "tatoeba", data_dir=tmp_path, download=False)
    assert ok.files == {"spa-eng.zip": digest}  # the digest used is recorded
    monkeypatch.setenv(ENV_SHA256, f"spa-eng.zip={'a' * 64}")
    with pytest.raises(ChecksumError):
        resolve("spa_eng", "tatoeba", data_dir=tmp_path, download=False)
    for bad in ("spa-eng.zip", f"spa-eng.zip={'g' * 64}", "spa-eng.zip=abc"):
        monkeypatch.setenv(ENV_SHA256, bad)
        with pytest.raises(DatasetError, match="64 hex"):
            resolve("spa_eng", "tatoeba", data_dir=tmp_path, download=False)


def test_unpinned_file_is_not_downloaded_without_the_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SHA256, raising=False)
    f = SPA_ENG.file("spa-eng.zip")
    with pytest.raises(DatasetError, match="not pinned"):
        fetch(f, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before any download or directory


# -- the reader ------------------------------------------------------------------------------------------

def test_reader_on_the_stand_in_splits_as_the_authors(tmp_path: Path) -> None:
    synthetic.write_spa_eng(tmp_path, 80, 20)
    p = anki.load_pairs(tmp_path, 100, None, None, "spanish", 0, 0)
    assert len(p.src_train) == 80 and len(p.src_test) == 20
    assert p.src_vocab[:4] == anki.SPECIALS and "cancion" in p.src_vocab and "song" in p.tgt_vocab
    assert (p.tgt_train[:, 0] == anki.START).all() and (p.src_train[:, 0] == anki.START).all()
    ends = [row.tolist().index(anki.END) for row in p.tgt_train]
    assert all(p.tgt_train[i, e + 1 :].sum() == 0 for i, e in enumerate(ends))  # padding after <end>
    assert (p.src_len_train == (p.src_train != 0).sum(1)).all()
    q = anki.load_pairs(tmp_path, 100, 50, 10, "english", 0, 0)  # subsets from the front; direction swapped
    full = anki.load_pairs(tmp_path, 100, None, None, "english", 0, 0)

    def words(ids: np.ndarray, vocab: tuple[str, ...]) -> list[list[str]]:
        return [[vocab[i] for i in row if i] for row in ids]

    assert words(q.src_train, q.src_vocab) == words(full.src_train[:50], full.src_vocab)  # vocab: the 50's
    assert "song" in q.src_vocab and "cancion" in q.tgt_vocab
    capped = anki.load_pairs(tmp_path, 100, None, None, "spanish", 10, 5)
    assert len(capped.src_vocab) == 10 and capped.src_train.shape[1] == 5
    assert (capped.src_train == anki.UNK).any() and ((capped.src_train == anki.END).sum(1) == 1).all()
    with pytest.raises(WorkloadError, match="101 sentence pairs asked, 100 in the file"):
        anki.load_pairs(tmp_path, 101, None, None, "spanish", 0, 0)
    again = tmp_path / "again"
    again.mkdir()
    assert synthetic.write_spa_eng(again, 80, 20) == ["spa-eng.zip"]  # deterministic: the same bytes
    assert sha256_file(again / "spa-eng.zip") == hashlib.sha256((tmp_path / "spa-eng.zip").read_bytes()).hexdigest()


def test_reader_accepts_two_and_three_fields_and_both_layouts(tmp_path: Path) -> None:
    two = _zip(tmp_path / "a.zip", [("spa-eng/", b""), ("spa-eng/spa.txt", GOOD)])
    three = _zip(tmp_path / "b.zip", [("_about.txt", b"about"),
                                      ("spa.txt", b"Go.\tVe.\tCC-BY 2.0 (France) #1\r\nHi.\tHola.\tCC #2\n")])
    for z in (two, three):
        assert anki.parse_pairs(anki.read_text(z), str(z)) == [("Go.", "Ve."), ("Hi.", "Hola.")]


def test_authors_tokeniser() -> None:
    assert anki.tokens("¿Tú tienes un perro?") == ["<start>", "¿", "tu", "tienes", "un", "perro", "?", "<end>"]
    assert anki.tokens("It's 5 o'clock -- ¡Qué niño!") == ["<start>", "it", "s", "o", "clock", "que", "nino", "!",
                                                         "<end>"]


def test_split_is_scikit_learns() -> None:
    tr, te = anki.authors_split(1003)
    assert len(te) == 201 and len(tr) == 802 and len(set(tr) | set(te)) == 1003
    model_selection = pytest.importorskip("sklearn.model_selection")
    a_tr, a_te = model_selection.train_test_split(np.arange(1003), test_size=0.2, random_state=42)
    assert (a_tr == tr).all() and (a_te == te).all()


ATTACKS = {
    "traversal": [("../spa.txt", GOOD)],
    "absolute": [("/etc/spa.txt", GOOD)],
    "unexpected member": [("spa-eng/spa.txt", GOOD), ("spa-eng/run.sh", b"rm -rf /")],
    "two texts": [("spa-eng/spa.txt", GOOD), ("spa.txt", GOOD)],
    "no text": [("_about.txt", b"x")],
    "bad encoding": [("spa-eng/spa.txt", b"Go.\tVe.\n" + b"\xff\xfe\tx\n")],
    "one field": [("spa-eng/spa.txt", b"Go.\tVe.\nno tab here\n")],
    "four fields": [("spa-eng/spa.txt", b"Go.\tVe.\ta\tb\n")],
    "empty field": [("spa-eng/spa.txt", b"Go.\t \n")],
    "long line": [("spa-eng/spa.txt", b"Go.\t" + b"a" * (anki.MAX_LINE_CHARS + 1) + b"\n")],
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_crafted_zips_are_refused(tmp_path: Path, attack: str) -> None:
    z = _zip(tmp_path / anki.ARCHIVE, ATTACKS[attack])
    with pytest.raises(WorkloadError):
        anki.parse_pairs(anki.read_text(z), str(z))


def test_symlinks_are_refused(tmp_path: Path) -> None:
    z = _zip(tmp_path / "link.zip", [("spa-eng/spa.txt", b"/etc/passwd")], attr=stat.S_IFLNK | 0o777)
    with pytest.raises(WorkloadError, match="symbolic link"):
        anki.read_text(z)
    real = _zip(tmp_path / "real.zip", [("spa-eng/spa.txt", GOOD)])
    os.symlink(real, tmp_path / anki.ARCHIVE)
    with pytest.raises(WorkloadError, match="link"):
        anki.read_text(tmp_path / anki.ARCHIVE)


def test_zip_bombs_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ratio = _zip(tmp_path / "ratio.zip", [("spa-eng/spa.txt", b"Go.\tVe.\n" + b" " * (8 << 20))])
    with pytest.raises(WorkloadError, match="zip bomb"):
        anki.read_text(ratio)
    monkeypatch.setattr(anki, "MAX_TEXT_BYTES", 1 << 16)  # a cap the crafted file's declared size exceeds
    rng = np.random.default_rng(0)
    big = "".join(f"w{rng.integers(10**9)}\tv{rng.integers(10**9)}\n" for _ in range(5000)).encode()
    with pytest.raises(WorkloadError, match="declares"):
        anki.read_text(_zip(tmp_path / "big.zip", [("spa-eng/spa.txt", big)]))
    # a header that lies small: the bytes actually inflated are counted against the cap
    liar = tmp_path / "liar.zip"
    _zip(liar, [("spa-eng/spa.txt", big)])
    data = bytearray(liar.read_bytes())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size in local and central headers
        i = data.find(sig)
        data[i + off : i + off + 4] = (1000).to_bytes(4, "little")
    liar.write_bytes(bytes(data))
    with pytest.raises(WorkloadError):
        anki.read_text(liar)


# -- BLEU, hand-computed ---------------------------------------------------------------------------------

def test_bleu_hand_computed_cases() -> None:
    # Papineni et al.'s modified precision: "the the the the the the the" against "the cat is on the mat": 2/7
    the, cat, is_, on, mat = 1, 2, 3, 4, 5
    stats = seq2seq.bleu_stats([the] * 7, [the, cat, is_, on, the, mat])
    assert stats[:4] == [7, 6, 2, 7] and seq2seq.corpus_bleu([[the] * 7], [[the, cat, is_, on, the, mat]]) == 0.0
    # p1..p4 = 4/5, 3/4, 2/3, 1/2, no brevity penalty: (1/5)^(1/4)
    assert seq2seq.corpus_bleu([[1, 2, 3, 4, 5]], [[1, 2, 3, 4, 6]]) == pytest.approx(0.2 ** 0.25)
    # every precision 1, 4 words against 6: exp(1 - 6/4)
    assert seq2seq.corpus_bleu([[1, 2, 3, 4]], [[1, 2, 3, 4, 5, 6]]) == pytest.approx(math.exp(-0.5))
    assert seq2seq.corpus_bleu([[7, 8, 9, 10, 11]], [[7, 8, 9, 10, 11]]) == 1.0
    # corpus level: counts summed before dividing (not a mean of sentence scores; the short one alone is 0)
    hyps, refs = [[1, 2, 3, 4, 5], [9, 9]], [[1, 2, 3, 4, 5], [9, 8]]
    p = [6 / 7, 4 / 5, 3 / 3, 2 / 2]
    assert seq2seq.corpus_bleu(hyps, refs) == pytest.approx(math.prod(p) ** 0.25)
    assert seq2seq.corpus_bleu([[]], [[1, 2]]) == 0.0
    assert seq2seq.sentence_ids(np.array([2, 5, 6, 3, 7, 0])) == [5, 6]


def test_token_accuracy_masks_padding() -> None:
    c = seq2seq.TokenCounts()
    c.add(np.array([[5, 6, 0, 0]]), np.array([[5, 7, 3, 0]]))
    assert c.accuracy == pytest.approx(1 / 3) and c.accuracy_with_padding == pytest.approx(2 / 4)


# -- the framework builds (slow: both frameworks) --------------------------------------------------------

def _request(framework: str, optimizer: str, lr: float, defaults: str = "shared") -> dict:
    wl = {"name": "dlbench", "batch_size": 32, "epochs": 2, "steps_per_epoch": None, "learning_rate": lr,
          "optimizer": optimizer, "momentum": 0.0, "infer_batch_size": 64, "warmup_steps": 1, "device": "cpu",
          "threads": 1, "defaults": defaults, "eval_each_epoch": True, "s2s_pairs": 160, "s2s_source": "spanish",
          "s2s_vocab": 0, "s2s_max_len": 0, "s2s_embed": 32, "s2s_units": 48}
    return {"trial_id": "t", "framework": framework, "seed": 17, "device": "cpu", "threads": 1, "workload": wl,
            "dataset": {"name": "spa_eng", "source": "synthetic", "train_size": 128, "test_size": 32}}


@pytest.mark.slow
def test_builds_same_model_same_counts_same_outputs() -> None:
    import torch

    from kit.workloads import seq2seq_keras, seq2seq_torch, train_keras, train_torch

    net = seq2seq.S2SNet(40, 30, 16, 24)
    rng = np.random.default_rng(0)
    src, dec = rng.integers(4, 40, (5, 7)), rng.integers(4, 30, (5, 6))
    lens = np.array([7, 5, 3, 1, 6])
    for i, n in enumerate(lens):
        src[i, n:] = 0  # padding: masked in Keras, packed in PyTorch
        dec[i, max(n - 1, 1):] = 0
    dec[:, 0] = seq2seq.START
    pt = seq2seq_torch.build(net, shared=True, seed=3).eval()
    kr, _, _ = seq2seq_keras.build(net, 7, 7, shared=True, seed=3)
    assert train_torch.param_count(pt) == train_keras.trainable_count(kr) == seq2seq.param_count(net) == 9742
    with torch.no_grad():
        a = pt(torch.from_numpy(src), torch.from_numpy(lens), torch.from_numpy(dec)).numpy()
    b = np.asarray(kr([src.astype(np.int32), dec.astype(np.int32)], training=False))
    mask = dec != 0
    np.testing.assert_allclose(a[mask], b[mask], rtol=1e-4, atol=1e-6)
    assert np.abs(a).max() > 1e-3
    # PyTorch's own default carries a second, trainable bias per gate in each LSTM (as the other LSTMs' builds)
    assert train_torch.param_count(seq2seq_torch.build(net, shared=False, seed=3)) == seq2seq.param_count(net) + 2 * 4 * 24


def _harness(tmp_path: Path, framework: str, req: dict, data: Path) -> dict:
    """One trial in its own process through the study's workload module (torch and TF never share a process)."""
    out = tmp_path / framework
    out.mkdir()
    module = "workload_torch" if framework == "pytorch" else "workload_keras"
    (out / "request.json").write_text(json.dumps({**req, "study": {"workload": "dlbench", "module": module}}))
    proc = subprocess.run([sys.executable, "-m", "kit.harness", "--out", str(out), "--data", str(data),
                           "--study", str(ROOT / "experiments" / "elshawi_dlbench")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    result["markers"] = [json.loads(x) for x in (out / "markers.jsonl").read_text().splitlines()]
    return result


@pytest.mark.slow
def test_one_trial_per_framework_same_sgd_trajectory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    synthetic.write_spa_eng(data, 128, 32)
    out = {}
    for fw in ("pytorch", "tensorflow"):
        r = _harness(tmp_path, fw, _request(fw, "sgd", 0.5), data)
        res = out[fw] = r["results"]
        assert res["epochs"] == 2 and len(res["epoch_test_accuracy"]) == 2 and res["throughput_unit"] == "tokens"
        assert res["epoch_test_accuracy"][-1] == res["test_accuracy"] and 0 <= res["test_bleu4"] <= 1
        assert res["train_images"] > 2 * 128 * 3 and res["test_images"] > 32 * 3  # target tokens, not pairs
        assert res["train_time_s"] == pytest.approx(res["train_phase_s"] - res["eval_between_epochs_s"])
        ends = [m["phase"] for m in r["markers"] if m["event"] == "phase_end"]
        assert ends == ["warmup", "train", "infer"]
    pt, tf = out["pytorch"], out["tensorflow"]
    assert pt["param_count"] == tf["param_count"] and pt["train_images"] == tf["train_images"]
    np.testing.assert_allclose(pt["epoch_train_loss"], tf["epoch_train_loss"], rtol=1e-4)  # same batches, same model
    assert abs(pt["test_accuracy"] - tf["test_accuracy"]) <= 0.01
