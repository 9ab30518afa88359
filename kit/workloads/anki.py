"""Reader of the Tatoeba/Anki sentence pairs (``spa-eng.zip``), straight from the zip (stdlib and numpy only).

The published file (manythings.org/anki, copied by TensorFlow at
``download.tensorflow.org/data/spa-eng.zip``) is a zip holding ``spa-eng/spa.txt``
(manythings' own newer zips hold ``spa.txt`` and ``_about.txt`` at the top): one
pair a line, English TAB Spanish, in older snapshots (TensorFlow's copy) two
fields, in newer ones a third, the Tatoeba attribution; both are accepted, the
third field is ignored. The zip is hostile input until read: the reader never
extracts, refuses links, members other than the expected ones, names that climb
out (``..``, absolute), encryption, compression other than stored/deflate, a
declared or actual uncompressed size over the cap, a compression ratio beyond any
text's, non-UTF-8 bytes, lines without 2 or 3 tab-separated fields and over-long
lines; the actual bytes are counted while reading, never trusted from the header.

Tokenisation is the DLBench authors' (their ``preprocess_sentence``, the
TensorFlow NMT tutorial's): lower case, accents removed (NFD, combining marks
dropped), a space around ``? . ! , ¿``, every other character outside a-z and
those marks a separator, then ``<start>`` and ``<end>``.
"""

from __future__ import annotations

import math
import os
import re
import stat
import unicodedata
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kit.workloads.common import WorkloadError

ARCHIVE = "spa-eng.zip"
# TensorFlow's copy (spa-eng/...) and manythings' own layout (top level); nothing else may be in the zip
TEXT_MEMBERS = ("spa-eng/spa.txt", "spa.txt")
OTHER_MEMBERS = ("spa-eng/", "spa-eng/_about.txt", "_about.txt")
MAX_TEXT_BYTES = 256 << 20  # spa.txt: ~8 MB (2 fields) to ~40 MB (with attribution); a cap far above both
MAX_ABOUT_BYTES = 1 << 20
MAX_RATIO = 50.0  # text deflates ~3-5x; a bomb compresses thousands of times
MAX_LINE_CHARS = 4096  # the longest real pair is some hundreds of characters
MAX_LINES = 2_000_000
PAD, UNK, START, END = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<start>", "<end>")


@dataclass(frozen=True)
class PairArrays:
    """One split direction's encoded pairs: source ids, target ids (with <start>/<end>), padded with 0."""

    src_train: np.ndarray  # (n, src_len) int64
    tgt_train: np.ndarray  # (n, tgt_len) int64: <start> w ... <end> 0 ...
    src_test: np.ndarray
    tgt_test: np.ndarray
    src_len_train: np.ndarray  # true source lengths (the encoder's last state is the last true word's)
    src_len_test: np.ndarray
    src_vocab: tuple[str, ...]  # id -> word (0..3 the specials)
    tgt_vocab: tuple[str, ...]


def _refuse(path: Path, what: str) -> WorkloadError:
    return WorkloadError(f"{path}: {what}; not a Tatoeba/Anki spa-eng.zip as published (the kit refuses it)")


def read_text(path: Path) -> str:
    """spa.txt from the zip at ``path``, decoded, after every check in the module docstring."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read ({exc})") from exc
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "a link or not a regular file")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if len(set(names)) != len(names):
                raise _refuse(path, "duplicate member names")
            text_info = None
            for info in infos:
                name = info.filename
                if name.startswith(("/", "\\")) or "\\" in name or ".." in name.split("/") or ":" in name:
                    raise _refuse(path, f"member {name!r} climbs out of the archive")
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise _refuse(path, f"member {name!r} is a symbolic link")
                if name not in TEXT_MEMBERS and name not in OTHER_MEMBERS:
                    raise _refuse(path, f"unexpected member {name!r} (expected {TEXT_MEMBERS[0]})")
                if info.flag_bits & 0x1:
                    raise _refuse(path, f"member {name!r} is encrypted")
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                    raise _refuse(path, f"member {name!r} uses compression method {info.compress_type}")
                cap = MAX_TEXT_BYTES if name in TEXT_MEMBERS else MAX_ABOUT_BYTES
                if info.file_size > cap:
                    raise _refuse(path, f"member {name!r} declares {info.file_size} bytes (cap {cap})")
                if info.file_size > 1 << 16 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                    raise _refuse(path, f"member {name!r} expands {info.file_size / max(info.compress_size, 1):.0f}x "
                                        f"(a zip bomb; text expands < {MAX_RATIO:.0f}x)")
                if name in TEXT_MEMBERS:
                    if text_info is not None:
                        raise _refuse(path, "two spa.txt members")
                    text_info = info
            if text_info is None:
                raise _refuse(path, f"no {TEXT_MEMBERS[0]} member")
            chunks, total = [], 0
            with zf.open(text_info) as fh:  # the actual bytes are counted: the header may lie
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
                    if total > MAX_TEXT_BYTES or total > max(text_info.file_size, 0) + (1 << 20):
                        raise _refuse(path, f"{text_info.filename} inflates beyond its declared size or the cap")
                    chunks.append(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise WorkloadError(f"{path}: cannot read the zip ({exc})") from exc
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(path, f"spa.txt is not UTF-8 (byte {exc.start})") from exc


def parse_pairs(text: str, where: str, limit: int | None = None) -> list[tuple[str, str]]:
    """(English, Spanish) of the first ``limit`` lines (None: all), in file order; a bad line is refused."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_LINES:
        raise WorkloadError(f"{where}: {len(lines)} lines (cap {MAX_LINES})")
    pairs = []
    for i, line in enumerate(lines if limit is None else lines[:limit]):
        line = line.removesuffix("\r")
        if len(line) > MAX_LINE_CHARS:
            raise WorkloadError(f"{where}: line {i + 1} has {len(line)} characters (cap {MAX_LINE_CHARS})")
        fields = line.split("\t")
        if len(fields) not in (2, 3) or not fields[0].strip() or not fields[1].strip():
            raise WorkloadError(f"{where}: line {i + 1} is not 'English TAB Spanish [TAB attribution]' "
                                f"({len(fields)} fields)")
        pairs.append((fields[0], fields[1]))
    if not pairs:
        raise WorkloadError(f"{where}: no sentence pairs")
    return pairs


_SPACED = re.compile(r"([?.!,¿])")
_OTHER = re.compile(r"[^a-z?.!,¿]+")


def tokens(sentence: str) -> list[str]:
    """The authors' preprocess_sentence as tokens: <start> words and marks <end> (see the module docstring)."""
    s = "".join(c for c in unicodedata.normalize("NFD", sentence.lower().strip())
                if unicodedata.category(c) != "Mn")
    s = _OTHER.sub(" ", _SPACED.sub(r" \1 ", s))
    return ["<start>", *s.split(), "<end>"]


def authors_split(n: int, test_fraction: float = 0.2, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) indices as the authors' ``train_test_split(test_size=0.2, random_state=42)`` draws them.

    scikit-learn's ShuffleSplit: ``RandomState(seed).permutation(n)``, the first ceil(0.2 n) to the test
    part, the next floor(0.8 n) to training (numpy's legacy generator: the same numbers on every version).
    """
    n_test = math.ceil(test_fraction * n)
    perm = np.random.RandomState(seed).permutation(n)
    return perm[n_test : n_test + math.floor((1 - test_fraction) * n)], perm[:n_test]


def _vocab(token_lists: list[list[str]], cap: int) -> dict[str, int]:
    """Specials 0-3, then the training words by frequency (ties alphabetical); ``cap`` (0: none) counts all."""
    counts = Counter(t for toks in token_lists for t in toks if t not in SPECIALS)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if cap:
        ranked = ranked[: max(cap - len(SPECIALS), 0)]
    return {**{w: i for i, w in enumerate(SPECIALS)}, **{w: i + len(SPECIALS) for i, (w, _) in enumerate(ranked)}}


def _encode(token_lists: list[list[str]], vocab: dict[str, int], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Ids padded at the end with 0; a sentence over ``max_len`` tokens keeps its first words and <end>."""
    out = np.zeros((len(token_lists), max_len), dtype=np.int64)
    lengths = np.zeros(len(token_lists), dtype=np.int64)
    for i, toks in enumerate(token_lists):
        if len(toks) > max_len:
            toks = [*toks[: max_len - 1], "<end>"]
        ids = [vocab.get(t, UNK) for t in toks]
        out[i, : len(ids)] = ids
        lengths[i] = len(ids)
    return out, lengths


def load_pairs(data_dir: Path, pairs: int, train_size: int | None, test_size: int | None, source_lang: str,
               vocab_cap: int, max_len: int) -> PairArrays:
    """The first ``pairs`` lines (0: all), split as the authors did, subsets from the front of each part.

    ``source_lang`` "spanish": Spanish in, English out (the authors' code); "english": the other way.
    Vocabularies come from the training part (a test word outside it is ``<unk>``); ``vocab_cap`` and
    ``max_len`` (tokens with <start>/<end>) 0 mean none: every training word, the longest sentence.
    """
    if source_lang not in ("spanish", "english"):
        raise WorkloadError(f"s2s_source {source_lang!r}: use 'spanish' or 'english'")
    if vocab_cap and vocab_cap <= len(SPECIALS):
        raise WorkloadError(f"s2s_vocab {vocab_cap} leaves no word beside the {len(SPECIALS)} special tokens")
    if max_len and max_len < 3:
        raise WorkloadError(f"s2s_max_len {max_len} leaves no word between <start> and <end>")
    path = data_dir / ARCHIVE
    rows = parse_pairs(read_text(path), str(path), pairs or None)
    if pairs and len(rows) < pairs:
        raise WorkloadError(f"{path}: {pairs} sentence pairs asked, {len(rows)} in the file")
    tr, te = authors_split(len(rows))
    for label, idx, size in (("training", tr, train_size), ("test", te, test_size)):
        if size is not None and size > len(idx):
            raise WorkloadError(f"spa_eng {label} part: {size} pairs asked, {len(idx)} available")
    tr = tr if train_size is None else tr[:train_size]
    te = te if test_size is None else te[:test_size]
    s, t = (1, 0) if source_lang == "spanish" else (0, 1)
    tok = [(tokens(r[s]), tokens(r[t])) for r in rows]
    src_tr, tgt_tr = [tok[i][0] for i in tr], [tok[i][1] for i in tr]
    src_te, tgt_te = [tok[i][0] for i in te], [tok[i][1] for i in te]
    vs, vt = _vocab(src_tr, vocab_cap), _vocab(tgt_tr, vocab_cap)
    ls = max_len or max(len(x) for x in src_tr + src_te)
    lt = max_len or max(len(x) for x in tgt_tr + tgt_te)
    a, la = _encode(src_tr, vs, ls)
    b, _ = _encode(tgt_tr, vt, lt)
    c, lc = _encode(src_te, vs, ls)
    d, _ = _encode(tgt_te, vt, lt)
    return PairArrays(a, b, c, d, la, lc, tuple(vs), tuple(vt))
