"""Artifact bundles for evaluation: `kit pack RUN_DIR` and `kit verify BUNDLE`.

A bundle is a directory (and a .tar.gz of it) holding the raw run, its
analysis and report, the spec, the image recipes and locks, a snapshot of the
kit's source at the run's commit, the run's claims (hypothesis decisions and
ratios of medians), a README for evaluators mapped to the ACM badges, and
SHA256SUMS over every file. ``verify`` checks integrity first (any changed,
missing or extra file fails), then re-runs the experiment (the bundle's own
profile, or a quicker named one) with the bundled spec and states, claim by
claim, whether the decisions and ratios reproduce within a tolerance.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import KitError, StoreError
from kit.store import ANALYSIS, RunDir, atomic_write_json

SUMS = "SHA256SUMS"
KIT_ROOT = Path(__file__).resolve().parents[1]
RUN_EXCLUDE = {"work", ".lock", ".space-reserve"}
# Limits on a bundle before anything is extracted (a crafted .tar.gz can hold a member of any size
# in a few megabytes). Generous for real runs: the largest paper-profile run measured so far is
# well under 1 GiB of samples.
MAX_MEMBERS = 200_000
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB
MAX_TOTAL_BYTES = 4 << 30  # 4 GiB
MAX_META_BYTES = 16 << 20  # claims.json, SHA256SUMS, analysis.json are read into memory


class IntegrityError(KitError):
    """A bundle file was changed, removed or added after packing."""

    exit_code = 2


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def claims_of(analysis: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    """What the run claims: per hypothesis and phase, the decision and the ratio of medians."""
    out = []
    for h in analysis.get("hypotheses", []):
        ratio = ((h.get("comparison") or {}).get("ratio") or {}) if h.get("tested") else {}
        out.append({"id": h["id"], "phase": h["phase"], "config_id": h["config_id"], "metric": h["metric"],
                    "tested": bool(h.get("tested")), "rejected": h.get("rejected"), "direction": h.get("direction"),
                    "ratio": ratio.get("estimate"), "ratio_low": ratio.get("low"), "ratio_high": ratio.get("high"),
                    "p_adj": h.get("p_adj"), "profile": profile})
    return out


def _run_files(rd: RunDir) -> list[Path]:
    """The run's regular files to bundle, refusing any link or special file inside the run directory.

    The kit never writes a link there; one that is found was planted (by a
    trial, or by hand) and may point anywhere on the host, so its target is
    never read. A FIFO would hang the copy. Checked before anything is written.
    """
    import os
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
    import os

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
                tar.add(p, arcname=f"kit/{name}", filter=lambda ti: None if "__pycache__" in ti.name else ti)
    return "working tree (commit not available)"


def _duration(man: dict[str, Any]) -> float | None:
    if man.get("started") and man.get("ended"):
        return float(man["ended"]) - float(man["started"])
    return None


def _readme(man: dict[str, Any], claims: list[dict[str, Any]], source: str, spec_name: str) -> str:
    dur = _duration(man)
    dur_txt = f"{dur / 60:.0f} minutes" if dur else "unknown (the run did not record its end)"
    host = man.get("host", {})
    gpus = ", ".join(g.get("name", "?") for g in host.get("gpus", [])) or "no GPU"
    profiles = ", ".join(p for p in ("quick", "smoke") if p != man.get("profile"))
    rows = "\n".join(
        f"| {c['id']} | {c['phase']} | {c['metric']} | {'rejected' if c['rejected'] else ('not rejected' if c['tested'] else 'not tested')} "
        f"| {c['direction'] or '–'} | {('{:.3g}'.format(c['ratio'])) if c['ratio'] is not None else '–'} |"
        for c in claims)
    return f"""# Artifact: {man.get('title') or man['experiment']}

Packed by the kit from run `{Path(man.get('run_dir', 'run')).name}` (experiment `{man['experiment']}`,
profile `{man.get('profile')}`), measured on {host.get('cpu_model', '?')} with {gpus}.

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

## Claims

| hypothesis | phase | metric | decision | direction | ratio of medians |
| --- | --- | --- | --- | --- | --- |
{rows}

A claim reproduces when the decision is the same and the ratio of medians is within the tolerance
(default ±10 %) of the original.
"""


def pack(run_dir: Path, out: Path | None = None) -> Path:
    """Make the bundle directory and its .tar.gz; returns the .tar.gz path."""
    rd = RunDir.open(run_dir)
    man = rd.manifest()
    from kit.freshness import current_analysis

    analysis, _ = current_analysis(rd.path)  # never pack an analysis made before the last trial
    out = Path(out) if out else rd.path.parent / f"{rd.path.name}.bundle"
    if out.exists():
        raise StoreError("bundle directory already exists", where=str(out), fix="remove it or pass --out elsewhere")
    files = _run_files(rd)
    out.mkdir(parents=True)
    tgz = out.parent / f"{out.name}.tar.gz"
    try:
        _fill_bundle(rd, man, analysis, files, out)
        with tarfile.open(tgz, "w:gz") as tar:
            tar.add(out, arcname=out.name)
    except BaseException as exc:  # nothing half-written: no bundle directory or archive without SHA256SUMS
        shutil.rmtree(out, ignore_errors=True)
        tgz.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            from kit.errors import disk_error

            raise disk_error(exc, out, "write the bundle") from None
        raise
    return tgz


def _fill_bundle(rd: RunDir, man: dict[str, Any], analysis: dict[str, Any], files: list[Path], out: Path) -> None:
    _copy_run(rd, files, out / "run")
    spec_src = man.get("spec_source", {})
    spec_name = Path(str(spec_src.get("path") or f"{man['experiment']}.toml")).name
    if not spec_name.endswith(".toml") or spec_name.startswith("."):  # a crafted manifest names no path here
        spec_name = "experiment.toml"
    (out / "spec").mkdir()
    (out / "spec" / spec_name).write_text(spec_src.get("text", ""), encoding="utf-8")
    if (KIT_ROOT / "images").is_dir():
        shutil.copytree(KIT_ROOT / "images", out / "images", ignore=shutil.ignore_patterns("__pycache__"))
    source = _source_snapshot(man.get("kit", {}).get("commit"), out / "kit-src.tar.gz")
    claims = claims_of(analysis, man.get("profile", "paper"))
    atomic_write_json(out / "claims.json", {"experiment": man["experiment"], "profile": man.get("profile"),
                                            "spec": f"spec/{spec_name}", "tolerance": 0.10, "claims": claims,
                                            "packed": time.time(), "run_duration_s": _duration(man)})
    (out / "README.md").write_text(_readme({**man, "run_dir": str(rd.path)}, claims, source, spec_name),
                                   encoding="utf-8")
    write_sums(out)


def write_sums(root: Path) -> None:
    lines = [f"{sha256(p)}  {p.relative_to(root).as_posix()}" for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != SUMS]
    (root / SUMS).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _read_small(path: Path, what: str) -> str:
    """A bundle's metadata file as text: a regular file (no link) under MAX_META_BYTES."""
    try:
        st = path.lstat()
    except OSError:
        raise IntegrityError(f"{what} missing", where=str(path), fix="re-download the bundle; it is incomplete") from None
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise IntegrityError(f"{what} is not a regular file (a link or device)", where=str(path),
                             fix="a bundle holds regular files only; obtain an unmodified copy")
    if st.st_size > MAX_META_BYTES:
        raise IntegrityError(f"{what} is {st.st_size} bytes, more than the {MAX_META_BYTES} a bundle may hold",
                             where=str(path), fix="obtain an unmodified copy of the bundle")
    return path.read_text(encoding="utf-8", errors="replace")


def _no_links(root: Path) -> list[Path]:
    """Every regular file under ``root``; IntegrityError for a link or special file (never followed)."""
    import os
    import stat

    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            mode = p.lstat().st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise IntegrityError(f"bundle holds a link or special file: {p.relative_to(root).as_posix()}",
                                     where=str(root), fix="a bundle holds regular files only; obtain an unmodified copy")
            if stat.S_ISREG(mode):
                files.append(p)
    return files


def check_integrity(root: Path) -> int:
    """Raise IntegrityError listing every changed, missing or extra file; return the file count.

    Links and special files are refused before any file is read: a crafted
    bundle directory must not make the kit hash (or later load) a host file.
    """
    files = _no_links(root)
    expected = {}
    for line in _read_small(root / SUMS, SUMS).splitlines():
        digest, _, name = line.partition("  ")
        expected[name] = digest
    present = {p.relative_to(root).as_posix() for p in files if p.name != SUMS}
    problems = [f"missing {n}" for n in sorted(set(expected) - present)]
    problems += [f"extra {n}" for n in sorted(present - set(expected))]
    problems += [f"changed {n}" for n in sorted(set(expected) & present) if sha256(root / n) != expected[n]]
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise IntegrityError(f"bundle integrity check failed: {shown}", where=str(root),
                             fix="obtain an unmodified copy of the bundle (its files must match SHA256SUMS)")
    return len(expected)


@dataclass(frozen=True)
class VerifyOptions:
    profile: str | None = None  # None: the bundle run's own profile
    tolerance: float | None = None  # None: the bundle's (claims.json)
    runs_root: Path | None = None
    backend: str = "local"
    data_dir: Path | None = None


def check_members(members: list[tarfile.TarInfo], where: str) -> None:
    """Caps and types of a bundle's members, checked from the headers before anything is extracted."""
    if len(members) > MAX_MEMBERS:
        raise IntegrityError(f"bundle has {len(members)} members, more than the limit of {MAX_MEMBERS}", where=where,
                             fix="obtain an unmodified bundle made by `kit pack`")
    total = 0
    for m in members:
        if not (m.isfile() or m.isdir()):
            raise IntegrityError(f"bundle member {m.name!r} is a link or special file", where=where,
                                 fix="a bundle holds regular files and directories only")
        if m.size > MAX_MEMBER_BYTES:
            raise IntegrityError(f"bundle member {m.name!r} is {m.size} bytes, more than the limit of "
                                 f"{MAX_MEMBER_BYTES} per file", where=where,
                                 fix="obtain an unmodified bundle made by `kit pack`")
        total += m.size
        if total > MAX_TOTAL_BYTES:
            raise IntegrityError(f"bundle members add up to more than the limit of {MAX_TOTAL_BYTES} bytes",
                                 where=where, fix="obtain an unmodified bundle made by `kit pack`")


def _open_bundle(bundle: Path, tmp: Path) -> Path:
    if bundle.is_dir() and not bundle.is_symlink():
        return bundle
    if bundle.is_file() and bundle.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(bundle) as tar:
                members = tar.getmembers()  # headers only: sizes are checked before a byte is written
                check_members(members, str(bundle))
                tar.extractall(tmp, members=members, filter="data")
        except tarfile.FilterError as exc:
            raise IntegrityError(f"bundle member refused: {exc}", where=str(bundle),
                                 fix="obtain an unmodified bundle made by `kit pack`") from exc
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise IntegrityError(f"bundle cannot be read as a .tar.gz: {exc}", where=str(bundle),
                                 fix="re-download the bundle; it is damaged or not a bundle") from exc
        dirs = [p for p in tmp.iterdir() if p.is_dir()]
        if len(dirs) == 1:
            return dirs[0]
    raise StoreError("not a bundle", where=str(bundle), fix="give the .tar.gz or the directory that `kit pack` made")


def _bundled_spec(root: Path, name: Any, sums: set[str]) -> Path:
    """The spec inside the bundle: a relative path, no '..', no link, listed in SHA256SUMS."""
    import os

    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts:
        raise IntegrityError(f"claims.json names the spec {name!r}, which is not a path inside the bundle",
                             where=str(root / "claims.json"), fix="obtain an unmodified bundle made by `kit pack`")
    rel = Path(name).as_posix()
    if rel not in sums:
        raise IntegrityError(f"the spec {rel} is not covered by SHA256SUMS", where=str(root / SUMS),
                             fix="obtain an unmodified bundle made by `kit pack`")
    return root / rel  # check_integrity has refused links, so this is a regular file inside root


def _bundled_claims(root: Path, meta: dict[str, Any], man: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims, checked against the bundled run: same experiment and profile, equal to its analysis."""
    where = str(root / "claims.json")
    claims = meta.get("claims")
    if not isinstance(claims, list) or not claims:
        raise IntegrityError("the bundle makes no claims: there is nothing to reproduce", where=where,
                             fix="pack a run whose analysis has hypotheses (kit pack RUN)")
    if meta.get("experiment") != man.get("experiment") or meta.get("profile") != man.get("profile"):
        raise IntegrityError(f"claims.json is for {meta.get('experiment')!r}/{meta.get('profile')!r} but the bundled "
                             f"run is {man.get('experiment')!r}/{man.get('profile')!r}", where=where,
                             fix="obtain an unmodified bundle made by `kit pack`")
    analysis = json.loads(_read_small(root / "run" / ANALYSIS, "run/analysis.json"))
    from kit.freshness import DIGEST_KEY, raw_digest

    if analysis.get(DIGEST_KEY) is not None and analysis[DIGEST_KEY] != raw_digest(root / "run"):
        raise IntegrityError("the bundled analysis.json is not the analysis of the bundled trial files", where=where,
                             fix="re-pack the run (kit pack recomputes a stale analysis)")
    bundled = claims_of(analysis, str(man.get("profile", "paper")))
    if json.dumps(claims, sort_keys=True) != json.dumps(bundled, sort_keys=True):
        raise IntegrityError("claims.json does not match the bundled run's analysis.json", where=where,
                             fix="obtain an unmodified bundle made by `kit pack`")
    return claims


def compare_claims(old: list[dict[str, Any]], new: list[dict[str, Any]], tolerance: float) -> list[dict[str, Any]]:
    by_key = {(c["id"], c["phase"], c["config_id"]): c for c in new}
    out = []
    for c in old:
        n = by_key.get((c["id"], c["phase"], c["config_id"]))
        if n is None:
            out.append({**c, "reproduced": False, "why": "not in the re-run"})
            continue
        same_decision = (c["tested"], c["rejected"], c["direction"] if c["rejected"] else None) == \
                        (n["tested"], n["rejected"], n["direction"] if n["rejected"] else None)
        ratio_ok = True
        why = []
        if c["ratio"] is not None and n["ratio"] is not None:
            rel = n["ratio"] / c["ratio"] - 1.0
            ratio_ok = abs(rel) <= tolerance
            if not ratio_ok:
                why.append(f"ratio {n['ratio']:.3g} vs {c['ratio']:.3g} ({rel:+.1%}, tolerance ±{tolerance:.0%})")
        if not same_decision:
            why.append(f"decision {'rejected' if n['rejected'] else 'not rejected'} vs "
                       f"{'rejected' if c['rejected'] else 'not rejected'} originally")
        out.append({**c, "new_ratio": n["ratio"], "new_rejected": n["rejected"], "new_direction": n["direction"],
                    "reproduced": same_decision and ratio_ok, "why": "; ".join(why)})
    return out


def verify(bundle: Path, opts: VerifyOptions | None = None, events: Any = None) -> dict[str, Any]:
    """Integrity, re-run, claims: the evaluator's three questions, answered in order."""
    from kit.analysis.analyze import analyze_run
    from kit.runner import RunOptions, start_run
    from kit.spec import load_spec

    opts = opts or VerifyOptions()
    with tempfile.TemporaryDirectory(prefix="kit-verify-") as tmp:
        root = _open_bundle(Path(bundle), Path(tmp))
        n_files = check_integrity(root)
        sums = {line.partition("  ")[2] for line in _read_small(root / SUMS, SUMS).splitlines()}
        try:
            meta = json.loads(_read_small(root / "claims.json", "claims.json"))
            man = json.loads(_read_small(root / "run" / "manifest.json", "run/manifest.json"))
        except ValueError as exc:
            raise IntegrityError(f"bundle metadata is not valid JSON: {exc}", where=str(root),
                                 fix="obtain an unmodified bundle made by `kit pack`") from exc
        if not isinstance(meta, dict) or not isinstance(man, dict):
            raise IntegrityError("claims.json or run/manifest.json is not a JSON object", where=str(root),
                                 fix="obtain an unmodified bundle made by `kit pack`")
        _bundled_claims(root, meta, man)
        spec_path = _bundled_spec(root, meta.get("spec"), sums)
        profile = opts.profile or meta.get("profile") or "paper"
        tolerance = opts.tolerance if opts.tolerance is not None else meta.get("tolerance", 0.10)
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 10:
            raise IntegrityError(f"tolerance {tolerance!r} is not a number in [0, 10)", where="claims.json tolerance",
                                 fix="pass --tolerance, or obtain an unmodified bundle")
        # A study folder's run carries its copy of the folder (run/study/, covered by SHA256SUMS): the re-run
        # loads and runs that copy, so the evaluator needs nothing but the kit. It is the bundle's code.
        from kit.studies import checked_copy

        study_copy = checked_copy(root / "run", man)
        spec = load_spec(study_copy if study_copy is not None else spec_path, None if profile == "paper" else profile)
        if spec.experiment.id != man.get("experiment"):
            raise IntegrityError(f"the bundled spec is experiment {spec.experiment.id!r}, the bundled run "
                                 f"{man.get('experiment')!r}", where=str(spec_path),
                                 fix="obtain an unmodified bundle made by `kit pack`")
        runs_root = opts.runs_root or (Path(bundle).parent / "verify-runs")
        rd = start_run(spec, RunOptions(runs_root=runs_root, backend=opts.backend, data_dir=opts.data_dir), events)
        analysis = analyze_run(rd.path)
        from kit.report import write_report

        write_report(rd.path, analysis, ("html",))
        new_claims = claims_of(analysis, profile)
        results = compare_claims(meta["claims"], new_claims, tolerance)
    same_profile = profile == meta.get("profile") == man.get("profile")
    # At least one tested claim: a bundle whose claims are all "not tested" has nothing to reproduce.
    reproduced = any(r["tested"] for r in results) and all(r["reproduced"] for r in results)
    return {
        "bundle": str(bundle), "files_verified": n_files, "integrity": "ok",
        "profile_original": meta.get("profile"), "profile_rerun": profile, "same_profile": same_profile,
        "rerun_dir": str(rd.path), "rerun_status": rd.manifest().get("status"), "tolerance": tolerance,
        "claims": results, "claims_reproduced": reproduced,
        "badges": {
            "available": True,
            "functional": rd.manifest().get("status") == "complete",
            "results_reproduced": reproduced and same_profile,
        },
        "note": None if same_profile else (
            f"the re-run used profile {profile!r}, the claims come from {meta.get('profile')!r}: "
            "agreement is indicative, not a reproduction of the original protocol"),
    }
