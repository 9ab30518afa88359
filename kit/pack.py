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
RUN_EXCLUDE = {"work", ".lock"}


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


def _copy_run(rd: RunDir, dest: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if n in RUN_EXCLUDE or n.startswith(".lock")} if Path(directory) == rd.path else set()

    shutil.copytree(rd.path, dest, ignore=ignore)


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
    if not (rd.path / ANALYSIS).exists():
        from kit.analysis.analyze import analyze_run

        analyze_run(rd.path)
    analysis = json.loads((rd.path / ANALYSIS).read_text(encoding="utf-8"))
    out = Path(out) if out else rd.path.parent / f"{rd.path.name}.bundle"
    if out.exists():
        raise StoreError("bundle directory already exists", where=str(out), fix="remove it or pass --out elsewhere")
    out.mkdir(parents=True)
    _copy_run(rd, out / "run")
    spec_src = man.get("spec_source", {})
    spec_name = Path(spec_src.get("path") or f"{man['experiment']}.toml").name
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
    tgz = out.parent / f"{out.name}.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    return tgz


def write_sums(root: Path) -> None:
    lines = [f"{sha256(p)}  {p.relative_to(root).as_posix()}" for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != SUMS]
    (root / SUMS).write_text("\n".join(lines) + "\n", encoding="utf-8")


def check_integrity(root: Path) -> int:
    """Raise IntegrityError listing every changed, missing or extra file; return the file count."""
    sums_path = root / SUMS
    if not sums_path.exists():
        raise IntegrityError("SHA256SUMS missing", where=str(root), fix="re-download the bundle; it is incomplete")
    expected = {}
    for line in sums_path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        expected[name] = digest
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != SUMS}
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


def _open_bundle(bundle: Path, tmp: Path) -> Path:
    if bundle.is_dir():
        return bundle
    if bundle.is_file() and bundle.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(bundle) as tar:
            tar.extractall(tmp, filter="data")
        dirs = [p for p in tmp.iterdir() if p.is_dir()]
        if len(dirs) == 1:
            return dirs[0]
    raise StoreError("not a bundle", where=str(bundle), fix="give the .tar.gz or the directory that `kit pack` made")


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
        meta = json.loads((root / "claims.json").read_text(encoding="utf-8"))
        profile = opts.profile or meta.get("profile") or "paper"
        tolerance = opts.tolerance if opts.tolerance is not None else float(meta.get("tolerance", 0.10))
        spec = load_spec(root / meta["spec"], None if profile == "paper" else profile)
        runs_root = opts.runs_root or (Path(bundle).parent / "verify-runs")
        rd = start_run(spec, RunOptions(runs_root=runs_root, backend=opts.backend, data_dir=opts.data_dir), events)
        analysis = analyze_run(rd.path)
        from kit.report import write_report

        write_report(rd.path, analysis, ("html",))
        new_claims = claims_of(analysis, profile)
        results = compare_claims(meta["claims"], new_claims, tolerance)
    same_profile = profile == meta.get("profile")
    reproduced = all(r["reproduced"] for r in results)
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
