"""`kit verify BUNDLE`: is the bundle unchanged, does the study re-run, do its claims reproduce?

A bundle comes from someone else, so everything in it is data and any code
in it is the packer's, not the kit's:

1. **Integrity**: every file matches SHA256SUMS, no link or special file.
   This proves only that the files are unchanged since they were packed
   (:data:`INTEGRITY_MEANS`), not who packed them: a packer can re-seal
   anything.
2. **The bundle is consistent with its own raw data**: the bundled run is
   re-analysed here (generic statistics, no bundle code), and claims.json must
   be what that analysis gives; the spec in the bundle, the study copy's
   experiment.toml and the manifest's copy must be the same text, and, for
   the recorded profile, resolve to the recorded spec and rebuild the
   recorded plan (trials, configurations, seeds). A bundle whose study
   protocol differs from the recorded one is refused, naming the difference.
3. **The re-run** uses that protocol (the recorded seed and arms). Bundle
   study code (a ``study/`` copy that is not byte for byte the kit's own
   bundled study) runs in containers by default (network off, read-only
   root, no capabilities), on the local backend only with
   ``--trust-bundle-code`` (and the output says it ran unsandboxed).
4. **The verdict** is decided in this process, which never imports bundle
   code: the hypotheses are the generic analysis's; the study's own
   analysis/report hooks run only when trusted, and then in a child process
   that can only answer in JSON (:mod:`kit.study_child`), so they cannot
   rebind the function that compares the claims.
"""

from __future__ import annotations

import math
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from kit.analysis_record import Analysis
from kit.errors import ExitCode, KitError, PlanError, StoreError
from kit.manifest import Manifest
from kit.pack import SUMS, BundleClaim, PaperClaim, claims_of, paper_claims_of, sha256
from kit.records import JsonTable
from kit.safeio import parse_json, read_capped
from kit.share import ShareVerification
from kit.store import ANALYSIS, MAX_ANALYSIS_BYTES
from kit.trust import StudyTrust

# Limits on a bundle before anything is extracted (a crafted .tar.gz can hold a member of any size
# in a few megabytes). Generous for real runs: the largest paper-profile run measured so far is
# well under 1 GiB of samples.
MAX_MEMBERS = 200_000
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB
MAX_TOTAL_BYTES = 4 << 30  # 4 GiB
MAX_META_BYTES = 16 << 20  # claims.json, SHA256SUMS, the spec are read into memory
INTEGRITY_MEANS = ("the bundle's files are unchanged since they were packed (they match its SHA256SUMS); "
                   "this does not say who packed them or that the packer's claims are true")
FIX_UNMODIFIED = "obtain an unmodified bundle made by `kit pack`"


class IntegrityError(KitError):
    """A bundle file was changed, removed or added after packing, or the bundle contradicts itself."""

    exit_code = ExitCode.INPUT


@dataclass(frozen=True)
class VerifyOptions:
    profile: str | None = None  # None: the bundle run's own profile
    tolerance: float | None = None  # None: the bundle's (claims.json)
    runs_root: Path | None = None
    backend: str = "auto"  # auto: containers for bundle code, the local backend for a bundle without code
    data_dir: Path | None = None
    trust_bundle_code: bool = False  # run the bundle's study code unsandboxed locally, and its hooks
    integrity_only: bool = False  # stop after step 1 (SHA256SUMS, no link or special file): nothing analysed or run


def _read_small(path: Path, what: str, max_bytes: int = MAX_META_BYTES) -> str:
    """A bundle's metadata file as text: a regular file (no link, no FIFO) under ``max_bytes``."""
    try:
        data = read_capped(path, max_bytes, what, fix=FIX_UNMODIFIED)
    except StoreError as exc:
        raise IntegrityError(exc.cause, where=exc.where, fix=exc.fix) from None
    assert data is not None
    return data.decode("utf-8", errors="replace")


def _json_object(path: Path, what: str, max_bytes: int = MAX_META_BYTES) -> JsonTable:
    try:
        return parse_json(_read_small(path, what, max_bytes).encode(), str(path), what, dict, FIX_UNMODIFIED)
    except StoreError as exc:
        raise IntegrityError(exc.cause, where=exc.where, fix=exc.fix) from None


def _no_links(root: Path) -> list[Path]:
    """Every regular file under ``root``; IntegrityError for a link or special file (never followed)."""
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
    if not isinstance(name, str) or not name or os.path.isabs(name) or ".." in Path(name).parts:
        raise IntegrityError(f"claims.json names the spec {name!r}, which is not a path inside the bundle",
                             where=str(root / "claims.json"), fix="obtain an unmodified bundle made by `kit pack`")
    rel = Path(name).as_posix()
    if rel not in sums:
        raise IntegrityError(f"the spec {rel} is not covered by SHA256SUMS", where=str(root / SUMS),
                             fix="obtain an unmodified bundle made by `kit pack`")
    return root / rel  # check_integrity has refused links, so this is a regular file inside root


class ClaimCheck(BundleClaim):
    """A bundle's claim beside the re-run's (``kit verify --json`` ``claims``); ``new_*`` absent when the re-run
    has no such row."""

    reproduced: bool
    why: str
    new_ratio: NotRequired[float | None]
    new_rejected: NotRequired[bool | None]
    new_direction: NotRequired[str | None]
    new_tested: NotRequired[bool]


class PaperCheck(TypedDict):
    """A paper claim's verdict in the bundle beside the re-run's (``kit verify --json`` ``paper_claims``)."""

    id: str
    statement: str
    verdict_original: str
    value_original: str
    verdict_rerun: str
    value_rerun: str
    changed: bool


class KeptOptions(TypedDict, total=False):
    """The recorded run options a re-run of the recorded profile keeps."""

    seed: int
    arms: tuple[str, ...] | None


def compare_claims(old: list[BundleClaim], new: list[BundleClaim], tolerance: float) -> list[ClaimCheck]:
    # across configurations a hypothesis has one row per device (kit.analysis.across): the device is in the key
    by_key = {(c["id"], c["phase"], c["config_id"], c.get("device")): c for c in new}
    out: list[ClaimCheck] = []
    for c in old:
        n = by_key.get((c["id"], c["phase"], c["config_id"], c.get("device")))
        if n is None:
            out.append({**c, "reproduced": False, "why": "not in the re-run"})
            continue
        same_decision = (c["tested"], c["rejected"], c["direction"] if c["rejected"] else None) == \
                        (n["tested"], n["rejected"], n["direction"] if n["rejected"] else None)
        ratio_ok = True
        why = []
        if c["ratio"] and n["ratio"] is not None:
            rel = n["ratio"] / c["ratio"] - 1.0
            ratio_ok = abs(rel) <= tolerance
            if not ratio_ok:
                why.append(f"ratio {n['ratio']:.3g} vs {c['ratio']:.3g} ({rel:+.1%}, tolerance ±{tolerance:.0%})")
        if not same_decision:
            why.append(f"decision {'rejected' if n['rejected'] else 'not rejected'} vs "
                       f"{'rejected' if c['rejected'] else 'not rejected'} originally")
        out.append({**c, "new_ratio": n["ratio"], "new_rejected": n["rejected"], "new_direction": n["direction"],
                    "new_tested": n["tested"], "reproduced": same_decision and ratio_ok, "why": "; ".join(why)})
    return out


CLAIM_KEYS = ("id", "phase", "config_id", "device", "metric", "tested", "rejected", "direction", "profile")
CLAIM_NUMBERS = ("ratio", "ratio_low", "ratio_high", "p_adj")


def _claim_difference(a: Sequence[object], b: list[BundleClaim]) -> str | None:
    """The first way two claim lists differ (numbers within a relative 1e-6), None when they agree."""
    if len(a) != len(b):
        return f"{len(a)} claims, the raw data give {len(b)}"
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, dict):
            return f"a claim is {type(x).__name__}, not a table"
        for k in CLAIM_KEYS:
            if x.get(k) != y.get(k):
                return f"{y.get('id')}/{y.get('phase')} {k}: {x.get(k)!r} claimed, {y.get(k)!r} from the raw data"
        for k in CLAIM_NUMBERS:
            u, v = x.get(k), y.get(k)
            if u is None and v is None:
                continue
            if not (isinstance(u, (int, float)) and isinstance(v, (int, float)) and not isinstance(u, bool)
                    and math.isclose(u, v, rel_tol=1e-6, abs_tol=1e-12)):
                return f"{y.get('id')}/{y.get('phase')} {k}: {u!r} claimed, {v!r} from the raw data"
    return None


def _paper_difference(a: Any, b: list[PaperClaim]) -> str | None:
    """The first way the bundle's paper-claim verdicts differ from the bundled raw data's, None when they agree."""
    if not isinstance(a, list) or len(a) != len(b):
        return f"{len(a) if isinstance(a, list) else 'no'} paper claims, the raw data give {len(b)}"
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, dict):
            return f"a paper claim is {type(x).__name__}, not a table"
        for k in ("id", "verdict"):
            if x.get(k) != y.get(k):
                return f"paper claim {y['id']} {k}: {x.get(k)!r} claimed, {y.get(k)!r} from the raw data"
        for k in ("estimate", "low", "high"):
            u, v = x.get(k), y.get(k)
            if u is None and v is None:
                continue
            if not (isinstance(u, (int, float)) and isinstance(v, (int, float)) and not isinstance(u, bool)
                    and math.isclose(u, v, rel_tol=1e-6, abs_tol=1e-12)):
                return f"paper claim {y['id']} {k}: {u!r} claimed, {v!r} from the raw data"
    return None


def compare_paper_claims(old: list[PaperClaim], new: list[PaperClaim]) -> list[PaperCheck]:
    """Each paper claim's verdict in the bundle beside the re-run's, and whether it changed."""
    by_id = {c["id"]: c for c in new}
    out: list[PaperCheck] = []
    for c in old:
        n = by_id.get(c["id"])
        out.append({"id": c["id"], "statement": c["statement"], "verdict_original": c["verdict"],
                    "value_original": c["value_text"], "verdict_rerun": n["verdict"] if n else "not in the re-run",
                    "value_rerun": n["value_text"] if n else "", "changed": n is None or n["verdict"] != c["verdict"]})
    return out


def _bundled_claims(root: Path, meta: JsonTable, man: Manifest, recomputed: Analysis) -> list[BundleClaim]:
    """The claims, checked against the bundled run: same experiment and profile, equal to its analysis.json,
    and what this kit computes from the bundled raw data (a forged analysis.json or claims.json is caught)."""
    from kit import __version__

    where = str(root / "claims.json")
    claims = meta.get("claims")
    if not isinstance(claims, list) or not claims:
        raise IntegrityError("the bundle makes no claims: there is nothing to reproduce", where=where,
                             fix="pack a run whose analysis has hypotheses (kit pack RUN)")
    if meta.get("experiment") != man.experiment or meta.get("profile") != man.profile:
        raise IntegrityError(f"claims.json is for {meta.get('experiment')!r}/{meta.get('profile')!r} but the bundled "
                             f"run is {man.experiment!r}/{man.profile!r}", where=where,
                             fix=FIX_UNMODIFIED)
    profile = man.profile or "paper"
    fresh = claims_of(recomputed, profile)
    diff = _claim_difference(claims, fresh)
    if diff is None and "paper_claims" in meta:  # bundles packed before paper claims existed have none
        diff = _paper_difference(meta["paper_claims"], paper_claims_of(recomputed))
    if diff is not None:
        packed_by = man.kit.get("version")
        raise IntegrityError(f"claims.json is not what the bundled raw data give ({diff})", where=where,
                             fix=FIX_UNMODIFIED + (f"; the run was made by kit {packed_by}, this is {__version__}: "
                                                   "verify with the kit in kit-src.tar.gz" if packed_by != __version__
                                                   else ""))
    bundled = _json_object(root / "run" / ANALYSIS, "run/analysis.json", MAX_ANALYSIS_BYTES)
    try:  # read as every reader reads it (typed, checked at the edge): a malformed one is not the analysis
        typed = Analysis.from_json(bundled, "run/analysis.json")
        # the typed reading reads a value of the wrong type as empty (a forged ``"tested": "yes"`` as False): a file
        # the kit wrote reads back to itself, so one that does not is not the kit's analysis
        stored = claims_of(typed, profile) if typed.to_json() == bundled else None
    except (StoreError, KeyError, TypeError, AttributeError):
        stored = None
    if stored is None or _claim_difference(stored, fresh) is not None:
        raise IntegrityError("the bundled analysis.json is not the analysis of the bundled raw data", where=where,
                             fix="re-pack the run (kit pack recomputes an analysis that does not match its data)")
    return fresh


def bundle_code(run: Path, man: Manifest, spec: Any) -> str | None:
    """The digest of the bundle's study code when the spec to re-run is a study's (its own workload modules) that
    is not byte for byte the kit's own bundled study; None when the re-run runs only the kit's own code."""
    from kit.studies import resolve_hooks

    if spec.study is None:
        return None
    hooks = resolve_hooks(run, man, StudyTrust(trust_run_copy=True))
    return None if hooks.kind == "bundled" else hooks.digest


def _recorded_protocol(root: Path, meta: JsonTable, man: Manifest, sums: set[str],
                       profile: str) -> tuple[Any, KeptOptions]:
    """The spec to re-run, shown to be the protocol the run recorded, and the run options that keep it
    (the recorded seed and arms for the recorded profile).

    A study's code comes from the bundled run's copy (run/study/, covered by the manifest's study entry) and
    nowhere else: a spec elsewhere in the bundle is read as text, never as a folder whose modules would run.
    """
    from kit.run.resume import recorded_plan
    from kit.spec import load_spec, parse_spec
    from kit.studies import STUDY_FILE, checked_copy

    spec_path = _bundled_spec(root, meta.get("spec"), sums)
    text = man.spec_source.text if man.spec_source is not None else None
    if not text:
        raise IntegrityError("the bundled run recorded no copy of its spec (manifest spec_source.text)",
                             where=str(root / "run" / "manifest.json"), fix=FIX_UNMODIFIED)
    if _read_small(spec_path, "the bundled spec") != text:
        raise IntegrityError(f"{spec_path.relative_to(root).as_posix()} is not the spec the run recorded "
                             "(manifest spec_source.text)", where=str(spec_path), fix=FIX_UNMODIFIED)
    try:
        copy = checked_copy(root / "run", man)
    except StoreError as exc:
        raise IntegrityError(exc.cause, where=exc.where, fix=FIX_UNMODIFIED) from None
    if copy is not None and _read_small(copy / STUDY_FILE, "the study's experiment.toml") != text:
        raise IntegrityError("the bundled study's experiment.toml is not the spec the run recorded (manifest "
                             "spec_source.text): the re-run would follow another protocol", where=str(copy / STUDY_FILE),
                             fix=FIX_UNMODIFIED)
    name = None if profile == "paper" else profile
    spec = load_spec(copy, name) if copy is not None else parse_spec(text, str(spec_path), name)
    if spec.study is not None and copy is None:
        raise IntegrityError("the recorded spec is a study folder's ([study] table) but the bundled run holds no "
                             "copy of that folder (run/study/ and the manifest's study entry)", where=str(spec_path),
                             fix=FIX_UNMODIFIED)
    if spec.experiment.id != man.experiment:
        raise IntegrityError(f"the bundled spec is experiment {spec.experiment.id!r}, the bundled run "
                             f"{man.experiment!r}", where=str(spec_path), fix=FIX_UNMODIFIED)
    if profile != man.profile:
        return spec, {}
    try:  # strict: every setting the spec resolves to must be recorded (a packer cannot drop one from the record)
        plan = recorded_plan(spec, man, str(root / "run" / "manifest.json"), strict=True)
    except PlanError as exc:
        raise IntegrityError(f"the bundled study differs from the protocol the run recorded: {exc.cause}",
                             where=str(copy / STUDY_FILE) if copy is not None else str(spec_path),
                             fix=FIX_UNMODIFIED + "; a bundle made by another kit version is verified with the kit "
                             "in its kit-src.tar.gz") from None
    arms = plan.arms if tuple(plan.arms) != tuple(spec.experiment.frameworks) else None
    return spec, {"seed": plan.seed, "arms": arms}


def choose_backend(requested: str, code: str | None, trust_code: bool, network: bool = False) -> tuple[str, str]:
    """The re-run's backend and a line saying where the bundle's code ran (and whether it had the network)."""
    if requested == "auto":
        if code is None:
            return "local", "local backend: the bundle carries no study code (the kit's own workloads ran)"
        if trust_code:
            requested = "local"
        else:
            from kit.backends import make_backend

            probe = make_backend("docker").available()
            if not probe.ok:
                raise KitError(f"the bundle carries study code (digest {code[:12]}) and no container engine is "
                               f"reachable to run it sandboxed ({probe.detail})", where="kit verify --backend",
                               fix="start Docker or Podman (see `kit doctor`) or, after reading the code in the "
                                   "bundle's run/study/, pass --backend local --trust-bundle-code to run it "
                                   "unsandboxed on this host")
            requested = "docker"
    if code is not None and requested == "local":
        if not trust_code:
            raise KitError(f"the bundle carries study code (digest {code[:12]}); the local backend would run it "
                           "unsandboxed on this host", where="kit verify --backend local",
                           fix="use a container backend (--backend docker), or read the code in the bundle's "
                               "run/study/ and add --trust-bundle-code")
        return "local", ("local backend: the bundle's study code ran UNSANDBOXED on this host "
                         "(--trust-bundle-code)")
    if code is not None:
        if network and not trust_code:
            raise KitError("the bundle's spec gives its containers the network ([container] network = true); its "
                           "study code would run with network access", where="kit verify",
                           fix="read the code in the bundle's run/study/ and add --trust-bundle-code to allow it")
        net = "network ON (the spec's [container] network = true)" if network else "network off"
        return requested, (f"{requested} backend: the bundle's study code ran in containers ({net}, read-only "
                           "root, no capabilities)")
    return requested, f"{requested} backend: the bundle carries no study code (the kit's own workloads ran)"


def _verify_share(root: Path, bundle: Path, n_files: int) -> ShareVerification:
    """A share bundle (:mod:`kit.share`) whose files match SHA256SUMS: its marker and run agree (no recorded
    environment, the marker's host class), and its claims and analysis are what its raw data give (re-analysed
    here with generic statistics, as for a full bundle). It is not re-run: no "reproduced" badge."""
    from kit.analysis.analyze import analyze_run
    from kit.share import SHARE_FILE, SHARE_NOTE, check_marker, check_share_run
    from kit.store import RunDir

    try:
        marker = check_marker(_json_object(root / SHARE_FILE, SHARE_FILE), str(root / SHARE_FILE))
        rd = RunDir.open(root / "run")
        man = rd.manifest()
        check_share_run(man, rd.trial_records(), marker, str(root / SHARE_FILE))
    except StoreError as exc:
        raise IntegrityError(exc.cause, where=exc.where, fix=exc.fix) from None
    recomputed = analyze_run(root / "run", trust=StudyTrust(allow_list=False), write=False)
    claims = _bundled_claims(root, _json_object(root / "claims.json", "claims.json"), man, recomputed)
    headline = (recomputed.claims or {}).get("headline")
    return {"bundle": str(bundle), "files_verified": n_files, "integrity": "ok", "integrity_means": INTEGRITY_MEANS,
            "integrity_only": False, "share": True, "redacted": marker["redacted"],
            "host": marker["host"], "claims": claims,
            "claims_tested": sum(1 for c in claims if c["tested"]), "claims_changed": [],
            "paper_claims": paper_claims_of(recomputed), "paper_headline": headline if isinstance(headline, str) else None,
            "badges": {"available": True, "functional": False, "results_reproduced": False}, "note": SHARE_NOTE}


def verify(bundle: Path, opts: VerifyOptions | None = None, events: Any = None,
           on_integrity: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Integrity, consistency, re-run, claims: the evaluator's questions, answered in order (module docstring).

    ``on_integrity(n_files)`` is called as soon as the bundle's files match SHA256SUMS, before anything is analysed
    or run (the CLI says "integrity: ok" first); with ``opts.integrity_only`` verification stops there."""
    from kit.store import RunDir

    opts = opts or VerifyOptions()
    with tempfile.TemporaryDirectory(prefix="kit-verify-") as tmp:
        root = _open_bundle(Path(bundle), Path(tmp))
        n_files = check_integrity(root)
        if on_integrity is not None:
            on_integrity(n_files)
        if opts.integrity_only:
            return {"bundle": str(bundle), "files_verified": n_files, "integrity": "ok",
                    "integrity_means": INTEGRITY_MEANS, "integrity_only": True}
        if (root / "share.json").is_file():  # `kit pack --share`: checked against its raw data, never re-run
            return dict(_verify_share(root, Path(bundle), n_files))
        from kit.analysis.analyze import analyze_run
        from kit.report import write_report
        from kit.run import RunOptions, start_run

        sums = {line.partition("  ")[2] for line in _read_small(root / SUMS, SUMS).splitlines()}
        meta = _json_object(root / "claims.json", "claims.json")
        try:
            man = RunDir.open(root / "run").manifest()
        except StoreError as exc:
            raise IntegrityError(f"the bundled run cannot be read: {exc.cause}", where=exc.where,
                                 fix=FIX_UNMODIFIED) from None
        # generic statistics only: no study code at all (not even a digest on the user's allow-list)
        recomputed = analyze_run(root / "run", trust=StudyTrust(allow_list=False), write=False)
        claims = _bundled_claims(root, meta, man, recomputed)
        profile = opts.profile or meta.get("profile") or "paper"
        if not isinstance(profile, str):
            raise IntegrityError(f"profile {profile!r} is not a name", where="claims.json profile", fix=FIX_UNMODIFIED)
        tolerance = opts.tolerance if opts.tolerance is not None else meta.get("tolerance", 0.10)
        if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 <= tolerance < 10:
            raise IntegrityError(f"tolerance {tolerance!r} is not a number in [0, 10)", where="claims.json tolerance",
                                 fix="pass --tolerance, or obtain an unmodified bundle")
        spec, keep = _recorded_protocol(root, meta, man, sums, profile)
        code = bundle_code(root / "run", man, spec)
        backend, where_ran = choose_backend(opts.backend, code, opts.trust_bundle_code, spec.container.network)
        run_opts = RunOptions(runs_root=opts.runs_root or (Path(bundle).parent / "verify-runs"), backend=backend,
                              data_dir=opts.data_dir, seed=keep.get("seed"), arms=keep.get("arms"))
        rows = {fw: v["row"] for fw, v in (man.backend.get("images") or {}).items()
                if isinstance(v, dict) and isinstance(v.get("row"), str)}
        if backend != "local" and rows:
            run_opts.backend_options["images"] = rows  # the image rows the run used
        rd = start_run(spec, run_opts, events)
        trust = StudyTrust(trust_run_copy=opts.trust_bundle_code)
        analysis = analyze_run(rd.path, trust=trust)
        write_report(rd.path, analysis, ("html",), trust)
        results = compare_claims(claims, claims_of(analysis, profile), float(tolerance))
        paper = compare_paper_claims(paper_claims_of(recomputed), paper_claims_of(analysis))
    same_profile = profile == meta.get("profile") == man.profile
    # "Reproduced" needs at least one tested claim: a bundle whose claims are all "not tested" has nothing to
    # reproduce (no badge). That is not a failure either: the exit status follows claims_changed (a claim whose
    # decision or ratio moved), so a bundle that verifies with every claim unchanged exits 0.
    changed = [f"{r['id']}/{r['phase']}" for r in results if not r["reproduced"]]
    reproduced = any(r["tested"] for r in results) and not changed
    status = rd.manifest().status
    return {
        "bundle": str(bundle), "files_verified": n_files, "integrity": "ok", "integrity_means": INTEGRITY_MEANS,
        "profile_original": meta.get("profile"), "profile_rerun": profile, "same_profile": same_profile,
        "rerun_dir": str(rd.path), "rerun_status": status, "tolerance": tolerance,
        "backend": backend, "code_ran": where_ran, "bundle_code": code,
        "study_code_notice": analysis.study_code.get("notice"),
        "integrity_only": False, "claims": results, "claims_reproduced": reproduced, "claims_changed": changed,
        "claims_tested": sum(1 for r in results if r["tested"]),
        "paper_claims": paper, "paper_verdicts_changed": [p["id"] for p in paper if p["changed"]],
        "paper_headline": (analysis.claims or {}).get("headline"),
        "badges": {
            "available": True,
            "functional": status == "complete",
            "results_reproduced": reproduced and same_profile,
        },
        "note": None if same_profile else (
            f"the re-run used profile {profile!r}, the claims come from {meta.get('profile')!r}: "
            "agreement is indicative, not a reproduction of the original protocol"),
    }
