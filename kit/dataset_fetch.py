"""The real dataset files one study's profile needs, fetched ahead of a run (`kit datasets fetch STUDY`), listed
(`kit datasets list STUDY`), and the words a run without network stops with before its first trial.

Why its own module over kit.datasets: kit.datasets resolves one dataset for a run; a user preparing a host (or a
host with network preparing files for one without) needs the whole study at once, every file's fate (present,
fetched, failed and why), and, where a download failed, which files to copy into which directory elsewhere.
It reuses kit.datasets' downloader (pinned SHA-256, resume from ``.part``, mirrors, progress): a file is renamed
to its final name only after its digest matched, so a failed fetch leaves no file a run could take for the real
one. pooch would add a dependency for what that downloader already does and is tested for.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from kit import datasets
from kit.dataset_types import SYNTHETIC, UNPINNED, DatasetFile, DatasetInfo
from kit.datasets import Progress, cache_dir, check_explicit_dirs, fetch, search_dirs, verify_file
from kit.errors import ChecksumError, DatasetError, KitError
from kit.spec import Spec


class FileState(StrEnum):
    """What became of one file: found verified, downloaded and verified, absent (listing only), or failed."""

    present = "present"
    fetched = "fetched"
    missing = "missing"
    failed = "failed"


@dataclass(frozen=True)
class NeededFile:
    """One real file a configuration of the profile reads: its dataset, the source (split) that needs it, the
    file's pinned record (name, digest, URLs, size)."""

    dataset: str
    source: str
    file: DatasetFile

    @property
    def pinned(self) -> bool:
        return self.file.sha256 != UNPINNED


@dataclass(frozen=True)
class FileStatus:
    """One file's fate: where it is (or was to be written) and, if it failed, why."""

    needed: NeededFile
    state: FileState
    path: Path  # where it was found, written, or would be written
    error: str = ""  # why it failed, or (present, missing, fetched) a note on where a copy is or came from


@dataclass(frozen=True)
class StudyFiles:
    """Every real file of one study's profile, with its state; ``target`` is where fetched files go."""

    study: str
    profile: str
    target: Path  # the cache, or --data-dir
    files: tuple[FileStatus, ...]

    @property
    def ok(self) -> bool:
        return all(f.state in (FileState.present, FileState.fetched) for f in self.files)

    def failed(self) -> tuple[FileStatus, ...]:
        return tuple(f for f in self.files if f.state in (FileState.failed, FileState.missing))


def fetch_command(spec: Spec) -> str:
    """The command that fetches what this spec's profile needs (said by a run that stops for want of it)."""
    profile = "" if spec.profile in ("", "paper") else f" --profile {spec.profile}"
    return f"kit datasets fetch {spec.experiment.id}{profile}"


def _registry(registry: Mapping[str, DatasetInfo] | None) -> Mapping[str, DatasetInfo]:
    return datasets.DATASETS if registry is None else registry  # read at call time: tests swap entries in


def needed_files(spec: Spec, registry: Mapping[str, DatasetInfo] | None = None) -> tuple[NeededFile, ...]:
    """The real files the profile's configurations read, each once, in the order the spec names its datasets
    (synthetic stand-ins are written by the kit and random inputs read none)."""
    known = _registry(registry)
    out: list[NeededFile] = []
    seen: set[tuple[str, str]] = set()
    for ds in spec.datasets():
        if ds.source == SYNTHETIC:
            continue
        info = known.get(ds.name)
        if info is None:
            raise DatasetError(f"unknown dataset {ds.name!r}", where=f"{spec.path}: dataset",
                               fix=f"use one of {', '.join(sorted(known))}")
        if ds.source not in info.sources:
            raise DatasetError(f"dataset {ds.name} has no source {ds.source!r}", where=f"{spec.path}: dataset",
                               fix=f"use one of {', '.join(info.sources)}")
        for name in info.sources[ds.source]:
            if (ds.name, name) not in seen:
                seen.add((ds.name, name))
                out.append(NeededFile(ds.name, ds.source, info.file(name)))
    return tuple(out)


def base_dir(data_dir: Path | None = None) -> Path:
    """Where fetched files go: --data-dir (kit.datasets.search_dirs looks there first), else the kit's cache."""
    return (data_dir if data_dir is not None else cache_dir()).expanduser().resolve()


def target_dir(dataset: str, data_dir: Path | None = None) -> Path:
    """A dataset's own folder under :func:`base_dir` (``DIR/mnist``), where a run looks for its files."""
    return base_dir(data_dir) / dataset


def _resolved_dir(needed: NeededFile, data_dir: Path | None, known: Mapping[str, DatasetInfo]) -> Path | None:
    """The directory where a run would find every file of the needed file's source, verified (None: none has
    them all). A run reads one source from one directory (kit.datasets.resolve), so a file found alone (MNIST's
    test files bundled with the kit, its training files nowhere) does not make the source usable."""
    try:
        return datasets.resolve(needed.dataset, needed.source, data_dir=data_dir, download=False,
                                registry=dict(known)).directory
    except KitError:
        return None


def _elsewhere(needed: NeededFile, data_dir: Path | None, known: Mapping[str, DatasetInfo]) -> Path | None:
    """A verified copy of the file in a directory a run searches (the bundled copies included), or None."""
    for _label, d in search_dirs(known[needed.dataset], data_dir):
        path = d / needed.file.name
        if path.is_file():
            try:
                verify_file(path, needed.file)
            except KitError:
                continue
            return path
    return None


def _copy_in(src: Path, needed: NeededFile, dest: Path) -> None:
    """A verified copy of ``src`` under ``dest`` (through a .part file renamed once verified)."""
    dest.mkdir(parents=True, exist_ok=True)
    part = dest / (needed.file.name + ".part")
    shutil.copyfile(src, part)
    try:
        verify_file(part, needed.file)
    except KitError:
        part.unlink(missing_ok=True)
        raise
    os.replace(part, dest / needed.file.name)


def _one(needed: NeededFile, data_dir: Path | None, download: bool, progress: Progress | None,
         known: Mapping[str, DatasetInfo]) -> FileStatus:
    dest = target_dir(needed.dataset, data_dir)
    path = dest / needed.file.name
    ready = _resolved_dir(needed, data_dir, known)
    if ready is not None:
        return FileStatus(needed, FileState.present, ready / needed.file.name)
    if path.is_file():
        verify_file(path, needed.file)  # a copy whose digest differs is an error: a run would refuse it too
        return FileStatus(needed, FileState.present, path)
    other = _elsewhere(needed, data_dir, known)
    if not download:
        note = f"a copy in {other.parent}, not beside the source's other files" if other else ""
        return FileStatus(needed, FileState.missing, path, note)
    if other is not None:
        _copy_in(other, needed, dest)
        return FileStatus(needed, FileState.fetched, path, f"copied from {other.parent}")
    fetch(needed.file, dest, progress)
    return FileStatus(needed, FileState.fetched, path)


def study_files(spec: Spec, data_dir: Path | None = None, *, download: bool = False,
                progress: Progress | None = None,
                registry: Mapping[str, DatasetInfo] | None = None) -> StudyFiles:
    """Every real file of the profile: where a run would find its source (verified), else fetched into the
    cache or ``data_dir`` (one folder per dataset) when ``download``, else missing. A file that cannot be had is
    recorded as failed with the reason (every URL's error, a digest mismatch, an unpinned file without the
    user's digest), never raised alone: the caller sees all of them at once."""
    check_explicit_dirs(data_dir)
    known = _registry(registry)
    out: list[FileStatus] = []
    for needed in needed_files(spec, known):
        try:
            out.append(_one(needed, data_dir, download, progress, known))
        except KitError as err:
            out.append(FileStatus(needed, FileState.failed, target_dir(needed.dataset, data_dir) / needed.file.name,
                                  err.one_line()))
    return StudyFiles(spec.experiment.id, spec.profile or "paper", base_dir(data_dir), tuple(out))


def copy_instructions(result: StudyFiles, spec: Spec) -> str:
    """What to do on a host with network, and which files to copy where on this one, in one line (the fix of a
    failed fetch and of a run that stops for want of data: the kit's errors are one line)."""
    files = []
    for f in result.failed():
        digest = f.needed.file.sha256 if f.needed.pinned else "unpinned: set $KIT_DATASET_SHA256 to your copy's"
        files.append(f"{f.path.name} into {f.path.parent} (from {' or '.join(f.needed.file.urls) or 'no URL known'}; "
                     f"sha256 {digest})")
    return (f"on a host with network run `{fetch_command(spec)} --data-dir DIR`, copy DIR here and pass --data-dir "
            f"DIR (or set $KIT_DATA_DIR); or put " + "; ".join(files))


def with_fetch_hint(err: DatasetError, spec: Spec, data_dir: Path | None = None) -> DatasetError:
    """A run's dataset error (raised before its first trial) with the way out: the command that fetches every
    file the profile needs, and for a host without network the files to copy and where. Why: kit.datasets names
    the one file that failed, and its fix (download it by hand) does not say which others the study needs."""
    if isinstance(err, ChecksumError) or "not pinned" in err.cause:
        return err  # a file here but not the publisher's, or one only the user can vouch for: its own fix is the way
    try:
        result = study_files(spec, data_dir)
    except KitError:
        return err  # e.g. a --data-dir that does not exist: said as it is
    if not result.failed():
        return err
    return DatasetError(err.cause, where=err.where,
                        fix=f"run `{fetch_command(spec)}` on this host with network; or {copy_instructions(result, spec)}")
