"""kit.stats is pure statistics: its modules import nothing of the kit but kit.errors (issue 40, item 3).

Whatever reads a run, a file or the environment lives in kit.analysis and calls kit.stats, never the reverse:
checked over every import of every module (also those inside functions), parsed, not executed.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ("kit.errors",)


def foreign_imports(package: Path) -> list[str]:
    """'module: imported' for each import of the kit, other than kit.stats itself and kit.errors, under package."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    bad.append(f"{path.name}: relative import")
                    continue
                base = node.module or ""
                names = [f"{base}.{a.name}" if base == "kit" else base for a in node.names]
            else:
                continue
            for name in names:
                inside = name == "kit.stats" or name.startswith("kit.stats.")
                if (name == "kit" or name.startswith("kit.")) and not inside and not name.startswith(ALLOWED):
                    bad.append(f"{path.relative_to(package.parent)}: {name}")
    return bad


def test_kit_stats_imports_nothing_of_the_kit_but_errors() -> None:
    assert (ROOT / "kit" / "stats" / "__init__.py").is_file()
    assert foreign_imports(ROOT / "kit" / "stats") == []


def test_the_check_fails_on_a_planted_import(tmp_path: Path) -> None:
    copy = tmp_path / "stats"
    shutil.copytree(ROOT / "kit" / "stats", copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "multiplicity.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n\ndef _late() -> None:\n    from kit.manifest import x  # noqa\n",
                      encoding="utf-8")
    (copy / "planted.py").write_text("from kit import store\n", encoding="utf-8")
    found = foreign_imports(copy)
    assert found == ["stats/multiplicity.py: kit.manifest", "stats/planted.py: kit.store"], found
