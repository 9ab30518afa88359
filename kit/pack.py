"""Artifact bundles for evaluation: `kit pack RUN_DIR` (``kit verify BUNDLE`` is :mod:`kit.verify`).

A bundle is a directory (and a .tar.gz of it) holding the raw run, its
analysis and report, the spec, the image recipes and locks, a snapshot of the
kit's source at the run's commit, the run's claims (hypothesis decisions and
ratios of medians), a README for evaluators mapped to the ACM badges, and
SHA256SUMS over every file. SHA256SUMS proves that the files are unchanged
since packing, not who packed them (the README says so).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from kit.analysis_record import Analysis
from kit.analysis_rows import table_of
from kit.errors import StoreError
from kit.freshness import analysis_bytes
from kit.manifest import Manifest
from kit.records import JsonValue
from kit.safeio import create_exclusive
from kit.store import ANALYSIS, RunDir, atomic_write_bytes, atomic_write_json
from kit.trust import StudyTrust

SUMS = "SHA256SUMS"
KIT_ROOT = Path(__file__).resolve().parents[1]
RUN_EXCLUDE = {"work", ".lock", ".space-reserve"}
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class BundleClaim(TypedDict):
    """One row of a bundle's ``claims.json`` ``claims``: a hypothesis's decision and ratio of medians in one phase.
    ``kit verify`` compares the bundle's rows with those it computes again (:data:`kit.verify.CLAIM_KEYS`)."""

    id: str
    phase: str
    config_id: str | None  # None: a hypothesis across the configurations
    device: str | None
    metric: str
    tested: bool
    rejected: bool | None
    direction: str | None
    ratio: float | None
    ratio_low: float | None
    ratio_high: float | None
    p_adj: float | None
    profile: str


class PaperClaim(TypedDict):
    """One row of ``claims.json`` ``paper_claims``: a claim of the paper as this run judged it."""

    id: str
    source: str
    statement: str
    verdict: str
    value_text: str
    estimate: float | None
    low: float | None
    high: float | None
    reason: str  # "not testable": why
    would_test: str  # "not testable": what would


def claims_of(analysis: Analysis, profile: str) -> list[BundleClaim]:
    """What the run claims: per hypothesis and phase, the decision and the ratio of medians."""
    out: list[BundleClaim] = []
    for h in analysis.hypotheses:
        ratio = table_of((h.comparison or {}).get("ratio")) if h.tested else {}
        device = h.more.get("device")
        out.append({"id": h.id, "phase": h.phase, "config_id": h.config_id,
                    "device": device if isinstance(device, str) else None, "metric": h.metric,
                    "tested": h.tested, "rejected": h.rejected, "direction": h.direction,
                    "ratio": _number(ratio.get("estimate")), "ratio_low": _number(ratio.get("low")),
                    "ratio_high": _number(ratio.get("high")), "p_adj": h.p_adj, "profile": profile})
    return out


def _number(v: JsonValue) -> float | None:
    """A ratio's bound as written (None when it has none: an untested or degenerate comparison)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def paper_claims_of(analysis: Analysis) -> list[PaperClaim]:
    """The paper's claims as this run judged them (kit.analysis.claims): id, verdict and this run's value; for a
    claim not testable here, why and what would test it (the evaluator's host may be the one that can)."""
    rows = (analysis.claims or {}).get("rows") or []
    out: list[PaperClaim] = []
    for r in rows if isinstance(rows, list) else []:
        if not isinstance(r, dict):
            continue
        untestable = r.get("verdict") == "not testable"
        out.append({"id": _text(r["id"]), "source": _text(r["source"]), "statement": _text(r["statement"]),
                    "verdict": _text(r["verdict"]), "value_text": _text(r["value_text"]),
                    "estimate": _number(r.get("estimate")), "low": _number(r.get("low")),
                    "high": _number(r.get("high")), "reason": _text(r.get("reason", "")) if untestable else "",
                    "would_test": _text(r.get("would_test", "")) if untestable else ""})
    return out


def _text(v: JsonValue) -> str:
    """A claim row's text as the ledger writes it (a string; anything else reads as empty)."""
    return v if isinstance(v, str) else ""


def _run_files(rd: RunDir) -> list[Path]:
    """The run's regular files to bundle, refusing any link or special file inside the run directory.

    The kit never writes a link there; one that is found was planted (by a
    trial, or by hand) and may point anywhere on the host, so its target is
    never read. A FIFO would hang the copy. Checked before anything is written.
    """
    import stat as st

    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(rd.path, followlinks=False):
        here = Path(dirpath)
        if here == rd.path:
            dirnames[:] = [d for d in dirnames if d not in RUN_EXCLUDE]
            filenames = [n for n in filenames if n not in RUN_EXCLUDE and not n.startswith(".lock")]
        for name in [*dirnames, *filenames]:
            path = here / name
            mode = path.lstat().st_mode
            if st.S_ISLNK(mode) or not (st.S_ISDIR(mode) or st.S_ISREG(mode)):
                kind = "a symbolic link" if st.S_ISLNK(mode) else "a special file (FIFO, socket or device)"
                raise StoreError(f"the run directory holds {kind}; the kit never writes one, so it was planted",
                                 where=str(path), fix="remove it (a bundle holds the run's regular files only)")
        files.extend(here / n for n in sorted(filenames))
    return files


def _copy_run(rd: RunDir, files: list[Path], dest: Path) -> None:
    """Copy the checked files, opening each without following a link swapped in since the check."""
    for src in files:
        target = dest / src.relative_to(rd.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fin, target.open("wb") as fout:
            shutil.copyfileobj(fin, fout)
        shutil.copystat(src, target, follow_symlinks=False)


def _source_snapshot(commit: str | None, dest: Path) -> str:
    """The kit's source at the run's commit (git archive), else the working tree."""
    if commit:
        res = subprocess.run(["git", "-C", str(KIT_ROOT), "archive", "--format=tar.gz", "--prefix=kit/", "-o",
                              str(dest), commit], capture_output=True, text=True)
        if res.returncode == 0:
            return f"git archive of commit {commit}"
    with tarfile.open(dest, "w:gz") as tar:
        for name in ("kit", "experiments", "images", "reports", "data", "tests", "Makefile", "pyproject.toml", "README.md"):
            p = KIT_ROOT / name
            if p.exists():
                tar.add(p, arcname=f"kit/{name}", filter=lambda ti: None if "__pycache__" in ti.name else _anonymous(ti))
    return "working tree (commit not available)"


def _duration(man: Manifest) -> float | None:
    if man.started and man.ended:
        return man.ended - man.started
    return None


def _readme(man: Manifest, run_name: str, claims: list[BundleClaim], source: str, spec_name: str,
            analysis: Analysis) -> str:
    dur = _duration(man)
    dur_txt = f"{dur / 60:.0f} minutes" if dur else "unknown (the run did not record its end)"
    host = man.host
    gpus = ", ".join(g.get("name", "?") for g in host.get("gpus", [])) or "no GPU"
    profiles = ", ".join(p for p in ("quick", "smoke") if p != man.profile)
    rows = "\n".join(
        f"| {c['id']} | {c['phase']} | {c['metric']} | {'rejected' if c['rejected'] else ('not rejected' if c['tested'] else 'not tested')} "
        f"| {c['direction'] or '–'} | {('{:.3g}'.format(c['ratio'])) if c['ratio'] is not None else '–'} |"
        for c in claims)
    ledger = analysis.claims or {}
    paper = "\n".join(f"| {c['id']} | {c['source']} | {c['statement']} | {c['value_text'] or '–'} | {c['verdict']}"
                      + (f" (would test it: {c['would_test']})" if c["would_test"] else "") + " |"
                      for c in paper_claims_of(analysis)) or "| – | – | the experiment lists no claims of a paper | – | – |"
    return f"""# Artifact: {man.title or man.experiment}

**Did the paper's findings hold?** {ledger.get("headline") or "no claims recorded"}.

Packed by the kit from run `{run_name}` (experiment `{man.experiment}`,
profile `{man.profile}`), measured on {host.get('cpu_model', '?')} with {gpus}.

## Contents

| path | what |
| --- | --- |
| `run/` | the raw run: manifest, one JSON file per trial, every telemetry sample (Parquet), events, analysis.json, report/ |
| `spec/{spec_name}` | the experiment as run |
| `images/` | image matrix, Dockerfile/Apptainer templates, pip locks with hashes, built-image lock (if any) |
| `kit-src.tar.gz` | the kit's source ({source}) |
| `claims.json` | the claims checked by `kit verify` |
| `SHA256SUMS` | digests of every file (`sha256sum -c SHA256SUMS`) |

## Badges (ACM) and how to check them

| badge | how | expected time |
| --- | --- | --- |
| Artifacts Available | this bundle: source, data, recipes and locks, with digests | – |
| Artifacts Evaluated – Functional | `kit verify BUNDLE --profile quick`: integrity, then the whole pipeline re-runs on a small profile ({profiles or 'quick'}) | minutes on a CPU |
| Results Reproduced | `kit verify BUNDLE`: integrity, then the same profile as the original run, and the claims below compared | about {dur_txt} on comparable hardware |

Commands, from the directory that holds the bundle:

```sh
tar xzf BUNDLE/kit-src.tar.gz && cd kit && make setup     # the kit at the run's commit
.venv/bin/kit verify ../BUNDLE --profile quick            # Functional
.venv/bin/kit verify ../BUNDLE                            # Results Reproduced (same protocol; GPU host for the paper profile)
.venv/bin/kit report ../BUNDLE/run                        # re-make the report from the raw data
```

What `integrity: ok` proves: the bundle's files are unchanged since they were packed (they match
SHA256SUMS). It does not prove who packed them, nor that the claims are true: `kit verify` also
re-analyses the bundled raw data and refuses claims that the data do not give, and re-runs the recorded
protocol. A study folder's own code (`run/study/`) is the packer's code: `kit verify` runs it in
containers (network off, read-only) and `kit report` leaves its sections out until you trust it
(`--trust-study-code`, after reading it).

## Claims

| hypothesis | phase | metric | decision | direction | ratio of medians |
| --- | --- | --- | --- | --- | --- |
{rows}

A claim reproduces when the decision is the same and the ratio of medians is within the tolerance
(default ±10 %) of the original.

## The paper's findings, as this run judged them

| claim | source | the paper found | this run | verdict |
| --- | --- | --- | --- | --- |
{paper}

`kit verify` re-judges each of them on the re-run and lists those whose verdict changed.
"""


Filler = Callable[[RunDir, Manifest, Analysis, list[Path], Path], None]


def pack(run_dir: Path, out: Path | None = None, trust: StudyTrust | None = None, filler: Filler | None = None,
         suffix: str = "bundle") -> Path:
    """Make the bundle directory and its .tar.gz; returns the .tar.gz path.

    ``filler`` fills the staged bundle directory instead of the full bundle's :func:`_fill_bundle`
    (:func:`kit.share.pack_share`: a share bundle), ``suffix`` names the default ``RUN_DIR.<suffix>``.

    Both are built under a temporary name beside the destination (``.NAME.tmp-PID-*``) and renamed into
    place when complete: a pack killed at any point leaves at most that temporary directory, which the
    next pack removes once its process is gone; nothing named like the bundle is ever half-written.
    ``trust``: which study code may re-analyse the run (:mod:`kit.trust`).
    """
    from kit.analysis.analyze import current_analysis

    rd = RunDir.open(run_dir)
    man = rd.manifest()
    # never pack an analysis made before the last trial; the full re-hash (a bundle is the last word on a run)
    analysis, _ = current_analysis(rd.path, rd, trust=trust, verify_all=True)
    out = Path(out) if out else rd.path.parent / f"{rd.path.name}.{suffix}"
    tgz = out.parent / f"{out.name}.tar.gz"
    for p in (out, tgz):
        if os.path.lexists(p):
            raise StoreError("bundle already exists", where=str(p), fix="remove it or pass --out elsewhere")
    files = _run_files(rd)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        from kit.errors import disk_error

        raise disk_error(exc, out, "write the bundle") from None
    try:
        stage = tmp / out.name
        stage.mkdir()
        (filler or _fill_bundle)(rd, man, analysis, files, stage)
        staged_tgz = tmp / tgz.name
        with os.fdopen(create_exclusive(staged_tgz), "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
            tar.add(stage, arcname=out.name, filter=_anonymous)
        for p in (out, tgz):  # again: another pack may have finished meanwhile
            if os.path.lexists(p):
                raise StoreError("bundle already exists", where=str(p), fix="remove it or pass --out elsewhere")
        try:
            os.link(staged_tgz, tgz)  # fails instead of replacing anything that appeared at that name
        except OSError as exc:
            if os.path.lexists(tgz) or exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                                                         errno.EMLINK):
                raise
            os.rename(staged_tgz, tgz)  # a file system without hard links (vfat, some FUSE mounts)
        try:
            os.rename(stage, out)  # refuses a non-empty directory that appeared at that name
        except BaseException:
            tgz.unlink(missing_ok=True)
            raise
    except BaseException as exc:
        if isinstance(exc, OSError):
            from kit.errors import disk_error

            raise disk_error(exc, out, "write the bundle") from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tgz


def _anonymous(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member owned by nobody in particular: tar headers otherwise carry the packer's user and group names and
    ids (a leak in a share bundle, and a difference between two packs of the same run by two people)."""
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _remove_stale_temporaries(out: Path) -> None:
    """Temporary bundle directories of packs whose process is gone (killed): removed."""
    import re

    pattern = re.compile(rf"^\.{re.escape(out.name)}\.tmp-(\d+)-")
    for p in out.parent.iterdir():
        m = pattern.match(p.name)
        if not m or p.is_symlink() or not p.is_dir():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # that pack is still running
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except (PermissionError, OverflowError, ValueError):
            continue


def _fill_bundle(rd: RunDir, man: Manifest, analysis: Analysis, files: list[Path], out: Path) -> None:
    _copy_run(rd, files, out / "run")
    # the analysis the claims come from, even where it could not be written back (a read-only run directory)
    atomic_write_bytes(out / "run" / ANALYSIS, analysis_bytes(analysis.to_json()))  # its seal as written
    spec_name = Path(str((man.spec_source.path if man.spec_source else None) or f"{man.experiment}.toml")).name
    if not spec_name.endswith(".toml") or spec_name.startswith("."):  # a crafted manifest names no path here
        spec_name = "experiment.toml"
    (out / "spec").mkdir()
    (out / "spec" / spec_name).write_text(man.spec_source.text if man.spec_source else "", encoding="utf-8")
    if (KIT_ROOT / "images").is_dir():
        shutil.copytree(KIT_ROOT / "images", out / "images", ignore=shutil.ignore_patterns("__pycache__"))
    source = _source_snapshot(man.kit.get("commit"), out / "kit-src.tar.gz")
    claims = claims_of(analysis, man.profile or "paper")
    atomic_write_json(out / "claims.json", {"experiment": man.experiment, "profile": man.profile,
                                            "spec": f"spec/{spec_name}", "tolerance": 0.10, "claims": claims,
                                            "paper_claims": paper_claims_of(analysis),
                                            "packed": time.time(), "run_duration_s": _duration(man)})
    (out / "README.md").write_text(_readme(man, rd.path.name, claims, source, spec_name, analysis),
                                   encoding="utf-8")
    write_sums(out)


def write_sums(root: Path) -> None:
    lines = [f"{sha256(p)}  {p.relative_to(root).as_posix()}" for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != SUMS]
    (root / SUMS).write_text("\n".join(lines) + "\n", encoding="utf-8")
