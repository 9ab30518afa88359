"""The run directory: the raw, append-only record of one run.

    runs/<UTC timestamp>-<experiment>/
        manifest.json            resolved spec, provenance, plan, status
        trials/<trial-id>.json   one per finished trial (written atomically)
        attempts/<trial-id>.<n>.json  a failed attempt set aside by `kit run --resume --retry-failed`
        samples/<trial-id>.parquet   long-format telemetry of that trial
        analysis.json            derived; re-made by `kit report`
        report/                  derived

A trial file is written only after its samples, by rename, so its presence
means "this trial is complete": a crash or kill loses at most the trial in
flight, and `kit run --resume` runs exactly the trials without a file.
Paths are deterministic (asv results, pyperf JSON), so two tools agree on
where a number lives.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from kit.collectors.base import SAMPLE_COLUMNS, Row
from kit.errors import StoreError, disk_error
from kit.manifest import MANIFEST_SCHEMA, Manifest
from kit.records import TrialRecord
from kit.safeio import create_exclusive, load_json, open_append, read_capped, real_dir
from kit.spec import check_recorded

if TYPE_CHECKING:  # pandas loads where samples are read or written: `kit status` reads none (issue 44)
    import pandas as pd

SCHEMA_VERSION = MANIFEST_SCHEMA  # manifest.json's schema_version
MANIFEST = "manifest.json"
TRIALS = "trials"
SAMPLES = "samples"
WORK = "work"
ANALYSIS = "analysis.json"
REPORT = "report"
BASELINE_ID = "_baseline"
MAX_TRIAL_BYTES = 64 << 20  # a trial file holds markers and a stderr tail, never this much
MAX_MANIFEST_BYTES = 64 << 20  # the plan of a 10,000-trial run and the spec's text: a few MiB
MAX_NODE_BYTES = 4 << 20  # nodes/<host>.json: one host's provenance
MAX_NODES = 4096
MAX_ANALYSIS_BYTES = 512 << 20  # analysis.json holds every value row of the run
MAX_SAMPLES_BYTES = 1 << 30  # samples/<trial>.parquet (the bundle's per-file limit)
NODES = "nodes"
RESERVE = ".space-reserve"  # released on a write failure so the status "failed" can still be written
RESERVE_BYTES = 1 << 20
ATTEMPTS = "attempts"  # failed attempts of retried trials (see RunDir.archive_trial)
ATTEMPT_NAME = re.compile(r"^(?P<tid>.+)\.(?P<n>[1-9][0-9]{0,5})\.json$")
MAX_EVENTS_BYTES = 64 << 20  # events.jsonl: a line per start, resume, disturbance, interruption
HOLDER_EVENTS = ("start", "resume")  # the events of the process that takes a run to work on it (kit.run)


def atomic_write_bytes(path: Path, data: bytes, after: str = "") -> None:
    """Write to a temporary sibling, fsync, rename: readers see all or nothing.

    A failure (disk full, read-only file system) removes the temporary file
    and raises DiskError naming the path and the fix (``after`` says how to
    continue once it is fixed); the old file, if any, is untouched.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL | O_NOFOLLOW: a link planted at the temporary name is removed, never written through; the
        # rename then replaces whatever is at ``path`` (a planted link included) instead of following it
        with os.fdopen(create_exclusive(tmp), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise disk_error(exc, path, after=after) from None
    _fsync_dir(path.parent)


def write_named_output(path: Path, data: bytes) -> None:
    """A file the user named on the command line (``--json-file``): written atomically when it is, or will be, a
    regular file. A character device or FIFO already there (/dev/stdout, /dev/null, a shell's ``>(jq .)``) is
    written into, never replaced: the atomic rename would put a regular file in the device's place, and run as
    root that replaces /dev/null itself for every process on the host. A directory is refused."""
    import stat

    try:
        mode: int | None = os.stat(path).st_mode  # follows the user's own link (/dev/stdout -> /proc/self/fd/1)
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise disk_error(exc, path) from None
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        try:
            with open(path, "wb") as fh:
                fh.write(data)
        except OSError as exc:
            raise disk_error(exc, path) from None
        return
    if mode is not None and not stat.S_ISREG(mode):
        raise StoreError("not a file the kit can write its output to (a directory or another special file)",
                         where=str(path), fix="name a file (or /dev/stdout), or use --json to print it")
    atomic_write_bytes(path, data)


def atomic_write_json(path: Path, obj: Any, after: str = "") -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=False, default=str) + "\n").encode(), after)


def rows_to_frame(rows: Iterable[Row] | pd.DataFrame | None) -> pd.DataFrame:
    """Rows in the long format as a typed DataFrame (empty rows -> empty frame)."""
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        df = rows
    else:
        df = pd.DataFrame(list(rows or []), columns=list(SAMPLE_COLUMNS))
    df = df.reindex(columns=list(SAMPLE_COLUMNS))
    return df.astype({"t": "float64", "value": "float64", "source": "string", "device": "string",
                      "metric": "string", "unit": "string"})


# The sample file's columns and the Arrow types the kit writes (strings may come back as large_string or
# dictionary-encoded from other writers of the same schema; numbers must be numbers).
SAMPLE_TYPES = {"t": "float", "source": "string", "device": "string", "metric": "string", "value": "float",
                "unit": "string"}


def check_sample_schema(schema: Any, where: str, fix: str) -> None:
    """StoreError unless a samples file has exactly the long format's columns with number/string types."""
    import pyarrow as pa

    names = [n for n in schema.names if not n.startswith("__index_level_")]
    if sorted(names) != sorted(SAMPLE_TYPES):
        raise StoreError(f"samples file has the columns {names[:10]}, not the kit's long format "
                         f"{list(SAMPLE_COLUMNS)}", where=where, fix=fix)
    for name, kind in SAMPLE_TYPES.items():
        t = schema.field(name).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        ok = (pa.types.is_floating(t) or pa.types.is_integer(t)) if kind == "float" else \
            (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))
        if not ok:
            raise StoreError(f"samples column {name!r} has type {t}, expected a {kind}", where=where, fix=fix)


def run_dir_name(experiment_id: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{experiment_id}"


def _checked_manifest(man: Any, where: str) -> Manifest:
    """A manifest's JSON typed (its shape checked by kit.records) and the numbers of its recorded spec held to the
    ranges a spec file is held to (kit.spec.check_recorded): every reader gets checked values, none its own."""
    typed = Manifest.from_json(man, where)
    check_recorded(typed.spec, where)
    return typed


class RunDir:
    """Read and append to one run directory."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    # -- creation and opening --------------------------------------------
    @classmethod
    def create(cls, root: Path, experiment_id: str, manifest: dict[str, Any]) -> RunDir:
        """Make a new run directory under ``root`` and write its manifest (checked first as every reader will
        read it, :class:`kit.manifest.Manifest`: the kit never writes a manifest it would refuse)."""
        root = Path(root)
        Manifest.from_json({"schema_version": SCHEMA_VERSION, **manifest}, f"{root}: the new run's manifest")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise disk_error(exc, root, "create the runs directory") from None
        for attempt in range(100):
            name = run_dir_name(experiment_id)
            path = root / (name if attempt == 0 else f"{name}-{attempt}")
            try:
                path.mkdir()
                break
            except FileExistsError:
                time.sleep(0.01)
            except OSError as exc:
                raise disk_error(exc, path, "create the run directory") from None
        else:  # pragma: no cover - 100 runs in the same second
            raise StoreError("cannot pick a fresh run directory name", where=str(root), fix="retry in a second")
        rd = cls(path)
        try:  # nothing half-written: a run directory without its manifest is removed again
            (path / TRIALS).mkdir()
            (path / SAMPLES).mkdir()
            rd.write_manifest({"schema_version": SCHEMA_VERSION, **manifest})
        except BaseException as exc:
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            if isinstance(exc, OSError):
                raise disk_error(exc, path, "create the run directory") from None
            raise
        return rd

    @classmethod
    def open(cls, path: Path) -> RunDir:
        """Open an existing run directory: its schema version, then the shape of its manifest
        (:func:`kit.records.check_manifest`: a malformed one is refused here, naming the key)."""
        return cls.open_with_manifest(path)[0]

    @classmethod
    def open_with_manifest(cls, path: Path) -> tuple[RunDir, Manifest]:
        """:meth:`open` and the typed manifest it checked, from one reading of manifest.json (`kit history`
        opens a thousand runs; reading it twice was a quarter of reading one)."""
        rd = cls(Path(path))
        if not rd.path.is_dir():
            raise StoreError("run directory not found", where=str(path), fix="give the path printed by `kit run`")
        man = rd.manifest_json()
        version = man.get("schema_version")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"run directory has schema version {version!r}, this kit reads {SCHEMA_VERSION}",
                where=str(rd.path / MANIFEST),
                fix="use the kit version that wrote it (see manifest.kit.version)",
            )
        return rd, _checked_manifest(man, str(rd.path / MANIFEST))

    # -- manifest ----------------------------------------------------------
    def manifest(self) -> Manifest:
        """manifest.json, checked and typed (:class:`kit.manifest.Manifest`; a malformed one is a StoreError
        naming the key path)."""
        return _checked_manifest(self.manifest_json(), str(self.path / MANIFEST))

    def manifest_json(self) -> dict[str, Any]:
        """manifest.json as JSON, read without following a link or blocking on a FIFO, capped, a JSON object (its
        shape is checked by :meth:`manifest` and when the run is opened: :meth:`open`); for writers that update
        it and for digests."""
        path = self.path / MANIFEST
        fix = "restore it from a copy of the run (a bundle holds one); trials/ and samples/ are intact"
        if not os.path.lexists(path):
            raise StoreError("manifest.json missing: not a run directory", where=str(self.path),
                             fix="give the directory `kit run` created (runs/<time>-<experiment>)")
        return load_json(path, MAX_MANIFEST_BYTES, "manifest.json", fix=fix)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        atomic_write_json(self.path / MANIFEST, manifest, after=self.resume_hint())

    def resume_hint(self) -> str:
        return f"continue with `kit run --resume {self.path}` (finished trials are kept)"

    def reserve_space(self, nbytes: int = RESERVE_BYTES) -> None:
        """Hold ``nbytes`` of the file system (allocated, not sparse) for the run's last words.

        When the disk fills mid-run, releasing this lets the manifest say
        "failed" and the event log say why; without it the status would stay
        "running". DiskError when even this much is not free (nothing run yet).
        """
        path = self.path / RESERVE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            try:
                if os.fstat(fd).st_size < nbytes:
                    try:
                        os.posix_fallocate(fd, 0, nbytes)
                    except OSError as exc:  # ZFS and some network file systems: write the bytes instead
                        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                            raise
                        os.write(fd, bytes(nbytes))
                        os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise disk_error(exc, path, "reserve space for the run", after=self.resume_hint()) from None

    def release_space(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / RESERVE).unlink()

    def analysis_json(self) -> Any:
        """analysis.json as stored (derived: kit.analysis writes it), read capped without following a link; None
        when it is absent or cannot be read as JSON (the reader recomputes it). Its shape is
        :class:`kit.analysis_record.Analysis`'s to check; whether it may be reused is kit.freshness's seal to say."""
        try:
            return load_json(self.path / ANALYSIS, MAX_ANALYSIS_BYTES, "analysis.json", missing_ok=True)
        except StoreError:
            return None

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        man = self.manifest_json()
        man.update(fields)
        self.write_manifest(man)
        return man

    def log_event(self, event: str, **fields: Any) -> None:
        """Append one line to events.jsonl (starts, resumes, interruptions); never through a planted link."""
        rec = {"t": time.time(), "event": event, "host": socket.gethostname(), "pid": os.getpid(), **process_identity(),
               **fields}
        path = self.path / "events.jsonl"
        try:
            fd = open_append(path, "events.jsonl")
            try:
                os.write(fd, (json.dumps(rec, default=str) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as exc:
            raise disk_error(exc, path, after=self.resume_hint()) from None

    def holder(self) -> dict[str, Any] | None:
        """Who last took this run to work on it: the newest ``start`` or ``resume`` event of events.jsonl (host,
        pid, boot_id, pid_start; see :func:`process_identity`), None when there is none. The log is read capped and
        line by line: a torn last line (a kill mid-write) is skipped."""
        data = read_capped(self.path / "events.jsonl", MAX_EVENTS_BYTES, "events.jsonl", missing_ok=True,
                           fix="remove the file; it only logs what happened")
        found = None
        for line in (data or b"").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("event") in HOLDER_EVENTS:
                found = rec
        return found

    def subdir(self, name: str, create: bool = True) -> Path:
        """``RUN/name`` as a real directory (created when missing): a planted link there is refused, so no
        write of the kit lands outside the run directory."""
        try:
            return real_dir(self.path / name, create=create, what=f"{name}/ in the run directory")
        except OSError as exc:
            raise disk_error(exc, self.path / name, "create a directory in the run") from None

    # -- trials ------------------------------------------------------------
    def trial_path(self, trial_id: str) -> Path:
        return self.path / TRIALS / f"{trial_id}.json"

    def nodes(self) -> dict[str, dict[str, Any]]:
        """nodes/<host>.json of a cluster run (each node's hardware), read like every file of a run."""
        d = self.path / NODES
        if not os.path.lexists(d):
            return {}
        real_dir(d, what="nodes/ in the run directory")
        names = sorted(p.name for p in d.iterdir() if p.name.endswith(".json"))
        if len(names) > MAX_NODES:
            raise StoreError(f"nodes/ holds {len(names)} files, more than the {MAX_NODES} a run may have",
                             where=str(d), fix="remove the files a cluster run did not write")
        return {n.removesuffix(".json"): load_json(d / n, MAX_NODE_BYTES, f"node file {n}") for n in names}

    def samples_path(self, trial_id: str) -> Path:
        return self.path / SAMPLES / f"{trial_id}.parquet"

    def work_dir(self, trial_id: str) -> Path:
        return self.path / WORK / trial_id

    def finished_ids(self) -> set[str]:
        return {p.stem for p in (self.path / TRIALS).glob("*.json")}

    def write_trial(self, rec: TrialRecord, rows: Iterable[Row] | pd.DataFrame | None) -> None:
        """Samples first, then the trial file (``rec.to_json()``, the record's one serialisation): the trial file
        is the commit."""
        trial_id = rec.trial_id
        self.subdir(TRIALS)
        if os.path.lexists(self.trial_path(trial_id)):
            raise StoreError(f"trial {trial_id} already recorded (the store is append-only)",
                             where=str(self.trial_path(trial_id)), fix="resume the run instead of re-running trials")
        self.write_samples(trial_id, rows)
        atomic_write_json(self.trial_path(trial_id), {"schema_version": SCHEMA_VERSION, **rec.to_json()},
                          after=self.resume_hint())

    def write_samples(self, name: str, rows: Iterable[Row] | pd.DataFrame | None) -> None:
        import io

        self.subdir(SAMPLES)
        buf = io.BytesIO()
        rows_to_frame(rows).to_parquet(buf, index=False)
        atomic_write_bytes(self.samples_path(name), buf.getvalue(), after=self.resume_hint())

    def read_trial(self, trial_id: str) -> dict[str, Any]:
        """trials/<id>.json as written (JSON, unchecked): for the archive and tests; readers take
        :meth:`trial_records`."""
        path = self.trial_path(trial_id)
        return load_json(path, MAX_TRIAL_BYTES, "trial file",
                         fix="delete it and run `kit run --resume` to redo that trial")

    def trial_records(self) -> list[TrialRecord]:
        """Every finished trial as a typed record (:class:`kit.records.TrialRecord`), in schedule order: the one
        reader of a run's trials (the analysis, resume and retries, ``kit status``).

        Each file is refused unless it is one planned trial, once, in a regular file of sane size, repeating its
        plan entry (:func:`kit.records.check_trial`): a copied or crafted file (a second file holding an existing
        trial id, an id outside the plan, a link) would otherwise be counted: 27 of 26 finished, and a paired test
        on a duplicated block.
        """
        from kit.records import check_trial

        plan = {t.trial_id: t.as_dict() for t in self.manifest().plan.trials}
        fix = "remove the file (kit run --resume re-runs a missing planned trial)"
        recs: list[TrialRecord] = []
        seen: dict[str, str] = {}
        d = self.path / TRIALS
        if not os.path.lexists(d):
            return []
        real_dir(d, what="trials/ in the run directory")
        for p in sorted(d.glob("*.json")):
            where = str(p)
            rec = self.read_trial(p.stem)  # a regular file under the cap, never a link's target
            tid = rec.get("trial_id")
            if not isinstance(tid, str):
                raise StoreError("trial file holds no trial_id", where=where, fix=fix)
            if tid in seen:
                raise StoreError(f"trial {tid} is recorded twice (also in {seen[tid]})", where=where, fix=fix)
            seen[tid] = p.name
            if tid != p.stem:
                raise StoreError(f"file holds trial {tid}, its name says {p.stem}", where=where, fix=fix)
            if plan and tid not in plan:
                raise StoreError(f"trial {tid} is not in the run's plan", where=where, fix=fix)
            # the statuses a trial file may hold (not the analysis' "invalid"), then the record typed
            recs.append(TrialRecord.from_json(check_trial(rec, plan.get(tid), where), where))
        return sorted(recs, key=lambda r: (r.position, r.trial_id))

    def read_samples(self, name: str) -> pd.DataFrame:
        """samples/<name>.parquet as the long-format frame; an empty frame when the trial has none.

        Read like every file of a run (no link, no FIFO, capped) and checked against the sample schema:
        a file with other columns or types is an error naming it, never silently "no telemetry".
        """
        import io

        path = self.samples_path(name)
        fix = "delete the trial and its samples and run `kit run --resume`"
        data = read_capped(path, MAX_SAMPLES_BYTES, "telemetry samples file", missing_ok=True, fix=fix)
        if data is None:
            return rows_to_frame(None)
        try:
            import pyarrow.parquet as pq

            table = pq.read_table(io.BytesIO(data))
        except Exception as exc:  # pyarrow raises several types for a corrupt file
            raise StoreError(f"cannot read samples ({type(exc).__name__}: {str(exc)[:200]})", where=str(path),
                             fix=fix) from None
        check_sample_schema(table.schema, str(path), fix)
        try:
            return rows_to_frame(table.to_pandas())
        except (ValueError, TypeError) as exc:
            raise StoreError(f"samples hold values of the wrong type ({exc})", where=str(path), fix=fix) from None

    # -- retried trials: the failed attempts are kept -----------------------
    def attempt_path(self, trial_id: str, n: int, suffix: str = ".json") -> Path:
        return self.path / ATTEMPTS / f"{trial_id}.{n}{suffix}"

    def attempt_numbers(self, trial_id: str) -> list[int]:
        """The numbers n of attempts/<trial_id>.<n>.json, ascending (an archived attempt per retry)."""
        d = self.path / ATTEMPTS
        if not d.is_dir() or d.is_symlink():
            return []
        out = []
        for p in d.iterdir():
            m = ATTEMPT_NAME.match(p.name)
            if m and m["tid"] == trial_id:
                out.append(int(m["n"]))
        return sorted(out)

    def attempt_files(self, trial_id: str) -> list[str]:
        """attempts/<trial_id>.<n>.json of every archived attempt, relative to the run directory, in order."""
        return [f"{ATTEMPTS}/{trial_id}.{n}.json" for n in self.attempt_numbers(trial_id)]

    def archive_trial(self, trial_id: str) -> str:
        """Set a finished trial aside so it can run again; returns the archive (attempts/<id>.<n>.json).

        The record is kept, never overwritten: its bytes go to
        ``attempts/<id>.<n>.json`` (and its samples to ``.<n>.parquet``), the
        archive written and synced first; only then is ``trials/<id>.json``
        removed (from that moment the trial is missing, and any resume runs it)
        and last its samples. A kill between the archive and the removal leaves
        the trial file and an archive with the same bytes: the trial still
        counts as finished, the listing of retries ignores such an archive,
        and the next archive of the trial reuses its number instead of
        writing a second copy. One trial id never has two files in trials/.
        """
        src = self.trial_path(trial_id)
        fix = "remove it (kit run --resume re-runs a missing planned trial)"
        data = read_capped(src, MAX_TRIAL_BYTES, "the trial file to retry", fix=fix)
        assert data is not None
        numbers = self.attempt_numbers(trial_id)
        last = self.attempt_path(trial_id, numbers[-1]) if numbers else None
        same = last is not None and read_capped(last, MAX_TRIAL_BYTES, "attempt file", fix=fix) == data
        n = numbers[-1] if same else (numbers[-1] if numbers else 0) + 1
        self.subdir(ATTEMPTS)
        samples = self.samples_path(trial_id)
        kept = read_capped(samples, MAX_SAMPLES_BYTES, "telemetry samples file", missing_ok=True, fix=fix)
        if kept is not None:
            atomic_write_bytes(self.attempt_path(trial_id, n, ".parquet"), kept)
        atomic_write_bytes(self.attempt_path(trial_id, n), data)  # the archive's commit
        os.unlink(src)  # the trial is missing from here on
        _fsync_dir(src.parent)
        try:
            os.unlink(samples)
        except FileNotFoundError:
            pass
        return f"{ATTEMPTS}/{trial_id}.{n}.json"

    def checked_attempts(self) -> list[AttemptRecord]:
        """Every archived attempt, checked like trial files, in schedule order (by attempt within a trial).

        A file in attempts/ must be named ``<trial-id>.<n>.json``, be a regular
        file of sane size holding that trial of the plan, typed as a trial file
        is (:meth:`kit.records.TrialRecord.from_json`); anything else is refused
        with the file named (a crafted archive would otherwise invent retries in
        the report).
        """
        d = self.path / ATTEMPTS
        if not os.path.lexists(d):
            return []
        fix = "remove the file; attempts/ holds only what `kit run --resume --retry-failed` set aside"
        real_dir(d, what="attempts/ in the run directory")
        planned = {t.trial_id for t in self.manifest().plan.trials}
        out: list[AttemptRecord] = []
        for p in sorted(d.iterdir()):
            if p.suffix == ".parquet" or p.name.startswith("."):
                continue  # the attempt's samples; a temporary file of an interrupted archive
            where = str(p)
            m = ATTEMPT_NAME.match(p.name)
            if not m:
                raise StoreError("not an attempt file (attempts/<trial-id>.<n>.json)", where=where, fix=fix)
            rec = load_json(p, MAX_TRIAL_BYTES, "attempt file", fix=fix)
            tid = rec.get("trial_id")
            if tid != m["tid"]:
                raise StoreError(f"file holds trial {tid!r}, its name says {m['tid']}", where=where, fix=fix)
            if planned and tid not in planned:
                raise StoreError(f"trial {tid} is not in the run's plan", where=where, fix=fix)
            out.append(AttemptRecord(trial_id=tid, attempt=int(m["n"]), file=f"{ATTEMPTS}/{p.name}",
                                     record=TrialRecord.from_json(rec, where)))
        return sorted(out, key=lambda a: (a.record.position, a.trial_id, a.attempt))


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """An attempt set aside under attempts/ (``kit run --resume --retry-failed``, a disturbed trial re-run): which
    trial, its number, the file relative to the run directory, and the trial record it held."""

    trial_id: str
    attempt: int
    file: str
    record: TrialRecord


def boot_id() -> str | None:
    """This boot's id (Linux: /proc/sys/kernel/random/boot_id); None where there is none. A pid recorded under
    another boot id names no process of this boot, whatever process has that number now."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat); None when it is gone
    or unknown. With the boot id, it tells the process that wrote a record from a later one given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


class ProcessIdentity(TypedDict):
    """Which process wrote an event: the boot it ran in and when it started (with the pid, unique on a host)."""

    boot_id: str | None
    pid_start: int | None


def process_identity() -> ProcessIdentity:
    """``boot_id`` and ``pid_start`` of this process, recorded with every event (:meth:`RunDir.log_event`), so a
    reader can tell whether the process that holds a run is still the one alive under that pid."""
    return ProcessIdentity(boot_id=boot_id(), pid_start=process_start(os.getpid()))


def _fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable (best effort: not every file system allows it)."""
    try:
        dfd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
