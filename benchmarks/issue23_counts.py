"""The counts of issue 23 for one checkout of the kit: untyped record contracts, places that decide which values
count, import circles, NVML call sites, mypy errors, lines of runner.py and cli.py.

    git worktree add /tmp/before COMMIT
    python benchmarks/issue23_counts.py /tmp/before .

Every figure comes from a command anyone can run on the tree: grep-like scans of the source, the import-graph
code of tests/test_layers.py pointed at the checkout, and mypy with this checkout's [tool.mypy] configuration
(the older tree had none; the same configuration is applied to both).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))

from tests import test_layers  # noqa: E402

# An inline "does this trial/value count" test: a warm-up check and a status check written together.
COUNTS_RULE = re.compile(r"warmup.*status.*ok|status.*ok.*warmup|status\"\] != \"ok\" or .*warmup")


def py_files(root: Path, sub: str) -> list[Path]:
    return sorted((root / sub).rglob("*.py")) if (root / sub).is_dir() else []


def count(root: Path, sub: str, pattern: str | re.Pattern[str]) -> int:
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return sum(len(rx.findall(p.read_text(encoding="utf-8"))) for p in py_files(root, sub))


def count_lines(root: Path, sub: str, rx: re.Pattern[str]) -> int:
    n = 0
    for p in py_files(root, sub):
        n += sum(1 for line in p.read_text(encoding="utf-8").splitlines()
                 if rx.search(line) and not line.lstrip().startswith("#") and "``" not in line)
    return n


def circles(root: Path) -> list[list[str]]:
    test_layers.ROOT, test_layers.KIT = root, root / "kit"
    mods = test_layers.modules()
    graph, _ = test_layers.edges(mods)
    return test_layers.cycles(set(mods), graph)


def mypy_errors(root: Path) -> str:
    """mypy over root/kit with this checkout's configuration (copied into a scratch copy of the tree)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "tree"
        shutil.copytree(root / "kit", work / "kit", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(HERE / "pyproject.toml", work / "pyproject.toml")
        proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=work, capture_output=True, text=True)
    tail = (proc.stdout.strip().splitlines() or ["?"])[-1]
    stale = proc.stdout.count("[unused-ignore]")
    return f"{tail} ({stale} of them stale type: ignore)"


def main() -> None:
    for arg in sys.argv[1:]:
        root = Path(arg).resolve()
        rev = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h"], capture_output=True,
                             text=True).stdout.strip()
        print(f"== {root} ({rev})")
        untyped = r"dict\[str, Any\]"
        print(f"  dict[str, Any]: kit/ {count(root, 'kit', untyped)}, experiments/ {count(root, 'experiments', untyped)}")
        print(f"  places deciding which values count (inline warm-up + status tests): "
              f"kit/ {count_lines(root, 'kit', COUNTS_RULE)}, experiments/ {count_lines(root, 'experiments', COUNTS_RULE)}")
        found = circles(root)
        print(f"  import circles (every import, also inside functions): {len(found)}"
              + "".join(f"\n    {len(c)}: {', '.join(c)}" for c in found))
        nvml = [f"{p.relative_to(root)}" for p in py_files(root, "kit")
                for line in p.read_text(encoding="utf-8").splitlines() if re.search(r"\.nvmlInit\(\)", line)]
        print(f"  nvmlInit call sites: {len(nvml)} in {len(set(nvml))} module(s) ({', '.join(sorted(set(nvml)))})")
        print(f"  mypy over kit/: {mypy_errors(root)}")
        for f in ("kit/runner.py", "kit/cli.py"):  # packages since issue 40 (kit/run/, kit/cli/): absent there
            if (root / f).is_file():
                print(f"  lines of {f}: {len((root / f).read_text(encoding='utf-8').splitlines())}")


if __name__ == "__main__":
    main()
