"""The types of the dataset registry: pinned files, datasets, a resolved (found and verified) dataset.

Their own module so that the registry (kit.dataset_registry), the synthetic stand-ins (kit.synthetic) and the
resolver (kit.datasets) all build on them without importing each other in a circle.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 1 << 20
SYNTHETIC = "synthetic"  # the source name of generated stand-ins (see kit.synthetic)
# The sha256 of a file no two independent projects pin: the kit uses it only with a digest the user gives
# (kit.datasets.expected_digest), never with one computed from whatever copy it finds.
UNPINNED = ""


@dataclass(frozen=True)
class DatasetFile:
    """One pinned file: its name, where it can be fetched, and its digest (``UNPINNED``: none recorded)."""

    name: str
    sha256: str
    urls: tuple[str, ...]
    size: int | None = None


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset: its files, the sources (splits) it can be used as, and sizes."""

    name: str
    title: str
    license: str
    files: tuple[DatasetFile, ...]
    # source -> names of the files it needs
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # source -> (train examples, test examples) at full size
    full_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    bundled_subdirs: tuple[str, ...] = ()
    # "module:function" writing a small stand-in in the real format (source "synthetic"); "" = none
    synthetic: str = ""

    def file(self, name: str) -> DatasetFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)

    def sizes(self, source: str, test_size: int | None) -> tuple[int, int]:
        """Examples available for training and testing from ``source``.

        For a split source (one file set divided in two), the test part takes
        ``test_size`` examples (default one fifth) and training the rest.
        """
        train, test = self.full_sizes[source]
        if test == 0:  # split source: one pool of ``train`` examples
            n_test = test_size if test_size is not None else train // 5
            return train - n_test, n_test
        return train, test


@dataclass(frozen=True)
class ResolvedDataset:
    """Where a dataset's files were found, with their verified digests."""

    name: str
    source: str
    directory: Path
    origin: str
    files: dict[str, str]  # file name -> sha256

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "directory": str(self.directory),
            "origin": self.origin,
            "sha256": dict(self.files),
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()
