"""May a run's analysis.json be reused, or must it be recomputed?

``kit compare``, ``kit history`` and ``kit pack`` read analysis.json instead
of recomputing it, which is only right when this kit made that file from the
run's inputs as they are now. Two ways it can be wrong:

- stale: made before a trial file was added, removed or edited, before the
  manifest, nodes/ or the study copy changed, or by another build of the kit;
- forged: written by whoever handed over the run directory (an edited ratio
  turns identical raw data into a "3x regression").

A digest stored inside analysis.json cannot tell a forged file from a real
one (its author recomputes it), so the kit *seals* each analysis it writes:
an HMAC-SHA256, under a per-user key kept outside every run directory
(:func:`kit.trust.seal_key`), over the digest of every input the analysis
depends on (:func:`inputs_digest`: trials, samples, attempts, manifest.json,
nodes/, the study copy, the kit build), the study code it ran (``Hooks.state``)
and the analysis's own content. A reader reuses analysis.json only when the
seal verifies under its own key (``kit.analysis.analyze.current_analysis``);
anything else (a file from another user or host, a forged or stale one, a
missing key) is recomputed.
``benchmarks/analysis_seal_bench.py`` measures what reuse saves over
recomputing every time.

The HMAC is :func:`kit.private_files.mac` in its own domain (``analysis-seal``), so nothing the kit MACs
elsewhere under the same key (the power and history caches) can pass for a seal. A key that others could
read is replaced before it is used (:mod:`kit.trust`): a seal made with a stolen key stops verifying.

The owner of a key can always re-seal their own files: the seal defends
readers against run directories made by others and against accidents, not a
user against themselves (README, *Security*).

Checking a seal used to re-hash all of a run's raw data on every read (`kit history` over 1,000 runs: 35 s).
A version-3 seal (issue 44) also records, per input file, its size, ``mtime_ns`` and sha256
(:class:`InputFile`, MAC'd with the rest), and the inputs digest is made of those per-file digests
(:class:`InputScan`), so a check re-hashes only the files whose size or mtime moved: an untouched run costs
a few ``lstat`` calls. This adds no trust a crafted run directory did not already have: whoever can edit a
run's files can also set their mtimes back (``os.utime``), exactly as they could always hand over a forged
run, and an edit by accident (the case the seal is for) moves the mtime. A file whose mtime is within
:data:`RACY_NS` of the moment it was hashed is recorded without an mtime (re-hashed on every check): an edit
within the same clock tick would otherwise keep it. ``verify_all=True`` (``kit history/compare
--verify-all``) re-hashes everything; ``kit verify`` and ``kit pack`` never take the shortcut (they
recompute or check the full digest: a bundle is the last word on a run). Older seals (version 2) carry no
table: they get the full check, with the digest they were made with.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.analysis_record import Analysis
from kit.build_id import kit_build  # (re-exported: kit.freshness.kit_build)
from kit.errors import StoreError
from kit.private_files import mac, mac_holds
from kit.records import JsonTable, JsonValue
from kit.safeio import parse_json, read_capped
from kit.store import ANALYSIS, ATTEMPTS, MANIFEST, MAX_ANALYSIS_BYTES, NODES, TRIALS, RunDir

if TYPE_CHECKING:
    from kit.trust import StudyTrust

DIGEST_KEY = "raw_digest"
SEAL_KEY = "seal"
SEAL_VERSION = 3  # 2: the MAC of kit.private_files (domain-separated); 3: the per-file table (issue 44)
OLD_SEAL_VERSIONS = (2,)  # still read: the full check, with their own digest (version-1 seals are recomputed)
FILES_KEY = "files"  # a version-3 seal's table: [[rel, size, mtime_ns or null, sha256], ...]
RACY_NS = 2_000_000_000  # a file changed this close to its hashing is re-hashed on every check (no mtime kept)
MAX_TABLE_FILES = 1_000_000  # a seal's table longer than this is not believed (full check)


def _hash_tree(h: Any, root: str, sub: str, recursive: bool = False, depth: int = 0) -> None:
    """Names, sizes and contents of the regular files under ``root/sub`` (links and special files count by name)."""
    d = os.path.join(root, sub)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            if os.path.lexists(d):
                h.update(f"{sub}:not-a-directory\n".encode())
            return
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        rel = f"{sub}/{e.name}"
        if recursive and e.is_dir(follow_symlinks=False) and depth < 16:
            _hash_tree(h, root, rel, True, depth + 1)
            continue
        if not e.is_file(follow_symlinks=False):
            h.update(f"{rel}:not-a-regular-file\n".encode())
            continue
        try:
            h.update(f"{rel}:{e.stat(follow_symlinks=False).st_size}\n".encode())
            fd = os.open(e.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
        except OSError:  # replaced by a link or made unreadable since the listing: never the stored digest
            h.update(f"{rel}:unreadable\n".encode())


def raw_digest(run_dir: Path) -> str:
    """sha256 over the names and contents of trials/*.json, samples/* and attempts/* (links are not followed).

    Per file ``sub/name:size`` and the content, in name order; a link or anything but a regular file
    counts as ``sub/name:not-a-regular-file``. Read through descriptors (O_NOFOLLOW): `kit history`
    checks a thousand runs per call.
    """
    h = hashlib.sha256()
    for sub in (TRIALS, "samples", ATTEMPTS):
        _hash_tree(h, os.fspath(run_dir), sub)
    return h.hexdigest()


def _inputs_digest_v2(run_dir: Path, raw: str | None = None) -> str:
    """The inputs digest of a version-2 seal (one stream over the raw files (:func:`raw_digest`, or ``raw``),
    manifest.json, nodes/*, the study copy and the kit build): what an older seal is checked against."""
    root = os.fspath(run_dir)
    h = hashlib.sha256((raw or raw_digest(run_dir)).encode())
    h.update(kit_build().encode())
    try:
        fd = os.open(os.path.join(root, MANIFEST), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise OSError("not a regular file")
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        h.update(b"manifest:unreadable")
    _hash_tree(h, root, NODES)
    _hash_tree(h, root, "study", recursive=True)
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class InputFile:
    """One input file as a version-3 seal records it: where (``trials/t1.json``), how big, when last written
    (None: too recently when hashed to be a safe shortcut) and the sha256 of its bytes (None: not a regular
    file, or unreadable: ``note`` says which; those are looked at again on every check)."""

    rel: str
    size: int
    mtime_ns: int | None
    sha256: str | None
    note: str = ""

    def line(self) -> str:
        """What the inputs digest takes from this file: its name, size and content digest (never its mtime)."""
        return f"{self.rel}:{self.note}\n" if self.sha256 is None else f"{self.rel}:{self.size}:{self.sha256}\n"

    def to_json(self) -> JsonValue:
        return [self.rel, self.size, self.mtime_ns, self.sha256]


@dataclass(frozen=True, slots=True)
class InputScan:
    """Every input an analysis depends on (trials/, samples/, attempts/, manifest.json, nodes/, study/ recursively),
    file by file, and the inputs digest made of them and of the kit build (:func:`kit_build`)."""

    files: tuple[InputFile, ...]
    digest: str
    hashed: int  # files whose bytes were read for this scan (the rest: size and mtime unchanged)

    def table(self) -> list[JsonValue]:
        """The seal's per-file table: regular files only (the rest are looked at on every check)."""
        return [f.to_json() for f in self.files if f.sha256 is not None]


def file_sha256(fd: int) -> str:
    """sha256 of the bytes behind ``fd`` (read in 1 MiB chunks). The one place a seal check reads raw data: the
    tests count its calls."""
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _scan_file(root: str, rel: str, st: os.stat_result, known: Mapping[str, InputFile], now_ns: int,
               counter: list[int]) -> InputFile:
    """``rel`` (lstat ``st``, a regular file) from ``known`` when its size and mtime are the recorded ones, else
    hashed (through O_NOFOLLOW, so a link swapped in since the listing is refused, not followed)."""
    old = known.get(rel)
    if old is not None and old.mtime_ns is not None and old.sha256 is not None and old.size == st.st_size \
            and old.mtime_ns == st.st_mtime_ns:
        return old
    try:
        fd = os.open(os.path.join(root, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return InputFile(rel, 0, None, None, "unreadable")
    try:
        fst = os.fstat(fd)
    except OSError:
        os.close(fd)
        return InputFile(rel, 0, None, None, "unreadable")
    if not stat.S_ISREG(fst.st_mode):
        os.close(fd)
        return InputFile(rel, 0, None, None, "not-a-regular-file")
    counter[0] += 1
    try:
        digest = file_sha256(fd)
    except OSError:
        return InputFile(rel, 0, None, None, "unreadable")
    mtime: int | None = fst.st_mtime_ns if now_ns - fst.st_mtime_ns > RACY_NS else None
    return InputFile(rel, fst.st_size, mtime, digest)


def _scan_tree(out: list[InputFile], root: str, sub: str, known: Mapping[str, InputFile], now_ns: int,
               counter: list[int], recursive: bool = False, depth: int = 0) -> None:
    d = os.path.join(root, sub)
    try:
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            out.append(InputFile(sub, 0, None, None, "not-a-directory"))
            return
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return
    except OSError:
        out.append(InputFile(sub, 0, None, None, "unreadable"))
        return
    for e in entries:
        rel = f"{sub}/{e.name}"
        if recursive and e.is_dir(follow_symlinks=False) and depth < 16:
            _scan_tree(out, root, rel, known, now_ns, counter, True, depth + 1)
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            out.append(InputFile(rel, 0, None, None, "unreadable"))
            continue
        if not stat.S_ISREG(st.st_mode):
            out.append(InputFile(rel, 0, None, None, "not-a-regular-file"))
            continue
        out.append(_scan_file(root, rel, st, known, now_ns, counter))


def scan_inputs(run_dir: Path, known: Mapping[str, InputFile] | None = None) -> InputScan:
    """Every input of the run, file by file, and their digest; a file in ``known`` (a seal's table) whose size
    and mtime are the recorded ones keeps its recorded digest without being read (None: hash everything)."""
    root, table = os.fspath(run_dir), known or {}
    now_ns, counter = time.time_ns(), [0]
    files: list[InputFile] = []
    for sub in (TRIALS, "samples", ATTEMPTS):
        _scan_tree(files, root, sub, table, now_ns, counter)
    try:
        st = os.lstat(os.path.join(root, MANIFEST))
        files.append(_scan_file(root, MANIFEST, st, table, now_ns, counter) if stat.S_ISREG(st.st_mode)
                     else InputFile(MANIFEST, 0, None, None, "not-a-regular-file"))
    except OSError:
        files.append(InputFile(MANIFEST, 0, None, None, "unreadable"))
    _scan_tree(files, root, NODES, table, now_ns, counter)
    _scan_tree(files, root, "study", table, now_ns, counter, recursive=True)
    h = hashlib.sha256(f"kit-inputs/3\n{kit_build()}\n".encode())
    for f in files:
        h.update(f.line().encode())
    return InputScan(tuple(files), h.hexdigest(), counter[0])


def inputs_digest(run_dir: Path, raw: str | None = None) -> str:
    """sha256 over every input an analysis depends on (:func:`scan_inputs`, every file hashed): what a seal
    signs. ``raw`` is accepted for older callers and not needed (the digest is made of per-file digests)."""
    del raw
    return scan_inputs(run_dir).digest


def _table_of(raw: object) -> dict[str, InputFile] | None:
    """A seal's per-file table, checked (None for anything malformed: the check then re-hashes every file)."""
    if not isinstance(raw, list) or len(raw) > MAX_TABLE_FILES:
        return None
    out: dict[str, InputFile] = {}
    for row in raw:
        if not (isinstance(row, list) and len(row) == 4):
            return None
        rel, size, mtime, sha = row
        if not (isinstance(rel, str) and type(size) is int and size >= 0 and isinstance(sha, str) and len(sha) == 64
                and (mtime is None or type(mtime) is int)):
            return None
        out[rel] = InputFile(rel, size, mtime, sha)
    return out


def _table_digest(table: object) -> str:
    return hashlib.sha256(json.dumps(table, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _content_digest(content: JsonTable, parsed: bool = False) -> str:
    """sha256 of analysis.json's content less its seal, canonical (sorted keys, no spaces): what the seal signs.

    The record's JSON (tuples, numpy scalars) is first made plain by a round trip through JSON; content
    ``parsed`` from the file is plain already (the round trip is the identity on it), so a reader skips it:
    it was a third of what checking one run's seal costs, which `kit history --publish` does for every run."""
    body = {k: v for k, v in content.items() if k != SEAL_KEY}
    plain = body if parsed else json.loads(json.dumps(body, default=str))
    canon = json.dumps(plain, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def _parts(version: int, inputs: str, hooks: str, digest: str, table: object = None,
           form: str = "canonical") -> tuple[str, ...]:
    if version in OLD_SEAL_VERSIONS:
        return (str(version), inputs, hooks, digest)
    return (str(version), inputs, hooks, digest, _table_digest(table), form)


def seal(content: JsonTable, inputs: str | InputScan, hooks: str, key: bytes | None = None) -> JsonTable | None:
    """The seal of an analysis this kit just computed (None when the user has no key: it will be recomputed).

    ``content`` is analysis.json's JSON as it is written (``Analysis.to_json()``): the seal signs what the
    file says (in canonical form), not the typed record, so a reader checks it on the file before typing it.
    ``inputs``: the :class:`InputScan` taken before the analysis read the run (its per-file table makes later
    checks incremental), or just its digest (no table: every check re-hashes everything).
    ``key``: seal under this key instead of the user's (what a holder of a stolen key could do; tests)."""
    key = key or _user_key()
    if key is None:
        return None
    return _seal_of(key, _content_digest(content), inputs, hooks, "canonical")


def _user_key() -> bytes | None:
    from kit.trust import seal_key

    return seal_key()


def _seal_of(key: bytes, digest: str, inputs: str | InputScan, hooks: str, form: str) -> JsonTable:
    ins, table = (inputs, list[JsonValue]()) if isinstance(inputs, str) else (inputs.digest, inputs.table())
    return {"version": SEAL_VERSION, "inputs": ins, "hooks": hooks, FILES_KEY: table, "form": form,
            "hmac": mac(key, "analysis-seal", *_parts(SEAL_VERSION, ins, hooks, digest, table, form))}


def _body_text(content: JsonTable) -> bytes:
    """analysis.json's bytes for ``content`` without a seal, as :func:`kit.store.atomic_write_json` writes them."""
    body = {k: v for k, v in content.items() if k != SEAL_KEY}
    return (json.dumps(body, indent=1, sort_keys=False, default=str) + "\n").encode()


def _seal_tail(s: JsonTable) -> bytes:
    """How a text-form seal ends the file: the last member, compact, so a reader can cut it off exactly."""
    return b',\n "seal": ' + json.dumps(s, separators=(",", ":")).encode() + b"\n}\n"


def sealed_text(content: JsonTable, inputs: InputScan, hooks: str) -> tuple[bytes, JsonTable | None]:
    """(analysis.json's bytes, its seal): ``content`` as :func:`kit.store.atomic_write_json` writes it, with a
    text-form seal as its last member (no seal when the user has no key).

    A text-form seal signs the sha256 of the file's bytes before the seal, not the canonical JSON of its
    content: a reader then hashes the bytes it read instead of re-serialising the 300 kB it parsed (that was
    a third of reading one run in `kit history`). The reader checks that the file is exactly those bytes and
    this one seal member (:func:`_text_digest`), so nothing after the signed bytes can change what it parses."""
    text = _body_text(content)
    key = _user_key()
    if key is None or not text.endswith(b"\n}\n"):
        return text, None
    s = _seal_of(key, hashlib.sha256(text).hexdigest(), inputs, hooks, "text")
    return text[:-3] + _seal_tail(s), s


def analysis_bytes(content: JsonTable) -> bytes:
    """analysis.json's bytes for ``content`` (with its seal, if any): a text-form seal as :func:`sealed_text`
    placed it (so it still verifies for its owner after a copy, e.g. into a bundle), else the usual format."""
    s = content.get(SEAL_KEY)
    if isinstance(s, dict) and s.get("form") == "text":
        text = _body_text(content)
        if text.endswith(b"\n}\n"):
            return text[:-3] + _seal_tail(s)
    return (json.dumps(content, indent=1, sort_keys=False, default=str) + "\n").encode()


def _text_digest(text: bytes, s: JsonTable) -> str | None:
    """sha256 of the signed bytes of a file sealed by :func:`sealed_text` (None: the file is not exactly the
    signed bytes followed by this seal as the last member)."""
    tail = _seal_tail(s)
    if not text.endswith(tail):
        return None
    return hashlib.sha256(text[:-len(tail)] + b"\n}\n").hexdigest()


def seal_holds(content: JsonTable, run_dir: Path, hooks: str | None, verify_all: bool = False,
               text: bytes | None = None) -> bool:
    """Whether this user's kit made analysis.json's ``content`` from the run's inputs as they are now (and, with
    ``hooks``, with that study code). ``text``: the file's bytes ``content`` was parsed from (a text-form seal,
    :func:`sealed_text`, is checked on them; without them it does not hold).

    Only files whose size or mtime moved since the seal are re-hashed (see the module docstring);
    ``verify_all`` re-hashes every file. ``kit verify`` and ``kit pack`` must pass ``verify_all=True`` (or
    recompute): what they vouch for goes to others, and a crafted directory can set its mtimes back."""
    from kit.trust import seal_key

    s = content.get(SEAL_KEY)
    if not isinstance(s, dict):
        return False
    version = s.get("version")
    if type(version) is not int or (version != SEAL_VERSION and version not in OLD_SEAL_VERSIONS):
        return False
    key = seal_key(create=False)
    if key is None:
        return False
    inputs, state, tag = s.get("inputs"), s.get("hooks"), s.get("hmac")
    if not (isinstance(inputs, str) and isinstance(state, str) and isinstance(tag, str)):
        return False
    if hooks is not None and state != hooks:
        return False
    table, form = s.get(FILES_KEY), s.get("form", "canonical")
    if version in OLD_SEAL_VERSIONS or form == "canonical":
        digest: str | None = _content_digest(content, parsed=True)
    elif form == "text" and text is not None:
        digest = _text_digest(text, s)
    else:
        return False
    if digest is None or not isinstance(form, str) or \
            not mac_holds(key, "analysis-seal", tag, *_parts(version, inputs, state, digest, table, form)):
        return False
    if version in OLD_SEAL_VERSIONS:
        now = _inputs_digest_v2(run_dir)
    else:
        known = None if verify_all else _table_of(table)
        now = scan_inputs(run_dir, known).digest
    return hmac.compare_digest(inputs.encode(), now.encode())


def stored_analysis(run_dir: Path, rd: RunDir | None = None, trust: StudyTrust | None = None,
                    need_study: bool = True, verify_all: bool = False,
                    series: tuple[str, str] | None = None) -> Analysis | None:
    """The run's analysis.json, typed, when its seal holds (:func:`seal_holds`; with ``need_study`` also only when
    made with the study code this reader would use under ``trust``), else None: the caller recomputes it
    (``kit.analysis.analyze.current_analysis`` does). Kept here, beside the seal, so a reader of stored analyses
    (`kit history`'s worker processes) never imports the analysis code and its pandas/scipy. ``series``: see
    :meth:`kit.analysis_record.Analysis.from_json`."""
    rd = rd or RunDir.open(run_dir)
    path = rd.path / ANALYSIS
    try:  # read as RunDir.analysis_json reads it, keeping the bytes: a text-form seal is checked on them
        text = read_capped(path, MAX_ANALYSIS_BYTES, "analysis.json", missing_ok=True)
        stored = parse_json(text, str(path), "analysis.json") if text is not None else None
    except StoreError:  # a planted link, a FIFO, garbage: never reused
        return None
    if text is None or not isinstance(stored, dict):
        return None
    hooks = None
    if need_study:
        from kit.studies import resolve_hooks

        hooks = resolve_hooks(rd.path, rd.manifest(), trust).state()
    if not seal_holds(stored, rd.path, hooks, verify_all=verify_all, text=text):
        return None
    return Analysis.from_json(stored, str(rd.path / ANALYSIS), series)
