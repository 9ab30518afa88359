"""Readers for the published on-disk formats of CIFAR-10/100, SVHN, IMDB and Penn Treebank.

Runs inside framework images: standard library and numpy only (SVHN's .mat
files go through :mod:`kit.workloads.mat5`). Each reader takes the directory
the registry resolved and verified, reads the files exactly as the publisher
ships them (no unpacking step, no converted copy) and returns numpy arrays.
The same code reads the real files and the synthetic stand-ins that
:mod:`kit.synthetic` writes in the same formats.

Subsets (``train_size``/``test_size``) take the first examples in the
files' order, except IMDB, whose archive is ordered by class: there a fixed
permutation (seed 0) is taken first so a subset holds both classes.
"""

from __future__ import annotations

import io
import pickle
import re
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from kit.workloads.common import WorkloadError
from kit.workloads.mat5 import read_mat5

CIFAR_MEMBERS = {
    "cifar10": ("cifar-10-python.tar.gz", "cifar-10-batches-py",
                tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), b"labels"),
    "cifar100": ("cifar-100-python.tar.gz", "cifar-100-python", ("train",), ("test",), b"fine_labels"),
}
SVHN_FILES = {"cropped": ("train_32x32.mat", "test_32x32.mat"), "synthetic": ("train_32x32.mat", "test_32x32.mat"),
              "cropped_extra": ("extra_32x32.mat", "test_32x32.mat")}
IMDB_ARCHIVE = "aclImdb_v1.tar.gz"
_IMDB_MEMBER = re.compile(r"^aclImdb/(train|test)/(pos|neg)/\d+_\d+\.txt$")
PTB_FILES = ("ptb.train.txt", "ptb.test.txt")
PAD, OOV = 0, 1


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles CIFAR's batches (dicts of bytes, lists and numpy arrays) and refuses anything else.

    A pickle can run arbitrary code; the files are checksum-verified before
    they get here, and this refuses every global but the few numpy needs.
    """

    def find_class(self, module: str, name: str) -> Any:
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name in ("_reconstruct", "scalar"):
            core = getattr(np, "_core", None) or np.core  # numpy 2 / numpy 1
            return getattr(core.multiarray, name)
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if module == "_codecs" and name == "encode":  # how protocol 2 spells bytes; a pure function
            import codecs

            return codecs.encode
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")


def _unpickle(data: bytes, where: str) -> dict[bytes, Any]:
    try:
        obj = _NumpyOnlyUnpickler(io.BytesIO(data), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise WorkloadError(f"{where}: not a CIFAR python batch ({exc})") from exc
    if not isinstance(obj, dict) or b"data" not in obj:
        raise WorkloadError(f"{where}: not a CIFAR python batch (no b'data' entry)")
    return obj


def _take(x: np.ndarray, y: np.ndarray, size: int | None, what: str) -> tuple[np.ndarray, np.ndarray]:
    if size is None:
        return x, y
    if size > len(x):
        raise WorkloadError(f"{what}: {size} examples asked, {len(x)} available")
    return x[:size], y[:size]


def _images(x: np.ndarray) -> np.ndarray:
    """uint8 NHWC -> float32 in [0, 1]."""
    return x.astype(np.float32) * np.float32(1.0 / 255.0)


def load_cifar(data_dir: Path, name: str, train_size: int | None, test_size: int | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CIFAR-10 or CIFAR-100 (fine labels) from the python tarball: NHWC float32 images, int64 labels."""
    archive, folder, train_names, test_names, label_key = CIFAR_MEMBERS[name]
    path = data_dir / archive
    batches: dict[str, dict[bytes, Any]] = {}
    wanted = {f"{folder}/{n}" for n in (*train_names, *test_names)}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        batches[member.name] = _unpickle(fh.read(), f"{path}:{member.name}")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise WorkloadError(f"{path}: cannot read the archive ({exc})") from exc
    missing = sorted(wanted - set(batches))
    if missing:
        raise WorkloadError(f"{path}: member(s) {', '.join(missing)} missing")

    def join(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for n in names:
            b = batches[f"{folder}/{n}"]
            data = np.asarray(b[b"data"], dtype=np.uint8)
            labels = np.asarray(b[label_key], dtype=np.int64)
            if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
                raise WorkloadError(f"{path}:{folder}/{n}: data {data.shape} and labels {labels.shape} disagree")
            xs.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))  # stored as CHW planes
            ys.append(labels)
        return np.concatenate(xs), np.concatenate(ys)

    x_tr, y_tr = _take(*join(train_names), train_size, f"{name} training set")
    x_te, y_te = _take(*join(test_names), test_size, f"{name} test set")
    return _images(x_tr), y_tr, _images(x_te), y_te


def load_svhn(data_dir: Path, source: str, train_size: int | None, test_size: int | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """SVHN cropped digits: X (32, 32, 3, N) uint8 -> NHWC float32; label 10 means digit 0."""
    if source not in SVHN_FILES:
        raise WorkloadError(f"unknown SVHN source {source!r} (expected one of {', '.join(SVHN_FILES)})")

    def one(name: str, size: int | None) -> tuple[np.ndarray, np.ndarray]:
        m = read_mat5(data_dir / name, ("X", "y"))
        x, y = m["X"], m["y"].reshape(-1)
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
            raise WorkloadError(f"{data_dir / name}: X {x.shape} and y {m['y'].shape} are not SVHN's layout")
        if len(y) and (y.min() < 1 or y.max() > 10):
            raise WorkloadError(f"{data_dir / name}: labels outside 1..10")
        n = len(y) if size is None else size
        if n > len(y):
            raise WorkloadError(f"{data_dir / name}: {n} examples asked, {len(y)} available")
        return np.ascontiguousarray(x[..., :n].transpose(3, 0, 1, 2)), (y[:n].astype(np.int64) % 10)

    train_name, test_name = SVHN_FILES[source]
    x_tr, y_tr = one(train_name, train_size)
    x_te, y_te = one(test_name, test_size)
    return _images(x_tr), y_tr, _images(x_te), y_te


_TOKEN = re.compile(r"[a-z0-9']+")


def imdb_tokens(text: str) -> list[str]:
    """Lower-case word tokens; the reviews' ``<br />`` line breaks are separators."""
    return _TOKEN.findall(text.lower().replace("<br />", " "))


def read_imdb(data_dir: Path) -> dict[str, tuple[list[str], np.ndarray]]:
    """{"train"|"test": (texts, labels)} from the aclImdb tarball (1 = positive), in member-name order."""
    path = data_dir / IMDB_ARCHIVE
    found: dict[str, list[tuple[str, int, str]]] = {"train": [], "test": []}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                m = _IMDB_MEMBER.match(member.name)
                if m is None or not member.isfile():
                    continue
                fh = tar.extractfile(member)
                if fh is not None:
                    text = fh.read().decode("utf-8", errors="replace")
                    found[m.group(1)].append((member.name, int(m.group(2) == "pos"), text))
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise WorkloadError(f"{path}: cannot read the archive ({exc})") from exc
    out = {}
    for split, rows in found.items():
        if not rows or len({r[1] for r in rows}) < 2:
            raise WorkloadError(f"{path}: no aclImdb/{split}/pos and neg reviews found")
        rows.sort()
        out[split] = ([r[2] for r in rows], np.array([r[1] for r in rows], dtype=np.int64))
    return out


def build_vocab(token_lists: list[list[str]], size: int, reserved: int) -> dict[str, int]:
    """The ``size - reserved`` most frequent tokens (ties by the token itself) -> ids from ``reserved``."""
    counts = Counter(t for toks in token_lists for t in toks)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max(size - reserved, 0)]
    return {w: i + reserved for i, (w, _) in enumerate(ranked)}


def encode_padded(token_lists: list[list[str]], vocab: dict[str, int], seq_len: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Ids (0 = padding, 1 = out of vocabulary), truncated to ``seq_len``, padded at the end; true lengths."""
    x = np.zeros((len(token_lists), seq_len), dtype=np.int64)
    lengths = np.zeros(len(token_lists), dtype=np.int64)
    for i, toks in enumerate(token_lists):
        ids = [vocab.get(t, OOV) for t in toks[:seq_len]] or [OOV]  # an empty review is one unknown word
        x[i, : len(ids)] = ids
        lengths[i] = len(ids)
    return x, lengths


def load_imdb(data_dir: Path, train_size: int | None, test_size: int | None, vocab_size: int, seq_len: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """IMDB as (x_tr, len_tr, y_tr, x_te, len_te, y_te); the vocabulary comes from the training reviews used."""
    data = read_imdb(data_dir)
    parts = []
    for split, size in (("train", train_size), ("test", test_size)):
        texts, labels = data[split]
        order = np.random.default_rng(0).permutation(len(texts))
        if size is not None:
            if size > len(texts):
                raise WorkloadError(f"imdb {split}: {size} reviews asked, {len(texts)} available")
            order = order[:size]
        parts.append(([imdb_tokens(texts[i]) for i in order], labels[order]))
    vocab = build_vocab(parts[0][0], vocab_size, reserved=2)
    x_tr, l_tr = encode_padded(parts[0][0], vocab, seq_len)
    x_te, l_te = encode_padded(parts[1][0], vocab, seq_len)
    return x_tr, l_tr, parts[0][1], x_te, l_te, parts[1][1]


def read_ptb(data_dir: Path) -> tuple[list[str], list[str]]:
    """Training and test tokens: each line's words, then ``<eos>`` (as Mikolov's and TF's readers do)."""
    out = []
    for name in PTB_FILES:
        path = data_dir / name
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise WorkloadError(f"{path}: cannot read ({exc})") from exc
        toks = [t for line in text.splitlines() for t in ([*line.split(), "<eos>"] if line.strip() else [])]
        if not toks:
            raise WorkloadError(f"{path}: no text")
        out.append(toks)
    return out[0], out[1]


def load_ptb(data_dir: Path, train_size: int | None, test_size: int | None, seq_len: int, stride: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """PTB next-word windows (x_tr, y_tr, x_te, y_te, vocabulary size); sizes count tokens.

    The vocabulary is every training token (10,000 in the real files, ``<unk>``
    included); a test token outside it becomes ``<unk>``.
    """
    train, test = read_ptb(data_dir)
    for label, toks, size in (("training", train, train_size), ("test", test, test_size)):
        if size is not None and size > len(toks):
            raise WorkloadError(f"ptb {label} part: {size} tokens asked, {len(toks)} available")
    train = train if train_size is None else train[:train_size]
    test = test if test_size is None else test[:test_size]
    vocab = build_vocab([train], len(set(train)), reserved=0)
    unk = vocab.get("<unk>")
    if unk is None and any(t not in vocab for t in test):
        raise WorkloadError(f"{data_dir}: test tokens outside the training vocabulary and no <unk> token")
    ids_tr = np.array([vocab[t] for t in train], dtype=np.int64)
    ids_te = np.array([vocab.get(t, unk if unk is not None else 0) for t in test], dtype=np.int64)
    x_tr, y_tr = windows(ids_tr, seq_len, stride)
    x_te, y_te = windows(ids_te, seq_len, seq_len)  # the test text once, without overlap
    return x_tr, y_tr, x_te, y_te, len(vocab)


def windows(ids: np.ndarray, seq_len: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ids[s:s+L] and next-word targets ids[s+1:s+L+1] for s = 0, stride, 2*stride, ..."""
    starts = np.arange(0, len(ids) - seq_len, stride)
    if len(starts) == 0:
        raise WorkloadError(f"{len(ids)} tokens are too few for one window of {seq_len}")
    idx = starts[:, None] + np.arange(seq_len)[None, :]
    return ids[idx], ids[idx + 1]
