"""Whose code a resumed run executes: the rule `kit report` applies to a run's study copy, applied to its trials.

A run of a study folder keeps a copy of the folder (``study/``) and its trials import their workload modules
from it. Resuming a run (``kit run --resume``, ``kit reproduce-all``, a cluster job's chunk) runs those modules
again, so the copy is code about to execute, and the run directory may be someone else's: the manifest's
``study.digest`` is written by whoever wrote the manifest, so it proves nothing to the reader. Resuming runs
the copy's code only when the reader, from the bytes it read, finds it to be one of:

- the kit's own bundled study of that experiment (its Python files byte for byte; README or TOML edits change
  nothing that runs);
- byte for byte the folder the user names (``--study DIR``: "this run's code is my code");
- code the user trusts for this command (``--trust-study-code``) or for good (a digest on the allow-list of
  :mod:`kit.trust`, which ``kit run`` of a folder fills as the run starts);
- the digest a cluster job was handed by the kit that submitted it (``--study-digest``, after this same check).

Otherwise the resume is refused before anything is written or run, naming the files and how to proceed; the
kit never substitutes other code silently. The trials then import a private snapshot written from exactly the
bytes that were checked (:func:`snapshot`), so an edit of ``study/`` after the check runs nothing.
A copy without Python files needs no trust: nothing in it can execute.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kit import studies
from kit.errors import StoreError, StudyError
from kit.manifest import Manifest
from kit.trust import StudyTrust, is_trusted

CODE_SUFFIX = ".py"  # the only files of a study the kit ever executes (kit.workloads.study_import)


@dataclass(frozen=True)
class RunCode:
    """The study code a resumed run may execute, as this reader checked it.

    ``kind``: ``kit`` (no study copy: the kit's own workloads), ``no-code`` (a copy without Python files),
    ``bundled``, ``folder``, ``copy`` (``--trust-study-code``), ``allow-list`` or ``pinned`` (a cluster job's
    ``--study-digest``). ``files`` are the checked bytes the trials will import.
    """

    kind: str
    digest: str | None = None
    files: tuple[tuple[str, bytes], ...] = ()

    def describe(self) -> str:
        """One line for the run's event log and messages."""
        words = {"kit": "the kit's own workloads (no study copy)",
                 "no-code": "a study copy without Python files",
                 "bundled": "the kit's bundled study, byte for byte",
                 "folder": "byte for byte the study folder you named (--study)",
                 "copy": "the run's copy, trusted for this command (--trust-study-code)",
                 "allow-list": "the run's copy, a digest on your allow-list (kit trust)",
                 "pinned": "the run's copy, the digest the submitting kit checked (--study-digest)"}
        return words.get(self.kind, self.kind) + (f", digest {self.digest[:12]}" if self.digest else "")


def code_digest(files: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...]) -> str:
    """The digest of a study's Python files only (what can execute)."""
    return studies.digest_of([(r, d) for r, d in files if r.endswith(CODE_SUFFIX)])


def differences(ours: list[tuple[str, bytes]], theirs: list[tuple[str, bytes]], limit: int = 5) -> list[str]:
    """The Python files that differ between two studies, in words (first ``limit``)."""
    a = {r: hashlib.sha256(d).digest() for r, d in ours if r.endswith(CODE_SUFFIX)}
    b = {r: hashlib.sha256(d).digest() for r, d in theirs if r.endswith(CODE_SUFFIX)}
    out = [f"{r} differs" for r in sorted(a.keys() & b.keys()) if a[r] != b[r]]
    out += [f"{r} only in the run's copy" for r in sorted(a.keys() - b.keys())]
    out += [f"{r} missing from the run's copy" for r in sorted(b.keys() - a.keys())]
    return [s[:120] for s in out[:limit]] + ([f"and {len(out) - limit} more"] if len(out) > limit else [])


def resume_code(run_dir: Path, manifest: Manifest, trust: StudyTrust, *, declares_study: bool,
                pinned_digest: str | None = None) -> RunCode:
    """The study code resuming ``run_dir`` may run; StudyError (nothing run, nothing written) otherwise.

    ``declares_study``: the recorded spec names a study folder's workload (its modules must come from a copy).
    """
    copy = run_dir / studies.RUN_COPY
    if manifest.study is None:
        if declares_study:
            raise StoreError("the recorded spec runs a study folder's workload but the manifest records no study "
                             "copy (manifest.study)", where=str(run_dir / "manifest.json"),
                             fix="resume only runs `kit run` made; start a new run from the study folder")
        if os.path.lexists(copy):
            raise StoreError("the run holds a study/ folder its manifest does not record", where=str(copy),
                             fix="remove it, or start a new run from the study folder")
        return RunCode("kit")
    checked = studies.checked_copy(run_dir, manifest)  # links, special files, sizes refused; digest recomputed
    assert checked is not None
    files = studies.study_files(checked)
    digest = studies.digest_of(files)  # computed here, from the bytes (the manifest's was only compared)
    frozen = tuple(files)
    if not any(r.endswith(CODE_SUFFIX) for r, _ in files):
        return RunCode("no-code", digest, frozen)
    mine = code_digest(files)
    bundled = studies.bundled_folder(manifest.experiment)
    bundled_files = studies.study_files(bundled) if bundled is not None else None
    if bundled_files is not None and code_digest(bundled_files) == mine:
        return RunCode("bundled", digest, frozen)
    if trust.study_dir is not None:
        folder = studies.study_dir_of(Path(trust.study_dir)) or Path(trust.study_dir)
        try:
            theirs = studies.study_files(folder)
        except OSError as exc:
            raise StudyError(f"the study folder cannot be read ({exc.strerror or exc})", where=str(folder),
                             fix="give a study folder (the directory holding experiment.toml)") from None
        if code_digest(theirs) == mine:
            return RunCode("folder", digest, frozen)
        raise StudyError("the run's study code is not the code of the folder you named ("
                         + "; ".join(differences(files, theirs)) + "); resuming would run code you did not name",
                         where=str(copy), fix="compare the two folders; start a new run from your folder, or resume "
                         "with --trust-study-code once you have read the run's copy")
    if pinned_digest is not None:
        if pinned_digest == digest:
            return RunCode("pinned", digest, frozen)
        raise StudyError(f"the run's study copy changed after the job was submitted (digest {digest[:12]}, the "
                         f"submitting kit checked {pinned_digest[:12]})", where=str(copy),
                         fix="restore study/ as the run left it, then resubmit with kit run --resume")
    if trust.trust_run_copy:
        return RunCode("copy", digest, frozen)
    if trust.allow_list and is_trusted(digest):
        return RunCode("allow-list", digest, frozen)
    code = [r for r, _ in files if r.endswith(CODE_SUFFIX)]
    versus = (f"; against the bundled study of {manifest.experiment}: " + "; ".join(differences(files, bundled_files))
              if bundled_files is not None else "")
    raise StudyError(f"the run's study code ({', '.join(code[:6])}{' ...' if len(code) > 6 else ''}, digest "
                     f"{digest[:12]}) is neither this kit's bundled study nor code you trusted, and resuming would "
                     f"run it{versus}", where=str(copy),
                     fix=f"read that code, then resume with --trust-study-code (this command) or run `kit trust "
                         f"{run_dir}` first (remembered); or pass --study DIR naming your own copy of the study")


@contextlib.contextmanager
def snapshot(code: RunCode) -> Iterator[Path | None]:
    """A private copy of exactly the checked bytes for the trials to import (None without study code), removed
    when the run ends. Readable by all (a container's user must read it), writable by this user only."""
    if code.kind == "kit":
        yield None
        return
    tmp = Path(tempfile.mkdtemp(prefix="kit-run-code-"))
    try:
        studies.write_copy(list(code.files), tmp / studies.RUN_COPY)
        for d, _, _ in os.walk(tmp):
            os.chmod(d, 0o755)
        if studies.digest_of(studies.study_files(tmp / studies.RUN_COPY)) != code.digest:
            raise StudyError("the snapshot of the study code does not hold the checked bytes", where=str(tmp),
                             fix="a kit bug or a full disk: check the free space and run the command again")
        yield tmp / studies.RUN_COPY
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
