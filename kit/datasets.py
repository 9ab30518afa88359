"""Dataset registry: pinned files with SHA-256, lookup, download and verification.

A dataset file is looked for, in order, in the directory given on the command
line (``--data-dir``), in ``$KIT_DATA_DIR``, in the cache
(``$KIT_CACHE_DIR`` or ``~/.cache/kit/datasets``), and in the copies bundled
with the kit (``data/``). A file found anywhere must match its pinned SHA-256;
one that does not is refused, never used. Missing files are downloaded into
the cache (with resume) unless downloads are off.

The source ``synthetic`` of a dataset is never downloaded: the kit writes a
small stand-in in the dataset's real on-disk format (``kit.synthetic``) into
the cache, so that the real parsing code runs on hosts without the data. Its
digests are recorded at generation and checked on reuse; reports label it.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kit.dataset_registry import ALL_DATASETS, MNIST
from kit.dataset_types import CHUNK, SYNTHETIC, UNPINNED, DatasetFile, DatasetInfo, ResolvedDataset, sha256_file
from kit.errors import ChecksumError, DatasetError
from kit.synthetic import resolve_synthetic

__all__ = ["CHUNK", "DATASETS", "MNIST", "SYNTHETIC", "DatasetFile", "DatasetInfo", "ResolvedDataset", "resolve",
           "sha256_file"]

REPO_ROOT = Path(__file__).resolve().parent.parent
BUNDLED_DIRS: tuple[Path, ...] = (REPO_ROOT / "data",)
ENV_DATA_DIR = "KIT_DATA_DIR"
ENV_CACHE_DIR = "KIT_CACHE_DIR"
# "name=sha256[,name=sha256...]": the digests the user verified for files the registry leaves unpinned
ENV_SHA256 = "KIT_DATASET_SHA256"

Progress = Callable[[str, int, int | None], None]  # (file name, bytes done, bytes total)


DATASETS: dict[str, DatasetInfo] = {info.name: info for info in ALL_DATASETS}


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE_DIR) or Path.home() / ".cache" / "kit" / "datasets")


def check_explicit_dirs(data_dir: Path | None = None) -> None:
    """A location the user named (--data-dir, $KIT_DATA_DIR) must exist: never fall back to other data silently."""
    for label, base in (("--data-dir", data_dir), (f"${ENV_DATA_DIR}", os.environ.get(ENV_DATA_DIR))):
        if base and not Path(base).expanduser().is_dir():
            what = "does not exist" if not Path(base).expanduser().exists() else "is not a directory"
            raise DatasetError(f"the dataset directory given by {label} {what}", where=f"{label} {base}",
                               fix=f"give the directory that holds the dataset files, or drop {label} to use the "
                                   "cache or the bundled files")


def search_dirs(info: DatasetInfo, data_dir: Path | None = None) -> list[tuple[str, Path]]:
    """Where files of ``info`` are looked for, labelled, in order."""
    dirs: list[tuple[str, Path]] = []
    for label, base in (("--data-dir", data_dir), (f"${ENV_DATA_DIR}", os.environ.get(ENV_DATA_DIR))):
        if base:
            base = Path(base).expanduser().resolve()  # trials run in their own work directory
            dirs.append((label, base / info.name if (base / info.name).is_dir() else base))
    dirs.append(("cache", cache_dir().expanduser().resolve() / info.name))
    for root in BUNDLED_DIRS:
        dirs += [("bundled", root / sub) for sub in info.bundled_subdirs]
    return dirs


def expected_digest(f: DatasetFile) -> str:
    """The SHA-256 ``f`` must have: the registry's, or for an unpinned file the one the user gave.

    A file no two independent projects pin has no digest the kit can vouch for; the kit never takes the
    digest of whatever copy it finds as the truth, so it refuses the file until the user names the digest
    they verified (``$KIT_DATASET_SHA256="spa-eng.zip=<64 hex>"``).
    """
    if f.sha256 != UNPINNED:
        return f.sha256
    given: dict[str, str] = {}
    for item in os.environ.get(ENV_SHA256, "").split(","):
        if not item.strip():
            continue
        name, sep, digest = item.strip().partition("=")
        digest = digest.strip().lower()
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise DatasetError(f"${ENV_SHA256} entry {item.strip()[:80]!r} is not name=<64 hex digits>",
                               where=f"${ENV_SHA256}", fix=f'set {ENV_SHA256}="{f.name}=<sha256 of your copy>"')
        given[name.strip()] = digest
    if f.name not in given:
        raise DatasetError(
            f"{f.name} is not pinned: no two independent projects record its SHA-256, so the kit cannot "
            "vouch for any copy of it",
            where=f.name,
            fix=f"check your copy against a digest you trust (e.g. from a copy you verified before), then "
                f'set {ENV_SHA256}="{f.name}=<its sha256>"; the run records the digest it used')
    return given[f.name]


def verify_file(path: Path, expected: DatasetFile) -> str:
    """Return the digest of ``path`` or raise ChecksumError naming both digests."""
    want = expected_digest(expected)
    got = sha256_file(path)
    if got != want:
        raise ChecksumError(
            f"SHA-256 mismatch: expected {want}, got {got}",
            where=str(path),
            fix="delete the file and let the kit download it again, or replace it with the original from the dataset's publisher",
        )
    return got


def resolve(
    name: str,
    source: str,
    *,
    data_dir: Path | None = None,
    download: bool = True,
    progress: Progress | None = None,
    registry: dict[str, DatasetInfo] | None = None,
) -> ResolvedDataset:
    """Find (or fetch) every file ``source`` needs in one directory, verified.

    ``registry`` replaces the built-in one (tests pin their own small files).
    """
    registry = DATASETS if registry is None else registry
    check_explicit_dirs(data_dir)
    if name not in registry:
        raise DatasetError(f"unknown dataset {name!r}", fix=f"use one of {', '.join(sorted(registry))}")
    info = registry[name]
    if source == SYNTHETIC and info.synthetic:
        return resolve_synthetic(info, cache_dir() / info.name / SYNTHETIC)
    if source not in info.sources:
        raise DatasetError(f"dataset {name} has no source {source!r}", fix=f"use one of {', '.join(info.sources)}")
    needed = [info.file(f) for f in info.sources[source]]
    for label, d in search_dirs(info, data_dir):
        present = [f for f in needed if (d / f.name).is_file()]
        if len(present) == len(needed):
            digests = {f.name: verify_file(d / f.name, f) for f in needed}
            return ResolvedDataset(name, source, d, label, digests)
        if present and label in ("--data-dir", f"${ENV_DATA_DIR}"):
            missing = ", ".join(f.name for f in needed if f not in present)
            raise DatasetError(
                f"{missing} missing beside the other {name} files",
                where=str(d),
                fix=f"put every file of the {source!r} source into that directory",
            )
    if not download:
        where = "; ".join(f"{label} {d}" for label, d in search_dirs(info, data_dir))
        raise DatasetError(
            f"dataset {name} ({source}) not found and downloads are off (looked in: {where})",
            fix=f"download {', '.join(f.name for f in needed)} and pass --data-dir or set ${ENV_DATA_DIR}",
        )
    target = cache_dir() / info.name
    digests = {f.name: fetch(f, target, progress) for f in needed}
    return ResolvedDataset(name, source, target, "downloaded", digests)


def fetch(f: DatasetFile, target: Path, progress: Progress | None = None) -> str:
    """Download ``f`` into ``target`` (resuming a ``.part`` file), verify, rename."""
    expected_digest(f)  # an unpinned file without the user's digest is refused before any download
    target.mkdir(parents=True, exist_ok=True)
    final = target / f.name
    if final.is_file():
        return verify_file(final, f)
    part = target / (f.name + ".part")
    errors: list[str] = []
    for url in f.urls:
        try:
            _download(url, part, f.size, progress, f.name)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            errors.append(f"{url}: {exc}")
            continue
        try:
            digest = verify_file(part, f)
        except ChecksumError:
            part.unlink(missing_ok=True)  # a bad download is never kept, nor resumed
            errors.append(f"{url}: checksum mismatch")
            continue
        os.replace(part, final)
        return digest
    raise DatasetError(
        f"could not download {f.name} ({'; '.join(errors)})",
        fix=f"download it by hand into a directory and pass --data-dir or set ${ENV_DATA_DIR}",
    )


def _download(url: str, part: Path, size: int | None, progress: Progress | None, label: str) -> None:
    done = part.stat().st_size if part.exists() else 0
    if size is not None and done >= size:
        return
    req = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        if done and resp.status != 206:  # server ignored the range: start over
            done = 0
        total = size
        length = resp.headers.get("Content-Length")
        if total is None and length is not None:
            total = done + int(length)
        with part.open("ab" if done else "wb") as fh:
            while chunk := resp.read(CHUNK):
                fh.write(chunk)
                done += len(chunk)
                if progress:
                    progress(label, done, total)
