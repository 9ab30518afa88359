"""One error tree for the whole kit.

Every error a user can cause or meet carries three parts: what went wrong
(``cause``), where (``where``: a file, a key path, a device) and what to do
(``fix``). The CLI catches :class:`KitError` once and prints ``str(err)``;
library errors (NVML, docker, OS) are translated into this tree at the edge.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum


class ExitCode(IntEnum):
    """The exit status of every `kit` command (README, "Commands"); a CI step can tell each case apart."""

    OK = 0  # success: the command did what was asked and the answer, if any, is yes
    FAILED = 1  # the answer is no: a regression (compare/bisect --fail-on), claims not reproduced (verify), a failed
    #             self-test or tune step, something a study needs is missing (doctor --strict)
    USAGE = 2  # the command line is wrong (click's: unknown option, missing argument, bad choice)
    INCONCLUSIVE = 3  # the data cannot decide (compare --fail-on, bisect): more repetitions
    SUSPECT = 4  # a significant change whose sides ran in different host conditions (compare --fail-on): re-run
    INPUT = 5  # a KitError: bad spec, run directory, bundle, dataset, host state, each with its fix
    INTERNAL = 6  # an unexpected exception: a bug in the kit (--debug shows the traceback)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


EXIT_CODE_TABLE: tuple[tuple[int, str], ...] = (
    (ExitCode.OK, "success"),
    (ExitCode.FAILED, "the answer is no: regression found, claims not reproduced, a self-test check or what a study "
                      "needs failed"),
    (ExitCode.USAGE, "usage error (unknown option, missing argument, bad choice)"),
    (ExitCode.INCONCLUSIVE, "inconclusive: the data cannot decide"),
    (ExitCode.SUSPECT, "suspect: a change whose runs had different host conditions"),
    (ExitCode.INPUT, "input error: a bad spec, run directory, bundle or dataset (the message says the fix)"),
    (ExitCode.INTERNAL, "internal error: a bug in the kit (re-run with --debug and report it)"),
    (ExitCode.INTERRUPTED, "interrupted"),
)


class KitError(Exception):
    """Base of every error the kit raises on purpose."""

    exit_code: int = ExitCode.INPUT

    def __init__(self, cause: str, *, where: str | None = None, fix: str | None = None,
                 detail: str | None = None) -> None:
        self.cause = cause
        self.where = where
        self.fix = fix
        self.detail = detail  # e.g. a study hook's traceback: shown with --debug, never in the one line
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.where:
            parts.append(f"{self.where}: ")
        parts.append(self.cause.rstrip("."))
        if self.fix:
            parts.append(f". Fix: {self.fix.rstrip('.')}")
        return "".join(parts) + "."


class UsageError(KitError):
    """The command line names something that does not exist (an experiment id, a profile) or uses an old form:
    exit 2 like click's own usage errors, said before any heavy import, with the closest names."""

    exit_code: int = ExitCode.USAGE


def did_you_mean(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The names a typo most likely meant: those containing the word (``lenet`` -> ``florencio2019_lenet``), then
    difflib's closest (``florencio2019_lenat``), at most ``n``."""
    import difflib

    pool = sorted(set(choices))
    low = word.lower()
    found = [c for c in pool if low and low in c.lower()]
    found += [c for c in difflib.get_close_matches(word, pool, n=n, cutoff=0.6) if c not in found]
    return found[:n]


def suggestion(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` (or ``'x' or 'y'``), empty when nothing is close: the start of a fix."""
    close = did_you_mean(word, choices)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


class SpecError(KitError):
    """An experiment spec (TOML) is invalid; ``where`` is ``file: key.path``."""


class DatasetError(KitError):
    """A dataset is missing, unreadable or cannot be fetched."""


class ChecksumError(DatasetError):
    """A dataset file's SHA-256 differs from the pinned value."""


class PlanError(KitError):
    """A trial plan cannot be built or resumed."""


class StoreError(KitError):
    """The run directory is missing, corrupt or of another schema version."""


class DiskError(StoreError):
    """Writing failed in the file system (full, read-only, no permission): the path and the fix, never a bare OSError."""


def disk_error(exc: OSError, path: object, doing: str = "write", after: str = "") -> DiskError:
    """Translate an OSError met while writing ``path`` into a DiskError whose fix fits its errno.

    ``after`` is appended to the fix (e.g. how to continue the run once the
    cause is gone).
    """
    import errno
    import os

    where = str(getattr(exc, "filename", None) or path)
    folder = os.path.dirname(where) or "."
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        cause, fix = "no space left on the device", f"free space on the file system holding {folder} (df -h {folder})"
    elif code == errno.EROFS:
        cause, fix = "the file system is read-only", f"remount {folder} read-write or use a writable --runs-dir"
    elif code in (errno.EACCES, errno.EPERM):
        cause, fix = "permission denied", f"make {folder} writable by this user (ls -ld {folder})"
    elif code == errno.EIO:
        cause, fix = "input/output error (failing disk or lost network mount)", f"check the device holding {folder} (dmesg)"
    else:
        cause, fix = exc.strerror or type(exc).__name__, f"check {folder} (df -h, ls -ld, dmesg)"
    return DiskError(f"cannot {doing}: {cause} ({errno.errorcode.get(code or 0, code)})", where=where,
                     fix=fix + (f"; then {after}" if after else ""))


class BackendError(KitError):
    """A backend could not run a trial (process, container, cluster)."""


class EngineError(BackendError):
    """The container engine is unreachable or refused an operation."""


class ImageError(KitError):
    """An image recipe, build or verification failed."""


class CollectorError(KitError):
    """A telemetry collector failed in a way that must stop the run."""


class NVMLError(CollectorError):
    """An NVML call failed; translated from ``pynvml.NVMLError``."""


class AnalysisError(KitError):
    """The stored data cannot be analysed as asked."""


class StudyError(KitError):
    """A study folder (its experiment.toml, analysis.py or report.py) that cannot be used as it is."""


class ReportError(KitError):
    """A report could not be rendered."""


class ExecutorError(KitError):
    """An executor (Slurm, ...) could not submit or track jobs."""
