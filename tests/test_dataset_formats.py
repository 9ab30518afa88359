"""The datasets beyond MNIST: pinned registry entries, the readers of each published
format on files written in exactly that format, refusal of tampered files, and the
synthetic stand-ins (generated once, verified on reuse, refused when damaged)."""

from __future__ import annotations

import io
import pickle
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio

from kit import synthetic
from kit.dataset_registry import MORE_DATASETS
from kit.datasets import DATASETS, DatasetFile, DatasetInfo, resolve, sha256_file
from kit.errors import ChecksumError, DatasetError
from kit.workloads import formats
from kit.workloads.common import WorkloadError
from kit.workloads.mat5 import read_mat5


def test_registry_pins_every_file_with_sha256_size_and_url() -> None:
    assert {d.name for d in MORE_DATASETS} == {"cifar10", "cifar100", "svhn", "imdb", "ptb", "voc2012"}
    for info in MORE_DATASETS:
        assert DATASETS[info.name] is info
        for f in info.files:
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256), f.name
            assert f.size and f.size > 100_000 and f.urls and all(u.startswith("http") for u in f.urls)
        for source, names in info.sources.items():
            assert all(info.file(n) for n in names), source
            assert source in info.full_sizes
        assert "synthetic" in info.sources and info.synthetic
    # spot checks against the published values (TFDS url_checksums, HF dataset_infos)
    assert DATASETS["cifar10"].file("cifar-10-python.tar.gz").sha256.startswith("6d958be074577803")
    assert DATASETS["imdb"].file("aclImdb_v1.tar.gz").size == 84125825


def _pin(directory: Path, name: str, files: list[str], source: str = "real") -> dict[str, DatasetInfo]:
    """A registry with this directory's files pinned (as the real registry pins the publisher's)."""
    pinned = tuple(DatasetFile(f, sha256_file(directory / f), (), (directory / f).stat().st_size) for f in files)
    return {name: DatasetInfo(name, name, "test", pinned, sources={source: tuple(files)}, full_sizes={source: (1, 1)})}


WRITERS = {
    "cifar10": (synthetic.write_cifar10, 50, 20),
    "cifar100": (synthetic.write_cifar100, 50, 20),
    "svhn": (synthetic.write_svhn, 50, 20),
    "imdb": (synthetic.write_imdb, 40, 20),
    "ptb": (synthetic.write_ptb, 2000, 500),
}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_tampered_file_of_each_format_is_refused(tmp_path: Path, name: str) -> None:
    writer, n_tr, n_te = WRITERS[name]
    files = writer(tmp_path, n_tr, n_te)
    registry = _pin(tmp_path, name, files)
    ok = resolve(name, "real", data_dir=tmp_path, download=False, registry=registry)
    assert ok.origin == "--data-dir" and set(ok.files) == set(files)
    victim = tmp_path / files[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit
    victim.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as exc:
        resolve(name, "real", data_dir=tmp_path, download=False, registry=registry)
    assert "SHA-256 mismatch" in exc.value.one_line() and str(victim) in exc.value.one_line()


def test_kit_run_refuses_a_tampered_cifar_archive_before_writing(tmp_path: Path) -> None:
    """The real registry: a cifar-10-python.tar.gz whose digest differs from the published one."""
    data = tmp_path / "data"
    data.mkdir()
    synthetic.write_cifar10(data, 20, 10)  # right name and format, wrong bytes
    spec = tmp_path / "one.toml"
    text = (Path(__file__).resolve().parents[1] / "experiments" / "elshawi_dlbench" / "experiment.toml").read_text()
    text = re.sub(r"\n\[cases\.(mnist|cifar100|svhn|imdb|ptb)\]\n(?:[^\[\n].*\n)+", "\n", text)
    spec.write_text(text.split("[profiles.quick]")[0])
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "kit", "run", str(spec), "--runs-dir", str(runs), "--data-dir",
                           str(data), "--no-download"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "SHA-256 mismatch" in lines[0] and "cifar-10-python.tar.gz" in lines[0], proc.stderr
    assert "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce" in lines[0]
    assert not runs.exists()


def test_missing_dataset_offline_names_files_and_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as exc:
        resolve("svhn", "cropped", data_dir=tmp_path, download=False)
    msg = exc.value.one_line()
    assert "train_32x32.mat" in msg and "--data-dir" in msg


def test_synthetic_source_is_generated_once_verified_and_refused_when_damaged(tmp_path: Path) -> None:
    first = resolve("ptb", "synthetic", download=False)
    assert first.origin == synthetic.ORIGIN and "NOT the real dataset" in first.origin
    assert set(first.files) == {"ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"}
    mtime = (first.directory / "ptb.train.txt").stat().st_mtime_ns
    again = resolve("ptb", "synthetic", download=False)
    assert again.files == first.files and (again.directory / "ptb.train.txt").stat().st_mtime_ns == mtime
    (first.directory / "ptb.test.txt").write_text("tampered\n")
    with pytest.raises(ChecksumError, match="synthetic stand-in"):
        resolve("ptb", "synthetic", download=False)


# -- the readers ------------------------------------------------------------------------------------

def test_mat5_reader_matches_scipy(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"X": rng.integers(0, 255, (32, 32, 3, 7), dtype=np.uint8), "y": np.arange(1, 8, dtype=np.uint8)[:, None],
              "d": rng.standard_normal((3, 5)), "i": np.array([[-3, 4]], dtype=np.int32), "s": "a string"}
    for compress in (True, False):
        p = tmp_path / f"m{compress}.mat"
        sio.savemat(p, arrays, do_compression=compress)
        got = read_mat5(p)
        ref = sio.loadmat(p)
        assert set(got) == {"X", "y", "d", "i"}  # the char array is skipped
        for k in got:
            assert got[k].dtype == ref[k].dtype and np.array_equal(got[k], ref[k]), k
    assert np.array_equal(read_mat5(tmp_path / "mTrue.mat", ("X",))["X"], arrays["X"])
    with pytest.raises(WorkloadError, match="variable"):
        read_mat5(tmp_path / "mTrue.mat", ("nope",))


def test_mat5_reader_refuses_truncated_and_v73(tmp_path: Path) -> None:
    p = tmp_path / "t.mat"
    sio.savemat(p, {"X": np.zeros((4, 4), np.uint8)}, do_compression=False)
    p.write_bytes(p.read_bytes()[:-20])
    with pytest.raises(WorkloadError, match="past the end"):
        read_mat5(p)
    h = tmp_path / "h.mat"
    h.write_bytes(b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(512, b" ") + b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(WorkloadError, match=r"v7\.3"):
        read_mat5(h)


def test_svhn_layout_and_label_ten_is_digit_zero(tmp_path: Path) -> None:
    synthetic.write_svhn(tmp_path, 30, 10)
    raw = sio.loadmat(tmp_path / "train_32x32.mat")
    x_tr, y_tr, x_te, y_te = formats.load_svhn(tmp_path, "cropped", 25, None)
    assert x_tr.shape == (25, 32, 32, 3) and x_te.shape == (10, 32, 32, 3) and x_tr.dtype == np.float32
    assert np.array_equal(y_tr, raw["y"].reshape(-1)[:25] % 10) and 0 in set(y_tr) | set(y_te)
    assert np.allclose(x_tr[3], raw["X"][..., 3] / 255.0)  # image i is X[:, :, :, i]


def test_cifar_reader_channel_order_and_labels(tmp_path: Path) -> None:
    synthetic.write_cifar10(tmp_path, 50, 20)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz") as tar:
        names = set(tar.getnames())
        raw = pickle.load(tar.extractfile("cifar-10-batches-py/data_batch_1"), encoding="bytes")  # type: ignore[arg-type]
    assert {f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)} | {"cifar-10-batches-py/test_batch"} <= names
    x_tr, y_tr, x_te, _y_te = formats.load_cifar(tmp_path, "cifar10", None, None)
    assert x_tr.shape == (50, 32, 32, 3) and x_te.shape == (20, 32, 32, 3)
    row = raw[b"data"][0]  # 1024 red, 1024 green, 1024 blue values, row-major
    assert x_tr[0, 0, 1, 0] * 255 == pytest.approx(row[1]) and x_tr[0, 0, 0, 2] * 255 == pytest.approx(row[2048])
    assert y_tr[: len(raw[b"labels"])].tolist() == raw[b"labels"]
    synthetic.write_cifar100(tmp_path, 30, 10)
    x, y, _, _ = formats.load_cifar(tmp_path, "cifar100", 20, 5)
    assert x.shape == (20, 32, 32, 3) and y.max() < 100


def test_cifar_reader_refuses_a_pickle_that_runs_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (print, ("owned",))

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for n in (*[f"data_batch_{i}" for i in range(1, 6)], "test_batch"):
            body = pickle.dumps({b"data": Evil(), b"labels": []})
            info = tarfile.TarInfo(f"cifar-10-batches-py/{n}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(raw.getvalue())
    with pytest.raises(WorkloadError, match="not allowed"):
        formats.load_cifar(tmp_path, "cifar10", None, None)


def test_imdb_reader_tokens_vocabulary_padding(tmp_path: Path) -> None:
    synthetic.write_imdb(tmp_path, 40, 20)
    data = formats.read_imdb(tmp_path)
    assert len(data["train"][0]) == 40 and set(data["train"][1]) == {0, 1}
    assert formats.imdb_tokens("A <br />B's  great!") == ["a", "b's", "great"]
    x_tr, l_tr, y_tr, _x_te, _l_te, _y_te = formats.load_imdb(tmp_path, 10, 6, vocab_size=50, seq_len=30)
    assert x_tr.shape == (10, 30) and len(set(y_tr)) == 2  # a subset still holds both classes
    assert x_tr.max() < 50 and (l_tr >= 1).all() and (l_tr <= 30).all()
    for row, n in zip(x_tr, l_tr, strict=True):  # padding only after the true length
        assert (row[n:] == formats.PAD).all() and (row[:n] != formats.PAD).all()


def test_ptb_reader_eos_vocabulary_and_next_word_windows(tmp_path: Path) -> None:
    (tmp_path / "ptb.train.txt").write_text(" the cat sat \n the dog <unk> N \n")
    (tmp_path / "ptb.valid.txt").write_text(" the \n")
    (tmp_path / "ptb.test.txt").write_text(" the bird sat \n")
    train, _test = formats.read_ptb(tmp_path)
    assert train == ["the", "cat", "sat", "<eos>", "the", "dog", "<unk>", "N", "<eos>"]
    x_tr, y_tr, x_te, _y_te, vocab = formats.load_ptb(tmp_path, None, None, seq_len=3, stride=2)
    assert vocab == 7 and x_tr.shape == (3, 3) and np.array_equal(x_tr[:, 1:], y_tr[:, :-1])
    assert x_te.shape == (1, 3)  # "bird" is not in the training text: it became <unk>
    ids = formats.build_vocab([train], 7, 0)
    assert x_te[0, 1] == ids["<unk>"]
