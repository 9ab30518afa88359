"""Analyse one run directory with two checkouts of the kit and diff their analysis.json value by value.

    git worktree add /tmp/old-kit COMMIT
    python benchmarks/reanalyse_compare.py RUN_DIR /tmp/old-kit .

Used for issue 17 (docs/evidence/study-folders-2026-11-25.txt): each seed
study's quick-profile run analysed by the kit before and after its code moved
into the study folder. The same raw data on both sides isolates the change from
measurement noise. Each side works on its own copy of the run directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def analyse_with(kit_root: Path, run: Path, work: Path) -> dict[str, Any]:
    dst = work / "run"
    shutil.copytree(run, dst, symlinks=True)
    (dst / "analysis.json").unlink(missing_ok=True)
    root = str(kit_root.resolve())
    # Each checkout analyses with its own study code (its experiments/<id> folder, as `--study DIR` would), so a
    # study whose code changed between the two is compared old code against new code on the same raw data.
    experiment = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["experiment"]
    folder = kit_root.resolve() / "experiments" / experiment
    trust = (f"from kit.trust import StudyTrust; from pathlib import Path; t = StudyTrust(study_dir=Path({str(folder)!r}))"
             if (folder / "analysis.py").is_file() else "t = None")
    code = (f"import sys; sys.path.insert(0, {root!r}); import kit; assert kit.__file__.startswith({root!r}); "
            f"from kit.analysis.analyze import analyze_run; {trust}; analyze_run({str(dst)!r}, trust=t)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    if proc.returncode:
        sys.exit(f"{root}: {proc.stderr[-2000:]}")
    return json.loads((dst / "analysis.json").read_text(encoding="utf-8"))


def diff(a: Any, b: Any, path: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'old' if k in a else 'new'}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif (isinstance(a, list) and isinstance(b, list) and len(a) != len(b) and a and b
          and all(isinstance(x, dict) and "rule" in x for x in a + b)):  # threats: name the ones on one side only
        key = lambda t: (t["rule"], t["title"])  # noqa: E731
        only_old = [key(t) for t in a if key(t) not in {key(u) for u in b}]
        only_new = [key(t) for t in b if key(t) not in {key(u) for u in a}]
        out.append(f"{path}: {len(a)} threats old, {len(b)} new; only in old {only_old}; only in new {only_new}")
        common = [t for t in a if key(t) in {key(u) for u in b}]
        diff(common, [t for t in b if key(t) in {key(u) for u in a}], f"{path}(common)", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: {str(a)[:80]} != {str(b)[:80]}")


def decisions(a: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(h["id"], h["phase"], h.get("config_id"), (h.get("decision") or {}).get("text")
             if isinstance(h.get("decision"), dict) else h.get("decision")) for h in a["hypotheses"]]


def main() -> None:
    run, old_kit, new_kit = (Path(a) for a in sys.argv[1:4])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "old").mkdir()
        (Path(tmp) / "new").mkdir()
        old = analyse_with(old_kit, run, Path(tmp) / "old")
        new = analyse_with(new_kit, run, Path(tmp) / "new")
    found: list[str] = []
    # Left out of the comparison, by design different between two checkouts: the seal (an HMAC over the inputs and
    # the kit's own build, kit.freshness) and study_code (which folder and code digest each side ran).
    skip = ("seal", "study_code")
    diff({k: v for k, v in old.items() if k not in skip}, {k: v for k, v in new.items() if k not in skip}, "analysis",
         found)
    name = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["experiment"]
    print(f"{name}: {len(new['hypotheses'])} hypothesis rows, decisions identical: {decisions(old) == decisions(new)}; "
          f"extras keys old {sorted(old['extras'])} new {sorted(new['extras'])}; differing values: {len(found)}")
    for line in found[:40]:
        print("   ", line)


if __name__ == "__main__":
    main()
