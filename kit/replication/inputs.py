"""The inputs of `kit map`: run directories and bundles from other people's hosts, loaded and checked.

Every input is data from someone else (ARCHITECTURE.md, *Trust boundaries*): a bundle is verified first with the
kit's own checks (kit.verify: no link or special file, every file matches SHA256SUMS; a .tar.gz is checked member
by member from its headers, with the kit's caps, before anything is extracted, and extracted with tarfile's "data"
filter), its claims.json must agree with its own raw data, and an analysis is reused only when its seal verifies
(kit.freshness); otherwise it is recomputed from the raw data with generic statistics (no study code runs). An
input that fails is kept as :class:`Refused` with the reason, never dropped. The same run given twice (a run
directory and its bundle, or a full and a shared bundle) counts once: its identity is the study, the plan's digest
and its start and end times, which ``kit pack --share`` keeps.
"""

from __future__ import annotations

import hashlib
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.analysis.claim_records import Ledger
from kit.analysis_record import Analysis
from kit.errors import KitError
from kit.manifest import Manifest
from kit.replication.hostclass import HostClass, cap, host_class

Progress = Callable[[int, int, str], None]  # (index from 1, total, the input as given)


@dataclass(frozen=True)
class Loaded:
    """One input that passed the kit's checks: its run's manifest, analysis, ledger and host class."""

    source: str  # the argument as given (capped)
    kind: str  # "run" or "bundle"
    run_id: str  # the run's identity (module docstring), 16 hex digits
    experiment: str
    profile: str
    manifest: Manifest
    analysis: Analysis
    ledger: Ledger | None  # None: the study lists no claims of a paper
    host: HostClass
    reused: bool  # the stored analysis was reused (its seal verified), not recomputed
    # a digest of the trials' numeric results: a second input with the same identity must have the same data
    # (a shared bundle keeps them verbatim), else one of the two was altered and neither is mapped
    data_digest: str = ""


@dataclass(frozen=True)
class Refused:
    """An input that failed the kit's checks, with the reason (listed in the map, never silently dropped)."""

    path: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Inputs:
    loaded: tuple[Loaded, ...]
    refused: tuple[Refused, ...]
    duplicates: tuple[str, ...]  # inputs that were a run already given (counted once)


def run_identity(man: Manifest) -> str:
    """Study, plan digest, start and end: the same for a run directory and its (shared) bundle."""
    text = "|".join(str(x) for x in (man.experiment, man.plan_digest, man.started, man.ended))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def data_digest(run: Path) -> str:
    """SHA-256 over each trial's id, status and numeric results, in trial order: what a run directory, its full
    bundle and its share bundle (which redacts strings, never numbers) have in common."""
    import json
    import math

    from kit.store import RunDir

    h = hashlib.sha256()
    for rec in sorted(RunDir.open(run).trial_records(), key=lambda r: r.trial_id):
        nums = {k: v for k, v in rec.results.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}
        h.update(json.dumps([rec.trial_id, rec.status, nums], sort_keys=True).encode())
    return h.hexdigest()[:16]


def _analysis_of(run: Path, in_bundle: bool) -> tuple[Manifest, Analysis, bool]:
    """The run's analysis: the stored one when its seal verifies, else recomputed (generic statistics, no study
    code); a bundle's run is never written into (that would break its SHA256SUMS)."""
    from kit.analysis.analyze import analyze_run, current_analysis
    from kit.freshness import stored_analysis
    from kit.store import RunDir
    from kit.trust import StudyTrust

    rd = RunDir.open(run)
    man = rd.manifest()
    if not rd.finished_ids():
        raise KitError("the run has no finished trial", where=str(run), fix="give a run that ran (kit status RUN)")
    if not in_bundle:
        analysis, recomputed = current_analysis(run, rd, trust=StudyTrust(allow_list=False), need_study=False)
        return man, analysis, not recomputed
    stored = stored_analysis(rd.path, rd, need_study=False, verify_all=True)  # a bundle: every file re-hashed
    if stored is not None:
        return man, stored, True
    return man, analyze_run(run, trust=StudyTrust(allow_list=False), write=False), False


def _bundle_root(path: Path, tmp: Path) -> Path:
    """A bundle directory as given, or a .tar.gz extracted safely into ``tmp`` (caps and member types checked from
    the headers first: kit.verify.check_members; then the "data" filter: no absolute path, no '..', no link)."""
    from kit.verify import IntegrityError, check_members

    if path.is_dir() and not path.is_symlink():
        return path
    try:
        with tarfile.open(path) as tar:
            members = tar.getmembers()
            check_members(members, str(path))
            tar.extractall(tmp, members=members, filter="data")
    except tarfile.FilterError as exc:
        raise IntegrityError(f"bundle member refused: {exc}", where=str(path),
                             fix="obtain an unmodified bundle made by `kit pack`") from exc
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise IntegrityError(f"bundle cannot be read as a .tar.gz: {exc}", where=str(path),
                             fix="re-download the bundle; it is damaged or not a bundle") from exc
    dirs = [p for p in tmp.iterdir() if p.is_dir()]
    if len(dirs) != 1:
        raise IntegrityError("the archive does not hold one bundle directory", where=str(path),
                             fix="give the .tar.gz that `kit pack` made")
    return dirs[0]


def _check_bundle_claims(root: Path, man: Manifest, analysis: Analysis) -> None:
    """claims.json must name the run's study and profile, and its paper verdicts must be what the raw data give."""
    from kit.pack import paper_claims_of
    from kit.safeio import load_json
    from kit.verify import MAX_META_BYTES, IntegrityError, compare_paper_claims

    meta = load_json(root / "claims.json", MAX_META_BYTES, "claims.json")
    fix = "obtain an unmodified bundle made by `kit pack`"
    if meta.get("experiment") != man.experiment or meta.get("profile") != man.profile:
        raise IntegrityError(f"claims.json is of {cap(meta.get('experiment'))}/{cap(meta.get('profile'))}, the run "
                             f"of {cap(man.experiment)}/{cap(man.profile)}", where=str(root / "claims.json"), fix=fix)
    said = meta.get("paper_claims", [])
    keys = ("id", "statement", "verdict", "value_text")
    if not (isinstance(said, list) and all(isinstance(c, dict) and all(isinstance(c.get(k), str) for k in keys)
                                           for c in said)):
        raise IntegrityError("claims.json paper_claims is not a list of claims (id, statement, verdict, value_text)",
                             where=str(root / "claims.json"), fix=fix)
    if said:
        changed = [c for c in compare_paper_claims(said, paper_claims_of(analysis)) if c["changed"]]
        if changed:
            c = changed[0]
            raise IntegrityError(f"claims.json says claim {cap(c['id'], 24)} was {cap(c['verdict_original'], 16)}, the "
                                 f"bundle's raw data give {cap(c['verdict_rerun'], 16)}",
                                 where=str(root / "claims.json"), fix=fix)


def load_one(path: Path) -> Loaded:
    """One input, checked; KitError (the reason it is refused) otherwise."""
    from kit.verify import SUMS, check_integrity

    source = cap(path, 200)
    if path.is_dir() and (path / "manifest.json").exists() and not (path / SUMS).exists():
        man, analysis, reused = _analysis_of(path, in_bundle=False)
        digest = data_digest(path)
        kind = "run"
    elif (path.is_dir() and (path / SUMS).exists()) or (path.is_file() and path.name.endswith((".tar.gz", ".tgz"))):
        with tempfile.TemporaryDirectory(prefix="kit-map-") as tmp:
            root = _bundle_root(path, Path(tmp))
            check_integrity(root)
            man, analysis, reused = _analysis_of(root / "run", in_bundle=True)
            _check_bundle_claims(root, man, analysis)
            digest = data_digest(root / "run")
        kind = "bundle"
    else:
        raise KitError("not a run directory or bundle", where=source,
                       fix="give run directories (with manifest.json) or bundles made by `kit pack` (.tar.gz or "
                           "directory)")
    ledger = Ledger.from_json(analysis.claims, source) if analysis.claims is not None else None
    return Loaded(source=source, kind=kind, run_id=run_identity(man), experiment=man.experiment,
                  profile=analysis.profile or man.profile or "", manifest=man, analysis=analysis, ledger=ledger,
                  host=host_class(man, analysis), reused=reused, data_digest=digest)


def load_inputs(paths: Sequence[Path], progress: Progress | None = None) -> Inputs:
    """Each input loaded or refused with its reason; a run given twice is kept once (the first given)."""
    loaded: dict[str, Loaded] = {}  # run identity -> the first input of that run
    altered: set[str] = set()  # identities given with different trial results
    refused: list[Refused] = []
    duplicates: list[str] = []
    for i, p in enumerate(paths, 1):
        if progress is not None:
            progress(i, len(paths), cap(p, 200))
        try:
            one = load_one(Path(p))
        except KitError as exc:
            refused.append(Refused(cap(p, 200), cap(exc.one_line(), 400)))
            continue
        except Exception as exc:  # crafted content the checks did not foresee: this input is refused with what
            # went wrong, the other inputs are still mapped (never a traceback for one bad input)
            refused.append(Refused(cap(p, 200), cap(f"cannot be read or analysed: {type(exc).__name__}: {exc}", 400)))
            continue
        first = loaded.get(one.run_id)
        if first is None:
            loaded[one.run_id] = one
        elif first.data_digest == one.data_digest:
            duplicates.append(one.source)
        else:  # the same run by its identity, other trial results: one of the two was altered; neither is mapped
            why = (f"says it is the run given as {first.source} (same study, plan, start and end) but its trial "
                   "results differ: one of the two was altered, so neither is mapped")
            refused += [Refused(one.source, cap(why, 400)),
                        Refused(first.source, cap(f"its run is also given as {one.source} with other trial results: "
                                                  "one of the two was altered, so neither is mapped", 400))]
            altered.add(one.run_id)
    kept = tuple(x for rid, x in loaded.items() if rid not in altered)
    return Inputs(kept, tuple(refused), tuple(duplicates))
